"""Running mean/variance (observations, value targets), merged in parallel form.

Statistics of a batch are reduced over the mesh by the caller (one all-reduce per update), so
these functions are exact for whatever moments they are given and know nothing of sharding.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class Moments(NamedTuple):
    """Running mean/variance of observations (parallel-merge form, float32)."""

    mean: jax.Array
    var: jax.Array
    count: jax.Array   # [] float32


def init_moments(shape: tuple[int, ...]) -> Moments:
    return Moments(jnp.zeros(shape), jnp.ones(shape), jnp.float32(1e-4))


def merge_moments(running: Moments, batch_mean: jax.Array, batch_var: jax.Array,
                  batch_count: jax.Array) -> Moments:
    """Chan et al. parallel update: combine running moments with a batch's moments."""
    delta = batch_mean - running.mean
    total = running.count + batch_count
    mean = running.mean + delta * batch_count / total
    m2 = (running.var * running.count + batch_var * batch_count
          + jnp.square(delta) * running.count * batch_count / total)
    return Moments(mean, m2 / total, total)


def moments_from_sums(total: jax.Array, total_sq: jax.Array, count: jax.Array
                      ) -> tuple[jax.Array, jax.Array]:
    """(mean, variance) from a batch's sum, sum of squares and count (e.g. psum-ed over the
    mesh). The variance is clamped at 0: E[x^2] - E[x]^2 can go negative by rounding."""
    mean = total / count
    return mean, jnp.maximum(total_sq / count - jnp.square(mean), 0.0)


def normalize(moments: Moments, x: jax.Array, clip: float = 10.0) -> jax.Array:
    """Observations: standardised and clipped (outliers must not saturate the network)."""
    return jnp.clip(standardize(moments, x), -clip, clip)


def standardize(moments: Moments, x: jax.Array) -> jax.Array:
    return (x - moments.mean) / jnp.sqrt(moments.var + 1e-8)


def denormalize(moments: Moments, x: jax.Array) -> jax.Array:
    """Inverse of :func:`standardize`: a normalised critic's output in return units."""
    return x * jnp.sqrt(moments.var + 1e-8) + moments.mean
