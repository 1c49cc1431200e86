"""What ends a long run that is not a bug, and how it ends: divergence and storage faults.

Both end with ONE line that says what happened and what was kept, and a distinct exit code
(:data:`~jaxrl_dist.protocol.EXIT_DIVERGED`, :data:`~jaxrl_dist.protocol.EXIT_STORAGE`) that the
launcher reports and does not retry. The programs (:func:`jaxrl_dist.programs.keep_finite`)
already dropped every non-finite update, so whatever a checkpoint holds is finite.

Storage faults surface from three places: our own writes (:func:`writing`), orbax's background
checkpoint threads (:mod:`jaxrl_dist.checkpoint` converts them with :func:`storage_reason`) and
TensorBoard's writer thread (:func:`watch_threads` records its OSError for the next
:func:`raise_thread_fault`). A failing write also makes those libraries print tracebacks from
their own threads (asyncio "Event loop is closed", absl ERROR lines, tasks never retrieved);
:func:`quiet_background_failures` keeps them out of the user's one line.
"""

from __future__ import annotations

import contextlib
import errno as errno_lib
import logging
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from jaxrl_dist.errors import RunError
from jaxrl_dist.protocol import EXIT_DIVERGED, EXIT_STORAGE


class TrainingDiverged(RunError):
    """Too many consecutive updates were non-finite; the message names them."""

    exit_code = EXIT_DIVERGED


class StorageError(RunError):
    """A write failed; the message names the path, the operation and the OS error."""

    exit_code = EXIT_STORAGE


# ------------------------------------------------------------------------------ divergence

class DivergenceWatch:
    """Host-side streaks of skipped updates, one per member, read from the metrics every
    process receives identically (so every process stops at the same call).

    A single run stops when its streak reaches ``limit``. A population stops only when EVERY
    member has: a member that trips (a swept learning rate too high) is named once on the
    console and in the summary and goes on with the others (its non-finite updates are still
    dropped, so its parameters stay finite). Counts start from zero on a resume."""

    def __init__(self, limit: int, members: int | None, skipped: str,
                 ignore: tuple[str, ...], say: Callable[[str], None] = lambda _: None):
        self.limit, self.members, self.skipped, self.ignore = limit, members, skipped, ignore
        self.say = say
        n = members or 1
        self.streak = np.zeros(n, np.int64)
        self.total = np.zeros(n, np.int64)
        self.first_bad: list[tuple[int, list[str]] | None] = [None] * n
        self.diverged: dict[int, str] = {}   # member -> what happened

    @property
    def tripped(self) -> str | None:
        """Why the run must stop, or None."""
        if len(self.diverged) < (self.members or 1):
            return None
        return "; ".join(self.diverged[m] for m in sorted(self.diverged))

    def observe(self, host_metrics: dict[str, Any], last_update: int) -> None:
        """Metrics of one call (``[K]`` per name, ``[members, K]`` for a population) that ended
        at update ``last_update``."""
        n = self.members or 1
        flags = np.asarray(host_metrics[self.skipped]).reshape(n, -1) > 0
        k = flags.shape[1]
        busy = np.nonzero(flags.any(1) | (self.streak > 0))[0]   # the rest: nothing to do
        for m, i in ((m, i) for m in busy for i in range(k)):
            update = last_update - k + i + 1
            if not flags[m, i]:
                self.streak[m], self.first_bad[m] = 0, None
                continue
            self.total[m] += 1
            self.streak[m] += 1
            if self.first_bad[m] is None:
                bad = [name for name, v in host_metrics.items()
                       if name not in self.ignore and name != self.skipped
                       and not np.isfinite(np.asarray(v, np.float64).reshape(n, k)[m, i])]
                self.first_bad[m] = (update, bad or ["the parameters"])
            if m not in self.diverged and self.streak[m] >= self.limit:
                first, names = self.first_bad[m]
                who = f"member {m}: " if self.members else ""
                self.diverged[int(m)] = (
                    f"{who}updates {first}-{update} ({self.streak[m]} in a row = "
                    f"max_nonfinite_skips) were non-finite (first at update {first}: "
                    f"{', '.join(names)}); each was skipped, so the parameters are those after "
                    f"update {first - 1}")
                if self.members and self.tripped is None:
                    self.say(f"diverged (its non-finite updates keep being dropped): "
                             f"{self.diverged[int(m)]}")

    def replaced(self, parents: Any) -> None:
        """A PBT round gave each member m with ``parents[m] != m`` member ``parents[m]``'s
        train state: m's streak and divergence are now its parent's (a healthy parent's
        copy is healthy: a population whose members each tripped once and were then
        replaced is not stopped as diverged)."""
        old = (self.streak.copy(), list(self.first_bad), dict(self.diverged))
        for m, p in enumerate(np.asarray(parents).tolist()):
            if p == m:
                continue
            self.streak[m], self.first_bad[m] = old[0][p], old[1][p]
            was = self.diverged.pop(m, None)
            if p in old[2]:
                self.diverged[m] = f"member {m}: a copy of diverged member {p}"
            elif was is not None:
                self.say(f"member {m} recovered: PBT replaced it with a copy of member {p}")


