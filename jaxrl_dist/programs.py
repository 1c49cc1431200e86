"""An :class:`~jaxrl_dist.agents.base.Agent`'s pure functions composed into the programs a run
calls, each ONE jitted ``shard_map`` over the layout's mesh, for any algorithm.

The agent is written for ONE member on ONE device; a population runs the same bodies under
``vmap`` over the members held by each device (the data-axis collectives then reduce each
member separately). Seeds and swept hyperparameters are arguments, never constants, so one
compiled program serves every seed of a sweep. :func:`make_learner` builds a run config's
algorithm (from the registry, :mod:`jaxrl_dist.agents`) into them.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

from jaxrl_dist import agents, compile_cache, keys, packed, population, rollout
from jaxrl_dist import pbt as pbt_lib
from jaxrl_dist.agents.base import EPISODE_METRICS, Agent, check_aggregations, check_metrics
from jaxrl_dist.config import Config
from jaxrl_dist import envs as envs_lib
from jaxrl_dist.envs import AUTORESETS, CompileOptions, EnvSpec, team
from jaxrl_dist.evaluate import make_eval_program
from jaxrl_dist.errors import ConfigError
from jaxrl_dist.sharding import REPLICATED, Layout, replicated_layout
from jaxrl_dist.sizes import Sizes
from jaxrl_dist.types import RunState, Trajectory, dropped


# Counted by the programs for every learner: updates whose changes were dropped because a loss,
# a gradient or the new parameters were not finite.
SKIPPED = "nonfinite_skipped"
# Flagged by the update programs of environments inside the program: 1 for an update in which
# an environment returned a non-finite reward, next observation or final observation (a row
# sums them over its updates), and the first such (environment, step) (smallest global
# environment index, then step) as ``(env x T + step) x 4 + what`` (what: 1 reward, 2
# observation, 3 both), -1 if none: ONE all-reduce (a pmin) per update. The trainer stops the
# run on them, naming the environment, before anything of that update is saved. A leading
# underscore: not a metrics row's column.
ENV_NONFINITE = "env_nonfinite"
ENV_NONFINITE_AT = "_env_nonfinite_at"
ENV_CHECKS = {ENV_NONFINITE: "sum", ENV_NONFINITE_AT: "last"}
# With ``env_nonfinite: reset`` instead: the steps the environments' resets dropped (each
# environment whose step was not finite), summed over every environment: ONE psum per update.
ENV_NONFINITE_RESETS = "env_nonfinite_resets"
ENV_RESETS = {ENV_NONFINITE_RESETS: "sum"}


def env_checks(drop_nonfinite: bool) -> dict[str, str]:
    """The metrics :func:`env_nonfinite` reports, and how a row aggregates them."""
    return ENV_RESETS if drop_nonfinite else ENV_CHECKS


# Episodes won, for environments with an outcome (an adapter's ``won``: SMAX); the rows report
# ``win_rate`` = episodes_won / episodes (reporting.member_rows).
OUTCOMES = {"episodes_won": "sum"}


def has_outcome(spec: EnvSpec) -> bool:
    return getattr(spec.adapter, "won", None) is not None


def outcomes(trajectory: Trajectory, axis: Any) -> dict[str, jax.Array]:
    """:data:`OUTCOMES` of one rollout, summed over ``axis``; {} without an outcome."""
    won = trajectory.steps.finished_won
    return {} if won is None else {"episodes_won": jax.lax.psum(jnp.sum(won), axis)}


def env_nonfinite(trajectory: Trajectory, env_ids: jax.Array | None, axis: Any,
                  drop_nonfinite: bool = False, agents: int = 1) -> dict[str, jax.Array]:
    """:data:`ENV_NONFINITE` and :data:`ENV_NONFINITE_AT` of one rollout ``[T, E_local]``
    (``env_ids``: the environments' global indices, one per row: ``agents`` rows per
    environment, ``envs.team``), reduced over ``axis`` (every device then holds the same
    values, as metrics do); with ``drop_nonfinite``, :data:`ENV_NONFINITE_RESETS` (the rollout
    then holds no such value; no ``env_ids``)."""
    steps = trajectory.steps
    if drop_nonfinite:
        count = jnp.sum(dropped(steps.terminated, steps.truncated)).astype(jnp.float32)
        if agents > 1:   # an environment's drop marks each of its rows
            count = count / agents
        return {ENV_NONFINITE_RESETS: jax.lax.psum(count, axis)}
    T = steps.reward.shape[0]

    def finite_rows(x: jax.Array) -> jax.Array:   # [T, E, ...] -> [T, E]
        return jnp.isfinite(x).reshape(*x.shape[:2], -1).all(-1)

    reward_bad = ~jnp.isfinite(steps.reward)
    obs_bad = jnp.zeros_like(reward_bad)
    if jnp.issubdtype(steps.obs.dtype, jnp.inexact):   # uint8 frames cannot be NaN
        reached = jnp.concatenate([steps.obs[1:], trajectory.last_obs[None]])
        obs_bad = ~finite_rows(reached)
        if steps.final_obs is not None:
            obs_bad |= ~finite_rows(steps.final_obs)
    what = reward_bad.astype(jnp.int32) + 2 * obs_bad.astype(jnp.int32)
    where = (env_ids[None, :] * T + jnp.arange(T, dtype=jnp.int32)[:, None]) * 4 + what
    none = jnp.iinfo(jnp.int32).max
    first = jax.lax.pmin(jnp.min(jnp.where(what > 0, where, none)), axis)
    return {ENV_NONFINITE: (first < none).astype(jnp.float32),
            ENV_NONFINITE_AT: jnp.where(first < none, first, -1)}


def keep_finite(before: Any, after: Any, metrics: dict[str, jax.Array]
                ) -> tuple[Any, dict[str, jax.Array]]:
    """``after`` if the update's learning metrics and new parameters are all finite, else
    ``before`` with only the update counter advanced, plus the :data:`SKIPPED` flag.

    The flag is computed from values every device of a member holds identically (metrics are
    reduced over the data axis; parameters are replicated), so every process takes the same
    decision without another collective. NaN or infinite gradients reach the parameters
    through optax's usual optimizers (not through ones that sanitise them, such as
    ``optax.zero_nans``), so checking the parameters covers them. One ``cond`` per
    update, measured cheaper than a select per leaf (~5 % of CartPole's small update) and than
    guarding every gradient step inside the learners (~10 %: XLA on CPUs did not fuse those
    selects into the optimizer); under a population's vmap it becomes the select."""
    watched = [jnp.asarray(v) for k, v in metrics.items() if k not in EPISODE_METRICS]
    watched += jax.tree.leaves(after.params)
    watched = [jnp.ravel(x).astype(jnp.float32) for x in watched
               if jnp.issubdtype(x.dtype, jnp.inexact)]
    # ONE reduction over everything watched (a concatenation XLA fuses into it), not one
    # per leaf: ~40 fewer kernels in CartPole's update program
    ok = jnp.all(jnp.isfinite(jnp.concatenate(watched))) if watched else jnp.bool_(True)
    kept = jax.lax.cond(ok, lambda a, b: a, lambda a, b: b, after, before)
    return kept._replace(update=after.update), {**metrics, SKIPPED: (~ok).astype(jnp.float32)}


class _Unrolled:
    """A jitted program traced and lowered with :func:`compile_cache.unrolled_threefry` (its
    random numbers without loops: fewer kernels to compile, the same bits), however it is
    called: directly, or ``.lower`` for ahead-of-time compiles."""

    def __init__(self, jitted: Any):
        self._jitted = jitted

    def __call__(self, *args: Any) -> Any:
        with compile_cache.unrolled_threefry():
            return self._jitted(*args)

    def lower(self, *args: Any) -> Any:
        with compile_cache.unrolled_threefry():
            return self._jitted.lower(*args)


def as_layout(layout: Layout | Mesh) -> Layout:
    return layout if isinstance(layout, Layout) else Layout(layout)


def compile_options(spec: EnvSpec, layout: Layout, drop_nonfinite: bool = False
                    ) -> CompileOptions:
    """How the programs of ``layout`` compile ``spec``'s steps: shard_map's varying-axis checks
    where the environment passes them (EnvSpec.shard_map_safe); with a population's members
    vmapped on each device, the lazy reset's predicate reduced over them and no checks
    (CompileOptions.batch_axis); ``drop_nonfinite`` (``env_nonfinite: reset``) for training's
    rollouts."""
    if not layout.members:
        return CompileOptions(check_vma=spec.shard_map_safe, drop_nonfinite=drop_nonfinite)
    return CompileOptions(check_vma=False, batch_axis=layout.member_vmap_axis,
                          drop_nonfinite=drop_nonfinite)


class EnvInputs(NamedTuple):
    """Arrays the environments need as program inputs: one pool per device for the training
    environments and one for evaluation (``[E, 8]`` handles sharded like the environments);
    ``()`` for environments written in JAX."""

    train: Any = ()
    eval: Any = ()


class Learner(NamedTuple):
    """An algorithm's programs over the layout's mesh; all take and return global arrays."""

    init: Callable[..., RunState]     # (seed key(s), swept hparams=None) -> RunState
    update: Any                       # jit: (RunState, n updates) -> (RunState, metrics
                                      #   {name: [n]} as one packed.Packed array);
                                      #   donates the state; static n
    learn: Any                        # jit: (train, data, Trajectory, key) -> (train, data,
                                      #   metrics): one update from given transitions
    collect: Any                      # jit: (train, actors, key) -> (actors, Trajectory)
    evaluate: Any                     # jit: (train, seed key(s), env_inputs.eval) -> {"return_mean",
                                      #   "return_std", "length_mean"}, reduced over the mesh
    abstract_state: Callable[[], RunState]   # init()'s result as ShapeDtypeStructs
    layout: Layout
    init_program: Any                 # jit behind init, to .lower() with options of one's own
    agent: Agent
    specs: RunState                   # each slot's PartitionSpec
    metrics: dict[str, str]           # what update/learn report: the agent's + SKIPPED
    env_inputs: EnvInputs = EnvInputs()  # what init_program and evaluate take last: the
                                      #   handles of pool environments (envs.pool), or ()
    restored: Callable[[RunState], RunState] = lambda state: state
    #   a restored state -> the state to train from (the learner's ``new_actors`` when the
    #   actors were rebuilt rather than restored)
    learn_next: Any = None            # jit: (train, data, Trajectory) -> (train, data,
                                      #   metrics): one update of the fused loop from given
                                      #   transitions (its key split as the update splits it),
                                      #   donating train and data: what host actors feed
    replicated: bool = False          # learn_next learns the whole batch on every device
    acts_whole: bool = False          # every device also steps every environment
                                      #   (replicate_act: the one-device program on each)
    exploit: Any = None               # with PBT, jit: (train, pbt, seed key, fitness [M] or
                                      #   None) -> (train, pbt, pbt.Round): one round over the
                                      #   whole member axis, donating train and pbt
    pbt: Any = None                   # pbt.Settings with PBT on
    drop_nonfinite: bool = False      # env_nonfinite: reset (host actors drop such steps)
    pbt_window: Any = None            # with PBT on host environments, jit: (pbt, Trajectory)
                                      #   -> pbt: an update's finished episodes into each
                                      #   member's fitness window (the fused update's own step),
                                      #   a program apart so learn_next stays bit for bit
    speed_options: dict | None = None  # XLA options the update (learn_next on host
                                      #   environments) compiles with: on GPUs, whole loops
                                      #   in CUDA graphs (compile_cache.speed_options)


class RunSettings(NamedTuple):
    """What the programs take from the run config besides the agent's own section."""

    eval_episodes: int
    eval_deterministic: bool
    swept: tuple[str, ...] = ()   # names of the hyperparameters held as arrays in the state
    pbt: Any = None               # pbt.Settings with PBT on, else None
    drop_nonfinite: bool = False  # env_nonfinite: reset

    @classmethod
    def of(cls, config: Config) -> RunSettings:
        return cls(config.eval_episodes, config.eval_deterministic,
                   tuple(population.hparam_name(k) for k in population.hparam_keys(config)),
                   pbt_lib.settings(config) if config.pbt.enabled else None,
                   config.env_nonfinite == "reset")


def make_learner(config: Config, sizes: Sizes, spec: EnvSpec, layout: Layout | Mesh) -> Learner:
    """The programs of ``config``'s algorithm (``algo:``, from the registry) for ``spec`` over
    ``layout``. The algorithm's own code receives its section and the derived sizes, never the
    whole run config."""
    layout = as_layout(layout)
    replicated = replicates(config, spec, layout)   # the same algorithm, for the whole batch
    acting_whole = replicated and acts_whole(config, spec)   # the one-device program on each
    algorithm = agents.get(config.algo)
    if spec.num_agents > 1 and not algorithm.teams:
        raise ConfigError(f"algo {config.algo} trains one agent per environment, and "
                          f"{spec.name} has {spec.num_agents}: use algo: ppo (IPPO: one policy "
                          f"shared by the agents), or a single-agent environment")
    factory = algorithm.agent_factory()

    def make(sizes: Sizes, layout: Layout) -> Agent:   # an agent sees rows: envs x agents
        rows = sizes if spec.num_agents == 1 else dataclasses.replace(
            sizes, local_envs=sizes.local_envs * spec.num_agents)
        return factory(config.agent, rows, spec, layout)

    whole = None
    if replicated:
        one = dataclasses.replace(sizes, num_devices=1,
                                  local_envs=sizes.local_envs * layout.data_size)
        whole_layout = replicated_layout(layout)
        whole = make(one, whole_layout)
        if acting_whole:
            agent, sizes, layout, whole = whole, one, whole_layout, None
    if not acting_whole:
        agent = make(sizes, layout)
    learner = build(agent, sizes, spec, layout, RunSettings.of(config), whole=whole)
    return learner._replace(replicated=replicated, acts_whole=acting_whole,
                            speed_options=compile_cache.speed_options(
                                learner.layout.mesh.devices.flat, config.gpu_command_buffers))


def replicates(config: Config, spec: EnvSpec, layout: Layout) -> bool:
    """Whether every device learns from the whole batch (``replicate_learn``).

    Auto (null) turns it on where a learner's all-reduces would cross processes over CPU
    collectives (gloo: 0.2-1.4 ms each here; a PPO update has hundreds, DQN and SAC one or
    more per gradient step); an explicit true for a population is a one-line error.
    ``replicate_act: true`` asks for it too (acting whole is learning whole, and more)."""
    auto = config.replicate_learn is None and not config.replicate_act
    if config.replicate_learn is False:
        if config.replicate_act:
            raise ConfigError("replicate_act=true needs replicate_learn (set false here): "
                              "remove one of them")
        return False
    if layout.members:
        if auto:
            return False
        key = "replicate_learn" if config.replicate_learn else "replicate_act"
        raise ConfigError(f"{key} applies to a single run, not to populations (their "
                          f"members already learn apart); remove it or the population: section")
    devices = list(layout.mesh.devices.flat)
    if auto and (devices[0].platform != "cpu"
                 or len({d.process_index for d in devices}) < 2):
        return False
    return layout.data_size > 1   # one device already learns from the whole batch


def acts_whole(config: Config, spec: EnvSpec) -> bool:
    """Whether, learning the whole batch, every device also steps every environment
    (``replicate_act``): auto for environments whose state lives in JAX, whose steps are
    then cheaper than the all-gather of a cross-process update; never for host ones (each
    process steps its own) or pools (a simulator outside JAX, its stepping the cost)."""
    if config.replicate_act is False:
        return False
    if spec.on_host or spec.state_outside_jax:
        if config.replicate_act:
            where = "on the host" if spec.on_host else "outside JAX"
            raise ConfigError(f"replicate_act: {spec.name} is stepped {where}, once per "
                              f"process; remove replicate_act (replicate_learn still applies)")
        return False
    return True


def _env_first(trajectory: Trajectory) -> Trajectory:
    """Steps ``[T, E, ...]`` <-> ``[E, T, ...]`` (its own inverse); the rest is ``[E, ...]``."""
    return trajectory._replace(steps=jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1),
                                                  trajectory.steps))


