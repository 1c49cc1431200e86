"""Collecting a rollout: one pure function of (acting state, actors, key), for any algorithm.

Randomness is keyed by the GLOBAL environment index and the step number, never by device or
process, so a given environment sees the same action and transition noise on any topology.

Small rollouts (a few environments per device) are bound by the per-iteration cost of the
step loop, not by arithmetic, so the loop body holds only what must be sequential: the actor,
the action draw and the environment step. Action noise and keys for every step are drawn in
one batched op before the loop; anything batchable over steps (PPO's critic) runs in ``learn``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

import jax
import jax.numpy as jnp

from jaxrl_dist import envs as envs_lib
from jaxrl_dist import keys
from jaxrl_dist.envs import EnvSpec, team
from jaxrl_dist.types import ActorState, Transition

if TYPE_CHECKING:
    from jaxrl_dist.agents.base import Agent


def packing(like: Any) -> tuple[Callable[[Any], dict[str, jax.Array]], Callable[[dict], Any]]:
    """(pack, unpack) for trees shaped like ``like`` (arrays or ShapeDtypeStructs, leaves
    ``[E, ...]``): pack takes such a tree to one ``[E, K]`` array per dtype, unpack takes them
    back for any leading axes (``[..., E, K]`` -> the tree; ``unpack.leaf(arrays, i)``: the
    i-th leaf of the flattened tree alone).

    The step loop's outputs go out packed: XLA:CPU writes each scan output with its own
    dynamic-update-slice kernel every step, and in a small rollout every kernel launch counts
    (10 outputs -> 3 on CartPole: +6 % env steps/s, same bits). Grouping by dtype keeps every
    value exact. Built from shapes alone, so a caller can know how to unpack before it traces
    what it packs."""
    leaves, treedef = jax.tree.flatten(like)
    offset: dict[str, int] = {}
    slices = []   # per leaf: (dtype, start, stop, shape) in its dtype's array
    for x in leaves:
        dtype, size = jnp.dtype(x.dtype).name, math.prod(x.shape[1:])
        start = offset.get(dtype, 0)
        slices.append((dtype, start, start + size, tuple(x.shape[1:])))
        offset[dtype] = start + size

    def pack(tree: Any) -> dict[str, jax.Array]:
        groups: dict[str, list[jax.Array]] = {}
        for x in jax.tree.leaves(tree):
            groups.setdefault(x.dtype.name, []).append(x.reshape(x.shape[0], -1))
        return {k: v[0] if len(v) == 1 else jnp.concatenate(v, axis=1)
                for k, v in groups.items()}

    def leaf(arrays: dict[str, Any], i: int) -> Any:
        dtype, start, stop, shape = slices[i]
        x = arrays[dtype][..., start:stop]
        return x.reshape(*x.shape[:-1], *shape)

    def unpack(arrays: dict[str, jax.Array]) -> Any:
        return jax.tree.unflatten(treedef, [leaf(arrays, i) for i in range(len(slices))])

    unpack.leaf = leaf
    return pack, unpack


def pack_by_dtype(tree: Any) -> tuple[dict[str, jax.Array], Callable[[dict], Any]]:
    """``tree`` packed by :func:`packing`, and its unpack."""
    pack, unpack = packing(tree)
    return pack(tree), unpack


env_keys = keys.per_env   # one key per environment, from its global index only


def local_env_ids(num_local: int, axis_name: str) -> jax.Array:
    """Global indices of this device's environments (inside a shard_map over ``axis_name``)."""
    return jax.lax.axis_index(axis_name) * num_local + jnp.arange(num_local)


def initial_carries(agent: Agent, batch: jax.Array) -> Any:
    """The policy's initial carry for each of ``batch``'s leading entries (one per env)."""
    return jax.vmap(lambda _: agent.init_carry())(batch)


def reset_actors(spec: EnvSpec, agent: Agent, keys: jax.Array, handles: Any = None
                 ) -> ActorState:
    """Fresh environments [E] (one key each) and the policy's initial carry (one per row:
    per agent, ``envs.team``); a pool's environments are reset in the pool ``handles``
    [E, 8] names (see ``envs.pool``)."""
    return ActorState(envs_lib.reset_batch(spec, keys, handles),
                      initial_carries(agent, team.repeat(spec, keys)))


def rollout_noise(agent: Agent, act_key: jax.Array, env_ids: jax.Array, num_steps: int) -> Any:
    """Every step's action noise [T, E, ...] of a rollout, one batched draw per environment
    from its rollout key (:func:`keys.of_rollout`): what both drivers' actors act with."""
    noise_keys = keys.of_rollout(act_key, env_ids).noise
    return jax.tree.map(lambda x: x.swapaxes(0, 1),
                        jax.vmap(lambda k: agent.noise(k, num_steps))(noise_keys))


