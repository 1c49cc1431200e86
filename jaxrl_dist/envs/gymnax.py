"""gymnax (the default suite: unprefixed names) and the user's gymnax-style environment objects.

A plain gymnax ``Environment`` is stepped through ``step_env`` + ``is_truncated`` and reset
through ``reset_env``, which is exactly its own ``step`` with the auto-reset made lazy (see
``base.step``). A wrapper or other object with its own ``step`` is stepped through it.
"""

from __future__ import annotations

import importlib
import sys
import types
from dataclasses import dataclass, replace
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_dist.envs.base import EnvError, EnvSpec, ObservationSubset, Step
from jaxrl_dist.errors import unknown_env

DEFAULT_MAX_STEPS = 1000   # evaluation bound when an environment states no time limit


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


def import_gymnax() -> Any:
    """gymnax imports seaborn and matplotlib.pyplot at module level, for its render functions
    only: about 2.5 s and several hundred MB in every process (scipy, pandas). They are
    imported when first used instead; gymnax is unchanged."""
    if "gymnax" not in sys.modules:
        for name in ("seaborn", "matplotlib.pyplot"):
            if name not in sys.modules:
                sys.modules[name] = _ImportedOnUse(name)
    import gymnax
    return gymnax


@dataclass(frozen=True, eq=False)
class GymnaxAdapter:
    """A plain gymnax environment: its own step, with the auto-reset left to ``base.step``."""

    env: Any
    params: Any

    def reset(self, key: jax.Array) -> tuple[Any, jax.Array]:
        obs, state = self.env.reset_env(key, self.params)
        return state, obs

    def step(self, key: jax.Array, state: Any, action: jax.Array) -> Step:
        obs, state, reward, terminated, _ = self.env.step_env(key, state, action, self.params)
        return Step(state, obs, reward, terminated, self.env.is_truncated(state, self.params))


@dataclass(frozen=True, eq=False)
class GymnaxObjectAdapter:
    """An object with its own gymnax-style ``step`` (a wrapper, or a user's environment):
    stepped through it, auto-reset included (``autoreset="same_step"``)."""

    env: Any
    params: Any

    def reset(self, key: jax.Array) -> tuple[Any, jax.Array]:
        obs, state = self.env.reset(key, self.params)
        return state, obs

    def step_autoreset(self, key: jax.Array, state: Any, action: jax.Array):
        out = self.env.step(key, state, action, self.params)
        if len(out) == 6:   # gymnax >= 1.0: terminated and truncated are separate
            obs, state, reward, terminated, truncated, info = out
            final_obs = info.get("final_observation", obs)
        else:               # older gymnax-style env: one done flag, treated as terminal
            obs, state, reward, done, info = out
            terminated, truncated, final_obs = done, jnp.zeros_like(done), obs
        return state, obs, reward, terminated, truncated, final_obs


def plain_gymnax(env: Any) -> bool:
    """A gymnax Environment whose ``step`` is the library's own (so stepping it through
    ``step_env``/``reset_env`` is exactly its semantics)."""
    from gymnax.environments.environment import Environment

    return isinstance(env, Environment) and type(env).step is Environment.step


def _traced(fn: Callable[[], Any]) -> Any:
    """``fn()`` under an abstract trace, for what it returns that is static (a space's
    shape): the jnp ops it runs (a gymnax Box's bounds) are traced instead of each compiled
    and run on its own at build time (~10-30 ms apiece on a cold cache)."""
    out = []
    jax.eval_shape(lambda: out.append(fn()))
    return out[0]