def pack_envs(trajectory: Trajectory) -> jax.Array:
    """A trajectory as ONE ``uint8 [E, bytes]`` array, environments first: what
    ``replicate_learn`` gathers to every device in one all-gather (between processes each
    collective is a round trip, whatever its size), and what host actors hand the learner
    (:func:`pack_envs_host`, one transfer per update whatever the trajectory's leaves)."""
    leaves = jax.tree.leaves(_env_first(trajectory))
    E = leaves[0].shape[0]

    def as_bytes(x):
        x = x.astype(jnp.uint8) if x.dtype == jnp.bool_ else x
        if x.dtype.itemsize > 1:
            x = jax.lax.bitcast_convert_type(x, jnp.uint8)
        return x.reshape(E, int(np.prod(x.shape[1:])))
    return jnp.concatenate([as_bytes(x) for x in leaves], axis=1)


def pack_envs_host(trajectory: Trajectory) -> np.ndarray:
    """:func:`pack_envs` of numpy arrays, byte for byte (tested): a host trajectory becomes
    one array before it is placed on the mesh, instead of one placement per leaf."""
    steps = jax.tree.map(lambda x: np.swapaxes(x, 0, 1), trajectory.steps)
    leaves = jax.tree.leaves(trajectory._replace(steps=steps))
    E = leaves[0].shape[0]
    return np.concatenate([np.ascontiguousarray(x).reshape(E, int(np.prod(x.shape[1:])))
                           .view(np.uint8) for x in leaves], axis=1)


