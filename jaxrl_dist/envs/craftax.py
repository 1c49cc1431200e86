"""``craftax:<name>``: Craftax (``Craftax-Classic-Symbolic-v1``, ``Craftax-Symbolic-v1``, and
the ``-Pixels-`` variants), through its gymnax interface without its auto-reset.

Craftax's ``done`` includes the time limit; it is split here: reaching ``max_timesteps`` is a
truncation (bootstrapped), dying (health, lava) a termination. A death on the very last step
counts as the truncation (Craftax does not report the two apart)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from jaxrl_dist.envs.base import EnvSpec, Step
from jaxrl_dist.envs.gymnax import import_gymnax, spec_from_gymnax
from jaxrl_dist.errors import unknown_env

NAMES = ("Craftax-Classic-Symbolic-v1", "Craftax-Classic-Pixels-v1", "Craftax-Symbolic-v1",
         "Craftax-Pixels-v1")


@dataclass(frozen=True, eq=False)
class CraftaxAdapter:
    env: Any
    params: Any

    def reset(self, key: jax.Array) -> tuple[Any, jax.Array]:
        obs, state = self.env.reset_env(key, self.params)
        return state, obs

    def step(self, key: jax.Array, state: Any, action: jax.Array) -> Step:
        obs, state, reward, done, _ = self.env.step_env(key, state, action, self.params)
        time_up = state.timestep >= self.params.max_timesteps
        return Step(state, obs, jnp.asarray(reward, jnp.float32),
                    jnp.logical_and(done, jnp.logical_not(time_up)), time_up)


def make(name: str, episode_length: int | None = None, **kwargs: Any) -> EnvSpec:
    import_gymnax()   # craftax imports gymnax; keep its render imports deferred
    from craftax.craftax_env import make_craftax_env_from_name

    if name not in NAMES:
        raise unknown_env("Craftax", name, NAMES, "craftax:")
    env = make_craftax_env_from_name(name, auto_reset=False, **kwargs)
    params = env.default_params
    if episode_length is not None:
        params = params.replace(max_timesteps=int(episode_length))
    spec = spec_from_gymnax(env, params, f"craftax:{name}", CraftaxAdapter(env, params),
                            max_episode_steps=int(params.max_timesteps))
    # world generation is costly; not written for shard_map (EnvSpec.shard_map_safe)
    return dataclasses.replace(spec, reset_each=True, shard_map_safe=False)