def spec_from_gymnax(env: Any, params: Any, name: str, adapter: Any = None,
                     max_episode_steps: int | None = None) -> EnvSpec:
    """An :class:`EnvSpec` from a gymnax-API environment (also used by suites that follow the
    gymnax interface, such as Craftax, with an ``adapter`` without auto-reset of their own)."""
    autoreset = "lazy"
    if adapter is None:
        if not plain_gymnax(env):
            adapter, autoreset = GymnaxObjectAdapter(env, params), "same_step"
        else:
            adapter = GymnaxAdapter(env, params)
    space = env.action_space(params)
    obs_shape = tuple(_traced(lambda: env.observation_space(params)).shape)
    if max_episode_steps is None:
        max_episode_steps = int(getattr(params, "max_steps_in_episode", DEFAULT_MAX_STEPS))
    common = dict(name=name, obs_shape=obs_shape, max_episode_steps=max_episode_steps,
                  autoreset=autoreset)
    if hasattr(space, "n"):
        return EnvSpec(adapter, action_dim=int(space.n), continuous=False, **common)
    if hasattr(space, "low") and hasattr(space, "shape"):
        shape = tuple(space.shape)
        if len(shape) != 1:
            raise EnvError(f"{name}: only flat Box action spaces are supported, got {shape}")
        low = np.broadcast_to(np.asarray(space.low, np.float32), shape).copy()
        high = np.broadcast_to(np.asarray(space.high, np.float32), shape).copy()
        return EnvSpec(adapter, action_dim=shape[0], continuous=True, action_low=low,
                       action_high=high, **common)
    raise EnvError(f"{name}: unsupported action space {type(space).__name__} "
                   f"(need Discrete or Box)")


# The entries of each classic-control observation that are not velocities (``env_kwargs:
# {hide_velocities: true}``): the velocity-masked partially observed tasks of recurrent RL
# (e.g. CartPole observing [x, theta] only).
WITHOUT_VELOCITIES = {
    "CartPole-v1": (0, 2),                  # x, x_dot, theta, theta_dot
    "Pendulum-v1": (0, 1),                  # cos theta, sin theta, theta_dot
    "Acrobot-v1": (0, 1, 2, 3),             # cos/sin of both angles, 2 angular velocities
    "MountainCar-v0": (0,),                 # position, velocity
    "MountainCarContinuous-v0": (0,),
}


def make(name: str, params: Any = None, episode_length: int | None = None,
         hide_velocities: bool = False, **kwargs: Any) -> EnvSpec:
    """``CartPole-v1`` etc. (gymnax's registry); ``kwargs`` go to ``gymnax.make``.
    ``episode_length`` replaces the environment's time limit (``max_steps_in_episode``):
    CartPole-v1 at 200 is CartPole-v0, the version DI-engine and older papers report.
    ``hide_velocities`` observes only :data:`WITHOUT_VELOCITIES`' entries (classic control)."""
    gymnax = import_gymnax()
    if name not in gymnax.registered_envs:
        raise unknown_env("gymnax", name, gymnax.registered_envs)
    if hide_velocities and name not in WITHOUT_VELOCITIES:
        raise EnvError(f"env_kwargs.hide_velocities: {name} has no known velocity entries; "
                       f"it applies to {', '.join(WITHOUT_VELOCITIES)}")
    env, default_params = gymnax.make(name, **kwargs)
    params = default_params if params is None else params
    if episode_length is not None:
        if not hasattr(params, "max_steps_in_episode"):
            raise EnvError(f"{name} has no time limit to set (max_steps_in_episode); "
                           f"drop episode_length")
        if int(episode_length) < 1:
            raise EnvError(f"episode_length must be >= 1, got {episode_length}")
        params = params.replace(max_steps_in_episode=int(episode_length))
    spec = spec_from_gymnax(env, params, name)
    if hide_velocities:
        keep = WITHOUT_VELOCITIES[name]
        spec = replace(spec, adapter=ObservationSubset(spec.adapter, keep), obs_shape=(len(keep),))
    if name in UNCHECKED:
        spec = replace(spec, shard_map_safe=False)   # see EnvSpec.shard_map_safe
    return spec


# gymnax environments whose step mixes device-varying and constant values in its own
# cond/while carries, which shard_map's varying-axis checks reject (found by
# tests/test_configs.py: the shipped configs of these two did not run as single runs).
UNCHECKED = frozenset({"Asterix-MinAtar", "Freeway-MinAtar"})


def from_object(env: Any, params: Any = None) -> EnvSpec:
    """A user's gymnax-style environment object (``reset``/``step``/spaces/default params)."""
    import_gymnax()
    for attr in ("reset", "step", "action_space", "observation_space", "default_params"):
        if not hasattr(env, attr):
            raise EnvError(f"environment object {type(env).__name__} lacks '{attr}'; "
                           f"it must follow the gymnax Environment interface")
    name = getattr(env, "name", type(env).__name__)
    return spec_from_gymnax(env, env.default_params if params is None else params, name)