def _byte_widths(leaves: list[Any]) -> list[int]:
    """Bytes per environment of each environments-first leaf, as :func:`pack_envs` lays them."""
    return [int(np.prod(x.shape[1:])) * x.dtype.itemsize for x in leaves]


def packed_width(like: Trajectory) -> int:
    """Bytes per environment of :func:`pack_envs` for a trajectory shaped like ``like``."""
    return sum(_byte_widths(jax.tree.leaves(jax.eval_shape(_env_first, like))))


def unpack_envs(packed: jax.Array, like: Trajectory) -> Trajectory:
    """:func:`pack_envs`'s inverse: ``like`` holds the trajectory's shapes and dtypes
    (ShapeDtypeStructs), its environment count that of ``packed``."""
    leaves, treedef = jax.tree.flatten(jax.eval_shape(_env_first, like))
    columns = jnp.split(packed, np.cumsum(_byte_widths(leaves))[:-1], axis=1)

    def from_bytes(column, x):
        if x.dtype == jnp.bool_:
            return column.reshape(x.shape).astype(jnp.bool_)
        if x.dtype.itemsize == 1:
            return jax.lax.bitcast_convert_type(column.reshape(x.shape), x.dtype)
        return jax.lax.bitcast_convert_type(column.reshape(*x.shape, x.dtype.itemsize), x.dtype)
    return _env_first(jax.tree.unflatten(treedef, [from_bytes(c, x)
                                                   for c, x in zip(columns, leaves)]))


