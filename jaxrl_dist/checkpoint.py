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

Checkpoints prove themselves: ``meta["digest"]`` records a checksum of every array saved
(:mod:`jaxrl_dist.digest`, computed on the devices that hold the arrays) and of the JSON record,
and a restore recomputes them. A resume skips damaged checkpoints (unreadable, or not holding
what was saved) for the newest intact one, names them, and moves checkpoints newer than the one
it resumes from, as found, to ``<dir>_set_aside/``: never rewritten, out of orbax's rotation and
out of the way of the run's own saves at those steps; only the newest ``keep_checkpoints`` of
them stay there (each holds a whole replay). Checkpoints record their format (``FORMAT``): one
written before digests existed (no format recorded, no digest) is restored unverified; one of
this format whose digest record is missing, or names an algorithm this version does not
compute, is damaged.
"""

from __future__ import annotations

from jaxrl_dist.errors import UserError

import contextlib
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import jax
import numpy as np

from jaxrl_dist import digest, distributed, faults
from jaxrl_dist.quiet import muted
from jaxrl_dist.types import ActorState, RunState

# Config keys that may change between a run and its resumption: they steer bookkeeping only,
# not what is computed. Everything else must match the checkpoint.
RESUMABLE_CHANGES = ("updates_per_call", "checkpoint_every", "keep_checkpoints", "eval_every",
                     "eval_episodes", "target_return", "solved_return", "checkpoint_minutes",
                     "check_replicas_every", "check_replicas_minutes", "compile_cache",
                     "max_nonfinite_skips", "wandb",
                     # a run stopped by a non-finite environment continues with "reset"
                     "env_nonfinite",
                     # how the devices split the gradient's sum (as a topology change does):
                     # rounding, not the algorithm; auto decides anew on the resumed topology
                     "replicate_learn", "replicate_act")


# The checkpoint format a meta record names: 2 = every checkpoint carries a digest. Records
# without the key were written by versions before it (2026-11-28); those without a digest
# also predate digests (2026-11-26) and are the only ones restored unverified.
FORMAT = 2


class CheckpointError(UserError):
    """Missing, unreadable or incompatible checkpoint; one line for the user."""


class DamagedCheckpoint(CheckpointError):
    """A checkpoint that cannot be read or does not hold what its digest says was saved; the
    line names it and the intact ones (or says that none is)."""


def _ocp():
    import orbax.checkpoint as ocp

    faults.quiet_background_failures()
    return ocp


def _unwinding_barrier(ocp) -> Callable[..., None]:
    """Orbax's barrier between processes, except in a thread unwinding an error: there it
    re-raises the error instead of waiting. A save that failed on ONE process (a full disk
    there) skips orbax's commit barrier, and its finaliser then waits at the next barrier
    while its siblings wait at the commit barrier, both for orbax's 20-minute timeout; so
    the failure surfaces at once, the process exits with its one-line error, and the
    launcher stops the siblings."""
    wait = ocp.multihost.get_barrier_sync_fn()

    def barrier(*, key: str, timeout_ms: int) -> None:
        unwinding = sys.exc_info()[1]
        if unwinding is not None:
            raise unwinding
        wait(key=key, timeout_ms=timeout_ms)

    return barrier


class Checkpointer:
    """``saved``: which slots of the run state a checkpoint holds (the learner's
    ``checkpointed``); ``policy_params``: train state -> the deployed policy's arrays."""

    def __init__(self, directory: str | Path, keep: int = 3,
                 saved: RunState = RunState(True, True, True), policy_params: Any = None):
        ocp = _ocp()
        self.directory = Path(directory).absolute()
        self.keep = keep
        self.saved = tuple(name for name, keep_it in saved._asdict().items() if keep_it)
        self.policy_params = policy_params
        self._writing: int | None = None   # the step of the save in flight
        self.resume_from: int | None = None   # the step a resume restores; None: the newest
        self._manager = ocp.CheckpointManager(
            self.directory,   # tmp dirs of a save cut short (kill -9) are removed at start
            options=ocp.CheckpointManagerOptions(
                max_to_keep=keep, create=True, enable_async_checkpointing=True,
                cleanup_tmp_directories=True,
                async_options=ocp.AsyncOptions(barrier_sync_fn=_unwinding_barrier(ocp))),
            item_handlers={"state": ocp.StandardCheckpointHandler(),
                           "meta": ocp.JsonCheckpointHandler(),
                           "policy": ocp.StandardCheckpointHandler()})
        # restores read through the items' handlers, not the manager: orbax's restore ends in
        # a barrier that a process whose read failed never reaches (its siblings would wait
        # there); each read's outcome is agreed below instead
        self._readers = {"state": ocp.StandardCheckpointHandler(),
                         "meta": ocp.JsonCheckpointHandler(),
                         "policy": ocp.StandardCheckpointHandler()}

    def prepare(self, abstract_state: Callable[[], RunState]) -> None:
        """Compile, on a thread, the digest of what saving a state shaped like
        ``abstract_state()`` (ShapeDtypeStructs with shardings) holds, so that the run's first
        save need not wait for it: the state's slots, and the policy's arrays (whose
        shardings come from compiling ``policy_params``)."""
        def items() -> dict[str, Any]:
            abstract = abstract_state()
            slots = {name: getattr(abstract, name) for name in self.saved
                     if jax.tree.leaves(getattr(abstract, name))}
            out = {"state": _without_empty(slots)}
            if self.policy_params is not None:
                shapes = jax.eval_shape(self.policy_params, abstract.train)
                placed = jax.jit(self.policy_params).lower(abstract.train).compile()
                out["policy"] = jax.tree.map(
                    lambda x, sharding: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                             sharding=sharding),
                    shapes, placed.output_shardings)
            return out

        digest.prepare(items)

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
            with muted(2):   # tensorstore writes still in flight fail and print
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
        trees = {"state": _without_empty(slots)}
        if self.policy_params is not None:
            trees["policy"] = self.policy_params(state.train)
        meta = with_digest({**meta, "format": FORMAT}, trees)
        items = dict(state=ocp.args.StandardSave(trees["state"]), meta=ocp.args.JsonSave(meta))
        if "policy" in trees:
            items["policy"] = ocp.args.StandardSave(trees["policy"])
        self.wait()   # the previous save's failure is reported as its own
        self._writing = int(meta["updates"])
        self._guard(lambda: self._manager.save(int(meta["updates"]),
                                               args=ocp.args.Composite(**items), force=True))

    def steps(self) -> list[int]:
        """The complete checkpoints, oldest first, as process 0 lists them: every process
        walks the same list (a collective)."""
        self.wait()
        local = sorted(int(s) for s in self._manager.all_steps(read=True))
        count = int(distributed.broadcast(np.int32(len(local))))
        if count == 0:
            return []
        mine = np.asarray(local if distributed.is_main_process() else [0] * count, np.int32)
        return [int(s) for s in np.asarray(distributed.broadcast(mine))]

    def restore(self, like: RunState, step: int | None = None,
                say: Callable[[str], None] = lambda line: None,
                accept: Callable[[dict], None] = lambda meta: None) -> tuple[RunState, dict]:
        """The newest INTACT checkpoint (or ``step``'s) in the shapes and shardings of
        ``like`` (a state on the CURRENT mesh), with its meta. Damaged ones are skipped;
        ``accept`` may refuse the one found (raising, e.g. for another config); checkpoints
        newer than the one restored are then set aside, each named in one line to ``say``.
        Every process takes the same path: reads are local, verdicts agreed. Nothing on
        disk changes unless a checkpoint is restored."""
        steps = self.steps()
        if not steps:
            raise CheckpointError(f"no checkpoint in {self.directory}")
        if step is not None and step not in steps:
            raise CheckpointError(f"no checkpoint {step} in {self.directory} (it has "
                                  f"{_listing(steps)})")
        policy_like = (self.policy_params(like.train) if self.policy_params is not None
                       else None)   # every process, outside any read that may fail
        damaged: dict[int, str] = {}
        for candidate in [step] if step is not None else reversed(steps):
            outcome = self._verified(like, policy_like, candidate)
            if isinstance(outcome, str):
                damaged[candidate] = outcome
                continue
            accept(outcome[1])
            self._set_aside([s for s in steps if s > candidate], damaged, candidate, say)
            return outcome
        if step is not None:
            raise DamagedCheckpoint(f"checkpoint {step} in {self.directory} is damaged: "
                                    f"{damaged[step]}; nothing was changed (its checkpoints: "
                                    f"{_listing(steps)})")
        raise DamagedCheckpoint(f"no intact checkpoint in {self.directory}: " + "; ".join(
            f"{s} {why}" for s, why in damaged.items()) + "; nothing was changed. Start the "
            f"run anew without --resume (in another --run-dir, or after moving "
            f"{self.directory} away), or resume with the jaxrl_dist version that wrote them "
            f"if it differs")

    def _verified(self, like: RunState, policy_like: Any, step: int
                  ) -> tuple[RunState, dict] | str:
        """Checkpoint ``step`` restored and checked against its digest, or why not. Two
        agreements keep the processes in step: whether every read succeeded (before any
        collective runs on what was read), then whether every process found it intact."""
        outcome = self._read(like, policy_like, step)
        read = not isinstance(outcome, str)
        if read and (missing := _digest_missing(outcome[1])):
            outcome, read = missing, False
        checkable = read and _checkable(outcome[1])
        if not read and not distributed.is_main_process():   # for this rank's own log
            print(f"process {distributed.process_index()}: checkpoint {step} in "
                  f"{self.directory} is {outcome}", file=sys.stderr, flush=True)
        everyone = distributed.allgather(np.array([read, checkable], np.int32))
        if not everyone[:, 0].all():
            return outcome if not read else (
                f"unreadable on process(es) {_ranks(everyone[:, 0] == 0)} (their logs say why)")
        loaded, meta, trees = outcome
        if not everyone[:, 1].any():   # written before checkpoints had a digest (no format)
            return loaded, meta
        problem = (_digest_problem(meta, step, trees) if everyone[:, 1].all()
                   else "its meta record differs between processes")
        bad = distributed.allgather(np.int32(problem is not None))
        if bad.any():
            return problem or f"not what was saved on process(es) {_ranks(bad == 1)}"
        return loaded, meta

    def _read(self, like: RunState, policy_like: Any, step: int
              ) -> tuple[RunState, dict, dict[str, Any]] | str:
        """This process's part of checkpoint ``step``: the state in ``like``'s shapes and
        shardings, the meta, and the trees as read (the policy's only when a digest covers
        it); or why it could not be read."""
        ocp = _ocp()
        path = self.directory / str(step)
        try:
            with _quiet_stderr_on_failure():
                meta = dict(self._readers["meta"].restore(path / "meta",
                                                          args=ocp.args.JsonRestore()))
                stored = self._stored_slots(path)
                if "envs" in stored and "actors" not in stored:   # written before the
                    # learner shape (RunState(train, envs)): the environments are now the
                    # actors' env slot, and nothing else was saved
                    target = {"train": like.train, "envs": like.actors.env}
                else:
                    target = {name: getattr(like, name) for name in self.saved
                              if name in stored}
                trees = {"state": self._readers["state"].restore(
                    path / "state", args=ocp.args.StandardRestore(_abstract(target)))}
                if policy_like is not None and "policy" in (meta.get("digest") or {}):
                    trees["policy"] = self._readers["policy"].restore(
                        path / "policy", args=ocp.args.StandardRestore(_abstract(policy_like)))
        except Exception as e:  # orbax/tensorstore raise many types for damaged files
            return _unreadable(e)
        slots = dict(trees["state"])
        if "envs" in slots:
            slots["actors"] = ActorState(slots.pop("envs"), like.actors.carry)
        loaded = like._replace(**{name: jax.tree.map(lambda x, r: x if x.size == 0 else r,
                                                     getattr(like, name), slot)
                                  for name, slot in slots.items()})
        return loaded, meta, trees

    def _set_aside(self, newer: list[int], damaged: dict[int, str], restored: int,
                   say: Callable[[str], None]) -> None:
        """Move the checkpoints newer than ``restored``, as they are, to ``<dir>_set_aside``
        (process 0 moves; every process then re-lists): the run saves those steps again,
        and orbax would otherwise delete them in its rotation of the newest few."""
        if not newer:
            return
        aside = self.directory.with_name(self.directory.name + "_set_aside")
        moved = {}
        for step in newer:
            dest, n = aside / str(step), 2
            while dest.exists():
                dest, n = aside / f"{step}.{n}", n + 1
            moved[step] = dest
        if distributed.is_main_process():
            with faults.writing("setting checkpoints aside in", aside):
                aside.mkdir(exist_ok=True)
                for step, dest in moved.items():
                    (self.directory / str(step)).rename(dest)
            with faults.writing("pruning set-aside checkpoints in", aside):
                for old in _oldest_beyond(aside, self.keep):
                    shutil.rmtree(old)
        distributed.barrier("checkpoints_set_aside")
        self._manager.reload()
        for step, dest in moved.items():
            why = (f"is damaged: {damaged[step]}" if step in damaged
                   else f"is newer than checkpoint {restored}, which was asked for")
            say(f"--resume: checkpoint {step} in {self.directory} {why}; resuming from "
                f"checkpoint {restored}; {step} was moved, as found, to {dest}")

    def _stored_slots(self, path: Path) -> set[str]:
        """Top-level names of a checkpoint's state item."""
        tree = self._readers["state"].metadata(path / "state")
        return set(getattr(tree, "tree", tree) or {})

    def close(self) -> None:
        self.wait()
        self._manager.close()
        for reader in self._readers.values():
            reader.close()


