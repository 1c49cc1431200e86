"""Population-based training: a round copies the best members over the worst (exploit) and
mutates the copies' hyperparameters (explore), as ONE pure function of the population's train
state, its PBT state, a fitness vector and the run's seed key.

Everything here sees the whole member axis (``[M, ...]`` global arrays): the round is a program
of its own over the mesh, run between compiled calls of updates, so the update program is the
population's own. What makes a round the same on any topology:

* the fitness vector holds one value per member, each reduced over that member's devices by
  the update in one order on every topology (:func:`episode_sums`), and ranking, picking and
  copying are exact operations on it (sorting, integer draws, gathers);
* ties are broken by member index, and keys come from (seed, round, member), never from a
  device or process.

What a round copies is the train state minus its ``key`` and ``update`` (parameters, optimizer
state, normaliser statistics, and the hyperparameters, which are then mutated); environments,
replay and keys stay. A learning rate lives only in ``train.hparams`` (the optimizer's
schedule is rebuilt from it at every update; optax's Adam state holds moments and a count, no
rate), so the mutated value is the one the next update uses.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_dist.config import Config

# Folded into the seed key so PBT's draws never collide with training or evaluation keys.
PBT_STREAM = 0x9B7
NOT_COPIED = ("key", "update")   # train fields a round never copies


class Mutation(NamedTuple):
    name: str                      # the hyperparameter's name in ``train.hparams``
    low: float
    high: float
    factors: tuple[float, ...]     # perturbation factors; () = always resample
    log: bool                      # resample log-uniformly (else uniformly)


class Settings(NamedTuple):
    """A run's PBT, from its config (static in the programs)."""

    interval: int
    warmup: int
    quantile: float
    resample_prob: float
    min_episodes: int
    fitness: str                   # "episode_return" | "eval"
    mutations: tuple[Mutation, ...]
    rounds: tuple[int, ...]        # the updates after which a round runs

    @property
    def num_rounds(self) -> int:
        return len(self.rounds)


def settings(config: Config) -> Settings:
    """``config.pbt`` with the run's rounds: every multiple of ``interval_updates`` from
    ``warmup_updates`` on, before the last update (a round after it would change nothing
    that trains)."""
    p = config.pbt
    num_updates = config.total_timesteps // (
        config.num_envs * config.algorithm.steps_per_env(config.agent))
    rounds = tuple(u for u in range(p.interval_updates, num_updates, p.interval_updates)
                   if u >= p.warmup_updates)
    mutations = tuple(Mutation(key.split(".", 1)[1], m.low, m.high, tuple(m.factors),
                               m.prior == "log") for key, m in p.mutations.items())
    return Settings(p.interval_updates, p.warmup_updates, p.quantile, p.resample_prob,
                    p.min_episodes or config.num_envs, p.fitness, mutations, rounds)


class PbtState(NamedTuple):
    """ONE member's PBT state (a population stacks it ``[M, ...]``), checkpointed with the run:
    a resumed run continues the same rounds with the same fitness windows."""

    round: jax.Array        # int32[] rounds done
    return_sum: jax.Array   # f32[] returns of the training episodes finished since the last round
    episodes: jax.Array     # f32[] how many
    fitness: jax.Array      # f32[] this member's fitness at the last round; NaN: not eligible
    parents: jax.Array      # int32[R] the member it took its state from at each round (itself:
                            #   kept; -1: round not run yet): the lineage
    history: dict           # {name: f32[R]} its mutated hyperparameters after each round


def init(s: Settings) -> PbtState:
    R = max(s.num_rounds, 1)   # a run too short for a round still compiles the round's program
    return PbtState(jnp.int32(0), jnp.float32(0), jnp.float32(0), jnp.float32(jnp.nan),
                    jnp.full((R,), -1, jnp.int32),
                    {m.name: jnp.full((R,), jnp.nan, jnp.float32) for m in s.mutations})


