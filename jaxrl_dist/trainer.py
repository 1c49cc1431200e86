"""The training run: config -> mesh -> compiled programs -> host loop -> summary.

Every process runs this same code in the same order (SPMD). Only printing and file writes sit
behind ``is_main``; every jitted call and collective is made by all processes.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, Sequence

import jax
import numpy as np

import jaxrl_dist
from jaxrl_dist import config as config_lib
from jaxrl_dist import distributed, reporting, sharding
from jaxrl_dist.config import Config, ConfigError
from jaxrl_dist.envs import make_env
from jaxrl_dist.update import make_programs


class RunError(RuntimeError):
    """A problem with the run directory or the job's processes; one line for the user."""


def param_stats(params: Any) -> tuple[float, str]:
    """(L2 norm of all parameters in float64, sha256 hex digest of every parameter's bytes)."""
    leaves = [np.asarray(x) for x in jax.tree.leaves(sharding.to_host(params))]
    norm = float(np.sqrt(sum(np.sum(np.square(x.astype(np.float64))) for x in leaves)))
    digest = hashlib.sha256()
    for leaf in leaves:
        digest.update(np.ascontiguousarray(leaf).tobytes())
    return norm, digest.hexdigest()


def _digest_int(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:7], 16)


def check_processes_agree(config: Config) -> None:
    """Stop every process if they differ in config, package or JAX version (a collective)."""
    if distributed.process_count() == 1:
        return
    import yaml

    mine = np.array([_digest_int(yaml.safe_dump(config_lib.to_dict(config))),
                     _digest_int(jaxrl_dist.__version__), _digest_int(jax.__version__)], np.int32)
    everyone = distributed.allgather(mine)
    for column, what in enumerate(("config", "jaxrl_dist version", "jax version")):
        differ = [rank for rank in range(len(everyone))
                  if everyone[rank, column] != everyone[0, column]]
        if differ:
            raise RunError(f"processes disagree on the {what}: rank(s) {differ} differ from "
                           f"rank 0; start every process with the same config and install")


def default_run_dir(config: Config) -> Path:
    stamp = int(distributed.broadcast(np.int32(int(time.time()))))
    when = time.strftime("%Y%m%d-%H%M%S", time.localtime(stamp))
    return Path("runs") / f"{config.env}-seed{config.seed}-{when}"


def prepare_run_dir(run_dir: Path) -> None:
    """A fresh run never writes into a directory that already holds a run."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunError(f"--run-dir {run_dir} exists and is not a directory")
    if run_dir.is_dir() and any((run_dir / name).exists()
                                for name in ("metrics.jsonl", "summary.json", "checkpoints")):
        raise RunError(f"run directory {run_dir} already holds a run; pass --resume to continue "
                       f"it or choose another --run-dir")


def train(
    config: Config,
    run_dir: str | Path | None = None,
    *,
    env: Any = None,
    env_params: Any = None,
    devices: Sequence[jax.Device] | None = None,
    progress: bool = True,
    write_files: bool = True,
) -> dict[str, Any]:
    """Train PPO on every device (of every process); returns the run summary.

    ``env`` may be a user's gymnax-style environment object instead of ``config.env``.
    """
    start = time.perf_counter()
    distributed.initialize()
    distributed.install_worker_hooks()
    distributed.heartbeat("setup")
    is_main = distributed.is_main_process()

    # ------------------------------------------------------------------ SETUP
    mesh = sharding.make_mesh(devices)
    sizes = config_lib.derive_sizes(config, mesh.size)
    spec = make_env(config.env if env is None else env, env_params)
    check_processes_agree(config)
    run_dir = Path(run_dir) if run_dir is not None else default_run_dir(config)
    if write_files and is_main:
        prepare_run_dir(run_dir)
    distributed.barrier("run_dir_checked")

    programs = make_programs(config, sizes, spec, mesh)
    k = min(config.updates_per_call, sizes.num_updates)
    calls = [k] * (sizes.num_updates // k) + ([sizes.num_updates % k]
                                               if sizes.num_updates % k else [])
    compile_start = time.perf_counter()
    state = programs.init()
    compiled = {n: programs.update.lower(state, n).compile() for n in sorted(set(calls))}
    jax.block_until_ready(state)
    compile_time = time.perf_counter() - compile_start

    reporter: reporting.NullReporter = reporting.NullReporter()
    if write_files and is_main:
        reporter = reporting.RunReporter(run_dir, sizes.num_updates * sizes.batch_size, progress)
    reporter.start(config_lib.to_dict(config))
    reporter.message(
        f"jaxrl_dist: {spec.name} | {sizes.num_devices} device(s) x {sizes.local_envs} envs, "
        f"{distributed.process_count()} process(es) | {sizes.num_updates} updates of "
        f"{sizes.batch_size} steps | compiled in {compile_time:.1f}s | run dir {run_dir}")

    # ------------------------------------------------------------------ TRAIN
    # The host logs the PREVIOUS call's metrics after dispatching the next call, so reading
    # metrics back never leaves the devices idle.
    rows: list[dict[str, Any]] = []
    updates_done = 0
    last_time = loop_start = time.perf_counter()
    pending = None

    def emit(item) -> None:
        nonlocal last_time
        metrics, updates_after, num_in_call = item
        row = reporting.aggregate(sharding.to_host(metrics))
        now = time.perf_counter()
        row = {"env_steps": updates_after * sizes.batch_size, "updates": updates_after,
               "sps": num_in_call * sizes.batch_size / max(now - last_time, 1e-9),
               "time_s": now - start, **row}
        last_time = now
        rows.append(row)
        reporter.log(row)
        distributed.heartbeat()

    distributed.heartbeat()
    status = "completed"
    for call_index, n in enumerate(calls):
        state, metrics = compiled[n](state)
        updates_done += n
        if pending is not None:
            emit(pending)
        pending = (metrics, updates_done, n)
        distributed.maybe_inject_fault(updates_done)
        if distributed.should_stop(call_index):
            status = "preempted"
            reporter.message(f"stop requested: stopping after update {updates_done}")
            break
    if pending is not None:
        emit(pending)
    jax.block_until_ready(state)
    loop_time = time.perf_counter() - loop_start

    # ------------------------------------------------------------------ SUMMARY
    norm, digest = param_stats(state.train.params)
    returns = [r["episode_return"] for r in rows if r["episode_return"] is not None]
    summary = {
        "env": spec.name,
        "status": status,
        "env_steps": updates_done * sizes.batch_size,
        "updates": updates_done,
        "wall_time_s": time.perf_counter() - start,
        "compile_time_s": compile_time,
        "sps": updates_done * sizes.batch_size / max(loop_time, 1e-9),
        "final_return": returns[-1] if returns else None,
        "best_return": max(returns) if returns else None,
        "param_norm": norm,
        "param_fingerprint": digest,
        "num_devices": sizes.num_devices,
        "num_processes": distributed.process_count(),
        "jax_version": jax.__version__,
        "jaxrl_dist_version": jaxrl_dist.__version__,
        "run_dir": str(run_dir),
    }
    reporter.finish(summary)
    return summary


__all__ = ["train", "param_stats", "RunError", "ConfigError"]