def with_digest(meta: dict[str, Any], trees: dict[str, Any]) -> dict[str, Any]:
    """``meta`` with the digest of the array trees saved beside it, and of itself."""
    return {**meta, "digest": {"algorithm": digest.ALGORITHM, **digest.digests(trees),
                               "meta": digest.meta_digest(meta)}}


def _digest_missing(meta: dict[str, Any]) -> str | None:
    """Why a readable checkpoint cannot be verified though its format says it can, or None:
    a record of this format without a digest, or with one this version does not compute."""
    record = meta.get("digest")
    if record is None:
        return (f"its meta record (format {meta['format']}) has no digest"
                if "format" in meta else None)
    if record.get("algorithm") != digest.ALGORITHM:
        return (f"not verifiable: its digest algorithm {record.get('algorithm')!r} is not this "
                f"version's ({digest.ALGORITHM})")
    return None


def _oldest_beyond(aside: Path, keep: int) -> list[Path]:
    """The set-aside copies beyond the newest ``keep`` (by when they were set aside)."""
    copies = sorted((p for p in aside.iterdir() if p.is_dir()),
                    key=lambda p: (p.stat().st_ctime, p.name))
    return copies[:max(len(copies) - keep, 0)]


def _checkable(meta: dict[str, Any]) -> bool:
    """Whether ``meta`` carries a digest this version computes."""
    return (meta.get("digest") or {}).get("algorithm") == digest.ALGORITHM


