"""Minibatches of an on-policy rollout, stratified by environment (PPO's and PQN's).

Every epoch, each environment's time steps are permuted with a key derived from its GLOBAL
index, and minibatch ``m`` takes slice ``m`` of every environment. The set of samples in a
global minibatch therefore does not depend on how the environments are spread over devices,
which is what keeps results topology-invariant.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def permutation(key: jax.Array, n: int) -> jax.Array:
    """A uniformly random permutation of ``range(n)`` by ONE single-operand sort: random bits
    above, the index below (distinct, so the sorted low bits are a permutation). XLA:CPU sorts
    one operand with its built-in comparison, ~3x faster than the key-value sort of
    ``jax.random.permutation`` (+6 % on the CartPole update). Equal random parts keep index
    order: n^2 / 2^(33 - index bits) tied pairs expected per shuffle, 0.0002 for n = 128 and
    8 for n = 4096, so longer sequences use ``jax.random.permutation``."""
    index_bits = max(1, (n - 1).bit_length())
    if index_bits > 12:
        return jax.random.permutation(key, n)
    keyed = (jax.random.bits(key, (n,), jnp.uint32) << index_bits) | jnp.arange(n, dtype=jnp.uint32)
    return (jnp.sort(keyed) & ((1 << index_bits) - 1)).astype(jnp.int32)


def epoch_permutations(key: jax.Array, epochs: int, env_ids: jax.Array, T: int) -> jax.Array:
    """[U, E, T]: each epoch's permutation of each local environment's T steps."""
    def epoch_perm(key_epoch):
        return jax.vmap(lambda e: permutation(jax.random.fold_in(key_epoch, e), T))(env_ids)
    return jax.vmap(epoch_perm)(jax.random.split(key, epochs))


def to_minibatches(x: jax.Array, perm: jax.Array, M: int) -> jax.Array:
    """[T, E, ...] -> [M, E * T / M, ...] with the environments' steps permuted by ``perm``
    [E, T]; minibatch m takes slice m of every environment."""
    T, E = x.shape[:2]
    x = jax.vmap(lambda xe, pe: xe[pe])(jnp.swapaxes(x, 0, 1), perm)           # [E, T, ...]
    x = x.reshape(E, M, T // M, *x.shape[2:])
    return jnp.swapaxes(x, 0, 1).reshape(M, E * (T // M), *x.shape[3:])
