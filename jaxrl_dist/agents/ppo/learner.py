"""PPO as an :class:`~jaxrl_dist.agents.base.Agent`: acting from the actor network, learning in
:mod:`.update`, deploying the actor's mode on normalised observations."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl_dist.agents.base import Agent
from jaxrl_dist.agents.ppo.config import PPOConfig
from jaxrl_dist.agents.ppo.networks import make_networks
from jaxrl_dist.agents.ppo.update import METRICS, make_init_fn, make_learn_fn, normalize_obs
from jaxrl_dist.distributions import action_noise
from jaxrl_dist.envs import EnvSpec, to_env_action
from jaxrl_dist.running_stats import Moments
from jaxrl_dist.sharding import Layout
from jaxrl_dist.sizes import Sizes


def make_agent(p: PPOConfig, sizes: Sizes, spec: EnvSpec, layout: Layout) -> Agent:
    nets = make_networks(p.network, spec)

    def acting(train):
        return train.params, train.obs_moments

    def noise(key: jax.Array, num_steps: int) -> jax.Array:
        return action_noise(key, spec.continuous, (num_steps, spec.action_dim))

    def act(acting_state, carry, obs, mask, noise_t):
        params, moments = acting_state
        dist = nets.policy(params, normalize_obs(p, moments, obs), mask)
        action = dist.sample_from_noise(noise_t)
        return action, carry, {"log_prob": dist.log_prob(action)}

    def policy_params(train):
        # Plain dicts: what a checkpoint's policy item holds and a loader gets back as is.
        moments = train.obs_moments
        return {"actor": train.params["actor"],
                "obs_moments": {"mean": moments.mean, "var": moments.var}}

    def policy(params, obs, mask=None):
        moments = Moments(params["obs_moments"]["mean"], params["obs_moments"]["var"],
                          jnp.float32(1.0))
        dist = nets.policy(params, normalize_obs(p, moments, obs), mask)
        return to_env_action(spec, nets.env_action(dist.mode()))

    return Agent(
        init_params=nets.init, init=make_init_fn(p, sizes, spec), init_carry=tuple,
        acting=acting, noise=noise, act=act, env_action=nets.env_action,
        learn=make_learn_fn(p, sizes, spec, nets, layout.data_axis),
        policy=policy, policy_params=policy_params, metrics=METRICS,
        # a pool's final observations are the next step's (envs.pool): not stored twice
        steps_per_env=p.num_steps,
        keep_final_obs=p.bootstrap_truncation and not spec.resets_late)
