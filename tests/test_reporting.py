"""What a call's metrics become on disk: metrics.jsonl rows and TensorBoard runs.

A population's host-side logging must not grow into the loop's bottleneck: on an H100 it did
(256 members, one TensorBoard run each: ~1 s of host time per call vs ~0.09 s of GPU time).
"""

import json
import struct

import numpy as np
import pytest

from jaxrl_dist import reporting


AGGREGATIONS = {"loss": "mean", "learning_rate": "last", "episode_return_sum": "sum",
                "episode_length_sum": "sum", "episodes": "sum"}


def _metrics(rng, members):
    names = ("loss", "learning_rate", "episode_return_sum", "episode_length_sum", "episodes")
    out = {n: rng.random((members, 5)).astype(np.float32) for n in names}
    out["episodes"] = np.float32([[0, 1, 0, 2, 0], [0] * 5, [1] * 5][:members])
    return out


def test_member_rows_reduce_each_member_over_the_call():
    m = _metrics(np.random.default_rng(0), 3)
    rows = reporting.member_rows({"env_steps": 7}, m, 3, {"return_mean": np.float32([1, 2, 3])},
                                 AGGREGATIONS)
    assert [r["member"] for r in rows] == [0, 1, 2]
    for k, row in enumerate(rows):
        assert row["env_steps"] == 7 and row["eval/return_mean"] == k + 1
        assert row["loss"] == pytest.approx(m["loss"][k].mean(), rel=1e-6)
        assert row["learning_rate"] == pytest.approx(m["learning_rate"][k, -1])  # the last
        episodes = m["episodes"][k].sum()
        assert row["episodes"] == episodes
        if episodes:
            assert row["episode_return"] == pytest.approx(
                m["episode_return_sum"][k].sum() / episodes, rel=1e-6)
        else:
            assert row["episode_return"] is None and row["episode_length"] is None
    single = reporting.member_rows({"env_steps": 7}, {k: v[0] for k, v in m.items()}, None,
                                   {"return_mean": np.float32(4)}, AGGREGATIONS)
    assert len(single) == 1 and "member" not in single[0]
    assert {k: v for k, v in single[0].items() if k != "eval/return_mean"} == \
        {k: v for k, v in rows[0].items() if k not in ("member", "eval/return_mean")}


def _tags(run_dir):
    """Scalar tags in a TensorBoard run's event files (TFRecord framing, Event protos)."""
    return {v.tag for event in _events(run_dir) for v in event.summary.value}


def _events(run_dir):
    """Every Event proto in a TensorBoard run's event files (TFRecord framing)."""
    from tensorboardX.proto import event_pb2
    events = []
    for path in sorted(run_dir.glob("events.out.tfevents.*")):
        data, pos = path.read_bytes(), 0
        while pos < len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            events.append(event_pb2.Event.FromString(data[pos + 12:pos + 12 + length]))
            pos += 12 + length + 4
    return events


def test_a_row_is_one_tensorboard_event_holding_each_of_its_scalars(tmp_path):
    """One event per row (not one per scalar: a row's 22 events cost the writer ~5x the CPU
    beside the training loop), each scalar with its tag, value and the row's env steps."""
    reporter = reporting.RunReporter(tmp_path, 100, progress=False)
    reporter.start({})
    rows = [{"env_steps": 512 * k, "updates": k, "sps": 1000.0 + k, "loss": 0.25 * k,
             "episode_return": None, "eval/return_mean": 9.5} for k in (1, 2)]
    for row in rows:
        reporter.log(row)
    reporter.finish({})
    events = [e for e in _events(tmp_path / "tb") if e.summary.value]
    assert [e.step for e in events] == [512, 1024]
    for event, row in zip(events, rows):
        assert {v.tag: v.simple_value for v in event.summary.value} == {
            "train/updates": row["updates"], "train/sps": row["sps"],
            "train/loss": row["loss"], "eval/return_mean": 9.5}   # None: no point


def test_a_population_logs_every_member_but_tensorboard_runs_only_the_first(tmp_path):
    members = 3
    reporter = reporting.RunReporter(tmp_path, 100, progress=False, member_runs=2)
    reporter.start({})
    m = _metrics(np.random.default_rng(1), members)
    head = {"env_steps": 10, "updates": 1, "sps": 5.0, "time_s": 2.0}
    reporter.log_population(reporting.member_rows(head, m, members, None, AGGREGATIONS))
    reporter.finish({})
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["member"] for r in rows] == [0, 1, 2]            # every member in the file
    runs = sorted(p.name for p in (tmp_path / "tb").iterdir() if p.is_dir())
    assert runs == ["member_000", "member_001"]                # capped TensorBoard runs
    assert "train/loss" in _tags(tmp_path / "tb" / "member_001")
    main = _tags(tmp_path / "tb")                               # the population's spread
    assert {"train/loss/mean", "train/loss/min", "train/loss/max"} <= main
    assert "train/episode_return/mean" in main                  # members without episodes skipped
    assert {"train/sps", "train/updates"} <= main and "train/sps/mean" not in main  # shared: once


def test_run_files_are_strict_json(tmp_path):
    """NaN/inf anywhere (a diverged member's row, a population aggregate) is written as null:
    strict parsers reject JSON's missing NaN literal."""
    def strict(text):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))

    reporter = reporting.RunReporter(tmp_path, 100, progress=False)
    reporter.start({})
    reporter.log({"env_steps": 1, "loss": float("nan"), "eval/return_mean": [1.0, float("inf")]})
    reporter.finish({"param_norm": float("nan"),
                     "members": [{"param_norm": float("-inf"), "eval_return": 3.0}],
                     "population": {"eval_return": {"mean_ci": (float("nan"), 1.0)}}})
    row = strict((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert row["loss"] is None and row["eval/return_mean"] == [1.0, None]
    summary = strict((tmp_path / "summary.json").read_text())
    assert summary["param_norm"] is None and summary["members"][0]["param_norm"] is None
    assert summary["population"]["eval_return"]["mean_ci"] == [None, 1.0]


def test_background_writes_in_order_and_raises_a_failed_write():
    """The loop hands each call's logging to one thread: order is kept, and a write that
    failed ends the run at the next submit (or at close), not never."""
    done = []
    writer = reporting.Background()
    for k in range(20):
        writer.submit(done.append, k)
    writer.close()
    assert done == list(range(20))

    def fail():
        raise OSError("No space left on device")

    writer = reporting.Background()
    writer.submit(fail)
    with pytest.raises(OSError, match="No space"):
        writer.close()
    writer = reporting.Background()
    writer.submit(fail)
    writer._futures[0].exception()        # wait until it has failed
    with pytest.raises(OSError, match="No space"):
        writer.submit(done.append, 0)


def test_run_keeps_each_members_final_and_best_return():
    """The summary's per-member returns come from a running record (O(members) at the end;
    scanning every logged row per member took ~30 s for 1,024 members on an H200)."""
    from jaxrl_dist.run import Run
    run = Run(*([None] * 16))
    run.record_returns([{"member": 0, "episode_return": 5.0}, {"member": 1, "episode_return": None}])
    run.record_returns([{"member": 0, "episode_return": 3.0}, {"member": 1, "episode_return": 7.0}])
    run.record_returns([{"member": 0, "episode_return": None}, {"member": 1, "episode_return": 9.0}])
    assert run.final_return == {0: 3.0, 1: 9.0}
    assert run.best_return == {0: 5.0, 1: 9.0}
