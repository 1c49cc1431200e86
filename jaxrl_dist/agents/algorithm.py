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
    doc: str = ""
    check_run: Callable[[Any, Any], None] | None = None   # (section, whole Config): checks
                                                           #   that need the run's sizes

    def agent_factory(self) -> Callable[..., Any]:
        """The ``make`` function, imported now (it imports jax)."""
        module, _, function = self.make.partition(":")
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
