"""The training run: config -> mesh -> compiled programs -> host loop -> summary.

Every process runs this same code in the same order (SPMD). Only printing and file writes sit
behind ``is_main``; every jitted call, checkpoint save and collective is made by all processes,
and every decision that changes what runs next (stop, early stop) is taken from values that are
identical on all processes.
"""

from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import jax
import numpy as np

import jaxrl_dist
from jaxrl_dist import config as config_lib
from jaxrl_dist import distributed, reporting, sharding
from jaxrl_dist.checkpoint import CheckpointError, Checkpointer, check_compatible
from jaxrl_dist.config import Config, ConfigError
from jaxrl_dist.envs import make_env
from jaxrl_dist.evaluate import make_eval_program
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


def _digest_int(data: bytes | str) -> int:
    data = data.encode() if isinstance(data, str) else data
    return int(hashlib.sha256(data).hexdigest()[:7], 16)


def _allgather_compare(values: list[int], names: list[str], what: str) -> None:
    """Stop every process if any differs from rank 0 in one of ``values``."""
    everyone = distributed.allgather(np.array(values, np.int32))
    for column, name in enumerate(names):
        differ = [r for r in range(len(everyone)) if everyone[r, column] != everyone[0, column]]
        if differ:
            raise RunError(f"processes disagree on the {name}: rank(s) {differ} differ from "
                           f"rank 0; {what}")


def check_processes_agree(config: Config) -> None:
    """Config, package and JAX versions must match on every process (a collective)."""
    if distributed.process_count() == 1:
        return
    import yaml

    _allgather_compare(
        [_digest_int(yaml.safe_dump(config_lib.to_dict(config))),
         _digest_int(jaxrl_dist.__version__), _digest_int(jax.__version__)],
        ["config", "jaxrl_dist version", "jax version"],
        "start every process with the same config and install")


def check_replicas(params: Any) -> None:
    """Every device of every process must hold bit-identical parameters (a collective)."""
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(params):
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        if any(not np.array_equal(shards[0], s) for s in shards[1:]):
            raise RunError(f"parameter replicas differ between the local devices of process "
                           f"{distributed.process_index()}")
        digest.update(shards[0].tobytes())
    if distributed.process_count() > 1:
        _allgather_compare([_digest_int(digest.digest())], ["parameter fingerprint"],
                           "replicas have diverged (non-deterministic ops or a bad device)")


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


def _crossed(every: int, before: int, after: int) -> bool:
    """Whether a multiple of ``every`` lies in (before, after]."""
    return every > 0 and after // every > before // every