def trajectory_partition(layout: Layout) -> Trajectory:
    """Where a trajectory's arrays live: steps ``[T, E, ...]`` (time unsharded, environments
    on the data axis), the rest ``[E, ...]``."""
    over_time = P(*layout.envs[:-1], None, layout.envs[-1])
    return Trajectory(over_time, layout.envs, layout.envs)


def unpacking(layout: Layout, like: Trajectory) -> Any:
    """jit: a global packed trajectory (:func:`pack_envs_host`'s rows, ``uint8 [E, bytes]`` on
    the data axis) -> the Trajectory ``learn_next`` takes, each device unpacking its own rows
    (``like``: one device's shapes). A program of its own, so ``learn_next`` stays the
    program it was, bit for bit: fused into it, XLA laid a MuJoCo PPO update out otherwise
    and its last bits moved."""
    def unpack(packed):
        return unpack_envs(packed, like)
    body = jax.vmap(unpack) if layout.members else unpack   # a population: per member
    return jax.jit(jax.shard_map(body, mesh=layout.mesh, in_specs=layout.envs,
                                 out_specs=trajectory_partition(layout)))


def build(agent: Agent, sizes: Sizes, spec: EnvSpec, layout: Layout,
          settings: RunSettings, whole: Agent | None = None) -> Learner:
    """``agent``'s programs over ``layout``, stepping ``spec`` (what the agent was made with)
    as :func:`compile_options` compiles it for ``layout``.

    ``whole`` (``replicate_learn``): the same algorithm made for the whole batch on
    :func:`replicated_layout`'s mesh. ``agent`` still acts on each device's environments;
    each update's trajectory is then gathered to every device (:func:`pack_envs`: one
    all-gather) and ``whole`` learns from all of it there, its data (a replay) held whole on
    every device: no collective inside learning, the one-device program on every device."""
    check_aggregations(agent)
    drop = settings.drop_nonfinite
    if drop and spec.pool is not None:
        from jaxrl_dist.envs import EnvError
        raise EnvError(f"{spec.name}: env_nonfinite=reset cannot reset one environment of a "
                       f"pool stepped outside JAX; remove env_nonfinite or set it to error")
    options = compile_options(spec, layout, drop)
    mesh, E = layout.mesh, sizes.local_envs
    pbt = settings.pbt if layout.members else None
    if pbt is not None:   # its round, windows and lineage make a resume exact
        agent = agent._replace(checkpointed=agent.checkpointed._replace(pbt=True))
    learner = agent if whole is None else whole   # who learns (and so inits the data)
    data_spec = layout.envs if whole is None else REPLICATED
    specs = RunState(layout.train, layout.envs, data_spec, layout.train if pbt else ())
    host = spec.on_host   # stepped by the host driver (jaxrl_dist.drivers.host)
    agent, env_inputs, input_specs = _environments(agent, spec, layout, host,
                                                   E * layout.data_size, settings.eval_episodes)

    bodies = _device_bodies(agent, learner, spec, layout, options, E, pbt, host)
    init_body, update_body, learn_body = bodies.init, bodies.update, bodies.learn
    collect_body, learn_next_local = bodies.collect, bodies.learn_next

    def smap(body, in_specs, out_specs):
        return jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                             check_vma=options.check_vma)

    # out_shardings spelled out: XLA would hand zero-size outputs (MJX states have some)
    # back replicated in a multi-process job, not in the shardings the update compiles for.
    state_out = RunState(*(layout.sharding(s) if isinstance(s, P) else s for s in specs))
    init_program = jax.jit(smap(init_body, (layout.train, layout.train, input_specs.train),
                                specs), out_shardings=state_out)

    abstract_from = init_program   # traced only (eval_shape): no lowering rule involved
    if compile_cache.unroll_init():   # its random numbers unrolled: CartPole PPO's init
        init_program = _Unrolled(init_program)   # 44 -> 36 kernels, the same bits
    init = _CompiledOnce(init_program, mesh, env_inputs.train)
    restored = _restored(agent, layout, data_spec, smap)

    trajectory_specs = trajectory_partition(layout)
    collect_smap = smap(collect_body, (layout.train, layout.envs, layout.train),
                        (layout.envs, trajectory_specs))
    collect = jax.jit(collect_smap)
    if whole is None:
        def update(state: RunState, num_updates: int):
            body = smap(lambda s: update_body(s, num_updates), (specs,), (specs, layout.train))
            return body(state)

        learn_smap = smap(learn_body, (layout.train, data_spec, trajectory_specs, layout.train),
                          (layout.train, data_spec, layout.train))
        learn_next_smap = smap(learn_next_local, (layout.train, data_spec, trajectory_specs),
                               (layout.train, data_spec, layout.train))
    else:
        learn_smap = _learn_whole(whole, agent, spec, layout, smap, trajectory_specs, drop)

        def learn_next_smap(train, data, trajectory):
            k = keys.of_update(train.key)   # the host actors acted with k.act
            return learn_smap(train._replace(key=k.next), data, trajectory, k.learn)

        def update(state: RunState, num_updates: int):   # one_update's, across two meshes
            def step(state, _):
                k = keys.of_update(state.train.key)
                actors, trajectory = collect_smap(state.train, state.actors, k.act)
                train, data, metrics = learn_smap(state.train._replace(key=k.next),
                                                  state.data, trajectory, k.learn)
                return RunState(train, actors, data, ()), packed.pack(metrics)
            return jax.lax.scan(step, state, None, length=num_updates)

        state_shardings = tuple(layout.sharding(x) for x in (layout.train, data_spec,
                                                              layout.train))
    # the whole-batch programs' outputs spelled out, as init's are (zero-size MJX leaves);
    # the split ones keep jit's inferred outputs, as they always had
    placed = {} if whole is None else dict(out_shardings=state_shardings)
    update = jax.jit(update, static_argnums=1, donate_argnums=0, **(
        {} if whole is None else dict(out_shardings=(state_out, layout.sharding(layout.train)))))
    if agent.unroll_threefry:
        update = _Unrolled(update)
    learn = jax.jit(learn_smap, **placed)

    learn_next = jax.jit(learn_next_smap, donate_argnums=(0, 1), **placed)

    abstract_state = _abstract_state(abstract_from, env_inputs, layout, specs, settings)

    exploit = None if pbt is None else _exploit_program(layout, pbt)
    pbt_window = None
    if pbt is not None and host:
        def window(rounds, trajectory):
            steps = trajectory.steps
            return pbt_lib.accumulate(rounds, pbt_lib.episode_sums(
                steps.finished_return, steps.finished_length, layout.data_axis))
        pbt_window = jax.jit(smap(jax.vmap(window, axis_name=layout.member_vmap_axis),
                                  (layout.train, trajectory_specs), layout.train),
                             donate_argnums=0)

    evaluate = None if host else make_eval_program(   # host actors evaluate on the host
        agent, spec, layout, settings.eval_episodes, settings.eval_deterministic, options,
        input_specs.eval)
    # the evaluation takes the fenced hash (compile_cache): unrolled, 2 fewer kernels but ~40 %
    # more compile, which a cold run pays beside its first calls

    return Learner(init, update, learn, collect, evaluate, abstract_state, layout, init_program,
                   agent, specs, {**agent.metrics, SKIPPED: "sum", **env_checks(drop),
                                  **(OUTCOMES if has_outcome(spec) else {})},
                   env_inputs,
                   restored, learn_next,
                   replicated=whole is not None, exploit=exploit, pbt=pbt,
                   drop_nonfinite=drop, pbt_window=pbt_window)


