"""The distributed runtime: one idempotent initialize/shutdown and process-level helpers.

Workers learn their place in the job from environment variables (set by
``python -m jaxrl_dist.launch``, or by hand under ``srun``/``mpirun``; the contract is
``protocol.WorkerEnv``):

    JAXRL_COORDINATOR       host:port of process 0's coordination service
    JAXRL_NUM_PROCESSES     total number of processes
    JAXRL_PROCESS_ID        this process's global rank
    JAXRL_LOCAL_RANK        rank on this node;  JAXRL_LOCAL_WORLD_SIZE  processes on this node
    JAXRL_AUTO=1            let jax.distributed.initialize() discover SLURM/MPI/TPU/Kubernetes
    JAXRL_BIND_ADDRESS      interface the coordinator listens on (default: the coordinator host)
    JAXRL_INIT_TIMEOUT, JAXRL_HEARTBEAT_TIMEOUT   seconds

JAX's coordination service does rendezvous and health checks; XLA's collectives move the data.
Nothing here sends bytes itself. Helpers below are collectives: EVERY process must call them, in
the same order.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterator

import jax
import numpy as np
from jax.experimental import multihost_utils

from jaxrl_dist.protocol import EXIT_PREEMPTED, WorkerEnv  # noqa: F401 (EXIT_PREEMPTED: API)

DEFAULT_INIT_TIMEOUT = 60
DEFAULT_HEARTBEAT_TIMEOUT = 10   # a dead peer takes the job down in well under 30 s
DEFAULT_SHUTDOWN_TIMEOUT = 30

_initialized_here = False


def initialize() -> None:
    """Join the job described by the worker variables (:class:`protocol.WorkerEnv`); a no-op
    for a single process. Incomplete variables are a :class:`protocol.ContractError`.

    Idempotent: safe to call from a custom script and again from the trainer.
    """
    global _initialized_here
    worker = WorkerEnv.from_env(os.environ)
    if _initialized_here or not worker.in_job:
        return
    kwargs: dict[str, Any] = dict(
        initialization_timeout=worker.init_timeout or DEFAULT_INIT_TIMEOUT,
        heartbeat_timeout_seconds=worker.heartbeat_timeout or DEFAULT_HEARTBEAT_TIMEOUT,
        shutdown_timeout_seconds=DEFAULT_SHUTDOWN_TIMEOUT,
    )
    if not worker.auto:
        kwargs.update(
            coordinator_address=worker.coordinator,
            num_processes=worker.num_processes,
            process_id=worker.process_id,
            # Listen only on the interface we were given, not on every interface.
            coordinator_bind_address=worker.bind_address or worker.coordinator,
        )
        if worker.local_device_ids:
            kwargs["local_device_ids"] = [int(x) for x in worker.local_device_ids.split(",")]
    jax.distributed.initialize(**kwargs)
    _initialized_here = True
    if worker.num_processes is not None and jax.process_count() != worker.num_processes:
        raise RuntimeError(f"joined a job of {jax.process_count()} processes but "
                           f"JAXRL_NUM_PROCESSES={worker.num_processes}")


def shutdown() -> None:
    """Leave the job cleanly (waits for the other processes at JAX's shutdown barrier)."""
    global _initialized_here
    if _initialized_here:
        jax.distributed.shutdown()
        _initialized_here = False


@contextlib.contextmanager
def distributed_context() -> Iterator[None]:
    """Initialize on entry, always shut down on exit (the DDPContext pattern).

    On an exception in a multi-process job the traceback is printed and the process exits at
    once (:func:`fail_fast`): JAX's blocking shutdown barrier would otherwise hold it for minutes
    and turn its exit code into SIGABRT. Peers are then brought down by the launcher or by JAX's
    heartbeat.
    """
    initialize()
    try:
        yield
    except BaseException as error:
        if _initialized_here:
            fail_fast(error)
        raise
    shutdown()


def exit_code_for(error: BaseException) -> int:
    if isinstance(error, SystemExit):
        code = error.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    if isinstance(error, KeyboardInterrupt):
        return 130
    return 1


def fail_fast(error: BaseException) -> None:
    """Print ``error`` and leave without JAX's shutdown barrier, keeping the real exit code."""
    import sys
    import traceback

    if not isinstance(error, SystemExit):
        traceback.print_exception(error)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code_for(error))


def process_index() -> int:
    return jax.process_index()


def process_count() -> int:
    return jax.process_count()


def is_main_process() -> bool:
    return jax.process_index() == 0


def barrier(name: str) -> None:
    """Wait until every process reaches ``name`` (a collective)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def broadcast(value: Any) -> Any:
    """Process 0's ``value`` (a pytree of numbers/arrays) on every process."""
    if jax.process_count() == 1:
        return value
    return jax.tree.map(np.asarray, multihost_utils.broadcast_one_to_all(value))


def allgather(value: Any) -> np.ndarray:
    """Stack every process's host value along a new leading axis (index = process)."""
    if jax.process_count() == 1:
        return np.asarray(value)[None]
    return np.asarray(multihost_utils.process_allgather(np.asarray(value)))


