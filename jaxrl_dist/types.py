"""The state pytree and the transitions every algorithm learns from.

A run is ONE pytree, :class:`RunState`, so jit, donation, checkpoints and fingerprints treat it
as a whole. Its three slots differ in where they live and how they are checkpointed:

* ``train``: the learner's own state (parameters, optimizer, counters, statistics); replicated
  over the data axis, one copy per population member. It is a NamedTuple with at least the
  fields ``params``, ``key`` (uint32[2], split once per update) and ``update`` (int32[]).
* ``actors``: one :class:`ActorState` per environment (its state, last observation, episode
  statistics and the policy's recurrent carry), sharded along the data axis: leading dimension
  = global environment index.
* ``data``: learner-owned data sharded along the data axis (a replay buffer, with a shard
  count from the config), or ``()`` for an on-policy learner.
* ``pbt``: a population's PBT state (:class:`jaxrl_dist.pbt.PbtState`: round, fitness window,
  lineage), laid out like ``train`` and always checkpointed; ``()`` without PBT.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from jaxrl_dist.envs import EnvSlot


class ActorState(NamedTuple):
    env: EnvSlot   # [E]: environment state, last observation, episode statistics, mask
    carry: Any     # [E, ...] the policy's recurrent state; () for a feed-forward policy


class RunState(NamedTuple):
    train: Any
    actors: ActorState
    data: Any = ()
    pbt: Any = ()


class Transition(NamedTuple):
    """One step of every local environment; a rollout stacks these to ``[T, E, ...]``.

    Nothing here is algorithm-specific: a truncation (time limit) is reported as such, with
    the observation the episode really ended at, and each algorithm bootstraps it in its own
    targets."""

    obs: jax.Array             # observation acted on (raw, unnormalised)
    action: jax.Array          # what the learner stores (e.g. the pre-squash Gaussian draw)
    reward: jax.Array
    terminated: jax.Array      # natural end: no bootstrap
    truncated: jax.Array       # time limit: bootstrap from final_obs
    finished_return: jax.Array  # return of the episode that ended at this step, else 0
    finished_length: jax.Array
    extras: dict               # the algorithm's per-step values from ``act`` (PPO: log_prob)
    final_obs: jax.Array | None = None   # the observation the step reached, before an auto-
                                         # reset (only if the learner asks: keep_final_obs)
    mask: jax.Array | None = None        # legal actions when acting (masked environments)
    valid: jax.Array | None = None       # False: not experience, a pool's reset step (see
                                         # envs.pool); learners drop it. None: all valid
    finished_won: jax.Array | None = None   # 1: the episode that ended here was won (an
                                            # environment with an outcome, SMAX); None: none


class Trajectory(NamedTuple):
    """What ``learn`` gets from the on-device rollout or from host actors."""

    steps: Transition          # [T, E, ...]
    last_obs: jax.Array        # [E, *obs] the observation after the last step (bootstrap)
    carry: Any = ()            # [E, ...] the policy's carry before the first step (what a
                               #   recurrent learner replays from); () feed-forward


def dropped(terminated: Any, truncated: Any) -> Any:
    """Which steps ``env_nonfinite: reset`` dropped: the mark ``envs.base._drop_nonfinite``
    gives them (terminated AND truncated, a pair no environment reports: every kind keeps
    ``truncated`` apart from ``terminated``), as rollouts and replays hold it."""
    return terminated & truncated
