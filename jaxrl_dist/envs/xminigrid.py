"""``xminigrid:<name>``: XLand-MiniGrid (``MiniGrid-Empty-8x8``, ``XLand-MiniGrid-R1-9x9``, ...).

xminigrid steps as ``step(params, timestep, action)`` and has no auto-reset of its own; its
TimeStep marks the last step, and ``discount == 0`` means the goal was reached (terminated),
otherwise the step limit (truncated). The observation is the agent's egocentric grid
``[V, V, 2]`` (tile and colour ids), which the CNN torso reads as an image."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from jaxrl_dist.envs.base import EnvSpec, Step, flatten_observation
from jaxrl_dist.envs.spaces import discrete_spec
from jaxrl_dist.errors import unknown_env

_LAST = 2


@dataclass(frozen=True, eq=False)
class XMiniGridAdapter:
    """State = xminigrid's TimeStep (its own key lives inside: ``step``'s key is unused)."""

    env: Any
    params: Any

    def reset(self, key: jax.Array) -> tuple[Any, jax.Array]:
        timestep = self.env.reset(self.params, key)
        return timestep, flatten_observation(timestep.observation)

    def step(self, key: jax.Array, state: Any, action: jax.Array) -> Step:
        del key
        timestep = self.env.step(self.params, state, action)
        last = timestep.step_type == _LAST
        discount = jnp.asarray(timestep.discount, jnp.float32)
        return Step(timestep, flatten_observation(timestep.observation),
                    jnp.asarray(timestep.reward, jnp.float32),
                    jnp.logical_and(last, discount == 0), jnp.logical_and(last, discount != 0))


def make(name: str, episode_length: int | None = None, **kwargs: Any) -> EnvSpec:
    import xminigrid

    if name not in xminigrid.registered_environments():
        raise unknown_env("XLand-MiniGrid", name, xminigrid.registered_environments(),
                          "xminigrid:", listed=8)
    env, params = xminigrid.make(name, **kwargs)
    if episode_length is not None:
        params = params.replace(max_steps=int(episode_length))
    return discrete_spec(XMiniGridAdapter(env, params), f"xminigrid:{name}",
                         env.num_actions(params), int(params.max_steps), shard_map_safe=False)