class _Bodies(NamedTuple):
    """One device's bodies of the programs (a population's vmapped over its members)."""

    init: Callable         # (seed key(s), swept, handles) -> RunState
    update: Callable       # (RunState, n) -> (RunState, metrics [n] as one packed.Packed)
    learn: Callable        # (train, data, Trajectory, key) -> (train, data, metrics)
    collect: Callable      # (train, actors, key) -> (actors, Trajectory)
    learn_next: Callable   # (train, data, Trajectory) -> (train, data, metrics): host actors'


def _device_bodies(agent: Agent, learner: Agent, spec: EnvSpec, layout: Layout,
                   options: CompileOptions, E: int, pbt: Any, host: bool) -> _Bodies:
    """The bodies :func:`build` maps over the mesh: ``agent`` acts on this device's ``E``
    environments, ``learner`` (``agent``, or the whole-batch one) learns and inits the data."""
    axis, T, drop = layout.data_axis, agent.steps_per_env, options.drop_nonfinite

    def params_of(seed_key):
        return agent.init_params(keys.of_seed(seed_key).params)

    def init_local(seed_key, swept, params, handles):
        seed = keys.of_seed(seed_key)
        rounds = pbt_lib.init(pbt) if pbt else ()
        env_ids = rollout.local_env_ids(E, axis)
        actors = () if host else rollout.reset_actors(
            spec, agent, keys.per_env(seed.envs, env_ids), handles)
        train, data = learner.init(seed.train, params, swept)
        return RunState(train, actors, data, rounds)

    def collect_local(train, actors, key):
        env_ids = rollout.local_env_ids(E, axis)
        carry = actors.carry
        actors, steps = rollout.collect(spec, agent, agent.acting(train), actors, env_ids, key, T,
                                        options.batch_axis, options.drop_nonfinite)
        return actors, Trajectory(steps, rollout.last_obs(spec, actors), carry)

    def learn_local(train, data, trajectory, key):
        learned, data, metrics = learner.learn(train, data, trajectory, key)
        check_metrics(agent, metrics)
        learned, metrics = keep_finite(train, learned, metrics)
        return learned, data, metrics

    def learn_next_local(train, data, trajectory):
        k = keys.of_update(train.key)   # the host actors acted with k.act
        train, data, metrics = learn_local(train._replace(key=k.next), data, trajectory, k.learn)
        if drop:   # the host actors dropped them (the error kind stops on the host)
            metrics = {**metrics, **env_nonfinite(trajectory, None, axis, drop,
                                                  spec.num_agents)}
        return train, data, metrics

    def one_update(state: RunState, _):
        k = keys.of_update(state.train.key)
        actors, trajectory = collect_local(state.train, state.actors, k.act)
        train, data, metrics = learn_local(state.train._replace(key=k.next), state.data,
                                           trajectory, k.learn)
        env_ids = team.repeat(spec, rollout.local_env_ids(E, axis))   # one per row
        metrics = {**metrics, **env_nonfinite(trajectory, env_ids, axis, drop,
                                              spec.num_agents), **outcomes(trajectory, axis)}
        window = pbt_lib.accumulate(state.pbt, pbt_lib.episode_sums(
            trajectory.steps.finished_return, trajectory.steps.finished_length, axis)
        ) if pbt else ()
        # one vector an update (packed.Packed): the scan stacks one array, not one a metric
        return RunState(train, actors, data, window), packed.pack(metrics)

    def update_local(state: RunState, num_updates: int):
        return jax.lax.scan(one_update, state, None, length=num_updates)

    if layout.members:   # the same bodies, vmapped over this device's members
        def init_body(seed_keys, swept, handles):
            # Parameters member by member (lax.map, not vmap): the orthogonal initializer's
            # batched LAPACK QR deadlocked 2-device CPU programs (jaxlib 0.10.2), and this way
            # member k starts from exactly the single run's parameters.
            return jax.vmap(init_local, (0, 0, 0, None))(
                seed_keys, swept, jax.lax.map(params_of, seed_keys), handles)
        vmapped = dict(axis_name=layout.member_vmap_axis)
        update_body = jax.vmap(update_local, in_axes=(0, None), **vmapped)
        learn_body = jax.vmap(learn_local, **vmapped)
        collect_body = jax.vmap(collect_local, **vmapped)
        learn_next_body = jax.vmap(learn_next_local, **vmapped)
    else:
        def init_body(seed_key, swept, handles):
            return init_local(seed_key, swept, params_of(seed_key), handles)
        update_body, learn_body, collect_body = update_local, learn_local, collect_local
        learn_next_body = learn_next_local
    return _Bodies(init_body, update_body, learn_body, collect_body, learn_next_body)


