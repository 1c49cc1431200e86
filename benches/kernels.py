"""bench kernels: how many XLA:CPU kernels each compiled program has, ours and rejax's.

Compile TIME on a shared VM drifts by a third within a day; the number of kernels XLA:CPU
compiles for a program does not, and cold compile time follows it (each kernel costs about the
same codegen, 20-40 ms on the 2-core AMD EPYC VM, whatever its size). Counted from a profiler
trace of each compile (XLA's ``FusionCompiler::Compile`` events, one per kernel); the compile
time under the profiler is reported beside it. Ours: the init, update and evaluation programs
of ``--config`` on one CPU device, lowered and compiled as the trainer does; rejax: its one ``train``
program (init, updates and evaluation) on the same task and hyperparameters as ``bench rejax``.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

from benches.common import run_command
from benches.rejax import PEERS, REJAX_CARTPOLE, rejax_python
from jaxrl_dist.protocol import CPU_SCHEDULER_FLAG

COUNT = textwrap.dedent("""
    def count(lowered, options=None):
        import glob, gzip, json, tempfile, time, jax
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            with jax.profiler.trace(tmp, create_perfetto_trace=True):
                lowered.compile(options)
            seconds = time.perf_counter() - start
            path, = glob.glob(f"{tmp}/**/*.trace.json.gz", recursive=True)
            with gzip.open(path) as f:
                events = json.load(f)
        events = events["traceEvents"] if isinstance(events, dict) else events
        kernels = sum(1 for e in events
                      if e.get("ph") == "X" and e.get("name") == "FusionCompiler::Compile")
        return {"kernels": kernels, "compile_s": seconds}
""")

OURS = COUNT + textwrap.dedent("""
    import json, sys
    import jax
    from jaxrl_dist import compile_cache, config as config_lib, sharding, sizes as sizes_lib
    from jaxrl_dist.programs import make_learner
    from jaxrl_dist.envs import from_config
    compile_cache.install_rolled_threefry()   # as the trainer does, before anything lowers
    config = config_lib.load(sys.argv[1], sys.argv[2:])
    layout = sharding.make_layout(jax.devices()[:1])
    sizes = sizes_lib.derive_sizes(config, layout.data_size)
    learner = make_learner(config, sizes, from_config(config, None, None), layout)
    abstract = learner.abstract_state()
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


def count_ours(config: str, sets: list[str]) -> dict[str, dict[str, float]]:
    """{program: {"kernels", "compile_s"}} of ours, counted in a fresh process."""
    out = run_command([sys.executable, "-c", OURS, config, *sets], summary=False,
                      XLA_FLAGS=CPU_SCHEDULER_FLAG, JAX_PLATFORMS="cpu")
    return json.loads(out["stdout"].strip().splitlines()[-1])


def bench_kernels(args) -> tuple[list[dict], str]:
    """``--config``'s programs (PPO: CartPole at ``--steps``; a DQN, PQN or SAC config at its
    own budget, SAC set to rejax's Pendulum settings as ``bench rejax`` does) beside rejax's
    train program for the same algorithm and its own config."""
    from jaxrl_dist import config as config_lib

    rejax = [] if args.no_rejax else [str(rejax_python(args, create=True))]
    script = Path(tempfile.mkdtemp()) / "rejax_kernels.py"
    algo = config_lib.load(args.config).algo
    sets = list(args.set)
    if algo in ("dqn", "pqn", "sac"):
        steps = config_lib.load(args.config, sets).total_timesteps
        script.write_text(REJAX_Q)
        rejax_args = [algo, str(steps), str(PEERS)]
        if algo == "sac":
            from benches.peers.rejax_configs import OURS_AS_REJAX_PENDULUM_SAC
            sets = [*OURS_AS_REJAX_PENDULUM_SAC, *sets]
    elif algo == "ppo":
        script.write_text(REJAX)
        rejax_args = [str(args.steps)]
    else:
        raise SystemExit(f"bench kernels compares ppo, dqn, pqn or sac configs with rejax's, "
                         f"not algo {algo}")
    runs: dict[tuple[str, str], list[dict]] = {}
    for i in range(args.repeats):   # alternated, like every timing here
        got = {("ours", k): v for k, v in count_ours(args.config, sets).items()}
        if rejax:
            out = run_command([*rejax, str(script), *rejax_args], summary=False,
                              XLA_FLAGS=CPU_SCHEDULER_FLAG, JAX_PLATFORMS="cpu")
            got.update({("rejax", k): v for k, v in
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
                     "compile_s": times, "compile_s_median": statistics.median(times)})
    md = ["| trainer | program | XLA kernels | compile s under the profiler, median (min–max) |",
          "|---|---|---|---|"]
    for trainer in dict.fromkeys(r["trainer"] for r in rows):
        mine = [r for r in rows if r["trainer"] == trainer]
        for r in mine:
            md.append(f"| {trainer} | {r['program']} | {'/'.join(map(str, r['kernels']))} | "
                      f"{r['compile_s_median']:.1f} ({min(r['compile_s']):.1f}–"
                      f"{max(r['compile_s']):.1f}) |")
        if len(mine) > 1:
            md.append(f"| {trainer} | **all programs** | {sum(r['kernels'][0] for r in mine)} | "
                      f"{sum(r['compile_s_median'] for r in mine):.1f} (summed; the trainer "
                      f"compiles them concurrently) |")
    return rows, "\n".join(md)
