"""Weights & Biases from process 0, without a network: offline runs read back from their own
``.wandb`` file, resume into the same W&B run, one-line errors at start-up, and a W&B that
fails mid-run never ends training."""

import json
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

from helpers import CFG, _env, run_launcher
from jaxrl_dist import faults, reporting, tracking
from jaxrl_dist.config import WandbConfig

# 30 updates of 4 envs x 32 steps in calls of 5, a checkpoint every 10: 6 metrics rows.
ARGS = ["--set", "num_envs=4", "--set", "num_steps=32", "--set", "updates_per_call=5",
        "--set", "total_timesteps=3840", "--set", "ppo.num_minibatches=2",
        "--set", "checkpoint_every=10", "--set", "eval_episodes=4"]
BATCH = 4 * 32


def _wandb_env(tmp_path: Path) -> dict:
    """wandb's own settings, cache and credentials under the test's directory: no login."""
    home = tmp_path / "wandb_home"
    return dict(WANDB_CONFIG_DIR=str(home / "config"), WANDB_CACHE_DIR=str(home / "cache"),
                WANDB_DATA_DIR=str(home / "data"), HOME=str(home), WANDB_API_KEY="",
                NETRC=str(home / "netrc"))


# ---------------------------------------------------------------------- the .wandb file

BLOCK = 32 * 1024   # LevelDB log blocks; a record's header: checksum u32, length u16, type u8
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def wandb_records(path: Path) -> list:
    """The ``Record`` protos of a wandb offline run file: a 7-byte file header, then LevelDB
    log records in 32 KiB blocks (wandb checksums each with zlib's CRC-32 of its type byte and
    data), a record split FIRST/MIDDLE/LAST across blocks, a block's tail under 7 bytes zero
    padding."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    records, pending, pos = [], None, 7
    while pos < len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:
            assert data[pos:pos + left] == b"\0" * left
            pos += left
            continue
        checksum, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:   # zero padding up to the block's end
            pos += left
            continue
        payload = data[pos + 7:pos + 7 + length]
        assert len(payload) == length and zlib.crc32(bytes([kind]) + payload) == checksum, pos
        pos += 7 + length
        if kind == FULL:
            records.append(payload)
        elif kind == FIRST:
            pending = payload
        elif kind == MIDDLE:
            pending += payload
        elif kind == LAST:
            records.append(pending + payload)
            pending = None
        else:
            raise AssertionError(f"record type {kind} at byte {pos}")
    return [wandb_internal_pb2.Record.FromString(raw) for raw in records]


def offline_run(directory: Path) -> dict:
    """What one offline run directory holds: its id, config, history rows and exit code."""
    (path,) = directory.glob("run-*.wandb")
    out = {"id": None, "config": {}, "history": [], "exit_code": None, "summary": {}}
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["id"] = record.run.run_id
            out["config"] = {i.key: json.loads(i.value_json) for i in record.run.config.update}
        elif kind == "history":
            row = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
                   for i in record.history.item}
            assert row["_step"] == record.history.step.num
            out["history"].append(row)
        elif kind == "summary":
            out["summary"].update({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                                   for i in record.summary.update})
        elif kind == "exit":
            out["exit_code"] = record.exit.exit_code
    return out


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _mirrors(history: list[dict], rows: list[dict]) -> None:
    """Each W&B step is its metrics.jsonl row: the step in env steps, every non-null value."""
    assert [h["_step"] for h in history] == [r["env_steps"] for r in rows]
    for h, r in zip(history, rows):
        assert {k: v for k, v in r.items() if v is not None} == pytest.approx(
            {k: h[k] for k in r if r[k] is not None}), (h, r)


# ---------------------------------------------------------------------- end to end

@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_processes_log_one_offline_run_that_fails_closed_and_resumes(tmp_path):
    """Rank 0 alone opens the W&B run; a failure closes it with exit code 1; --resume writes
    into the same run id, and the two attempts' steps together are metrics.jsonl's rows."""
    pytest.importorskip("wandb")
    run = tmp_path / "run"
    launch = ["--nproc-per-node", "2", "--cpu-devices-per-proc", "1", CFG, *ARGS,
              "--set", "wandb.mode=offline", "--set", "wandb.tags=[test]",
              "--run-dir", str(run)]
    failed = run_launcher(launch, timeout=300, JAXRL_FAULT="raise@0:15", **_wandb_env(tmp_path))
    assert failed.returncode == 1, failed.stderr[-3000:]
    (first,) = sorted((run / "wandb").glob("offline-run-*"))   # ONE W&B run: rank 0's
    before = _rows(run)
    attempt = offline_run(first)
    assert attempt["id"] == (run / "wandb_id").read_text().strip()
    assert first.name.endswith(attempt["id"])
    assert attempt["config"]["env"] == "CartPole-v1"
    assert attempt["config"]["wandb"]["mode"] == "offline"
    assert attempt["exit_code"] == 1
    _mirrors(attempt["history"], before)

    done = run_launcher([*launch, "--resume"], timeout=300, **_wandb_env(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _rows(run)
    assert [r["env_steps"] for r in rows] == [BATCH * 5 * k for k in range(1, 7)]
    dirs = sorted((run / "wandb").glob("offline-run-*"))
    assert len(dirs) == 2 and dirs[0] == first
    resumed = offline_run(dirs[1])
    assert resumed["id"] == attempt["id"]               # the same W&B run
    logged_before = before[-1]["env_steps"] if before else -1
    _mirrors(resumed["history"], [r for r in rows if r["env_steps"] > logged_before])
    assert resumed["exit_code"] == 0
    assert resumed["summary"]["status"] == "completed"
    assert resumed["summary"]["env_steps"] == 3840


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_disabled_imports_no_wandb_and_offline_leaves_training_unchanged(tmp_path):
    """The default never imports wandb (start-up unchanged); an offline run through the
    Python API mirrors every row and trains the same parameters."""
    pytest.importorskip("wandb")
    script = textwrap.dedent(f"""
        import json, sys
        import jax
        from jaxrl_dist import config as config_lib
        from jaxrl_dist.trainer import train
        args = {ARGS[1::2]!r}
        plain = train(config_lib.load({CFG!r}, args), {str(tmp_path / "plain")!r},
                      devices=jax.devices()[:1], progress=False)
        imported = "wandb" in sys.modules
        logged = train(config_lib.load({CFG!r}, args + ["wandb.mode=offline"]),
                       {str(tmp_path / "logged")!r}, devices=jax.devices()[:1], progress=False)
        print(json.dumps([imported, plain["param_fingerprint"], logged["param_fingerprint"]]))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=360, env=_env(**_wandb_env(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported, plain, logged = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not imported and plain == logged
    assert not (tmp_path / "plain" / "wandb").exists()
    assert not (tmp_path / "plain" / tracking.ID_FILE).exists()
    (directory,) = (tmp_path / "logged" / "wandb").glob("offline-run-*")
    found = offline_run(directory)
    _mirrors(found["history"], _rows(tmp_path / "logged"))
    assert found["exit_code"] == 0 and found["summary"]["param_fingerprint"] == logged


# ---------------------------------------------------------------------- one line at start-up

def _cli(tmp_path, *args, **env):
    return subprocess.run([sys.executable, "-m", "jaxrl_dist.train", CFG, *ARGS,
                           "--cpu-devices", "1", "--run-dir", str(tmp_path / "run"),
                           "--no-progress", *args],
                          env=_env(**_wandb_env(tmp_path), **env), capture_output=True,
                          text=True, timeout=120)


def _one_line(proc) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    return lines[0]


@pytest.mark.timeout(150)
def test_missing_wandb_is_one_line_before_anything_is_written(tmp_path):
    hidden = tmp_path / "hide" / "wandb"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError(\"No module named 'wandb'\")\n")
    line = _one_line(_cli(tmp_path, "--set", "wandb.mode=offline",
                          PYTHONPATH=str(tmp_path / "hide")))
    assert "wandb cannot be imported" in line and ".[wandb]" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(150)
def test_online_without_a_login_is_one_line_and_leaves_no_run(tmp_path):
    pytest.importorskip("wandb")
    line = _one_line(_cli(tmp_path, "--set", "wandb.mode=online"))
    assert "wandb.init (online) failed" in line and "wandb login" in line
    run = tmp_path / "run"
    assert not any((run / name).exists() for name in
                   ("checkpoints", "metrics.jsonl", "summary.json", tracking.ID_FILE))


def test_a_bad_wandb_mode_is_one_line(capsys):
    from jaxrl_dist import train as train_cli

    assert train_cli.main([CFG, "--set", "wandb.mode=onlin"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: wandb.mode must be one of disabled, offline, online, got 'onlin'")


# ---------------------------------------------------------------------- failures mid-run

class FlakyRun:
    """A stand-in W&B run whose ``log`` fails from its second call on."""

    def __init__(self):
        self.logged, self.finished = [], []
        self.summary = {}

    def log(self, data, step):
        if self.logged:
            raise ConnectionError("wandb-core went away\nstack...")
        self.logged.append((step, data))

    def finish(self, exit_code):
        self.finished.append(exit_code)


def test_a_wandb_failure_mid_run_is_one_warning_and_logging_goes_on(tmp_path, capsys):
    run = FlakyRun()
    reporter = reporting.RunReporter(tmp_path, 100, progress=False,
                                     tracker=tracking.Tracker(run))
    reporter.start({})
    for step in (10, 20, 30):
        reporter.log({"env_steps": step, "loss": 0.5, "episode_return": None})
    reporter.finish({"status": "completed"})
    assert [json.loads(line)["env_steps"]
            for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [10, 20, 30]
    assert run.logged == [(10, {"env_steps": 10, "loss": 0.5})]   # nulls left out
    assert run.finished == []                                     # dropped, not finished
    assert capsys.readouterr().err.strip().splitlines() == [
        "W&B logging failed (wandb-core went away); training goes on without W&B "
        "(metrics.jsonl has every row)"]
    assert (tmp_path / "summary.json").exists()


def test_finish_records_the_exit_code_of_each_ending(tmp_path):
    """completed 0, diverged 65, preempted 75 (marked preempting), a failure its own code;
    finishing twice closes once."""
    class Run(FlakyRun):
        def mark_preempting(self):
            self.finished.append("preempting")

    for status, expected in (("completed", [0]), ("diverged", [65]),
                             ("preempted", ["preempting", 75])):
        run = Run()
        reporter = reporting.RunReporter(tmp_path / status, 100, progress=False,
                                         tracker=tracking.Tracker(run))
        reporter.start({})
        reporter.finish({"status": status, "eval_return": 1.5})
        reporter.fail(1)
        assert run.finished == expected and run.summary["eval_return"] == 1.5
    run = Run()
    with pytest.raises(OSError):
        with tracking.finished_on_error(tracking.Tracker(run)):
            raise OSError("disk")
    assert run.finished == [1]
    assert [tracking.exit_code(e) for e in (faults.StorageError("full"), SystemExit(75),
                                            RuntimeError("bug"))] == [74, 75, 1]


def test_resume_skips_the_rows_wandb_already_holds(tmp_path):
    """metrics.jsonl's last row before the resume is the last W&B step: rows redone after the
    checkpoint are not sent twice (a W&B run's steps only increase)."""
    metrics = tmp_path / "metrics.jsonl"
    assert tracking.logged_through(metrics) == -1
    metrics.write_text('{"env_steps": 640}\n{"env_steps": 1280}\n{"env_ste')   # torn last line
    assert tracking.logged_through(metrics) == 1280
    run = FlakyRun()
    tracker = tracking.Tracker(run, skip_through=1280)
    assert tracker.log({"env_steps": 1280, "loss": 1.0}) is None and run.logged == []
    tracker.log({"env_steps": 1920, "loss": 1.0})
    assert run.logged == [(1920, {"env_steps": 1920, "loss": 1.0})]


def test_a_population_is_one_step_with_each_member_and_the_spread(tmp_path):
    run = FlakyRun()
    reporter = reporting.RunReporter(tmp_path, 100, progress=False, member_runs=0,
                                     tracker=tracking.Tracker(run))
    reporter.start({})
    head = {"env_steps": 64, "updates": 1, "sps": 5.0, "time_s": 2.0}
    reporter.log_population([{**head, "member": 0, "loss": 1.0, "episode_return": None},
                             {**head, "member": 1, "loss": 3.0, "episode_return": 7.0}])
    ((step, data),) = run.logged
    assert step == 64 and data == {
        "env_steps": 64, "updates": 1, "sps": 5.0, "time_s": 2.0,
        "member/000/loss": 1.0, "member/001/loss": 3.0, "member/001/episode_return": 7.0,
        "population/loss/mean": 2.0, "population/loss/min": 1.0, "population/loss/max": 3.0,
        "population/episode_return/mean": 7.0, "population/episode_return/min": 7.0,
        "population/episode_return/max": 7.0}


def test_disabled_opens_nothing(tmp_path):
    tracking.check(WandbConfig())
    assert tracking.start(WandbConfig(), {}, tmp_path / "run", resume=False) is None
    assert not (tmp_path / "run").exists()


def test_wandb_settings_may_change_on_resume():
    """W&B is bookkeeping: a run trained without it resumes with it (and the other way)."""
    from jaxrl_dist import config as config_lib
    from jaxrl_dist.checkpoint import CheckpointError, check_compatible

    saved = config_lib.to_dict(config_lib.load(CFG))
    check_compatible(saved, config_lib.to_dict(config_lib.load(
        CFG, ["wandb.mode=offline", "wandb.project=p", "wandb.tags=[a]"])))
    with pytest.raises(CheckpointError, match="'seed'"):
        check_compatible(saved, config_lib.to_dict(config_lib.load(CFG, ["seed=9"])))
