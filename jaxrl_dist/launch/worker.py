"""One worker process: started pinned and tied to the launcher's life, its output copied to its
log (and the console), its exit time and progress heartbeat read by the supervisor.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Callable

from jaxrl_dist.launch.plan import WorkerSpec

LOG_TAIL_LINES = 25


def _child_setup(cpus: tuple[int, ...] | None) -> Callable[[], None]:
    def setup() -> None:
        """In the child: die with SIGKILL when the launcher dies (never an orphan); pin."""
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PDEATHSIG
        except OSError:
            pass
        if cpus:
            os.sched_setaffinity(0, cpus)
    return setup


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


# What XLA's distributed runtime prints as it ends a worker because ANOTHER task failed
# (jaxlib 0.10-0.11: "Terminating process because the JAX distributed service detected fatal
# errors. This most likely indicates that another task died")
PEER_FAILED = "JAX distributed service detected fatal errors"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        text = path.read_bytes()[-64_000:].decode(errors="replace")
    except OSError:
        return []
    out = [line.rsplit("\r", 1)[-1] for line in text.splitlines()]
    return [line for line in out if line.strip()][-lines:]


class Worker:
    """One running worker: its process, output pump and exit time."""

    def __init__(self, spec: WorkerSpec, console: IO[bytes] | None, prefix: bytes):
        self.spec = spec
        env = {**os.environ, **spec.env}
        for path in (spec.error_path, spec.heartbeat_path):
            path.unlink(missing_ok=True)
        spec.heartbeat_path.touch()
        self.log = open(spec.log_path, "ab")
        self.proc = subprocess.Popen(spec.cmd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True,
                                     preexec_fn=_child_setup(spec.cpus))
        self.exit_code: int | None = None
        self.exit_time: float | None = None     # monotonic
        self.exit_wall: float | None = None     # wall clock, to compare with error files
        self.hung = False
        self._pump = threading.Thread(target=self._copy, args=(console, prefix), daemon=True)
        self._pump.start()
        self._waiter = threading.Thread(target=self._wait, daemon=True)
        self._waiter.start()

    def _copy(self, console: IO[bytes] | None, prefix: bytes) -> None:
        at_line_start = True
        for chunk in iter(lambda: os.read(self.proc.stdout.fileno(), 65536), b""):
            self.log.write(chunk)
            self.log.flush()
            if console is None:
                continue
            if prefix:  # prefix every line (and every \r-redrawn progress line)
                out = bytearray()
                for byte in chunk:
                    if at_line_start:
                        out += prefix
                    out.append(byte)
                    at_line_start = byte in (10, 13)
                chunk = bytes(out)
            try:
                console.write(chunk)
                console.flush()
            except (OSError, ValueError):
                pass

    def _wait(self) -> None:
        code = self.proc.wait()
        self.exit_wall = time.time()
        self.exit_time = time.monotonic()
        self.exit_code = code

    def failed_at(self) -> float:
        """Wall-clock time this worker recorded its error (its error file). A death without
        one (a signal, ``os._exit``) is known only when the process is reaped, which can lag
        the death by its teardown, after a sibling already recorded the collective error the
        death caused: such a time counts from a second earlier."""
        exited = self.exit_wall or time.time()
        try:
            return min(self.spec.error_path.stat().st_mtime, exited)
        except OSError:
            return exited - 1.0

    def failed_for_a_peer(self) -> bool:
        """Whether the distributed runtime ended this worker for a sibling's failure (its
        log's last lines say so): a consequence, not the job's root cause."""
        return any(PEER_FAILED in line for line in log_tail(self.spec.log_path, 60))

    @property
    def running(self) -> bool:
        return self.exit_code is None

    def signal(self, sig: int) -> None:
        if self.running:
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def seconds_without_progress(self) -> float:
        """Seconds since the last completed update; 0 until training has started."""
        try:
            if self.spec.heartbeat_path.read_text() != "train":
                return 0.0
            return time.time() - self.spec.heartbeat_path.stat().st_mtime
        except OSError:
            return 0.0

    def close(self) -> None:
        self._waiter.join(timeout=5)
        self._pump.join(timeout=5)
        self.log.close()
