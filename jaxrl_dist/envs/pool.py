"""Environments that live OUTSIDE JAX arrays but are stepped INSIDE the compiled program: a pool.

An emulator (ale-py's Atari vector environment) keeps its state in C++ and exposes a batch of
environments as XLA FFI calls on a small handle array (``uint8[8]``). The handle is an ordinary
input, so one compiled program serves every pool: each device gets the handle of its own pool
(a ``[E, 8]`` array sharded along the data axis, every environment of a device carrying its
pool's handle), and the rollout steps the whole pool in one FFI call per step, with no host
round trip.

A pool differs from an :class:`~jaxrl_dist.envs.base.Adapter` in three ways, handled here once:

* it steps the whole batch and auto-resets itself ONE STEP LATE (ale-py's NEXT_STEP mode): the
  step after an episode's end returns the reset observation, ignores the action and pays 0.
  That step is not experience: :class:`~jaxrl_dist.envs.slots.StepOutput` marks it
  ``valid=False`` and every learner drops it (PPO's and PQN's losses, DQN's replay samples).
  The observation an episode ended at is the one its last step returned, so a time limit's
  bootstrap needs no separate final observation.
* its state is not in the run state: a resumed run opens fresh pools and starts new episodes
  (the programs rebuild the actors slot instead of restoring it).
* resets take integer seeds, made from the same per-environment keys as any other suite
  (a function of the GLOBAL environment index), so results do not depend on the topology.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl_dist.envs.slots import EnvSlot, StepOutput

HANDLE_BYTES = 8


class PoolStep(NamedTuple):
    """What a pool's ``step`` returns for its batch [E] (after its own one-step-late reset)."""

    obs: jax.Array          # [E, *obs] the observation reached (the reset one after an end)
    reward: jax.Array       # [E] float32, the game's own reward (unclipped)
    terminated: jax.Array   # [E] bool, game over
    truncated: jax.Array    # [E] bool, the pool's time limit
    lives: jax.Array        # [E] int32


class Pool(Protocol):
    """A batch of environments outside JAX, stepped through XLA calls on a handle."""

    def open(self, num_envs: int) -> np.ndarray:
        """Host side: a new pool of ``num_envs`` environments kept alive by this object;
        returns its handle (uint8[8])."""

    def reset(self, handle: jax.Array, seeds: jax.Array) -> tuple[jax.Array, jax.Array,
                                                                  jax.Array]:
        """(handle [8], seeds [E] int32) -> (handle, obs [E, *obs], lives [E])."""

    def step(self, handle: jax.Array, action: jax.Array) -> tuple[jax.Array, PoolStep]:
        """(handle [8], action [E]) -> (handle, PoolStep)."""


@struct.dataclass
class PoolState:
    """One environment's view of its pool (a slot's ``env_state``)."""

    handle: jax.Array     # [8] uint8, its pool's handle (the same for a device's environments)
    lives: jax.Array      # [] int32, lives after the last step
    ended: jax.Array      # [] bool, the last step ended an episode: the next one is the
                          #   pool's reset, not experience


@struct.dataclass
class PoolOptions:
    """How a pool's raw steps become training signal (the Atari conventions)."""

    clip_rewards: bool = False   # learn from sign(reward); scores stay the game's own
    episodic_life: bool = False  # a lost life is terminal for learning (not for scores)


def _varying_like(tree: Any, like: jax.Array) -> Any:
    """An FFI call's outputs carry no shard_map axis type: give them ``like``'s (the pool is
    this device's own, so its outputs vary over the axes its inputs do)."""
    axes = tuple(jax.typeof(like).manual_axis_type.varying)
    if not axes:
        return tree

    def cast(x):
        missing = tuple(a for a in axes if a not in jax.typeof(x).manual_axis_type.varying)
        return jax.lax.pcast(x, missing, to="varying") if missing else x
    return jax.tree.map(cast, tree)


def seeds_of(keys: jax.Array) -> jax.Array:
    """One non-negative int32 seed per environment key."""
    return (jax.vmap(lambda k: jax.random.bits(k, dtype=jnp.uint32))(keys) >> 1).astype(
        jnp.int32)


def reset(spec: Any, handles: jax.Array, keys: jax.Array) -> Any:
    """This device's environments [E] freshly reset; ``handles`` [E, 8] (all the same)."""
    handle, obs, lives = _varying_like(spec.pool.reset(handles[0], seeds_of(keys)), keys)
    E = keys.shape[0]
    state = PoolState(jnp.broadcast_to(handle, (E, HANDLE_BYTES)), lives.astype(jnp.int32),
                      jnp.zeros(E, bool))
    return EnvSlot(state, obs, jnp.zeros(E, jnp.float32), jnp.zeros(E, jnp.int32), None)


def step(spec: Any, slots: Any, action: jax.Array) -> tuple[Any, Any]:
    """Step this device's pool once: (slots [E], action [E]) -> (slots, StepOutput)."""
    state: PoolState = slots.env_state
    options: PoolOptions = spec.pool.options
    handle, out = _varying_like(spec.pool.step(state.handle[0], action.astype(jnp.int32)),
                                slots.obs)
    valid = jnp.logical_not(state.ended)
    score = jnp.asarray(out.reward, jnp.float32)        # 0 on the reset step
    terminated = jnp.asarray(out.terminated, bool)
    truncated = jnp.logical_and(jnp.asarray(out.truncated, bool), jnp.logical_not(terminated))
    ended = jnp.logical_or(terminated, truncated)
    episode_return = slots.episode_return + score
    episode_length = slots.episode_length + valid.astype(jnp.int32)
    lives = out.lives.astype(jnp.int32)
    learn_terminal = terminated
    if options.episodic_life:   # a life lost is an end for the targets, not for the score
        learn_terminal = terminated | (valid & (lives < state.lives))
    reward = jnp.sign(score) if options.clip_rewards else score
    E = action.shape[0]
    new_slots = EnvSlot(
        env_state=PoolState(jnp.broadcast_to(handle, (E, HANDLE_BYTES)), lives, ended),
        obs=out.obs,
        episode_return=jnp.where(ended, 0.0, episode_return),
        episode_length=jnp.where(ended, 0, episode_length),
        mask=None)
    return new_slots, StepOutput(
        reward=reward, terminated=learn_terminal, truncated=truncated & ~learn_terminal,
        final_obs=out.obs,
        finished_return=jnp.where(ended, episode_return, 0.0),
        finished_length=jnp.where(ended, episode_length, 0),
        valid=valid)


def global_handles(spec: Any, sharding: jax.sharding.Sharding, num_envs: int) -> jax.Array:
    """Open one pool per local device for its part of ``num_envs`` global environments laid out
    by ``sharding`` (leading axis = global environment index); returns the [num_envs, 8]
    global handle array, each device's rows holding its own pool's handle."""
    shape = (num_envs, HANDLE_BYTES)
    arrays = []
    for device, index in sharding.addressable_devices_indices_map(shape).items():
        rows = len(range(*index[0].indices(num_envs)))
        handle = np.asarray(spec.pool.open(rows), np.uint8).reshape(HANDLE_BYTES)
        arrays.append(jax.device_put(np.broadcast_to(handle, (rows, HANDLE_BYTES)).copy(),
                                     device))
    return jax.make_array_from_single_device_arrays(shape, sharding, arrays)
