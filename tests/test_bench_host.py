"""bench host's bookkeeping across sittings (no training: run directories are written here)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from benches.host import _claim, _result, _seed_dir, _table


def _run(tmp_path, status, evals=((25, 10.0), (50, 20.0)), final=21.5):
    run_dir = _seed_dir(tmp_path, "configs/mujoco_halfcheetah_sac.yaml", 3)
    run_dir.mkdir(parents=True)
    rows = [{"env_steps": s, "sps": 1.0} for s in (10, 20)]
    rows += [{"env_steps": s, "eval/return_mean": r} for s, r in evals]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "summary.json").write_text(json.dumps({
        "status": status, "eval_return": final if status != "preempted" else None,
        "sps": 40.0, "env_steps": 50, "solved_return": 4800.0, "param_fingerprint": "ab"}))
    return run_dir


def test_a_finished_run_gives_its_final_evaluation_and_curve(tmp_path):
    result = _result(_run(tmp_path, "completed"))
    assert result["final_eval"] == 21.5 and not result["failed"]
    assert result["eval_curve"] == [[25, 10.0], [50, 20.0]]


def test_a_preempted_run_is_not_a_result_and_a_diverged_one_failed(tmp_path):
    assert _result(_run(tmp_path / "a", "preempted")) is None      # resumed next sitting
    assert _result(_run(tmp_path / "b", "diverged"))["failed"]
    assert _result(tmp_path / "nothing") is None


def test_a_run_directory_serves_one_measurement(tmp_path):
    run_dir = _seed_dir(tmp_path, "configs/x.yaml", 0)
    _claim(run_dir, "configs/x.yaml", ["total_timesteps=300000"], 0)
    _claim(run_dir, "configs/x.yaml", ["total_timesteps=300000"], 0)   # the same: resumed
    with pytest.raises(SystemExit, match="holds a run of .*pass another --work"):
        _claim(run_dir, "configs/x.yaml", ["total_timesteps=1000"], 0)


def test_the_table_reports_seeds_ci_curve_and_what_is_pending(tmp_path):
    args = SimpleNamespace(config="configs/mujoco_halfcheetah_sac.yaml", set=[])
    rows = [{"seed": s, "final_eval": f, "sps": 40.0, "status": "completed",
             "eval_curve": [[25, f / 2], [50, f]]} for s, f in ((0, 6000.0), (1, 5000.0))]
    md = _table(args, rows, pending=[2])
    assert "| 2 | 5500.0 [" in md and "0: 6000.0, 1: 5000.0" in md
    assert "| mean | 2750 | 5500 |" in md and "seeds [2]" in md


def _no_training(monkeypatch):
    import benches.host

    def start(*_a, **_k):
        raise AssertionError("bench host started a training run")
    monkeypatch.setattr(benches.host, "_start", start)


def test_recorded_seeds_survive_a_lost_work_directory(tmp_path, monkeypatch):
    """A seed in host_seeds.jsonl (committed) is not trained again when --work is gone (a fresh
    machine); rows of other seeds and overrides in the file are kept."""
    from benches.host import bench_host
    _no_training(monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    config = "configs/mujoco_halfcheetah_sac.yaml"
    mine = [{"config": config, "sets": ["total_timesteps=300000"], "seed": s,
             "final_eval": 6000.0 + s, "sps": 40.0, "status": "completed",
             "eval_curve": [[300000, 6000.0 + s]], "failed": False} for s in (0, 1)]
    other = {**mine[0], "sets": ["total_timesteps=1000000"], "final_eval": 9000.0}
    (out / "host_seeds.jsonl").write_text("".join(json.dumps(r) + "\n"
                                                  for r in [other, *mine]))
    args = SimpleNamespace(out=str(out), work=str(tmp_path / "gone"), parallel=1, pin=False,
                           cores=None, seeds=[0, 1], config=config,
                           set=["total_timesteps=300000"], timeout=10, devices=1, train=None)
    rows, md = bench_host(args)                       # nothing to train: no process started
    assert [r["final_eval"] for r in rows] == [6000.0, 6001.0]
    assert "| 2 | 6000.5 [" in md and "Trained on: seeds [0, 1]: not recorded" in md
    kept = [json.loads(line) for line in (out / "host_seeds.jsonl").read_text().splitlines()]
    assert kept == [other, *mine]


def test_train_picks_seeds_and_the_table_still_covers_every_seed(tmp_path, monkeypatch):
    """--train []: nothing trains, what is recorded or finished is tabulated, the rest pending;
    a seed another command finished in the shared --work counts."""
    from benches.host import bench_host
    _no_training(monkeypatch)
    config = "configs/mujoco_halfcheetah_sac.yaml"
    _run(tmp_path / "work", "completed")            # seed 3 finished in --work
    args = SimpleNamespace(out=str(tmp_path / "out"), work=str(tmp_path / "work"), parallel=1,
                           pin=False, cores=None, seeds=[3, 4], config=config, set=[],
                           timeout=10, devices=1, train=[])
    rows, md = bench_host(args)
    assert [r["seed"] for r in rows] == [3] and "seeds [4]" in md
    with pytest.raises(SystemExit, match="--train \\[5\\] names seeds outside --seeds"):
        bench_host(SimpleNamespace(**{**vars(args), "train": [5]}))


def test_a_run_that_exits_without_a_result_is_reported_not_recorded(tmp_path, monkeypatch):
    """A crash is in the table as failed but not in host_seeds.jsonl: the next sitting
    retries it; a seed that ended is recorded with the machine it trained on."""
    import benches.host
    from benches.host import bench_host

    class Crashed:
        returncode = 3

        def poll(self):
            return 3
    monkeypatch.setattr(benches.host, "_start", lambda *a, **k: Crashed())
    config = "configs/mujoco_halfcheetah_sac.yaml"
    _run(tmp_path / "work", "completed")            # seed 3 ended in --work
    args = SimpleNamespace(out=str(tmp_path / "out"), work=str(tmp_path / "work"), parallel=1,
                           pin=False, cores=None, seeds=[3, 4], config=config, set=[],
                           timeout=10, devices=1, train=None)
    rows, md = bench_host(args)
    assert [(r["seed"], r["failed"]) for r in rows] == [(3, False), (4, True)]
    assert "4: exit 3 (see its .log)" in md
    recorded = [json.loads(line) for line in
                (tmp_path / "out" / "host_seeds.jsonl").read_text().splitlines()]
    assert [r["seed"] for r in recorded] == [3] and "cores" in recorded[0]["machine"]


def test_re_tabulating_what_is_recorded_leaves_the_files_as_they_are(tmp_path, monkeypatch):
    """`bench host` with every seed recorded rewrites neither host.md nor host.json (their
    header's command and date stay those of the sitting that trained) and exits as it would
    have (1: a failed seed); a new row, a new pending seed or a lost host.md rewrites both."""
    from benches.cli import main
    _no_training(monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    config = "configs/mujoco_halfcheetah_sac.yaml"
    row = {"config": config, "sets": [], "seed": 0, "final_eval": 6000.0, "sps": 40.0,
           "status": "completed", "eval_curve": [[300000, 6000.0]], "failed": False}
    failed = {**row, "seed": 1, "final_eval": float("nan"), "status": "diverged",
              "failed": True}
    (out / "host_seeds.jsonl").write_text(json.dumps(row) + "\n" + json.dumps(failed) + "\n")
    argv = ["host", "--config", config, "--seeds", "0", "1", "--out", str(out),
            "--work", str(tmp_path / "gone")]
    assert main(argv) == 1
    (out / "host.md").write_text((out / "host.md").read_text().replace("host:", "first:", 1))
    md, js = (out / "host.md").read_text(), (out / "host.json").read_bytes()
    assert main(argv) == 1                                      # the same rows and table
    assert (out / "host.md").read_text() == md and (out / "host.json").read_bytes() == js
    assert main([*argv[:6], "2", *argv[6:], "--train"]) == 1   # seed 2 pending: rewritten
    assert "seeds [2]" in (out / "host.md").read_text()
    (out / "host.md").unlink()
    assert main(argv) == 1 and (out / "host.md").read_text().startswith("host:")
    (out / "host_seeds.jsonl").write_text(json.dumps({**row, "final_eval": 7000.0}) + "\n")
    assert main(argv[:5] + argv[6:]) == 0 and "7000.0" in (out / "host.md").read_text()
