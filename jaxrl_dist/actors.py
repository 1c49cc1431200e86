"""Host actors: environments outside JAX (:mod:`jaxrl_dist.envs.host`) stepped by every process
on its own CPUs, learning on the global mesh.

Each process opens the environments of its own devices (global indices ``[start, stop)``: the
mesh orders devices by process, so they are contiguous) and steps them with the learner's
``act`` jitted on a local device. After ``T`` steps the process's rows are packed into one
byte array (``programs.pack_envs_host``) that becomes one global array with
``jax.make_array_from_process_local_data`` (``jax.device_put`` onto a multi-process sharding
would assert that every process holds the same data, which rollouts do not) and feeds the
learner's ``learn_next``: it unpacks the rows on each device and runs the same ``learn``
program the on-device rollout feeds, its gradient the mean over every device of every process.

Reproducible by construction, as the on-device rollout is: environment ``e`` is seeded once from
(seed, global index ``e``), its action noise comes from (update key, ``e``) in the same draws
``rollout.collect`` makes (a team's agents: from their global row index, ``envs.team``), the
batch is in global environment order and every step acts with the parameters of the update
before (no policy lag). A deterministic environment therefore
gives the same parameters on 1 or 2 devices and on 1 or 2 processes. Environment state lives
outside JAX: a resumed run re-seeds every environment from (seed, update) and starts fresh
episodes (the start line says "actors" were started afresh).

A population (``population:``) is the same with a member axis in front: each process holds a
block of members ``[m0, m1)`` and of their environments ``[start, stop)`` (the same indices for
every member, each member's seeded from its own seed), keeps their host-side arrays
member-major, acts for all of them in one vmapped call per step (each member its own parameters
and keys) and hands ``learn_next`` ``[members, rows, bytes]``; member k then learns as the
single run with its seed does.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np

from jaxrl_dist import distributed, keys, programs, rollout
from jaxrl_dist.envs import EnvError, EnvSpec, team, to_env_action
from jaxrl_dist.envs.host import HostEnvs
from jaxrl_dist.envs.pool import seeds_of
from jaxrl_dist.evaluate import eval_action
from jaxrl_dist.running_stats import moments_from_sums
from jaxrl_dist.sizes import Sizes
from jaxrl_dist.types import RunState, Trajectory, Transition


def learner_devices(overlap: bool, devices: Any = None) -> tuple[Any, Any]:
    """(the devices the learner's mesh spans, this process's acting device or None).

    Synchronous (the default): the mesh spans ``devices`` (None: all) and acting uses a local
    device of the mesh, between updates. Overlapped: acting runs DURING the update, and XLA
    runs one program at a time per device, so it needs a device of its own: the host CPU beside
    accelerators, or, on CPUs, each process's last device (the mesh spans the others)."""
    if not overlap:
        return devices, None
    from jaxrl_dist.errors import ConfigError
    devices = list(jax.devices() if devices is None else devices)
    if devices[0].platform != "cpu":
        return devices, jax.local_devices(backend="cpu")[0]
    if sum(d.process_index == jax.process_index() for d in devices) < 2:
        raise ConfigError("overlap_actors needs an actor device apart from the learner's: on "
                          "CPUs give each process 2 or more devices (--cpu-devices 2, or "
                          "--cpu-devices-per-proc 2 with the launcher): the last one acts")
    last: dict[int, Any] = {}   # each process's last device acts
    for d in devices:
        if d.process_index not in last or d.id > last[d.process_index].id:
            last[d.process_index] = d
    return [d for d in devices if d not in last.values()], last[jax.process_index()]


def process_block(sharding: jax.sharding.Sharding, members: int, total: int
                  ) -> tuple[tuple[int, int], tuple[int, int]]:
    """A population's: the members ``[m0, m1)`` and, of each, the environments ``[start,
    stop)`` this process's devices hold of ``[members, total]`` (one block: a process's
    devices are contiguous in the mesh's order; a layout that splits a process across
    member rows unevenly is refused)."""
    held = np.zeros((members, total), bool)
    for index in sharding.addressable_devices_indices_map((members, total)).values():
        held[index[0], index[1]] = True
    rows, cols = np.flatnonzero(held.any(1)), np.flatnonzero(held.any(0))
    m0, m1, start, stop = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
    if not held[m0:m1, start:stop].all() or held.sum() != (m1 - m0) * (stop - start):
        from jaxrl_dist.errors import ConfigError
        raise ConfigError("a population on host environments needs each process's devices to "
                          "hold whole blocks of members: set population.member_devices so "
                          "that it divides or is a multiple of the devices per process")
    return (int(m0), int(m1)), (int(start), int(stop))


