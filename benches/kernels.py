"""bench kernels: how many XLA:CPU kernels each compiled program has, ours and rejax's.

Compile TIME on a shared VM drifts by a third within a day; the number of kernels XLA:CPU
compiles for a program does not, and cold compile time follows it (each kernel costs about the
same codegen, 20-40 ms on the 2-core AMD EPYC VM, whatever its size). Counted from a profiler
trace of each compile (XLA's ``FusionCompiler::Compile`` events, one per kernel); the compile
time under the profiler is reported beside it. Ours: the init, update and evaluation programs
of ``--config`` on one CPU device, lowered and compiled as the trainer does; rejax: its one ``train``
program (init, updates and evaluation) on the same task and hyperparameters as ``bench rejax``.
A SAC config on a host environment (``gymnasium:``) is counted per environment step instead:
ours, every program an update dispatches (one env step a rollout on one device: ``learn_act``,
the update and the next step's acting as one program; otherwise ``learn_next``, ``unpack``,
acting's ``prepare`` and ``act``), beside sbx's SAC step (its ``_train`` at one gradient step and ``sample_action``) on
the same task, in sbx's own venv (``benches/peers/sbx/make_venv.sh``).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

from benches.common import VENVS, run_command
from benches.rejax import PEERS, REJAX_CARTPOLE, rejax_python
from jaxrl_dist.protocol import CPU_SCHEDULER_FLAG

COUNT = textwrap.dedent("""
    def count(lowered, options=None):
        import collections, glob, gzip, json, os, re, tempfile, time, jax
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            with jax.profiler.trace(tmp, create_perfetto_trace=True):
                compiled = lowered.compile(options)
            seconds = time.perf_counter() - start
            path, = glob.glob(f"{tmp}/**/*.trace.json.gz", recursive=True)
            with gzip.open(path) as f:
                events = json.load(f)
        events = events["traceEvents"] if isinstance(events, dict) else events
        modules = [e.get("args", {}).get("module", "") for e in events
                   if e.get("ph") == "X" and e.get("name") == "FusionCompiler::Compile"]
        out = {"kernels": len(modules), "compile_s": seconds}
        depth = int(os.environ.get("KERNELS_BY_OP", "0"))
        if depth:   # each kernel's module named after its HLO instruction: its op_name's prefix
            op = dict(re.findall(r'%?([\\w.-]+) = [^\\n]*?op_name="([^"]+)"', compiled.as_text()))
            groups = collections.Counter()
            for module in modules:
                # XLA names a kernel's module "<instruction>_kernel_module" or
                # "__compute_module_<instruction>"
                name = module.removesuffix("_kernel_module").removeprefix("__compute_module_")
                names = (name, name.removeprefix("wrapped_"))
                candidates = [*names, *(re.sub(r"_(\\d+)$", r".\\1", n) for n in names)]
                where = next((op[c] for c in candidates if c in op), None)
                groups["(no op name)" if where is None
                       else "/".join(where.split("/")[:depth])] += 1
            out["by_op"] = dict(groups.most_common())
        return out
""")

# ours: --config's learner on one CPU device, built as the trainer builds it
SETUP = textwrap.dedent("""
    import json, sys
    import jax
    from jaxrl_dist import compile_cache, config as config_lib, sharding, sizes as sizes_lib
    from jaxrl_dist.programs import make_learner
    from jaxrl_dist.envs import from_config
    compile_cache.install_fenced_threefry()   # as the trainer does, before anything lowers
    config = config_lib.load(sys.argv[1], sys.argv[2:])
    layout = sharding.make_layout(jax.devices()[:1])
    sizes = sizes_lib.derive_sizes(config, layout.data_size)
    spec = from_config(config, None, None)
    learner = make_learner(config, sizes, spec, layout)
    abstract = learner.abstract_state()
""")

OURS = COUNT + SETUP + textwrap.dedent("""
    key = jax.random.PRNGKey(config.seed)
    once = compile_cache.run_once_options(layout.mesh.devices.flat)   # as the trainer does
    update = learner.update.lower(abstract, sizes.updates_per_call)   # threefry unrolled
    inputs = learner.env_inputs
    programs = {"init": (learner.init_program.lower(key, {}, inputs.train), once),
                "update": (update, None),
                "evaluate": (learner.evaluate.lower(abstract.train, key, inputs.eval), once)}
    print(json.dumps({name: count(*args) for name, args in programs.items()}))
""")

REJAX = COUNT + REJAX_CARTPOLE + textwrap.dedent("""
    import json, jax
    print(json.dumps({"train": count(jax.jit(algo.train).lower(jax.random.PRNGKey(0)))}))
