"""The Q-network (flax) and epsilon-greedy acting, shared by DQN and PQN.

Parameters are one plain pytree; networks hold no RNG state and know nothing about sharding.
Acting draws its randomness up front as one uniform array per step (``[1 + A]``: the explore
coin, then one number per action whose argmax over the legal ones is the random action), so a
rollout draws all of it in one op before its loop, as PPO's does.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxrl_dist.agents import conv
from jaxrl_dist.agents.base import Deployment
from jaxrl_dist.agents.qnet.config import QNetworkConfig
from jaxrl_dist.agents.torso import conv_torso, input_scale
from jaxrl_dist.distributions import MASKED_LOGIT
from jaxrl_dist.envs import EnvError, EnvSpec


class QNetwork(nn.Module):
    """Optional convolutions (``conv``: ``nn.Conv`` arguments per layer, see ``agents.torso``),
    dense layers (if asked, LayerNorm before every activation, the convolutions' included),
    then Q-values [B, A], plainly or through a dueling head. flax's default initialisers."""

    hidden: Sequence[int]
    num_actions: int
    activation: str = "relu"
    layer_norm: bool = False
    dueling: bool = False
    conv: Sequence[dict] = ()
    scale: float = 1.0     # applied to the input first (1/255 for uint8 frames)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = getattr(nn, self.activation)
        x = x.astype(jnp.float32)
        if self.scale != 1.0:
            x = x * self.scale
        for layer in self.conv:
            x = nn.Conv(**layer, conv_general_dilated=conv.conv_general_dilated)(x)
            if self.layer_norm:   # over each position's channels (purejaxql's MinAtar CNN)
                x = nn.LayerNorm()(x)
            x = nn.relu(x)
        x = x.reshape(x.shape[0], -1)
        for size in self.hidden:
            x = nn.Dense(size)(x)
            if self.layer_norm:
                x = nn.LayerNorm()(x)
            x = act(x)
        if not self.dueling:
            return nn.Dense(self.num_actions)(x)
        value = nn.Dense(1)(x)
        advantage = nn.Dense(self.num_actions)(x)
        return value + advantage - jnp.mean(advantage, axis=-1, keepdims=True)


class QNet(NamedTuple):
    init: Callable[[jax.Array], Any]               # key -> params
    apply: Callable[[Any, jax.Array], jax.Array]   # (params, obs [B, *obs]) -> Q [B, A]


def require_discrete(algo: str, spec: EnvSpec) -> None:
    if spec.continuous:
        raise EnvError(f"algo {algo} needs a discrete action space, but {spec.name} has "
                       f"continuous actions (size {spec.action_dim}); use algo: ppo for it")
    if spec.masked:   # the targets' max over next actions would include illegal ones
        raise EnvError(f"algo {algo} does not support legal-action masks yet ({spec.name} has "
                       f"them): its targets would bootstrap from illegal actions; use algo: ppo")


def make_q_network(config: QNetworkConfig, spec: EnvSpec) -> QNet:
    module = QNetwork(tuple(config.hidden), spec.action_dim, config.activation,
                      config.layer_norm, config.dueling, conv_torso(config, spec.obs_shape),
                      input_scale(spec.obs_dtype))
    dummy = np.zeros((1, *spec.obs_shape), np.float32)

    def init(key: jax.Array) -> Any:
        return module.init(key, dummy)["params"]

    def apply(params: Any, obs: jax.Array) -> jax.Array:
        return module.apply({"params": params}, obs)

    return QNet(init, apply)


def masked(q: jax.Array, mask: jax.Array | None) -> jax.Array:
    return q if mask is None else jnp.where(mask, q, MASKED_LOGIT)


def greedy(q: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    return jnp.argmax(masked(q, mask), axis=-1)


def epsilon(hp: dict[str, Any], schedule: str, env_steps: jax.Array) -> jax.Array:
    """Exploration rate after ``env_steps`` GLOBAL environment steps: linear from
    epsilon_start to epsilon_end over epsilon_decay_steps, or exponential with that time
    constant (DI-engine's ``end + (start - end) * exp(-steps / decay)``)."""
    steps = jnp.asarray(env_steps, jnp.float32)
    start, end, decay = hp["epsilon_start"], hp["epsilon_end"], hp["epsilon_decay_steps"]
    if schedule == "exponential":
        return end + (start - end) * jnp.exp(-steps / decay)
    return start + (end - start) * jnp.clip(steps / decay, 0.0, 1.0)


def exploration_noise(key: jax.Array, num_steps: int, num_actions: int) -> jax.Array:
    """ONE environment's acting randomness for ``num_steps`` steps: [T, 1 + A] uniforms."""
    return jax.random.uniform(key, (num_steps, 1 + num_actions))


def epsilon_greedy(q: jax.Array, mask: jax.Array | None, eps: jax.Array,
                   noise: jax.Array) -> jax.Array:
    """[E, A] Q-values -> [E] actions: with probability ``eps`` a uniformly random legal action
    (the argmax of iid uniforms over the legal actions), else the greedy one."""
    explore = noise[..., 0] < eps
    random_action = greedy(noise[..., 1:], mask)
    return jnp.where(explore, random_action, greedy(q, mask)).astype(jnp.int32)


def make_td_loss(net: QNet, kind: str, team: int = 1) -> Callable:
    """(params, obs [B, *obs], action [B], target [B], huber_delta, weight [B] or None) ->
    (mean TD loss, [loss, mean Q of the taken actions]), the loss of every Q-learner here:
    ``huber`` (quadratic within ``huber_delta``, linear beyond) or ``mse`` (0.5 x squared
    error). Samples of weight 0 (not experience: a pool's reset step) add nothing; the mean
    divides by B either way. ``team`` > 1 (VDN): a sample is ``team`` rows, obs
    [B, team, *obs] and action [B, team], its Q the sum of theirs."""
    def loss_fn(params, obs, action, target, huber_delta, weight=None):
        if team > 1:
            rows = obs.reshape(action.size, *obs.shape[action.ndim:])
            q = jnp.take_along_axis(net.apply(params, rows), action.reshape(-1, 1), 1)[:, 0]
            q = jnp.sum(q.reshape(-1, team), axis=1)
        else:
            q = jnp.take_along_axis(net.apply(params, obs), action[:, None], 1)[:, 0]
        if kind == "huber":
            per_sample = optax.huber_loss(q - target, delta=huber_delta)
        else:
            per_sample = 0.5 * jnp.square(q - target)
        if weight is not None:
            per_sample = per_sample * weight
        loss = jnp.mean(per_sample)
        return loss, jnp.stack([loss, jnp.mean(q)])
    return loss_fn


def _deployment(net: QNet) -> Deployment:
    """The greedy policy (feed-forward: its carry is ``()``)."""
    def policy(params, carry, obs, mask=None):
        return greedy(net.apply(params, obs), mask), carry
    return Deployment(policy, tuple)


def make_policy(section: Any, spec: EnvSpec) -> Deployment:
    """The deployed policy of DQN and PQN (their records' ``policy``): greedy in the
    Q-network of ``section.network``."""
    return _deployment(make_q_network(section.network, spec))


def agent_parts(net: QNet, spec: EnvSpec) -> dict[str, Any]:
    """The :class:`~jaxrl_dist.agents.base.Agent` fields every epsilon-greedy Q-learner shares:
    its ``acting`` state is ``(params, epsilon)``; the deployed policy is greedy."""
    def act(acting_state, carry, obs, mask, noise):
        params, eps = acting_state
        return epsilon_greedy(net.apply(params, obs), mask, eps, noise), carry, {}

    return dict(**_deployment(net)._asdict(), init_params=net.init,
                noise=lambda key, t: exploration_noise(key, t, spec.action_dim),
                act=act, env_action=lambda a: a,
                policy_params=lambda train: train.params)