def process_rows(sharding: jax.sharding.Sharding, total: int) -> tuple[int, int]:
    """The global indices ``[start, stop)`` this process's devices hold of ``total`` rows."""
    spans = sorted(index[0].indices(total)[:2]
                   for index in sharding.addressable_devices_indices_map((total,)).values())
    for (_, stop), (start, _) in zip(spans, spans[1:]):
        if stop != start:
            raise RuntimeError(f"this process's environments are not contiguous: {spans}")
    return spans[0][0], spans[-1][1]


def episode_sums(reward: np.ndarray, done: np.ndarray, running_return: np.ndarray,
                 running_length: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A rollout's episode statistics, vectorised over its ``T`` steps (a per-step Python
    update of running sums was ~10 % of a HalfCheetah update): from rewards and dones [T, n]
    and the sums of the episodes running before it, (the return and length of each episode
    ending at a step, else 0 [T, n]; the sums of the episodes running after it [n])."""
    T, n = reward.shape
    if T == 1:   # a step a rollout (SAC): the same values in a few operations, not ~30
        ret = running_return + reward[0].astype(np.float64)
        length = running_length + 1
        ended = done[0]
        return (np.where(ended, ret, 0.0).astype(np.float32)[None],
                np.where(ended, length, 0).astype(np.int32)[None],
                np.where(ended, 0.0, ret), np.where(ended, 0, length))
    cum = running_return + np.cumsum(reward, axis=0, dtype=np.float64)      # [T, n]
    steps = np.arange(T)[:, None]
    last = np.maximum.accumulate(np.where(done, steps, -1), axis=0)         # last end <= t
    prev = np.concatenate([np.full((1, n), -1), last[:-1]])                 # last end < t
    before = np.where(prev >= 0, np.take_along_axis(cum, np.maximum(prev, 0), 0), 0.0)
    length = np.where(prev >= 0, steps - prev, steps + 1 + running_length)
    end = last[-1]
    after_return = np.where(end >= 0, cum[-1] - cum[np.maximum(end, 0), np.arange(n)], cum[-1])
    after_length = np.where(end >= 0, T - 1 - end, T + running_length)
    return (np.where(done, cum - before, 0.0).astype(np.float32),
            np.where(done, length, 0).astype(np.int32), after_return, after_length)


def raveling(like: Any) -> tuple[Callable[[Any], dict[str, jax.Array]], Callable[[dict], Any]]:
    """(ravel, unravel) for pytrees shaped like ``like`` (arrays or ShapeDtypeStructs): a tree
    -> one flat array per dtype, and the inverse: what ``act`` takes each step (one buffer per
    dtype costs less per call than one per leaf). Unlike ``jax.flatten_util.ravel_pytree`` no
    leaf is cast to a common dtype, so every value is exact (an int32 count stays an int32).
    It is :func:`rollout.packing` of one row per leaf, built from shapes alone."""
    leaves, treedef = jax.tree.flatten(like)
    shapes = [tuple(x.shape) for x in leaves]
    pack, unpack = rollout.packing([jax.ShapeDtypeStruct((1, math.prod(s)), x.dtype)
                                    for x, s in zip(leaves, shapes)])

    def ravel(tree: Any) -> dict[str, jax.Array]:
        rows = pack([jnp.reshape(x, (1, -1)) for x in jax.tree.leaves(tree)])
        return {k: v[0] for k, v in rows.items()}

    def unravel(arrays: dict[str, jax.Array]) -> Any:
        got = unpack({k: v[None] for k, v in arrays.items()})
        return jax.tree.unflatten(treedef, [x.reshape(s) for x, s in zip(got, shapes)])

    return ravel, unravel


def leaves_read(fn: Callable[..., Any], leaves_like: list[Any]) -> list[int]:
    """The indices of the leaves (ShapeDtypeStructs) that ``fn(*leaves)`` reads: the inputs
    its traced program uses at all."""
    jaxpr = jax.make_jaxpr(fn)(*leaves_like).jaxpr
    used = {v for eqn in jaxpr.eqns for v in eqn.invars if isinstance(v, jax.extend.core.Var)}
    used |= {v for v in jaxpr.outvars if isinstance(v, jax.extend.core.Var)}
    return [i for i, v in enumerate(jaxpr.invars) if v in used]


def _placeholder(like: Any) -> jax.Array:
    """A constant standing in for a leaf nothing reads (XLA drops it; keys here are raw
    uint32 arrays, as everywhere in the package)."""
    return jnp.zeros(like.shape, like.dtype)


def ravel_by_dtype(tree: Any) -> tuple[dict[str, jax.Array], Callable[[dict], Any]]:
    """``tree`` flattened by :func:`raveling`, and its unravel."""
    ravel, unravel = raveling(tree)
    return ravel(tree), unravel


class HostActors:
    """This process's environments, acting and evaluation for a learner on host environments.

    ``updates(n)`` is what the trainer calls in place of a compiled update program:
    ``(RunState) -> (RunState, metrics {name: [n]})``; ``evaluate`` has the evaluation
    program's signature."""

    def __init__(self, learner: programs.Learner, spec: EnvSpec, sizes: Sizes,
                 eval_episodes: int, deterministic: bool, seed_key: Any, updates_done: int,
                 actor_device: Any = None):
        self.learner, self.spec, self.agent = learner, spec, learner.agent
        self.A = spec.num_agents   # a team's agents are rows of the batch (envs.team)
        layout = learner.layout
        sharding = layout.sharding(layout.envs)
        self.num_envs = sizes.local_envs * layout.data_size
        # a population: this process's members [m0, m1), each with the same environment rows
        # (the member axis leads every array; host-side arrays hold member-major rows)
        self.members = layout.members
        if self.members:
            (self.m0, self.m1), (self.start, self.stop) = process_block(
                sharding, self.members, self.num_envs)
            _, (self.eval_start, self.eval_stop) = process_block(sharding, self.members,
                                                                 eval_episodes)
        else:
            self.m0, self.m1 = 0, 1
            self.start, self.stop = process_rows(sharding, self.num_envs)
            self.eval_start, self.eval_stop = process_rows(sharding, eval_episodes)
        self.Ml = self.m1 - self.m0   # members acted for here (1: a single run)
        self.lead = (self.members,) if self.members else ()   # global arrays' member axis
        self.T = self.agent.steps_per_env
        self.drop = learner.drop_nonfinite   # env_nonfinite: reset
        # acting between updates on a local device of the mesh, or (overlapped) on its own
        self.overlap = actor_device is not None
        self.device = actor_device or next(d for d in layout.mesh.devices.flat
                                           if d.process_index == jax.process_index())
        self.pending: jax.Array | None = None   # overlapped: the batch acted on meanwhile
        # synchronous on a one-device mesh: acting reads the train state where it is
        self.on_mesh_device = not self.overlap and layout.mesh.devices.size == 1
        self.deterministic = deterministic
        # each member's seed key [Ml, 2] (a single run's: [1, 2])
        self.seed_keys = (np.asarray(layout.to_host(seed_key))[self.m0:self.m1]
                          if self.members else np.asarray(seed_key)[None])
        self.obs_sharding = sharding
        # the train state's shapes, one device's one member's (traced once: init's eval_shape
        # is not free)
        self.train_like = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape[len(self.lead):], x.dtype),
            learner.abstract_state().train)
        self._compile_local()
        # the rows become a trajectory on each device, then learn_next (the driver compiles
        # both ahead of time)
        self.local_like = self.trajectory_like(sizes.local_envs)
        self.unpack = programs.unpacking(layout, self.local_like)
        self.learn = learner.learn_next
        self.pbt_window = learner.pbt_window
        # one dispatch a step where it applies (the driver compiles it): the actions the last
        # learn program took, and the train state they were taken with
        self.learn_act: Any = None
        self.next_actions: Any = None
        self.next_for: Any = None
        self.envs: HostEnvs | None = spec.host(self.Ml * (self.stop - self.start), False)
        if self.drop and not hasattr(self.envs, "reset_some"):
            self.close()
            raise EnvError(f"{spec.name}: env_nonfinite=reset needs host environments that "
                           f"reset one environment (HostEnvs.reset_some, as Gymnasium's vector "
                           f"envs do); use env_nonfinite=error")
        self.eval_envs: HostEnvs | None = None
        try:
            self.eval_envs = spec.host(self.Ml * (self.eval_stop - self.eval_start), True)
        except BaseException:   # no half-opened set of workers left behind
            self.close()
            raise
        self.collected = updates_done   # rollouts collected so far (the next one's update)
        self.float_obs = np.issubdtype(np.dtype(spec.obs_dtype), np.floating)
        self.obs = self.envs.reset(self._seeds(
            [keys.host_env_seeds_key(k, updates_done) for k in self.seed_keys],
            self.start, self.stop))
        n = self.Ml * (self.stop - self.start)   # environments here, member-major
        self.episode_return = np.zeros(n, np.float64)   # of the episodes running now
        self.episode_length = np.zeros(n, np.int64)
        # acting's rows: the environments', or each agent's (envs.team.row_ids)
        self.row_ids = self._put(np.arange(self.start * self.A, self.stop * self.A,
                                           dtype=np.int32))
        self.carry = self._initial_carry(self.row_ids)

    # ------------------------------------------------------------------ local programs

    def _put(self, x: Any) -> Any:
        return jax.device_put(x, self.device)

    def _seeds(self, member_keys: list[Any], start: int, stop: int) -> list[int]:
        """Seeds of environments ``[start, stop)`` of each member here, member-major: from
        the member's key (one per member, in ``seed_keys``' order) and each environment's
        global index."""
        ids = self._put(np.arange(start, stop, dtype=np.int32))
        return [seed for key in member_keys for seed in np.asarray(
            self._seed_fn(self._put(np.asarray(key)), ids)).tolist()]

    def _device(self, x: np.ndarray) -> np.ndarray:
        """Host rows (member-major) -> what acting takes: ``[Ml, rows, ...]`` in a
        population, the rows themselves in a single run."""
        return x.reshape(self.Ml, -1, *x.shape[1:]) if self.members else x

    def _host(self, x: np.ndarray) -> np.ndarray:
        """:meth:`_device`'s inverse, for an array from acting: ``[Ml, rows, ...]`` ->
        ``[Ml x rows, ...]``."""
        return x.reshape(-1, *x.shape[2:]) if self.members else x

    def _compile_local(self) -> None:
        agent, spec, T = self.agent, self.spec, self.T

        def noise(train_key, env_ids):   # what the fused rollout of this update draws
            return rollout.rollout_noise(agent, keys.of_update(train_key).act, env_ids, T)

        def act(acting, carry, obs, noise_all, t):
            noise_t = jax.tree.map(lambda x: x[t], noise_all)
            action, carry, extras = agent.act(acting, carry, obs, None, noise_t)
            return action, carry, extras, to_env_action(spec, agent.env_action(action))

        # a step's inputs and outputs go one array per dtype: the fixed costs of a call grow
        # with its buffers (16 parameter arrays in and 3 out: ~45 us a step; packed: ~20 us),
        # and a step's cost is mostly such fixed overheads. How to pack is known from shapes
        # before anything is traced.
        n = (self.stop - self.start) * self.A   # rows
        local_like = self.train_like
        acting_like = jax.eval_shape(agent.acting, local_like)
        ravel_acting, unravel_acting = raveling(acting_like)
        ids_like = jax.ShapeDtypeStruct((n,), np.int32)
        action, _, extras, env_action = jax.eval_shape(
            act, acting_like, jax.eval_shape(lambda ids: rollout.initial_carries(agent, ids),
                                             ids_like),
            jax.ShapeDtypeStruct((n, *spec.obs_shape), np.dtype(spec.obs_dtype)),
            jax.eval_shape(noise, local_like.key, ids_like), jax.ShapeDtypeStruct((), np.int32))
        pack_outputs, self._unpack = rollout.packing((action, extras, env_action))

        # once per update, what every step's act reads: from the train state's leaves that
        # acting and the noise read (SAC's critics, targets and optimizer state stay behind)
        like_leaves, like_def = jax.tree.flatten(local_like)
        self._read = leaves_read(lambda *leaves: (agent.acting(like_def.unflatten(leaves)),
                                                  like_def.unflatten(leaves).key), like_leaves)

        def prepare(read_leaves, env_ids):
            given = dict(zip(self._read, read_leaves))
            local = like_def.unflatten([given[i] if i in given else _placeholder(like)
                                        for i, like in enumerate(like_leaves)])
            return ravel_acting(agent.acting(local)), noise(local.key, env_ids)

        def act_packed(acting, carry, obs, noise_all, t):
            action, carry, extras, env_action = act(unravel_acting(acting), carry, obs,
                                                    noise_all, t)
            return pack_outputs((action, extras, env_action)), carry

        def reset_carry(carry, initial, done):
            return jax.tree.map(lambda c0, c: jax.vmap(jnp.where)(done, c0, c), initial, carry)

        def eval_act(policy_params, acting, carry, obs, key, t, row_ids):
            keys = rollout.env_keys(jax.random.fold_in(key, t), row_ids)
            action, carry = eval_action(agent, self.deterministic, policy_params, acting,
                                        carry, obs, None, keys)
            return to_env_action(spec, action), carry   # a host env gets its bounds' actions

        def acting_of(train):
            return agent.acting(train), agent.policy_params(train)

        def initial_carry(ids):
            return rollout.initial_carries(agent, ids)

        if self.members:   # each member acts with its own parameters and keys, on shared rows
            Ml = self.Ml
            prepare = jax.vmap(prepare, (0, None))
            act_packed = jax.vmap(act_packed, (0, 0, 0, 0, None))
            reset_carry = jax.vmap(reset_carry)
            eval_act = jax.vmap(eval_act, (0, 0, 0, 0, 0, None, None))
            acting_of = jax.vmap(acting_of)
            one_carry = initial_carry

            def initial_carry(ids):
                return jax.tree.map(lambda x: jnp.broadcast_to(x, (Ml, *x.shape)),
                                    one_carry(ids))
        self._noise = jax.jit(noise)
        self._act_shapes = act
        self._prepare = jax.jit(prepare)
        self._act = jax.jit(act_packed)
        self._reset_carry = jax.jit(reset_carry)
        self._eval_act = jax.jit(eval_act)
        self._acting = jax.jit(acting_of)
        self._initial_carry = jax.jit(initial_carry)
        self._seed_fn = jax.jit(lambda key, ids: seeds_of(rollout.env_keys(key, ids)))
        # metrics [n] per name, [members, n] in a population (as the fused update's)
        axis = 1 if self.members else 0
        self._stack = jax.jit(lambda ms: jax.tree.map(lambda *x: jnp.stack(x, axis), *ms))
        # each step's index, on the acting device once (not a host-to-device copy per step)
        self._steps = [self._put(np.int32(t)) for t in range(T)]

    def _held(self, x: jax.Array) -> Any:
        """This process's copy of a train-state leaf: the replicated value, or in a population
        its members ``[m0, m1)`` (from as many of its devices as hold them apart)."""
        if not self.members:
            return x.addressable_data(0)
        pieces: dict[int, Any] = {}
        for shard in x.addressable_shards:
            pieces.setdefault(shard.index[0].indices(self.members)[0], shard.data)
        if len(pieces) == 1:
            return next(iter(pieces.values()))
        return np.concatenate(jax.device_get([pieces[k] for k in sorted(pieces)]))

    def _local(self, train: Any) -> Any:
        """This process's copy of the train state (its members'), on its acting device."""
        return jax.device_put(jax.tree.map(self._held, train), self.device)

    def _acting_leaves(self, train: Any) -> list[jax.Array]:
        """This process's copy of the train state's leaves that acting reads, on its acting
        device: what :meth:`_collect` takes (a copy per update, so only what is read)."""
        leaves = jax.tree.leaves(train)
        if self.on_mesh_device:   # already there: no copy (~0.5 ms an update of 1 env step)
            return [leaves[i] for i in self._read]
        return jax.device_put([self._held(leaves[i]) for i in self._read], self.device)

    # ------------------------------------------------------------------ training

    def collect(self, train: Any) -> jax.Array:
        """``T`` steps of this process's environments with ``train``'s policy, as the global
        trajectory packed (``uint8 [E, bytes]``, :func:`programs.pack_envs_host`; every
        process calls it: the array spans the mesh)."""
        return self._collect(self._acting_leaves(train))

    def _collect(self, read: list[jax.Array] | None, first: Any = None) -> jax.Array:
        """:meth:`collect` from this process's copy of what acting reads (on the acting
        device); ``first``: the one step's actions already taken by the learn program
        (:meth:`fuse_learn_act`), nothing else to act on."""
        acting = noise = None
        if first is None:
            acting, noise = self._prepare(read, self.row_ids)
        first_carry = self.carry   # what a recurrent learner replays the rollout from
        has_carry = bool(jax.tree.leaves(self.carry))
        initial = self._initial_carry(self.row_ids) if has_carry else None
        keep_final = self.agent.keep_final_obs
        T, n, A = self.T, self.Ml * (self.stop - self.start), self.A
        # per environment [T, n, (A,) ...] (a population's member-major): a team's agents
        # become rows after the loop
        obs = np.empty((T, *self.obs.shape), self.obs.dtype)
        reward = np.empty((T, n) if A == 1 else (T, n, A), np.float32)
        terminated, truncated = np.empty((T, n), bool), np.empty((T, n), bool)
        final_obs = np.empty_like(obs) if keep_final else None
        valid = np.ones((T, n), bool) if self.drop else None
        outputs: dict[str, np.ndarray] = {}   # act's packed outputs [T, n, K] per dtype
        for t in range(T):   # only what must happen per step: act, step, store
            if first is not None:   # acted on these observations inside the learn program
                packed = first
            else:
                packed, self.carry = self._act(acting, self.carry,
                                               self._device(self._rows(self.obs)), noise,
                                               self._steps[t])
            for dtype, x in jax.device_get(packed).items():
                x = self._host(x)
                if dtype not in outputs:
                    outputs[dtype] = np.empty((T, *x.shape), x.dtype)
                outputs[dtype][t] = x
            # the environment's action: the packed tuple's last leaf (one array), as a view
            env_action = self._unpack.leaf(outputs, -1)[t]
            out = self.envs.step(team.per_env(self.spec, env_action))
            if self.drop:
                out, valid[t] = self._drop_nonfinite(out, keep_final, t)
            else:
                self._check_finite(out, keep_final, t)
            obs[t], reward[t], terminated[t], truncated[t] = (self.obs, out.reward,
                                                              out.terminated, out.truncated)
            if keep_final:
                final_obs[t] = out.final_obs
            if has_carry:   # a new episode starts from a fresh carry
                done = out.terminated | out.truncated
                if done.any():
                    self.carry = self._reset_carry(self.carry, initial, self._put(
                        self._device(np.repeat(done, A))))
            self.obs = out.obs
        self.collected += 1
        finished_return, finished_length, self.episode_return, self.episode_length = \
            episode_sums(team.team_reward(self.spec, reward), terminated | truncated,
                         self.episode_return, self.episode_length)
        if self.drop:   # a dropped step ended no episode
            finished_return, finished_length = (np.where(valid, finished_return, 0),
                                                np.where(valid, finished_length, 0))
        action, extras, _ = self._unpack(outputs)
        steps = Transition(   # a team's: each agent a row, envs.team.step_rows's numpy twin
            obs=self._rows(obs, 1), action=action, reward=self._rows(reward, 1),
            terminated=self._repeat(terminated), truncated=self._repeat(truncated),
            finished_return=self._first_row(finished_return),
            finished_length=self._first_row(finished_length), extras=extras,
            final_obs=None if final_obs is None else self._rows(final_obs, 1),
            valid=None if valid is None else self._repeat(valid))
        # one array, one placement per update (a placement per leaf was ~40 % of a 1-env
        # SAC step's host time)
        packed = programs.pack_envs_host(Trajectory(steps, self._rows(self.obs), jax.tree.map(
            self._host, jax.device_get(first_carry))))
        return jax.make_array_from_process_local_data(   # a population's: [members, rows,
            self.obs_sharding, self._device(packed),      # bytes], each member's on its devices
            (*self.lead, self.num_envs * A, packed.shape[1]))

    def _rows(self, x: np.ndarray, axis: int = 0) -> np.ndarray:
        """A team's ``[..., n, A, ...]`` (environments, agents at ``axis``) -> ``[..., n x A,
        ...]`` (envs.team.rows); one agent: ``x``."""
        if self.A == 1:
            return x
        return x.reshape(*x.shape[:axis], -1, *x.shape[axis + 2:])

    def _repeat(self, x: np.ndarray) -> np.ndarray:
        """``[T, n]`` -> ``[T, n x A]``: an environment's value on each of its agents' rows."""
        return x if self.A == 1 else np.repeat(x, self.A, axis=1)

    def _first_row(self, x: np.ndarray) -> np.ndarray:
        """``[T, n]`` -> ``[T, n x A]``: on each environment's first row, zero on the others
        (a finished episode is counted once)."""
        if self.A == 1:
            return x
        rows = np.zeros((*x.shape, self.A), x.dtype)
        rows[..., 0] = x
        return rows.reshape(x.shape[0], -1)

    def _nonfinite(self, out: Any, keep_final: bool) -> dict[str, np.ndarray] | None:
        """Per part of a step (reward, observation, final observation where it is used), the
        environments [n] for which it is not finite; None if all are (the per-step fast
        path)."""
        parts = [("reward", out.reward)]
        if self.float_obs:
            parts += [("observation", out.obs)] + ([("final observation", out.final_obs)]
                                                   if keep_final else [])
        if all(np.isfinite(x).all() for _, x in parts):
            return None
        n = len(out.reward)
        bad = {name: ~np.isfinite(x).reshape(n, -1).all(axis=1) for name, x in parts}
        if "final observation" in bad:   # apart from the observation only where one ended
            bad["final observation"] &= out.terminated | out.truncated
        return bad

    def _drop_nonfinite(self, out: Any, keep_final: bool, t: int) -> tuple[Any, np.ndarray]:
        """``env_nonfinite: reset``: the environments whose step was not finite start a new
        episode (seeded from the run's seed, the env step and their global index) and the
        step is marked dropped as the programs mark it (``envs.base._drop_nonfinite``:
        terminated AND truncated, reward 0, the observation it acted on as its final one);
        returns the step and which environments' steps are valid [n]."""
        truncated = out.truncated & ~out.terminated   # the pair is the dropped mark only
        parts = self._nonfinite(out, keep_final)
        if parts is None:
            return out._replace(truncated=truncated), np.ones(len(out.reward), bool)
        bad = np.logical_or.reduce(list(parts.values()))
        step = self.collected * self.T + t + 1
        seeds = self._seeds([keys.host_env_reset_key(k, step) for k in self.seed_keys],
                            self.start, self.stop)
        fresh = self.envs.reset_some(seeds, bad)
        rows = bad.reshape(-1, *([1] * (out.obs.ndim - 1)))
        per_agent = bad.reshape(-1, *([1] * (out.reward.ndim - 1)))   # a team's [n, A]
        return out._replace(
            obs=np.where(rows, fresh, out.obs), reward=np.where(per_agent, 0, out.reward),
            terminated=out.terminated | bad, truncated=truncated | bad,
            final_obs=np.where(rows, self.obs, out.final_obs)), ~bad

    def _check_finite(self, out: Any, keep_final: bool, t: int) -> None:
        """Stop at an environment's non-finite output, before any of it is stored, learned
        from or saved (a NaN observation would otherwise reach the replay or the normalisers,
        and every later update would be skipped as non-finite): one line naming the
        environment, where and what."""
        bad = self._nonfinite(out, keep_final)
        if bad is None:
            return
        i = int(np.flatnonzero(np.logical_or.reduce(list(bad.values())))[0])
        what = " and ".join(name for name, b in bad.items() if b[i])
        member, e = divmod(i, self.stop - self.start)
        who = f"member {self.m0 + member}'s " if self.members else ""
        raise EnvError(
            f"{self.spec.name}: {who}environment {self.start + e} (process "
            f"{jax.process_index()}) returned a non-finite {what} at its env step "
            f"{self.collected * self.T + t + 1} (update {self.collected + 1}); nothing of "
            f"that update was learned or saved. Repair the environment, or resume with --set "
            f"env_nonfinite=reset to drop such steps and reset their environments")

    def updates(self, n: int) -> Callable[[RunState], tuple[RunState, dict]]:
        """``n`` updates: collect on this process's environments, learn on the mesh."""
        def run(state: RunState) -> tuple[RunState, dict]:
            metrics = []
            for _ in range(n):
                if self.learn_act is not None:   # one dispatch a step (:meth:`_fused_step`)
                    state, m = self._fused_step(state)
                    metrics.append(m)
                    continue
                if not self.overlap:
                    trajectory = self.collect(state.train)
                else:   # learn from the batch acted on during the last update, and act on
                    # the next one meanwhile with a copy of the parameters it starts from
                    trajectory = (self.pending if self.pending is not None
                                  else self.collect(state.train))
                    read = self._acting_leaves(state.train)   # copied before learn donates
                trajectory = self.unpack(trajectory)
                train, data, m = self.learn(state.train, state.data, trajectory)
                if self.overlap:   # runs while the learner's device updates
                    self.pending = self._collect(read)
                state = state._replace(train=train, data=data)
                if self.pbt_window is not None:   # PBT: the fitness windows, as fused
                    state = state._replace(pbt=self.pbt_window(state.pbt, trajectory))
                metrics.append(m)
            return state, self._stack(metrics)
        return run

    # ------------------------------------------------------------------ one dispatch a step

    def fusable(self) -> bool:
        """Whether each update can be ONE compiled call (:meth:`fuse_learn_act`): a rollout
        of one step (SAC, TD3, CrossQ: a gradient step per env step), a stateless policy, one
        run on a one-device mesh that acting shares (the environments of one process)."""
        return (self.T == 1 and self.on_mesh_device and not self.members
                and not jax.tree.leaves(self.carry))

    def fuse_learn_act(self) -> Any:
        """jit: (train, data, packed rollout) -> (train, data, metrics, the next step's act
        outputs): ``unpack`` and ``learn_next``, then ``prepare`` and ``act`` on the rollout's
        last observations with the parameters just learned, the next update's keys: what the
        next :meth:`collect` would dispatch as three more programs (so SAC stays SAC: it acts
        with the parameters of the update before, drawn from the same keys)."""
        unpack, learn, prepare, act = (self.unpack, self.learner.learn_next, self._prepare,
                                       self._act)
        read, row_ids, carry, step = self._read, self.row_ids, self.carry, self._steps[0]

        def learn_act(train, data, packed):
            trajectory = unpack(packed)
            train, data, metrics = learn(train, data, trajectory)
            leaves = jax.tree.leaves(train)
            acting, noise = prepare([leaves[i] for i in read], row_ids)
            outputs, _ = act(acting, carry, trajectory.last_obs, noise, step)
            return train, data, metrics, outputs
        return jax.jit(learn_act, donate_argnums=(0, 1))

    def _fused_step(self, state: RunState) -> tuple[RunState, dict]:
        """One update as one dispatch: the environments step with the actions the last call
        took (or, first, with actions acted here), then the learn program learns and acts."""
        first = self.next_actions if self.next_for is state.train else None
        trajectory = (self._collect(None, first) if first is not None
                      else self.collect(state.train))
        train, data, m, self.next_actions = self.learn_act(state.train, state.data,
                                                            trajectory)
        state = state._replace(train=train, data=data)
        self.next_for = state.train
        return state, m

    def lowered_acting(self) -> dict[str, Any]:
        """The acting programs lowered for this process's shapes: ``prepare`` (once per
        update) and ``act`` (once per env step): with ``unpack`` and the learner's
        ``learn_next``, every program an update of host environments dispatches (what ``bench
        kernels`` counts beside sbx's step)."""
        like = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in jax.tree.leaves(self.train_like)]
        read = [like[i] for i in self._read]
        acting, noise = jax.eval_shape(self._prepare, read, self.row_ids)
        obs = jax.ShapeDtypeStruct(self._rows(self.obs).shape, self.obs.dtype)
        return {"prepare": self._prepare.lower(read, self.row_ids),
                "act": self._act.lower(acting, self.carry, obs, noise, self._steps[0])}

    def abstract_packed(self) -> jax.ShapeDtypeStruct:
        """:meth:`collect`'s result as a ShapeDtypeStruct (to compile ``unpack`` ahead)."""
        width = programs.packed_width(self.local_like)   # bytes per environment
        return jax.ShapeDtypeStruct((*self.lead, self.num_envs * self.A, width), np.uint8,
                                    sharding=self.obs_sharding)

    def abstract_trajectory(self) -> Trajectory:
        """The global trajectory ``unpack`` makes, shapes and shardings (to compile
        ``learn_next`` ahead)."""
        placed = jax.tree.map(self.learner.layout.sharding,
                              programs.trajectory_partition(self.learner.layout),
                              is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
        like = self.trajectory_like(self.num_envs)
        return Trajectory(*(jax.tree.map(lambda x, s=s: jax.ShapeDtypeStruct(
            (*self.lead, *x.shape), x.dtype, sharding=s), t) for t, s in zip(like, placed)))

    def trajectory_like(self, num_envs: int) -> Trajectory:
        """The shapes of a trajectory of ``num_envs`` environments (a team's: its rows)."""
        spec, E, T = self.spec, num_envs * self.A, self.T
        obs = jax.ShapeDtypeStruct((E, *spec.obs_shape), np.dtype(spec.obs_dtype))
        local = self.train_like
        noise = jax.eval_shape(self._noise, local.key,
                               jax.ShapeDtypeStruct((E,), np.int32))
        carry = jax.eval_shape(lambda ids: rollout.initial_carries(self.agent, ids),
                               jax.ShapeDtypeStruct((E,), np.int32))
        acting = jax.eval_shape(lambda tr: self.agent.acting(tr), local)
        action, _, extras, _ = jax.eval_shape(self._act_shapes, acting, carry, obs, noise,
                                              jax.ShapeDtypeStruct((), np.int32))

        def over_time(x):
            return jax.ShapeDtypeStruct((T, *x.shape), x.dtype)
        scalar = lambda dtype: over_time(jax.ShapeDtypeStruct((E,), dtype))  # noqa: E731
        steps = Transition(
            obs=over_time(obs), action=over_time(action), reward=scalar(np.float32),
            terminated=scalar(np.bool_), truncated=scalar(np.bool_),
            finished_return=scalar(np.float32), finished_length=scalar(np.int32),
            extras=jax.tree.map(over_time, extras),
            final_obs=over_time(obs) if self.agent.keep_final_obs else None,
            valid=scalar(np.bool_) if self.drop else None)
        return Trajectory(steps, obs, carry)

    # ------------------------------------------------------------------ evaluation

    def evaluate(self, train: Any, seed_key: Any, _inputs: Any = ()) -> dict[str, jax.Array]:
        """One episode per evaluation environment (spread over the processes like training's),
        the deterministic policy unless ``eval_deterministic`` is false; the sums are reduced
        over every process, so all take the same decision. Keys as the on-device evaluation.
        A population's: every member's, ``[members]`` global arrays as its fused program's."""
        del seed_key   # self.seed_keys: this process's members'
        local = self._local(train)
        acting, policy_params = self._acting(local)
        update = int(np.asarray(local.update).reshape(-1)[0])   # every member's the same
        eval_keys = [keys.of_eval(k, update) for k in self.seed_keys]
        obs = self.eval_envs.reset(self._seeds([k.reset for k in eval_keys], self.eval_start,
                                               self.eval_stop))
        key_steps = np.stack([np.asarray(k.steps) for k in eval_keys])   # [Ml, 2]
        key_steps = self._put(key_steps if self.members else key_steps[0])
        n, A = self.Ml * (self.eval_stop - self.eval_start), self.A
        ids = self._put(np.arange(self.eval_start * A, self.eval_stop * A, dtype=np.int32))
        carry = self._initial_carry(ids)
        ret, length, done = np.zeros(n, np.float64), np.zeros(n, np.int64), np.zeros(n, bool)
        for t in range(self.spec.max_episode_steps):
            if done.all():
                break
            action, carry = self._eval_act(policy_params, acting, carry,
                                           self._put(self._device(self._rows(obs))), key_steps,
                                           np.int32(t), ids)
            out = self.eval_envs.step(team.per_env(self.spec, self._host(np.asarray(action))))
            ret += np.where(done, 0.0, team.team_reward(self.spec, out.reward))
            length += ~done
            done |= out.terminated | out.truncated
            obs = out.obs
        ret, length = ret.reshape(self.Ml, -1), length.reshape(self.Ml, -1)
        sums = np.zeros((self.members or 1, 4), np.float64)   # per member, over processes
        sums[self.m0:self.m1] = np.stack([ret.sum(1), np.square(ret).sum(1), length.sum(1),
                                          np.full(self.Ml, ret.shape[1])], axis=1)
        sums = distributed.allreduce_sum(sums)
        mean, var = moments_from_sums(*(jnp.float32(sums[:, i]) for i in (0, 1, 3)))
        result = {"return_mean": mean, "return_std": jnp.sqrt(var),
                  "length_mean": jnp.float32(sums[:, 2] / sums[:, 3])}
        if not self.members:
            return {k: v[0] for k, v in result.items()}
        layout = self.learner.layout   # as the fused evaluation's: on the member axis
        return layout.put({k: np.asarray(v) for k, v in result.items()}, layout.train)

    def close(self) -> None:
        for envs in (self.envs, self.eval_envs):
            if envs is not None:
                envs.close()
        self.envs = self.eval_envs = None
