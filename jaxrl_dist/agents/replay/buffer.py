"""A uniform replay buffer in a FIXED number of shards, laid out along the data axis: the one
replay of every off-policy learner (DQN's discrete actions, SAC's and TD3's continuous ones).

Why shards from the config: peers keep one buffer per device (Stoix, Brax SAC, flashbax's
examples), so what a batch can contain changes with the device count, and so do the results.
Here the global buffer is ``buffer_shards`` shards; shard ``s`` stores the transitions of global
environments ``[s K, (s + 1) K)`` (``K = num_envs / buffer_shards``) and draws ``batch_size /
buffer_shards`` samples of every batch with a key folded from ``s``. A device holds whole shards,
so 1, 2 or 4 devices (or 2 processes x 2) hold the same shards and draw the same batch: the
parameters agree to float tolerance (the gradient's sum order is the only difference).

A pool environment (``envs.pool``) steps once more after each episode's end to reset itself;
that row is stored (its observation is where the episode ended, what a time limit bootstraps
from, so no separate final observation is needed) with ``valid`` False, and a sample drawn at
it gets weight 0: it never becomes training data.

Each shard is a ring of ``L`` rows (time) x ``K`` columns (environments): an update writes its
``T`` rows at the write position, shared by all shards, so n-step windows are contiguous rows of
one column. Every shard of a device has the same position and fill; they are stored per shard
(``[S_local]``) so a buffer left out of a checkpoint comes back empty with them.

Actions are stored as the learner gives them: int32 indices (``action_shape`` ``()``), or float
vectors ``[A]`` (``action_shape`` ``(A,)``, float32). :func:`plan` is where a config's global
sizes meet the device count (the shards each device holds, their rows and batch share).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_dist.errors import ConfigError
from jaxrl_dist.types import Transition, dropped


class Replay(NamedTuple):
    """One device's shards; every array leads with [S_local, L, K] except the counters."""

    obs: jax.Array            # the observation acted on (storage dtype)
    action: jax.Array         # int32 [...], or float32 [..., A] (continuous)
    reward: jax.Array         # float32
    terminated: jax.Array     # bool
    truncated: jax.Array      # bool
    final_obs: Any            # the observation each step reached (None: not stored)
    valid: Any                # bool, False for a pool's reset steps (None: every step is)
    position: jax.Array       # [S_local] int32, the next row to write
    rows: jax.Array           # [S_local] int32, rows filled (<= L)


class NStep(NamedTuple):
    """Sampled n-step transitions, [B_local, ...]."""

    obs: jax.Array            # float32
    action: jax.Array
    reward: jax.Array         # sum_{j<k} gamma^j r_{t+j}, k = the window up to an episode's end
    discount: jax.Array       # gamma^k if the window bootstraps, else 0
    next_obs: jax.Array       # float32, where to bootstrap from
    weight: Any = None        # [B] 0 for a sample at a pool's reset step, else 1 (None: all 1)


class Plan(NamedTuple):
    """A buffer's layout on ONE device, from the config's global sizes."""

    shards_local: int      # shards this device holds (buffer_shards / devices)
    envs_per_shard: int    # K: environments whose transitions a shard stores
    rows: int              # L: steps each environment keeps (buffer_size / num_envs)
    per_shard_batch: int   # samples each shard draws per batch (batch_size / buffer_shards)


