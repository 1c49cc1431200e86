"""One base class for every error the user can fix (jax-free, so the launcher can use it).

A :class:`UserError` is printed as one line (``error: ...``) and ends the process with its
``exit_code`` (2 = bad input); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(ValueError):
    """A problem with the user's input (flags, config, paths, checkpoints, extras)."""

    exit_code = 2


class RunError(UserError):
    """A problem with the run directory or the job's processes."""


class ConfigError(UserError):
    """A bad config value; its message is a single line meant for the user."""
