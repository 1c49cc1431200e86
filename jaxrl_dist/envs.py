"""gymnax environments: creation by name, auto-reset, episode statistics, action clipping.

``reset`` is for ONE environment (callers ``vmap``); ``step`` takes a batch, so it can skip the
auto-reset when no environment of the batch finished. Keys come from the caller, which derives
them from the global environment index (see ``rollout.py``).
"""

from __future__ import annotations

from jaxrl_dist.errors import UserError

import importlib
import sys
import types
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct


class EnvError(UserError):
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


class _ImportedOnUse(types.ModuleType):
    """Stands in for a module in ``sys.modules`` and imports the real one at its first
    attribute access, then forwards every access to it."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__spec__ = None   # what the import system checks; must not trigger the import

    def __getattr__(self, attr: str) -> Any:
        real = self.__dict__.get("_real")
        if real is None:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
            real = self.__dict__["_real"] = importlib.import_module(self.__name__)
        return getattr(real, attr)


def _import_gymnax() -> Any:
    """gymnax imports seaborn and matplotlib.pyplot at module level, for its render functions
    only: about 2.5 s and several hundred MB in every process (scipy, pandas). They are
    imported when first used instead; gymnax is unchanged."""
    if "gymnax" not in sys.modules:
        for name in ("seaborn", "matplotlib.pyplot"):
            if name not in sys.modules:
                sys.modules[name] = _ImportedOnUse(name)
    import gymnax
    return gymnax


def make_env(env: Any, env_params: Any = None) -> EnvSpec:
    """An :class:`EnvSpec` from a gymnax id or a user's gymnax-style environment object."""
    gymnax = _import_gymnax()  # imported late: gymnax imports take a second

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


def step_keys(keys: jax.Array) -> jax.Array:
    """[..., key] -> [..., 2, key]: the (step, reset) key pair gymnax's ``Environment.step``
    splits from its one key. Splitting ahead (for a whole rollout at once) keeps random-number
    generation out of the step loop, where XLA:CPU runs threefry as a loop of its own."""
    return jax.vmap(jax.random.split)(keys.reshape(-1, *keys.shape[-1:])).reshape(
        *keys.shape[:-1], 2, *keys.shape[-1:])


def _plain_gymnax(env: Any) -> bool:
    """A gymnax Environment whose ``step`` is the library's own (so stepping it through
    ``step_env``/``reset_env`` is exactly its semantics); wrappers and other objects are
    stepped through their own ``step``."""
    from gymnax.environments.environment import Environment

    return isinstance(env, Environment) and type(env).step is Environment.step


def step(spec: EnvSpec, keys: jax.Array, slots: EnvSlot, action: jax.Array
         ) -> tuple[EnvSlot, StepOutput]:
    """Step a batch of environments with auto-reset; tracks each running episode's statistics.

    Args:
      keys: [E, 2, key] (step, reset) key pairs from :func:`step_keys`.  slots: [E].
      action: [E, ...].
    For a plain gymnax environment this is ``Environment.step`` with its auto-reset made lazy:
    the reset (random draws and all) runs only when some environment of the batch finished,
    instead of at every step. Outputs are the same as gymnax's. (Measured on CPU, where the
    branch is cheap; with thousands of environments per device some always finish, and on
    accelerators the branch's predicate may cost a host round trip per step: not yet measured.)
    """
    env, params = spec.env, spec.params
    action = to_env_action(spec, action)
    key_step, key_reset = keys[:, 0], keys[:, 1]
    if _plain_gymnax(env):
        obs_st, state_st, reward, terminated, _ = jax.vmap(
            env.step_env, (0, 0, 0, None))(key_step, slots.env_state, action, params)
        truncated = jax.vmap(env.is_truncated, (0, None))(state_st, params)
        done = jnp.logical_or(terminated, truncated)

        def reset_finished():
            obs_re, state_re = jax.vmap(env.reset_env, (0, None))(key_reset, params)
            pick = lambda x, y: jax.vmap(jax.lax.select)(done, x, y)  # noqa: E731
            return jax.tree.map(pick, obs_re, obs_st), jax.tree.map(pick, state_re, state_st)

        obs, state = jax.lax.cond(jnp.any(done), reset_finished, lambda: (obs_st, state_st))
        final_obs = obs_st
    else:
        obs, state, reward, terminated, truncated, final_obs = jax.vmap(_generic_step, (
            None, 0, 0, 0))(spec, key_step, slots.env_state, action)
    terminated = jnp.asarray(terminated, bool)
    truncated = jnp.logical_and(jnp.asarray(truncated, bool), jnp.logical_not(terminated))
    done = jnp.logical_or(terminated, truncated)
    reward = jnp.asarray(reward, jnp.float32)
    ep_return = slots.episode_return + reward
    ep_length = slots.episode_length + 1
    new_slots = EnvSlot(
        env_state=state,
        obs=_float_obs(obs),
        episode_return=jnp.where(done, 0.0, ep_return),
        episode_length=jnp.where(done, 0, ep_length),
    )
    return new_slots, StepOutput(
        reward=reward,
        terminated=terminated,
        truncated=truncated,
        final_obs=_float_obs(final_obs),
        finished_return=jnp.where(done, ep_return, 0.0),
        finished_length=jnp.where(done, ep_length, 0),
    )


def _generic_step(spec: EnvSpec, key: jax.Array, state: Any, action: jax.Array):
    """One environment through its own ``step`` (gymnax >= 1.0 6-tuple or older 5-tuple)."""
    out = spec.env.step(key, state, action, spec.params)
    if len(out) == 6:   # gymnax >= 1.0: terminated and truncated are separate
        obs, state, reward, terminated, truncated, info = out
        final_obs = info.get("final_observation", obs)
    else:               # older gymnax-style env: one done flag, treated as terminal
        obs, state, reward, done, info = out
        terminated, truncated, final_obs = done, jnp.zeros_like(done), obs
    return obs, state, reward, terminated, truncated, final_obs
