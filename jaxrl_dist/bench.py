"""python -m jaxrl_dist.bench {throughput,scaling,solve,rejax,kernels,results,...} [options]

Measures what docs/benchmarks.md reports, by running the real command lines as subprocesses:

  throughput  steady env steps/s (compile excluded), compile time, wall time and peak memory
              for 1 process x 1 device, 1 x N devices, and P x D through the launcher
  scaling     weak (fixed envs per process) and strong (fixed global envs) scaling from 1 to 2
              processes, each pinned to its own core; efficiency = SPS(P) / (P x SPS(1))
  solve       time from command start to eval return >= target, through the launcher
  rejax       rejax's PPO and ours alternately on the same task and hyperparameters; rejax
              runs in its own virtual environment (.bench/rejax, created on first use)
  kernels     XLA:CPU kernels per compiled program, ours and rejax's: a compile-cost measure
              that does not drift with the VM (bench_kernels.py)
  results     learning results of the shipped configs (return reached, steps, wall, SPS)
  collectives latency of one cross-process all-reduce (gloo, 2 processes, pinned/unpinned)
  learning    final returns of ours and rejax on N seeds each (bench_learning.py)
  population  N seeds in one command vs rejax vmapped vs N sequential runs (bench_population.py)
  periodic    what checkpoints and replica checks cost the loop at the defaults (bench_periodic.py)
  accel       ours and rejax on a real GPU/TPU: throughput at thousands of envs and a population
              of hundreds of seeds in one program (bench_accel.py)

Every measurement is repeated (--repeats) and reported as min / median / max; results go to
OUT/NAME.json and OUT/NAME.md. Nothing here is used by training.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

CARTPOLE = "configs/cartpole.yaml"


def machine() -> dict[str, Any]:
    import jax

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "jax": jax.__version__, "platform": platform.platform()}


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env.update(extra)
    return env


def run_command(cmd: list[str], timeout: float = 1800, summary: bool = True, **env: str
                ) -> dict[str, Any]:
    """Run ``cmd``; return wall time, peak RSS of its largest process and (``summary``) its
    summary line."""
    wrapper = textwrap.dedent("""
        import json, resource, subprocess, sys, time
        t = time.perf_counter()
        p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
        wall = time.perf_counter() - t
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        print(json.dumps({"rc": p.returncode, "wall_s": wall, "peak_rss_mb": rss / 1024,
                          "stdout": p.stdout[-20000:], "stderr": p.stderr[-4000:]}))
    """)
    proc = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True,
                          timeout=timeout, env=_clean_env(**env))
    out = json.loads(proc.stdout)
    if not summary:
        if out["rc"] != 0:
            raise RuntimeError(f"benchmark command failed ({out['rc']}): {' '.join(cmd)}\n"
                               f"{out['stderr'][-2000:]}")
        return out
    summary = None
    for line in out["stdout"].splitlines():
        line = line.rsplit("\r", 1)[-1]
        if line.startswith('{"rank": 0'):
            summary = json.loads(line)
    if out["rc"] != 0 or summary is None:
        raise RuntimeError(f"benchmark command failed ({out['rc']}): {' '.join(cmd)}\n"
                           f"{out['stderr'][-2000:]}")
    out["summary"] = summary
    return out


def train_cmd(run_dir: Path, devices: int | None, config: str, sets: list[str]) -> list[str]:
    """``devices`` simulated CPU devices, or None: the machine's own accelerator."""
    cpu = ["--cpu-devices", str(devices)] if devices is not None else []
    return [sys.executable, "-m", "jaxrl_dist.train", config, *cpu,
            "--run-dir", str(run_dir), "--no-progress", *_sets(sets)]


def launch_cmd(run_dir: Path, procs: int, devices: int, config: str, sets: list[str],
               pin: int | None = None) -> list[str]:
    pin_args = ["--cpus-per-proc", str(pin)] if pin else []
    return [sys.executable, "-m", "jaxrl_dist.launch", "--nproc-per-node", str(procs),
            "--cpu-devices-per-proc", str(devices), *pin_args, config,
            "--run-dir", str(run_dir), "--no-progress", *_sets(sets)]


def _sets(sets: list[str]) -> list[str]:
    return [arg for s in sets for arg in ("--set", s)]


def stats(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values),
            "n": len(values)}


