"""SAC's, TD3's and CrossQ's networks (flax) and their deployed policies.

Actions inside the learner are in [-1, 1]^A: the actors end in tanh, the critics take those
actions, the replay stores them, and target smoothing and exploration noise are in those
units (as SB3's and CleanRL's). Only the environment sees the bounds: :func:`to_bounds` maps
[-1, 1] affinely onto [low, high] (``Agent.env_action``, the deployed policy, the emitter).

The critics are ONE ensemble: one flax module whose parameters carry a leading [N] axis,
initialised and applied under ``jax.vmap`` (N matmuls batched as one), so twin critics, or
more, cost one network's dispatch. Weights are flax's defaults (lecun normal, zero biases).

CrossQ's networks are SAC's with batch renormalisation (:mod:`.renorm`) on each network's input
and after each hidden activation (sbx's placement); their running statistics are the
``batch_stats`` collection, beside ``params``. Its actor and critic functions take flax's
variables ``{"params", "batch_stats"}`` where SAC's take the parameters, and run in eval mode
(the running statistics); ``actor_train`` / ``critic_train`` take the batch's statistics and
return the updated running ones.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_dist import running_stats
from jaxrl_dist.agents.base import Deployment
from jaxrl_dist.agents.offpolicy.config import NetworkConfig, OffPolicyConfig
from jaxrl_dist.agents.offpolicy.renorm import BatchRenorm
from jaxrl_dist.agents.torso import input_scale
from jaxrl_dist.distributions import TanhGaussian
from jaxrl_dist.envs import EnvError, EnvSpec, to_env_action
from jaxrl_dist.running_stats import Moments

# SAC's log std, squashed smoothly into [LOG_STD_MIN, LOG_STD_MAX] (CleanRL's bounds and tanh
# form: the gradient never vanishes at a clip)
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def bounds(algo: str, spec: EnvSpec) -> tuple[np.ndarray, np.ndarray]:
    """The action bounds (float32 [A] each): finite ones, since the actors' tanh is mapped
    onto them; anything else is a one-line error naming the algorithm."""
    if not spec.continuous:
        raise EnvError(f"algo {algo} needs continuous actions, but {spec.name} has "
                       f"{spec.action_dim} discrete ones; use algo: dqn, pqn or ppo for it")
    low, high = (None if b is None else np.broadcast_to(np.asarray(b, np.float32),
                                                           (spec.action_dim,))
                 for b in (spec.action_low, spec.action_high))
    if low is None or high is None or not (np.all(np.isfinite(low))
                                           and np.all(np.isfinite(high))):
        raise EnvError(f"algo {algo} maps its actor's tanh onto the action bounds, but "
                       f"{spec.name}'s are not finite ({spec.action_low}, {spec.action_high})")
    return low, high


def to_bounds(low: np.ndarray, high: np.ndarray) -> Callable[[jax.Array], jax.Array]:
    """[-1, 1] -> [low, high]: low + (a + 1) (high - low) / 2."""
    half = 0.5 * (high - low)

    def env_action(a: jax.Array) -> jax.Array:
        return low + (a + 1.0) * half
    return env_action


def _flat(obs: jax.Array, scale: float) -> jax.Array:
    """[B, *obs] -> float32 [B, prod(obs)], times the input scale (uint8 frames: 1/255)."""
    x = obs.astype(jnp.float32).reshape(obs.shape[0], -1)
    return x * scale if scale != 1.0 else x


def _hidden(x: jax.Array, sizes: Sequence[int], activation: str, scale: float) -> jax.Array:
    """Flattened observations (times ``scale``) through the hidden Dense layers."""
    act = getattr(nn, activation)
    x = _flat(x, scale)
    for size in sizes:
        x = act(nn.Dense(size)(x))
    return x


def _gaussian_head(x: jax.Array, action_dim: int) -> TanhGaussian:
    """The mean (``Dense_{n}``) and the log std (``Dense_{n+1}``) of u; the action is
    tanh(u)."""
    mean = nn.Dense(action_dim)(x)
    log_std = jnp.tanh(nn.Dense(action_dim)(x))
    return TanhGaussian(mean, LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1))


class GaussianActor(nn.Module):
    """SAC's actor: hidden layers, then the Gaussian head."""

    hidden: Sequence[int]
    action_dim: int
    activation: str
    scale: float = 1.0

    @nn.compact
    def __call__(self, obs: jax.Array) -> TanhGaussian:
        return _gaussian_head(_hidden(obs, self.hidden, self.activation, self.scale),
                              self.action_dim)


