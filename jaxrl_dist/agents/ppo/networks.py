"""PPO's actor and critic networks (flax): an observation torso (MLP, or a CNN for [H, W, C] grids
and images) and a head that returns an action distribution (:mod:`jaxrl_dist.distributions`).

Networks hold no RNG state and know nothing about sharding; parameters are one plain pytree
``{"actor": ..., "critic": ...}`` so the optimizer, checkpoints and fingerprints see one tree.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_dist.agents import conv
from jaxrl_dist.agents.ppo.config import NetworkConfig
from jaxrl_dist.agents.torso import conv_torso, input_scale
from jaxrl_dist.distributions import Categorical, DiagGaussian
from jaxrl_dist.envs import EnvSpec


def _tanh_bounds(config: NetworkConfig, spec: EnvSpec):
    """(low, high) as hashable tuples when actions are squashed, else None (clipped)."""
    if config.bounded_actions != "tanh" or not spec.continuous or spec.action_low is None:
        return None
    low, high = (np.broadcast_to(np.asarray(b, np.float32), (spec.action_dim,))
                 for b in (spec.action_low, spec.action_high))
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        return None
    return tuple(map(float, low)), tuple(map(float, high))


class MLP(nn.Module):
    """Optional 3x3 convolutions (``conv``, for [H, W, C] inputs), then dense layers. Weights
    are orthogonal (gain sqrt 2, the head ``out_scale``) or, with ``init="lecun"``, flax's
    default lecun-normal everywhere; biases start at 0 either way."""

    hidden: Sequence[int]
    out_dim: int
    activation: str
    out_scale: float
    conv: Sequence[dict] = ()      # nn.Conv arguments per layer (agents.torso)
    init: str = "orthogonal"
    scale: float = 1.0             # applied to the input first (1/255 for uint8 frames)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = getattr(nn, self.activation)
        x = x.astype(jnp.float32)
        if self.scale != 1.0:
            x = x * self.scale

        def kernel(scale: float):
            if self.init == "lecun":
                return nn.initializers.lecun_normal()
            return nn.initializers.orthogonal(scale)

        for layer in self.conv:
            x = nn.relu(nn.Conv(**layer, kernel_init=kernel(np.sqrt(2)),
                                conv_general_dilated=conv.conv_general_dilated)(x))
        x = x.reshape(x.shape[0], -1)  # without convolutions, images are flattened
        for size in self.hidden:
            x = act(nn.Dense(size, kernel_init=kernel(np.sqrt(2)))(x))
        return nn.Dense(self.out_dim, kernel_init=kernel(self.out_scale))(x)


class Actor(nn.Module):
    config: NetworkConfig
    action_dim: int
    continuous: bool
    conv: Sequence[dict] = ()
    scale: float = 1.0
    bounds: tuple[tuple[float, ...], tuple[float, ...]] | None = None   # (low, high) for tanh

    @nn.compact
    def __call__(self, obs: jax.Array) -> Categorical | DiagGaussian:
        out = MLP(self.config.actor_hidden, self.action_dim, self.config.activation, 0.01,
                  self.conv, self.config.init, self.scale)(obs)
        if not self.continuous:
            return Categorical(out)
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        low, high = (None, None) if self.bounds is None else map(jnp.asarray, self.bounds)
        return DiagGaussian(out, jnp.broadcast_to(log_std, out.shape), low, high)


class Critic(nn.Module):
    config: NetworkConfig
    conv: Sequence[dict] = ()
    scale: float = 1.0

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        return MLP(self.config.critic_hidden, 1, self.config.activation, 1.0, self.conv,
                   self.config.init, self.scale)(obs)[:, 0]


class Networks(NamedTuple):
    """Pure functions over the parameter tree; observations are batched ``[B, *obs]``."""

    init: Callable[[jax.Array], Any]
    policy: Callable[..., Categorical | DiagGaussian]   # (params, obs, mask=None)
    value: Callable[[Any, jax.Array], jax.Array]
    env_action: Callable[[jax.Array], jax.Array]   # a drawn action -> the environment's
                                                   #   (the tanh squash, if any; no params)


def make_networks(config: NetworkConfig, spec: EnvSpec) -> Networks:
    conv = conv_torso(config, spec.obs_shape)
    bounds = _tanh_bounds(config, spec)
    scale = input_scale(spec.obs_dtype)
    actor = Actor(config, spec.action_dim, spec.continuous, conv, scale, bounds)
    critic = Critic(config, conv, scale)
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

    def env_action(action: jax.Array) -> jax.Array:
        if bounds is None:
            return action
        low, high = map(jnp.asarray, bounds)
        return DiagGaussian(action, action, low, high).env_action(action)

    return Networks(init, policy, value, env_action)