def train(
    config: Config,
    run_dir: str | Path | None = None,
    *,
    resume: bool = False,
    env: Any = None,
    env_params: Any = None,
    devices: Sequence[jax.Device] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train PPO on every device (of every process); returns the run summary.

    ``env`` may be a user's gymnax-style environment object instead of ``config.env``.
    ``resume`` continues the run in ``run_dir`` from its latest complete checkpoint.
    """
    start = time.perf_counter()
    distributed.initialize()
    restore_signals = distributed.install_worker_hooks()
    try:
        return _train(config, run_dir, resume, env, env_params, devices, progress, start)
    finally:
        restore_signals()


def _train(config, run_dir, resume, env, env_params, devices, progress, start):
    distributed.heartbeat("setup")
    is_main = distributed.is_main_process()

    # ------------------------------------------------------------------ SETUP
    mesh = sharding.make_mesh(devices)
    sizes = config_lib.derive_sizes(config, mesh.size)
    spec = make_env(config.env if env is None else env, env_params)
    check_processes_agree(config)
    if resume and run_dir is None:
        raise RunError("--resume needs the --run-dir of the run to continue")
    run_dir = Path(run_dir) if run_dir is not None else default_run_dir(config)
    ckpt_dir = run_dir / "checkpoints"
    if resume:
        if not ckpt_dir.is_dir():
            raise RunError(f"no checkpoints to resume in {run_dir} (expected {ckpt_dir}); "
                           f"run without --resume to start a new run")
    elif is_main:
        prepare_run_dir(run_dir)
    distributed.barrier("run_dir_checked")

    programs = make_programs(config, sizes, spec, mesh)
    k = sizes.updates_per_call
    call_sizes = {k} | ({sizes.num_updates % k} if sizes.num_updates % k else set())
    checkpointer = Checkpointer(ckpt_dir, keep=config.keep_checkpoints)  # imports orbax
    compile_start = time.perf_counter()
    # Trace the update program, then compile it on a worker thread (XLA releases the GIL)
    # while this thread compiles and runs init and restores a checkpoint.
    abstract = programs.abstract_state()
    lowered = {n: programs.update.lower(abstract, n) for n in sorted(call_sizes)}
    # Evaluated every eval_every updates and always at the end: a run reports what its final
    # policy does, not the best moment of its training curve. Compiled in the pool too.
    eval_key = jax.random.PRNGKey(config.seed)
    lowered_eval = make_eval_program(config, spec, programs.nets, mesh).lower(
        abstract.train.params, abstract.train.obs_moments, eval_key, abstract.train.update)
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        pending_compiles = {n: pool.submit(low.compile) for n, low in lowered.items()}
        pending_eval = pool.submit(lowered_eval.compile)
        state = programs.init(jax.random.PRNGKey(config.seed))
        updates_done = 0
        if resume:
            if checkpointer.latest_step() is None:
                raise CheckpointError(f"no complete checkpoint in {ckpt_dir}; run without "
                                      f"--resume to start a new run")
            state, meta = checkpointer.restore(state)
            check_compatible(meta["config"], config_lib.to_dict(config))
            updates_done = int(meta["updates"])
        compiled = {n: f.result() for n, f in pending_compiles.items()}
        evaluate = pending_eval.result()
    finally:  # on an error, do not wait for the compile: fail at once
        pool.shutdown(wait=False, cancel_futures=True)
    first_update = updates_done
    remaining = sizes.num_updates - updates_done
    calls = [k] * (remaining // k) + ([remaining % k] if remaining % k else [])
    for n in set(calls) - set(compiled):  # a checkpoint saved off this run's call grid
        compiled[n] = programs.update.lower(abstract, n).compile()
    jax.block_until_ready(state)
    compile_time = time.perf_counter() - compile_start

    def meta() -> dict[str, Any]:
        return {"updates": updates_done, "env_steps": updates_done * sizes.batch_size,
                "config": config_lib.to_dict(config), "num_devices": sizes.num_devices,
                "num_processes": distributed.process_count(),
                "jaxrl_dist_version": jaxrl_dist.__version__, "jax_version": jax.__version__}

    if not resume:
        checkpointer.save(state, meta())  # a restart always has a checkpoint to resume from

    reporter: reporting.NullReporter = reporting.NullReporter()
    if is_main:
        reporter = reporting.RunReporter(run_dir, sizes.num_updates * sizes.batch_size, progress)
        if resume:
            reporting.truncate_metrics(run_dir / "metrics.jsonl", updates_done)
    reporter.start(config_lib.to_dict(config), env_steps=updates_done * sizes.batch_size)
    reporter.message(
        f"jaxrl_dist: {spec.name} | {sizes.num_devices} device(s) x {sizes.local_envs} envs, "
        f"{distributed.process_count()} process(es) | {sizes.num_updates} updates of "
        f"{sizes.batch_size} steps{f', resuming at {updates_done}' if resume else ''} | "
        f"compiled in {compile_time:.1f}s | run dir {run_dir}")

    # ------------------------------------------------------------------ TRAIN
    # The host logs the PREVIOUS call's metrics after dispatching the next call, so reading
    # metrics back never leaves the devices idle (unless an eval/checkpoint needs the state).
    rows: list[dict[str, Any]] = []
    evals: list[dict[str, Any]] = []
    last_time = loop_start = time.perf_counter()
    pending = None
    status = "completed"
    solved_at = None

    def emit(item, extra: dict | None = None) -> None:
        nonlocal last_time
        metrics, updates_after, num_in_call = item
        row = reporting.aggregate(sharding.to_host(metrics))
        now = time.perf_counter()
        row = {"env_steps": updates_after * sizes.batch_size, "updates": updates_after,
               "sps": num_in_call * sizes.batch_size / max(now - last_time, 1e-9),
               "time_s": now - start, **row, **(extra or {})}
        last_time = now
        rows.append(row)
        reporter.log(row)
        distributed.heartbeat()

    distributed.heartbeat()
    for call_index, n in enumerate(calls):
        before = updates_done
        state, metrics = compiled[n](state)
        updates_done += n
        if pending is not None:
            emit(pending)
        pending = (metrics, updates_done, n)
        if (_crossed(config.eval_every, before, updates_done)
                or updates_done == sizes.num_updates):
            result = sharding.to_host(evaluate(state.train.params, state.train.obs_moments,
                                               eval_key, state.train.update))
            extra = {f"eval/{k}": float(v) for k, v in result.items()}
            evals.append({"env_steps": updates_done * sizes.batch_size, **extra})
            emit(pending, extra)  # the eval is logged on its own update's row
            pending = None
            if (config.target_return is not None and solved_at is None
                    and extra["eval/return_mean"] >= config.target_return):
                solved_at = updates_done
        distributed.maybe_inject_fault(updates_done)
        if _crossed(config.check_replicas_every, before, updates_done):
            check_replicas(state.train.params)
        preempted = distributed.should_stop(call_index)
        if preempted or _crossed(config.checkpoint_every, before, updates_done):
            checkpointer.save(state, meta())
        if preempted:
            status = "preempted"
            reporter.message(f"stop requested: saved and stopping after update {updates_done}")
            break
        if solved_at is not None:
            status = "solved"
            reporter.message(f"target return {config.target_return} reached after "
                             f"{updates_done} updates; stopping")
            break
    if pending is not None:
        emit(pending)
    jax.block_until_ready(state)
    loop_time = time.perf_counter() - loop_start
    if status != "preempted" and checkpointer.latest_step() != updates_done:
        checkpointer.save(state, meta())
    check_replicas(state.train.params)
    checkpointer.close()

    # ------------------------------------------------------------------ SUMMARY
    norm, digest = param_stats(state.train.params)
    returns = [r["episode_return"] for r in rows if r["episode_return"] is not None]
    steps_this_session = (updates_done - first_update) * sizes.batch_size
    summary = {
        "env": spec.name,
        "status": status,
        "env_steps": updates_done * sizes.batch_size,
        "updates": updates_done,
        "wall_time_s": time.perf_counter() - start,
        "compile_time_s": compile_time,
        "sps": steps_this_session / max(loop_time, 1e-9),
        "final_return": returns[-1] if returns else None,
        "best_return": max(returns) if returns else None,
        "eval_return": evals[-1]["eval/return_mean"] if evals else None,
        "eval_return_std": evals[-1]["eval/return_std"] if evals else None,
        "eval_episodes": config.eval_episodes,
        "solved_return": config.solved_return,
        "solved_at_env_steps": solved_at * sizes.batch_size if solved_at else None,
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


__all__ = ["train", "param_stats", "RunError", "ConfigError", "CheckpointError"]
