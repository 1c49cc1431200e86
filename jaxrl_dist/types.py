"""The state pytrees. A run is ONE pytree, :class:`RunState`, so jit, donation, checkpoints and
fingerprints treat it as a whole: ``train`` is replicated on every device, ``envs`` is sharded
along the data axis (leading dimension = global environment index)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from jaxrl_dist.envs import EnvSlot
from jaxrl_dist.losses import Moments


class TrainState(NamedTuple):
    params: Any            # {"actor": ..., "critic": ...}
    opt_state: Any         # optax state
    obs_moments: Moments   # running observation statistics (global)
    value_moments: Moments  # running statistics of value targets (global; scalar)
    key: jax.Array         # uint32[2]; split once per update
    update: jax.Array      # int32[]; completed updates
    hparams: Any = {}      # swept hyperparameters {name: f32[]} (empty without a sweep)


class RunState(NamedTuple):
    train: TrainState      # replicated
    envs: EnvSlot          # [num_envs, ...], sharded over devices


class Transition(NamedTuple):
    """One step of every local environment; a rollout stacks these to ``[T, E, ...]``."""

    obs: jax.Array            # observation acted on (raw, unnormalised)
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    reward: jax.Array         # reward, plus gamma * V(final obs) at truncations if enabled
    done: jax.Array           # episode ended at this step (terminated or truncated)
    finished_return: jax.Array
    finished_length: jax.Array
    mask: jax.Array | None = None   # legal actions when acting (masked environments only)
