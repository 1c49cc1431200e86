"""Checkpoints, resume, preemption, restarts, evaluation, plotting."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import (CFG, SMALL, _env, _workers_of, max_rel_diff, params_of, run_launcher,
                     start_training, summaries, train_cli)
from jaxrl_dist.checkpoint import read_checkpoint

# Long enough (300 updates) to be stopped in the middle.
LONGER = [a if a != "total_timesteps=2560" else "total_timesteps=38400" for a in SMALL]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted 1-process x 2-device run of SMALL."""
    run = tmp_path_factory.mktemp("ref") / "run"
    proc, summary = train_cli(run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run, summary


def test_checkpoints_hold_the_whole_run_state(reference):
    run, summary = reference
    steps = sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert steps == [10, 15, 20]  # keep_checkpoints=3 of 0, 5, 10, 15, 20
    state, meta = read_checkpoint(run / "checkpoints")
    assert meta["updates"] == 20 and meta["config"]["num_envs"] == 4
    assert set(state["train"]) == {"params", "opt_state", "obs_moments", "value_moments", "key",
                                  "update", "hparams"}  # hparams: swept values, {} without a sweep
    assert state["actors"]["env"]["obs"].shape == (4, 4)  # every environment's last obs
    assert meta["policy"]["algo"] == "ppo" and meta["policy"]["env"]["obs_shape"] == [4]
    assert int(state["train"]["update"]) == 20


def test_exact_resume_after_kill_9(reference, tmp_path):
    _, ref = reference
    run = tmp_path / "run"
    proc, _ = train_cli(run, JAXRL_FAULT="kill@0:12")  # SIGKILL after update 15, before save
    assert proc.returncode == -9
    _, meta = read_checkpoint(run / "checkpoints")
    assert meta["updates"] in (5, 10)  # 10 may still have been in flight (async save)
    proc, resumed = train_cli(run, "--resume")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert resumed["env_steps"] == ref["env_steps"]
    assert resumed["param_fingerprint"] == ref["param_fingerprint"]  # bit-identical
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["updates"] for r in rows] == [5, 10, 15, 20]  # no duplicated rows after resume
    assert f"resuming at {meta['updates']}" in proc.stderr


@pytest.mark.slow
def test_resume_on_another_topology(reference, tmp_path):
    ref_run, ref = reference
    run = tmp_path / "run"
    proc, _ = train_cli(run, JAXRL_FAULT="kill@0:12")
    assert proc.returncode == -9
    proc, resumed = train_cli(run, "--resume", devices=4)  # saved on 2 devices, resumed on 4
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert resumed["env_steps"] == ref["env_steps"]
    assert max_rel_diff(params_of(run)[0], params_of(ref_run)[0]) <= 1e-4


def test_resume_with_another_updates_per_call(reference, tmp_path):
    """Saved at update 15 of a 5-per-call run, resumed 10 per call: the last call (5 updates)
    is off the new grid and must still run (it was a KeyError traceback)."""
    ref_run, ref = reference
    run = tmp_path / "run"
    shutil.copytree(ref_run, run)
    shutil.rmtree(run / "checkpoints" / "20")
    (run / "summary.json").unlink()
    proc, resumed = train_cli(run, "--resume", "--set", "updates_per_call=10")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resuming at 15" in proc.stderr
    assert resumed["env_steps"] == ref["env_steps"]
    assert max_rel_diff(params_of(run)[0], params_of(ref_run)[0]) <= 1e-5


def test_crash_during_save_falls_back_to_previous_checkpoint(reference, tmp_path):
    _, ref = reference
    run = tmp_path / "run"
    proc, _ = train_cli(run, JAXRL_FAULT="kill@0:12")
    assert proc.returncode == -9
    _, meta = read_checkpoint(run / "checkpoints")
    # What a crash in the middle of saving step 15 leaves: orbax's unfinished temporary dir.
    partial = run / "checkpoints" / "15.orbax-checkpoint-tmp-1234567"
    shutil.copytree(run / "checkpoints" / str(meta["updates"]), partial)
    for junk in partial.rglob("commit_success.txt"):
        junk.unlink()
    (partial / "state" / "manifest.ocdbt").write_bytes(b"\x00garbage")
    proc, resumed = train_cli(run, "--resume")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resuming at {meta['updates']}" in proc.stderr
    assert resumed["param_fingerprint"] == ref["param_fingerprint"]


def _one_line_error(proc, *words):
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)


def _snapshot(path):
    return {p: p.read_bytes() for p in sorted(Path(path).rglob("*")) if p.is_file()}