def _renorm_hidden(x: jax.Array, sizes: Sequence[int], activation: str,
                   momentum: float | None, axis_name: str | None, train: bool,
                   weight: jax.Array | None, renorm: Any) -> jax.Array:
    """Batch renormalisation (``BatchRenorm_0``), then each hidden Dense, its activation and
    ``BatchRenorm_{i+1}`` (sbx's CrossQ layout); ``momentum`` None: the plain MLP."""
    def norm(x):
        if momentum is None:
            return x
        return BatchRenorm(momentum, axis_name)(x, train, weight, renorm)
    act = getattr(nn, activation)
    x = norm(x)
    for size in sizes:
        x = norm(act(nn.Dense(size)(x)))
    return x


class RenormGaussianActor(nn.Module):
    """CrossQ's actor: SAC's with batch renormalisation (``momentum`` None: SAC's MLP, the
    parameters of :class:`GaussianActor`)."""

    hidden: Sequence[int]
    action_dim: int
    activation: str
    momentum: float | None
    axis_name: str | None = None
    scale: float = 1.0

    @nn.compact
    def __call__(self, obs: jax.Array, train: bool = False, weight: jax.Array | None = None,
                 renorm: Any = False) -> TanhGaussian:
        x = _renorm_hidden(_flat(obs, self.scale), self.hidden, self.activation, self.momentum,
                           self.axis_name, train, weight, renorm)
        return _gaussian_head(x, self.action_dim)


class RenormCritic(nn.Module):
    """CrossQ's Q(s, a): the flattened observation and the [-1, 1] action, concatenated, through
    batch renormalisation and the MLP to one value."""

    hidden: Sequence[int]
    activation: str
    momentum: float
    axis_name: str | None = None
    scale: float = 1.0

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array, train: bool = False,
                 weight: jax.Array | None = None, renorm: Any = False) -> jax.Array:
        x = jnp.concatenate([_flat(obs, self.scale), action], axis=-1)
        x = _renorm_hidden(x, self.hidden, self.activation, self.momentum, self.axis_name,
                           train, weight, renorm)
        return nn.Dense(1)(x)[:, 0]


class DeterministicActor(nn.Module):
    """TD3's actor: hidden layers, then tanh of ``Dense_{n}``: an action in [-1, 1]."""

    hidden: Sequence[int]
    action_dim: int
    activation: str
    scale: float = 1.0

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = _hidden(obs, self.hidden, self.activation, self.scale)
        return jnp.tanh(nn.Dense(self.action_dim)(x))


class Critic(nn.Module):
    """Q(s, a): the flattened observation and the [-1, 1] action, concatenated, through an
    MLP to one value."""

    hidden: Sequence[int]
    activation: str
    scale: float = 1.0

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = obs.astype(jnp.float32).reshape(obs.shape[0], -1)
        if self.scale != 1.0:
            x = x * self.scale
        x = _hidden(jnp.concatenate([x, action], axis=-1), self.hidden, self.activation, 1.0)
        return nn.Dense(1)(x)[:, 0]


class Networks(NamedTuple):
    """Pure functions over parameter trees (CrossQ: over ``{"params", "batch_stats"}``, in eval
    mode); observations as the networks see them (already normalised if configured),
    [B, *obs]."""

    init_actor: Callable[[jax.Array], Any]
    actor: Callable[[Any, jax.Array], Any]       # SAC, CrossQ: a TanhGaussian; TD3: [B, A]
    init_critic: Callable[[jax.Array], Any]      # key -> the ensemble's parameters [N, ...]
    critic: Callable[[Any, jax.Array, jax.Array], jax.Array]   # (params, obs, a) -> Q [N, B]
    mode: Callable[[Any, jax.Array], jax.Array]  # the deterministic action in [-1, 1]
    # CrossQ only: the running statistics at the start, {"actor", "critic": [N, ...]}
    init_stats: Callable[[], Any] | None = None
    # CrossQ only: (variables, obs, weight [B] | None, renorm) -> (TanhGaussian, new stats)
    actor_train: Callable[..., tuple[Any, Any]] | None = None
    # CrossQ only: (variables, obs, a, weight [B] | None, renorm) -> (Q [N, B], new stats)
    critic_train: Callable[..., tuple[jax.Array, Any]] | None = None


def gaussian_networks(n: NetworkConfig, spec: EnvSpec, axis: str | None = None) -> Networks:
    """SAC's: a tanh-squashed Gaussian actor (its mode: tanh of the mean) and the critics.
    ``axis`` is unused (no batch statistics)."""
    return _mlp_networks(GaussianActor, lambda out: out.mode(), n, spec)


def deterministic_networks(n: NetworkConfig, spec: EnvSpec, axis: str | None = None
                           ) -> Networks:
    """TD3's: a deterministic tanh actor (its output is its mode) and the critics."""
    return _mlp_networks(DeterministicActor, lambda out: out, n, spec)


