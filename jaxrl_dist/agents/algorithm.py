"""What an algorithm declares about itself, jax-free: its registry record and its scalar
hyperparameters. Imported by each algorithm's config module and by the registry
(:mod:`jaxrl_dist.agents`); imports nothing of the package, so both import it from below."""

from __future__ import annotations

import importlib
from typing import Any, Callable, NamedTuple, Sequence


class Algorithm(NamedTuple):
    """What the config and the trainer need to know about an algorithm, jax-free."""

    name: str                               # the value of ``algo:`` and the section's key
    section: type                           # frozen kw-only dataclass of the section
    check: Callable[[Any], None]            # raises ConfigError naming the bad key
    sweepable: tuple[str, ...]              # dotted keys (``ppo.learning_rate``)
    steps_per_env: Callable[[Any], int]     # env steps per environment per update
    make: str                               # "module:function": (section, sizes, spec,
                                            #   layout) -> Agent, imported when a run starts
    policy: str                             # "module:function": (section, spec) ->
                                            #   agents.base.Deployment, the Agent's policy
                                            #   without a run's sizes or mesh (policy.load)
    doc: str = ""
    check_run: Callable[[Any, Any], None] | None = None   # (section, whole Config): checks
                                                           #   that need the run's sizes
    export: str = ""                        # "module:function": (section, spec) ->
                                            #   export.graph.Emitter, the ONNX form of
                                            #   ``policy``; "" when it has none
    teams: bool = False                     # trains environments of several agents, each
                                            #   a row of the batch (``envs.team``)

    def agent_factory(self) -> Callable[..., Any]:
        """The ``make`` function, imported now (it imports jax)."""
        return _resolve(self.make)

    def policy_factory(self) -> Callable[..., Any]:
        """The ``policy`` function, imported now (it imports jax)."""
        return _resolve(self.policy)

    def emitter_factory(self) -> Callable[..., Any] | None:
        """The ``export`` function, imported now (it imports onnx); None without one."""
        return _resolve(self.export) if self.export else None


def _resolve(target: str) -> Callable[..., Any]:
    """A record's ``"module:function"``, imported: lazily, so the registry stays jax-free."""
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def sweep_keys(section: str, names: Sequence[str]) -> tuple[str, ...]:
    """An algorithm's scalar hyperparameters (``learning_rate``) as the dotted keys a
    population sweeps (``ppo.learning_rate``)."""
    return tuple(f"{section}.{name}" for name in names)


def hyperparameters(section: Any, names: Sequence[str], swept: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """The update's scalar hyperparameters ``names``: the section's values (Python numbers,
    constants of the program), overridden by a population's swept values (arrays in the train
    state, ``TrainState.hparams``)."""
    return {**{name: getattr(section, name) for name in names}, **(swept or {})}