def episode_sums(finished_return: jax.Array, finished_length: jax.Array, axis: Any
                 ) -> dict[str, jax.Array]:
    """A rollout's finished episodes ``[T, E_local]`` (their returns' sum and count) summed in
    ONE order on every topology: each environment's column over its steps, then, after one
    all-gather over ``axis``, the environments in global order. A psum (the metrics' sums)
    adds per-device partial sums, an order that follows the device count, and a fitness
    rounded otherwise can rank two members otherwise."""
    columns = jnp.stack([jnp.sum(finished_return, axis=0),
                         jnp.sum(finished_length > 0, axis=0).astype(jnp.float32)])
    whole = jax.lax.all_gather(columns, axis, axis=1, tiled=True)   # [2, E]
    return {"episode_return_sum": jnp.sum(whole[0]), "episodes": jnp.sum(whole[1])}


def accumulate(pbt: PbtState, sums: dict[str, jax.Array]) -> PbtState:
    """One update's finished episodes (:func:`episode_sums`) into the window."""
    return pbt._replace(return_sum=pbt.return_sum + sums["episode_return_sum"],
                        episodes=pbt.episodes + sums["episodes"])


class Round(NamedTuple):
    """What a round did, all ``[M]``: the host's lineage rows."""

    round: jax.Array       # int32[] the round's index
    parents: jax.Array     # int32[M] each member's source (itself: kept)
    fitness: jax.Array     # f32[M]
    eligible: jax.Array    # bool[M]
    before: dict           # {name: f32[M]} hyperparameters before the round
    after: dict            # {name: f32[M]} after the copy and mutation


# ---------------------------------------------------------------------------- the math

def rank(fitness: jax.Array, eligible: jax.Array) -> jax.Array:
    """[M] member indices, best first: eligible members by fitness descending, ties by member
    index ascending; ineligible members after them (in index order)."""
    index = jnp.arange(fitness.shape[0])
    value = jnp.where(eligible, fitness, 0.0)
    return jnp.lexsort((index, -value, (~eligible).astype(jnp.int32)))


def truncation(fitness: jax.Array, eligible: jax.Array, quantile: float,
               member_keys: jax.Array) -> jax.Array:
    """Truncation selection -> parents [M]: each of the bottom ``floor(quantile x eligible)``
    eligible members takes a parent drawn uniformly (with its own key ``member_keys[m]``)
    from the top as many; every other member is its own parent."""
    M = fitness.shape[0]
    order = rank(fitness, eligible)
    position = jnp.zeros(M, jnp.int32).at[order].set(jnp.arange(M, dtype=jnp.int32))
    n = jnp.sum(eligible).astype(jnp.int32)
    k = jnp.floor(n.astype(jnp.float32) * quantile + 1e-4).astype(jnp.int32)
    bottom = eligible & (position >= n - k) & (k >= 1)
    draw = jax.vmap(lambda key: jax.random.randint(key, (), 0, jnp.maximum(k, 1)))(member_keys)
    return jnp.where(bottom, order[draw], jnp.arange(M, dtype=jnp.int32))


def keys_of_round(seed_key: jax.Array, round_index: jax.Array, num_members: int
                  ) -> tuple[jax.Array, jax.Array]:
    """Each member's (parent, mutation) keys [M, 2] of a round: from (seed, round, member)
    only."""
    key = jax.random.fold_in(jax.random.fold_in(seed_key, PBT_STREAM), round_index)
    both = jax.vmap(lambda m: jax.random.split(jax.random.fold_in(key, m)))(
        jnp.arange(num_members))
    return both[:, 0], both[:, 1]


def copy(train: Any, parents: jax.Array) -> Any:
    """Every field of the train state but its key and update counter, gathered along the
    member axis: member m gets member ``parents[m]``'s."""
    take = lambda x: jnp.take(x, parents, axis=0)  # noqa: E731
    return train._replace(**{name: jax.tree.map(take, getattr(train, name))
                             for name in train._fields if name not in NOT_COPIED})


