"""PPO as an :class:`~jaxrl_dist.agents.base.Agent`: acting from the actor network, learning in
:mod:`.update`, deploying the actor's mode on normalised observations.

With a recurrent network (``network.cell``) the actor's carry is the acting carry (one per
environment, in the actors slot, reset by the rollout after an episode's last step) and the
critic's lives in the learner's ``data`` slot (advanced by ``learn``'s own pass over each
rollout, the one that computes the values): acting runs the actor alone, and the deployed
policy carries only what it needs."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl_dist.agents.base import Agent, Deployment
from jaxrl_dist.agents.ppo.config import PPOConfig
from jaxrl_dist.agents.ppo.networks import Networks, make_networks
from jaxrl_dist.agents.ppo.update import (check_sequences, make_init_fn, make_learn_fn,
                                          metrics_of, normalize_obs)
from jaxrl_dist.distributions import action_noise
from jaxrl_dist.envs import EnvError, EnvSpec, to_env_action
from jaxrl_dist.running_stats import Moments
from jaxrl_dist.sharding import Layout
from jaxrl_dist.sizes import Sizes


def make_agent(p: PPOConfig, sizes: Sizes, spec: EnvSpec, layout: Layout) -> Agent:
    nets = make_networks(p.network, spec)
    recurrent = nets.recurrent
    if recurrent is not None and spec.resets_late:
        raise EnvError(f"{spec.name}: ppo.network.cell={p.network.cell} does not run on "
                       f"environments that reset a step late (a pool, ale:) yet; use cell: "
                       f"none, or an environment that reports its final observation")
    if recurrent is not None and layout.data_size > 1:   # one: when learn is traced
        check_sequences(p, sizes.local_envs)

    def acting(train):
        return train.params, train.obs_moments

    def noise(key: jax.Array, num_steps: int) -> jax.Array:
        return action_noise(key, spec.continuous, (num_steps, spec.action_dim))

    def act(acting_state, carry, obs, mask, noise_t):
        params, moments = acting_state
        if recurrent is None:
            dist = nets.policy(params, normalize_obs(p, moments, obs), mask)
        else:
            dist, carry = recurrent.policy_step(params, carry, normalize_obs(p, moments, obs),
                                                mask)
        action = dist.sample_from_noise(noise_t)
        return action, carry, {"log_prob": dist.log_prob(action)}

    def policy_params(train):
        # Plain dicts: what a checkpoint's policy item holds and a loader gets back as is;
        # with a central critic, the moments of what the policy reads (its own features).
        moments = train.obs_moments
        return {"actor": train.params["actor"],
                "obs_moments": {"mean": _own(spec, moments.mean), "var": _own(spec, moments.var)}}

    return Agent(
        **_deployment(p, spec, nets)._asdict(), init_params=nets.init,
        init=make_init_fn(p, sizes, spec, nets),
        acting=acting, noise=noise, act=act, env_action=nets.env_action,
        learn=make_learn_fn(p, sizes, spec, nets, layout.data_axis),
        policy_params=policy_params, metrics=metrics_of(p),
        # a pool's final observations are the next step's (envs.pool): not stored twice
        steps_per_env=p.num_steps,
        keep_final_obs=p.bootstrap_truncation and not spec.resets_late,
        # a resumed run whose actors start fresh episodes (host environments) starts the
        # critic's carries afresh with them: the saved ones belong to the episodes left behind
        new_actors=None if recurrent is None or p.network.shared else (
            lambda data: jax.tree.map(lambda c, c0: jnp.broadcast_to(c0, c.shape), data,
                                      recurrent.init_carry())))


def make_policy(p: PPOConfig, spec: EnvSpec) -> Deployment:
    """The deployed policy (the record's ``policy``): the actor's mode on normalised
    observations, in the environment's units, from ``policy_params``' tree."""
    return _deployment(p, spec, make_networks(p.network, spec))


def _own(spec: EnvSpec, x: jax.Array) -> jax.Array:
    """The features of observations (or of their moments) that the policy reads: all, or
    with a central critic the agent's own (``EnvSpec.policy_features``)."""
    return x if spec.policy_features is None else x[..., :spec.policy_features]


def _deployment(p: PPOConfig, spec: EnvSpec, nets: Networks) -> Deployment:
    recurrent = nets.recurrent

    def policy(params, carry, obs, mask=None):
        obs = _own(spec, obs)   # an agent's own (a central critic's rows hold more)
        moments = Moments(params["obs_moments"]["mean"], params["obs_moments"]["var"],
                          jnp.float32(1.0))
        if recurrent is None:
            dist = nets.policy(params, normalize_obs(p, moments, obs), mask)
        else:
            dist, carry = recurrent.policy_step(params, carry, normalize_obs(p, moments, obs),
                                                mask)
        return to_env_action(spec, nets.env_action(dist.mode())), carry

    return Deployment(policy, tuple if recurrent is None else recurrent.init_carry)