""")

# rejax's DQN or PQN with its own CartPole config, or its SAC with its own Pendulum config
# (benches/peers/rejax_configs.py, as ``bench rejax``): its one train program
REJAX_Q = COUNT + textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[3])
    import jax
    from rejax import DQN, PQN, SAC
    from rejax_configs import REJAX_CARTPOLE_DQN, REJAX_CARTPOLE_PQN, REJAX_PENDULUM_SAC
    cls, config = {"dqn": (DQN, REJAX_CARTPOLE_DQN), "pqn": (PQN, REJAX_CARTPOLE_PQN),
                   "sac": (SAC, REJAX_PENDULUM_SAC)}[sys.argv[1]]
    algo = cls.create(**{**config, "total_timesteps": int(sys.argv[2])})
    print(json.dumps({"train": count(jax.jit(algo.train).lower(jax.random.PRNGKey(0)))}))
""")


# ours on host environments: the programs one update of host actors dispatches
OURS_HOST = COUNT + SETUP + textwrap.dedent("""
    from jaxrl_dist import actors
    host = actors.HostActors(learner, spec, sizes, 1, True, jax.random.PRNGKey(config.seed), 0)
    try:
        if host.fusable():   # one program an env step: learn, then act (HostActors.fusable)
            programs = {"learn_act": host.fuse_learn_act().lower(
                abstract.train, abstract.data, host.abstract_packed())}
        else:
            programs = {"learn_next": learner.learn_next.lower(abstract.train, abstract.data,
                                                               host.abstract_trajectory()),
                        "unpack": host.unpack.lower(host.abstract_packed()),
                        **host.lowered_acting()}
        print(json.dumps({name: count(lowered) for name, lowered in programs.items()}))
    finally:
        host.close()
""")

# sbx's SAC with SB3's defaults on a Gymnasium task: the two programs an env step dispatches
# once learning has started (one gradient step, then acting), lowered on real inputs; not
# counted: the eager jax.random.split of its reset_noise each step (one small program)
SBX = COUNT + textwrap.dedent("""
    import json, sys
    import numpy as np
    import sbx
    from sbx.common.type_aliases import ReplayBufferSamplesNp
    from stable_baselines3.common.env_util import make_vec_env
    env_id, n_envs = sys.argv[1], int(sys.argv[2])
    env = make_vec_env(env_id, n_envs=n_envs, seed=0)
    model = sbx.SAC("MlpPolicy", env, learning_starts=10**9, seed=0, verbose=0)
    model.learn(300)   # random actions into its replay, no gradient step
    batch = model.batch_size
    d = model.replay_buffer.sample(batch, env=None)   # as its train() converts a sample
    data = ReplayBufferSamplesNp(d.observations.numpy(), d.actions.numpy(),
                                 d.next_observations.numpy(), d.dones.numpy().flatten(),
                                 d.rewards.numpy().flatten(),
                                 np.full((batch,), model.gamma, np.float32))
    cls = type(model)
    train = cls.__dict__["_train"].__func__   # the jitted function under its classmethod
    step = train.lower(cls, model.tau, model.target_entropy, 1, data, model.policy_delay,
                       (model._n_updates + 1) % model.policy_delay, model.policy.qf_state,
                       model.policy.actor_state, model.ent_coef_state, model.key)
    obs = np.zeros((n_envs, *env.observation_space.shape), np.float32)
    act = model.policy.sample_action.lower(model.policy.actor_state, obs, model.key)
    print(json.dumps({"train": count(step), "sample_action": count(act)}))
""")

# make_venv.sh's default venv, or the checkout's .bench/sbx (as .bench/rejax) where one was made
SBX_PYTHONS = (VENVS / "sbx" / "bin" / "python",
               Path.home() / ".cache" / "jaxrl_dist" / "peers" / "sbx-venv" / "bin" / "python")


def count_ours(config: str, sets: list[str], host: bool = False, by_op: int = 0
               ) -> dict[str, dict[str, float]]:
    """{program: {"kernels", "compile_s"}} of ours, counted in a fresh process (``host``: the
    programs of host actors; ``by_op``: also "by_op", the kernels grouped by the first
    ``by_op`` parts of the JAX op name they were compiled for)."""
    out = run_command([sys.executable, "-c", OURS_HOST if host else OURS, config, *sets],
                      summary=False, XLA_FLAGS=CPU_SCHEDULER_FLAG, JAX_PLATFORMS="cpu",
                      KERNELS_BY_OP=str(by_op))
    return json.loads(out["stdout"].strip().splitlines()[-1])


def sbx_python(args) -> Path:
    """``--sbx-python``, else .bench/sbx's or make_venv.sh's default venv; a one-line exit if
    there is none."""
    given = getattr(args, "sbx_python", None)
    for python in [Path(given)] if given else SBX_PYTHONS:
        if python.exists():
            return python
    looked = " or ".join(str(p) for p in ([given] if given else SBX_PYTHONS))
    raise SystemExit(f"bench kernels: no sbx interpreter ({looked}): make one with "
                     f"`bash benches/peers/sbx/make_venv.sh` or pass --sbx-python")