def test_incompatible_config_is_refused_and_nothing_changes(reference, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(reference[0], run)
    before = _snapshot(run)
    proc, _ = train_cli(run, "--resume", "--set", "ppo.learning_rate=1e-3")
    _one_line_error(proc, "ppo.learning_rate", "checkpoint was trained with 0.00025")
    assert _snapshot(run) == before


def test_corrupt_checkpoint_is_a_clear_error(reference, tmp_path):
    """Every checkpoint corrupt: one line naming each, nothing changed (one damaged among
    intact ones is skipped: tests/test_checkpoint_integrity.py)."""
    run = tmp_path / "run"
    shutil.copytree(reference[0], run)
    for step in ("10", "15", "20"):
        for f in (run / "checkpoints" / step / "state").rglob("*"):
            if f.is_file() and f.parent.name == "d":
                f.write_bytes(b"\x00" * 7)
        (run / "checkpoints" / step / "state" / "manifest.ocdbt").write_bytes(b"\x00" * 7)
    before = _snapshot(run)
    proc, _ = train_cli(run, "--resume")
    _one_line_error(proc, "no intact checkpoint", "20 unreadable", "15 unreadable",
                    "10 unreadable", "nothing was changed")
    assert _snapshot(run) == before


def test_resume_without_a_checkpoint_starts_the_run_and_says_so(reference, tmp_path):
    """A requeued job passes --resume before its first checkpoint as after it: a run dir with
    no complete checkpoint (an attempt killed before its first save finished: a tmp dir and
    metrics rows, one torn) trains from update 0 and says so; the attempt's rows are dropped."""
    _, ref = reference
    run = tmp_path / "run"
    (run / "checkpoints" / "0.orbax-checkpoint-tmp-1700000000000000").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"env_steps": 640, "updates": 5}\n{"env_st')
    proc, summary = train_cli(run, "--resume")
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [x for x in proc.stderr.splitlines() if x.startswith("--resume:")]
    assert len(said) == 1 and "holds no complete checkpoint" in said[0], proc.stderr[-3000:]
    assert "starting the run from update 0" in said[0] and "resuming at" not in proc.stderr
    assert summary["status"] == "completed"
    assert summary["param_fingerprint"] == ref["param_fingerprint"]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["updates"] for r in rows] == [5, 10, 15, 20] and all("sps" in r for r in rows)
    assert all(p.name.isdigit() for p in (run / "checkpoints").iterdir())

    proc, summary = train_cli(tmp_path / "new", "--resume")   # nor any run dir yet
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "does not exist yet" in proc.stderr and summary["status"] == "completed"
    assert summary["param_fingerprint"] == ref["param_fingerprint"]


def test_resume_needs_a_run_dir_that_is_a_directory(tmp_path):
    (tmp_path / "file").write_text("")
    proc, _ = train_cli(tmp_path / "file", "--resume")
    _one_line_error(proc, "is not a directory")
    assert (tmp_path / "file").read_text() == ""


