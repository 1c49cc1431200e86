"""The one environment protocol every suite maps to, and what is built once on top of it.

An :class:`Adapter` is ONE environment without auto-reset: ``reset(key) -> (state, obs)`` and
``step(key, state, action) -> Step`` with ``terminated`` (a natural end: no bootstrap) and
``truncated`` (a time limit: bootstrap from the observation it stopped at) kept apart, and
optionally ``action_mask(state)``. Auto-reset, episode statistics, action clipping and the
observation/mask bookkeeping live here, once, for every suite; the truncation bootstrap lives
in the rollout, which gets the final observation from :class:`StepOutput`. Every
:class:`EnvSpec` declares how its environments auto-reset (``autoreset``, one of
:data:`AUTORESETS`: this lazy reset, an adapter that resets itself, a pool that resets one step
late, host environments) and :func:`step` steps each kind with its own function.

``reset`` is for ONE environment (callers ``vmap``); ``step`` takes a batch, so it can skip the
auto-reset when no environment of the batch finished (the lazy reset: the reset's random draws
and work run only when needed). Keys come from the caller, which derives them from the global
environment index (see ``rollout.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl_dist.envs import pool
from jaxrl_dist.envs.slots import EnvSlot, StepOutput
from jaxrl_dist.errors import EnvError  # noqa: F401 (defined jax-free; envs.EnvError)


class Step(NamedTuple):
    """What an adapter's ``step`` returns for ONE environment (before any auto-reset)."""

    state: Any
    obs: jax.Array           # the observation the step reached (final one if it ended)
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array


class Adapter(Protocol):
    """ONE environment of some suite, pure functions, no auto-reset."""

    def reset(self, key: jax.Array) -> tuple[Any, jax.Array]: ...

    def step(self, key: jax.Array, state: Any, action: jax.Array) -> Step: ...


# How an environment kind restarts finished episodes (``EnvSpec.autoreset``), each stepped by
# its own function of :func:`step` (host environments are not stepped in a program):
AUTORESETS = {
    # a JAX adapter without auto-reset: :func:`step` resets finished environments inside the
    # step (only when one finished) and keeps the final observation apart
    "lazy": "an adapter",
    # a JAX adapter that resets itself (``adapter.step_autoreset``, e.g. a gymnax wrapper with
    # its own ``step``) and reports the final observation beside the reset one
    "same_step": "an adapter with step_autoreset",
    # a pool (``envs.pool``, ale-py's NEXT_STEP mode): the step AFTER an end is the reset, not
    # experience; the final observation is that end's own
    "next_step": "a pool",
    # environments outside the program (``envs.host``), stepped by the host actors
    # (``jaxrl_dist.actors``): reset in the step, the final observation reported beside
    "host": "a host factory",
}


def _check_autoreset(spec: EnvSpec) -> None:
    """The declared kind matches what the spec provides (``adapter`` / ``pool`` / ``host``)."""
    kind = spec.autoreset
    if kind not in AUTORESETS:
        raise EnvError(f"{spec.name}: autoreset {kind!r} is not one of "
                       f"{', '.join(map(repr, AUTORESETS))}")
    given = {"adapter": spec.adapter is not None, "pool": spec.pool is not None,
             "host": spec.host is not None}
    # what each kind steps with; a JAX kind may have no adapter (a spec for networks and
    # policies only: EnvSpec.from_description)
    needs = {"lazy": "adapter", "same_step": "adapter", "next_step": "pool", "host": "host"}[kind]
    extra = any(v for k, v in given.items() if k != needs)
    if extra or (kind in ("next_step", "host") and not given[needs]):
        provided = ", ".join(k for k, v in given.items() if v) or "none of adapter/pool/host"
        raise EnvError(f"{spec.name}: autoreset {kind!r} steps {AUTORESETS[kind]} "
                       f"({needs}=...) and nothing else, but the spec provides {provided}")
    if kind == "same_step" and spec.adapter is not None and not hasattr(
            spec.adapter, "step_autoreset"):
        raise EnvError(f"{spec.name}: autoreset 'same_step' needs an adapter with "
                       f"step_autoreset(key, state, action); "
                       f"{type(spec.adapter).__name__} has none (declare 'lazy' for an "
                       f"adapter without auto-reset)")