def _digest_problem(meta: dict[str, Any], step: int, trees: dict[str, Any]) -> str | None:
    """What in checkpoint ``step`` differs from its digest, in words; None if nothing. A
    collective where the arrays span processes."""
    saved = meta["digest"]
    now = digest.digests(trees)
    problems = [f"its {item} arrays {_few(bad)}" for item, words in now.items()
                if (bad := digest.mismatches(saved.get(item, {}), words))]
    if saved.get("meta") != digest.meta_digest(meta) or meta.get("updates") != step:
        problems.insert(0, "its meta record")
    if not problems:
        return None
    return " and ".join(problems) + " do not match the digest saved with them"


def _few(paths: list[str], n: int = 3) -> str:
    return ", ".join(paths[:n]) + (f" (and {len(paths) - n} more)" if len(paths) > n else "")


def _listing(steps: list[int]) -> str:
    return ", ".join(map(str, sorted(steps))) or "none"


def _ranks(mask: Any) -> str:
    return ", ".join(str(r) for r in np.flatnonzero(mask))


def _unreadable(error: BaseException) -> str:
    """Why a read failed, in one line: the innermost cause says it (orbax wraps tensorstore's
    error, e.g. ``DATA_LOSS: Error reading ...``, in a generic one)."""
    while (error.__cause__ or error.__context__) is not None:
        inner = error.__cause__ or error.__context__
        if not str(inner).strip():
            break
        error = inner
    text = str(error).strip()
    first = text.splitlines()[0][:200] if text else ""
    return f"unreadable ({type(error).__name__}{': ' + first if first else ''})"


