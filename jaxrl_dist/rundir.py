"""Where a run's files go: a fresh run never writes into a directory that already holds one.

The default name carries process 0's clock, broadcast, so every process of a job agrees on it.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from jaxrl_dist import distributed, population
from jaxrl_dist.config import Config
from jaxrl_dist.errors import RunError


def default_run_dir(config: Config) -> Path:
    stamp = int(distributed.broadcast(np.int32(int(time.time()))))
    when = time.strftime("%Y%m%d-%H%M%S", time.localtime(stamp))
    who = (f"pop{len(population.members(config))}" if config.population.enabled
           else f"seed{config.seed}")
    return Path("runs") / f"{config.env}-{who}-{when}"


def prepare_run_dir(run_dir: Path, resume: bool = False) -> None:
    """A fresh run never writes into a directory that already holds a run (``resume``: the
    run in it continues, or starts if it saved no checkpoint yet)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunError(f"--run-dir {run_dir} exists and is not a directory")
    if not resume and run_dir.is_dir() and any(
            (run_dir / name).exists() for name in ("metrics.jsonl", "summary.json", "checkpoints")):
        raise RunError(f"run directory {run_dir} already holds a run; pass --resume to continue "
                       f"it or choose another --run-dir")


def nothing_to_resume(run_dir: Path, existed: bool) -> str:
    """The line a ``--resume`` that finds no complete checkpoint prints before it trains from
    update 0: there is nothing saved to lose, and a requeued job passes --resume before its
    first checkpoint as after it."""
    why = "holds no complete checkpoint" if existed else "does not exist yet"
    return (f"--resume: {run_dir} {why}, so there is nothing to resume; starting the run "
            f"from update 0")
