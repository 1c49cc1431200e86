"""What a batch of environments carries between steps (:class:`EnvSlot`) and what one step
reports (:class:`StepOutput`): the types :mod:`.base` (every JAX suite) and :mod:`.pool`
(environments outside JAX) both produce, so both import them from here."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
from flax import struct


@struct.dataclass
class EnvSlot:
    """One environment's state plus the bookkeeping for episode statistics."""

    env_state: Any
    obs: jax.Array
    episode_return: jax.Array   # [] float32, return so far of the running episode
    episode_length: jax.Array   # [] int32
    mask: jax.Array | None = None   # [A] bool, legal actions now (masked environments only)


class StepOutput(NamedTuple):
    reward: jax.Array        # [] float32
    terminated: jax.Array    # [] bool, natural end: no bootstrap
    truncated: jax.Array     # [] bool, time limit: bootstrap from final_obs
    final_obs: jax.Array     # observation before the auto-reset
    finished_return: jax.Array   # return of the episode that ended here, else 0
    finished_length: jax.Array   # its length, else 0
    valid: jax.Array | None = None   # [] bool; False: not experience (a pool's late reset
                                     #   step, see envs.pool); None: every step is one
    finished_won: jax.Array | None = None   # [] float32, 1 if the episode that ended here was
                                            #   won (an adapter with an outcome: ``won``,
                                            #   SMAX), else 0; None: no outcome