def _fmt(s: dict[str, float], digits: int = 0) -> str:
    return f"{s['median']:,.{digits}f} ({s['min']:,.{digits}f}–{s['max']:,.{digits}f})"


def repeat(label: str, make_cmd, repeats: int, **env: str) -> dict[str, Any]:
    runs = []
    for i in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            out = run_command(make_cmd(Path(tmp) / "run"), **env)
        runs.append(out)
        s = out["summary"]
        print(f"  {label} [{i + 1}/{repeats}] sps={s['sps']:,.0f} compile={s['compile_time_s']:.1f}s"
              f" wall={out['wall_s']:.1f}s", file=sys.stderr, flush=True)
    return {
        "label": label,
        "sps": stats([r["summary"]["sps"] for r in runs]),
        "compile_time_s": stats([r["summary"]["compile_time_s"] for r in runs]),
        "wall_s": stats([r["wall_s"] for r in runs]),
        "peak_rss_mb": stats([r["peak_rss_mb"] for r in runs]),
        "final_return": [r["summary"]["final_return"] for r in runs],
        "eval_return": [r["summary"].get("eval_return") for r in runs],
        "solved_at_env_steps": [r["summary"].get("solved_at_env_steps") for r in runs],
        "status": [r["summary"]["status"] for r in runs],
    }


# ------------------------------------------------------------------------------------------------


def bench_throughput(args) -> tuple[list[dict], str]:
    sets = [f"total_timesteps={args.steps}", "checkpoint_every=0", "check_replicas_every=0",
            *args.set]
    rows = [
        repeat("1 process x 1 device", lambda d: train_cmd(d, 1, args.config, sets),
               args.repeats),
        repeat("1 process x 2 devices", lambda d: train_cmd(d, 2, args.config, sets),
               args.repeats),
        repeat("2 processes x 1 device (launcher)",
               lambda d: launch_cmd(d, 2, 1, args.config, sets), args.repeats),
        repeat("2 processes x 2 devices (launcher)",
               lambda d: launch_cmd(d, 2, 2, args.config, sets), args.repeats),
    ]
    md = ["| topology | steady SPS, median (min–max) | compile s | wall s | peak RSS MB / process |",
          "|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['label']} | {_fmt(r['sps'])} | {_fmt(r['compile_time_s'], 1)} | "
                  f"{_fmt(r['wall_s'], 1)} | {_fmt(r['peak_rss_mb'])} |")
    return rows, "\n".join(md)


def bench_scaling(args) -> tuple[list[dict], str]:
    """Weak and strong scaling 1 -> 2 pinned processes, for each envs-per-process size: the
    per-update compute grows with the envs while the number of all-reduces per update does
    not, so the sweep shows where cross-process latency stops mattering."""
    out, md = [], ["| scaling | envs (global) | env steps | SPS 1 proc | SPS 2 procs | efficiency |",
                   "|---|---|---|---|---|---|"]
    for e in args.envs_per_proc:
        # at least 40 updates of the 2-process run, so steady SPS is not a handful of calls
        steps = max(args.steps, 40 * 2 * e * 128)
        base = [f"total_timesteps={steps}", "checkpoint_every=0", "check_replicas_every=0",
                *args.set]
        for kind, envs1, envs2 in (("weak", e, 2 * e), ("strong", 2 * e, 2 * e)):
            one = repeat(f"{kind} 1 proc, {envs1} envs", lambda d: launch_cmd(
                d, 1, 1, args.config, base + [f"num_envs={envs1}"], pin=1), args.repeats)
            two = repeat(f"{kind} 2 procs, {envs2} envs", lambda d: launch_cmd(
                d, 2, 1, args.config, base + [f"num_envs={envs2}"], pin=1), args.repeats)
            eff = two["sps"]["median"] / (2 * one["sps"]["median"])
            out.append({"kind": kind, "envs_per_proc": e, "steps": steps, "one": one,
                        "two": two, "efficiency": eff})
            md.append(f"| {kind} | {envs1} -> {envs2} | {steps:,} | {_fmt(one['sps'])} | "
                      f"{_fmt(two['sps'])} | {eff:.0%} |")
    return out, "\n".join(md)


