"""``jumanji:<name>``: Jumanji environments (``Snake-v1``, ``Maze-v0``, ``Game2048-v1``, ...).

Jumanji returns a TimeStep whose ``step_type`` marks the last step and whose ``discount`` says
how it ended: 0 = terminated, otherwise the time limit (truncated, bootstrapped). An
``action_mask`` in the observation becomes the legal-action mask the policy honours; the rest of
the observation is flattened into one vector (a single array keeps its shape)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from jaxrl_dist.envs.base import EnvError, EnvSpec, Step, flatten_observation
from jaxrl_dist.envs.spaces import box_spec, discrete_spec
from jaxrl_dist.errors import unknown_env

_LAST = 2   # StepType.LAST (dm_env convention, also Jumanji's)


def split_observation(obs: Any) -> tuple[Any, Any]:
    """(observation without its action mask, the mask or None)."""
    if hasattr(obs, "_asdict"):             # NamedTuple observations (most of Jumanji)
        fields = obs._asdict()
    elif isinstance(obs, dict):
        fields = dict(obs)
    else:
        return obs, None
    mask = fields.pop("action_mask", None)
    return fields, mask


@dataclass(frozen=True, eq=False)
class JumanjiAdapter:
    """State = (Jumanji state, current action mask or None); the key lives in Jumanji's state,
    so ``step``'s key is unused."""

    env: Any
    masked: bool

    def _out(self, state: Any, timestep: Any) -> tuple[Any, jax.Array]:
        obs, mask = split_observation(timestep.observation)
        return (state, mask if self.masked else None), flatten_observation(obs)

    def reset(self, key: jax.Array) -> tuple[Any, jax.Array]:
        return self._out(*self.env.reset(key))

    def step(self, key: jax.Array, state: Any, action: jax.Array) -> Step:
        del key
        inner, timestep = self.env.step(state[0], action)
        new_state, obs = self._out(inner, timestep)
        last = timestep.step_type == _LAST
        discount = jnp.asarray(timestep.discount, jnp.float32)
        return Step(new_state, obs, jnp.asarray(timestep.reward, jnp.float32),
                    jnp.logical_and(last, discount == 0), jnp.logical_and(last, discount != 0))

    def action_mask(self, state: Any) -> jax.Array:
        return state[1]


def make(name: str, episode_length: int | None = None, **kwargs: Any) -> EnvSpec:
    import jumanji
    from jumanji import specs

    if episode_length is not None:
        raise EnvError("episode_length does not apply to jumanji: environments; set the "
                       "task's own limit through env_kwargs (e.g. time_limit) instead")
    if name not in jumanji.registered_environments():
        raise unknown_env("Jumanji", name, jumanji.registered_environments(), "jumanji:")
    env = jumanji.make(name, **kwargs)
    _, timestep = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    _, mask = split_observation(timestep.observation)
    action = env.action_spec
    limit = int(getattr(env, "time_limit", None) or 1000)
    full = f"jumanji:{name}"
    if isinstance(action, specs.DiscreteArray):
        masked = mask is not None and tuple(mask.shape) == (int(action.num_values),)
        return discrete_spec(JumanjiAdapter(env, masked), full, int(action.num_values), limit,
                             masked=masked, shard_map_safe=False)
    if isinstance(action, specs.BoundedArray) and len(action.shape) == 1 and \
            jnp.issubdtype(action.dtype, jnp.floating):
        return box_spec(JumanjiAdapter(env, False), full, int(action.shape[0]),
                        action.minimum, action.maximum, limit, shard_map_safe=False)
    raise EnvError(f"{full}: its action space ({type(action).__name__} {action.shape}) is not "
                   f"one discrete choice or a flat continuous vector; the networks handle those")
