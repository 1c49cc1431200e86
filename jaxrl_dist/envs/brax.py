"""``brax:<name>``: Brax environments, raw (no Brax wrappers). Brax's AutoResetWrapper
overwrites the final observation of a finished episode, so time-limit truncation could not be
bootstrapped; here the episode length is ours (:class:`TimeLimit`) and the auto-reset is
``base.step``'s, which keeps the final observation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from jaxrl_dist.envs.base import EnvError, EnvSpec, Step, TimeLimit, flatten_observation
from jaxrl_dist.envs.spaces import box_spec
from jaxrl_dist.errors import unknown_env

DEFAULT_EPISODE_LENGTH = 1000   # Brax's own training default


@dataclass(frozen=True, eq=False)
class BraxAdapter:
    """A Brax/Playground-style environment: ``reset(rng) -> State``, ``step(State, action)``
    with ``obs``, ``reward`` and ``done`` (a termination: the raw environments have no time
    limit). The step is deterministic: the key is unused."""

    env: Any

    def reset(self, key: jax.Array) -> tuple[Any, jax.Array]:
        state = self.env.reset(key)
        return state, flatten_observation(state.obs)

    def step(self, key: jax.Array, state: Any, action: jax.Array) -> Step:
        del key
        state = self.env.step(state, action)
        return Step(state, flatten_observation(state.obs), state.reward, state.done > 0,
                    jnp.zeros((), bool))


def time_limited(env: Any, name: str, episode_length: int | None, action_size: int) -> EnvSpec:
    length = DEFAULT_EPISODE_LENGTH if episode_length is None else int(episode_length)
    if length < 1:
        raise EnvError(f"episode_length must be >= 1, got {length}")
    return box_spec(TimeLimit(BraxAdapter(env), length), name, action_size,
                    max_episode_steps=length, shard_map_safe=False)   # see EnvSpec.shard_map_safe


def make(name: str, episode_length: int | None = None, **kwargs: Any) -> EnvSpec:
    """Brax's registry name (``ant``, ``inverted_pendulum``, ``fast``, ...); ``kwargs`` go to
    the environment's constructor (e.g. ``backend='mjx'``; Brax's default is ``generalized``)."""
    from brax import envs

    if name not in envs._envs:
        raise unknown_env("Brax", name, envs._envs, "brax:")
    env = envs.get_environment(name, **kwargs)
    return time_limited(env, f"brax:{name}", episode_length, int(env.action_size))