def _abstract(tree: Any) -> Any:
    """The restore target of ``tree``: its shapes, dtypes and shardings; empty arrays as None
    (:func:`_without_empty`)."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                        _without_empty(tree))


def _without_empty(tree: Any) -> Any:
    """The tree with zero-size arrays as None: orbax refuses to save them (MJX physics states
    have some, e.g. ``act`` of a model without activation states). They hold no data; restore
    takes them from the state it restores into."""
    return jax.tree.map(lambda x: None if x.size == 0 else x, tree)


@contextlib.contextmanager
def _quiet_stderr_on_failure(grace_s: float = 1.0) -> Iterator[None]:
    """Send file descriptor 2 to /dev/null while a restore runs, and on failure for ``grace_s``
    more: when one read of a damaged checkpoint fails, tensorstore reads still in flight complete
    into orbax's closed event loop and print "Event loop is closed" tracebacks from C++ threads,
    burying the one-line error. The real cause is in the exception we raise."""
    with muted(2):
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
    wrote it (arrays are gathered onto one local device), checked against its digest. A damaged
    one raises :class:`DamagedCheckpoint` naming the intact ones: no silent fallback to an older
    checkpoint, so what is deployed is what was asked for."""
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
        steps = sorted(manager.all_steps())
        step = (steps[-1] if steps else None) if step is None else step
        if step is None:
            raise CheckpointError(f"no checkpoint in {directory}")
        if step not in steps:
            raise CheckpointError(f"no checkpoint {step} in {directory} (it has "
                                  f"{_listing(steps)})")
        outcome = _read_item(manager, directory, step, item)
        if isinstance(outcome, str):
            intact = [s for s in reversed(steps) if s != step
                      and not isinstance(_read_item(manager, directory, s, item, quiet=True), str)]
            raise DamagedCheckpoint(
                f"checkpoint {step} in {directory} is damaged: {outcome}; intact: "
                + (f"{_listing(intact)} (ask for one by its step)" if intact else "none"))
    finally:
        manager.close()
    tree, meta = outcome
    return jax.tree.map(np.asarray, tree), meta


