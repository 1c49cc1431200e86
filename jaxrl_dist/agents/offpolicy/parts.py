"""The parts the off-policy actor-critics share, and :class:`Variant`, what one algorithm of the
family gives the shared learner (:mod:`.learner`): its networks, its train state, how its critics
and its actor take a gradient, and what follows each. SAC (:mod:`.sac`), TD3 (:mod:`.td3`) and
CrossQ (:mod:`.crossq`) compose these; the learner never asks which one it runs.

Losses here are per device: local means of the device's shard of the global batch, made global
by :func:`~jaxrl_dist.gradients.global_mean_grad`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_dist.agents.base import EPISODE_METRICS
from jaxrl_dist.agents.offpolicy.networks import Networks
from jaxrl_dist.errors import ConfigError
from jaxrl_dist.gradients import global_mean_grad
from jaxrl_dist.running_stats import Moments

COMMON_METRICS = {**EPISODE_METRICS, "critic_loss": "mean", "q_mean": "mean",
                  "critic_grad_norm": "mean", "actor_loss": "mean", "actor_grad_norm": "mean",
                  "actor_steps": "sum", "learning": "mean", "replay_transitions": "last"}
SOFT_METRICS = {**COMMON_METRICS, "entropy": "mean", "alpha": "last"}
# log(alpha) stays in [log 1e-10, log 1e6]: a target entropy the policy never reaches (one at
# the squashed Gaussian's maximum, or a reward scale that makes it so) otherwise drives alpha
# to inf in float32 (~290k steps) and every later update is non-finite.
LOG_ALPHA_RANGE = (-23.025850929940457, 13.815510557964274)


class TrainState(NamedTuple):
    params: Any              # {"actor", "critic": leaves [N, ...]}; SAC also "log_alpha": f32[]
    target: Any              # Polyak averages: {"critic"}; TD3 also {"actor"}
    opt_state: Any           # {"actor", "critic"}; SAC with autotune also "alpha"
    obs_moments: Moments     # running observation statistics (global; unused if not asked)
    key: jax.Array           # uint32[2]; split once per update
    update: jax.Array        # int32[]; completed updates
    gradient_steps: jax.Array   # int32[]; gradient steps taken (the actor's turn counts them)
    hparams: Any = {}        # swept hyperparameters {name: f32[]}


class StepKeys(NamedTuple):
    """What one gradient step draws."""

    sample: jax.Array   # the replay batch
    target: jax.Array   # the noise of the next actions the critics' target is taken at
    actor: jax.Array    # the noise of the actions the actor's loss is taken at (SAC)


class Step(NamedTuple):
    """One gradient step's inputs, as the variant's parts take them."""

    nets: Networks
    axis: str                # the data axis the gradients are averaged over
    hp: dict[str, Any]       # the scalar hyperparameters (swept ones from the state)
    batch: Any               # the replay's n-step samples (:class:`.replay.buffer.NStep`)
    x: jax.Array             # the samples' observations as the networks see them
    x_next: jax.Array        # where they bootstrap from, likewise
    target_noise: jax.Array  # [B, A] standard normals for the next actions
    actor_noise: Callable[[], jax.Array]   # [B, A] standard normals for the actor's
    #                                            actions, drawn when the actor steps
    renorm: Any              # CrossQ's renormalisation is on (bool[]); unused by the others
    target_entropy: float


class Variant(NamedTuple):
    """One algorithm of the family: the parts :func:`.learner.make_agent` composes."""

    name: str                # its section's name (messages, the replay's plan)
    metrics: dict[str, str]  # what its learn reports, and how a row aggregates it
    networks: Callable[..., Networks]    # (network config, spec, data axis) -> Networks
    soft: bool               # a squashed Gaussian sampled to act and an entropy coefficient
    #                          (log_alpha in the parameters, autotuned if the section asks)
    init_train: Callable[..., Any]       # (nets, params, opt_state, moments, key, swept)
    actor_variables: Callable[[Any], Any]   # train -> what nets.actor takes (eval mode)
    explore: Callable[..., jax.Array]    # (nets, actor variables, x, normal, noise scale) -> a
    noise_scale: Callable[[dict], Any]   # hp -> the scale of the acting noise
    critic_grads: Callable[..., Any]     # (Step, train) -> (train, grads, [loss, Q], norm)
    after_critic: Callable[..., Any]     # (hp, train) -> train
    actor_grads: Callable[..., Any]      # (Step, train, trainable) -> (train, grads, [2])
    after_actor: Callable[..., Any]      # (hp, train) -> train
    adam_b1: Callable[[Any], Any] = lambda c: None   # section -> actor's and critics' beta1
    # section -> the global env steps from which batch renormalisation renormalises (CrossQ)
    renorm_from: Callable[[Any], float] = lambda c: 0.0
    step_metrics: Callable[[Any], dict] = lambda renorm: {}   # learn's own extra metrics


def keep(hp: dict[str, Any], train: Any) -> Any:
    """An ``after_*`` part that changes nothing."""
    return train


def no_noise(hp: dict[str, Any]) -> jax.Array:
    return jnp.float32(0.0)


def sample_action(nets: Networks, actor: Any, x: jax.Array, normal: jax.Array,
                  scale: Any) -> jax.Array:
    """A soft actor acts with a draw of its squashed Gaussian (``scale`` unused)."""
    a, _ = nets.actor(actor, x).sample_and_log_prob(normal)
    return a


def td_loss(q: jax.Array, y: jax.Array, weight: jax.Array | None
            ) -> tuple[jax.Array, jax.Array]:
    """0.5 sum_i mean_b (Q_i [N, B] - y_b)^2 over the ensemble (SB3's critic loss), samples
    of weight 0 (a pool's reset steps, dropped steps) adding nothing; aux [loss, mean Q]."""
    per_sample = 0.5 * jnp.sum(jnp.square(q - y), axis=0)
    if weight is not None:
        per_sample = per_sample * weight
    loss = jnp.mean(per_sample)
    return loss, jnp.stack([loss, jnp.mean(q)])


def critic_loss(nets: Networks, params: Any, x: jax.Array, action: jax.Array, y: jax.Array,
                weight: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """:func:`td_loss` of the critics towards the targets' ``y`` (SAC, TD3)."""
    return td_loss(nets.critic(params, x, action), y, weight)


def target_critic_grads(s: Step, train: Any, next_value: jax.Array) -> Any:
    """The critics' gradient towards r + discount x ``next_value`` (the targets' value of
    s'): SAC's and TD3's ``critic_grads``."""
    y = jax.lax.stop_gradient(s.batch.reward + s.batch.discount * next_value)
    grads, stats, norm = global_mean_grad(
        lambda p, *args: critic_loss(s.nets, p, *args), train.params["critic"], s.axis, s.x,
        s.batch.action, y, s.batch.weight)
    return train, grads, stats, norm


def check_target_entropy(algo: str, target: float, action_dim: int) -> None:
    """A squashed Gaussian on [-1, 1]^A has less entropy than the uniform distribution there,
    A log 2 nats: autotune towards that or above it never arrives (alpha only grows)."""
    most = action_dim * math.log(2.0)
    if not target < most:
        raise ConfigError(f"{algo}.target_entropy={target:g} is unreachable: a policy on "
                          f"[-1, 1]^{action_dim} has less than {most:.3f} nats (uniform); set "
                          f"it below that (default: -{action_dim}, minus the action size)")


def soft_actor_objective(trainable: dict[str, Any], log_alpha: Any, log_prob: jax.Array,
                         q: jax.Array, target_entropy: float) -> tuple[jax.Array, jax.Array]:
    """mean(alpha log pi(a|s) - Q(s, a)) for reparametrised actions a; with
    ``trainable["log_alpha"]`` (autotune) plus -log(alpha) mean(log pi + target entropy),
    log pi held fixed there and alpha held fixed in the first term, so each part moves only
    its own parameters. aux [actor loss, entropy estimate -mean log pi]. SAC's and CrossQ's."""
    alpha = jnp.exp(jax.lax.stop_gradient(trainable.get("log_alpha", log_alpha)))
    actor = jnp.mean(alpha * log_prob - q)
    loss = actor
    if "log_alpha" in trainable:
        loss = loss - trainable["log_alpha"] * jnp.mean(
            jax.lax.stop_gradient(log_prob) + target_entropy)
    return loss, jnp.stack([actor, -jnp.mean(log_prob)])


def polyak(tau: Any, online: Any, target: Any) -> Any:
    return jax.tree.map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)


def shard_normal(key: jax.Array, shard_ids: jax.Array, per_shard: int, size: int) -> jax.Array:
    """[S_local * per_shard, size] standard normals, shard ``s``'s rows drawn with
    ``fold_in(key, s)`` (its GLOBAL index): each sample's noise, whatever device holds it, in
    the order ``replay.buffer.sample`` returns the samples."""
    draw = jax.vmap(lambda s: jax.random.normal(jax.random.fold_in(key, s), (per_shard, size)))
    return draw(shard_ids).reshape(-1, size)
