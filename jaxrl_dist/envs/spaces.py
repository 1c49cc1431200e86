"""Shapes and bounds an adapter reports, read from one traced reset (no compile, no FLOPs)."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxrl_dist.envs.base import EnvError, EnvSpec


def obs_shape(adapter: Any) -> tuple[int, ...]:
    """The observation shape the adapter's ``reset`` produces (after flattening)."""
    shape = jax.eval_shape(lambda k: adapter.reset(k)[1], jax.random.PRNGKey(0)).shape
    return tuple(int(d) for d in shape)


def box_spec(adapter: Any, name: str, action_size: int, low: Any = -1.0, high: Any = 1.0,
             max_episode_steps: int = 1000, shard_map_safe: bool = True) -> EnvSpec:
    """A continuous-action spec (bounds broadcast to ``[action_size]``)."""
    if action_size < 1:
        raise EnvError(f"{name}: action size {action_size} is not a flat continuous action")
    low = np.broadcast_to(np.asarray(low, np.float32), (action_size,)).copy()
    high = np.broadcast_to(np.asarray(high, np.float32), (action_size,)).copy()
    return EnvSpec(adapter, name, obs_shape(adapter), action_size, True, low, high,
                   max_episode_steps, shard_map_safe=shard_map_safe)


def discrete_spec(adapter: Any, name: str, num_actions: int, max_episode_steps: int,
                  masked: bool = False, shard_map_safe: bool = True) -> EnvSpec:
    return EnvSpec(adapter, name, obs_shape(adapter), int(num_actions), False,
                   max_episode_steps=max_episode_steps, masked=masked,
                   shard_map_safe=shard_map_safe)
