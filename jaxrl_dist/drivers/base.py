"""What every driver gives the trainer, and the steps they share (compile timing, init or
restore)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, NamedTuple, Sequence

from jaxrl_dist.envs import EnvSpec


class Ready(NamedTuple):
    """A driver's programs compiled and the run's state initialised or restored."""

    state: Any
    updates_done: int
    compiled: dict[int, Any]   # updates per call -> (RunState) -> (RunState, metrics {name: [n]}:
                               #   a dict, or packed.Packed read as one)
    evaluate: Any              # (train, seed key(s), env inputs) -> {"return_mean", ...}
    seconds: dict[str, float]  # per program: trace + lower, then compile (a program still
                               #   compiling in the background adds its time when done)
    exploit: Any = None        # with PBT: (train, pbt, seed key, fitness) -> (train, pbt,
                               #   pbt.Round), compiled once for every round of the run


class Seconds(dict):
    """Seconds per program, summed over its parts; ``timed`` runs a call and adds its time
    (from the compile workers' threads too, hence the lock)."""

    _lock = threading.Lock()

    def timed(self, name: str, fn: Callable, *args: Any) -> Any:
        begin = time.perf_counter()
        out = fn(*args)
        with self._lock:
            self[name] = self.get(name, 0.0) + time.perf_counter() - begin
        return out


def init_or_restore(learner: Any, seed_keys: Any, swept: Any,
                    restore: Callable[[Any], tuple[Any, int]] | None) -> tuple[Any, int]:
    """The learner's initial state (compiled with the run-once options), or, given
    ``restore``, a checkpoint restored into its shapes and shardings; with its update count."""
    state = learner.init(seed_keys, swept)
    return restore(state) if restore is not None else (state, 0)


def lower_exploit(learner: Any, abstract: Any) -> Any:
    """The PBT round's program lowered for ``abstract`` (the state's ShapeDtypeStructs), or
    None without PBT: the fitness is the state's own window, or an evaluation's [M]."""
    if learner.exploit is None:
        return None
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    layout = learner.layout
    key = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=layout.sharding(P()))
    fitness = None
    if learner.pbt.fitness == "eval":
        fitness = jax.ShapeDtypeStruct((layout.members,), jnp.float32,
                                       sharding=layout.sharding(layout.train))
    return learner.exploit.lower(abstract.train, abstract.pbt, key, fitness)


class Driver:
    """One environment kind's way of running updates (see :mod:`jaxrl_dist.drivers`)."""

    # The environments step on the processes' CPUs: their results must agree across
    # processes, so the CPUs' vector extensions must too (integrity.check_vector_extensions).
    steps_on_cpus = False

    def __init__(self, spec: EnvSpec, devices: Sequence[Any] | None):
        self.spec = spec
        self.devices = devices   # the learner's mesh spans these (None: all)

    def compile_and_init(self, *, learner: Any, sizes: Any, seed_keys: Any, swept: Any,
                         restore: Callable[[Any], tuple[Any, int]] | None,
                         eval_episodes: int, eval_deterministic: bool) -> Ready:
        raise NotImplementedError

    def describe(self) -> str:
        """What the start line says about how this driver acts ("" if nothing)."""
        return ""

    def row_end(self, stamp: Callable[[], Any]) -> Any:
        """Where a call's metrics row ends: ``stamp()`` taken now if the call returned when its
        work was done (synchronous), else None (the row ends when its metrics are read)."""
        return None

    def close(self) -> None:
        """Release what the driver opened (environments, their workers)."""
