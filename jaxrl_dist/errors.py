"""One base class for every error the user can fix (jax-free, so the launcher can use it).

A :class:`UserError` is printed as one line (``error: ...``) and ends the process with its
``exit_code`` (2 = bad input); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from typing import Iterable


class UserError(ValueError):
    """A problem with the user's input (flags, config, paths, checkpoints, extras)."""

    exit_code = 2


class RunError(UserError):
    """A problem with the run directory or the job's processes."""


class ConfigError(UserError):
    """A bad config value; its message is a single line meant for the user."""


class EnvError(UserError):
    """Unknown or unsupported environment (message is one line for the user); also
    ``jaxrl_dist.envs.EnvError``."""


def require(ok: bool, message: str) -> None:
    """Raise :class:`ConfigError` with ``message`` unless ``ok``: every config check's one
    line (the run-wide keys, each algorithm's section, the torsos)."""
    if not ok:
        raise ConfigError(message)


def nearest(word: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known names closest to a misspelt one, only those about as close as the closest:
    a hint to what was meant, not a list to read."""
    close = difflib.get_close_matches(word, known, n=n)

    def score(name: str) -> float:
        return difflib.SequenceMatcher(None, name, word).ratio()

    return [name for name in close if score(name) >= score(close[0]) - 0.05] if close else []


def unknown_env(what: str, name: str, known: Iterable[str], prefix: str = "",
                listed: int | None = None) -> EnvError:
    """One line for a name a suite lacks: the closest of its names, else (the first
    ``listed`` of) them all."""
    known = sorted(known)
    close = nearest(name, known)
    if close:
        hint = f"did you mean {', '.join(prefix + c for c in close)}?"
    else:
        shown = known if listed is None else known[:listed]
        more = ", ..." if len(shown) < len(known) else ""
        hint = f"{what} provides: {', '.join(shown)}{more}"
    return EnvError(f"unknown {what} environment {prefix + name!r}; {hint}")
