"""Actor and critic networks (flax): an observation torso (MLP, or a CNN for [H, W, C] grids and
images) and the action distributions PPO needs (a categorical that honours legal-action masks,
a diagonal Gaussian, optionally squashed into the action bounds by tanh).

Networks hold no RNG state and know nothing about sharding; parameters are one plain pytree
``{"actor": ..., "critic": ...}`` so the optimizer, checkpoints and fingerprints see one tree.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_dist.config import NetworkConfig
from jaxrl_dist.envs import EnvSpec

_LOG_2PI = float(np.log(2.0 * np.pi))
# Logit of an illegal action: finite, so softmax, entropy and log-probs stay NaN-free.
MASKED_LOGIT = -1e9


def action_noise(key: jax.Array, continuous: bool, action_dim: int) -> jax.Array:
    """The randomness of one action draw, separate from the distribution so a rollout can draw
    all of it in one batched op before its loop (per-step RNG ops dominate small rollouts)."""
    if continuous:
        return jax.random.normal(key, (action_dim,))
    return jax.random.gumbel(key, (action_dim,))


class Categorical(NamedTuple):
    logits: jax.Array   # [..., A]

    def masked(self, mask: jax.Array | None) -> "Categorical":
        """Illegal actions (``mask`` False) get probability 0: never sampled, never the mode."""
        return self if mask is None else Categorical(jnp.where(mask, self.logits, MASKED_LOGIT))

    def sample(self, key: jax.Array) -> jax.Array:
        return self.sample_from_noise(action_noise(key, False, self.logits.shape[-1]))

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


def _tanh_bounds(config: NetworkConfig, spec: EnvSpec):
    """(low, high) as hashable tuples when actions are squashed, else None (clipped)."""
    if config.bounded_actions != "tanh" or not spec.continuous or spec.action_low is None:
        return None
    low, high = (np.broadcast_to(np.asarray(b, np.float32), (spec.action_dim,))
                 for b in (spec.action_low, spec.action_high))
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        return None
    return tuple(map(float, low)), tuple(map(float, high))


def use_cnn(config: NetworkConfig, obs_shape: tuple[int, ...]) -> bool:
    if config.torso == "cnn" and len(obs_shape) != 3:
        from jaxrl_dist.envs import EnvError
        raise EnvError(f"network.torso=cnn needs [H, W, C] observations, got shape "
                       f"{list(obs_shape)}; use torso: mlp (or auto)")
    return config.torso == "cnn" or (config.torso == "auto" and len(obs_shape) == 3)


class MLP(nn.Module):
    """Optional 3x3 convolutions (``conv``, for [H, W, C] inputs), then dense layers."""

    hidden: Sequence[int]
    out_dim: int
    activation: str
    out_scale: float
    conv: Sequence[int] = ()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = getattr(nn, self.activation)
        for channels in self.conv:
            x = nn.relu(nn.Conv(channels, (3, 3), padding="SAME",
                                kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
        x = x.reshape(x.shape[0], -1)  # without convolutions, images are flattened
        for size in self.hidden:
            x = act(nn.Dense(size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
        return nn.Dense(self.out_dim, kernel_init=nn.initializers.orthogonal(self.out_scale))(x)


class Actor(nn.Module):
    config: NetworkConfig
    action_dim: int
    continuous: bool
    conv: Sequence[int] = ()
    bounds: tuple[tuple[float, ...], tuple[float, ...]] | None = None   # (low, high) for tanh

    @nn.compact
    def __call__(self, obs: jax.Array) -> Categorical | DiagGaussian:
        out = MLP(self.config.actor_hidden, self.action_dim, self.config.activation, 0.01,
                  self.conv)(obs)
        if not self.continuous:
            return Categorical(out)
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        low, high = (None, None) if self.bounds is None else map(jnp.asarray, self.bounds)
        return DiagGaussian(out, jnp.broadcast_to(log_std, out.shape), low, high)


class Critic(nn.Module):
    config: NetworkConfig
    conv: Sequence[int] = ()

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return MLP(self.config.critic_hidden, 1, self.config.activation, 1.0, self.conv)(obs)[:, 0]


class Networks(NamedTuple):
    """Pure functions over the parameter tree; observations are batched ``[B, *obs]``."""

    init: Callable[[jax.Array], Any]
    policy: Callable[..., Categorical | DiagGaussian]   # (params, obs, mask=None)
    value: Callable[[Any, jax.Array], jax.Array]


def make_networks(config: NetworkConfig, spec: EnvSpec) -> Networks:
    conv = tuple(config.cnn_channels) if use_cnn(config, spec.obs_shape) else ()
    actor = Actor(config, spec.action_dim, spec.continuous, conv, _tanh_bounds(config, spec))
    critic = Critic(config, conv)
    dummy = jnp.zeros((1, *spec.obs_shape), jnp.float32)

    def init(key: jax.Array) -> Any:
        key_actor, key_critic = jax.random.split(key)
        return {"actor": actor.init(key_actor, dummy)["params"],
                "critic": critic.init(key_critic, dummy)["params"]}

    def policy(params: Any, obs: jax.Array, mask: jax.Array | None = None
               ) -> Categorical | DiagGaussian:
        dist = actor.apply({"params": params["actor"]}, obs)
        return dist.masked(mask) if mask is not None else dist

    def value(params: Any, obs: jax.Array) -> jax.Array:
        return critic.apply({"params": params["critic"]}, obs)

    return Networks(init, policy, value)