@dataclass(frozen=True, eq=False)
class EnvSpec:
    """An environment plus what the networks and loops need to know about it."""

    adapter: Any                  # an Adapter (``action_mask(state)`` too when ``masked``)
    name: str
    obs_shape: tuple[int, ...]
    action_dim: int               # number of actions (discrete) or action size (continuous)
    continuous: bool
    action_low: np.ndarray | None = None
    action_high: np.ndarray | None = None
    max_episode_steps: int = 1000  # bounds evaluation episodes
    masked: bool = False           # the adapter provides legal-action masks
    # The environment library's steps pass shard_map's varying-axis type checks. Libraries not
    # written for shard_map (MJX's solver, Jumanji's generators) mix device-varying and
    # constant values in their own cond/while carries, which those checks reject; the update
    # does not rely on them (gradients are pmean-ed explicitly; tests check the global mean and
    # 1 vs 2 devices per suite). The programs turn this into ``CompileOptions.check_vma``.
    shard_map_safe: bool = True
    # Reset finished environments one at a time (a loop over them) instead of all at once and
    # keeping the finished ones: for libraries whose reset is costly (Craftax generates a
    # world: ~2 ms per environment on a CPU core, so a batched reset whenever any of 64
    # environments finished cost more than the steps). Same keys, same states.
    reset_each: bool = False
    # A batch of environments outside JAX stepped through XLA calls (``envs.pool``), in place
    # of ``adapter``: ale-py's Atari pools.
    pool: Any = None
    # Environments outside JAX that each process steps on its CPUs (``envs.host``): a function
    # (num_envs) -> HostEnvs opening this process's share, in place of ``adapter``; the
    # trainer's host actors step them and feed the learner's ``learn``.
    host: Any = None
    # The observations' dtype as the environment gives them: "uint8" frames stay uint8 in
    # rollouts and buffers (4x less memory) and networks scale them to [0, 1] themselves.
    obs_dtype: str = "float32"
    # How finished episodes restart, one of AUTORESETS (see there), as the suite declares it;
    # None: read from what the spec provides (``pool`` -> "next_step", ``host`` -> "host",
    # else "lazy").
    autoreset: str | None = None
    # Agents per environment (``envs.team``): above 1, obs_shape, action_dim and the mask
    # describe ONE agent, an environment's observations are [num_agents, *obs_shape], its
    # rewards [num_agents] and its actions [num_agents, ...]; it ends (terminated/truncated)
    # as a whole, and its episode return is the team's (the sum over its agents).
    num_agents: int = 1
    # A team with a central critic (``team.critic: central``, MAPPO): a flat observation's
    # first ``policy_features`` entries are what the agent itself observes (the policy's
    # input, and what a deployed policy takes), the rest the environment's global state (the
    # critic's). None: the policy and the critic both read the whole observation.
    policy_features: int | None = None
    # A team whose agents each have parameters of their own (``team.parameters: per_agent``):
    # above 0, the number of agents, and the last ``agent_networks`` features of what the
    # policy and the critic read are the agent's one-hot index (``team.agent_ids``), which
    # picks its parameters. 0: one set shared by every agent.
    agent_networks: int = 0

    def __post_init__(self):
        if self.autoreset is None:
            kind = ("next_step" if self.pool is not None
                    else "host" if self.host is not None else "lazy")
            object.__setattr__(self, "autoreset", kind)
        _check_autoreset(self)

    @property
    def on_host(self) -> bool:
        """Stepped outside the program on each process's CPUs (``envs.host``): the host
        driver's environments (``jaxrl_dist.drivers``), with no state in the run state."""
        return self.autoreset == "host"

    @property
    def state_outside_jax(self) -> bool:
        """The environments' state lives outside JAX (a pool's emulator, a host process):
        not in the run state, so checkpoints leave it out and a resumed run starts fresh
        episodes."""
        return self.pool is not None or self.host is not None

    @property
    def resets_late(self) -> bool:
        """Final observations are in the next row (a pool's late reset): learners then store
        no separate final observation and drop the reset steps."""
        return self.autoreset == "next_step"

    def describe(self) -> dict[str, Any]:
        """The spaces as plain JSON data (what a checkpoint records for rebuilding a policy
        without the environment library): :meth:`from_description` reads it back. A central
        critic's part of the observation is not the policy's: ``obs_shape`` is then the
        agent's own observation, what the deployed policy takes."""
        def bound(b):
            return None if b is None else np.broadcast_to(
                np.asarray(b, np.float64), (self.action_dim,)).tolist()
        obs_shape = (list(self.obs_shape) if self.policy_features is None
                     else [self.policy_features])
        return {"name": self.name, "obs_shape": obs_shape,
                "action_dim": self.action_dim, "continuous": self.continuous,
                "action_low": bound(self.action_low), "action_high": bound(self.action_high),
                "masked": self.masked, "max_episode_steps": self.max_episode_steps,
                "obs_dtype": self.obs_dtype,
                **({"num_agents": self.num_agents} if self.num_agents > 1 else {}),
                **({"agent_networks": self.agent_networks} if self.agent_networks else {})}

    @classmethod
    def from_description(cls, d: dict[str, Any]) -> EnvSpec:
        """An EnvSpec with no environment behind it (``adapter`` None): enough for networks
        and policies, not for stepping."""
        def bound(b):
            return None if b is None else np.asarray(b, np.float32)
        return cls(adapter=None, name=d["name"], obs_shape=tuple(d["obs_shape"]),
                   action_dim=int(d["action_dim"]), continuous=bool(d["continuous"]),
                   action_low=bound(d["action_low"]), action_high=bound(d["action_high"]),
                   max_episode_steps=int(d["max_episode_steps"]), masked=bool(d["masked"]),
                   obs_dtype=str(d.get("obs_dtype", "float32")),
                   num_agents=int(d.get("num_agents", 1)),
                   agent_networks=int(d.get("agent_networks", 0)))


