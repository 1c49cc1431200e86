"""The off-policy actor-critics' ONE learner: a :class:`~.parts.Variant` (SAC :mod:`.sac`, TD3
:mod:`.td3`, CrossQ :mod:`.crossq`) as an :class:`~jaxrl_dist.agents.base.Agent`, for one member
inside a ``shard_map`` over the data axis. ``learn`` adds the rollout to the sharded replay
(the ``data`` slot, :mod:`jaxrl_dist.agents.replay.buffer`) and takes ``utd`` gradient steps in
one ``lax.scan``; each samples a global batch, steps the critic ensemble (the variant's
critic part), and every ``policy_delay``-th steps the actor (its actor part), the entropy
coefficient with it where the variant has one (``soft``).

Every sample's randomness (its replay row, its target and actor noise) is drawn per replay
shard with the shard's GLOBAL index folded in, so the global batch and its noise are the same
on any topology; every gradient is the global batch's mean
(:func:`~jaxrl_dist.gradients.global_mean_grad`); every decision (warm-up, learning, the actor's
turn) comes from replicated values.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxrl_dist import rollout, running_stats
from jaxrl_dist.agents.algorithm import hyperparameters
from jaxrl_dist.agents.base import Agent
from jaxrl_dist.agents.offpolicy import networks as networks_lib
from jaxrl_dist.agents.offpolicy import parts
from jaxrl_dist.agents.offpolicy.config import HPARAMS, OffPolicyConfig
from jaxrl_dist.agents.offpolicy.networks import Networks, normalize_obs
from jaxrl_dist.agents.optimizer import make_optimizer
from jaxrl_dist.agents.replay import buffer as replay_lib
from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.sharding import Layout
from jaxrl_dist.sizes import Sizes
from jaxrl_dist.types import RunState, Trajectory

# what a skipped (warm-up) update reports of the gradient steps' statistics
STEP_STATS = ("critic_loss", "q_mean", "critic_grad_norm", "actor_loss", "actor_grad_norm",
              "entropy", "actor_steps")


class Setup(NamedTuple):
    """What the agent's functions share, derived once from the section, the sizes and the
    environment."""

    v: parts.Variant
    c: OffPolicyConfig
    spec: EnvSpec
    layout: Layout
    nets: Networks
    shards: replay_lib.Plan
    per_update: int          # global env steps per update
    num_envs: int            # global environments
    store_final: bool        # the replay stores each step's final observation
    autotune: bool           # log(alpha) is learned
    target_entropy: float
    bounds: tuple[np.ndarray, np.ndarray]

    @classmethod
    def of(cls, v: parts.Variant, c: OffPolicyConfig, sizes: Sizes, spec: EnvSpec,
           layout: Layout) -> Setup:
        bounds = networks_lib.bounds(v.name, spec)
        shards = replay_lib.plan(v.name, c.buffer_shards, c.buffer_size, c.batch_size,
                                 sizes.local_envs, layout.data_size)
        autotune = v.soft and c.autotune
        target_entropy = (-float(spec.action_dim) if not v.soft or c.target_entropy is None
                          else float(c.target_entropy))
        if autotune:
            parts.check_target_entropy(v.name, target_entropy, spec.action_dim)
        pool = spec.resets_late                # final observations are in the next row
        return cls(v, c, spec, layout, v.networks(c.network, spec, layout.data_axis), shards,
                   sizes.batch_size, sizes.local_envs * layout.data_size,
                   c.bootstrap_truncation and not pool, autotune, target_entropy, bounds)

    def hp(self, swept: Any) -> dict[str, Any]:
        return hyperparameters(self.c, HPARAMS[self.v.name], swept)

    def optimizers(self, hp: dict[str, Any]) -> dict[str, Any]:
        def adam(lr, clip=True, b1=None):
            return make_optimizer(self.c, {
                "learning_rate": lr, "max_grad_norm": hp["max_grad_norm"] if clip else None},
                b1=b1)
        b1 = self.v.adam_b1(self.c)
        out = {"actor": adam(hp["actor_lr"], b1=b1), "critic": adam(hp["critic_lr"], b1=b1)}
        if self.autotune:   # a scalar: no clipping (SB3's), Adam's own beta1 (sbx's)
            out["alpha"] = adam(hp["alpha_lr"], clip=False)
        return out


def make_agent(v: parts.Variant, c: OffPolicyConfig, sizes: Sizes, spec: EnvSpec,
               layout: Layout) -> Agent:
    """``v`` as an Agent; the section ``c`` is its own (:mod:`.config`)."""
    s = Setup.of(v, c, sizes, spec, layout)
    A, nets = spec.action_dim, s.nets

    def init_params(key):
        key_actor, key_critic = jax.random.split(key)
        params = {"actor": nets.init_actor(key_actor), "critic": nets.init_critic(key_critic)}
        if v.soft:
            params["log_alpha"] = jnp.log(jnp.float32(c.alpha))
        return params

    def init(key, params, swept):
        opts = s.optimizers(s.hp(swept))
        opt_state = {name: opt.init(params["log_alpha" if name == "alpha" else name])
                     for name, opt in opts.items()}
        train = v.init_train(nets, params, opt_state,
                             running_stats.init_moments(spec.obs_shape), key, swept)
        p = s.shards
        data = replay_lib.init(p.shards_local, p.rows, p.envs_per_shard, spec.obs_shape,
                               jnp.uint8 if spec.obs_dtype == "uint8" else jnp.float32,
                               s.store_final, spec.resets_late, (A,), jnp.float32)
        return train, data

    def acting(train):
        steps = train.update.astype(jnp.float32) * s.per_update   # int32 overflows at 2^31
        return {"actor": v.actor_variables(train), "moments": train.obs_moments,
                "random": steps < c.learning_starts,
                "noise_scale": v.noise_scale(s.hp(train.hparams))}

    def noise(key, num_steps):
        key_normal, key_uniform = jax.random.split(key)
        return {"normal": jax.random.normal(key_normal, (num_steps, A)),
                "uniform": jax.random.uniform(key_uniform, (num_steps, A), minval=-1.0,
                                              maxval=1.0)}

    def act(acting_state, carry, obs, mask, noise_t):
        del mask
        x = normalize_obs(c, acting_state["moments"], obs)
        a = v.explore(nets, acting_state["actor"], x, noise_t["normal"],
                      acting_state["noise_scale"])
        # the warm-up: uniformly random actions in the bounds (SB3's and CleanRL's)
        return jnp.where(acting_state["random"], noise_t["uniform"], a), carry, {}

    def policy_params(train):
        moments = train.obs_moments
        return {"actor": v.actor_variables(train),
                "obs_moments": {"mean": moments.mean, "var": moments.var}}

    return Agent(
        **networks_lib.deployment(v.name, c, spec, nets)._asdict(), init_params=init_params,
        init=init, acting=acting, noise=noise, act=act,
        env_action=networks_lib.to_bounds(*s.bounds), learn=_learn(s),
        policy_params=policy_params, metrics=v.metrics, steps_per_env=c.num_steps,
        keep_final_obs=s.store_final, checkpointed=RunState(True, True, c.checkpoint_buffer),
        new_actors=lambda data: replay_lib.cut(data, c.n_step),
        # unrolled, their update compiles ~30 % slower (SAC on Pendulum 8.4 -> 11.7 s, CrossQ
        # 11.8 -> 18.6 s; DQN the other way, 7.5 -> 6.6 s: 2026-11-27, AMD EPYC), and jaxlib
        # 0.11.2 did not finish compiling SAC's tiny test config in 4 minutes (31 s looped);
        # they take the fenced hash every program takes otherwise (compile_cache)
        unroll_threefry=False)


def _learn(s: Setup) -> Any:
    """The agent's ``learn``: the rollout into the replay, then ``utd`` gradient steps once
    the warm-up is over."""
    v, c, spec, layout = s.v, s.c, s.spec, s.layout
    axis, devices = layout.data_axis, layout.data_size

    def learn(train, data, trajectory: Trajectory, key):
        steps = trajectory.steps
        hp = s.hp(train.hparams)
        data = replay_lib.add(data, steps)
        local = {**rollout.episode_sums(steps), "rows": data.rows[0].astype(jnp.float32)}
        if c.normalize_observations:
            obs = steps.obs.reshape(-1, *spec.obs_shape).astype(jnp.float32)
            local["obs_sum"], local["obs_sq"] = jnp.sum(obs, 0), jnp.sum(jnp.square(obs), 0)
        # ONE all-reduce: the episodes, the buffer's fill and the observation moments
        sums = jax.lax.psum(local, axis)
        rows_filled, transitions = replay_lib.filled(sums.pop("rows"), devices, s.num_envs)
        if c.normalize_observations:   # this rollout's global moments, used from now on
            n = jnp.float32(s.per_update)
            mean, var = running_stats.moments_from_sums(sums.pop("obs_sum"),
                                                        sums.pop("obs_sq"), n)
            train = train._replace(obs_moments=running_stats.merge_moments(
                train.obs_moments, mean, var, n))
        learning = (transitions >= c.learning_starts) & (rows_filled > c.n_step)
        if layout.members:   # the same for every member (nothing it depends on is swept):
            # agreed over them, so the cond stays a branch, not a select running both sides
            learning = jax.lax.pmin(learning.astype(jnp.int32), layout.member_vmap_axis) > 0
        opts = s.optimizers(hp)
        shard_ids = replay_lib.shard_ids(s.shards, axis)
        # the renormalisation's warm-up (CrossQ), on the global env steps collected so far
        renorm = (train.update + 1).astype(jnp.float32) * s.per_update >= v.renorm_from(c)
        drops = steps.valid is not None and data.valid is None   # env_nonfinite: reset

        def train_steps(train):
            train, out = jax.lax.scan(
                lambda train, k: _gradient_step(s, hp, opts, data, shard_ids, renorm, drops,
                                                train, k),
                train, jax.random.split(key, c.utd))
            critic, critic_norm, actor, actor_norm, due = out
            turns = jnp.maximum(jnp.sum(due), 1.0)
            return train, {
                "critic_loss": jnp.mean(critic[:, 0]), "q_mean": jnp.mean(critic[:, 1]),
                "critic_grad_norm": jnp.mean(critic_norm),
                "actor_loss": jnp.sum(actor[:, 0] * due) / turns,
                "actor_grad_norm": jnp.sum(actor_norm * due) / turns,
                "entropy": jnp.sum(actor[:, 1] * due) / turns, "actor_steps": jnp.sum(due)}

        def skip(train):
            return train, {name: jnp.float32(0.0) for name in STEP_STATS}

        train, stats = jax.lax.cond(learning, train_steps, skip, train)
        if v.soft:
            stats["alpha"] = jnp.exp(train.params["log_alpha"])
        else:
            del stats["entropy"]
        metrics = {**sums, **stats, **v.step_metrics(renorm),
                   "learning": learning.astype(jnp.float32),
                   "replay_transitions": transitions.astype(jnp.float32)}
        return train._replace(update=train.update + 1), data, metrics

    return learn


def _gradient_step(s: Setup, hp: dict[str, Any], opts: dict[str, Any], data: Any,
                   shard_ids: jax.Array, renorm: Any, drops: bool, train: Any, key: jax.Array
                   ) -> tuple[Any, tuple]:
    """One gradient step of the critics and, every ``policy_delay``-th, of the actor."""
    v, c = s.v, s.c
    k = parts.StepKeys(*jax.random.split(key, 3))
    batch = replay_lib.sample(data, k.sample, shard_ids, s.shards.per_shard_batch, c.n_step,
                              hp["gamma"], drops)
    if c.reward_scale != 1.0:   # (1.0 leaves the program as it was: no multiply)
        batch = batch._replace(reward=batch.reward * c.reward_scale)

    def normal(key):
        return parts.shard_normal(key, shard_ids, s.shards.per_shard_batch,
                                  s.spec.action_dim)

    step = parts.Step(s.nets, s.layout.data_axis, hp, batch,
                      normalize_obs(c, train.obs_moments, batch.obs),
                      normalize_obs(c, train.obs_moments, batch.next_obs), normal(k.target),
                      lambda: normal(k.actor), renorm, s.target_entropy)
    # CRITICS: one step towards r + discount x (the value of s')
    train, grads, critic_stats, critic_norm = v.critic_grads(step, train)
    params = train.params
    updates, opt_critic = opts["critic"].update(grads, train.opt_state["critic"],
                                                params["critic"])
    params = {**params, "critic": optax.apply_updates(params["critic"], updates)}
    train = v.after_critic(hp, train._replace(
        params=params, opt_state={**train.opt_state, "critic": opt_critic}))

    def actor_step(train):   # the actor, log(alpha) with it where it is learned
        params = train.params
        trainable = {"actor": params["actor"]}
        if s.autotune:
            trainable["log_alpha"] = params["log_alpha"]
        train, grads, actor_stats = v.actor_grads(step, train, trainable)
        opt_state, new = dict(train.opt_state), dict(params)
        for name, leaf in (("actor", "actor"), ("alpha", "log_alpha")):
            if leaf in grads:
                updates, opt_state[name] = opts[name].update(grads[leaf], opt_state[name],
                                                             params[leaf])
                new[leaf] = optax.apply_updates(params[leaf], updates)
        if "log_alpha" in grads:   # an identity inside the range: the same bits there
            new["log_alpha"] = jnp.clip(new["log_alpha"], *parts.LOG_ALPHA_RANGE)
        train = v.after_actor(hp, train._replace(params=new, opt_state=opt_state))
        return train, (actor_stats, optax.tree.norm(grads["actor"]))

    if c.policy_delay == 1:
        train, (actor_stats, actor_norm) = actor_step(train)
        due = jnp.float32(1.0)
    else:
        due = train.gradient_steps % c.policy_delay == 0

        def wait(train):
            return train, (jnp.zeros(2, jnp.float32), jnp.float32(0.0))
        train, (actor_stats, actor_norm) = jax.lax.cond(due, actor_step, wait, train)
        due = due.astype(jnp.float32)
    train = train._replace(gradient_steps=train.gradient_steps + 1)
    return train, (critic_stats, critic_norm, actor_stats, actor_norm, due)
