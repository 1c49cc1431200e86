"""python -m benches {throughput,scaling,solve,rejax,kernels,results,...} [options]

Measures what docs/benchmarks.md reports, by running the real command lines as subprocesses:

  throughput  steady env steps/s (compile excluded), compile time, wall time and peak memory
              for 1 process x 1 device, 1 x N devices, and P x D through the launcher
  scaling     weak (fixed envs per process) and strong (fixed global envs) scaling from 1 to 2
              processes, each pinned to its own core; efficiency = SPS(P) / (P x SPS(1))
  solve       time from command start to eval return >= target, through the launcher
  rejax       rejax's PPO and ours alternately on the same task and hyperparameters; rejax
              runs in its own virtual environment (.bench/rejax, created on first use)
  kernels     XLA:CPU kernels per compiled program, ours and rejax's (SAC on a host env: per env
              step, beside sbx's): a compile-cost measure that does not drift (benches/kernels.py)
  results     learning results of the shipped configs (return reached, steps, wall, SPS)
  collectives latency of one cross-process all-reduce (gloo, 2 processes, pinned/unpinned)
  learning    final returns of ours and rejax on N seeds each (benches/learning.py)
  population  N seeds in one command vs rejax vmapped vs N sequential runs
              (benches/population.py)
  periodic    what checkpoints and replica checks cost the loop at the defaults
              (benches/periodic.py)
  brax        Brax's own PPO and ours alternately on the same Brax task and hyperparameters,
              1 and 2 CPU devices (benches/brax.py)
  accel       ours and rejax on a real GPU/TPU: throughput at thousands of envs and a population
              of hundreds of seeds in one program (benches/accel.py)
  atari       acting + stepping an ale: config (no learning) against ale-py's own vector env
              with random actions, same envs and threads, alternated (benches/atari.py)
  host        a host-environment config (gymnasium:<id>) on --seeds, one run each: final
              evaluations, mean/IQM with CIs, fraction solved; resumable across sittings
              (--work), seeds side by side (--parallel N --pin) (benches/host.py)
  host-throughput  training env steps/s over the same vector env's random-action env steps/s,
              1 and 2 processes, each on its own core (benches/host.py)
  replay      a DQN checkpoint's size and save time with and without its replay buffer
              (--config a dqn config; benches/replay.py)
  sac-limit   host SAC on HalfCheetah-v5 (one env) against the limit measured in the same
              sitting, 1 / (a minimal flax/optax SAC step + one MuJoCo step), and beside sbx's
              SAC (its own venv) (benches/sac_limit.py)

Every measurement is repeated (--repeats) and reported as min / median / max; results go to
OUT/NAME.json and OUT/NAME.md. Nothing here is used by training.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

from benches.common import CARTPOLE, SOLVED_RETURN, describe, machine

# subcommand -> (module of benches, its function), imported only when it runs
BENCHES = {
    "throughput": ("throughput", "bench_throughput"),
    "scaling": ("throughput", "bench_scaling"),
    "solve": ("throughput", "bench_solve"),
    "rejax": ("rejax", "bench_rejax"),
    "results": ("results", "bench_results"),
    "collectives": ("collectives", "bench_collectives"),
    "learning": ("learning", "bench_learning"),
    "population": ("population", "bench_population"),
    "periodic": ("periodic", "bench_periodic"),
    "brax": ("brax", "bench_brax"),
    "kernels": ("kernels", "bench_kernels"),
    "accel": ("accel", "bench_accel"),
    "replay": ("replay", "bench_replay"),
    "atari": ("atari", "bench_atari"),
    "host": ("host", "bench_host"),
    "host-throughput": ("host", "bench_host_throughput"),
    "sac-limit": ("sac_limit", "bench_sac_limit"),
}


def build_parser() -> argparse.ArgumentParser:
    from benches.learning import TASKS as LEARNING_TASKS
    from benches.results import RESULT_TARGETS

    parser = argparse.ArgumentParser(prog="python -m benches", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=list(BENCHES))
    parser.add_argument("--config", default=CARTPOLE)
    parser.add_argument("--configs", nargs="+", default=list(RESULT_TARGETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=500_000, help="env steps per run")
    parser.add_argument("--envs-per-proc", type=int, nargs="+", default=[16, 64, 256],
                        help="scaling: envs per process (one weak + strong pair each)")
    parser.add_argument("--target", type=float, default=SOLVED_RETURN[CARTPOLE],
                        help="solve: eval return")
    parser.add_argument("--set", action="append", default=[], help="extra config override")
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    parser.add_argument("--tasks", nargs="+", default=["cartpole"], choices=LEARNING_TASKS,
                        help="learning: tasks")
    parser.add_argument("--trainers", nargs="+", default=["jaxrl_dist", "rejax"],
                        choices=["jaxrl_dist", "rejax", "purejaxrl"])
    parser.add_argument("--num-seeds", type=int, default=16, help="learning: seeds per trainer")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=3600,
                        help="learning: per trainer; host: per seed and sitting")
    parser.add_argument("--raw-from", type=Path, help="learning: tabulate the raw results in "
                        "this directory (runs on disjoint seeds joined) instead of running")
    parser.add_argument("--topology", default="1x2",
                        help="population: PROCESSES x DEVICES for ours (e.g. 1x2, 2x1)")
    parser.add_argument("--brax-unroll", type=int, default=32,
                        help="brax: Brax's unroll_length (num_steps must be a multiple)")
    parser.add_argument("--no-rejax", action="store_true", help="kernels: ours only")
    parser.add_argument("--envs", type=int, nargs="*", default=[4, 256, 2048, 16384],
                        help="accel: global env counts (none: skip the throughput part)")
    parser.add_argument("--updates", type=int, default=50, help="accel: updates per run")
    parser.add_argument("--command-buffers", nargs="+", default=["auto", "xla"],
                        choices=["auto", "xla", "disabled"],
                        help="accel: ours once per gpu_command_buffers value (default: auto, "
                        "the shipped one, and xla, XLA's defaults)")
    parser.add_argument("--sac-steps", type=int, default=4000,
                        help="sac-limit: env steps of learning per run (each one gradient step)")
    parser.add_argument("--host-sac-steps", type=int, default=0,
                        help="accel: host SAC on HalfCheetah-v5 for this many learning env "
                        "steps (0: skip)")
    parser.add_argument("--rejax-python", type=Path, help="rejax, kernels, learning, "
                        "population, accel: an interpreter that imports rejax 0.1.3 and gymnax "
                        "0.0.9 (default: .bench/rejax's, which rejax and kernels create)")
    parser.add_argument("--by-op", type=int, default=0, metavar="DEPTH",
                        help="kernels: also group each program's kernels by the first DEPTH "
                        "parts of the JAX op name they come from (e.g. 6)")
    parser.add_argument("--sbx-python", type=Path, help="kernels (SAC on a host environment): "
                        "an interpreter that imports sbx-rl 0.28 (default: the venv of "
                        "benches/peers/sbx/make_venv.sh)")
    parser.add_argument("--tasks-host", nargs="+", default=["cartpole", "halfcheetah"],
                        choices=["cartpole", "halfcheetah"], help="host-throughput: tasks")
    parser.add_argument("--host-topologies", nargs="+",
                        default=["pinned", "cores", "overlap", "procs-pinned", "procs"],
                        choices=["pinned", "cores", "overlap", "procs-pinned", "procs"],
                        help="host-throughput: which topologies (default: all five)")
    parser.add_argument("--devices", type=int, default=1,
                        help="host: simulated CPU devices per run")
    parser.add_argument("--work", type=Path, help="host: the seeds' run directories "
                        "(default runs/bench_host/<--out's name>); the same command resumes them")
    parser.add_argument("--parallel", type=int, default=1, help="host: seeds trained at once")
    parser.add_argument("--pin", action="store_true", help="host: each parallel run on its "
                        "own core with one XLA:CPU compute thread")
    parser.add_argument("--cores", type=int, nargs="+",
                        help="host: with --pin, the cores to pin to (default: every core this "
                        "process may use); two benches on cores 0 and 1 share a 2-core machine")
    parser.add_argument("--train", type=int, nargs="*",
                        help="host: of --seeds, train only these (none: only tabulate what is "
                        "recorded); the table still covers every --seeds, so two commands may "
                        "each train seeds of one bench, one per core")
    parser.add_argument("--no-sequential", action="store_true",
                        help="population: skip the N sequential single runs")
    return parser


def _unchanged(out: Path, what: str, rows: list[dict], table: str) -> bool:
    """Whether ``out`` already holds these rows (``<what>.json``) and this table
    (``<what>.md`` below its header): a bench that only re-tabulates what is recorded
    (``bench host`` with every seed trained) leaves its files, and their header's command,
    machine and date (those of the sitting that measured), as they are."""
    try:
        old = json.loads((out / f"{what}.json").read_text())["rows"]
        body = (out / f"{what}.md").read_text().split("\n\n", 1)[1]
        return (json.dumps(old, sort_keys=True) == json.dumps(rows, sort_keys=True)
                and body == table + "\n")
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    started = time.strftime("%Y-%m-%d %H:%M:%S")
    module, name = BENCHES[args.what]
    fn = getattr(importlib.import_module(f"benches.{module}"), name)
    rows, table = fn(args)
    args.out.mkdir(parents=True, exist_ok=True)
    status = 1 if any(row.get("failed") for row in rows) else 0
    if _unchanged(args.out, args.what, rows, table):
        print(table + f"\n\n(what {args.out}/{args.what}.md already holds: left as it is)")
        return status
    record = {"what": args.what, "started": started, "machine": machine(),
              "argv": sys.argv[1:] if argv is None else argv, "repeats": args.repeats,
              "rows": rows}
    (args.out / f"{args.what}.json").write_text(json.dumps(record, indent=2) + "\n")
    m = record["machine"]
    runs = (f"raw results of earlier runs in {args.raw_from}" if args.raw_from
            else f"{args.num_seeds} seeds per trainer" if args.what in ("learning", "population")
            else f"one run per seed ({len(args.seeds)} seeds) per trainer and device count"
            if args.what == "brax" else f"one run per seed ({len(args.seeds)} seeds)"
            if args.what == "host" else f"{args.repeats} repeat(s)")
    header = (f"{args.what}: {describe(m)}, Python {m['python']}, jax "
              f"{m['jax']}; {runs}; `python -m benches "
              f"{' '.join(record['argv'])}` ({started})\n\n")
    (args.out / f"{args.what}.md").write_text(header + table + "\n")
    print(header + table)
    return status


if __name__ == "__main__":
    sys.exit(main())
