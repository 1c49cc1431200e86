"""PQN as an :class:`~jaxrl_dist.agents.base.Agent`: epsilon-greedy acting and a ``learn`` that
computes Q(lambda) targets over the rollout and trains the Q-network for epochs x minibatches,
for ONE member inside a ``shard_map`` over the data axis (the on-device fused path: no replay,
no target network, so topology invariance and populations work as for PPO).

A team of agents is a row per agent (``envs.team``): each row learns on its own (independent
Q-learning), or with ``mixer: vdn`` the environment is the sample: its Q is the sum of its
agents' Q-values of the actions they took, its target the team's reward plus the sum of their
greedy Q-values, and minibatches take an environment's agents together."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxrl_dist import rollout
from jaxrl_dist.agents import minibatch
from jaxrl_dist.agents.algorithm import hyperparameters
from jaxrl_dist.agents.base import EPISODE_METRICS, Agent
from jaxrl_dist.agents.optimizer import make_optimizer, make_schedule
from jaxrl_dist.agents.pqn.config import HPARAMS, PQNConfig
from jaxrl_dist.agents.qnet import networks as qnet
from jaxrl_dist.envs import EnvError, EnvSpec
from jaxrl_dist.gradients import global_mean_grad
from jaxrl_dist.sharding import Layout
from jaxrl_dist.sizes import Sizes
from jaxrl_dist.types import Trajectory

METRICS = {**EPISODE_METRICS, "loss": "mean", "q_mean": "mean", "target_mean": "mean",
           "grad_norm": "mean", "epsilon": "last", "learning_rate": "last"}


class TrainState(NamedTuple):
    params: Any
    opt_state: Any
    key: jax.Array          # uint32[2]; split once per update
    update: jax.Array       # int32[]; completed updates
    hparams: Any = {}       # swept hyperparameters {name: f32[]}


def q_lambda_targets(reward: jax.Array, next_q: jax.Array, terminated: jax.Array,
                     done: jax.Array, gamma: Any, lam: Any) -> jax.Array:
    """[T, E] Q(lambda) returns, backwards over the rollout:
    ``G_t = r_t + gamma (1 - terminated_t) [q'_t + lam (1 - done_t) (G_{t+1} - q'_t)]`` with
    ``q'_t`` = max Q of the state step t reached (its final observation), and G_T := q'_{T-1}
    (the rollout's end bootstraps one step). An episode's end cuts the lambda-trace; a time
    limit still bootstraps from q'_t, a terminal state does not."""
    def back(g_next, x):
        r, q, term, end = x
        g = r + gamma * (1.0 - term) * (q + lam * (1.0 - end) * (g_next - q))
        return g, g
    f32 = lambda x: x.astype(jnp.float32)   # noqa: E731
    _, targets = jax.lax.scan(back, next_q[-1], (reward, next_q, f32(terminated), f32(done)),
                              reverse=True)
    return targets


def team_samples(team: int, reward, next_q, terminated, ends, weight, obs, action):
    """VDN's samples (``team`` > 1): [T, E x A] rows -> [T, E] environments, the team's reward
    and greedy next Q the sums over its agents, its flags and weight the first agent's (an
    environment's agents end together), obs [T, E, A, ...] and action [T, E, A] grouped so a
    minibatch takes an environment's agents together. ``team`` 1: as given."""
    if team == 1:
        return reward, next_q, terminated, ends, weight, obs, action
    T, E = reward.shape[0], reward.shape[1] // team
    samples = lambda x: x.reshape(T, E, team, *x.shape[2:])   # noqa: E731
    first = lambda x: None if x is None else samples(x)[:, :, 0]   # noqa: E731
    return (jnp.sum(samples(reward), axis=2), jnp.sum(samples(next_q), axis=2),
            first(terminated), first(ends), first(weight), samples(obs), samples(action))


def team_of(p: PQNConfig, spec: EnvSpec) -> int:
    """How many rows make one sample: the agents of an environment under VDN, else 1. The
    team settings PQN has no meaning for are refused."""
    A = spec.num_agents
    if A > 1 and spec.policy_features is not None:
        raise EnvError(f"{spec.name}: team.critic=central is MAPPO's critic; PQN has no "
                       f"critic: drop it (pqn.mixer: vdn learns the team's value)")
    if A > 1 and spec.agent_networks:
        raise EnvError(f"{spec.name}: team.parameters=per_agent is PPO's; PQN's agents share "
                       f"one Q-network (team.agent_ids tells them apart)")
    if p.mixer == "vdn" and A == 1:
        raise EnvError(f"pqn.mixer=vdn sums the Q-values of a team's agents, and {spec.name} "
                       f"has one agent: set pqn.mixer: none")
    return A if p.mixer == "vdn" else 1


def make_agent(p: PQNConfig, sizes: Sizes, spec: EnvSpec, layout: Layout) -> Agent:
    qnet.require_discrete("pqn", spec)
    net = qnet.make_q_network(p.network, spec)
    team = team_of(p, spec)
    td_loss = qnet.make_td_loss(net, p.loss, team)
    axis, M, U = layout.data_axis, p.num_minibatches, p.update_epochs
    per_update = sizes.batch_size            # global env steps per update
    sgd_steps = sizes.num_updates * U * M

    def hp_of(swept):
        return hyperparameters(p, HPARAMS, swept)

    def schedule(hp):
        return make_schedule(p, hp, sgd_steps)

    def optimizer(hp):
        return make_optimizer(p, hp, schedule(hp))

    def init(key, params, swept):
        return TrainState(params, optimizer(hp_of(swept)).init(params), key, jnp.int32(0),
                          swept), ()

    def acting(train):
        return train.params, qnet.epsilon(hp_of(train.hparams), p.epsilon_schedule,
                                          train.update.astype(jnp.float32) * per_update)

    def learn(train: TrainState, data: Any, trajectory: Trajectory, key: jax.Array):
        steps = trajectory.steps
        T, E = steps.reward.shape
        hp = hp_of(train.hparams)
        opt = optimizer(hp)
        if p.bootstrap_truncation and steps.final_obs is not None:
            next_obs, terminated = steps.final_obs, steps.terminated
        else:   # the step after is the next obs: a reset's after an end (then unused), or
                # for a pool where the episode ended (envs.pool)
            next_obs = jnp.concatenate([steps.obs[1:], trajectory.last_obs[None]])
            terminated = steps.terminated
            if not p.bootstrap_truncation:
                terminated = terminated | steps.truncated
        next_q = jnp.max(net.apply(train.params, next_obs.reshape(-1, *spec.obs_shape)),
                         axis=-1).reshape(T, E)
        ends = steps.terminated | steps.truncated
        if steps.valid is not None:   # the trace stops before a step that is not experience
            ends = ends | rollout.stops_before_invalid(steps)
        weight = None if steps.valid is None else steps.valid.astype(jnp.float32)
        reward, next_q, terminated, ends, weight, obs, action = team_samples(
            team, steps.reward, next_q, terminated, ends, weight, steps.obs, steps.action)
        E = reward.shape[1]
        targets = q_lambda_targets(reward * hp["reward_scale"], next_q, terminated,
                                   ends, hp["gamma"], hp["q_lambda"])

        env_ids = rollout.local_env_ids(E, axis)
        perms = minibatch.epoch_permutations(key, U, env_ids, T)                  # [U, E, T]
        batch = (obs, action, targets, weight)   # weight: a pool's reset steps

        def sgd_step(carry, mb):
            params, opt_state = carry
            obs, action, target, w = mb
            grads, stats, grad_norm = global_mean_grad(td_loss, params, axis, obs, action,
                                                       target, hp["huber_delta"], w)
            updates, opt_state = opt.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), (stats, grad_norm)

        def epoch(carry, perm):
            minibatches = jax.tree.map(lambda x: minibatch.to_minibatches(x, perm, M), batch)
            return jax.lax.scan(sgd_step, carry, minibatches)

        (params, opt_state), (stats, grad_norm) = jax.lax.scan(
            epoch, (train.params, train.opt_state), perms)
        sums = jax.lax.psum({**rollout.episode_sums(steps), "target": jnp.sum(targets)}, axis)
        count = T * E * layout.data_size   # samples: environments under VDN, else rows
        target_sum = sums.pop("target")
        metrics = {**sums, "loss": jnp.mean(stats[..., 0]), "q_mean": jnp.mean(stats[..., 1]),
                   "target_mean": target_sum / count, "grad_norm": jnp.mean(grad_norm),
                   "epsilon": acting(train)[1],
                   "learning_rate": schedule(hp)(train.update * U * M)}
        return TrainState(params, opt_state, train.key, train.update + 1, train.hparams), \
            data, metrics

    return Agent(
        **qnet.agent_parts(net, spec), init=init, acting=acting, learn=learn, metrics=METRICS,
        steps_per_env=p.num_steps,
        keep_final_obs=p.bootstrap_truncation and not spec.resets_late)   # see learn
