"""The key schedule: every PRNG key a run draws, named by purpose, in ONE place both drivers use.

Keys derive from the seed and from counters every process agrees on (the update, the global
environment index, the step), never from a device or process index, so the same config and seed
draw the same numbers on any topology and on either driver (the host actors draw exactly what
the fused rollout draws). A function here returns named keys; callers never index a split.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

EVAL_STREAM = 0x5EED  # folded into the seed so eval keys never collide with training keys


class SeedKeys(NamedTuple):
    """A seed's three streams."""

    params: jax.Array   # the networks' initial parameters
    envs: jax.Array     # the training environments' resets (folded with the global index)
    train: jax.Array    # the train state's key, split once per update (:func:`of_update`)


def seed_words(seed: int) -> np.ndarray:
    """``jax.random.PRNGKey(seed)``'s words on the host (threefry: ``[0, seed]`` for a seed
    below 2**32, tested against it): JAX builds the key with two small programs that a cold
    start compiles on the critical path (~0.13 s on a 2-core VM)."""
    if not 0 <= seed < 2**32 or jax.config.jax_default_prng_impl != "threefry2x32":
        return np.asarray(jax.random.PRNGKey(seed))
    return np.array([0, seed], np.uint32)


def seed_key(seed: int) -> jax.Array:
    """``jax.random.PRNGKey(seed)``, placed as JAX places it, from :func:`seed_words`."""
    return jax.device_put(seed_words(seed))


def of_seed(seed_key: jax.Array) -> SeedKeys:
    return SeedKeys(*jax.random.split(seed_key, 3))


class UpdateKeys(NamedTuple):
    """What one update draws from the train state's key."""

    next: jax.Array    # the train state's key for the update after
    act: jax.Array     # the rollout's action noise and environment steps
    learn: jax.Array   # the learner's (minibatch order, sampling, ...)


def of_update(train_key: jax.Array) -> UpdateKeys:
    return UpdateKeys(*jax.random.split(train_key, 3))


def per_env(key: jax.Array, env_ids: jax.Array) -> jax.Array:
    """One key per environment [E], a function of the global environment index only."""
    return jax.vmap(jax.random.fold_in, (None, 0))(key, env_ids)


class RolloutKeys(NamedTuple):
    """An environment's keys for one rollout, from the update's ``act`` key and its global
    index: one for all its action noise, one for all its (step, reset) pairs."""

    noise: jax.Array   # [E, key]
    env: jax.Array     # [E, key]


def of_rollout(act_key: jax.Array, env_ids: jax.Array) -> RolloutKeys:
    both = jax.vmap(jax.random.split)(per_env(act_key, env_ids))   # [E, 2, key]
    return RolloutKeys(*jnp.moveaxis(both, 1, 0))


def host_env_seeds_key(seed_key: jax.Array, update: int) -> jax.Array:
    """Host environments are re-seeded (from this key and their global index) when a run
    starts or resumes at ``update``: their state is not in checkpoints."""
    return jax.random.fold_in(of_seed(seed_key).envs, update)


def host_env_reset_key(seed_key: jax.Array, env_step: int) -> jax.Array:
    """Host environments that ``env_nonfinite: reset`` resets after their ``env_step``-th
    step are re-seeded from this key and their global index (a stream apart from
    :func:`host_env_seeds_key`'s, whose updates never reach 2^32 - 1)."""
    return jax.random.fold_in(jax.random.fold_in(of_seed(seed_key).envs, 2**32 - 1), env_step)


class EvalKeys(NamedTuple):
    reset: jax.Array   # the evaluation environments' resets (folded with their index)
    steps: jax.Array   # each step's keys (folded with the step, then the index)


def of_eval(seed_key: jax.Array, update: jax.Array | int) -> EvalKeys:
    """An evaluation's keys: a function of the seed and the update it evaluates."""
    key = jax.random.fold_in(jax.random.fold_in(seed_key, EVAL_STREAM), update)
    return EvalKeys(*jax.random.split(key))
