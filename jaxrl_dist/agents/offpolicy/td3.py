"""TD3 (Fujimoto et al. 2018; SB3's and CleanRL's) as a :class:`~.parts.Variant`: a
deterministic actor acting with Gaussian noise; the critics' target is min_i Q'_i(s', a'),
a' = clip(mu'(s') + clip(noise)) (target policy smoothing); the actor maximises Q_1(s, mu(s));
actor and critic targets follow each actor step."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxrl_dist.agents.base import Agent
from jaxrl_dist.agents.offpolicy import learner, parts
from jaxrl_dist.agents.offpolicy.config import TD3Config
from jaxrl_dist.agents.offpolicy.networks import Networks, deterministic_networks
from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.gradients import global_mean_grad
from jaxrl_dist.sharding import Layout
from jaxrl_dist.sizes import Sizes


def td3_actor_loss(nets: Networks, trainable: dict[str, Any], critic: Any, x: jax.Array
                   ) -> tuple[jax.Array, jax.Array]:
    """-mean Q_1(s, mu(s)): the first critic only (TD3's); aux [loss, 0]."""
    q = nets.critic(critic, x, nets.actor(trainable["actor"], x))[0]
    loss = -jnp.mean(q)
    return loss, jnp.stack([loss, jnp.float32(0.0)])


def td3_next_value(nets: Networks, target: Any, x_next: jax.Array, normal: jax.Array,
                   policy_noise: Any, noise_clip: Any) -> jax.Array:
    """min_i Q'_i(s', a'), a' = clip(mu'(s') + clip(policy_noise normal, +-noise_clip), +-1)
    (target policy smoothing, in [-1, 1] units)."""
    noise = jnp.clip(policy_noise * normal, -noise_clip, noise_clip)
    a = jnp.clip(nets.actor(target["actor"], x_next) + noise, -1.0, 1.0)
    return jnp.min(nets.critic(target["critic"], x_next, a), axis=0)


def _init_train(nets, params, opt_state, moments, key, swept):
    target = {"critic": params["critic"], "actor": params["actor"]}
    return parts.TrainState(params, target, opt_state, moments, key, jnp.int32(0),
                            jnp.int32(0), swept)


def _explore(nets: Networks, actor: Any, x: jax.Array, normal: jax.Array, scale: Any
             ) -> jax.Array:
    """mu(s) plus Gaussian noise of ``exploration_noise``, in [-1, 1]."""
    return jnp.clip(nets.actor(actor, x) + scale * normal, -1.0, 1.0)


def _critic_grads(s: parts.Step, train: Any) -> Any:
    next_value = td3_next_value(s.nets, train.target, s.x_next, s.target_noise,
                                s.hp["policy_noise"], s.hp["noise_clip"])
    return parts.target_critic_grads(s, train, next_value)


def _actor_grads(s: parts.Step, train: Any, trainable: dict[str, Any]) -> Any:
    def loss_fn(t, critic, x):
        return td3_actor_loss(s.nets, t, critic, x)
    grads, stats, _ = global_mean_grad(loss_fn, trainable, s.axis, train.params["critic"], s.x)
    return train, grads, stats


def _after_actor(hp: dict[str, Any], train: Any) -> Any:   # both targets follow the actor
    params = train.params
    return train._replace(target=parts.polyak(
        hp["tau"], {"critic": params["critic"], "actor": params["actor"]}, train.target))


VARIANT = parts.Variant(
    name="td3", metrics=parts.COMMON_METRICS, networks=deterministic_networks, soft=False,
    init_train=_init_train, actor_variables=lambda train: train.params["actor"],
    explore=_explore,
    noise_scale=lambda hp: jnp.asarray(hp["exploration_noise"], jnp.float32),
    critic_grads=_critic_grads, after_critic=parts.keep, actor_grads=_actor_grads,
    after_actor=_after_actor)


def make_td3(c: TD3Config, sizes: Sizes, spec: EnvSpec, layout: Layout) -> Agent:
    return learner.make_agent(VARIANT, c, sizes, spec, layout)
