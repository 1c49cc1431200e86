"""Checkpoints of the WHOLE run state with orbax: params, optimizer, environments, keys,
counters and normaliser statistics, plus a JSON record of the config and progress.

orbax writes each checkpoint into a temporary directory and renames it when complete, so a crash
mid-save leaves the previous checkpoint as the latest. Saves are asynchronous: arrays are copied
to host memory, training continues, and files are written in the background (the next save,
``wait`` and ``close`` wait for it). Every process takes part in save and
restore (each writes/reads its shards of the global arrays). Restoring into the shardings of a
different mesh reshards, which is how a run saved on one topology resumes on another. No pickle
is involved: arrays go to tensorstore, metadata to JSON.

Each checkpoint holds three items: ``state`` (the slots of the run state the learner marks as
saved; the others are rebuilt on resume), ``meta`` (JSON: progress, the config, and the
``policy`` record of what the policy needs: algorithm, its section, observation and action
specs) and ``policy`` (the arrays the deployed policy needs), so a run directory alone
rebuilds the trained policy (:mod:`jaxrl_dist.policy`).
"""

from __future__ import annotations

from jaxrl_dist.errors import UserError

import contextlib
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import jax

from jaxrl_dist import faults
from jaxrl_dist.types import ActorState, RunState

# Config keys that may change between a run and its resumption: they steer bookkeeping only,
# not what is computed. Everything else must match the checkpoint.
RESUMABLE_CHANGES = ("updates_per_call", "checkpoint_every", "keep_checkpoints", "eval_every",
                     "eval_episodes", "target_return", "solved_return", "checkpoint_minutes",
                     "check_replicas_every", "check_replicas_minutes", "compile_cache",
                     "max_nonfinite_skips", "wandb",
                     # how the devices split the gradient's sum (as a topology change does):
                     # rounding, not the algorithm; auto decides anew on the resumed topology
                     "replicate_learn")


class CheckpointError(UserError):
    """Missing, unreadable or incompatible checkpoint; one line for the user."""


def _ocp():
    import orbax.checkpoint as ocp

    faults.quiet_background_failures()
    return ocp


class Checkpointer:
    """``saved``: which slots of the run state a checkpoint holds (the learner's
    ``checkpointed``); ``policy_params``: train state -> the deployed policy's arrays."""

    def __init__(self, directory: str | Path, keep: int = 3,
                 saved: RunState = RunState(True, True, True), policy_params: Any = None):
        ocp = _ocp()
        self.directory = Path(directory).absolute()
        self.saved = tuple(name for name, keep_it in saved._asdict().items() if keep_it)
        self.policy_params = policy_params
        self._writing: int | None = None   # the step of the save in flight
        self._manager = ocp.CheckpointManager(
            self.directory,   # tmp dirs of a save cut short (kill -9) are removed at start
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                                 enable_async_checkpointing=True,
                                                 cleanup_tmp_directories=True),
            item_handlers={"state": ocp.StandardCheckpointHandler(),
                           "meta": ocp.JsonCheckpointHandler(),
                           "policy": ocp.StandardCheckpointHandler()})

    def latest_step(self) -> int | None:
        self.wait()
        return self._manager.latest_step()

    def wait(self) -> None:
        """Block until a save in progress is complete on disk."""
        self._guard(self._manager.wait_until_finished)
        self._writing = None

    def check(self) -> None:
        """Raise now if a save running in the background has failed (waits only for orbax's
        small metadata writes)."""
        self._guard(self._manager.check_for_errors)

    def _guard(self, call: Callable[[], Any]) -> Any:
        """Run an orbax call; a failed write becomes one :class:`faults.StorageError` line
        naming the checkpoint, after its half-written directory is removed (the previous
        complete checkpoint stays the latest)."""
        try:
            return call()
        except Exception as e:   # orbax re-raises tensorstore's errors as ValueError
            if faults.storage_reason(e) is None:
                raise
            step, self._writing = self._writing, None
            with _muted_stderr():   # tensorstore writes still in flight fail and print
                time.sleep(1.0)     # into orbax's closed event loop; let them settle first
                removed = self._remove_partial()
            what = f"checkpoint {step}" if step is not None else "a checkpoint"
            raise faults.storage_error(
                f"writing {what} to", self.directory, e,
                f" (the half-written {', '.join(removed)} was removed)" if removed else ""
            ) from None

    def _remove_partial(self) -> list[str]:
        removed = []
        for path in sorted(self.directory.glob("*.orbax-checkpoint-tmp*")):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
        return removed

    def save(self, state: RunState, meta: dict[str, Any]) -> None:
        """Save at step ``meta["updates"]`` (a collective: every process calls it)."""
        ocp = _ocp()
        slots = {name: getattr(state, name) for name in self.saved
                 if jax.tree.leaves(getattr(state, name))}   # () data: nothing to save
        items = dict(state=ocp.args.StandardSave(_without_empty(slots)),
                     meta=ocp.args.JsonSave(meta))
        if self.policy_params is not None:
            items["policy"] = ocp.args.StandardSave(self.policy_params(state.train))
        self.wait()   # the previous save's failure is reported as its own
        self._writing = int(meta["updates"])
        self._guard(lambda: self._manager.save(int(meta["updates"]),
                                               args=ocp.args.Composite(**items), force=True))

    def restore(self, like: RunState) -> tuple[RunState, dict]:
        """Restore the latest checkpoint into the shapes and shardings of ``like`` (a state on
        the CURRENT mesh)."""
        ocp = _ocp()
        step = self.latest_step()
        if step is None:
            raise CheckpointError(f"no checkpoint in {self.directory}")
        def abstract(tree):
            return jax.tree.map(
                lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                _without_empty(tree))

        try:
            with _quiet_stderr_on_failure():
                stored = self._stored_slots(step)
                if "envs" in stored and "actors" not in stored:   # written before the
                    # learner shape (RunState(train, envs)): the environments are now the
                    # actors' env slot, and nothing else was saved
                    target = {"train": like.train, "envs": like.actors.env}
                else:
                    target = {name: getattr(like, name) for name in self.saved
                              if name in stored}
                restored = self._manager.restore(
                    step, args=ocp.args.Composite(state=ocp.args.StandardRestore(
                        abstract(target)), meta=ocp.args.JsonRestore()))
        except Exception as e:  # orbax/tensorstore raise many types for damaged files
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            raise CheckpointError(f"checkpoint {step} in {self.directory} is unreadable "
                                  f"({type(e).__name__}: {first}); nothing was changed") from None
        slots = dict(restored.state)
        if "envs" in slots:
            slots["actors"] = ActorState(slots.pop("envs"), like.actors.carry)
        loaded = like._replace(**{name: jax.tree.map(lambda x, r: x if x.size == 0 else r,
                                                     getattr(like, name), slot)
                                  for name, slot in slots.items()})
        return loaded, dict(restored.meta)

    def _stored_slots(self, step: int) -> set[str]:
        """Top-level names of a checkpoint's state item."""
        tree = self._manager.item_metadata(step)["state"]
        return set(getattr(tree, "tree", tree) or {})

    def close(self) -> None:
        self.wait()
        self._manager.close()