def test_crafted_pickle_and_yaml_tags_are_never_executed(reference, tmp_path):
    import pickle

    run = tmp_path / "run"
    shutil.copytree(reference[0], run)
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    payload = pickle.dumps(Evil())
    # a pickle where metadata, checkpoint files and run files are read, in every checkpoint (so
    # none is intact: one line, exit 2, nothing moved aside or executed)
    for step in ("10", "15", "20"):
        (run / "checkpoints" / step / "meta" / "metadata").write_bytes(payload)
        (run / "checkpoints" / step / "_CHECKPOINT_METADATA").write_bytes(payload)
    for name in ("summary.json", "state.pkl", "params.pkl"):
        (run / name).write_bytes(payload)
    (run / "config.yaml").write_text(f"env: !!python/object/apply:os.system ['touch {marker}']\n")
    proc, _ = train_cli(run, "--resume")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "no intact checkpoint" in proc.stderr, proc.stderr[-2000:]
    assert not (run / "checkpoints_set_aside").exists()
    proc = subprocess.run([sys.executable, "-m", "jaxrl_dist.train", str(run / "config.yaml"),
                           "--resume", "--run-dir", str(run)], env=_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "not valid YAML" in proc.stderr
    assert not marker.exists()


def test_plot_writes_a_png(reference, tmp_path):
    from jaxrl_dist import plot

    out = tmp_path / "p.png"
    assert plot.main([str(reference[0]), str(reference[0]), "-o", str(out)]) == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert plot.main([str(tmp_path)]) == 2


def test_early_stop_at_target_return(tmp_path):
    proc, summary = train_cli(tmp_path / "run", "--set", "target_return=15",
                              args=LONGER)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary["status"] == "solved" and summary["eval_return"] >= 15
    assert summary["env_steps"] < 38400 and summary["solved_at_env_steps"] == summary[
        "env_steps"]


# ------------------------------------------------------------------------------------------------
# Multi-process: coordinated preemption, restarts, eval agreement


@pytest.fixture(scope="module")
def mp_reference(tmp_path_factory):
    """An uninterrupted 2-process x 2-device run of SMALL through the launcher."""
    run = tmp_path_factory.mktemp("mpref") / "run"
    proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "2", CFG, *SMALL,
                         "--run-dir", str(run)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run, summaries(run / "logs")


@pytest.mark.slow
def test_eval_metrics_identical_on_every_process(mp_reference):
    _, ranks = mp_reference
    assert ranks[0]["eval_return"] is not None
    assert ranks[0]["eval_return"] == ranks[1]["eval_return"]
    assert ranks[0]["param_fingerprint"] == ranks[1]["param_fingerprint"]


@pytest.mark.timeout(400)
@pytest.mark.slow
def test_max_restarts_recovers_from_an_injected_failure(mp_reference, tmp_path):
    _, ref = mp_reference
    run = tmp_path / "run"
    proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "2",
                         "--max-restarts", "1", CFG, *SMALL, "--run-dir", str(run)],
                        timeout=300, JAXRL_FAULT="raise@1:12",
                        JAXRL_FAULT_ONCE=str(tmp_path / "fired"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "injected fault on rank 1" in proc.stderr and "restarting all local workers" in \
        proc.stderr
    ranks = summaries(run / "logs")
    assert ranks[0]["param_fingerprint"] == ranks[1]["param_fingerprint"] == ref[0][
        "param_fingerprint"]


@pytest.mark.timeout(400)
@pytest.mark.slow
def test_sigterm_saves_at_an_agreed_update_and_resumes(mp_reference, tmp_path):
    run = tmp_path / "run"
    launcher = start_training(run, LONGER)
    try:
        sent = time.monotonic()
        launcher.send_signal(signal.SIGTERM)
        _, err = launcher.communicate(timeout=30)
        elapsed = time.monotonic() - sent
    finally:
        launcher.kill()
    assert launcher.returncode == 75, err[-3000:]
    # within a scheduler's grace period (Kubernetes' default 30 s, SLURM's KillWait 30 s) with
    # room to spare (10.2 s seen here with the other test worker and a pip install busy on the
    # 2 cores)
    assert elapsed < 20
    stopped = summaries(run / "logs")
    assert stopped[0]["status"] == stopped[1]["status"] == "preempted"
    assert stopped[0]["env_steps"] == stopped[1]["env_steps"]  # the same update everywhere
    assert stopped[0]["param_fingerprint"] == stopped[1]["param_fingerprint"]
    _, meta = read_checkpoint(run / "checkpoints")
    assert meta["updates"] * 128 == stopped[0]["env_steps"] < 38400  # saved where they stopped
    assert _workers_of(str(run)) == {}
    # ... and resume on another topology (1 process x 4 devices) to the end (the ~290 updates
    # left without the periodic checkpoints and evaluations: a resume may change those)
    proc, resumed = train_cli(run, "--resume", devices=4, args=[
        *LONGER, "--set", "checkpoint_every=0", "--set", "eval_every=0"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resuming at {meta['updates']}" in proc.stderr
    assert resumed["env_steps"] == 38400 and resumed["status"] == "completed"


def test_zero_size_arrays_are_checkpointed_and_restored(tmp_path):
    """orbax refuses zero-size arrays, which MJX physics states hold (a Playground run failed
    at its first checkpoint): they are left out of the files and come back from the target."""
    import jax.numpy as jnp
    from jaxrl_dist.checkpoint import Checkpointer
    from jaxrl_dist.types import RunState
    state = RunState(train={"a": jnp.arange(3.0), "act": jnp.zeros((4, 0))},
                     actors={"n": {"c": jnp.zeros((0,), int)}, "b": jnp.ones(2)}, data=())
    ckpt = Checkpointer(tmp_path / "ckpt")
    ckpt.save(state, {"updates": 7})
    restored, meta = ckpt.restore(state._replace(train={**state.train, "a": jnp.zeros(3)}))
    ckpt.close()
    assert meta["updates"] == 7 and np.array_equal(restored.train["a"], [0.0, 1.0, 2.0])
    assert restored.train["act"].shape == (4, 0) and restored.actors["n"]["c"].shape == (0,)
    saved, _ = read_checkpoint(tmp_path / "ckpt")
    assert np.array_equal(saved["train"]["a"], [0.0, 1.0, 2.0])


def test_a_checkpoint_older_than_a_config_key_resumes(reference, tmp_path):
    """A checkpoint written before ``ppo.grad_clip`` and ``network.init`` existed: the missing
    keys take their defaults, so it resumes (and ends where the uninterrupted run did); and
    one from when ``replicate_learn`` defaulted to false (now null, auto: decided anew on the
    resumed topology, like the device count)."""
    ref_run, ref = reference
    run = tmp_path / "run"
    shutil.copytree(ref_run, run)
    shutil.rmtree(run / "checkpoints" / "20")
    (run / "summary.json").unlink()
    (meta_file,) = [f for f in (run / "checkpoints" / "15").rglob("*")
                    if f.is_file() and b'"grad_clip"' in f.read_bytes()]
    meta = json.loads(meta_file.read_text())
    del meta["config"]["ppo"]["grad_clip"], meta["config"]["ppo"]["network"]["init"]
    assert meta["config"]["replicate_learn"] is None
    meta["config"]["replicate_learn"] = False
    del meta["digest"]   # as old, it has no digest either (an edited record would not match it)
    del meta["format"]   # nor a format record (one with it and no digest is damaged)
    meta_file.write_text(json.dumps(meta))
    proc, resumed = train_cli(run, "--resume")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resuming at 15" in proc.stderr
    assert max_rel_diff(params_of(run)[0], params_of(ref_run)[0]) <= 1e-5
