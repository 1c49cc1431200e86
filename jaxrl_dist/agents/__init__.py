"""Learning algorithms behind one shape, and the registry that ``algo:`` picks from.

An algorithm is two things:

* an :class:`Algorithm` record, jax-free (the config reads it before jax is imported): its
  config section (``ppo:`` for PPO) as a typed dataclass, the checks of that section, the keys
  a population may sweep, and how many environment steps per environment one update collects;
* an :class:`~jaxrl_dist.agents.base.Agent` made by ``make`` (imported lazily): the pure
  per-device functions ``init`` / ``act`` / ``learn`` / ``policy`` that the generic programs
  (:mod:`jaxrl_dist.programs`) compose into the fused update, the evaluation and the exporter.

Nothing outside ``agents/<name>/`` knows an algorithm by name: the trainer, reporting,
checkpoints, populations and the summary read the records. ``JAXRL_DIST_PLUGINS`` (comma-
separated importable module names) registers algorithms that live outside the package; each
module calls :func:`register` at import. It is an environment variable, never a config key: a
config file cannot make the trainer import code.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from jaxrl_dist.errors import ConfigError

if TYPE_CHECKING:
    from jaxrl_dist.config import Config
    from jaxrl_dist.envs import EnvSpec
    from jaxrl_dist.programs import Learner
    from jaxrl_dist.sharding import Layout
    from jaxrl_dist.sizes import Sizes

PLUGINS_VAR = "JAXRL_DIST_PLUGINS"


class Algorithm(NamedTuple):
    """What the config and the trainer need to know about an algorithm, jax-free."""

    name: str                               # the value of ``algo:`` and the section's key
    section: type                           # frozen kw-only dataclass of the section
    check: Callable[[Any], None]            # raises ConfigError naming the bad key
    sweepable: tuple[str, ...]              # dotted keys (``ppo.learning_rate``)
    steps_per_env: Callable[[Any], int]     # env steps per environment per update
    make: str                               # "module:function": (section, sizes, spec,
                                            #   layout) -> Agent, imported when a run starts
    doc: str = ""
    check_run: Callable[[Any, Any], None] | None = None   # (section, whole Config): checks
                                                           #   that need the run's sizes

    def agent_factory(self) -> Callable[..., Any]:
        """The ``make`` function, imported now (it imports jax)."""
        module, _, function = self.make.partition(":")
        return getattr(importlib.import_module(module), function)


_REGISTRY: dict[str, Algorithm] = {}
_loaded = [False]


def register(algorithm: Algorithm) -> Algorithm:
    """Add an algorithm (idempotent for the same record)."""
    _REGISTRY[algorithm.name] = algorithm
    return algorithm


def _load_plugins() -> None:
    for name in filter(None, (s.strip() for s in os.environ.get(PLUGINS_VAR, "").split(","))):
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ConfigError(f"{PLUGINS_VAR} names module '{name}', which does not import "
                              f"({e}); fix the name or PYTHONPATH") from None


def algorithms() -> dict[str, Algorithm]:
    """Every registered algorithm (built-in ones and ``JAXRL_DIST_PLUGINS``'), by name."""
    if not _loaded[0]:
        _loaded[0] = True
        from jaxrl_dist.agents.ppo import config as _ppo  # noqa: F401 (registers "ppo")
        from jaxrl_dist.agents.dqn import config as _dqn  # noqa: F401 (registers "dqn")
        from jaxrl_dist.agents.pqn import config as _pqn  # noqa: F401 (registers "pqn")
        _load_plugins()
    return dict(_REGISTRY)


def get(name: str) -> Algorithm:
    known = algorithms()
    if name not in known:
        raise ConfigError(f"algo '{name}' is not a known algorithm; one of: "
                          f"{', '.join(sorted(known))}")
    return known[name]


def make_learner(config: Config, sizes: Sizes, spec: EnvSpec, layout: Layout) -> Learner:
    """The programs of ``config``'s algorithm for ``spec`` over ``layout``. The algorithm's
    own code receives its section and the derived sizes, never the whole run config."""
    from jaxrl_dist import programs

    layout = programs.as_layout(layout)
    spec = programs.spec_in(spec, layout)
    agent = get(config.algo).agent_factory()(config.agent, sizes, spec, layout)
    return programs.build(agent, sizes, spec, layout, programs.RunSettings.of(config))
