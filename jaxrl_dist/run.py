"""The record of one training run: what the loop and the summary read, built by the trainer's
setup. ``state`` (the one pytree of arrays) changes every call; the rest is bookkeeping."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax

import jaxrl_dist
from jaxrl_dist import config as config_lib
from jaxrl_dist import distributed, reporting, sharding
from jaxrl_dist.programs import Learner
from jaxrl_dist.checkpoint import Checkpointer
from jaxrl_dist.config import Config
from jaxrl_dist.sizes import Sizes


@dataclass
class Run:
    """Everything the loop and the summary need; ``state`` is the one pytree that changes."""

    config: Config
    sizes: Sizes
    layout: sharding.Layout
    learner: Learner
    env_name: str
    run_dir: Path
    compiled: dict[int, Any]       # updates per call -> compiled update program
    evaluate: Any                  # compiled evaluation program
    seed_keys: Any
    checkpointer: Checkpointer
    reporter: reporting.NullReporter
    state: Any
    updates_done: int
    first_update: int
    compile_time: float
    start: float
    # per member: the latest and the best training episode return logged (for the summary;
    # kept as they arrive, so the summary costs O(members), not O(members x rows))
    final_return: dict[int, float] = field(default_factory=dict)
    best_return: dict[int, float] = field(default_factory=dict)
    evals: list[dict[str, Any]] = field(default_factory=list)  # one per evaluation
    status: str = "completed"
    solved_at: int | None = None
    loop_time: float = 0.0
    hooks: str = ""   # the periodic work as it ran, e.g. "checkpoint every 812 updates"
    cache: dict[str, Any] = field(default_factory=dict)   # compile cache dir, hits, misses
    policy_record: dict[str, Any] = field(default_factory=dict)   # see jaxrl_dist.policy
    compile_programs: dict[str, float] = field(default_factory=dict)   # s, trace+lower+compile
    device_kind: str = ""
    last_checkpoint: int | None = None   # step of the latest complete checkpoint at the end
    # seconds per phase of the run's host side (summary.json "time_s"): where a slow run's
    # wall time went without a profiler (e.g. host logging longer than a device call)
    timing: dict[str, float] = field(default_factory=dict)
    watch: Any = None   # faults.DivergenceWatch: streaks of updates skipped as non-finite
    # steps env_nonfinite=reset dropped this session, per member (summary.json)
    env_resets: dict[int, int] = field(default_factory=dict)
    driver: Any = None   # drivers.Driver: how the updates reach the environments
    exploit: Any = None  # with PBT: the compiled round (drivers.base.Ready.exploit)
    pbt_key: Any = None  # with PBT: the run seed's key, replicated: rounds draw from it

    def record_returns(self, rows: list[dict[str, Any]]) -> None:
        """Fold one call's metrics rows (one per member) into the final and best returns."""
        for row in rows:
            value = row.get("episode_return")
            if value is None:
                continue
            m = row.get("member", 0)
            self.final_return[m] = value
            self.best_return[m] = max(value, self.best_return.get(m, value))

    def timed(self, phase: str, begin: float) -> float:
        """Add the seconds since ``begin`` to ``phase``; returns now."""
        now = time.perf_counter()
        self.timing[phase] = self.timing.get(phase, 0.0) + now - begin
        return now

    def meta(self) -> dict[str, Any]:
        return {"updates": self.updates_done,
                "env_steps": self.updates_done * self.sizes.batch_size,
                "config": config_lib.to_dict(self.config), "num_devices": self.layout.mesh.size,
                "num_processes": distributed.process_count(),
                "jaxrl_dist_version": jaxrl_dist.__version__, "jax_version": jax.__version__,
                "policy": self.policy_record, "members": self.layout.members}