def _abstract_state(init_program: Any, env_inputs: EnvInputs, layout: Layout,
                    specs: RunState, settings: RunSettings) -> Callable[[], RunState]:
    """``init_program``'s result as ShapeDtypeStructs with shardings, traced once."""
    abstract: list[RunState] = []   # traced once: the checkpoint's digest thread asks too
    abstract_lock = threading.Lock()

    def abstract_state() -> RunState:
        """What init() returns, as ShapeDtypeStructs with shardings: lets the update program
        compile without (and concurrently with) running init."""
        with abstract_lock:
            if not abstract:
                abstract.append(trace())
            return abstract[0]

    def trace() -> RunState:
        lead = (layout.members,) if layout.members else ()
        key = jax.ShapeDtypeStruct((*lead, 2), jnp.uint32)
        swept = {name: jax.ShapeDtypeStruct(lead, jnp.float32) for name in settings.swept}
        shapes = jax.eval_shape(lambda k, s: init_program(k, s, env_inputs.train), key, swept)
        def like(slot, spec):
            return jax.tree.map(lambda x: jax.ShapeDtypeStruct(
                x.shape, x.dtype, sharding=layout.sharding(spec)), slot)

        return RunState(*map(like, shapes, specs))

    return abstract_state


def _exploit_program(layout: Layout, pbt: Any) -> Any:
    """PBT's round: it sees the whole member axis, so a jit over the global arrays."""
    on_member = layout.sharding(layout.train)
    replicated = layout.sharding(P())

    def one_round(train, state, seed_key, fitness):
        return pbt_lib.step(train, state, seed_key, pbt, fitness)
    return _Unrolled(jax.jit(one_round, donate_argnums=(0, 1),
                             out_shardings=(on_member, on_member, replicated)))


