"""DQN as an :class:`~jaxrl_dist.agents.base.Agent`: epsilon-greedy acting, and a ``learn`` that
adds the rollout to the sharded replay buffer (the ``data`` slot) and takes ``gradient_steps``
double-DQN steps on n-step batches sampled from it, for ONE member inside a ``shard_map`` over
the data axis.

Every decision is made from replicated values, so all devices and processes agree: epsilon
and the acting warm-up from the update count, learning from the buffer's fill (reduced over
the data axis), target updates from the gradient-step count.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxrl_dist import rollout
from jaxrl_dist.agents.algorithm import hyperparameters
from jaxrl_dist.agents.base import EPISODE_METRICS, Agent
from jaxrl_dist.agents.dqn.config import HPARAMS, DQNConfig
from jaxrl_dist.agents.optimizer import make_optimizer
from jaxrl_dist.agents.qnet import networks as qnet
from jaxrl_dist.agents.replay import buffer as replay_lib
from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.gradients import global_mean_grad
from jaxrl_dist.sharding import Layout
from jaxrl_dist.sizes import Sizes
from jaxrl_dist.types import RunState, Trajectory

METRICS = {**EPISODE_METRICS, "loss": "mean", "q_mean": "mean", "grad_norm": "mean",
           "epsilon": "last", "learning": "mean", "replay_transitions": "last",
           "target_updates": "sum"}


class TrainState(NamedTuple):
    params: Any
    target_params: Any
    opt_state: Any
    key: jax.Array          # uint32[2]; split once per update
    update: jax.Array       # int32[]; completed updates
    gradient_steps: jax.Array   # int32[]; gradient steps taken (target updates count them)
    hparams: Any = {}       # swept hyperparameters {name: f32[]}


def make_agent(d: DQNConfig, sizes: Sizes, spec: EnvSpec, layout: Layout) -> Agent:
    qnet.require_discrete("dqn", spec)
    net = qnet.make_q_network(d.network, spec)
    td_loss = qnet.make_td_loss(net, d.loss)
    axis, devices = layout.data_axis, layout.data_size
    shards = replay_lib.plan("dqn", d.buffer_shards, d.buffer_size, d.batch_size,
                             sizes.local_envs, devices)
    obs_dtype = jnp.uint8 if d.obs_storage == "uint8" else jnp.float32
    per_update = sizes.batch_size            # global env steps per update
    pool = spec.resets_late             # final observations are in the next row

    def hp_of(train):
        return hyperparameters(d, HPARAMS, train.hparams)

    def init(key, params, swept):
        hp = hyperparameters(d, HPARAMS, swept)
        train = TrainState(params, params, make_optimizer(d, hp).init(params), key,
                           jnp.int32(0), jnp.int32(0), swept)
        data = replay_lib.init(shards.shards_local, shards.rows, shards.envs_per_shard,
                               spec.obs_shape, obs_dtype, d.bootstrap_truncation and not pool,
                               pool)
        return train, data

    def acting(train):
        steps = train.update.astype(jnp.float32) * per_update   # int32 would overflow at 2^31
        eps = qnet.epsilon(hp_of(train), d.epsilon_schedule, steps)
        # warm-up: uniformly random actions (as rejax and DI-engine collect their first data)
        return train.params, jnp.where(steps < d.learning_starts, 1.0, eps)

    def learn(train, data, trajectory: Trajectory, key):
        steps = trajectory.steps
        hp = hp_of(train)
        data = replay_lib.add(data, steps)
        shard_ids = replay_lib.shard_ids(shards, axis)
        # The fill is the same on every shard; summed with the episode statistics (ONE
        # all-reduce: between processes each costs a round trip) so the decision is visibly
        # replicated.
        sums = jax.lax.psum({**rollout.episode_sums(steps),
                             "rows": data.rows[0].astype(jnp.float32)}, axis)
        rows_filled, transitions = replay_lib.filled(sums.pop("rows"), devices,
                                                     sizes.local_envs * devices)
        learning = (transitions >= d.learning_starts) & (rows_filled > d.n_step)
        if layout.members:   # the same for every member (nothing it depends on is swept):
            # agreed over them, so the cond stays a branch, not a select running both sides
            learning = jax.lax.pmin(learning.astype(jnp.int32), layout.member_vmap_axis) > 0
        optimizer = make_optimizer(d, hp)

        drops = steps.valid is not None and data.valid is None   # env_nonfinite: reset

        def train_steps(train):
            keys = jax.random.split(key, d.gradient_steps)
            train, (stats, gnorm, due) = jax.lax.scan(
                lambda train, k: gradient_step(hp, optimizer, data, shard_ids, drops, train, k),
                train, keys)
            return train, (jnp.mean(stats[:, 0]), jnp.mean(stats[:, 1]), jnp.mean(gnorm),
                           jnp.sum(due))

        def skip(train):
            zero = jnp.float32(0.0)
            return train, (zero, zero, zero, zero)

        train, (loss, q_mean, grad_norm, target_updates) = jax.lax.cond(
            learning, train_steps, skip, train)
        metrics = {**sums, "loss": loss,
                   "q_mean": q_mean, "grad_norm": grad_norm,
                   "epsilon": acting(train)[1], "learning": learning.astype(jnp.float32),
                   "replay_transitions": transitions.astype(jnp.float32),
                   "target_updates": target_updates}
        return train._replace(update=train.update + 1), data, metrics

    def gradient_step(hp, optimizer, data, shard_ids, drops, train, key):
        batch = replay_lib.sample(data, key, shard_ids, shards.per_shard_batch, d.n_step,
                                  hp["gamma"], drops)
        next_q_target = net.apply(train.target_params, batch.next_obs)
        if d.double:
            next_action = jnp.argmax(net.apply(train.params, batch.next_obs), axis=-1)
        else:
            next_action = jnp.argmax(next_q_target, axis=-1)
        next_value = jnp.take_along_axis(next_q_target, next_action[:, None], 1)[:, 0]
        target = jax.lax.stop_gradient(batch.reward + batch.discount * next_value)

        grads, stats, grad_norm = global_mean_grad(
            td_loss, train.params, axis, batch.obs, batch.action, target, hp["huber_delta"],
            batch.weight)
        updates, opt_state = optimizer.update(grads, train.opt_state, train.params)
        params = optax.apply_updates(train.params, updates)
        count = train.gradient_steps + 1
        period = jnp.asarray(hp["target_update_period"]).astype(jnp.int32)
        due = count % period == 0
        tau = hp["target_tau"]
        target_params = jax.lax.cond(
            due, lambda: jax.tree.map(lambda o, t: tau * o + (1.0 - tau) * t, params,
                                      train.target_params),
            lambda: train.target_params)
        train = train._replace(params=params, opt_state=opt_state, target_params=target_params,
                               gradient_steps=count)
        return train, (stats, grad_norm, due.astype(jnp.float32))

    return Agent(
        **qnet.agent_parts(net, spec), init=init, acting=acting, learn=learn, metrics=METRICS,
        steps_per_env=d.num_steps, keep_final_obs=d.bootstrap_truncation and not pool,
        checkpointed=RunState(True, True, d.checkpoint_buffer),
        new_actors=lambda data: replay_lib.cut(data, d.n_step))
