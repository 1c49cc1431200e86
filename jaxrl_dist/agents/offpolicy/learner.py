"""SAC, TD3 and CrossQ as :class:`~jaxrl_dist.agents.base.Agent`\\ s: ONE ``learn`` for all
three, for one member inside a ``shard_map`` over the data axis. It adds the rollout to the
sharded replay (the ``data`` slot, :mod:`jaxrl_dist.agents.replay.buffer`) and takes ``utd``
gradient steps in one ``lax.scan``; each samples a global batch, steps the critic ensemble
towards its Polyak target (CrossQ: its own value of s'), and every ``policy_delay``-th steps
the actor. What differs is the actor's part:

* SAC: a tanh-squashed Gaussian; the target is min_i Q'_i(s', a') - alpha log pi(a'|s') with
  a' drawn from the current actor; the actor minimises alpha log pi(a|s) - min_i Q_i(s, a);
  log(alpha) descends -log(alpha) (log pi + target entropy) (automatic entropy tuning, as
  SB3's); the critics' targets follow every gradient step.
* TD3: a deterministic actor; the target is min_i Q'_i(s', clip(mu'(s') + clip(noise))), the
  actor maximises Q_1(s, mu(s)); actor and critic targets follow each actor step.
* CrossQ (Bhatt et al., ICLR 2024; sbx's ``CrossQ``): SAC's actor and entropy tuning with NO
  target networks: batch renormalisation (:mod:`.renorm`) in the critics, which take (s, a)
  and (s', a') in ONE forward pass so the batch statistics are those of the mixture (the
  target is min_i Q_i(s', a') - alpha log pi(a'|s') from that pass, without gradient); the
  actor's loss takes the critics in eval mode (running statistics), the next action the actor
  in eval mode. Batch statistics are the global batch's, whatever the topology; the running
  statistics live in the train state (``batch_stats``) and act, evaluate and deploy.

Every sample's randomness (its replay row, its target and actor noise) is drawn per replay
shard with the shard's GLOBAL index folded in, so the global batch and its noise are the same
on any topology; every gradient is the global batch's mean
(:func:`~jaxrl_dist.gradients.global_mean_grad`); every decision (warm-up, learning, the actor's
turn) comes from replicated values.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxrl_dist import rollout, running_stats
from jaxrl_dist.agents.algorithm import hyperparameters
from jaxrl_dist.agents.base import EPISODE_METRICS, Agent
from jaxrl_dist.agents.offpolicy import networks as networks_lib
from jaxrl_dist.agents.offpolicy.config import (HPARAMS, CrossQConfig, OffPolicyConfig,
                                                SACConfig, TD3Config)
from jaxrl_dist.agents.offpolicy.networks import Networks, normalize_obs
from jaxrl_dist.agents.optimizer import make_optimizer
from jaxrl_dist.agents.replay import buffer as replay_lib
from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.errors import ConfigError
from jaxrl_dist.gradients import global_mean_grad
from jaxrl_dist.running_stats import Moments
from jaxrl_dist.sharding import Layout
from jaxrl_dist.sizes import Sizes
from jaxrl_dist.types import RunState, Trajectory

COMMON_METRICS = {**EPISODE_METRICS, "critic_loss": "mean", "q_mean": "mean",
                  "critic_grad_norm": "mean", "actor_loss": "mean", "actor_grad_norm": "mean",
                  "actor_steps": "sum", "learning": "mean", "replay_transitions": "last"}
METRICS = {"sac": {**COMMON_METRICS, "entropy": "mean", "alpha": "last"},
           "td3": COMMON_METRICS,
           "crossq": {**COMMON_METRICS, "entropy": "mean", "alpha": "last", "renorm": "last"}}
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


class CrossQState(NamedTuple):
    """CrossQ's train state: :class:`TrainState` with the batch renormalisation's running
    statistics where SAC keeps its targets."""

    params: Any              # {"actor", "critic": leaves [N, ...], "log_alpha": f32[]}
    batch_stats: Any         # running statistics {"actor", "critic": [N, ...]}: {layer:
                             #   {"mean", "var": f32[F]}} (the actor's {} without renorm)
    opt_state: Any           # {"actor", "critic"}; with autotune also "alpha"
    obs_moments: Moments
    key: jax.Array
    update: jax.Array
    gradient_steps: jax.Array
    hparams: Any = {}


class StepKeys(NamedTuple):
    """What one gradient step draws."""

    sample: jax.Array   # the replay batch
    target: jax.Array   # the noise of the next actions the critics' target is taken at
    actor: jax.Array    # the noise of the actions the actor's loss is taken at (SAC)


# --------------------------------------------------------------------------------------------
# The losses (per device: local means of the device's shard of the global batch)


def td_loss(q: jax.Array, y: jax.Array, weight: jax.Array | None
            ) -> tuple[jax.Array, jax.Array]:
    """0.5 sum_i mean_b (Q_i [N, B] - y_b)^2 over the ensemble (SB3's critic loss), samples
    of weight 0 (a pool's reset steps) adding nothing; aux [loss, mean Q]."""
    per_sample = 0.5 * jnp.sum(jnp.square(q - y), axis=0)
    if weight is not None:
        per_sample = per_sample * weight
    loss = jnp.mean(per_sample)
    return loss, jnp.stack([loss, jnp.mean(q)])


def critic_loss(nets: Networks, params: Any, x: jax.Array, action: jax.Array, y: jax.Array,
                weight: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """:func:`td_loss` of the critics towards the targets' ``y`` (SAC, TD3)."""
    return td_loss(nets.critic(params, x, action), y, weight)


def crossq_critic_loss(nets: Networks, params: Any, stats: Any, x: jax.Array,
                       action: jax.Array, reward: jax.Array, discount: jax.Array,
                       x_next: jax.Array, next_action: jax.Array, next_penalty: jax.Array,
                       weight: jax.Array | None, renorm: Any
                       ) -> tuple[jax.Array, tuple[jax.Array, Any]]:
    """:func:`td_loss` with NO target network: the critics take [s; s'] and [a; a'] (a' drawn
    from pi(s'), ``next_penalty`` = alpha log pi(a'|s')) as ONE batch, so batch
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
    loss, aux = td_loss(q, y, weight)
    return loss, (aux, new_stats)


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


def sac_actor_loss(nets: Networks, trainable: dict[str, Any], critic: Any, log_alpha: Any,
                   x: jax.Array, normal: jax.Array, target_entropy: float
                   ) -> tuple[jax.Array, jax.Array]:
    """:func:`soft_actor_objective` at a = tanh(mean + std normal) and min_i Q_i(s, a)."""
    a, log_prob = nets.actor(trainable["actor"], x).sample_and_log_prob(normal)
    q = jnp.min(nets.critic(critic, x, a), axis=0)
    return soft_actor_objective(trainable, log_alpha, log_prob, q, target_entropy)


def crossq_actor_loss(nets: Networks, trainable: dict[str, Any], stats: Any, critic: Any,
                      log_alpha: Any, x: jax.Array, normal: jax.Array, target_entropy: float,
                      renorm: Any) -> tuple[jax.Array, tuple[jax.Array, Any]]:
    """:func:`sac_actor_loss` with the actor in train mode (its batch statistics, ``stats``
    the running ones) and the critics' variables ``critic`` in eval mode (sbx's); aux
    ([actor loss, entropy], the actor's new running statistics)."""
    dist, new_stats = nets.actor_train({"params": trainable["actor"], "batch_stats": stats}, x,
                                       None, renorm)
    a, log_prob = dist.sample_and_log_prob(normal)
    q = jnp.min(nets.critic(critic, x, a), axis=0)
    loss, aux = soft_actor_objective(trainable, log_alpha, log_prob, q, target_entropy)
    return loss, (aux, new_stats)


def td3_actor_loss(nets: Networks, trainable: dict[str, Any], critic: Any, x: jax.Array
                   ) -> tuple[jax.Array, jax.Array]:
    """-mean Q_1(s, mu(s)): the first critic only (TD3's); aux [loss, 0]."""
    q = nets.critic(critic, x, nets.actor(trainable["actor"], x))[0]
    loss = -jnp.mean(q)
    return loss, jnp.stack([loss, jnp.float32(0.0)])


def sac_next_value(nets: Networks, params: Any, target: Any, x_next: jax.Array,
                   normal: jax.Array) -> jax.Array:
    """min_i Q'_i(s', a') - alpha log pi(a'|s'), a' drawn from the CURRENT actor."""
    a, log_prob = nets.actor(params["actor"], x_next).sample_and_log_prob(normal)
    q = jnp.min(nets.critic(target["critic"], x_next, a), axis=0)
    return q - jnp.exp(params["log_alpha"]) * log_prob


def td3_next_value(nets: Networks, target: Any, x_next: jax.Array, normal: jax.Array,
                   policy_noise: Any, noise_clip: Any) -> jax.Array:
    """min_i Q'_i(s', a'), a' = clip(mu'(s') + clip(policy_noise normal, +-noise_clip), +-1)
    (target policy smoothing, in [-1, 1] units)."""
    noise = jnp.clip(policy_noise * normal, -noise_clip, noise_clip)
    a = jnp.clip(nets.actor(target["actor"], x_next) + noise, -1.0, 1.0)
    return jnp.min(nets.critic(target["critic"], x_next, a), axis=0)


def polyak(tau: Any, online: Any, target: Any) -> Any:
    return jax.tree.map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)


def shard_normal(key: jax.Array, shard_ids: jax.Array, per_shard: int, size: int) -> jax.Array:
    """[S_local * per_shard, size] standard normals, shard ``s``'s rows drawn with
    ``fold_in(key, s)`` (its GLOBAL index): each sample's noise, whatever device holds it, in
    the order :func:`replay_lib.sample` returns the samples."""
    draw = jax.vmap(lambda s: jax.random.normal(jax.random.fold_in(key, s), (per_shard, size)))
    return draw(shard_ids).reshape(-1, size)


# --------------------------------------------------------------------------------------------
# The agent


def make_sac(c: SACConfig, sizes: Sizes, spec: EnvSpec, layout: Layout) -> Agent:
    return make_agent("sac", c, sizes, spec, layout)


def make_td3(c: TD3Config, sizes: Sizes, spec: EnvSpec, layout: Layout) -> Agent:
    return make_agent("td3", c, sizes, spec, layout)


def make_crossq(c: CrossQConfig, sizes: Sizes, spec: EnvSpec, layout: Layout) -> Agent:
    return make_agent("crossq", c, sizes, spec, layout)


def make_agent(algo: str, c: OffPolicyConfig, sizes: Sizes, spec: EnvSpec,
               layout: Layout) -> Agent:
    """``algo`` ("sac", "td3" or "crossq") as an Agent; the section ``c`` is its own
    (:mod:`.config`)."""
    sac = algo == "sac"
    crossq = algo == "crossq"
    soft = sac or crossq                   # a squashed Gaussian and the entropy coefficient
    axis, devices = layout.data_axis, layout.data_size
    low, high = networks_lib.bounds(algo, spec)
    nets = networks_lib.make_networks(algo, c.network, spec, axis)
    names = HPARAMS[algo]
    shards = replay_lib.plan(algo, c.buffer_shards, c.buffer_size, c.batch_size,
                             sizes.local_envs, devices)
    A = spec.action_dim
    per_update = sizes.batch_size          # global env steps per update
    num_envs = sizes.local_envs * devices
    pool = spec.resets_late                # final observations are in the next row
    store_final = c.bootstrap_truncation and not pool
    autotune = soft and c.autotune
    target_entropy = (-float(A) if not soft or c.target_entropy is None
                      else float(c.target_entropy))
    if autotune:
        check_target_entropy(algo, target_entropy, A)
    # CrossQ: renormalise once this many env steps are collected (one clock, every device's)
    renorm_from = float(c.learning_starts + c.renorm_warmup_steps) if crossq else 0.0
    deployment = networks_lib.deployment(algo, c, spec, nets)

    def hp_of(train):
        return hyperparameters(c, names, train.hparams)

    def optimizers(hp):
        def adam(lr, clip=True, b1=None):
            return make_optimizer(c, {"learning_rate": lr,
                                      "max_grad_norm": hp["max_grad_norm"] if clip else None},
                                  b1=b1)
        b1 = c.adam_b1 if crossq else None   # CrossQ's 0.5 for the actor and the critics
        out = {"actor": adam(hp["actor_lr"], b1=b1), "critic": adam(hp["critic_lr"], b1=b1)}
        if autotune:   # a scalar: no clipping (SB3's), Adam's own beta1 (sbx's)
            out["alpha"] = adam(hp["alpha_lr"], clip=False)
        return out

    def init_params(key):
        key_actor, key_critic = jax.random.split(key)
        params = {"actor": nets.init_actor(key_actor), "critic": nets.init_critic(key_critic)}
        if soft:
            params["log_alpha"] = jnp.log(jnp.float32(c.alpha))
        return params

    def init(key, params, swept):
        opts = optimizers(hyperparameters(c, names, swept))
        opt_state = {name: opt.init(params["log_alpha" if name == "alpha" else name])
                     for name, opt in opts.items()}
        moments = running_stats.init_moments(spec.obs_shape)
        if crossq:   # no targets: the running statistics instead
            train = CrossQState(params, nets.init_stats(), opt_state, moments, key,
                                jnp.int32(0), jnp.int32(0), swept)
        else:
            target = {"critic": params["critic"]} if sac else {"critic": params["critic"],
                                                               "actor": params["actor"]}
            train = TrainState(params, target, opt_state, moments, key, jnp.int32(0),
                               jnp.int32(0), swept)
        data = replay_lib.init(shards.shards_local, shards.rows, shards.envs_per_shard,
                               spec.obs_shape, jnp.uint8 if spec.obs_dtype == "uint8"
                               else jnp.float32, store_final, pool, (A,), jnp.float32)
        return train, data

    def actor_variables(train):
        """What ``nets.actor`` takes: the parameters, or (CrossQ) with the running statistics
        (eval mode: acting, the next action, the deployed policy)."""
        if crossq:
            return {"params": train.params["actor"], "batch_stats": train.batch_stats["actor"]}
        return train.params["actor"]

    # ACTING

    def acting(train):
        steps = train.update.astype(jnp.float32) * per_update   # int32 would overflow at 2^31
        scale = jnp.float32(0.0) if soft else jnp.asarray(hp_of(train)["exploration_noise"],
                                                          jnp.float32)
        return {"actor": actor_variables(train), "moments": train.obs_moments,
                "random": steps < c.learning_starts, "noise_scale": scale}

    def noise(key, num_steps):
        key_normal, key_uniform = jax.random.split(key)
        return {"normal": jax.random.normal(key_normal, (num_steps, A)),
                "uniform": jax.random.uniform(key_uniform, (num_steps, A), minval=-1.0,
                                              maxval=1.0)}

    def act(acting_state, carry, obs, mask, noise_t):
        del mask
        x = normalize_obs(c, acting_state["moments"], obs)
        if soft:
            a, _ = nets.actor(acting_state["actor"], x).sample_and_log_prob(noise_t["normal"])
        else:
            a = jnp.clip(nets.actor(acting_state["actor"], x)
                         + acting_state["noise_scale"] * noise_t["normal"], -1.0, 1.0)
        # the warm-up: uniformly random actions in the bounds (SB3's and CleanRL's)
        return jnp.where(acting_state["random"], noise_t["uniform"], a), carry, {}

    def policy_params(train):
        moments = train.obs_moments
        return {"actor": actor_variables(train),
                "obs_moments": {"mean": moments.mean, "var": moments.var}}

    # LEARNING

    def learn(train, data, trajectory: Trajectory, key):
        steps = trajectory.steps
        hp = hp_of(train)
        data = replay_lib.add(data, steps)
        local = {**rollout.episode_sums(steps), "rows": data.rows[0].astype(jnp.float32)}
        if c.normalize_observations:
            obs = steps.obs.reshape(-1, *spec.obs_shape).astype(jnp.float32)
            local["obs_sum"], local["obs_sq"] = jnp.sum(obs, 0), jnp.sum(jnp.square(obs), 0)
        # ONE all-reduce: the episodes, the buffer's fill and the observation moments
        sums = jax.lax.psum(local, axis)
        rows_filled, transitions = replay_lib.filled(sums.pop("rows"), devices, num_envs)
        if c.normalize_observations:   # this rollout's global moments, used from now on
            n = jnp.float32(per_update)
            mean, var = running_stats.moments_from_sums(sums.pop("obs_sum"),
                                                        sums.pop("obs_sq"), n)
            train = train._replace(obs_moments=running_stats.merge_moments(
                train.obs_moments, mean, var, n))
        learning = (transitions >= c.learning_starts) & (rows_filled > c.n_step)
        if layout.members:   # the same for every member (nothing it depends on is swept):
            # agreed over them, so the cond stays a branch, not a select running both sides
            learning = jax.lax.pmin(learning.astype(jnp.int32), layout.member_vmap_axis) > 0
        opts = optimizers(hp)
        shard_ids = replay_lib.shard_ids(shards, axis)
        # CrossQ's renormalisation warm-up, on the global env steps collected so far
        renorm = (train.update + 1).astype(jnp.float32) * per_update >= renorm_from

        drops = steps.valid is not None and data.valid is None   # env_nonfinite: reset

        def train_steps(train):
            train, out = jax.lax.scan(
                lambda train, k: gradient_step(hp, opts, data, shard_ids, renorm, drops, train,
                                               k),
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
            zero = jnp.float32(0.0)
            return train, {name: zero for name in ("critic_loss", "q_mean", "critic_grad_norm",
                                                   "actor_loss", "actor_grad_norm", "entropy",
                                                   "actor_steps")}

        train, stats = jax.lax.cond(learning, train_steps, skip, train)
        if soft:
            stats["alpha"] = jnp.exp(train.params["log_alpha"])
        else:
            del stats["entropy"]
        if crossq:
            stats["renorm"] = renorm.astype(jnp.float32)
        metrics = {**sums, **stats, "learning": learning.astype(jnp.float32),
                   "replay_transitions": transitions.astype(jnp.float32)}
        return train._replace(update=train.update + 1), data, metrics

    def gradient_step(hp, opts, data, shard_ids, renorm, drops, train, key):
        k = StepKeys(*jax.random.split(key, 3))
        batch = replay_lib.sample(data, k.sample, shard_ids, shards.per_shard_batch, c.n_step,
                                  hp["gamma"], drops)
        if c.reward_scale != 1.0:   # (1.0 leaves the program as it was: no multiply)
            batch = batch._replace(reward=batch.reward * c.reward_scale)
        x = normalize_obs(c, train.obs_moments, batch.obs)
        x_next = normalize_obs(c, train.obs_moments, batch.next_obs)

        def normal(key):
            return shard_normal(key, shard_ids, shards.per_shard_batch, A)

        # CRITICS: one step towards r + discount x (the target's value of s')
        params = train.params
        if crossq:   # no target: the critics' own value of (s', a'), in the same pass
            a_next, log_prob = nets.actor(actor_variables(train), x_next).sample_and_log_prob(
                normal(k.target))
            penalty = jax.lax.stop_gradient(jnp.exp(params["log_alpha"]) * log_prob)
            stats = train.batch_stats
            grads, (critic_stats, critic_running), critic_norm = global_mean_grad(
                lambda p, *args: crossq_critic_loss(nets, p, stats["critic"], *args, renorm),
                params["critic"], axis, x, batch.action, batch.reward, batch.discount, x_next,
                a_next, penalty, batch.weight)
            train = train._replace(batch_stats={**stats, "critic": critic_running})
        else:
            if sac:
                next_value = sac_next_value(nets, params, train.target, x_next,
                                            normal(k.target))
            else:
                next_value = td3_next_value(nets, train.target, x_next, normal(k.target),
                                            hp["policy_noise"], hp["noise_clip"])
            y = jax.lax.stop_gradient(batch.reward + batch.discount * next_value)
            grads, critic_stats, critic_norm = global_mean_grad(
                lambda p, *args: critic_loss(nets, p, *args), params["critic"], axis, x,
                batch.action, y, batch.weight)
        updates, opt_critic = opts["critic"].update(grads, train.opt_state["critic"],
                                                    params["critic"])
        params = {**params, "critic": optax.apply_updates(params["critic"], updates)}
        train = train._replace(params=params,
                               opt_state={**train.opt_state, "critic": opt_critic})
        if sac:   # the critics' targets follow every step
            train = train._replace(target={"critic": polyak(hp["tau"], params["critic"],
                                                            train.target["critic"])})

        # ACTOR: every policy_delay-th step (TD3: with the targets)
        def actor_step(train):
            params = train.params
            trainable = {"actor": params["actor"]}
            if autotune:
                trainable["log_alpha"] = params["log_alpha"]
            if crossq:
                stats = train.batch_stats

                def loss_fn(t, critic, x, eps):
                    return crossq_actor_loss(nets, t, stats["actor"], critic,
                                             params["log_alpha"], x, eps, target_entropy,
                                             renorm)
                critic = {"params": params["critic"], "batch_stats": stats["critic"]}
                grads, (actor_stats, actor_running), _ = global_mean_grad(
                    loss_fn, trainable, axis, critic, x, normal(k.actor))
                train = train._replace(batch_stats={**stats, "actor": actor_running})
            else:
                if sac:
                    def loss_fn(t, critic, x, eps):
                        return sac_actor_loss(nets, t, critic, params["log_alpha"], x, eps,
                                              target_entropy)
                    args = (params["critic"], x, normal(k.actor))
                else:
                    def loss_fn(t, critic, x):
                        return td3_actor_loss(nets, t, critic, x)
                    args = (params["critic"], x)
                grads, actor_stats, _ = global_mean_grad(loss_fn, trainable, axis, *args)
            opt_state, new = dict(train.opt_state), dict(params)
            for name, leaf in (("actor", "actor"), ("alpha", "log_alpha")):
                if leaf in grads:
                    updates, opt_state[name] = opts[name].update(grads[leaf], opt_state[name],
                                                                 params[leaf])
                    new[leaf] = optax.apply_updates(params[leaf], updates)
            if "log_alpha" in grads:   # an identity inside the range: the same bits there
                new["log_alpha"] = jnp.clip(new["log_alpha"], *LOG_ALPHA_RANGE)
            train = train._replace(params=new, opt_state=opt_state)
            if algo == "td3":
                train = train._replace(target=polyak(
                    hp["tau"], {"critic": new["critic"], "actor": new["actor"]}, train.target))
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

    return Agent(
        **deployment._asdict(), init_params=init_params, init=init, acting=acting, noise=noise,
        act=act, env_action=networks_lib.to_bounds(low, high), learn=learn,
        policy_params=policy_params, metrics=METRICS[algo], steps_per_env=c.num_steps,
        keep_final_obs=store_final, checkpointed=RunState(True, True, c.checkpoint_buffer),
        new_actors=lambda data: replay_lib.cut(data, c.n_step),
        # unrolled, their update compiles ~30 % slower (SAC on Pendulum 8.4 -> 11.7 s, CrossQ
        # 11.8 -> 18.6 s; DQN the other way, 7.5 -> 6.6 s: 2026-11-27, AMD EPYC), and jaxlib
        # 0.11.2 did not finish compiling SAC's tiny test config in 4 minutes (31 s looped)
        unroll_threefry=False)