def bench_kernels(args) -> tuple[list[dict], str]:
    """``--config``'s programs (PPO: CartPole at ``--steps``; a DQN, PQN or SAC config at its
    own budget, SAC set to rejax's Pendulum settings as ``bench rejax`` does) beside rejax's
    train program for the same algorithm and its own config; a SAC config on a host
    environment beside sbx's step (``--no-rejax``: ours only)."""
    from jaxrl_dist import config as config_lib

    script = Path(tempfile.mkdtemp()) / "peer_kernels.py"
    by_op = getattr(args, "by_op", 0) or 0
    from jaxrl_dist.envs import registry

    loaded = config_lib.load(args.config, list(args.set))
    suite, env_name = registry.parse(loaded.env)
    algo, sets, host = loaded.algo, list(args.set), suite == "gymnasium"
    peer = "sbx" if host else "rejax"
    if suite == "pettingzoo" or (host and algo != "sac"):
        raise SystemExit(f"bench kernels compares SAC on a Gymnasium environment with sbx's, "
                         f"not algo {algo} on {loaded.env} (configs/mujoco_halfcheetah_sac.yaml "
                         f"is one)")
    if host and (loaded.sac.num_steps, loaded.sac.utd) != (1, 1):
        raise SystemExit(f"bench kernels counts a host SAC env step as one update (sac.num_steps "
                         f"1, sac.utd 1, as sbx's step), got num_steps {loaded.sac.num_steps}, "
                         f"utd {loaded.sac.utd}")
    if args.no_rejax:
        peer_cmd = []
    elif host:
        peer_cmd = [str(sbx_python(args))]
    else:
        peer_cmd = [str(rejax_python(args, create=True))]
    if host:
        script.write_text(SBX)
        peer_args = [env_name, str(loaded.num_envs)]
    elif algo in ("dqn", "pqn", "sac"):
        steps = loaded.total_timesteps
        script.write_text(REJAX_Q)
        peer_args = [algo, str(steps), str(PEERS)]
        if algo == "sac":
            from benches.peers.rejax_configs import OURS_AS_REJAX_PENDULUM_SAC
            sets = [*OURS_AS_REJAX_PENDULUM_SAC, *sets]
    elif algo == "ppo":
        script.write_text(REJAX)
        peer_args = [str(args.steps)]
    else:
        raise SystemExit(f"bench kernels compares ppo, dqn, pqn or sac configs with rejax's, "
                         f"not algo {algo}")
    runs: dict[tuple[str, str], list[dict]] = {}
    for i in range(args.repeats):   # alternated, like every timing here
        got = {("ours", k): v for k, v in count_ours(args.config, sets, host, by_op).items()}
        if peer_cmd:   # the peer compiles under the same XLA flag as ours
            out = run_command([*peer_cmd, str(script), *peer_args], summary=False,
                              XLA_FLAGS=CPU_SCHEDULER_FLAG, JAX_PLATFORMS="cpu",
                              KERNELS_BY_OP=str(by_op))
            got.update({(peer, k): v for k, v in
                        json.loads(out["stdout"].strip().splitlines()[-1]).items()})
        for key, value in got.items():
            runs.setdefault(key, []).append(value)
        print(f"  [{i + 1}/{args.repeats}] " + ", ".join(
            f"{t} {p}: {v['kernels']} kernels {v['compile_s']:.1f} s"
            for (t, p), v in got.items()), file=sys.stderr, flush=True)
    rows = []
    for (trainer, program), values in runs.items():
        kernels = sorted({v["kernels"] for v in values})
        times = [v["compile_s"] for v in values]
        rows.append({"trainer": trainer, "program": program, "kernels": kernels,
                     "compile_s": times, "compile_s_median": statistics.median(times),
                     **({"by_op": values[0]["by_op"]} if "by_op" in values[0] else {})})
    md = ["| trainer | program | XLA kernels | compile s under the profiler, median (min–max) |",
          "|---|---|---|---|"]
    for trainer in dict.fromkeys(r["trainer"] for r in rows):
        mine = [r for r in rows if r["trainer"] == trainer]
        for r in mine:
            md.append(f"| {trainer} | {r['program']} | {'/'.join(map(str, r['kernels']))} | "
                      f"{r['compile_s_median']:.1f} ({min(r['compile_s']):.1f}–"
                      f"{max(r['compile_s']):.1f}) |")
        if len(mine) > 1:
            total = "**each env step**" if host else "**all programs**"
            when = ("run once per env step at one step per update" if host else
                    "the trainer compiles them concurrently")
            md.append(f"| {trainer} | {total} | {sum(r['kernels'][0] for r in mine)} | "
                      f"{sum(r['compile_s_median'] for r in mine):.1f} (summed; {when}) |")
    for r in rows:   # --by-op: where each program's kernels come from (the first repeat's)
        if "by_op" in r:
            md += ["", f"{r['trainer']} {r['program']}: kernels by op name (first {by_op} "
                       f"parts; the 15 largest groups)", ""]
            md += [f"    {n:4d}  {where}" for where, n in list(r["by_op"].items())[:15]]
    return rows, "\n".join(md)
