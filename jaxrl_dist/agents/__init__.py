"""Learning algorithms behind one shape, and the registry that ``algo:`` picks from.

An algorithm is two things:

* an :class:`~jaxrl_dist.agents.algorithm.Algorithm` record, jax-free (the config reads it
  before jax is imported): its config section (``ppo:`` for PPO) as a typed dataclass, the
  checks of that section, the keys a population may sweep, and how many environment steps per
  environment one update collects;
* an :class:`~jaxrl_dist.agents.base.Agent` made by ``make`` (imported lazily): the pure
  per-device functions ``init`` / ``act`` / ``learn`` / ``policy`` that the generic programs
  (:mod:`jaxrl_dist.programs`, whose ``make_learner`` builds a run's) compose into the fused
  update, the evaluation and the exporter.

Nothing outside ``agents/<name>/`` knows an algorithm by name: the trainer, reporting,
checkpoints, populations and the summary read the records. ``JAXRL_DIST_PLUGINS`` (comma-
separated importable module names) registers algorithms that live outside the package; each
module calls :func:`register` at import. It is an environment variable, never a config key: a
config file cannot make the trainer import code.

The registry imports only downwards (each built-in algorithm's jax-free config module, which
declares its record), so :mod:`jaxrl_dist.config` can read it without a cycle.
"""

from __future__ import annotations

from jaxrl_dist import plugins
from jaxrl_dist.agents.algorithm import Algorithm
from jaxrl_dist.agents.dqn.config import ALGORITHM as _DQN
from jaxrl_dist.agents.offpolicy.config import CROSSQ as _CROSSQ
from jaxrl_dist.agents.offpolicy.config import SAC as _SAC
from jaxrl_dist.agents.offpolicy.config import TD3 as _TD3
from jaxrl_dist.agents.ppo.config import ALGORITHM as _PPO
from jaxrl_dist.agents.pqn.config import ALGORITHM as _PQN
from jaxrl_dist.errors import ConfigError
from jaxrl_dist.plugins import PLUGINS_VAR

__all__ = ["Algorithm", "algorithms", "get", "register", "PLUGINS_VAR"]


_REGISTRY: dict[str, Algorithm] = {a.name: a for a in (_PPO, _DQN, _PQN, _SAC, _TD3,
                                                          _CROSSQ)}


def register(algorithm: Algorithm) -> Algorithm:
    """Add an algorithm (idempotent for the same record); plugins call it at import."""
    _REGISTRY[algorithm.name] = algorithm
    return algorithm


def algorithms() -> dict[str, Algorithm]:
    """Every registered algorithm (built-in ones and ``JAXRL_DIST_PLUGINS``'), by name."""
    plugins.load()
    return dict(_REGISTRY)


def get(name: str) -> Algorithm:
    known = algorithms()
    if name not in known:
        raise ConfigError(f"algo '{name}' is not a known algorithm; one of: "
                          f"{', '.join(sorted(known))}")
    return known[name]