def _learn_whole(whole: Agent, agent: Agent, spec: EnvSpec, layout: Layout, smap: Callable,
                 trajectory_specs: Trajectory, drop_nonfinite: bool) -> Callable[..., Any]:
    """``replicate_learn``'s learn, over global arrays: the trajectory packed on the run's mesh
    and gathered to every device in ONE all-gather (the reshard into the whole-batch mesh),
    then ``whole`` (made for :func:`replicated_layout`) learns from all of it on every device,
    its data held whole (replicated) on every device."""
    whole_layout = replicated_layout(layout)
    pack = smap(pack_envs, (trajectory_specs,), layout.envs)

    def learn(train, data, trajectory, key):
        like = jax.eval_shape(lambda t: t, trajectory)

        def body(train, data, packed, key):
            trajectory = unpack_envs(packed, like)   # every environment's, on every device
            learned, data, metrics = whole.learn(train, data, trajectory, key)
            check_metrics(agent, metrics)
            learned, metrics = keep_finite(train, learned, metrics)
            axis = whole_layout.data_axis   # one device: reduces nothing, types the values
            envs = trajectory.last_obs.shape[0] // spec.num_agents
            env_ids = team.repeat(spec, rollout.local_env_ids(envs, axis))   # one per row
            return learned, data, {**metrics, **env_nonfinite(trajectory, env_ids, axis,
                                                               drop_nonfinite, spec.num_agents),
                                   **outcomes(trajectory, axis)}
        train_spec, envs_spec = whole_layout.train, whole_layout.envs
        return jax.shard_map(
            body, mesh=whole_layout.mesh, in_specs=(train_spec, envs_spec, envs_spec, train_spec),
            out_specs=(train_spec, envs_spec, train_spec),
            check_vma=compile_options(spec, whole_layout).check_vma,
        )(train, data, pack(trajectory), key)
    return learn