@dataclass(frozen=True)
class CompileOptions:
    """How a program compiles an environment's steps: choices of the program and its layout,
    not properties of the environment (``programs.compile_options`` derives them)."""

    # shard_map's varying-axis type checks (``jax.shard_map(check_vma=...)``): off for
    # environments whose steps do not pass them (``EnvSpec.shard_map_safe``) and in populations
    # (see ``batch_axis``).
    check_vma: bool = True
    # The name of an enclosing vmap axis (a population's members on one device). The lazy
    # reset's "did any environment finish" is then reduced over it, so the reset stays a cond
    # run only when needed; under vmap a per-member predicate turns the cond into a select that
    # resets every step (Craftax: ~10x slower), and jax 0.10.2's rule for that fails shard_map's
    # varying-axis checks when a reset indexes a constant array (MinAtar Breakout). jax 0.10.2
    # also rejects collectives over a vmap axis under those checks: programs that set this run
    # with ``check_vma=False``.
    batch_axis: str | None = None
    # ``env_nonfinite: reset``: a step whose reward or observation is not finite is dropped
    # and its environment reset (:func:`_drop_nonfinite`), in training's rollouts.
    drop_nonfinite: bool = False


def flatten_observation(obs: Any) -> jax.Array:
    """One float32 array from an observation pytree: a single leaf keeps its shape (images
    stay images), several leaves are flattened and concatenated in pytree order."""
    leaves = jax.tree.leaves(obs)
    if len(leaves) == 1:
        return jnp.asarray(leaves[0], jnp.float32)
    return jnp.concatenate([jnp.asarray(x, jnp.float32).reshape(-1) for x in leaves])


def strong_types(tree: Any) -> Any:
    """Drop weak types (Python scalars in a library's state) so a state has the same types
    after a step as after a reset; otherwise each jitted call on stepped state compiles again
    (seen with Brax's reward/done and Craftax's player_direction)."""
    def strong(x):
        x = jnp.asarray(x)   # Python numbers in a state become (weakly typed) arrays first
        return jax.lax.convert_element_type(x, x.dtype) if x.weak_type else x
    return jax.tree.map(strong, tree)


def _float_obs(obs: Any) -> jax.Array:
    return jnp.asarray(obs, jnp.float32)


def _mask(spec: EnvSpec, state: Any) -> jax.Array | None:
    return jnp.asarray(spec.adapter.action_mask(state), bool) if spec.masked else None


def reset_batch(spec: EnvSpec, keys: jax.Array, handles: Any = None) -> EnvSlot:
    """Fresh environments [E], one key each: an adapter's reset vmapped, or a pool's
    environments reset in the pool ``handles`` [E, 8] names (:func:`program_inputs`)."""
    if spec.pool is not None:
        return pool.reset(spec, handles, keys)
    return jax.vmap(lambda k: reset(spec, k))(keys)


