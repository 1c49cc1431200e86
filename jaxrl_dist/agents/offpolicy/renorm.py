"""Batch renormalisation (Ioffe 2017) as CrossQ uses it (sbx's ``BatchRenorm``), with the batch
statistics of the GLOBAL batch: every sample of every device, whatever the topology.

A layer normalises each feature of x [B, F]:

* eval (acting, the deployed policy, the critic inside the actor's loss, the actor inside
  the critics' target): by the running statistics, (x - mean) / sqrt(var + eps) x scale + bias;
* train: by the batch's mean mu and variance sigma^2 (gradients flow through both, as batch
  normalisation's), then, once warmed up (``renorm``), corrected towards the running
  statistics by r = clip(sigma / sigma_running, 1/R_MAX, R_MAX) and
  d = clip((mu - mean) / sigma_running, -D_MAX, D_MAX), both without gradient:
  x_hat = (x - mu) / sigma x r + d (sbx's form, eps placed as there). The running statistics
  then take one step: running <- momentum x running + (1 - momentum) x batch.

Peers (sbx, the paper's code; flax's BatchNorm under ``pmap`` with ``axis_name``) take the
statistics of one device's batch: the result then depends on the device count. Here
:func:`batch_moments` averages each device's local means of (w, w x, w x^2) in ONE ``pmean``
over the data axis: shards are equal-sized, so that is the global batch's (the rule of
:func:`~jaxrl_dist.gradients.global_mean_grad`). Differentiating through that ``pmean``
under ``global_mean_grad`` gives the global batch's gradient too (its transpose is the ``psum``
of every device's cotangent): tests/test_offpolicy.py compares both with one device.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl_dist import running_stats

EPS = 1e-3      # sbx's (flax BatchNorm's default is 1e-5)
VAR_FLOOR = 1e-12   # where the renormalisation's sqrt(var) stops (its gradient 5e5 there)
R_MAX = 3.0     # sbx's constants; the original paper relaxes them over training, sbx does not
D_MAX = 5.0


def batch_moments(x: jax.Array, weight: jax.Array | None, axis: str | None,
                  shift: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(mean [F], biased variance [F]) of x [B, F] over the GLOBAL batch, samples weighted by
    ``weight`` [B] (None: all 1). ``axis``: the data axis this device's shard is reduced over
    (None: x is the whole batch). ``shift`` (the running mean, replicated) is subtracted
    before the sums so E[x^2] - E[x]^2 does not cancel for features far from 0."""
    centred = x - jax.lax.stop_gradient(shift)
    w = None if weight is None else weight.astype(x.dtype)[:, None]
    local = {"sum": jnp.mean(centred if w is None else w * centred, axis=0),
             "sq": jnp.mean(jnp.square(centred) if w is None else w * jnp.square(centred),
                            axis=0)}
    if w is not None:
        local["count"] = jnp.mean(w)
    # ONE collective per layer: the local means, averaged over equal-sized shards
    sums = local if axis is None else jax.lax.pmean(local, axis)
    count = jnp.maximum(sums["count"], 1e-12) if w is not None else jnp.float32(1.0)
    mean, var = running_stats.moments_from_sums(sums["sum"], sums["sq"], count)
    return shift + mean, var


def renormalised(mean: jax.Array, var: jax.Array, running_mean: jax.Array,
                 running_var: jax.Array, renorm: Any) -> tuple[jax.Array, jax.Array]:
    """The (mean, variance) a training step normalises by: the batch's, or, with ``renorm``,
    the affine form of (x - mu) / sigma x r + d (sbx's: mu - d sigma / r and sigma^2 / r^2)."""
    std = jnp.sqrt(var + EPS)
    running_std = jnp.sqrt(running_var + EPS)
    r = jnp.clip(jax.lax.stop_gradient(std / running_std), 1.0 / R_MAX, R_MAX)
    d = jnp.clip(jax.lax.stop_gradient((mean - running_mean) / running_std), -D_MAX, D_MAX)
    # sqrt's gradient at 0 is infinite (times d = 0: NaN): a feature constant over the batch
    # (a unit dead for every sample) would skip the update; above the floor nothing changes
    affine_mean = mean - d * jnp.sqrt(jnp.maximum(var, VAR_FLOOR)) / r
    affine_var = var / jnp.square(r)
    return jnp.where(renorm, affine_mean, mean), jnp.where(renorm, affine_var, var)


class BatchRenorm(nn.Module):
    """One batch renormalisation layer over the last axis: parameters ``scale`` and ``bias``,
    running statistics ``mean`` and ``var`` in the ``batch_stats`` collection (updated when
    applied with ``train=True`` and ``mutable=["batch_stats"]``)."""

    momentum: float
    axis_name: str | None = None   # the data axis the batch is sharded over; None: unsharded

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False, weight: jax.Array | None = None,
                 renorm: Any = False) -> jax.Array:
        features = x.shape[-1]
        running_mean = self.variable("batch_stats", "mean", jnp.zeros, (features,), jnp.float32)
        running_var = self.variable("batch_stats", "var", jnp.ones, (features,), jnp.float32)
        scale = self.param("scale", nn.initializers.ones, (features,))
        bias = self.param("bias", nn.initializers.zeros, (features,))
        if train and not self.is_initializing():
            mean, var = batch_moments(x, weight, self.axis_name, running_mean.value)
            use_mean, use_var = renormalised(mean, var, running_mean.value, running_var.value,
                                             renorm)
            m = self.momentum
            running_mean.value = m * running_mean.value + (1.0 - m) * jax.lax.stop_gradient(mean)
            running_var.value = m * running_var.value + (1.0 - m) * jax.lax.stop_gradient(var)
        else:
            use_mean, use_var = running_mean.value, running_var.value
        # flax BatchNorm's arithmetic: (x - mean) * (scale * rsqrt(var + eps)) + bias
        return (x - use_mean) * (scale * jax.lax.rsqrt(use_var + EPS)) + bias
