"""PPO's ``learn`` for ONE member, written for the body of a ``shard_map`` over the data axis:
the only place with the update's collectives (:mod:`.learner` declares the agent around it).

Each device runs the body of :func:`jax.shard_map` on its shard of the environments; parameters
and optimizer state are replicated. Collectives over the layout's data axis make every
statistic global:

* the gradient is the mean over the global minibatch, by the rule every learner follows
  (:func:`~jaxrl_dist.gradients.global_mean_grad`; docs/architecture.md, tests/test_update.py).
* advantage normalisation, observation moments, explained variance and episode statistics use
  ONE ``psum`` of sums and counts per update.

Minibatches are stratified by environment: every epoch, each environment's time steps are
permuted with a key derived from its global index, and minibatch ``m`` takes slice ``m`` of every
environment. The set of samples in a global minibatch therefore does not depend on how the
environments are spread over devices, which is what makes results topology-invariant.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from jaxrl_dist import rollout, running_stats
from jaxrl_dist.agents import minibatch
from jaxrl_dist.agents.algorithm import hyperparameters
from jaxrl_dist.agents.ppo import losses
from jaxrl_dist.agents.ppo.config import HPARAMS, PPOConfig
from jaxrl_dist.agents.ppo.networks import Networks
from jaxrl_dist.agents.ppo.optimizer import make_optimizer
from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.gradients import global_mean_grad
from jaxrl_dist.running_stats import Moments
from jaxrl_dist.sizes import Sizes
from jaxrl_dist.types import Trajectory


class TrainState(NamedTuple):
    """PPO's learner state (replicated over the data axis)."""

    params: Any            # {"actor": ..., "critic": ...}
    opt_state: Any         # optax state
    obs_moments: Moments   # running observation statistics (global)
    value_moments: Moments  # running statistics of value targets (global; scalar)
    key: jax.Array         # uint32[2]; split once per update
    update: jax.Array      # int32[]; completed updates
    hparams: Any = {}      # swept hyperparameters {name: f32[]} (empty without a sweep)


def advantage_sums(advantage: jax.Array) -> jax.Array:
    """[..., n_local] -> [3, ...]: local sums, sums of squares and counts of each minibatch."""
    return jnp.stack([jnp.sum(advantage, -1), jnp.sum(jnp.square(advantage), -1),
                      jnp.full(advantage.shape[:-1], advantage.shape[-1], advantage.dtype)])


def normalize_advantages(advantage: jax.Array, global_sums: jax.Array) -> jax.Array:
    """Normalise each minibatch by its GLOBAL mean and std (``global_sums``: psum of
    :func:`advantage_sums` over the data axis)."""
    mean, var = running_stats.moments_from_sums(*global_sums)
    return (advantage - mean[..., None]) / (jnp.sqrt(var)[..., None] + 1e-8)


def make_sgd_step(p: PPOConfig, nets: Networks, optimizer: optax.GradientTransformation,
                  axis_name: str, hp: dict[str, Any] | None = None) -> Callable:
    """One gradient step on a global minibatch; call inside shard_map over ``axis_name``.

    (params, opt_state, local minibatch with advantages already normalised if configured,
    clip_eps) -> (params, opt_state, LossInfo, grad_norm). Every output is replicated
    (identical on all devices).

    The gradient (and the loss statistics, in the same ``pmean``) is the mean over the global
    minibatch: :func:`~jaxrl_dist.gradients.global_mean_grad`.
    """
    hp = hyperparameters(p, HPARAMS, hp)

    def local_loss(params, batch, clip_eps):
        return losses.ppo_loss(params, batch, nets.policy, nets.value, clip_eps,
                               p.vf_clip_eps, hp["ent_coef"], hp["vf_coef"])

    def sgd_step(params: Any, opt_state: Any, batch: losses.LossInputs, clip_eps: jax.Array):
        grads, info, grad_norm = global_mean_grad(local_loss, params, axis_name, batch,
                                                  clip_eps)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, info, grad_norm

    return sgd_step


def normalize_obs(p: PPOConfig, moments: Moments, obs: jax.Array) -> jax.Array:
    """What the networks see: raw observations, or standardised by the running moments (the
    one rule for acting, learning, evaluating and the exported policy)."""
    return running_stats.normalize(moments, obs) if p.normalize_observations else obs