def _environments(agent: Agent, spec: EnvSpec, layout: Layout, host: bool, num_envs: int,
                  eval_episodes: int) -> tuple[Agent, EnvInputs, EnvInputs]:
    """The agent as the programs keep it for ``spec`` (no actors in checkpoints when the
    environments' state lives outside JAX), and what the programs take besides the state (a
    pool per device, :func:`envs.program_inputs`) with its partition specs."""
    if spec.state_outside_jax:   # checkpoints leave the actors out; fresh episodes on resume
        if layout.members and not host:   # a pool's handles are per device, not per member
            from jaxrl_dist.envs import EnvError
            raise EnvError(f"{spec.name}: populations do not run environments stepped "
                           f"outside JAX ({AUTORESETS[spec.autoreset]}) yet; train each seed "
                           f"as its own run")
        agent = agent._replace(checkpointed=agent.checkpointed._replace(actors=False))
    inputs = None if host else envs_lib.program_inputs(
        spec, layout.sharding(layout.envs), num_envs, eval_episodes)
    if inputs is None:
        return agent, EnvInputs(), EnvInputs()
    return agent, EnvInputs(*inputs), EnvInputs(layout.envs, layout.envs)


class _CompiledOnce:
    """``init_program`` compiled as the trainer compiles it (it runs once: the cheaper options
    of :func:`compile_cache.run_once_options`), once per kind of input. A driver may lower it
    (:meth:`lower`) and hand the compile to a worker thread (:meth:`adopt` its result), so the
    compile runs while the update is traced; a call compiles whatever was not adopted."""

    def __init__(self, init_program: Any, mesh: Mesh, env_inputs: Any):
        self.program, self.env_inputs = init_program, env_inputs
        self.options = compile_cache.run_once_options(mesh.devices.flat)
        self.compiled: dict[Any, Any] = {}

    def _args(self, seed_key: jax.Array, swept: dict[str, jax.Array] | None) -> tuple:
        return (seed_key, swept or {}, self.env_inputs)

    @staticmethod
    def _kind(args: tuple) -> Any:
        return (jax.tree.structure(args), tuple(
            (np.shape(x), x.dtype if hasattr(x, "dtype") else np.result_type(x),
             getattr(x, "sharding", None))
            for x in jax.tree.leaves(args)))

    def lower(self, seed_key: jax.Array, swept: dict[str, jax.Array] | None = None
              ) -> tuple[Any, Callable[[], Any]]:
        """(the kind of these inputs, a function that compiles the lowered program: for a
        worker thread)."""
        args = self._args(seed_key, swept)
        lowered = self.program.lower(*args)
        return self._kind(args), lambda: lowered.compile(self.options)

    def adopt(self, kind: Any, compiled: Any) -> None:
        self.compiled[kind] = compiled

    def __call__(self, seed_key: jax.Array, swept: dict[str, jax.Array] | None = None
                 ) -> RunState:
        args = self._args(seed_key, swept)
        kind = self._kind(args)
        if kind not in self.compiled:
            self.compiled[kind] = self.program.lower(*args).compile(self.options)
        return self.compiled[kind](*args)


def _restored(agent: Agent, layout: Layout, data_spec: P,
              smap: Callable) -> Callable[[RunState], RunState]:
    """A restored state -> the state to train from: the learner's ``new_actors`` applied to
    its data when the actors were rebuilt rather than restored (fresh episodes)."""
    if (agent.new_actors is None or agent.checkpointed.actors
            or not agent.checkpointed.data):
        return lambda state: state
    body = (jax.vmap(agent.new_actors, axis_name=layout.member_vmap_axis)
            if layout.members else agent.new_actors)
    cut = jax.jit(smap(body, (data_spec,), data_spec), donate_argnums=0)
    return lambda state: state._replace(data=cut(state.data))
