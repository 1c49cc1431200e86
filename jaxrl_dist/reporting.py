"""Run files, TensorBoard, W&B and the console progress line. Process 0 is the only writer.

Metrics arriving here are already global (reduced inside the compiled program), so writing them
from one process loses nothing. Other processes get a :class:`NullReporter`.
"""

from __future__ import annotations

import json
import math
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from jaxrl_dist import faults, tracking
from jaxrl_dist.protocol import EXIT_DIVERGED, EXIT_PREEMPTED

_NOT_SCALARS = ("env_steps", "member")
# A finished run's status -> the exit code the CLI ends with (W&B records it); others: 0.
STATUS_EXIT_CODES = {"diverged": EXIT_DIVERGED, "preempted": EXIT_PREEMPTED}
# Fields of the row's head, the same for every member of a call: a population logs them once.
_SHARED = ("updates", "sps", "time_s")


def member_rows(head: dict[str, Any], metrics: dict[str, np.ndarray], members: int | None,
                result: dict[str, Any] | None, aggregations: dict[str, str]
                ) -> list[dict[str, Any]]:
    """metrics.jsonl rows of one call: one per member (``members`` = None for a single run,
    whose metrics are ``[K]``; a population's are ``[members, K]``), each with the evaluation
    made right after the call, if any. Each metric is reduced over the call's K updates as its
    learner declares (``aggregations``: name -> mean, last or sum); the episode sums become
    ``episode_return`` / ``episode_length`` (None if no episode ended). Reduced for all
    members at once: a loop over 256 members' metrics cost a GPU population more host time
    than its updates."""
    n = members or 1
    stacked = {k: np.asarray(v, np.float64).reshape(n, -1) for k, v in metrics.items()
               if not k.startswith("_")}   # "_name": for the trainer, not a column
    reduce = {"mean": lambda v: v.mean(1), "last": lambda v: v[:, -1], "sum": lambda v: v.sum(1)}
    columns = {name: reduce[aggregations[name]](values) for name, values in stacked.items()}
    episodes = columns["episodes"]
    has = episodes > 0
    safe = np.where(has, episodes, 1.0)
    for name in ("return", "length"):
        mean = columns.pop(f"episode_{name}_sum") / safe
        columns[f"episode_{name}"] = [float(v) if h else None for v, h in zip(mean, has)]
    if "episodes_won" in columns:   # an environment with an outcome (SMAX): its win rate
        rate = columns.pop("episodes_won") / safe
        columns["win_rate"] = [float(v) if h else None for v, h in zip(rate, has)]
    columns = {k: v if isinstance(v, list) else v.tolist() for k, v in columns.items()}
    if result is not None:
        columns.update({f"eval/{k}": np.broadcast_to(np.atleast_1d(np.asarray(v, np.float64)),
                                                      (n,)).tolist() for k, v in result.items()})
    rows = []
    for m in range(n):
        row = {**head, **({"member": m} if members else {})}
        row.update({name: values[m] for name, values in columns.items()})
        rows.append(row)
    return rows


def pbt_rows(head: dict[str, Any], record: Any) -> list[dict[str, Any]]:
    """metrics.jsonl rows of a PBT round (``record``: a :class:`jaxrl_dist.pbt.Round` read
    back): one ``pbt_round`` row with every member's fitness, eligibility and parent, then one
    ``pbt_copy`` row per copied member with its hyperparameters before and after."""
    at = {"env_steps": head["env_steps"], "updates": head["updates"]}
    r = int(record.round)
    parents = np.asarray(record.parents).tolist()
    copies = sum(source != target for target, source in enumerate(parents))
    eligible = np.asarray(record.eligible).tolist()
    rows = [{**at, "event": "pbt_round", "round": r, "parents": parents,
             "fitness": np.asarray(record.fitness, np.float64).tolist(),
             "eligible": eligible, "copies": copies}]
    if not copies:   # said in the row: too few members had finished min_episodes
        rows[0]["why_no_copy"] = (f"{sum(eligible)} of {len(parents)} members eligible "
                                  f"(pbt.min_episodes finished episodes since the last "
                                  f"round); the quantile of them is less than one member")
    for target, source in enumerate(parents):
        if source != target:
            rows.append({**at, "event": "pbt_copy", "round": r, "source": source,
                         "target": target,
                         "old": {k: _f32(v[target]) for k, v in record.before.items()},
                         "new": {k: _f32(v[target]) for k, v in record.after.items()}})
    return rows


