"""gymnax environments: creation by name, auto-reset, episode statistics, action clipping.

Everything here is for ONE environment; callers ``vmap`` over environments. Keys come from the
caller, which derives them from the global environment index (see ``update.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct


class EnvError(ValueError):
    """Unknown or unsupported environment (message is one line for the user)."""


@dataclass(frozen=True, eq=False)
class EnvSpec:
    """An environment plus what the networks need to know about it."""

    env: Any
    params: Any
    name: str
    obs_shape: tuple[int, ...]
    action_dim: int              # number of actions (discrete) or action size (continuous)
    continuous: bool
    action_low: np.ndarray | None = None
    action_high: np.ndarray | None = None


def make_env(env: Any, env_params: Any = None) -> EnvSpec:
    """An :class:`EnvSpec` from a gymnax id or a user's gymnax-style environment object."""
    import gymnax  # imported late: gymnax imports take a second

    if isinstance(env, str):
        if env not in gymnax.registered_envs:
            raise EnvError(f"unknown environment {env!r}; gymnax provides: "
                           f"{', '.join(gymnax.registered_envs)}")
        name = env
        env, default_params = gymnax.make(env)
    else:
        for attr in ("reset", "step", "action_space", "observation_space", "default_params"):
            if not hasattr(env, attr):
                raise EnvError(f"environment object {type(env).__name__} lacks '{attr}'; "
                               f"it must follow the gymnax Environment interface")
        name = getattr(env, "name", type(env).__name__)
        default_params = env.default_params
    params = default_params if env_params is None else env_params
    space = env.action_space(params)
    obs_shape = tuple(env.observation_space(params).shape)
    if hasattr(space, "n"):
        return EnvSpec(env, params, name, obs_shape, int(space.n), continuous=False)
    if hasattr(space, "low") and hasattr(space, "shape"):
        shape = tuple(space.shape)
        if len(shape) != 1:
            raise EnvError(f"{name}: only flat Box action spaces are supported, got {shape}")
        low = np.broadcast_to(np.asarray(space.low, np.float32), shape).copy()
        high = np.broadcast_to(np.asarray(space.high, np.float32), shape).copy()
        return EnvSpec(env, params, name, obs_shape, shape[0], True, low, high)
    raise EnvError(f"{name}: unsupported action space {type(space).__name__} "
                   f"(need Discrete or Box)")


@struct.dataclass
class EnvSlot:
    """One environment's state plus the bookkeeping for episode statistics."""

    env_state: Any
    obs: jax.Array
    episode_return: jax.Array   # [] float32, return so far of the running episode
    episode_length: jax.Array   # [] int32


class StepOutput(NamedTuple):
    reward: jax.Array        # [] float32
    terminated: jax.Array    # [] bool, natural end: no bootstrap
    truncated: jax.Array     # [] bool, time limit: bootstrap from final_obs
    final_obs: jax.Array     # observation before the auto-reset
    finished_return: jax.Array   # return of the episode that ended here, else 0
    finished_length: jax.Array   # its length, else 0


def _float_obs(obs: Any) -> jax.Array:
    return jnp.asarray(obs, jnp.float32)


def reset(spec: EnvSpec, key: jax.Array) -> EnvSlot:
    obs, state = spec.env.reset(key, spec.params)
    return EnvSlot(state, _float_obs(obs), jnp.float32(0.0), jnp.int32(0))


def to_env_action(spec: EnvSpec, action: jax.Array) -> jax.Array:
    """Clip continuous actions to the space's bounds (the policy itself is unbounded)."""
    if spec.continuous:
        return jnp.clip(action, spec.action_low, spec.action_high)
    return action


def step(spec: EnvSpec, key: jax.Array, slot: EnvSlot, action: jax.Array
         ) -> tuple[EnvSlot, StepOutput]:
    """Step one environment with auto-reset; tracks the running episode's return and length."""
    out = spec.env.step(key, slot.env_state, to_env_action(spec, action), spec.params)
    if len(out) == 6:   # gymnax >= 1.0: terminated and truncated are separate
        obs, state, reward, terminated, truncated, info = out
        final_obs = info.get("final_observation", obs)
    else:               # older gymnax-style env: one done flag, treated as terminal
        obs, state, reward, done, info = out
        terminated, truncated, final_obs = done, jnp.zeros_like(done), obs
    terminated = jnp.asarray(terminated, bool)
    truncated = jnp.logical_and(jnp.asarray(truncated, bool), jnp.logical_not(terminated))
    done = jnp.logical_or(terminated, truncated)
    reward = jnp.asarray(reward, jnp.float32)
    ep_return = slot.episode_return + reward
    ep_length = slot.episode_length + 1
    new_slot = EnvSlot(
        env_state=state,
        obs=_float_obs(obs),
        episode_return=jnp.where(done, 0.0, ep_return),
        episode_length=jnp.where(done, 0, ep_length),
    )
    return new_slot, StepOutput(
        reward=reward,
        terminated=terminated,
        truncated=truncated,
        final_obs=_float_obs(final_obs),
        finished_return=jnp.where(done, ep_return, 0.0),
        finished_length=jnp.where(done, ep_length, 0),
    )