def make_init_fn(p: PPOConfig, sizes: Sizes, spec: EnvSpec) -> Callable:
    """(key, params, swept hparams) -> (TrainState, data) of one member; PPO keeps no data
    between updates."""
    optimizer, _ = make_optimizer(p, sizes)   # its state's structure

    def init(key: jax.Array, params: Any, swept: dict[str, jax.Array]):
        train = TrainState(params, optimizer.init(params),
                           running_stats.init_moments(spec.obs_shape),
                           running_stats.init_moments(()), key, jnp.int32(0), swept)
        return train, ()

    return init


def make_learn_fn(p: PPOConfig, sizes: Sizes, spec: EnvSpec, nets: Networks, axis: str
                  ) -> Callable[..., tuple[TrainState, Any, dict[str, jax.Array]]]:
    """(TrainState, data, Trajectory [T, E], key) -> (TrainState, data, metrics): one update
    of one member on this device from the transitions it is given."""
    M = p.num_minibatches

    def learn(train: TrainState, data: Any, trajectory: Trajectory, key_shuffle: jax.Array):
        steps = trajectory.steps
        T, E = steps.reward.shape
        hp = hyperparameters(p, HPARAMS, train.hparams)
        optimizer, schedule = make_optimizer(p, sizes, train.hparams)
        sgd_step = make_sgd_step(p, nets, optimizer, axis, hp=train.hparams)
        env_ids = rollout.local_env_ids(E, axis)

        def normalize_fn(x):
            return normalize_obs(p, train.obs_moments, x)

        def value_fn(obs):  # in return units, whatever the critic's own scale
            value = nets.value(train.params, normalize_fn(obs))
            if p.normalize_values:
                return running_stats.denormalize(train.value_moments, value)
            return value

        def values(obs: jax.Array) -> jax.Array:           # [T, E, *obs] -> [T, E], one pass
            return value_fn(obs.reshape(-1, *spec.obs_shape)).reshape(obs.shape[:2])

        # ADVANTAGES. A time limit is not a terminal state: credit the value of where it
        # stopped (the real final observation, before the auto-reset).
        value = values(steps.obs)
        last_value = value_fn(trajectory.last_obs)
        reward = steps.reward
        if p.bootstrap_truncation:
            if steps.final_obs is None:   # a pool's: where a step ended is the next obs
                final_value = jnp.concatenate([value[1:], last_value[None]])
            else:
                final_value = values(steps.final_obs)
            reward = losses.bootstrap_truncation(reward, steps.truncated, final_value,
                                                 hp["gamma"])
        done = jnp.logical_or(steps.terminated, steps.truncated)
        advantages, targets = losses.compute_gae(reward, value, done, last_value, hp["gamma"],
                                                 hp["gae_lambda"])
        weight = None
        if steps.valid is not None:   # a pool's reset steps: no advantage, no loss
            weight = steps.valid.astype(jnp.float32)
            advantages = advantages * weight

        # MINIBATCHES: stratified by environment; every epoch's permutations drawn up front
        def to_minibatches(x, perm):                              # [T, E, ...] -> [M, n, ...]
            return minibatch.to_minibatches(x, perm, M)

        perms = minibatch.epoch_permutations(key_shuffle, p.update_epochs, env_ids, T)
        epoch_advantages = jax.vmap(to_minibatches, (None, 0))(advantages, perms)  # [U, M, n]

        # ONE all-reduce for every global statistic of this rollout: advantage moments of all
        # epochs' minibatches, observation moments, episode and value metrics. Small
        # collectives cost latency, not bandwidth (gloo between processes), so fusing them
        # matters as much as their count.
        residual = targets - value
        # Sums of targets are taken around the running mean: E[x^2] - E[x]^2 of raw targets
        # (~100 on CartPole) loses the variance to float32 cancellation once returns are stable.
        shift = train.value_moments.mean
        obs = steps.obs.reshape(-1, *spec.obs_shape)
        parts = {
            "advantage": advantage_sums(epoch_advantages) if p.normalize_advantages else None,
            "obs": (jnp.stack([jnp.sum(obs, 0), jnp.sum(jnp.square(obs), 0)])
                    if p.normalize_observations else None),
            "episodes": rollout.episode_sums(steps),
            "target": jnp.stack([jnp.sum(targets - shift), jnp.sum(jnp.square(targets - shift))]),
            "residual": jnp.stack([jnp.sum(residual), jnp.sum(jnp.square(residual))]),
            "count": jnp.float32(targets.size),
        }
        flat, unravel = ravel_pytree(parts)
        sums = unravel(jax.lax.psum(flat, axis))
        if p.normalize_advantages:
            epoch_advantages = normalize_advantages(epoch_advantages, sums["advantage"])
        n = sums["count"]

        # VALUE TARGETS in the critic's scale: moments updated with this rollout's targets
        # (always tracked; used by the critic only with normalize_values)
        target_mean, target_var = running_stats.moments_from_sums(*sums["target"], n)
        value_moments = running_stats.merge_moments(train.value_moments, target_mean + shift,
                                                    target_var, n)
        if p.normalize_values:
            scale = functools.partial(running_stats.standardize, value_moments)
        else:
            scale = lambda x: x  # noqa: E731
        batch = losses.LossInputs(normalize_fn(steps.obs), steps.action, steps.extras["log_prob"],
                                  scale(value), advantages, scale(targets), steps.mask, weight)
        progress = train.update.astype(jnp.float32) / sizes.num_updates
        clip_eps = (hp["clip_eps"] * (1.0 - progress) if p.anneal_clip_eps
                    else jnp.float32(hp["clip_eps"]))

        # UPDATE NETWORK: epochs x minibatches. KL early stop: once a minibatch's GLOBAL
        # approx KL (already reduced over the mesh, so every device agrees) exceeds
        # 1.5 x target_kl, that step and every later one of this update is skipped.
        unravel_stats: list = [None]   # set while tracing the step

        def epoch(carry, xs):
            perm, advantage = xs

            def sgd_minibatch(carry, batch):
                params, opt_state, stopped = carry
                new_params, new_opt_state, info, gnorm = sgd_step(params, opt_state, batch,
                                                                  clip_eps)
                if p.target_kl is not None:
                    stopped = stopped | (info.approx_kl > 1.5 * p.target_kl)
                    keep = lambda new, old: jax.tree.map(  # noqa: E731
                        lambda a, b: jnp.where(stopped, b, a), new, old)
                    new_params, new_opt_state = keep((new_params, new_opt_state),
                                                     (params, opt_state))
                # One vector per step, not one scalar per statistic: each scan output is a
                # kernel per step.
                stats, unravel_stats[0] = ravel_pytree(
                    {**info._asdict(), "grad_norm": gnorm, "skipped": stopped.astype(jnp.float32)})
                return (new_params, new_opt_state, stopped), stats

            minibatches = jax.tree.map(lambda x: to_minibatches(x, perm), batch)
            return jax.lax.scan(sgd_minibatch, carry, minibatches._replace(advantage=advantage))

        (params, opt_state, _), stats = jax.lax.scan(
            epoch, (train.params, train.opt_state, jnp.bool_(False)), (perms, epoch_advantages))
        stats = jax.vmap(jax.vmap(unravel_stats[0]))(stats)                   # each [U, M]

        # OBSERVATION STATISTICS (global moments of this rollout, used from the next one on)
        moments = train.obs_moments
        if p.normalize_observations:
            mean, var = running_stats.moments_from_sums(*sums["obs"], n)   # n: global steps
            moments = running_stats.merge_moments(moments, mean, var, n)

        # METRICS (names and aggregation declared in METRICS)
        _, residual_var = running_stats.moments_from_sums(*sums["residual"], n)
        metrics = {
            **sums["episodes"],
            "total_loss": jnp.mean(stats["total"]),
            "policy_loss": jnp.mean(stats["policy_loss"]),
            "value_loss": jnp.mean(stats["value_loss"]),
            "entropy": jnp.mean(stats["entropy"]),
            "approx_kl": jnp.mean(stats["approx_kl"]),
            "clip_fraction": jnp.mean(stats["clip_fraction"]),
            "grad_norm": jnp.mean(stats["grad_norm"]),
            "explained_variance": 1.0 - residual_var / (target_var + 1e-8),
            "advantage_std": jnp.sqrt(residual_var),   # before normalising
            "learning_rate": schedule(train.update * p.update_epochs * M),
            "value_mean": target_mean + shift,
            "sgd_steps_fraction": 1.0 - jnp.mean(stats["skipped"]),
            "clip_eps": clip_eps,
        }
        new_train = TrainState(params, opt_state, moments, value_moments, train.key,
                               train.update + 1, train.hparams)
        return new_train, data, metrics

    return learn


METRICS = {
    "episode_return_sum": "sum", "episode_length_sum": "sum", "episodes": "sum",
    **dict.fromkeys(("total_loss", "policy_loss", "value_loss", "entropy", "approx_kl",
                     "clip_fraction", "grad_norm", "explained_variance", "advantage_std",
                     "value_mean", "sgd_steps_fraction", "clip_eps"), "mean"),
    "learning_rate": "last",
}