def diverged_message(detail: str, checkpoint_dir: Path, latest: int | None) -> str:
    kept = (f"the latest checkpoint, update {latest} in {checkpoint_dir}, holds finite values"
            if latest is not None else f"no checkpoint in {checkpoint_dir}")
    return (f"training diverged: {detail}; {kept}. Lower the learning rate (or raise "
            f"max_nonfinite_skips) and start a new run")


# --------------------------------------------------------------------------------- storage

# tensorstore (orbax's writer) reports the OS error as text: "...: No space left on device
# [os_error_code='28']". Only that, or a Python OSError, counts as a storage fault: other
# errors (a peer gone during a save's barrier, a bug) keep their own exit and traceback.
_OS_CODE = re.compile(r"os_error_code='(\d+)'")


def _os_code(error: BaseException) -> int | None:
    code = error.errno if isinstance(error, OSError) else None
    if code is None:
        found = _OS_CODE.search(str(error))
        code = int(found.group(1)) if found else None
    return code


def storage_reason(error: BaseException) -> str | None:
    """``"[Errno 28 ENOSPC] No space left on device"`` if ``error`` is a failed file-system
    operation (a Python OSError or tensorstore's text for one), else None (a bug)."""
    code = _os_code(error)
    if code is not None:
        return f"[Errno {code} {errno_lib.errorcode.get(code, '?')}] {os.strerror(code)}"
    if not isinstance(error, OSError):
        return None
    text = str(error).strip()
    return text.splitlines()[0][:200] if text else type(error).__name__


_ADVICE = {
    **dict.fromkeys(("ENOSPC", "EDQUOT", "EFBIG"), "free space on that file system (or raise "
                                                   "the quota), then continue with --resume"),
    **dict.fromkeys(("EACCES", "EPERM", "EROFS"), "make the directory writable again, then "
                                                  "continue with --resume"),
    "ENOENT": "the directory was removed or unmounted: restore it before --resume",
}


def storage_error(operation: str, path: Path | str, error: BaseException,
                  after: str = "") -> StorageError:
    """The one line for ``error`` (one :func:`storage_reason` accepts), advice by its errno."""
    name = errno_lib.errorcode.get(_os_code(error) or 0, "")
    advice = _ADVICE.get(name, "fix the file system, then continue with --resume")
    return StorageError(f"{operation} {path} failed: {storage_reason(error)}{after}; {advice}")


@contextlib.contextmanager
def writing(operation: str, path: Path | str) -> Iterator[None]:
    """Turn an OSError raised by the block into a :class:`StorageError` naming ``path``."""
    try:
        yield
    except OSError as e:
        raise storage_error(operation, path, e) from None


_thread_faults: list[OSError] = []


def watch_threads() -> None:
    """Record (instead of printing) an OSError that kills TensorBoard's writer thread (a full
    disk); :func:`raise_thread_fault` raises it. Forgets any recorded by an earlier run."""
    _thread_faults.clear()
    previous = threading.excepthook
    if getattr(previous, "_jaxrl_dist", False):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        if isinstance(args.exc_value, OSError) and _from_tensorboard(args.exc_traceback):
            _thread_faults.append(args.exc_value)
            return
        previous(args)

    hook._jaxrl_dist = True   # type: ignore[attr-defined]
    threading.excepthook = hook


def _from_tensorboard(tb: Any) -> bool:
    """Whether a traceback passes through tensorboardX (other threads' errors are not ours to
    report as a failed TensorBoard write)."""
    while tb is not None:
        if "tensorboardX" in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


def raise_thread_fault(operation: str, path: Path | str) -> None:
    if _thread_faults:
        error = _thread_faults[0]
        _thread_faults.clear()
        raise storage_error(operation, path, error)


class _DropOrbaxNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += repr(record.exc_info[1])
        return "orbax" not in text and "tensorstore" not in text


def quiet_background_failures() -> None:
    """Keep a failed checkpoint write's echoes from orbax's threads off stderr: its absl ERROR
    lines, asyncio's "Task exception was never retrieved" for its coroutines, and the
    "Event loop is closed" tracebacks of tensorstore callbacks into orbax's closed loops
    (reported through ``sys.unraisablehook``). The error itself reaches the main thread."""
    logging.getLogger("absl").setLevel(logging.CRITICAL)
    asyncio_log = logging.getLogger("asyncio")
    if not any(isinstance(f, _DropOrbaxNoise) for f in asyncio_log.filters):
        asyncio_log.addFilter(_DropOrbaxNoise())
    previous = sys.unraisablehook
    if getattr(previous, "_jaxrl_dist", False):
        return

    def hook(unraisable) -> None:
        value = unraisable.exc_value
        if isinstance(value, RuntimeError) and str(value) == "Event loop is closed":
            return
        previous(unraisable)

    hook._jaxrl_dist = True   # type: ignore[attr-defined]
    sys.unraisablehook = hook