def program_inputs(spec: EnvSpec, sharding: Any, num_envs: int, eval_episodes: int
                   ) -> tuple[jax.Array, jax.Array] | None:
    """What a program stepping ``spec`` takes as inputs besides the run state: a pool's
    handles for ``num_envs`` training and ``eval_episodes`` evaluation environments laid out by
    ``sharding`` (one pool per local device, its state in the emulator, so not in the run
    state nor in checkpoints); None for environments written in JAX."""
    if spec.pool is None:
        return None
    return (pool.global_handles(spec, sharding, num_envs),
            pool.global_handles(spec, sharding, eval_episodes))


def reset(spec: EnvSpec, key: jax.Array) -> EnvSlot:
    state, obs = spec.adapter.reset(key)
    state = strong_types(state)
    return EnvSlot(state, _float_obs(obs), jnp.float32(0.0), jnp.int32(0), _mask(spec, state))


def to_env_action(spec: EnvSpec, action: jax.Array) -> jax.Array:
    """Clip continuous actions to the space's bounds (the policy itself is unbounded)."""
    if spec.continuous:
        return jnp.clip(action, spec.action_low, spec.action_high)
    return action


def step_keys(keys: jax.Array) -> jax.Array:
    """[..., key] -> [..., 2, key]: a (step, reset) key pair per environment, the pair gymnax's
    ``Environment.step`` splits from its one key (evaluation steps with these; the tests compare
    :func:`step` with gymnax through them). A training rollout draws its pairs for all its steps
    at once instead (``rollout.collect``)."""
    return jax.vmap(jax.random.split)(keys.reshape(-1, *keys.shape[-1:])).reshape(
        *keys.shape[:-1], 2, *keys.shape[-1:])


def step(spec: EnvSpec, keys: jax.Array, slots: EnvSlot, action: jax.Array,
         autoreset: bool = True, batch_axis: str | None = None, drop_nonfinite: bool = False
         ) -> tuple[EnvSlot, StepOutput]:
    """Step a batch of environments with auto-reset; tracks each running episode's statistics.

    Args:
      keys: [E, 2, key] (step, reset) key pairs from :func:`step_keys`.  slots: [E].
      action: [E, ...].
      batch_axis: ``CompileOptions.batch_axis`` of the program stepping it.
    Each kind of ``spec.autoreset`` is its own function (:data:`_STEPS`). The lazy one runs the
    reset (random draws and all) only when some environment of the batch finished, instead of
    at every step. ``autoreset=False`` leaves finished environments as the step left them, for
    callers that ignore what follows an episode's end (evaluation plays one episode per
    environment): the same outputs up to each end, a smaller program (kinds that reset
    themselves still do).
    (Measured on CPU, where the branch is cheap; with thousands of
    environments per device some always finish, and on accelerators the branch's predicate
    may cost a host round trip per step: not yet measured.)
    ``drop_nonfinite``: :func:`_drop_nonfinite` after the step (``env_nonfinite: reset``).
    """
    new_slots, out = _STEPS[spec.autoreset](spec, keys, slots, action, autoreset, batch_axis)
    if drop_nonfinite:
        return _drop_nonfinite(spec, keys, slots, new_slots, out, batch_axis)
    return new_slots, out


