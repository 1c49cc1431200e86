"""Single-shard PPO math: GAE(lambda) and the clipped PPO loss.

No axis names here: the functions are exact for whatever batch they are given. ``update.py``
supplies globally reduced statistics (advantage mean/std, observation moments) where the math
needs the whole global batch.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import chex
import jax
import jax.numpy as jnp


def compute_gae(
    r_t: jax.Array,
    v_t: jax.Array,
    done_t: jax.Array,
    v_last: jax.Array,
    gamma: float,
    gae_lambda: float,
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimates over a rollout.

    delta_t = r_t + gamma * (1 - done_t) * v_{t+1} - v_t
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}

    ``done_t`` marks that the episode ended AT step t (the next value belongs to a new
    episode), so neither the bootstrap nor the recursion crosses it. Time-limit truncations are
    handled by the caller folding ``gamma * V(final_obs)`` into ``r_t``
    (:func:`bootstrap_truncation`).

    Args:
      r_t: [T, B] rewards.  v_t: [T, B] values of the observations acted on.
      done_t: [T, B] episode ended at t.  v_last: [B] value of the observation after step T-1.
    Returns:
      (advantages [T, B], value targets [T, B]).
    """
    chex.assert_rank([r_t, v_t, done_t, v_last], [2, 2, 2, 1])
    chex.assert_equal_shape([r_t, v_t, done_t])
    not_done = 1.0 - done_t.astype(r_t.dtype)

    def backward(carry, xs):
        a_next, v_next = carry
        r, v, nd = xs
        delta = r + gamma * nd * v_next - v
        a = delta + gamma * gae_lambda * nd * a_next
        return (a, v), a

    _, advantages = jax.lax.scan(
        backward, (jnp.zeros_like(v_last), v_last), (r_t, v_t, not_done), reverse=True)
    return advantages, advantages + v_t


def bootstrap_truncation(r_t: jax.Array, truncated_t: jax.Array, v_final_t: jax.Array,
                         gamma: float) -> jax.Array:
    """r_t + gamma * V(final obs_t) where the episode was truncated at t (a time limit is not a
    terminal state: credit the value of where it stopped), else r_t."""
    return r_t + gamma * jnp.where(truncated_t, v_final_t, 0.0)


class LossInputs(NamedTuple):
    """A minibatch, flat ``[N, ...]``. Advantages arrive already normalised if configured."""

    obs: jax.Array
    action: jax.Array
    old_log_prob: jax.Array
    old_value: jax.Array
    advantage: jax.Array
    target: jax.Array
    mask: jax.Array | None = None   # legal actions [N, A] (masked environments only)
    weight: jax.Array | None = None  # [N] 0 for steps that are not experience (a pool's
                                     #   reset step), else 1; None: all count


class LossInfo(NamedTuple):
    total: jax.Array
    policy_loss: jax.Array
    value_loss: jax.Array
    entropy: jax.Array
    approx_kl: jax.Array
    clip_fraction: jax.Array


def ppo_loss(
    params: Any,
    batch: LossInputs,
    policy_fn: Callable,
    value_fn: Callable,
    clip_eps: float,
    vf_clip_eps: float | None,
    ent_coef: float,
    vf_coef: float,
    forward_fn: Callable | None = None,
) -> tuple[jax.Array, LossInfo]:
    """Clipped surrogate + (optionally clipped) value loss - entropy bonus; means over batch
    (steps of weight 0 add nothing; the mean still divides by the batch size, so a
    device's share of the global mean does not depend on how many it holds).
    ``forward_fn(params, obs, mask) -> (dist, value)``, if given, replaces the two calls
    (a recurrent pair replays both networks in one scan)."""
    def mean(x):
        return jnp.mean(x) if batch.weight is None else jnp.mean(x * batch.weight)

    if forward_fn is None:
        dist = policy_fn(params, batch.obs, batch.mask)
        value = value_fn(params, batch.obs)
    else:
        dist, value = forward_fn(params, batch.obs, batch.mask)
    log_prob = dist.log_prob(batch.action)
    log_ratio = log_prob - batch.old_log_prob
    ratio = jnp.exp(log_ratio)

    surrogate = ratio * batch.advantage
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * batch.advantage
    policy_loss = -mean(jnp.minimum(surrogate, clipped))

    value_err = jnp.square(value - batch.target)
    if vf_clip_eps is not None:
        value_clipped = batch.old_value + jnp.clip(value - batch.old_value,
                                                   -vf_clip_eps, vf_clip_eps)
        value_err = jnp.maximum(value_err, jnp.square(value_clipped - batch.target))
    value_loss = 0.5 * mean(value_err)

    entropy = mean(dist.entropy())
    total = policy_loss + vf_coef * value_loss - ent_coef * entropy

    # Diagnostics (no gradient): the low-variance KL estimator (ratio - 1) - log ratio.
    approx_kl = jax.lax.stop_gradient(mean((ratio - 1.0) - log_ratio))
    clip_fraction = jax.lax.stop_gradient(
        mean((jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32)))
    return total, LossInfo(total, policy_loss, value_loss, entropy, approx_kl, clip_fraction)