def bench_solve(args) -> tuple[list[dict], str]:
    sets = ["eval_every=10", "eval_episodes=16", f"target_return={args.target}",
            "checkpoint_every=0", *args.set]
    rows = [repeat(f"launcher, {p} process(es) x 1 device",
                   lambda d, p=p: launch_cmd(d, p, 1, args.config, sets), args.repeats)
            for p in (1, 2)]
    md = ["| command | time to eval ≥ target, s (command start to exit) | env steps | solved |",
          "|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['label']} | {_fmt(r['wall_s'], 1)} | "
                  f"{', '.join(str(s) for s in r['solved_at_env_steps'])} | "
                  f"{sum(s == 'solved' for s in r['status'])}/{len(r['status'])} |")
    return rows, "\n".join(md)


def main(argv: list[str] | None = None) -> int:
    from jaxrl_dist.bench_learning import TASKS as LEARNING_TASKS
    from jaxrl_dist.bench_results import RESULT_TARGETS, bench_results

    parser = argparse.ArgumentParser(prog="python -m jaxrl_dist.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["throughput", "scaling", "solve", "rejax", "results",
                                         "collectives", "learning", "population",
                                         "periodic", "brax", "kernels", "accel"])
    parser.add_argument("--config", default=CARTPOLE)
    parser.add_argument("--configs", nargs="+", default=list(RESULT_TARGETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=500_000, help="env steps per run")
    parser.add_argument("--envs-per-proc", type=int, nargs="+", default=[16, 64, 256],
                        help="scaling: envs per process (one weak + strong pair each)")
    parser.add_argument("--target", type=float, default=475.0, help="solve: eval return")
    parser.add_argument("--set", action="append", default=[], help="extra config override")
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    parser.add_argument("--tasks", nargs="+", default=["cartpole"], choices=LEARNING_TASKS,
                        help="learning: tasks")
    parser.add_argument("--trainers", nargs="+", default=["jaxrl_dist", "rejax"],
                        choices=["jaxrl_dist", "rejax", "purejaxrl"])
    parser.add_argument("--num-seeds", type=int, default=16, help="learning: seeds per trainer")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=3600, help="learning: per trainer")
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
    parser.add_argument("--rejax-python", type=Path, help="accel: an interpreter that imports "
                        "rejax 0.1.3 and gymnax 0.0.9 (default: .bench/rejax's)")
    parser.add_argument("--no-sequential", action="store_true",
                        help="population: skip the N sequential single runs")
    args = parser.parse_args(argv)

    started = time.strftime("%Y-%m-%d %H:%M:%S")
    from jaxrl_dist.bench_accel import bench_accel
    from jaxrl_dist.bench_brax import bench_brax
    from jaxrl_dist.bench_collectives import bench_collectives
    from jaxrl_dist.bench_kernels import bench_kernels
    from jaxrl_dist.bench_learning import bench_learning
    from jaxrl_dist.bench_periodic import bench_periodic
    from jaxrl_dist.bench_population import bench_population
    from jaxrl_dist.bench_rejax import bench_rejax

    fn = {"throughput": bench_throughput, "scaling": bench_scaling, "solve": bench_solve,
          "rejax": bench_rejax, "results": bench_results,
          "collectives": bench_collectives, "learning": bench_learning,
          "population": bench_population, "periodic": bench_periodic,
          "brax": bench_brax, "kernels": bench_kernels, "accel": bench_accel}[args.what]
    rows, table = fn(args)
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"what": args.what, "started": started, "machine": machine(),
              "argv": sys.argv[1:] if argv is None else argv, "repeats": args.repeats,
              "rows": rows}
    (args.out / f"{args.what}.json").write_text(json.dumps(record, indent=2) + "\n")
    m = record["machine"]
    runs = (f"raw results of earlier runs in {args.raw_from}" if args.raw_from
            else f"{args.num_seeds} seeds per trainer" if args.what in ("learning", "population")
            else f"one run per seed ({len(args.seeds)} seeds) per trainer and device count"
            if args.what == "brax" else f"{args.repeats} repeat(s)")
    header = (f"{args.what}: {m['cpu']}, {m['cores']} cores, Python {m['python']}, jax "
              f"{m['jax']}; {runs}; `python -m jaxrl_dist.bench "
              f"{' '.join(record['argv'])}` ({started})\n\n")
    (args.out / f"{args.what}.md").write_text(header + table + "\n")
    print(header + table)
    return 1 if any(row.get("failed") for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
