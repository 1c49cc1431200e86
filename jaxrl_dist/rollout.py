"""Collecting a rollout: one pure function of (params, environments, key).

Randomness is keyed by the GLOBAL environment index and the step number, never by device or
process, so a given environment sees the same action and transition noise on any topology.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from jaxrl_dist import envs as envs_lib
from jaxrl_dist.envs import EnvSlot, EnvSpec
from jaxrl_dist.networks import Networks
from jaxrl_dist.types import Transition


def env_keys(key: jax.Array, env_ids: jax.Array) -> jax.Array:
    """One key per environment, a function of the global environment index only."""
    return jax.vmap(jax.random.fold_in, (None, 0))(key, env_ids)


def collect(
    spec: EnvSpec,
    nets: Networks,
    params: Any,
    normalize_fn: Callable[[jax.Array], jax.Array],
    slots: EnvSlot,
    env_ids: jax.Array,
    key: jax.Array,
    num_steps: int,
    gamma: float,
    bootstrap_truncation: bool,
) -> tuple[EnvSlot, Transition]:
    """Step the local environments ``num_steps`` times.

    Args:
      slots: [E] environments.  env_ids: [E] int32 global indices.  key: replicated.
    Returns:
      (environments after the rollout, transitions [T, E, ...]).
    """
    step_env = jax.vmap(lambda k, s, a: envs_lib.step(spec, k, s, a))

    def env_step(slots: EnvSlot, t: jax.Array):
        keys = env_keys(jax.random.fold_in(key, t), env_ids)
        key_act, key_env = jnp.moveaxis(jax.vmap(jax.random.split)(keys), 1, 0)
        obs = normalize_fn(slots.obs)
        dist = nets.policy(params, obs)
        value = nets.value(params, obs)
        action = jax.vmap(lambda d, k: d.sample(k))(dist, key_act)
        log_prob = dist.log_prob(action)
        new_slots, out = step_env(key_env, slots, action)
        reward = out.reward
        if bootstrap_truncation:
            # A time limit is not a terminal state: credit the value of where it stopped.
            final_value = nets.value(params, normalize_fn(out.final_obs))
            reward = reward + gamma * jnp.where(out.truncated, final_value, 0.0)
        transition = Transition(
            obs=slots.obs, action=action, log_prob=log_prob, value=value, reward=reward,
            done=jnp.logical_or(out.terminated, out.truncated),
            finished_return=out.finished_return, finished_length=out.finished_length)
        return new_slots, transition

    # Two steps per loop iteration: XLA:CPU's per-iteration overhead dominates small batches
    # (measured +25 % env steps/s on CartPole with 4 envs; 4 or 8 were slower and compile longer).
    return jax.lax.scan(env_step, slots, jnp.arange(num_steps), unroll=2)
