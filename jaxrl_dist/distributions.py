"""Action distributions: a categorical that honours legal-action masks and a diagonal Gaussian,
optionally squashed into the action bounds by tanh. Algorithm-agnostic: rollouts and evaluation
act through this interface (``sample_from_noise``, ``log_prob``, ``mode``, ``env_action``).

The randomness of a draw (:func:`action_noise`) is separate from the distribution, so a rollout
draws all of it in one batched op before its loop.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

_LOG_2PI = float(np.log(2.0 * np.pi))
# Logit of an illegal action: finite, so softmax, entropy and log-probs stay NaN-free.
MASKED_LOGIT = -1e9


def action_noise(key: jax.Array, continuous: bool, shape: tuple[int, ...]) -> jax.Array:
    """The randomness of action draws (``shape``: [..., action_dim]), separate from the
    distribution so a rollout can draw all of it in one batched op before its loop (per-step
    RNG ops dominate small rollouts)."""
    if continuous:
        return jax.random.normal(key, shape)
    return jax.random.gumbel(key, shape)


class Categorical(NamedTuple):
    logits: jax.Array   # [..., A]

    def masked(self, mask: jax.Array | None) -> "Categorical":
        """Illegal actions (``mask`` False) get probability 0: never sampled, never the mode."""
        return self if mask is None else Categorical(jnp.where(mask, self.logits, MASKED_LOGIT))

    def sample(self, key: jax.Array) -> jax.Array:
        return self.sample_from_noise(action_noise(key, False, self.logits.shape[-1:]))

    def sample_from_noise(self, gumbel: jax.Array) -> jax.Array:
        """Gumbel-max: argmax(logits + Gumbel noise) is a draw from softmax(logits)."""
        return jnp.argmax(self.logits + gumbel, axis=-1)

    def mode(self) -> jax.Array:
        return jnp.argmax(self.logits, axis=-1)

    def env_action(self, action: jax.Array) -> jax.Array:
        return action

    def log_prob(self, action: jax.Array) -> jax.Array:
        logp = jax.nn.log_softmax(self.logits)
        return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self) -> jax.Array:
        logp = jax.nn.log_softmax(self.logits)
        return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


class DiagGaussian(NamedTuple):
    """A Gaussian over the pre-squash action u. With bounds (``low``/``high``), the environment
    receives low + (tanh(u) + 1) (high - low) / 2; without, u itself (clipped by the environment).

    Transitions store u, so PPO's ratio pi_new(a) / pi_old(a) is exactly N_new(u) / N_old(u): the
    tanh Jacobian depends on u only and cancels. The entropy bonus is u's Gaussian entropy (Brax
    adds a one-sample estimate of the Jacobian term; not done here)."""

    mean: jax.Array      # [..., A]
    log_std: jax.Array   # [..., A]
    low: Any = None      # [A] bounds of a tanh-squashed action, else None
    high: Any = None

    def sample(self, key: jax.Array) -> jax.Array:
        return self.sample_from_noise(jax.random.normal(key, self.mean.shape))

    def sample_from_noise(self, normal: jax.Array) -> jax.Array:
        return self.mean + jnp.exp(self.log_std) * normal

    def mode(self) -> jax.Array:
        return self.mean

    def env_action(self, u: jax.Array) -> jax.Array:
        if self.low is None:
            return u
        return self.low + (jnp.tanh(u) + 1.0) * (0.5 * (self.high - self.low))

    def log_prob(self, action: jax.Array) -> jax.Array:
        z = (action - self.mean) * jnp.exp(-self.log_std)
        return jnp.sum(-0.5 * z**2 - self.log_std - 0.5 * _LOG_2PI, axis=-1)

    def entropy(self) -> jax.Array:
        return jnp.sum(self.log_std + 0.5 * (1.0 + _LOG_2PI), axis=-1)


class TanhGaussian(NamedTuple):
    """A Gaussian over u squashed by tanh: the action a = tanh(u) lies in (-1, 1) (SAC's
    actor; the learner rescales it to the bounds). Unlike :class:`DiagGaussian`, whose
    learner stores u, its log-density is that of ``a`` (change of variables)::

        log p(a) = sum_i [ log N(u_i; mean_i, std_i) - log(1 - tanh(u_i)^2) ]
        log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2 u))      (exact, finite for any u)

    so entropy terms and SAC's targets are in the units of the action the critics see."""

    mean: jax.Array      # [..., A]
    log_std: jax.Array   # [..., A]

    def sample_and_log_prob(self, normal: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(a [..., A], log p(a) [...]) of the draw u = mean + std * ``normal``."""
        u = self.mean + jnp.exp(self.log_std) * normal
        gaussian = jnp.sum(-0.5 * normal**2 - self.log_std - 0.5 * _LOG_2PI, axis=-1)
        log_det = jnp.sum(2.0 * (np.log(2.0) - u - jax.nn.softplus(-2.0 * u)), axis=-1)
        return jnp.tanh(u), gaussian - log_det

    def mode(self) -> jax.Array:
        """tanh(mean): the deterministic action (evaluation, export)."""
        return jnp.tanh(self.mean)