def _drop_nonfinite(spec: EnvSpec, keys: jax.Array, slots: EnvSlot, new_slots: EnvSlot,
                    out: StepOutput, batch_axis: str | None) -> tuple[EnvSlot, StepOutput]:
    """``env_nonfinite: reset``: an environment whose step returned a non-finite reward, next
    observation or final observation is reset (with the step's reset key) and the step is
    DROPPED: reported ``terminated`` AND ``truncated`` (a pair no environment reports: the
    steps above keep ``truncated`` apart from ``terminated``), ``valid`` False, reward 0,
    the observation it acted on as its final one and no finished episode. Learners then give
    it no weight and end the step before it by a time limit at that observation (the one it
    really reached), so nothing of it is learned from, stored as a sample or bootstrapped.
    The reset runs only when some environment of the batch needs it; not for pools (their
    environments reset themselves; ``programs.build`` refuses the pair)."""

    def bad_rows(x: jax.Array) -> jax.Array:
        return ~jnp.isfinite(x).reshape(x.shape[0], -1).all(axis=1)

    bad = ~jnp.isfinite(out.reward) if out.reward.ndim == 1 else bad_rows(out.reward)
    if jnp.issubdtype(new_slots.obs.dtype, jnp.inexact):
        bad = bad | bad_rows(new_slots.obs) | bad_rows(out.final_obs)
    any_bad = jnp.any(bad)
    if batch_axis is not None:
        any_bad = jax.lax.psum(any_bad.astype(jnp.int32), batch_axis) > 0

    def per_env(x: jax.Array) -> jax.Array:   # [E] -> broadcastable against [E, ...] x
        return bad.reshape(-1, *([1] * (x.ndim - 1))) if x.ndim else bad

    def reset_bad() -> EnvSlot:
        fresh = jax.vmap(lambda k: reset(spec, k))(keys[:, 1])
        return jax.tree.map(lambda a, b: jnp.where(per_env(b), a, b), fresh, new_slots)

    new_slots = jax.lax.cond(any_bad, reset_bad, lambda: new_slots)
    zero = jnp.zeros((), jnp.float32)
    obs_before = slots.obs.astype(out.final_obs.dtype)
    return new_slots, out._replace(
        reward=jnp.where(per_env(out.reward), zero, out.reward),
        terminated=out.terminated | bad, truncated=out.truncated | bad,
        final_obs=jnp.where(per_env(out.final_obs), obs_before, out.final_obs),
        finished_return=jnp.where(bad, zero, out.finished_return),
        finished_length=jnp.where(bad, 0, out.finished_length),
        finished_won=None if out.finished_won is None else jnp.where(bad, zero,
                                                                     out.finished_won),
        valid=~bad if out.valid is None else out.valid & ~bad)


def _step_lazy(spec: EnvSpec, keys: jax.Array, slots: EnvSlot, action: jax.Array,
               autoreset: bool, batch_axis: str | None) -> tuple[EnvSlot, StepOutput]:
    """An adapter without auto-reset: finished environments are reset here, only when one of
    the batch finished."""
    adapter = spec.adapter
    action = to_env_action(spec, action)
    key_step, key_reset = keys[:, 0], keys[:, 1]
    out = jax.vmap(adapter.step)(key_step, slots.env_state, action)
    out = out._replace(state=strong_types(out.state))
    terminated = jnp.asarray(out.terminated, bool)
    truncated = jnp.logical_and(jnp.asarray(out.truncated, bool),
                                jnp.logical_not(terminated))
    done = jnp.logical_or(terminated, truncated)

    def reset_finished():
        state_re, obs_re = jax.vmap(adapter.reset)(key_reset)
        state_re = strong_types(state_re)
        pick = lambda x, y: jax.vmap(jax.lax.select)(done, x, y)  # noqa: E731
        return (jax.tree.map(pick, state_re, out.state),
                pick(_float_obs(obs_re), _float_obs(out.obs)))

    def reset_each():
        order = jnp.argsort(jnp.logical_not(done))   # finished environments first

        def one(i, carry):
            state, obs = carry
            e = order[i]
            state_re, obs_re = adapter.reset(key_reset[e])
            state = jax.tree.map(lambda a, b: a.at[e].set(b), state,
                                 strong_types(state_re))
            return state, obs.at[e].set(_float_obs(obs_re))
        return jax.lax.fori_loop(0, jnp.sum(done), one, (out.state, _float_obs(out.obs)))

    if autoreset:   # the "did any finish" vote (a collective under vmap) only when used
        any_done = jnp.any(done)
        if batch_axis is not None:
            any_done = jax.lax.psum(any_done.astype(jnp.int32), batch_axis) > 0
        state, obs = jax.lax.cond(any_done,
                                  reset_each if spec.reset_each else reset_finished,
                                  lambda: (out.state, _float_obs(out.obs)))
    else:
        state, obs = out.state, _float_obs(out.obs)
    won = getattr(adapter, "won", None)   # an outcome (SMAX): read on the state it ended in
    return _tracked(spec, slots, state, obs, out.reward, terminated, truncated, out.obs,
                    None if won is None else jax.vmap(won)(out.state))


def _step_same_step(spec: EnvSpec, keys: jax.Array, slots: EnvSlot, action: jax.Array,
                    autoreset: bool, batch_axis: str | None) -> tuple[EnvSlot, StepOutput]:
    """An adapter that resets itself in its ``step_autoreset`` and reports the final
    observation beside the reset one."""
    action = to_env_action(spec, action)
    state, obs, reward, terminated, truncated, final_obs = jax.vmap(
        spec.adapter.step_autoreset)(keys[:, 0], slots.env_state, action)
    terminated = jnp.asarray(terminated, bool)
    truncated = jnp.logical_and(jnp.asarray(truncated, bool), jnp.logical_not(terminated))
    return _tracked(spec, slots, state, obs, reward, terminated, truncated, final_obs)


