"""CrossQ (Bhatt et al., ICLR 2024; sbx's ``CrossQ``) as a :class:`~.parts.Variant`: SAC's
actor and entropy tuning with NO target networks: batch renormalisation (:mod:`.renorm`) in the
critics, which take (s, a) and (s', a') in ONE forward pass so the batch statistics are those
of the mixture (the target is min_i Q_i(s', a') - alpha log pi(a'|s') from that pass, without
gradient); the actor's loss takes the critics in eval mode (running statistics), the next
action the actor in eval mode. Batch statistics are the global batch's, whatever the topology;
the running statistics live in the train state (``batch_stats``) and act, evaluate and
deploy."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_dist.agents.base import Agent
from jaxrl_dist.agents.offpolicy import learner, parts
from jaxrl_dist.agents.offpolicy.config import CrossQConfig
from jaxrl_dist.agents.offpolicy.networks import Networks, renorm_networks
from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.gradients import global_mean_grad
from jaxrl_dist.running_stats import Moments
from jaxrl_dist.sharding import Layout
from jaxrl_dist.sizes import Sizes


class CrossQState(NamedTuple):
    """CrossQ's train state: :class:`~.parts.TrainState` with the batch renormalisation's
    running statistics where SAC keeps its targets."""

    params: Any              # {"actor", "critic": leaves [N, ...], "log_alpha": f32[]}
    batch_stats: Any         # running statistics {"actor", "critic": [N, ...]}: {layer:
                             #   {"mean", "var": f32[F]}} (the actor's {} without renorm)
    opt_state: Any           # {"actor", "critic"}; with autotune also "alpha"
    obs_moments: Moments
    key: jax.Array
    update: jax.Array
    gradient_steps: jax.Array
    hparams: Any = {}


def crossq_critic_loss(nets: Networks, params: Any, stats: Any, x: jax.Array,
                       action: jax.Array, reward: jax.Array, discount: jax.Array,
                       x_next: jax.Array, next_action: jax.Array, next_penalty: jax.Array,
                       weight: jax.Array | None, renorm: Any
                       ) -> tuple[jax.Array, tuple[jax.Array, Any]]:
    """:func:`~.parts.td_loss` with NO target network: the critics take [s; s'] and [a; a']
    (a' drawn from pi(s'), ``next_penalty`` = alpha log pi(a'|s')) as ONE batch, so batch
    renormalisation's statistics are those of the joint batch (CrossQ's point: s' and a' are
    not out of distribution for them); y = r + discount (min_i Q_i(s', a') - penalty) from
    that pass, without gradient. aux ([loss, mean Q], the critics' new running statistics)."""
    def both(u, v):
        return jnp.concatenate([u, v], axis=0)
    q_both, new_stats = nets.critic_train(
        {"params": params, "batch_stats": stats}, both(x, x_next), both(action, next_action),
        None if weight is None else both(weight, weight), renorm)
    q, q_next = jnp.split(q_both, 2, axis=1)                # [N, B] each
    y = jax.lax.stop_gradient(reward + discount * (jnp.min(q_next, axis=0) - next_penalty))
    loss, aux = parts.td_loss(q, y, weight)
    return loss, (aux, new_stats)


def crossq_actor_loss(nets: Networks, trainable: dict[str, Any], stats: Any, critic: Any,
                      log_alpha: Any, x: jax.Array, normal: jax.Array, target_entropy: float,
                      renorm: Any) -> tuple[jax.Array, tuple[jax.Array, Any]]:
    """SAC's actor loss with the actor in train mode (its batch statistics, ``stats`` the
    running ones) and the critics' variables ``critic`` in eval mode (sbx's); aux ([actor
    loss, entropy], the actor's new running statistics)."""
    dist, new_stats = nets.actor_train({"params": trainable["actor"], "batch_stats": stats}, x,
                                       None, renorm)
    a, log_prob = dist.sample_and_log_prob(normal)
    q = jnp.min(nets.critic(critic, x, a), axis=0)
    loss, aux = parts.soft_actor_objective(trainable, log_alpha, log_prob, q, target_entropy)
    return loss, (aux, new_stats)


def _init_train(nets, params, opt_state, moments, key, swept):   # no targets: statistics
    return CrossQState(params, nets.init_stats(), opt_state, moments, key, jnp.int32(0),
                       jnp.int32(0), swept)


def _actor_variables(train: Any) -> Any:
    """The actor with its running statistics (eval mode: acting, the next action, the
    deployed policy)."""
    return {"params": train.params["actor"], "batch_stats": train.batch_stats["actor"]}


def _critic_grads(s: parts.Step, train: Any) -> Any:
    """No target: the critics' own value of (s', a'), in the same pass."""
    params, stats = train.params, train.batch_stats
    a_next, log_prob = s.nets.actor(_actor_variables(train), s.x_next).sample_and_log_prob(
        s.target_noise)
    penalty = jax.lax.stop_gradient(jnp.exp(params["log_alpha"]) * log_prob)
    grads, (critic_stats, running), norm = global_mean_grad(
        lambda p, *args: crossq_critic_loss(s.nets, p, stats["critic"], *args, s.renorm),
        params["critic"], s.axis, s.x, s.batch.action, s.batch.reward, s.batch.discount,
        s.x_next, a_next, penalty, s.batch.weight)
    return train._replace(batch_stats={**stats, "critic": running}), grads, critic_stats, norm


def _actor_grads(s: parts.Step, train: Any, trainable: dict[str, Any]) -> Any:
    params, stats = train.params, train.batch_stats

    def loss_fn(t, critic, x, eps):
        return crossq_actor_loss(s.nets, t, stats["actor"], critic, params["log_alpha"], x,
                                 eps, s.target_entropy, s.renorm)
    critic = {"params": params["critic"], "batch_stats": stats["critic"]}
    grads, (actor_stats, running), _ = global_mean_grad(loss_fn, trainable, s.axis, critic,
                                                        s.x, s.actor_noise())
    return train._replace(batch_stats={**stats, "actor": running}), grads, actor_stats


VARIANT = parts.Variant(
    name="crossq", metrics={**parts.SOFT_METRICS, "renorm": "last"}, networks=renorm_networks,
    soft=True, init_train=_init_train, actor_variables=_actor_variables,
    explore=parts.sample_action, noise_scale=parts.no_noise, critic_grads=_critic_grads,
    after_critic=parts.keep, actor_grads=_actor_grads, after_actor=parts.keep,
    adam_b1=lambda c: c.adam_b1,   # CrossQ's 0.5 for the actor and the critics
    # renormalise once this many env steps are collected (one clock, every device's)
    renorm_from=lambda c: float(c.learning_starts + c.renorm_warmup_steps),
    step_metrics=lambda renorm: {"renorm": renorm.astype(jnp.float32)})


def make_crossq(c: CrossQConfig, sizes: Sizes, spec: EnvSpec, layout: Layout) -> Agent:
    return learner.make_agent(VARIANT, c, sizes, spec, layout)
