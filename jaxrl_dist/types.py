"""The state pytrees. A run is ONE pytree, :class:`RunState`, so jit, donation, checkpoints and
fingerprints treat it as a whole: ``train`` (the learner's state) is replicated on every device, ``envs`` is sharded
along the data axis (leading dimension = global environment index)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from jaxrl_dist.envs import EnvSlot


class RunState(NamedTuple):
    train: Any             # the learner's state (PPO: agents.ppo.update.TrainState); replicated
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
