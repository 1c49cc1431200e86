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


def prepare_run_dir(run_dir: Path) -> None:
    """A fresh run never writes into a directory that already holds a run."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunError(f"--run-dir {run_dir} exists and is not a directory")
    if run_dir.is_dir() and any((run_dir / name).exists()
                                for name in ("metrics.jsonl", "summary.json", "checkpoints")):
        raise RunError(f"run directory {run_dir} already holds a run; pass --resume to continue "
                       f"it or choose another --run-dir")
