"""Run files, TensorBoard and the console progress line. Process 0 is the only writer.

Metrics arriving here are already global (reduced inside the compiled program), so writing them
from one process loses nothing. Other processes get a :class:`NullReporter`.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

# Per-update sums that are aggregated over a logging interval by summing, not averaging.
_SUMS = ("episode_return_sum", "episode_length_sum", "episodes")


def aggregate(metrics: dict[str, np.ndarray]) -> dict[str, float | None]:
    """Collapse ``[K]``-stacked per-update metrics of one interval into one row."""
    row: dict[str, float | None] = {}
    episodes = float(np.sum(metrics["episodes"]))
    for name, values in metrics.items():
        if name in _SUMS:
            continue
        row[name] = float(np.mean(values)) if name != "learning_rate" else float(values[-1])
    row["episodes"] = episodes
    row["episode_return"] = (float(np.sum(metrics["episode_return_sum"])) / episodes
                             if episodes else None)
    row["episode_length"] = (float(np.sum(metrics["episode_length_sum"])) / episodes
                             if episodes else None)
    return row


def member_rows(head: dict[str, Any], metrics: dict[str, np.ndarray], members: int | None,
                result: dict[str, Any] | None) -> list[dict[str, Any]]:
    """metrics.jsonl rows of one call: one per member (``members`` = None for a single run),
    each with the evaluation made right after the call, if any."""
    rows = []
    for m in range(members or 1):
        mine = {k: v[m] for k, v in metrics.items()} if members else metrics
        row = {**head, **({"member": m} if members else {}), **aggregate(mine)}
        if result is not None:
            row.update({f"eval/{k}": float(np.atleast_1d(v)[m]) for k, v in result.items()})
        rows.append(row)
    return rows


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN/inf
    return value


def truncate_metrics(path: Path, max_updates: int) -> None:
    """On resume, drop rows logged after the checkpoint we resume from (they will be redone)."""
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines()
            if line.strip() and json.loads(line).get("updates", 0) <= max_updates]
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    tmp.replace(path)


class NullReporter:
    """What non-zero processes use: every call is a no-op."""

    def start(self, *args: Any, **kwargs: Any) -> None: ...
    def log(self, row: dict[str, Any]) -> None: ...
    def advance(self, env_steps: int, postfix: dict[str, str]) -> None: ...
    def message(self, text: str) -> None: ...
    def finish(self, summary: dict[str, Any]) -> None: ...


class RunReporter(NullReporter):
    """config.yaml, metrics.jsonl, summary.json, TensorBoard events and one live progress line."""

    def __init__(self, run_dir: Path, total_steps: int, progress: bool = True,
                 tensorboard: bool = True):
        self.run_dir = Path(run_dir)
        self.total_steps = total_steps
        self.progress = progress
        self.tensorboard = tensorboard
        self._bar = None
        self._initial_steps = 0
        self._tb = None
        self._member_tb: dict[int, Any] = {}
        self._metrics = None

    def start(self, config_dict: dict[str, Any], env_steps: int = 0) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(
            yaml.safe_dump(config_dict, sort_keys=False))
        self._metrics = open(self.run_dir / "metrics.jsonl", "a", buffering=1)
        if self.tensorboard:
            from tensorboardX import SummaryWriter
            self._tb = SummaryWriter(str(self.run_dir / "tb"), flush_secs=10)
        self._initial_steps = env_steps

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
            from tensorboardX import SummaryWriter
            self._member_tb[member] = SummaryWriter(
                str(self.run_dir / "tb" / f"member_{member:03d}"), flush_secs=30)
        return self._member_tb[member]

    def log(self, row: dict[str, Any]) -> None:
        """One metrics row (a population logs one row per member, with a ``member`` key)."""
        row = {k: _clean(v) for k, v in row.items()}
        self._metrics.write(json.dumps(row) + "\n")
        step = int(row["env_steps"])
        if self._tb is not None:
            writer = self._writer(row.get("member"))
            for name, value in row.items():
                if name not in ("env_steps", "member") and isinstance(value, (int, float)):
                    writer.add_scalar(name if "/" in name else f"train/{name}", value, step)

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
        for writer in [self._tb, *self._member_tb.values()]:
            if writer is not None:
                writer.close()
        if self._metrics is not None:
            self._metrics.close()
        summary = {k: _clean(v) for k, v in summary.items()}
        tmp = self.run_dir / "summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2) + "\n")
        tmp.replace(self.run_dir / "summary.json")


def postfix(rows: list[dict[str, Any]]) -> dict[str, str]:
    """The progress line's numbers: a run's return, or a population's mean [min, max]."""
    out = {"sps": f"{rows[0].get('sps', 0):,.0f}"}
    for name, short in (("episode_return", "return"), ("eval/return_mean", "eval")):
        values = [r[name] for r in rows if r.get(name) is not None]
        if len(values) == 1:
            out[short] = f"{values[0]:.1f}"
        elif values:
            out[short] = f"{np.mean(values):.1f} [{min(values):.0f}, {max(values):.0f}]"
    return out