def _step_next_step(spec: EnvSpec, keys: jax.Array, slots: EnvSlot, action: jax.Array,
                    autoreset: bool, batch_axis: str | None) -> tuple[EnvSlot, StepOutput]:
    """A pool: it resets itself one step late and tracks its own episodes; no keys."""
    return pool.step(spec, slots, action)


def _step_host(spec: EnvSpec, *args: Any) -> tuple[EnvSlot, StepOutput]:
    raise EnvError(f"{spec.name}: host environments are stepped by the host actors "
                   f"(jaxrl_dist.actors), not inside a compiled program")


_STEPS = {"lazy": _step_lazy, "same_step": _step_same_step, "next_step": _step_next_step,
          "host": _step_host}
assert set(_STEPS) == set(AUTORESETS)


def team_reward(spec: EnvSpec, reward: jax.Array) -> jax.Array:
    """An environment's reward summed over its agents (``[E, A]`` -> ``[E]``; ``envs.team``)."""
    return reward if spec.num_agents == 1 else reward.sum(-1)


def _tracked(spec: EnvSpec, slots: EnvSlot, state: Any, obs: Any, reward: Any,
             terminated: jax.Array, truncated: jax.Array, final_obs: Any,
             won: jax.Array | None = None) -> tuple[EnvSlot, StepOutput]:
    """The new slots and the step's outputs, with each running episode's statistics (``won``:
    whether each environment's state after the step is a won one, for those with an
    outcome)."""
    done = jnp.logical_or(terminated, truncated)
    reward = jnp.asarray(reward, jnp.float32)
    ep_return = slots.episode_return + team_reward(spec, reward)
    ep_length = slots.episode_length + 1
    state = strong_types(state)
    new_slots = EnvSlot(
        env_state=state,
        obs=_float_obs(obs),
        episode_return=jnp.where(done, 0.0, ep_return),
        episode_length=jnp.where(done, 0, ep_length),
        mask=jax.vmap(lambda s: _mask(spec, s))(state) if spec.masked else None,
    )
    return new_slots, StepOutput(
        reward=reward,
        terminated=terminated,
        truncated=truncated,
        final_obs=_float_obs(final_obs),
        finished_return=jnp.where(done, ep_return, 0.0),
        finished_length=jnp.where(done, ep_length, 0),
        finished_won=None if won is None else (done & won).astype(jnp.float32),
    )


@struct.dataclass
class _Timed:
    inner: Any
    t: jax.Array   # steps taken in this episode


@dataclass(frozen=True)
class TimeLimit:
    """Truncates episodes after ``max_steps`` for suites whose environments have no time limit
    of their own (Brax, Playground without their training wrappers)."""

    adapter: Any
    max_steps: int

    def reset(self, key: jax.Array) -> tuple[_Timed, jax.Array]:
        state, obs = self.adapter.reset(key)
        return _Timed(state, jnp.int32(0)), obs

    def step(self, key: jax.Array, state: _Timed, action: jax.Array) -> Step:
        out = self.adapter.step(key, state.inner, action)
        t = state.t + 1
        return Step(_Timed(out.state, t), out.obs, out.reward, out.terminated,
                    jnp.logical_or(out.truncated, t >= self.max_steps))

    def action_mask(self, state: _Timed) -> jax.Array:
        return self.adapter.action_mask(state.inner)


@dataclass(frozen=True)
class ObservationSubset:
    """Observes only the entries ``keep`` of a flat observation (the rest stays in the state):
    e.g. classic control without its velocities, a partially observed task that a
    feed-forward policy cannot solve and a recurrent one can."""

    adapter: Any
    keep: tuple[int, ...]

    def reset(self, key: jax.Array) -> tuple[Any, jax.Array]:
        state, obs = self.adapter.reset(key)
        return state, self._part(obs)

    def step(self, key: jax.Array, state: Any, action: jax.Array) -> Step:
        out = self.adapter.step(key, state, action)
        return out._replace(obs=self._part(out.obs))

    def action_mask(self, state: Any) -> jax.Array:
        return self.adapter.action_mask(state)

    def _part(self, obs: jax.Array) -> jax.Array:
        return jnp.asarray(obs)[jnp.asarray(self.keep)]
