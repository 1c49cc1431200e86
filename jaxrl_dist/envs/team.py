"""A multi-agent environment's agents as rows of the batch.

An environment with ``EnvSpec.num_agents`` = A > 1 is stepped as one environment (its state,
its keys, its auto-reset and its episode statistics are the environment's), but the policy
and the learner see each of its agents as a row: ``[E, A, ...]`` becomes ``[E x A, ...]``,
environment-major (row ``e x A + a``), so a device's rows are its own environments' agents
and the learner's global-mean gradient is the mean over environments AND agents. A row's
random stream is keyed by its global row index (:func:`row_ids`), a function of the global
environment index and the agent: the same on any topology. An episode's end is every agent's;
its return (the team's: the sum over the agents of each one's return) is counted once, on the
environment's first row, so episode statistics count environments' episodes. With one agent
every function here is the identity: single-agent programs are unchanged.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxrl_dist.envs.base import EnvSpec, team_reward  # noqa: F401 (the team's, kept in base)
from jaxrl_dist.envs.slots import StepOutput


def rows(spec: EnvSpec, x: jax.Array) -> jax.Array:
    """``[E, A, ...]`` -> ``[E x A, ...]``."""
    return x if spec.num_agents == 1 else x.reshape(-1, *x.shape[2:])


def per_env(spec: EnvSpec, x: jax.Array) -> jax.Array:
    """``[E x A, ...]`` -> ``[E, A, ...]``: the rows' actions as their environments take them."""
    A = spec.num_agents
    return x if A == 1 else x.reshape(-1, A, *x.shape[1:])


def repeat(spec: EnvSpec, x: jax.Array) -> jax.Array:
    """``[E, ...]`` -> ``[E x A, ...]``: an environment's value on each of its agents' rows."""
    return x if spec.num_agents == 1 else jnp.repeat(x, spec.num_agents, axis=0)


def row_ids(spec: EnvSpec, env_ids: jax.Array) -> jax.Array:
    """Global row indices ``[E x A]`` of environments ``env_ids`` ``[E]`` (global indices)."""
    A = spec.num_agents
    if A == 1:
        return env_ids
    return (env_ids[:, None] * A + jnp.arange(A, dtype=env_ids.dtype)).reshape(-1)


def first_row(spec: EnvSpec, x: jax.Array) -> jax.Array:
    """``[E]`` -> ``[E x A]``: the value on each environment's first row, zero on the others
    (what is counted once per environment: a finished episode's return and length)."""
    A = spec.num_agents
    if A == 1:
        return x
    return jnp.zeros((x.shape[0], A), x.dtype).at[:, 0].set(x).reshape(-1)


def agent_inputs(own: Any, world: Any, agent_ids: bool, xp: Any = jnp) -> Any:
    """Each agent's row ``[A, k]`` from its own flat observation ``own`` ``[A, d]``: with a
    central critic (``world``: the environment's global state ``[w]``, else None) the state
    after it, and with ``agent_ids`` the agent's one-hot index after each part. The policy
    reads the first part (``EnvSpec.policy_features``), the critic the rest. ``xp``: numpy
    for host environments, jax.numpy inside the program: the same rows either way."""
    A = own.shape[0]
    parts = [own]
    if world is not None:
        parts.append(xp.broadcast_to(world, (A, world.shape[0])))
    if agent_ids:
        ids = xp.eye(A, dtype=xp.float32)
        parts = [x for part in parts for x in (part, ids)]
    return xp.concatenate(parts, axis=-1)


def step_rows(spec: EnvSpec, out: StepOutput) -> StepOutput:
    """An environment step's outputs per row: each agent's reward and final observation, the
    environment's end on all its rows, its finished episode on its first."""
    if spec.num_agents == 1:
        return out
    return StepOutput(
        reward=rows(spec, out.reward), terminated=repeat(spec, out.terminated),
        truncated=repeat(spec, out.truncated), final_obs=rows(spec, out.final_obs),
        finished_return=first_row(spec, out.finished_return),
        finished_length=first_row(spec, out.finished_length),
        valid=None if out.valid is None else repeat(spec, out.valid),
        finished_won=None if out.finished_won is None else first_row(spec, out.finished_won))