def _without_empty(tree: Any) -> Any:
    """The tree with zero-size arrays as None: orbax refuses to save them (MJX physics states
    have some, e.g. ``act`` of a model without activation states). They hold no data; restore
    takes them from the state it restores into."""
    return jax.tree.map(lambda x: None if x.size == 0 else x, tree)


@contextlib.contextmanager
def _muted_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null inside the block (C++ threads write there too)."""
    sys.stderr.flush()
    saved = os.dup(2)
    sink = os.open(os.devnull, os.O_WRONLY)
    os.dup2(sink, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(sink)


@contextlib.contextmanager
def _quiet_stderr_on_failure(grace_s: float = 1.0) -> Iterator[None]:
    """Send file descriptor 2 to /dev/null while a restore runs, and on failure for ``grace_s``
    more: when one read of a damaged checkpoint fails, tensorstore reads still in flight complete
    into orbax's closed event loop and print "Event loop is closed" tracebacks from C++ threads,
    burying the one-line error. The real cause is in the exception we raise."""
    with _muted_stderr():
        try:
            yield
        except Exception:
            time.sleep(grace_s)
            raise


def check_compatible(saved: dict[str, Any], current: dict[str, Any], prefix: str = "") -> None:
    """Raise CheckpointError naming the first config key that differs from the checkpoint."""
    for key in sorted(set(saved) | set(current)):
        if not prefix and key in RESUMABLE_CHANGES:
            continue
        a, b = saved.get(key), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            check_compatible(a, b, f"{prefix}{key}.")
        elif a != b:
            raise CheckpointError(
                f"config key '{prefix}{key}' is {b!r} but the checkpoint was trained with {a!r};"
                f" resume with the run's own config (its config.yaml) or start a new run")


def read_checkpoint(directory: str | Path, step: int | None = None, item: str = "state"
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
    """A checkpoint's ``item`` (``state``, or ``policy``: the deployed policy's arrays) as plain
    nested dicts of numpy arrays, plus its metadata, for use in one process, whatever topology
    wrote it (arrays are gathered onto one local device)."""
    import numpy as np

    ocp = _ocp()
    directory = Path(directory).absolute()
    if not directory.is_dir():
        raise CheckpointError(f"no checkpoint directory {directory}")
    manager = ocp.CheckpointManager(
        directory, options=ocp.CheckpointManagerOptions(read_only=True),
        item_handlers={"state": ocp.StandardCheckpointHandler(),
                       "meta": ocp.JsonCheckpointHandler(),
                       "policy": ocp.StandardCheckpointHandler()})
    try:
        step = manager.latest_step() if step is None else step
        if step is None:
            raise CheckpointError(f"no checkpoint in {directory}")
        if step not in manager.all_steps():
            raise CheckpointError(f"no checkpoint {step} in {directory} (it has "
                                  f"{', '.join(map(str, sorted(manager.all_steps())))})")
        tree = manager.item_metadata(step).get(item)
        if tree is None:
            raise CheckpointError(f"checkpoint {step} in {directory} has no '{item}' item "
                                  f"(written by an older version: train with this one)")
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device),
                              getattr(tree, "tree", tree))
        restored = manager.restore(step, args=ocp.args.Composite(
            **{item: ocp.args.StandardRestore(target)}, meta=ocp.args.JsonRestore()))
    finally:
        manager.close()
    return jax.tree.map(np.asarray, restored[item]), dict(restored.meta)
