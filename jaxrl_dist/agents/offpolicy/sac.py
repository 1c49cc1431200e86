"""SAC (Haarnoja et al. 2018; SB3's and CleanRL's) as a :class:`~.parts.Variant`: a
tanh-squashed Gaussian actor; the critics' target is min_i Q'_i(s', a') - alpha log pi(a'|s')
with a' drawn from the current actor; the actor minimises alpha log pi(a|s) - min_i Q_i(s, a);
log(alpha) descends -log(alpha) (log pi + target entropy) (automatic entropy tuning, as SB3's);
the critics' targets follow every gradient step."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxrl_dist.agents.base import Agent
from jaxrl_dist.agents.offpolicy import learner, parts
from jaxrl_dist.agents.offpolicy.config import SACConfig
from jaxrl_dist.agents.offpolicy.networks import Networks, gaussian_networks
from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.gradients import global_mean_grad
from jaxrl_dist.sharding import Layout
from jaxrl_dist.sizes import Sizes


def sac_actor_loss(nets: Networks, trainable: dict[str, Any], critic: Any, log_alpha: Any,
                   x: jax.Array, normal: jax.Array, target_entropy: float
                   ) -> tuple[jax.Array, jax.Array]:
    """:func:`~.parts.soft_actor_objective` at a = tanh(mean + std normal), min_i Q_i(s, a)."""
    a, log_prob = nets.actor(trainable["actor"], x).sample_and_log_prob(normal)
    q = jnp.min(nets.critic(critic, x, a), axis=0)
    return parts.soft_actor_objective(trainable, log_alpha, log_prob, q, target_entropy)


def sac_next_value(nets: Networks, params: Any, target: Any, x_next: jax.Array,
                   normal: jax.Array) -> jax.Array:
    """min_i Q'_i(s', a') - alpha log pi(a'|s'), a' drawn from the CURRENT actor."""
    a, log_prob = nets.actor(params["actor"], x_next).sample_and_log_prob(normal)
    q = jnp.min(nets.critic(target["critic"], x_next, a), axis=0)
    return q - jnp.exp(params["log_alpha"]) * log_prob


def _init_train(nets, params, opt_state, moments, key, swept):
    return parts.TrainState(params, {"critic": params["critic"]}, opt_state, moments, key,
                            jnp.int32(0), jnp.int32(0), swept)


def _critic_grads(s: parts.Step, train: Any) -> Any:
    next_value = sac_next_value(s.nets, train.params, train.target, s.x_next, s.target_noise)
    return parts.target_critic_grads(s, train, next_value)


def _after_critic(hp: dict[str, Any], train: Any) -> Any:   # the targets follow every step
    return train._replace(target={"critic": parts.polyak(hp["tau"], train.params["critic"],
                                                         train.target["critic"])})


def _actor_grads(s: parts.Step, train: Any, trainable: dict[str, Any]) -> Any:
    params = train.params

    def loss_fn(t, critic, x, eps):
        return sac_actor_loss(s.nets, t, critic, params["log_alpha"], x, eps,
                              s.target_entropy)
    grads, stats, _ = global_mean_grad(loss_fn, trainable, s.axis, params["critic"], s.x,
                                       s.actor_noise())
    return train, grads, stats


VARIANT = parts.Variant(
    name="sac", metrics=parts.SOFT_METRICS, networks=gaussian_networks, soft=True,
    init_train=_init_train, actor_variables=lambda train: train.params["actor"],
    explore=parts.sample_action, noise_scale=parts.no_noise, critic_grads=_critic_grads,
    after_critic=_after_critic, actor_grads=_actor_grads, after_actor=parts.keep)


def make_sac(c: SACConfig, sizes: Sizes, spec: EnvSpec, layout: Layout) -> Agent:
    return learner.make_agent(VARIANT, c, sizes, spec, layout)
