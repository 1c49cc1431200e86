"""``JAXRL_DIST_PLUGINS``: the user's modules, imported once before algorithms or environments
are looked up, so a plugin can register an algorithm (``agents.register``) or an environment
(``gymnasium.register``, ``jaxrl_dist.envs.pettingzoo.register``). A config never names code
to import; this variable does."""

from __future__ import annotations

import importlib
import os

from jaxrl_dist.errors import ConfigError

PLUGINS_VAR = "JAXRL_DIST_PLUGINS"
_loaded: list[str] = []


def names() -> list[str]:
    """The module names the variable lists (comma-separated)."""
    return [s.strip() for s in os.environ.get(PLUGINS_VAR, "").split(",") if s.strip()]


def load() -> list[str]:
    """Import every plugin module (once per process); a module that does not import is a
    one-line error naming it."""
    for name in names():
        if name in _loaded:
            continue
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ConfigError(f"{PLUGINS_VAR} names module '{name}', which does not import "
                              f"({e}); fix the name or PYTHONPATH") from None
        _loaded.append(name)
    return names()