def _read_item(manager: Any, directory: Path, step: int, item: str, quiet: bool = False
               ) -> tuple[Any, dict[str, Any]] | str:
    """Checkpoint ``step``'s ``item`` (on one device) and meta, checked against its digest;
    or why it is damaged. ``quiet``: a checkpoint without the item counts as damaged instead
    of raising (when listing the intact ones)."""
    ocp = _ocp()
    tree = None
    try:
        with _quiet_stderr_on_failure():
            meta = dict(manager.restore(step, args=ocp.args.Composite(
                meta=ocp.args.JsonRestore())).meta)
            stored = manager.item_metadata(step).get(item)
            if stored is not None:
                device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
                target = jax.tree.map(
                    lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device),
                    getattr(stored, "tree", stored))
                tree = manager.restore(step, args=ocp.args.Composite(
                    **{item: ocp.args.StandardRestore(target)}))[item]
    except Exception as e:  # orbax/tensorstore raise many types for damaged files
        return _unreadable(e)
    if missing := _digest_missing(meta):
        return missing
    checkable = _checkable(meta)
    if tree is None:
        if checkable and item in meta["digest"] or quiet:
            return f"its {item} item is missing"
        raise CheckpointError(f"checkpoint {step} in {directory} has no '{item}' item "
                              f"(written by an older version: train with this one)")
    problem = _digest_problem(meta, step, {item: tree}) if checkable else None
    return problem if problem is not None else (tree, meta)