def _f32(value: Any) -> float:
    """A float32 as the shortest decimal that reads back as the same float32 (0.01, not
    0.009999999776482582)."""
    return float(str(np.float32(value)))


def _clean(value: Any) -> Any:
    """Strict JSON: NaN and infinities (which JSON has no words for) become null, at any depth
    (a population's per-member rows and aggregates included)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def truncate_metrics(path: Path, max_updates: int) -> None:
    """On resume, drop rows logged after the checkpoint we resume from (they will be redone)."""
    if not path.exists():
        return
    def logged_by_then(line: str) -> bool:   # a line torn by a full disk is dropped
        try:
            return json.loads(line).get("updates", 0) <= max_updates
        except ValueError:
            return False

    kept = [line for line in path.read_text().splitlines()
            if line.strip() and logged_by_then(line)]
    _replace_file(path, "".join(line + "\n" for line in kept), "rewriting")


def _replace_file(path: Path, text: str, operation: str = "writing") -> None:
    """Write ``text`` to a temporary file, then rename it over ``path``: a reader sees the old
    file or the new one, never half of one; a failed write is one line and leaves no tmp."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with faults.writing(operation, path):
            tmp.write_text(text)
            tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


class Background:
    """The host's per-call logging (rows, metrics.jsonl, TensorBoard, progress line) on one
    thread of its own, in call order, so the loop goes back to dispatching at once: on a GPU a
    population's logging took longer than a call's device work (docs/benchmarks_history.md). A
    failed write is raised in the loop at the next ``submit`` or at ``close``."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jaxrl_dist-log")
        self._futures: list[Future] = []

    def submit(self, fn, *args: Any) -> None:
        self._raise_failed()
        self._futures.append(self._pool.submit(fn, *args))

    def _raise_failed(self) -> None:
        done = [f for f in self._futures if f.done()]
        self._futures = [f for f in self._futures if not f.done()]
        for f in done:
            f.result()

    def close(self, wait: bool = True) -> None:
        """Wait for every submitted write and raise the first failure (``wait=False``: an
        error is already on its way up; drop what is queued)."""
        self._pool.shutdown(wait=wait, cancel_futures=not wait)
        if wait:
            for f in self._futures:
                f.result()
        self._futures = []


class NullReporter:
    """What non-zero processes use: every call is a no-op."""

    def start(self, *args: Any, **kwargs: Any) -> None: ...
    def log(self, row: dict[str, Any]) -> None: ...
    def log_population(self, rows: list[dict[str, Any]]) -> None: ...
    def log_events(self, rows: list[dict[str, Any]]) -> None: ...
    def advance(self, env_steps: int, postfix: dict[str, str]) -> None: ...
    def message(self, text: str) -> None: ...
    def finish(self, summary: dict[str, Any]) -> None: ...
    def fail(self, exit_code: int) -> None: ...


# A population's members past this many get no TensorBoard run of their own (metrics.jsonl
# keeps every member): writing 256 members' events took ~1 s of host time per call, ten times
# an H100's time for the call's 10 updates, and left the GPU idle (docs/benchmarks_history.md). The
# main run gets the population's mean, min and max of every metric instead.
MEMBER_RUNS = 8
# Seconds a failed run waits for the row being written before it closes W&B without it.
ROW_WAIT_S = 30.0


class RunReporter(NullReporter):
    """config.yaml, metrics.jsonl, summary.json, TensorBoard events, the W&B run (``tracker``,
    if any) and one live progress line."""

    def __init__(self, run_dir: Path, total_steps: int, progress: bool = True,
                 member_runs: int = MEMBER_RUNS, tracker: Any = None):
        self.run_dir = Path(run_dir)
        self.tracker = tracker   # tracking.Tracker: the W&B run mirroring metrics.jsonl
        # held while a row goes to metrics.jsonl and W&B: a failure closes W&B between rows,
        # so W&B holds exactly the rows metrics.jsonl does (what --resume relies on)
        self._row = threading.Lock()
        self.total_steps = total_steps
        self.progress = progress
        self.member_runs = member_runs
        self._bar = None
        self._initial_steps = 0
        self._tb = None
        self._member_tb: dict[int, Any] = {}
        self._metrics = None

    def start(self, config_dict: dict[str, Any], env_steps: int = 0) -> None:
        with faults.writing("writing", self.run_dir / "config.yaml"):
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "config.yaml").write_text(
                yaml.safe_dump(config_dict, sort_keys=False))
        with faults.writing("opening", self.run_dir / "metrics.jsonl"):
            self._metrics = open(self.run_dir / "metrics.jsonl", "a", buffering=1)
        faults.watch_threads()   # TensorBoard writes on a thread of its own
        self._tb = self._summary_writer(self.run_dir / "tb", flush_secs=10)
        self._initial_steps = env_steps

    @staticmethod
    def _summary_writer(path: Path, flush_secs: int):
        """A TensorBoard writer whose queue never fills between two of our fault checks: its
        thread dies on a failed write, and a put into a full queue would then wait forever."""
        from tensorboardX import SummaryWriter
        with faults.writing("writing TensorBoard events to", path):
            return SummaryWriter(str(path), flush_secs=flush_secs, max_queue=10_000)

    def _progress_bar(self):
        if self._bar is None and self.progress:
            from tqdm import tqdm
            self._bar = tqdm(total=self.total_steps, initial=self._initial_steps, unit="step",
                             unit_scale=True, dynamic_ncols=True, file=sys.stderr,
                             mininterval=0.5 if sys.stderr.isatty() else 30.0,
                             bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} "
                                        "[{elapsed}<{remaining}{postfix}]")
        return self._bar

    def _writer(self, member: int | None):
        """TensorBoard writer: tb/ for a run, tb/member_007/ per member (so TensorBoard
        overlays a population's members as runs)."""
        if member is None:
            return self._tb
        if member not in self._member_tb:
            self._member_tb[member] = self._summary_writer(
                self.run_dir / "tb" / f"member_{member:03d}", flush_secs=30)
        return self._member_tb[member]

    def log(self, row: dict[str, Any]) -> None:
        """One metrics row (a population logs one row per member, with a ``member`` key)."""
        with self._row:
            self._track(self._write_rows([row])[0])

    def _track(self, data: dict[str, Any]) -> None:
        if self.tracker is not None:
            self._warn(self.tracker.log(data))

    def _warn(self, warning: str | None) -> None:
        if warning:
            self.message(warning)

    def _write_rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """metrics.jsonl lines in ONE write (the file is line-buffered: a write per row was a
        system call per member), and the TensorBoard runs that exist for these rows; returns
        the rows as written (non-finite values as None)."""
        faults.raise_thread_fault("writing TensorBoard events to", self.run_dir / "tb")
        rows = [{k: _clean(v) for k, v in row.items()} for row in rows]
        text = "".join(json.dumps(row, allow_nan=False) + "\n" for row in rows)
        with faults.writing("writing", self.run_dir / "metrics.jsonl"):
            self._metrics.write(text)
        if self._tb is not None:
            for row in rows:
                member = row.get("member")
                if member is None or member < self.member_runs:
                    self._scalars(self._writer(member), row)
        return rows

    def log_population(self, rows: list[dict[str, Any]]) -> None:
        """One call of a population: every member's row, and in the main TensorBoard run the
        mean, min and max over the members of each metric (the call's shared fields once);
        W&B gets all of it as one step."""
        with self._row:
            rows = self._write_rows(rows)
            stats = spread(rows)
            if self._tb is not None:
                summary = {"env_steps": rows[0]["env_steps"],
                           **{name: rows[0][name] for name in _SHARED if name in rows[0]}}
                for name, values in stats.items():
                    tag = name if "/" in name else f"train/{name}"
                    summary.update({f"{tag}/{stat}": v
                                    for stat, v in zip(("mean", "min", "max"), values)})
                self._scalars(self._tb, summary)
            if self.tracker is not None:
                self._track(tracking.population_row(rows, _SHARED, stats))

    def log_events(self, rows: list[dict[str, Any]]) -> None:
        """Rows that are records, not scalars over time (PBT's rounds and copies):
        metrics.jsonl only, after the call's rows."""
        rows = [{k: _clean(v) for k, v in row.items()} for row in rows]
        text = "".join(json.dumps(row, allow_nan=False) + "\n" for row in rows)
        with self._row, faults.writing("writing", self.run_dir / "metrics.jsonl"):
            self._metrics.write(text)

    @staticmethod
    def _scalars(writer, row: dict[str, Any]) -> None:
        """The row's scalars as ONE TensorBoard event (a Summary holding every value, as
        TensorFlow's merged summaries are), not an event per scalar: a CartPole row's 22
        events cost the writer's threads ~0.65 ms of CPU per row (pure-Python CRC of each
        record), beside the training loop on a 2-core machine."""
        from tensorboardX.proto.summary_pb2 import Summary
        values = [Summary.Value(tag=name if "/" in name else f"train/{name}",
                                simple_value=float(value))
                  for name, value in row.items()
                  if name not in _NOT_SCALARS and isinstance(value, (int, float))]
        if values:
            writer._get_file_writer().add_summary(Summary(value=values), int(row["env_steps"]))

    def advance(self, env_steps: int, postfix: dict[str, str]) -> None:
        """Move the progress line to ``env_steps`` and show ``postfix``."""
        if self._progress_bar() is not None:
            self._bar.set_postfix(postfix, refresh=False)
            self._bar.update(env_steps - self._bar.n)

    def message(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def finish(self, summary: dict[str, Any]) -> None:
        if self._bar is not None:
            self._bar.close()
        with faults.writing("writing TensorBoard events to", self.run_dir / "tb"):
            for writer in [self._tb, *self._member_tb.values()]:
                if writer is not None:
                    writer.close()
        faults.raise_thread_fault("writing TensorBoard events to", self.run_dir / "tb")
        if self._metrics is not None:
            with faults.writing("writing", self.run_dir / "metrics.jsonl"):
                self._metrics.close()
        summary = {k: _clean(v) for k, v in summary.items()}
        _replace_file(self.run_dir / "summary.json",
                      json.dumps(summary, indent=2, allow_nan=False) + "\n")
        if self.tracker is not None:
            self._warn(self.tracker.finish(STATUS_EXIT_CODES.get(summary.get("status"), 0),
                                           summary))

    def fail(self, exit_code: int) -> None:
        """Training failed: close the W&B run with the exit code, once the row being written
        (on the logging thread, which a failure does not wait for) is complete; a row stuck
        for ``ROW_WAIT_S`` is not waited for."""
        if self.tracker is None:
            return
        held = self._row.acquire(timeout=ROW_WAIT_S)
        try:
            self._warn(self.tracker.finish(exit_code))
        finally:
            if held:
                self._row.release()


def spread(rows: list[dict[str, Any]]) -> dict[str, tuple[float, float, float]]:
    """A population's mean, min and max over its members of each metric of one call (finite
    values only; the call's shared fields, the step and the member index left out)."""
    out = {}
    for name in rows[0]:
        if name in _NOT_SCALARS or name in _SHARED:
            continue
        values = np.asarray([v for r in rows if isinstance(v := r.get(name), (int, float))],
                            np.float64)
        values = values[np.isfinite(values)]
        if values.size:
            out[name] = (float(values.mean()), float(values.min()), float(values.max()))
    return out


def postfix(rows: list[dict[str, Any]]) -> dict[str, str]:
    """The progress line's numbers: a run's return, or a population's mean [min, max]."""
    out = {"sps": f"{rows[0].get('sps', 0):,.0f}"}
    for name, short in (("episode_return", "return"), ("eval/return_mean", "eval")):
        values = [r[name] for r in rows if r.get(name) is not None]
        if len(values) == 1:
            out[short] = f"{values[0]:.1f}"
        elif values:
            out[short] = f"{np.mean(values):.1f} [{min(values):.0f}, {max(values):.0f}]"
    won = [r["win_rate"] for r in rows if r.get("win_rate") is not None]   # SMAX's battles
    if won:
        out["win"] = f"{np.mean(won):.0%}"
    return out
