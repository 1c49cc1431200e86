"""Evaluation on dedicated environments spread over every device.

Each eval environment plays ONE episode with the mode of the policy (or, with
``eval_deterministic: false``, actions sampled from it); returns are reduced over
the whole mesh, so every process gets the same mean/std and can take the same decision (early
stop at a target return). Eval keys come from their own stream, so evaluating does not change
what training does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import jax
import jax.numpy as jnp

from jaxrl_dist import envs as envs_lib
from jaxrl_dist import keys, rollout, running_stats
from jaxrl_dist.envs import CompileOptions, EnvSpec, team
from jaxrl_dist.sharding import Layout

if TYPE_CHECKING:
    from jaxrl_dist.agents.base import Agent

EVAL_STREAM = keys.EVAL_STREAM   # (kept for importers)


def _device_varying(tree: Any, axes: tuple[str, ...]) -> Any:
    """Mark per-device loop state as varying over every mesh axis (shard_map's type system
    requires a loop carry to keep its type, and stepping makes every leaf device-varying)."""
    def cast(x):
        varying = jax.typeof(x).manual_axis_type.varying
        missing = tuple(a for a in axes if a not in varying)
        return jax.lax.pcast(x, missing, to="varying") if missing else x
    return jax.tree.map(cast, tree)


def eval_action(agent: Agent, deterministic: bool, policy_params: Any, acting: Any,
                carry: Any, obs: jax.Array, mask: jax.Array | None, keys: jax.Array
                ) -> tuple[jax.Array, Any]:
    """The environment actions an evaluation step takes, and the next carry (each environment
    plays one episode from a fresh carry, so none is reset): the policy's mode
    (``agent.policy``), or actions sampled as in training with each environment's noise from
    its own step key ``keys`` [E] (the same on any topology). Shared by the on-device
    evaluation and the host actors'."""
    if deterministic:
        return agent.policy(policy_params, carry, obs, mask)
    noise = jax.vmap(lambda k: jax.tree.map(
        lambda x: x[0], agent.noise(jax.random.fold_in(k, 1), 1)))(keys)
    action, carry, _ = agent.act(acting, carry, obs, mask, noise)
    return agent.env_action(action), carry


def make_eval_program(agent: Agent, spec: EnvSpec, layout: Layout, episodes: int,
                      deterministic: bool, options: CompileOptions, pools_spec: Any = ()
                      ) -> Callable[..., dict[str, jax.Array]]:
    """(train state, seed key, pools=()) -> {"return_mean", "return_std", "length_mean"}.

    ``options``: how the programs of ``layout`` compile ``spec``'s steps
    (``programs.compile_options``).

    ``pools``: the evaluation pools' handles for pool environments (``programs.EnvInputs``),
    which then play one game each and report its real score (an episode ends at game over or
    the time limit, never at a lost life).

    Acts with ``agent.policy`` (deterministic: what an exporter serialises) or, with
    ``deterministic`` False, with ``agent.act`` (actions sampled as in training). The seed key
    is an argument so one compiled program serves every seed; the update count in the train
    state picks the episodes' keys. In a population every argument and result has a leading
    member dimension."""
    axis = layout.data_axis
    local_envs = episodes // layout.data_size
    max_steps = spec.max_episode_steps
    won = getattr(spec.adapter, "won", None)   # an outcome of its own (SMAX: battle won)

    def local_eval(train, seed_key, pools):
        env_ids = rollout.local_env_ids(local_envs, axis)
        key_reset, key_steps = keys.of_eval(seed_key, train.update)
        actors = rollout.reset_actors(spec, agent, rollout.env_keys(key_reset, env_ids), pools)
        rows = team.row_ids(spec, env_ids)   # each agent's, with several per environment
        policy_params, acting = agent.policy_params(train), agent.acting(train)

        def cond(carry):
            t, _, _, _, done, _ = carry
            return jnp.logical_and(t < max_steps, jnp.logical_not(jnp.all(done)))

        def body(carry):
            t, actors, ret, length, done, wins = carry
            slots = actors.env
            key_t = jax.random.fold_in(key_steps, t)
            keys = rollout.env_keys(key_t, env_ids)
            row_keys = keys if spec.num_agents == 1 else rollout.env_keys(key_t, rows)
            mask = None if slots.mask is None else team.rows(spec, slots.mask)
            action, carry_next = eval_action(agent, deterministic, policy_params, acting,
                                             actors.carry, team.rows(spec, slots.obs), mask,
                                             row_keys)
            slots, out = envs_lib.step(spec, envs_lib.step_keys(keys), slots,
                                       team.per_env(spec, action),
                                       autoreset=False,   # one episode each
                                       batch_axis=options.batch_axis)
            if spec.resets_late:   # a pool: scores and ends as the game counts
                ended = out.finished_length > 0
                ret = jnp.where(done, ret, jnp.where(ended, out.finished_return,
                                                     slots.episode_return))
                length = jnp.where(done, length, jnp.where(ended, out.finished_length,
                                                           slots.episode_length))
                done = done | ended
            else:
                ret = jnp.where(done, ret, ret + team.team_reward(spec, out.reward))
                length = jnp.where(done, length, length + 1)
                ended = ~done & (out.terminated | out.truncated)
                if won is not None:   # the state each episode ended in (no auto-reset here)
                    wins = jnp.where(ended, jax.vmap(won)(slots.env_state).astype(jnp.float32),
                                     wins)
                done = done | ended
            return t + 1, actors._replace(env=slots, carry=carry_next), ret, length, done, wins

        zeros = jnp.zeros(local_envs)
        carry = (jnp.int32(0), *_device_varying(
            (actors, zeros, zeros, jnp.zeros(local_envs, bool), () if won is None else zeros),
            layout.axes))
        _, _, ret, length, _, wins = jax.lax.while_loop(cond, body, carry)
        sums = jax.lax.psum(jnp.stack([jnp.sum(ret), jnp.sum(jnp.square(ret)), jnp.sum(length),
                                       jnp.float32(local_envs),
                                       *(() if won is None else (jnp.sum(wins),))]), axis)
        mean, var = running_stats.moments_from_sums(sums[0], sums[1], sums[3])
        result = {"return_mean": mean, "return_std": jnp.sqrt(var),
                  "length_mean": sums[2] / sums[3]}
        if won is not None:
            result["win_rate"] = sums[4] / sums[3]
        return result

    body = (jax.vmap(local_eval, (0, 0, None), axis_name=layout.member_vmap_axis)
            if layout.members else local_eval)
    program = jax.shard_map(body, mesh=layout.mesh,
                            in_specs=(layout.train, layout.train, pools_spec),
                            out_specs=layout.train, check_vma=options.check_vma)

    def evaluate(train, seed_key, pools=()):
        return program(train, seed_key, pools)
    return jax.jit(evaluate)