def exchange_text(name: str, value: str, timeout_s: float = 120.0) -> list[str]:
    """Every process's ``value``, by rank, through JAX's coordination service: no device
    program runs, so it works where the devices could not run one together."""
    if jax.process_count() == 1:
        return [value]
    from jax._src import distributed as jax_distributed

    client = jax_distributed.global_state.client
    timeout_ms = int(timeout_s * 1000)
    client.key_value_set(f"jaxrl_dist/{name}/{jax.process_index()}", value)
    values = [client.blocking_key_value_get(f"jaxrl_dist/{name}/{rank}", timeout_ms)
              for rank in range(jax.process_count())]
    # Nobody leaves before everybody has read: a caller that raises on what it read (a check
    # that fails) would otherwise take rank 0's coordination service down under a process
    # still reading, which then dies of a connection error instead of the check's message.
    client.wait_at_barrier(f"jaxrl_dist/{name}/read", timeout_ms)
    return values


def allreduce_sum(value: Any) -> np.ndarray:
    """Sum of a host scalar/array over processes."""
    return allgather(value).sum(axis=0)


# ------------------------------------------------------------------------------------------------
# Worker-side supervision hooks (used by the trainer; inert without the launcher's env vars)

_stop_requested = False


def install_worker_hooks() -> Callable[[], None]:
    """SIGUSR1 dumps every thread's Python stack (the launcher's hang probe). In a single
    process, SIGTERM/SIGINT request a stop at the next update boundary; in a multi-process job
    JAX's preemption service owns SIGTERM (see :func:`should_stop`). Call after initialize().
    Returns a function that puts the previous handlers back."""
    import faulthandler
    import signal
    import sys

    global _stop_requested
    _stop_requested = False
    restore: list[Callable[[], None]] = []
    try:
        faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True,
                              chain=False)
        restore.append(lambda: faulthandler.unregister(signal.SIGUSR1))
    except (AttributeError, ValueError, OSError):  # no real stderr (embedded interpreters)
        pass

    def request_stop(signum, frame):
        global _stop_requested
        if _stop_requested:  # second signal: give up on a clean stop
            os._exit(128 + signum)
        _stop_requested = True

    signals = [] if jax.process_count() > 1 else [signal.SIGTERM, signal.SIGINT]
    for sig in signals:
        try:
            previous = signal.signal(sig, request_stop)
        except ValueError:  # not the main thread: leave signals alone
            break
        restore.append(lambda sig=sig, previous=previous: signal.signal(sig, previous))

    def undo() -> None:
        for fn in reversed(restore):
            fn()

    return undo


def should_stop(step: int) -> bool:
    """Whether to stop at ``step``, decided identically on every process (a collective).

    Multi-process: JAX's preemption service receives SIGTERM on any process, and the
    coordination service agrees on a step that every process reaches (no device collective,
    so checking it at every call costs nothing until a notice arrives). ``step`` must count
    0, 1, 2, ... (the agreed step is the largest step seen + 1).
    """
    if jax.process_count() == 1:
        return _stop_requested
    return bool(multihost_utils.reached_preemption_sync_point(step))


_phase = None


def heartbeat(phase: str = "train") -> None:
    """Tell the launcher this worker is making progress: touches JAXRL_HEARTBEAT_FILE, whose
    content is the phase. The launcher's hang timeout applies in the "train" phase only, so a
    long compile is not mistaken for a hang."""
    global _phase
    path = os.environ.get("JAXRL_HEARTBEAT_FILE")
    if not path:
        return
    if phase != _phase:
        with open(path, "w") as f:
            f.write(phase)
        _phase = phase
    else:
        os.utime(path)


def write_error_file(error: BaseException) -> None:
    """Leave the traceback where the launcher's failure summary will find it."""
    path = os.environ.get("JAXRL_ERROR_FILE")
    if path:
        import traceback

        with open(path, "w") as f:
            f.write("".join(traceback.format_exception(error)))


def maybe_inject_fault(updates_done: int) -> None:
    """Test hook, inert unless JAXRL_FAULT is set: ``KIND@RANK:UPDATE`` makes process RANK
    ``raise``, ``exit`` (code 3), ``hang`` or ``kill`` (SIGKILL itself) once it has completed
    UPDATE updates. With JAXRL_FAULT_ONCE=PATH it fires only if PATH does not exist yet."""
    spec = os.environ.get("JAXRL_FAULT")
    if not spec:
        return
    kind, _, where = spec.partition("@")
    rank, _, update = where.partition(":")
    if jax.process_index() != int(rank) or updates_done < int(update):
        return
    once = os.environ.get("JAXRL_FAULT_ONCE")
    if once:
        if os.path.exists(once):
            return
        open(once, "w").close()
    if kind == "raise":
        raise RuntimeError(f"injected fault on rank {rank} after update {updates_done}")
    if kind == "exit":
        os._exit(3)
    if kind == "kill":
        import signal
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "hang":
        import time
        while True:
            time.sleep(1)
    raise ValueError(f"JAXRL_FAULT: unknown kind {kind!r} (raise, exit, kill, hang)")