def collect(spec: EnvSpec, agent: Agent, acting: Any, actors: ActorState, env_ids: jax.Array,
            key: jax.Array, num_steps: int, batch_axis: str | None = None,
            drop_nonfinite: bool = False) -> tuple[ActorState, Transition]:
    """Step the local environments ``num_steps`` times with ``agent.act``.

    Args:
      acting: ``agent.acting(train)``.  actors: [E].  env_ids: [E] int32 global indices.
      key: replicated.  batch_axis, drop_nonfinite: the program's ``envs.CompileOptions``.
    Returns:
      (actors after the rollout, transitions [T, E, ...]; [T, E x A, ...] with A agents per
      environment: one row per agent, ``envs.team``).
    """
    # Environment e's randomness comes from ONE key, a function of (key, global index e): its
    # action noise and its (step, reset) key pairs for all T steps are one batched draw each,
    # step t taking row t. Few large draws, not a fold_in and splits per (step, environment):
    # XLA:CPU runs them as fewer, fuller kernels (+4 % on the CartPole update).
    rows = team.row_ids(spec, env_ids)   # the acting rows: env_ids, or each agent's
    noise = rollout_noise(agent, key, rows, num_steps)                       # [T, E, ...]
    key_env = jax.vmap(lambda k: jax.random.split(k, (num_steps, 2)))(
        keys.of_rollout(key, env_ids).env).swapaxes(0, 1)                   # [T, E, 2, key]
    initial_carry = initial_carries(agent, rows)

    def env_step(actors: ActorState, xs):
        noise_t, key_env_t = xs
        slots = actors.env
        obs, mask = team.rows(spec, slots.obs), _rows(spec, slots.mask)
        action, carry, extras = agent.act(acting, actors.carry, obs, mask, noise_t)
        new_slots, out = envs_lib.step(spec, key_env_t, slots,
                                       team.per_env(spec, agent.env_action(action)),
                                       batch_axis=batch_axis, drop_nonfinite=drop_nonfinite)
        out = team.step_rows(spec, out)
        done = jnp.logical_or(out.terminated, out.truncated)
        carry = jax.tree.map(lambda c0, c: jax.vmap(jnp.where)(done, c0, c),
                             initial_carry, carry)   # a new episode starts from a fresh carry
        transition = Transition(
            obs=obs, action=action, reward=out.reward, terminated=out.terminated,
            truncated=out.truncated, finished_return=out.finished_return,
            finished_length=out.finished_length, extras=extras,
            final_obs=out.final_obs if agent.keep_final_obs else None, mask=mask,
            valid=out.valid, finished_won=out.finished_won)
        packed, unpack[0] = pack_by_dtype(transition)
        return ActorState(new_slots, carry), packed

    unpack: list = [None]   # set while tracing the step

    # No unrolling: with the slim body above, unroll 2/4/8 were within noise of 1 (CartPole, 4
    # envs) and compile longer (it was +25 % when the body still drew keys and ran the critic).
    actors, packed = jax.lax.scan(env_step, actors, (noise, key_env))
    return actors, unpack[0](packed)


def _rows(spec: EnvSpec, mask: jax.Array | None) -> jax.Array | None:
    return None if mask is None else team.rows(spec, mask)


def last_obs(spec: EnvSpec, actors: ActorState) -> jax.Array:
    """The observation each row reached after a rollout (what ``learn`` bootstraps from)."""
    return team.rows(spec, actors.env.obs)


def stops_before_invalid(steps: Transition) -> jax.Array:
    """[T, E]: the step did not end its episode but the rollout's next step is not experience
    (``valid`` False after a step that did not end one: a step ``env_nonfinite: reset``
    dropped). Learners end it there by a time limit, bootstrapped from where it arrived (the
    observation the dropped step acted on), so no return or trace runs into the dropped step."""
    invalid_next = jnp.concatenate([~steps.valid[1:], jnp.zeros_like(steps.valid[:1])])
    return invalid_next & ~(steps.terminated | steps.truncated)


def episode_sums(steps: Transition) -> dict[str, jax.Array]:
    """Local sums of the episodes that finished in a rollout (every learner reports their
    global sums under these names; see ``agents.base.EPISODE_METRICS``)."""
    return {"episode_return_sum": jnp.sum(steps.finished_return),
            "episode_length_sum": jnp.sum(steps.finished_length).astype(jnp.float32),
            "episodes": jnp.sum(steps.finished_length > 0).astype(jnp.float32)}