def _mlp_networks(actor_module: Callable[..., nn.Module], mode_of: Callable[[Any], jax.Array],
                  n: NetworkConfig, spec: EnvSpec) -> Networks:
    scale = input_scale(spec.obs_dtype)
    module = actor_module(tuple(n.actor_hidden), spec.action_dim, n.activation, scale)
    critic = Critic(tuple(n.critic_hidden), n.activation, scale)
    obs = np.zeros((1, *spec.obs_shape), np.float32)
    action = np.zeros((1, spec.action_dim), np.float32)

    def init_actor(key):
        return module.init(key, obs)["params"]

    def actor(params, x):
        return module.apply({"params": params}, x)

    def init_critic(key):
        return jax.vmap(lambda k: critic.init(k, obs, action)["params"])(
            jax.random.split(key, n.num_critics))

    def critic_apply(params, x, a):
        return jax.vmap(lambda p: critic.apply({"params": p}, x, a))(params)

    def mode(params, x):
        return mode_of(actor(params, x))

    return Networks(init_actor, actor, init_critic, critic_apply, mode)


def renorm_networks(n: Any, spec: EnvSpec, axis: str | None = None) -> Networks:
    """CrossQ's: a squashed Gaussian actor and critics with batch renormalisation, over
    ``{"params", "batch_stats"}``; ``n`` is a :class:`~.config.CrossQNetworkConfig`, ``axis``
    the data axis the batch statistics are reduced over (None: a batch is never sharded, e.g.
    a deployed policy)."""
    scale = input_scale(spec.obs_dtype)
    module = RenormGaussianActor(tuple(n.actor_hidden), spec.action_dim, n.activation,
                                 n.batch_norm_momentum if n.batch_norm_actor else None, axis,
                                 scale)
    critic = RenormCritic(tuple(n.critic_hidden), n.activation, n.batch_norm_momentum, axis,
                          scale)
    obs = np.zeros((1, *spec.obs_shape), np.float32)
    action = np.zeros((1, spec.action_dim), np.float32)

    def init_critic_variables(key):
        return jax.vmap(lambda k: critic.init(k, obs, action))(
            jax.random.split(key, n.num_critics))

    def init_actor(key):
        return module.init(key, obs)["params"]

    def init_critic(key):
        return init_critic_variables(key)["params"]

    def init_stats():
        # zeros and ones, whatever the key: the parameters drawn beside them are unused
        key = jax.random.PRNGKey(0)
        return {"actor": module.init(key, obs).get("batch_stats", {}),
                "critic": init_critic_variables(key)["batch_stats"]}

    def actor(variables, x):
        return module.apply(variables, x)

    def actor_train(variables, x, weight, renorm):
        dist, new = module.apply(variables, x, True, weight, renorm, mutable=["batch_stats"])
        return dist, new.get("batch_stats", {})

    def critic_apply(variables, x, a):
        return jax.vmap(lambda v: critic.apply(v, x, a))(variables)

    def critic_train(variables, x, a, weight, renorm):
        def one(v):
            return critic.apply(v, x, a, True, weight, renorm, mutable=["batch_stats"])
        q, new = jax.vmap(one)(variables)
        return q, new["batch_stats"]

    def mode(variables, x):
        return actor(variables, x).mode()

    return Networks(init_actor, actor, init_critic, critic_apply, mode, init_stats,
                    actor_train, critic_train)


def normalize_obs(c: OffPolicyConfig, moments: Moments, obs: jax.Array) -> jax.Array:
    """What the networks see: raw observations, or standardised by the running moments (the
    one rule for acting, learning, evaluating and the exported policy)."""
    return running_stats.normalize(moments, obs) if c.normalize_observations else obs


def deployment(algo: str, c: OffPolicyConfig, spec: EnvSpec, nets: Networks) -> Deployment:
    """The actor's deterministic action (SAC: tanh of the mean; TD3: the actor's output) on
    normalised observations, in the environment's units."""
    env_action = to_bounds(*bounds(algo, spec))

    def policy(params, carry, obs, mask=None):
        del mask   # continuous actions have none
        moments = Moments(params["obs_moments"]["mean"], params["obs_moments"]["var"],
                          jnp.float32(1.0))
        a = nets.mode(params["actor"], normalize_obs(c, moments, obs))
        return to_env_action(spec, env_action(a)), carry

    return Deployment(policy, tuple)


def sac_policy(c: OffPolicyConfig, spec: EnvSpec) -> Deployment:
    """SAC's deployed policy (its record's ``policy``), from ``policy_params``' tree."""
    return deployment("sac", c, spec, gaussian_networks(c.network, spec))


def td3_policy(c: OffPolicyConfig, spec: EnvSpec) -> Deployment:
    """TD3's deployed policy (its record's ``policy``), from ``policy_params``' tree."""
    return deployment("td3", c, spec, deterministic_networks(c.network, spec))


def crossq_policy(c: OffPolicyConfig, spec: EnvSpec) -> Deployment:
    """CrossQ's deployed policy (its record's ``policy``): the actor in eval mode, its
    ``policy_params``' ``actor`` being ``{"params", "batch_stats"}``."""
    return deployment("crossq", c, spec, renorm_networks(c.network, spec))
