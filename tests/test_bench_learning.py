"""bench learning's statistics and tables (no training: results are given)."""

from __future__ import annotations

import numpy as np
import pytest

from benches.learning import TASKS, first_reach, summarize, task_table
from jaxrl_dist import config as config_lib


def _result(trainer: str, final: list[float], curve: list[list[float]]) -> dict:
    return {"trainer": trainer, "final_eval": final, "curve_steps": [100, 200, 300],
            "curve_return": curve, "eval_method": "greedy", "wall_s": 1.0}


def test_first_reach_is_the_first_step_at_or_above_the_threshold():
    curve = np.array([[1.0, 5.0, 3.0], [0.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    assert first_reach(np.array([100, 200, 300]), curve, 5.0) == [200, None, 100]


def test_summarize_counts_seeds_at_the_threshold_at_the_end():
    s = summarize(_result("x", [10.0, 30.0, 20.0, 20.0],
                          [[0, 25, 10], [0, 0, 30], [0, 0, 0], [20, 20, 20]]), 20.0)
    assert s["n"] == 4 and s["mean"] == pytest.approx(20.0)
    assert s["solved_fraction"] == pytest.approx(0.75)        # 30, 20, 20 >= 20 at the end
    assert s["reached_in_training"] == 3                       # 25 at 200, 30 at 300, 20 at 100
    assert s["median_steps_to_threshold"] == pytest.approx(200.0)
    assert s["mean_ci"][0] <= 20.0 <= s["mean_ci"][1]


def test_the_header_names_each_trainers_seeds_when_they_ran_on_different_ones():
    config = config_lib.load(TASKS["cartpole"][0], [])
    same = {"a": {**_result("a", [1.0, 2.0], [[0, 0, 0]] * 2), "seeds": [0, 1]},
            "b": {**_result("b", [1.0, 2.0], [[0, 0, 0]] * 2), "seeds": [0, 1]}}
    assert "2 seeds 0–1;" in task_table("cartpole", config, [0, 1], same)[1][0]
    other = {**same, "b": {**same["b"], "seeds": [16, 18]}}
    header = task_table("cartpole", config, [0, 1, 16, 18], other)[1][0]
    assert "a: 2 seeds 0–1; b: 2 seeds 16, 18;" in header and "4 seeds" not in header


@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_task_config_loads_and_renders(task):
    config_path, threshold, reference = TASKS[task]
    config = config_lib.load(config_path, [])
    rows, md = task_table(task, config, [0, 1], {
        "a": _result("a", [threshold + 1, threshold - 1], [[0, 0, threshold]] * 2)})
    text = "\n".join(md)
    assert config.env in text and f"threshold {threshold:g}" in text
    assert ("gymnax-blines reference" in text) == (reference is not None)
    assert "| a |" in text and "| 1/2 |" in text
    assert rows[0]["task"] == task and rows[0]["solved_fraction"] == 0.5


def test_a_failed_trainer_loses_nothing_else(tmp_path, monkeypatch):
    """One trainer timing out: the others' results are kept (raw file, table row), the failure
    is one line in the table, and the bench's exit status says so."""
    import argparse
    import json
    import subprocess

    from benches import learning as bench_learning

    def run(trainer, *_):
        if trainer == "rejax":
            raise subprocess.TimeoutExpired("rejax_runner.py", 5)
        return _result(trainer, [500.0, 500.0], [[0, 500, 500]] * 2)

    monkeypatch.setattr(bench_learning, "run_trainer", run)
    monkeypatch.setattr(bench_learning, "plot", lambda *a: None)
    args = argparse.Namespace(tasks=["cartpole"], trainers=["jaxrl_dist", "rejax"], set=[],
                              num_seeds=2, first_seed=0, timeout=5.0, out=tmp_path,
                              raw_from=None)
    rows, md = bench_learning.bench_learning(args)
    assert [r.get("failed") for r in rows] == [None, "timed out after 5 s (--timeout)"]
    assert "| jaxrl_dist | 500.0" in md and "rejax FAILED: timed out" in md
    saved = json.loads((tmp_path / "learning_cartpole_jaxrl_dist_raw.json").read_text())
    assert saved["final_eval"] == [500.0, 500.0]
    assert not (tmp_path / "learning_cartpole_rejax_raw.json").exists()


def test_plot_joins_points_across_intervals_where_no_episode_ended(tmp_path):
    """Long episodes end in some logged intervals only (-1e9 = none ended): the curve is drawn
    through the others, and an interval where no seed finished one is dropped without a
    warning (before, every point of ours on Freeway was isolated and nothing was drawn)."""
    import warnings

    from benches.learning import plot

    gap = -1e9
    results = {"ours": {"curve_steps": [1, 2, 3, 4],
                        "curve_return": [[gap, 10.0, gap, 20.0], [gap, 12.0, 15.0, gap]]}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plot("task", results, 5.0, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 0


def test_raw_results_of_runs_on_disjoint_seeds_are_tabulated_as_one(tmp_path):
    """A long task's seeds run over several sessions: --raw-from joins each trainer's raw files
    (seeds, final returns, curves; wall times add up) and tabulates them without running
    anything; raw files that share a seed are refused in one line, the others still count."""
    import argparse
    import json

    from benches import learning as bench_learning

    def save(name, result):
        (tmp_path / f"learning_cartpole_{name}.json").write_text(json.dumps(result))

    save("jaxrl_dist_raw", {**_result("jaxrl_dist", [500.0, 480.0], [[0, 500, 500]] * 2),
                            "seeds": [0, 1], "wall_s": 10.0})
    save("jaxrl_dist_raw_seeds2-3", {**_result("jaxrl_dist", [400.0, 500.0],
                                               [[0, 100, 400]] * 2),
                                     "seeds": [2, 3], "wall_s": 5.0})
    save("rejax_raw", {**_result("rejax", [500.0] * 2, [[0, 500, 500]] * 2), "seeds": [0, 1]})
    save("rejax_raw_again", {**_result("rejax", [500.0], [[0, 500, 500]]), "seeds": [1]})
    args = argparse.Namespace(tasks=["cartpole"], trainers=["jaxrl_dist", "rejax"], set=[],
                              num_seeds=16, first_seed=0, timeout=5.0, out=tmp_path / "out",
                              raw_from=tmp_path)
    rows, md = bench_learning.bench_learning(args)
    ours = rows[0]
    assert ours["n"] == 4 and ours["final_eval"] == [500.0, 480.0, 400.0, 500.0]
    assert ours["solved_fraction"] == 0.75 and ours["wall_s"] == 15.0
    assert "4 seeds 0–3" in md and "| 3/4 |" in md
    assert rows[1]["failed"].startswith("rejax: raw results share seeds")
    assert not (tmp_path / "out" / "learning_cartpole_jaxrl_dist_raw.json").exists()


def test_rejax_runs_with_the_interpreter_given_by_rejax_python(tmp_path, monkeypatch):
    """``bench learning --rejax-python PY`` runs rejax's runner with PY (it used to look for
    .bench/rejax whatever the flag said); without the flag, the checkout's .bench/rejax
    interpreter, whatever the working directory. Nothing runs: the command line is captured."""
    from pathlib import Path

    from benches import cli
    from benches import learning as bench_learning

    python = tmp_path / "rejax_venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch()
    ran = []
    monkeypatch.setattr(bench_learning, "_run_json", lambda cmd, timeout: ran.append(cmd) or {})
    monkeypatch.setattr(bench_learning, "hparams", lambda config: {})
    config_path = TASKS["cartpole"][0]
    config = config_lib.load(config_path, [])
    args = cli.build_parser().parse_args(["learning", "--rejax-python", str(python)])
    bench_learning.run_trainer("rejax", config_path, config, [0, 1], args)
    assert ran[0][0] == str(python)
    assert Path(ran[0][1]).name == "rejax_runner.py" and Path(ran[0][1]).is_file()

    missing = cli.build_parser().parse_args(["learning", "--rejax-python",
                                             str(tmp_path / "nowhere" / "python")])
    with pytest.raises(RuntimeError, match="nowhere"):
        bench_learning.run_trainer("rejax", config_path, config, [0, 1], missing)
    default = cli.build_parser().parse_args(["learning"])
    root = Path(__file__).resolve().parent.parent
    assert bench_learning.rejax_python(default) == root / ".bench/rejax/bin/python"


def test_the_solved_returns_are_each_configs_own():
    """The benches' one table of solved returns says what each config's ``solved_return`` says
    (the value training reports against)."""
    from benches.common import SOLVED_RETURN

    for path, solved in SOLVED_RETURN.items():
        assert config_lib.load(path, []).solved_return == solved, path