def mutate(hparams: dict[str, jax.Array], copied: jax.Array, keys: jax.Array,
           mutations: tuple[Mutation, ...], resample_prob: float) -> dict[str, jax.Array]:
    """The copied members' hyperparameters explored: each mutated one resampled from its prior
    over [low, high] with probability ``resample_prob`` (always, without factors), else
    multiplied by one of its factors drawn uniformly, then clipped into [low, high]."""
    out = dict(hparams)
    for i, m in enumerate(mutations):
        def one(key, value, m=m, i=i):
            k_choice, k_value, k_factor = jax.random.split(jax.random.fold_in(key, i), 3)
            u = jax.random.uniform(k_value)
            if m.log:
                fresh = jnp.exp(np.log(m.low) + u * (np.log(m.high) - np.log(m.low)))
            else:
                fresh = m.low + u * (m.high - m.low)
            if not m.factors:
                return jnp.clip(fresh, m.low, m.high)
            factor = jnp.asarray(m.factors, jnp.float32)[
                jax.random.randint(k_factor, (), 0, len(m.factors))]
            resample = jax.random.uniform(k_choice) < resample_prob
            return jnp.clip(jnp.where(resample, fresh, value * factor), m.low, m.high)

        new = jax.vmap(one)(keys, hparams[m.name]).astype(hparams[m.name].dtype)
        out[m.name] = jnp.where(copied, new, hparams[m.name])
    return out


def fitness_of(pbt: PbtState, min_episodes: int) -> tuple[jax.Array, jax.Array]:
    """(mean return of the episodes finished since the last round [M], eligible [M])."""
    eligible = pbt.episodes >= min_episodes
    return pbt.return_sum / jnp.maximum(pbt.episodes, 1.0), eligible


def step(train: Any, pbt: PbtState, seed_key: jax.Array, s: Settings,
         fitness: jax.Array | None = None) -> tuple[Any, PbtState, Round]:
    """One round over the whole population: rank by ``fitness`` [M] (default: the training
    episodes' window), copy the parents' train state over the bottom members, mutate their
    hyperparameters, record the lineage and open the next window."""
    window, eligible = fitness_of(pbt, s.min_episodes)
    fitness = window if fitness is None else fitness
    M = fitness.shape[0]
    r = pbt.round[0]
    parent_keys, mutate_keys = keys_of_round(seed_key, r, M)
    parents = truncation(fitness, eligible, s.quantile, parent_keys)
    copied = parents != jnp.arange(M)
    new = copy(train, parents)
    before = {m.name: train.hparams[m.name] for m in s.mutations}
    hparams = mutate(new.hparams, copied, mutate_keys, s.mutations, s.resample_prob)
    new = new._replace(hparams=hparams)
    after = {m.name: hparams[m.name] for m in s.mutations}

    def record(log: jax.Array, values: jax.Array) -> jax.Array:   # [M, R] <- [M] at r
        return jax.lax.dynamic_update_slice_in_dim(log, values[:, None].astype(log.dtype), r, 1)

    zero = jnp.zeros_like(pbt.return_sum)
    pbt = PbtState(pbt.round + 1, zero, zero, jnp.where(eligible, fitness, jnp.nan),
                   record(pbt.parents, parents),
                   {name: record(pbt.history[name], after[name]) for name in pbt.history})
    return new, pbt, Round(r, parents, fitness, eligible, before, after)


# ---------------------------------------------------------------------------- lineage (host)

def _f32(value: Any) -> float:
    """A float32 as the shortest decimal that reads back as the same float32."""
    return float(str(np.float32(value)))


def lineage(parents: np.ndarray, history: dict[str, np.ndarray], start: dict[str, np.ndarray],
            rounds: tuple[int, ...]) -> list[dict[str, Any]]:
    """Every copy a run's PBT state records (``parents`` [M, R], ``history`` {name: [M, R]},
    ``start``: each member's values before the first round {name: [M]}): round, the update
    after which it ran, source, target, and the target's hyperparameters before and after."""
    parents = np.asarray(parents)
    M, R = parents.shape
    current = {name: np.asarray(v, np.float64).copy() for name, v in start.items()}
    out = []
    for r in range(R):
        if (parents[:, r] < 0).all():
            break
        after = {name: np.asarray(history[name], np.float64)[:, r] for name in history}
        for m in range(M):
            if parents[m, r] != m:
                out.append({"round": r, "updates": rounds[r], "source": int(parents[m, r]),
                            "target": m,
                            "old": {name: _f32(current[name][m]) for name in history},
                            "new": {name: _f32(after[name][m]) for name in history}})
        current = after   # a kept member's values are its own
    return out
