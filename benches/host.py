"""``python -m benches host``: what a host-environment config (``gymnasium:<id>``) reaches, one
run per seed (a population cannot run host environments), each its own ``jaxrl_dist.train``
process: the FINAL deterministic evaluation of every seed, their mean and IQM with 95 %
bootstrap CIs, the fraction at or above the config's solved return, wall time from command
start and steady env steps/s per run.

``--resume-from DIR``: seeds whose result is already in DIR/host_seeds.jsonl are not run again
(a long measurement continues in a later sitting)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from benches.common import run_command, train_cmd
from jaxrl_dist.population import bootstrap_ci, iqm


def bench_host(args) -> tuple[list[dict], str]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "host_seeds.jsonl"
    done = {}
    if raw.exists():
        for line in raw.read_text().splitlines():
            row = json.loads(line)
            done[(row["config"], tuple(row["sets"]), row["seed"])] = row
    rows = []
    for seed in args.seeds:
        key = (args.config, tuple(args.set), seed)
        if key in done:
            rows.append(done[key])
            continue
        with tempfile.TemporaryDirectory() as tmp:
            result = run_command(train_cmd(Path(tmp) / "run", args.devices, args.config,
                                           [*args.set, f"seed={seed}"]),
                                 timeout=args.timeout)
        s = result.get("summary") or {}
        row = {"config": args.config, "sets": list(args.set), "seed": seed,
               "rc": result["rc"], "final_eval": s.get("eval_return"),
               "solved_return": s.get("solved_return"), "wall_s": result["wall_s"],
               "sps": s.get("sps"), "env_steps": s.get("env_steps"),
               "failed": result["rc"] != 0}
        if row["failed"]:
            row["stderr"] = result.get("stderr", "")[-2000:]
        rows.append(row)
        with raw.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps({k: row[k] for k in ("seed", "final_eval", "wall_s", "sps")}),
              flush=True)
    finals = np.array([r["final_eval"] for r in rows if r["final_eval"] is not None], float)
    from jaxrl_dist import config as config_lib
    threshold = config_lib.load(args.config, list(args.set)).solved_return
    lo, hi = bootstrap_ci(finals) if len(finals) else (float("nan"), float("nan"))
    ilo, ihi = bootstrap_ci(finals, stat=iqm) if len(finals) else (float("nan"),) * 2
    solved = (f"{int(np.sum(finals >= threshold))}/{len(finals)}" if threshold is not None
              else "n/a")
    walls = [r["wall_s"] for r in rows]
    md = ["| config | overrides | seeds | final eval mean [95 % CI] | IQM [95 % CI] | min | "
          f"≥ threshold ({threshold}) | wall s per run (min / median / max) | SPS median |",
          "|---|---|---|---|---|---|---|---|---|",
          f"| {args.config} | {' '.join(args.set) or '-'} | {len(finals)} | "
          f"{finals.mean():.1f} [{lo:.1f}, {hi:.1f}] | {iqm(finals):.1f} [{ilo:.1f}, {ihi:.1f}] "
          f"| {finals.min():.1f} | {solved} | {min(walls):.0f} / {np.median(walls):.0f} / "
          f"{max(walls):.0f} | {np.median([r['sps'] or 0 for r in rows]):.0f} |",
          "", "Per seed (final eval): " + ", ".join(
              f"{r['seed']}: {r['final_eval']:.1f}" if r["final_eval"] is not None
              else f"{r['seed']}: failed" for r in rows)]
    return rows, "\n".join(md)


# ------------------------------------------------------------------------------ throughput

RANDOM_STEPS = """
import json, sys, time
import gymnasium, numpy as np
env_id, n, steps, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
vec = gymnasium.make_vec(env_id, num_envs=n, vectorization_mode="sync",
                         vector_kwargs={"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP})
vec.reset(seed=[seed + i for i in range(n)])
vec.action_space.seed(seed)
actions = [vec.action_space.sample() for _ in range(256)]
for t in range(min(steps // 10, 200)):   # warm-up
    vec.step(actions[t % 256])
start = time.perf_counter()
for t in range(steps):
    vec.step(actions[t % 256])
print(json.dumps({"sps": n * steps / (time.perf_counter() - start)}))
"""

# name -> (config, gymnasium id, global envs, overrides for the training run)
THROUGHPUT = {
    "cartpole": ("configs/gymnasium_cartpole.yaml", "CartPole-v1", 64,
                 ["num_envs=64", "ppo.num_steps=128", "total_timesteps=655360",
                  "updates_per_call=10"]),
    "halfcheetah": ("configs/mujoco_halfcheetah.yaml", "HalfCheetah-v5", 16,
                    ["num_envs=16", "ppo.num_steps=128", "total_timesteps=163840",
                     "updates_per_call=4"]),
}


def _random_sps(env_id: str, envs: int, procs: int, steps: int, pinned: bool) -> float:
    """Random-action env steps/s of the same sync vector env: ``procs`` processes at once,
    each ``envs / procs`` environments (pinned: each to its own core); the sum."""
    import subprocess
    import sys as _sys
    cmds = [(["taskset", "-c", str(p)] if pinned else []) + [
        _sys.executable, "-c", RANDOM_STEPS, env_id, str(envs // procs), str(steps),
        str(1000 * p)] for p in range(procs)]
    running = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True) for c in cmds]
    outs = [json.loads(p.communicate(timeout=600)[0]) for p in running]
    return sum(o["sps"] for o in outs)


# name -> (label, processes, CPU devices per process, pinned to one core each, overlap_actors)
TOPOLOGIES = {
    "pinned": ("1 process, pinned to 1 core", 1, 1, True, False),
    "cores": ("1 process, 2 cores", 1, 1, False, False),
    "overlap": ("1 process, 2 cores, overlap_actors (1 device learns, 1 acts)", 1, 2, False,
                True),
    "procs-pinned": ("2 processes, each pinned to its own core", 2, 1, True, False),
    "procs": ("2 processes, unpinned", 2, 1, False, False)}


def steady_sps(metrics: Path) -> float:
    """Training env steps/s between a run's first and second-to-last metrics rows.

    A row is written when the NEXT call has been dispatched, which for host actors means
    collected: the first row's time holds the start (and, overlapped, the first batch's extra
    collect) and the last row's the final evaluation (8 x 1,000 HalfCheetah steps: ~7 % of
    these short runs), neither of them training. The summary's ``sps`` (every step over the
    whole loop) counts both, the random-action baseline neither."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    if len(rows) < 3:
        raise RuntimeError(f"{metrics}: {len(rows)} metrics rows; steady_sps needs 3 or more")
    first, last = rows[0], rows[-2]
    return (last["env_steps"] - first["env_steps"]) / (last["time_s"] - first["time_s"])


def bench_host_throughput(args) -> tuple[list[dict], str]:
    """Training env steps/s (:func:`steady_sps`) over the random-action env steps/s of the
    same vector env with the same environments on the same cores (the baseline runs as many
    processes, pinned the same way, each stepping its share), alternated ``--repeats`` times
    per topology."""
    from benches.common import launch_cmd, stats
    rows = []
    for name in args.tasks_host:
        config, env_id, envs, sets = THROUGHPUT[name]
        for label, procs, devices, pinned, overlap in (TOPOLOGIES[t]
                                                       for t in args.host_topologies):
            ratios, trains, randoms = [], [], []
            extra = [*sets, *args.set] + (["overlap_actors=true"] if overlap else [])
            for _ in range(args.repeats):
                random_sps = _random_sps(env_id, envs, procs, 2000 if name == "cartpole"
                                         else 1000, pinned)
                with tempfile.TemporaryDirectory() as tmp:
                    run = Path(tmp) / "run"
                    if procs == 1:
                        cmd = train_cmd(run, devices, config, extra)
                        cmd = ["taskset", "-c", "0", *cmd] if pinned else cmd
                    else:
                        cmd = launch_cmd(run, procs, devices, config, extra,
                                         pin=1 if pinned else None)
                    run_command(cmd, timeout=args.timeout)
                    train_sps = steady_sps(run / "metrics.jsonl")
                trains.append(train_sps)
                randoms.append(random_sps)
                ratios.append(train_sps / random_sps)
            rows.append({"task": name, "env": env_id, "envs": envs, "topology": label,
                         "train_sps": stats(trains), "random_sps": stats(randoms),
                         "ratio": stats(ratios)})
    md = ["| task | envs | topology | training env steps/s | random-action env steps/s "
          "| ratio (min / median / max) |", "|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['env']} | {r['envs']} | {r['topology']} | "
                  f"{r['train_sps']['median']:,.0f} | {r['random_sps']['median']:,.0f} | "
                  f"{r['ratio']['min']:.2f} / {r['ratio']['median']:.2f} / "
                  f"{r['ratio']['max']:.2f} |")
    return rows, "\n".join(md)