def plan(prefix: str, buffer_shards: int, buffer_size: int, batch_size: int, local_envs: int,
         devices: int) -> Plan:
    """The layout of ``buffer_shards`` shards over ``devices`` devices of ``local_envs``
    environments each; ``prefix`` names the config section in the error a shard count that
    the devices do not divide is (the config's own checks, :mod:`.config`, ran before)."""
    if buffer_shards % devices:
        raise ConfigError(
            f"{prefix}.buffer_shards ({buffer_shards}) must be a multiple of the number of "
            f"devices each member's environments are split over ({devices}): a device holds "
            f"whole shards. Choose a shard count that every device count you use divides (e.g. "
            f"8 for 1, 2, 4 or 8 devices); the results depend on it, not on the device count")
    shards_local = buffer_shards // devices
    return Plan(shards_local, local_envs // shards_local, buffer_size // (local_envs * devices),
                batch_size // buffer_shards)


def shard_ids(p: Plan, axis: str) -> jax.Array:
    """The GLOBAL indices of this device's shards (inside a shard_map over ``axis``)."""
    return jax.lax.axis_index(axis) * p.shards_local + jnp.arange(p.shards_local)


def filled(rows_sum: jax.Array, devices: int, num_envs: int) -> tuple[jax.Array, jax.Array]:
    """(rows each environment has stored, GLOBAL transitions stored) from ``rows_sum``, the
    sum over the data axis of every device's ``replay.rows[0]`` (learners add it to the
    ``psum`` of their other statistics: one all-reduce, and a visibly replicated value that
    every device and process decides on alike)."""
    rows = (rows_sum / devices).astype(jnp.int32)
    return rows, rows * num_envs


def init(shards: int, rows: int, envs_per_shard: int, obs_shape: tuple[int, ...],
         obs_dtype: Any, store_final_obs: bool, pool: bool = False,
         action_shape: tuple[int, ...] = (), action_dtype: Any = jnp.int32) -> Replay:
    """``pool``: the environments are a pool (``envs.pool``): store each step's validity and
    bootstrap a time limit from the next row (``store_final_obs`` must then be False).
    ``action_shape``/``action_dtype``: one action's, ``()`` int32 for discrete actions."""
    def zeros(dtype, *shape):
        return jnp.zeros((shards, rows, envs_per_shard, *shape), dtype)

    return Replay(obs=zeros(obs_dtype, *obs_shape), action=zeros(action_dtype, *action_shape),
                  reward=zeros(jnp.float32), terminated=zeros(bool), truncated=zeros(bool),
                  final_obs=zeros(obs_dtype, *obs_shape) if store_final_obs else None,
                  valid=zeros(bool) if pool else None, position=jnp.zeros(shards, jnp.int32),
                  rows=jnp.zeros(shards, jnp.int32))


def add(replay: Replay, steps: Transition) -> Replay:
    """Write a rollout ``[T, E_local]`` (local environments in global order) at the write
    position; the ring's length is a multiple of T, so a rollout never wraps."""
    shards, length, per_shard = replay.action.shape[:3]
    T = steps.reward.shape[0]

    def to_rows(x, like):                     # [T, E_local, ...] -> [S_local, T, K, ...]
        x = x.reshape(T, shards, per_shard, *x.shape[2:]).swapaxes(0, 1)
        return x.astype(like.dtype)

    position = replay.position[0]

    def write(buffer, x):
        x = to_rows(x, buffer)
        start = (0, position) + (0,) * (buffer.ndim - 2)
        return jax.lax.dynamic_update_slice(buffer, x, start)

    def obs_rows(x):   # rounded before a cast to an integer dtype (uint8 storage)
        return jnp.round(x) if jnp.issubdtype(replay.obs.dtype, jnp.integer) else x

    return Replay(
        obs=write(replay.obs, obs_rows(steps.obs)),
        action=write(replay.action, steps.action),
        reward=write(replay.reward, steps.reward),
        terminated=write(replay.terminated, steps.terminated),
        truncated=write(replay.truncated, steps.truncated),
        final_obs=(None if replay.final_obs is None
                   else write(replay.final_obs, obs_rows(steps.final_obs))),
        valid=None if replay.valid is None else write(replay.valid, steps.valid),
        position=(replay.position + T) % length,
        rows=jnp.minimum(replay.rows + T, length))


def sample(replay: Replay, key: jax.Array, shard_ids: jax.Array, per_shard: int, n: int,
           gamma: Any, drops: bool = False) -> NStep:
    """``per_shard`` n-step transitions from each local shard, uniformly over the stored steps
    whose n following steps are stored too; shard ``shard_ids[j]`` (its GLOBAL index) draws with
    ``fold_in(key, shard_ids[j])``. Returns ``[S_local * per_shard, ...]`` in shard order.

    Window of a sample at row t: rewards t..t+n-1 until the first step that ended its episode
    (k = that step + 1, else n). Bootstrap from obs[t+n] if no step ended it, from that step's
    final observation if it was a time limit and final observations are stored (a pool's: the
    next row), not at all if it terminated (or was truncated without them).

    ``drops`` (``env_nonfinite: reset``, a replay that is not a pool's): rows marked dropped
    (:func:`types.dropped`) weigh 0, and a window reaching one ends on the row before it,
    bootstrapped from the dropped row's observation (where that row's predecessor arrived)."""
    length, per_env = replay.action.shape[1:3]
    offsets = jnp.arange(n + 1)
    powers = jnp.asarray(gamma, jnp.float32) ** jnp.arange(n + 1, dtype=jnp.float32)

    def one_shard(shard, shard_id):
        key_row, key_col = jax.random.split(jax.random.fold_in(key, shard_id))
        valid = jnp.maximum(shard.rows[()] - n, 1)    # rows whose window is complete
        oldest = shard.position[()] - shard.rows[()]
        t = (oldest + jax.random.randint(key_row, (per_shard,), 0, valid)) % length
        col = jax.random.randint(key_col, (per_shard,), 0, per_env)
        window = (t[:, None] + offsets) % length                          # [B, n + 1]
        steps = lambda x: x[window[:, :n], col[:, None]]                  # noqa: E731 [B, n]
        reward, term, trunc = steps(shard.reward), steps(shard.terminated), steps(shard.truncated)
        done = term | trunc
        cut = None
        if drops:   # the row after step j was dropped: j ends the window, bootstrapped
            after = window[:, 1:], col[:, None]
            cut = dropped(shard.terminated[after], shard.truncated[after]) & ~done
            trunc, done = trunc | cut, done | cut
        # alive[j]: no step before j ended the episode
        alive = jnp.cumprod(jnp.concatenate([jnp.ones((per_shard, 1), bool), ~done[:, :-1]], 1),
                            axis=1).astype(bool)
        ret = jnp.sum(jnp.where(alive, powers[:n] * reward, 0.0), axis=1)
        ended = alive & done                                  # the step that ended it (one-hot)
        k = jnp.where(jnp.any(ended, 1), jnp.argmax(ended, 1) + 1, n)       # steps summed
        truncated = jnp.any(ended & trunc, 1)
        terminated = jnp.any(ended & term, 1)
        pool = shard.valid is not None
        # a window cut before a dropped row bootstraps from that row's observation
        cut_off = jnp.any(ended & cut, 1) if drops else False
        bootstraps = ~terminated & (~truncated | (shard.final_obs is not None) | pool | cut_off)
        discount = jnp.where(bootstraps, powers[k], 0.0)
        # a pool's row after an end holds the final observation (k = n without an end), as
        # a dropped row holds where the row before it arrived
        next_obs = shard.obs[(t + (k if pool or drops else n)) % length, col].astype(jnp.float32)
        weight = shard.valid[t, col].astype(jnp.float32) if pool else None
        if drops:
            weight = (~dropped(shard.terminated[t, col], shard.truncated[t, col])
                      ).astype(jnp.float32)
        if shard.final_obs is not None:
            final = shard.final_obs[(t + k - 1) % length, col].astype(jnp.float32)
            pick = truncated.reshape(-1, *([1] * (next_obs.ndim - 1)))
            next_obs = jnp.where(pick, final, next_obs)
        return NStep(shard.obs[t, col].astype(jnp.float32), shard.action[t, col], ret, discount,
                     next_obs, weight)

    out = jax.vmap(one_shard)(replay, shard_ids)
    return jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), out)


def cut(replay: Replay, n: int) -> Replay:
    """After a resume that started new episodes (environments whose state is not
    checkpointed): the newest rows of every column continue into a different episode with no
    end between them. In a pool (``envs.pool``) the newest ``n`` rows weigh 0 (their windows
    would sum two games' rewards; the row after an end holds its final observation). Else the
    newest row ends its episode by a time limit: no window reaches past it, and it bootstraps
    from its own final observation (the one it really reached) where those are stored."""
    length = replay.reward.shape[1]
    rows = jnp.arange(length)
    position, filled = replay.position[:, None], replay.rows[:, None]
    age = (position - 1 - rows) % length                     # 0 = the newest row
    if replay.valid is None:
        newest = ((age == 0) & (filled > 0))[:, :, None]      # [S_local, L, 1]
        return replay._replace(truncated=replay.truncated | (newest & ~replay.terminated))
    newest = (age < n) & (age < filled)                       # [S_local, L]
    return replay._replace(valid=replay.valid & ~newest[:, :, None])


def nbytes(replay: Replay) -> int:
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(replay))
