"""Silencing what libraries write straight to a file descriptor (C++ threads, an import's
prints), which no Python-level redirection catches. Jax-free, so any module may use it."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator


@contextlib.contextmanager
def muted(fd: int) -> Iterator[None]:
    """File descriptor ``fd`` (1: standard output, 2: standard error) to /dev/null inside the
    block; the Python stream writing there is flushed on the way in and out (the one current
    then: a library may have replaced it inside the block)."""
    def flush() -> None:
        (sys.stdout if fd == 1 else sys.stderr).flush()

    flush()
    saved, sink = os.dup(fd), os.open(os.devnull, os.O_WRONLY)
    os.dup2(sink, fd)
    try:
        yield
    finally:
        flush()
        os.dup2(saved, fd)
        os.close(saved)
        os.close(sink)
