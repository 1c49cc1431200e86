"""PPO's ``learn`` for ONE member, written for the body of a ``shard_map`` over the data axis:
the only place with the update's collectives (:mod:`.learner` declares the agent around it).

``learn`` is four parts: the rollout's values and GAE targets (:func:`feedforward_values` or
:func:`recurrent_values`, then :func:`gae_targets`), a minibatcher (:func:`step_minibatcher` or
:func:`sequence_minibatcher`: which samples each minibatch of each epoch holds), the SGD step
(:func:`make_sgd_step`, run over epochs by :func:`sgd_epochs`) and the statistics (one
``psum``: :func:`global_sums`). A recurrent network changes the first two only: its critic is
replayed over the rollout by one scan, and its minibatches are whole sequences that the loss
replays from their first carry.

Each device runs the body of :func:`jax.shard_map` on its shard of the environments; parameters
and optimizer state are replicated. Collectives over the layout's data axis make every
statistic global:

* the gradient is the mean over the global minibatch, by the rule every learner follows
  (:func:`~jaxrl_dist.gradients.global_mean_grad`; docs/architecture.md, tests/test_update.py).
* advantage normalisation, observation moments, explained variance and episode statistics use
  ONE ``psum`` of sums and counts per update.

Minibatches are stratified by environment (:mod:`jaxrl_dist.agents.minibatch`): the set of
samples in a global minibatch does not depend on how the environments are spread over devices,
which is what makes results topology-invariant.
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
from jaxrl_dist.agents.base import EPISODE_METRICS
from jaxrl_dist.agents.algorithm import hyperparameters
from jaxrl_dist.agents.ppo import losses
from jaxrl_dist.agents.ppo.config import HPARAMS, PPOConfig
from jaxrl_dist.agents.ppo.config import recurrent as is_recurrent
from jaxrl_dist.agents.ppo.config import sequences_per_env
from jaxrl_dist.agents.ppo.networks import Networks, Sequences, reset_carry
from jaxrl_dist.agents.ppo.optimizer import make_optimizer
from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.errors import ConfigError
from jaxrl_dist.gradients import global_mean_grad
from jaxrl_dist.running_stats import Moments
from jaxrl_dist.sizes import Sizes
from jaxrl_dist.types import Trajectory, Transition


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
                               p.vf_clip_eps, hp["ent_coef"], hp["vf_coef"], nets.forward)

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


def make_init_fn(p: PPOConfig, sizes: Sizes, spec: EnvSpec, nets: Networks | None = None
                 ) -> Callable:
    """(key, params, swept hparams) -> (TrainState, data) of one member. A feed-forward PPO
    keeps no data between updates; a recurrent one keeps its critic's carry for each local
    environment (where the next rollout's values start from), unless the critic shares the
    actor's cell (``network.shared``: the rollout's carries are the critic's)."""
    optimizer, _ = make_optimizer(p, sizes)   # its state's structure

    def init(key: jax.Array, params: Any, swept: dict[str, jax.Array]):
        train = TrainState(params, optimizer.init(params),
                           running_stats.init_moments(spec.obs_shape),
                           running_stats.init_moments(()), key, jnp.int32(0), swept)
        if nets is None or nets.recurrent is None or p.network.shared:
            return train, ()
        return train, jax.tree.map(lambda x: jnp.broadcast_to(x, (sizes.local_envs, *x.shape)),
                                   nets.recurrent.init_carry())

    return init


# --------------------------------------------------------------------------------------------
# Targets: the rollout's values and GAE


class Values(NamedTuple):
    """The critic's view of a rollout, in return units."""

    value: jax.Array                 # [T, E] of each observation acted on
    last_value: jax.Array            # [E] of the observation after the last step
    final_value: jax.Array | None    # [T, E] of where each step ended (truncation bootstrap)


def feedforward_values(p: PPOConfig, spec: EnvSpec, trajectory: Trajectory,
                       value_fn: Callable[[jax.Array], jax.Array]) -> Values:
    """The critic on every observation at once (``value_fn``: raw [B, *obs] -> [B])."""
    steps = trajectory.steps

    def values(obs: jax.Array) -> jax.Array:           # [T, E, *obs] -> [T, E], one pass
        return value_fn(obs.reshape(-1, *spec.obs_shape)).reshape(obs.shape[:2])

    value = values(steps.obs)
    last_value = value_fn(trajectory.last_obs)
    final_value = None
    if p.bootstrap_truncation:
        if steps.final_obs is None:   # a pool's: where a step ended is the next obs
            final_value = jnp.concatenate([value[1:], last_value[None]])
        else:
            final_value = values(steps.final_obs)
    return Values(value, last_value, final_value)


def episode_starts(steps: Transition) -> jax.Array:
    """[T, E]: the step begins an episode that began inside the rollout, i.e. the PREVIOUS
    step ended one (the rollout resets the carry after an episode's last step). Step 0 is
    never marked: the rollout's first carry is already the reset one where it had to be."""
    done = jnp.logical_or(steps.terminated, steps.truncated)
    return jnp.concatenate([jnp.zeros_like(done[:1]), done[:-1]])


def recurrent_values(p: PPOConfig, nets: Networks, params: Any, trajectory: Trajectory,
                     obs: jax.Array, start: jax.Array, critic_carry: Any,
                     normalize_fn: Callable, denormalize: Callable
                     ) -> tuple[Values, Any, Any]:
    """The critic replayed over the rollout by ONE scan from its carry before the rollout
    (``critic_carry`` [E]; ``obs`` normalised [T, E, *obs], ``start`` from
    :func:`episode_starts`).

    Returns (values, the critic's carry after each step [T, E, ...], its carry for the next
    rollout: after the last step, reset where that step ended an episode). The truncation
    bootstrap V(final obs) steps the cell from the carry BEFORE that reset; the advantages
    stop at the current step's done (:func:`gae_targets`)."""
    r, steps = nets.recurrent, trajectory.steps
    T, E = start.shape
    raw, carries = r.unroll(params, {"critic": critic_carry}, obs, start, keep_carries=True)
    raw, carries = raw["critic"], carries["critic"]
    value = denormalize(raw[..., 0])
    done = jnp.logical_or(steps.terminated, steps.truncated)
    next_carry = reset_carry(done[-1], r.init_carry(), jax.tree.map(lambda c: c[-1], carries))
    last_value = denormalize(r.value_step(params, next_carry, normalize_fn(trajectory.last_obs)))
    final_value = None
    if p.bootstrap_truncation:
        flat = jax.tree.map(lambda c: c.reshape(T * E, *c.shape[2:]), carries)
        final_obs = normalize_fn(steps.final_obs)
        final_value = denormalize(r.value_step(
            params, flat, final_obs.reshape(T * E, *final_obs.shape[2:]))).reshape(T, E)
    return Values(value, last_value, final_value), carries, next_carry


def sequence_carries(first: Any, carries: Any, start: jax.Array, C: int, initial: Any) -> Any:
    """[C, E, ...]: the carry each of an environment's ``C`` sequences starts from: ``first``
    for the first, else the carry after the step before it (``carries`` [T, E, ...]), reset
    if that step ended an episode."""
    if C == 1:
        return jax.tree.map(lambda c: c[None], first)
    L = start.shape[0] // C
    before = reset_carry(start[L::L], initial, jax.tree.map(lambda c: c[L - 1:-1:L], carries))
    return jax.tree.map(lambda c0, c: jnp.concatenate([c0[None], c]), first, before)


def gae_targets(p: PPOConfig, hp: dict[str, Any], steps: Transition, values: Values
                ) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    """(advantages, value targets, weight) [T, E]. A time limit is not a terminal state:
    credit the value of where it stopped (the real final observation, before the auto-reset).
    Steps that are not experience (``valid`` False: a pool's reset steps, the steps
    ``env_nonfinite: reset`` dropped) get no advantage and weigh nothing, and the step before
    one ends there by a time limit (bootstrapped from where it arrived; a pool's already
    ended)."""
    reward, truncated = steps.reward, steps.truncated
    if steps.valid is not None:
        truncated = truncated | rollout.stops_before_invalid(steps)
    if p.bootstrap_truncation:
        reward = losses.bootstrap_truncation(reward, truncated, values.final_value,
                                             hp["gamma"])
    done = jnp.logical_or(steps.terminated, truncated)
    advantages, targets = losses.compute_gae(reward, values.value, done, values.last_value,
                                             hp["gamma"], hp["gae_lambda"])
    weight = None
    if steps.valid is not None:   # a pool's reset steps: no advantage, no loss
        weight = steps.valid.astype(jnp.float32)
        advantages = advantages * weight
    return advantages, targets, weight


# --------------------------------------------------------------------------------------------
# Minibatchers: which samples each minibatch of each epoch holds


class Minibatcher(NamedTuple):
    """One way to cut a rollout into every epoch's minibatches."""

    plan: Callable[[jax.Array], Any]
    #   key -> every epoch's order [U, ...], drawn up front
    steps: Callable[[jax.Array, Any], jax.Array]
    #   (x [T, E, ...], one epoch's order) -> [M, ...]: per-step values (advantages)
    split: Callable[[losses.LossInputs, Any], losses.LossInputs]
    #   (the batch [T, E, ...], one epoch's order) -> its minibatches [M, ...]


def step_minibatcher(p: PPOConfig, env_ids: jax.Array, T: int) -> Minibatcher:
    """Feed-forward: each environment's steps permuted, minibatch m takes slice m of every
    environment ([M, E T / M, ...])."""
    M = p.num_minibatches

    def to_minibatches(x, perm):                              # [T, E, ...] -> [M, n, ...]
        return minibatch.to_minibatches(x, perm, M)

    return Minibatcher(
        plan=lambda key: minibatch.epoch_permutations(key, p.update_epochs, env_ids, T),
        steps=to_minibatches,
        split=lambda batch, perm: jax.tree.map(lambda x: to_minibatches(x, perm), batch))


def check_sequences(p: PPOConfig, local_envs: int) -> None:
    """A recurrent minibatch takes the same number of whole sequences from every device."""
    M, C = p.num_minibatches, sequences_per_env(p)
    if (local_envs * C) % M:
        raise ConfigError(
            f"ppo.num_minibatches ({M}) must divide each device's sequences (num_envs per "
            f"device {local_envs} x num_steps / sequence_length {C} = {local_envs * C}): a "
            f"recurrent minibatch takes the same number of whole sequences from every device")


def sequence_minibatcher(p: PPOConfig, env_ids: jax.Array) -> Minibatcher:
    """Recurrent: whole sequences (``ppo.sequence_length`` steps in time order, or the whole
    rollout), shuffled over environments in topology-invariant groups
    (:mod:`jaxrl_dist.agents.minibatch`): steps [M, L, G, ...], each sequence's first carry
    [M, G, ...]."""
    M, C, E = p.num_minibatches, sequences_per_env(p), env_ids.shape[0]
    check_sequences(p, E)
    group_ids = env_ids[0] * C // M + jnp.arange(E * C // M)

    def steps(x, perm):
        return minibatch.to_sequence_minibatches(x, perm, C)

    def split(batch: losses.LossInputs, perm) -> losses.LossInputs:
        seq = batch.obs
        out = jax.tree.map(lambda x: steps(x, perm), batch._replace(obs=seq._replace(carry=())))
        first = jax.tree.map(lambda c: steps(c, perm)[:, 0], seq.carry)
        return out._replace(obs=out.obs._replace(carry=first))

    return Minibatcher(
        plan=lambda key: minibatch.sequence_permutations(key, p.update_epochs, group_ids, M),
        steps=steps, split=split)


# --------------------------------------------------------------------------------------------
# SGD and statistics


def sgd_epochs(p: PPOConfig, sgd_step: Callable, mb: Minibatcher, params: Any, opt_state: Any,
               batch: losses.LossInputs, plans: Any, epoch_advantages: jax.Array,
               clip_eps: jax.Array) -> tuple[Any, Any, dict[str, jax.Array]]:
    """Epochs x minibatches of ``sgd_step`` -> (params, opt_state, each step's statistics
    {name: [U, M]}). KL early stop: once a minibatch's GLOBAL approx KL (already reduced over
    the mesh, so every device agrees) exceeds 1.5 x target_kl, that step and every later one
    of this update is skipped."""
    unravel_stats: list = [None]   # set while tracing the step

    def epoch(carry, xs):
        plan, advantage = xs

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

        minibatches = mb.split(batch, plan)
        return jax.lax.scan(sgd_minibatch, carry, minibatches._replace(advantage=advantage))

    (params, opt_state, _), stats = jax.lax.scan(
        epoch, (params, opt_state, jnp.bool_(False)), (plans, epoch_advantages))
    return params, opt_state, jax.vmap(jax.vmap(unravel_stats[0]))(stats)


def global_sums(p: PPOConfig, spec: EnvSpec, train: TrainState, steps: Transition,
                epoch_advantages: jax.Array, value: jax.Array, targets: jax.Array,
                axis: str) -> dict[str, Any]:
    """ONE all-reduce for every global statistic of this rollout: advantage moments of all
    epochs' minibatches ([U, M, ...]), observation moments, episode and value metrics. Small
    collectives cost latency, not bandwidth (gloo between processes), so fusing them matters
    as much as their count."""
    residual = targets - value
    # Sums of targets are taken around the running mean: E[x^2] - E[x]^2 of raw targets
    # (~100 on CartPole) loses the variance to float32 cancellation once returns are stable.
    shift = train.value_moments.mean
    obs = steps.obs.reshape(-1, *spec.obs_shape)
    per_minibatch = epoch_advantages.reshape(*epoch_advantages.shape[:2], -1)   # [U, M, n]
    parts = {
        "advantage": advantage_sums(per_minibatch) if p.normalize_advantages else None,
        "obs": (jnp.stack([jnp.sum(obs, 0), jnp.sum(jnp.square(obs), 0)])
                if p.normalize_observations else None),
        "episodes": rollout.episode_sums(steps),
        "target": jnp.stack([jnp.sum(targets - shift), jnp.sum(jnp.square(targets - shift))]),
        "residual": jnp.stack([jnp.sum(residual), jnp.sum(jnp.square(residual))]),
        "count": jnp.float32(targets.size),
    }
    flat, unravel = ravel_pytree(parts)
    return unravel(jax.lax.psum(flat, axis))


def first_ratio_deviation(nets: Networks, params: Any, batch: losses.LossInputs, axis: str
                          ) -> jax.Array:
    """max |ratio - 1| over one minibatch of every device, with the parameters that acted: 0
    up to rounding when replaying it reproduces the rollout's log-probs (a carry reset one
    step off shows here first)."""
    log_prob = nets.policy(params, batch.obs, batch.mask).log_prob(batch.action)
    deviation = jnp.abs(jnp.exp(log_prob - batch.old_log_prob) - 1.0)
    if batch.weight is not None:
        deviation = deviation * batch.weight
    return jax.lax.pmax(jnp.max(deviation), axis)


def _sequence_inputs(p: PPOConfig, nets: Networks, params: Any, first: Any,
                     obs_seen: jax.Array, start: jax.Array, critic_first: Any,
                     critic_carries: Any) -> Sequences:
    """A recurrent learner's inputs: its sequences, each from the carries the rollout had at
    its first step (``first``: the actor's before the rollout; the critic's replayed ones)."""
    r, C = nets.recurrent, sequences_per_env(p)
    actor_carries = None
    if p.network.shared:   # the critic's replay was the actor's cell
        actor_carries = critic_carries
    elif C > 1:   # the actor's carries inside the rollout, replayed as it acted
        actor_carries = r.unroll(params, {"actor": first}, obs_seen, start,
                                 keep_carries=True)[1]["actor"]
    carries = {"actor": sequence_carries(first, actor_carries, start, C, r.init_carry())}
    if not p.network.shared:
        carries["critic"] = sequence_carries(critic_first, critic_carries, start, C,
                                             r.init_carry())
    return Sequences(obs_seen, start, carries)


def make_learn_fn(p: PPOConfig, sizes: Sizes, spec: EnvSpec, nets: Networks, axis: str
                  ) -> Callable[..., tuple[TrainState, Any, dict[str, jax.Array]]]:
    """(TrainState, data, Trajectory [T, E], key) -> (TrainState, data, metrics): one update
    of one member on this device from the transitions it is given."""
    M = p.num_minibatches
    recurrent = is_recurrent(p)

    def learn(train: TrainState, data: Any, trajectory: Trajectory, key_shuffle: jax.Array):
        steps = trajectory.steps
        T, E = steps.reward.shape
        hp = hyperparameters(p, HPARAMS, train.hparams)
        optimizer, schedule = make_optimizer(p, sizes, train.hparams)
        sgd_step = make_sgd_step(p, nets, optimizer, axis, hp=train.hparams)
        env_ids = rollout.local_env_ids(E, axis)

        def normalize_fn(x):
            return normalize_obs(p, train.obs_moments, x)

        def denormalize(value):  # in return units, whatever the critic's own scale
            if p.normalize_values:
                return running_stats.denormalize(train.value_moments, value)
            return value

        # TARGETS
        if not recurrent:
            values = feedforward_values(
                p, spec, trajectory, lambda obs: denormalize(nets.value(train.params,
                                                                        normalize_fn(obs))))
            mb = step_minibatcher(p, env_ids, T)
        else:
            obs_seen, start = normalize_fn(steps.obs), episode_starts(steps)
            # shared: the critic reads the actor's cell, whose carries the rollout kept
            critic_first = trajectory.carry if p.network.shared else data
            values, critic_carries, critic_next = recurrent_values(
                p, nets, train.params, trajectory, obs_seen, start, critic_first, normalize_fn,
                denormalize)
            data = () if p.network.shared else critic_next
            mb = sequence_minibatcher(p, env_ids)
        advantages, targets, weight = gae_targets(p, hp, steps, values)
        value = values.value

        # MINIBATCHES: every epoch's order drawn up front, advantages normalised per global
        # minibatch from the one all-reduce
        plans = mb.plan(key_shuffle)
        epoch_advantages = jax.vmap(mb.steps, (None, 0))(advantages, plans)   # [U, M, ...]
        sums = global_sums(p, spec, train, steps, epoch_advantages, value, targets, axis)
        if p.normalize_advantages:
            shape = epoch_advantages.shape
            epoch_advantages = normalize_advantages(
                epoch_advantages.reshape(*shape[:2], -1), sums["advantage"]).reshape(shape)
        n = sums["count"]

        # VALUE TARGETS in the critic's scale: moments updated with this rollout's targets
        # (always tracked; used by the critic only with normalize_values)
        shift = train.value_moments.mean
        target_mean, target_var = running_stats.moments_from_sums(*sums["target"], n)
        value_moments = running_stats.merge_moments(train.value_moments, target_mean + shift,
                                                    target_var, n)
        if p.normalize_values:
            scale = functools.partial(running_stats.standardize, value_moments)
        else:
            scale = lambda x: x  # noqa: E731
        if not recurrent:
            inputs = normalize_fn(steps.obs)
        else:   # sequences, each from the carries the rollout had at its first step
            inputs = _sequence_inputs(p, nets, train.params, trajectory.carry, obs_seen, start,
                                      critic_first, critic_carries)
        batch = losses.LossInputs(inputs, steps.action, steps.extras["log_prob"], scale(value),
                                  advantages, scale(targets), steps.mask, weight)
        progress = train.update.astype(jnp.float32) / sizes.num_updates
        clip_eps = (hp["clip_eps"] * (1.0 - progress) if p.anneal_clip_eps
                    else jnp.float32(hp["clip_eps"]))

        # UPDATE NETWORK: epochs x minibatches
        params, opt_state, stats = sgd_epochs(p, sgd_step, mb, train.params, train.opt_state,
                                              batch, plans, epoch_advantages, clip_eps)

        # OBSERVATION STATISTICS (global moments of this rollout, used from the next one on)
        moments = train.obs_moments
        if p.normalize_observations:
            mean, var = running_stats.moments_from_sums(*sums["obs"], n)   # n: global steps
            moments = running_stats.merge_moments(moments, mean, var, n)

        # METRICS (names and aggregation declared in metrics_of)
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
        if recurrent:
            first = jax.tree.map(lambda x: x[0], mb.split(batch, jax.tree.map(
                lambda x: x[0], plans)))
            metrics["first_ratio_deviation"] = first_ratio_deviation(
                nets, train.params, first._replace(advantage=epoch_advantages[0, 0]), axis)
        new_train = TrainState(params, opt_state, moments, value_moments, train.key,
                               train.update + 1, train.hparams)
        return new_train, data, metrics

    return learn


METRICS = {
    **EPISODE_METRICS,
    **dict.fromkeys(("total_loss", "policy_loss", "value_loss", "entropy", "approx_kl",
                     "clip_fraction", "grad_norm", "explained_variance", "advantage_std",
                     "value_mean", "sgd_steps_fraction", "clip_eps"), "mean"),
    "learning_rate": "last",
}


def metrics_of(p: PPOConfig) -> dict[str, str]:
    """What ``learn`` reports: :data:`METRICS`, and for a recurrent network the largest
    |ratio - 1| of each update's first minibatch before its first step (0 up to rounding:
    the replay reproduces the rollout; a mean over a logging interval)."""
    if is_recurrent(p):
        return {**METRICS, "first_ratio_deviation": "mean"}
    return METRICS
