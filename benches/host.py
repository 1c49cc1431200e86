"""``python -m benches host``: what a host-environment config (``gymnasium:<id>``) reaches, one
run per seed (a population cannot run host environments), each its own ``jaxrl_dist.train``
process: the FINAL deterministic evaluation of every seed, their mean and IQM with 95 %
bootstrap CIs, the fraction at or above the config's solved return, the periodic evaluations
(``eval_every``) on the way, and steady env steps/s per run.

A long measurement (300k off-policy steps are hours on 2 cores) spans sittings: every seed
trains in its own run directory under ``--work`` (default ``runs/bench_host/<out's name>``),
checkpointing as its config says; running the same command again takes the finished seeds'
results from their run directories and resumes the others from their checkpoints
(``--resume``: the replay included, exact). Every finished seed's row is written to
``<out>/host_seeds.jsonl`` as it ends, and a seed recorded there for the same config and
overrides is not trained again: commit that file and a bench survives losing ``--work`` (a
fresh machine), only the seeds then unfinished start over. SIGTERM or Ctrl-C stops every run at
its next call boundary with a checkpoint. ``--parallel N`` trains N seeds at once; ``--pin``
puts each on its own core with one XLA:CPU compute thread (two 256x256 SAC runs on 2 cores:
~40 env steps/s each, where one run alone on both cores makes 33-49; ~170 each on a CPU with
AVX-512); ``--cores C..`` picks the cores, so two
benches side by side keep both cores of a 2-core machine busy where one bench's last seed would
leave one idle."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benches.common import XLA_ENV, _clean_env, describe, machine, run_command, train_cmd
from jaxrl_dist.population import bootstrap_ci, iqm

DONE = ("completed", "solved")     # a run's summary status that ends it
ONE_THREAD = "--xla_cpu_multi_thread_eigen=false"


def _seed_dir(work: Path, config: str, seed: int) -> Path:
    return work / f"{Path(config).stem}_s{seed}"


def _claim(run_dir: Path, config: str, sets: list[str], seed: int) -> None:
    """A run directory serves one (config, overrides, seed): reusing it for another is an
    error, never a silent mix of two measurements."""
    marker = run_dir.parent / f"{run_dir.name}.bench.json"
    want = {"config": config, "sets": list(sets), "seed": seed}
    if marker.exists():
        have = json.loads(marker.read_text())
        if have != want:
            raise SystemExit(f"bench host: {run_dir} holds a run of {have}, not {want}; pass "
                             f"another --work")
    else:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps(want) + "\n")


def _result(run_dir: Path) -> dict | None:
    """The seed's result if its run has ended (finished, solved or diverged), else None."""
    try:
        s = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if s.get("status") not in (*DONE, "diverged"):
        return None
    curve = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "eval/return_mean" in row:
            curve.append([row["env_steps"], row["eval/return_mean"]])
    return {"status": s["status"], "final_eval": s.get("eval_return"),
            "solved_return": s.get("solved_return"), "sps": s.get("sps"),
            "env_steps": s.get("env_steps"), "eval_curve": curve,
            "param_fingerprint": s.get("param_fingerprint"),
            "failed": s["status"] not in DONE or s.get("eval_return") is None}


def _recorded(out: Path) -> list[dict]:
    """The rows ``<out>/host_seeds.jsonl`` already holds (any config, overrides and seed)."""
    try:
        lines = (out / "host_seeds.jsonl").read_text().splitlines()
    except OSError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def _start(args, run_dir: Path, seed: int, core: int | None) -> subprocess.Popen:
    resume = ["--resume"] if (run_dir / "checkpoints").is_dir() else []
    if not resume and run_dir.exists():        # ended before its first checkpoint: start over
        for name in ("metrics.jsonl", "summary.json"):
            (run_dir / name).unlink(missing_ok=True)
    cmd = [*train_cmd(run_dir, args.devices, args.config, [*args.set, f"seed={seed}"]),
           *resume]
    env = dict(XLA_ENV)
    if core is not None:
        cmd = ["taskset", "-c", str(core), *cmd]
        env["XLA_FLAGS"] = f"{env['XLA_FLAGS']} {ONE_THREAD}"
    with open(run_dir.parent / f"{run_dir.name}.log", "a") as log:
        log.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n")
        log.flush()
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env=_clean_env(**env), start_new_session=True)


def bench_host(args) -> tuple[list[dict], str]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work) if args.work else Path("runs") / "bench_host" / out.name
    parallel = max(1, args.parallel)
    cores = list(args.cores or os.sched_getaffinity(0)) if args.pin else []
    if args.pin and parallel > len(cores):
        raise SystemExit(f"bench host: --parallel {parallel} --pin needs {parallel} cores; "
                         f"this process may use {len(cores)}")

    def ours(r: dict) -> bool:   # a row of this bench (config and overrides)
        return r.get("config") == args.config and r.get("sets") == list(args.set)

    here = describe(machine())
    exits: dict[int, int] = {}

    def row(seed: int, recorded: dict[int, dict]) -> dict | None:
        """A result (its run directory's, else the record's), or None: train it."""
        run_dir = _seed_dir(work, args.config, seed)
        result = _result(run_dir)
        if result is None:
            return recorded.get(seed)
        machine_ = recorded.get(seed, {}).get("machine", here)   # where it trained
        return {"config": args.config, "sets": list(args.set), "seed": seed,
                "run_dir": str(run_dir), "machine": machine_, **result}

    def write_rows() -> tuple[list[dict], list[int]]:
        """Record every ended seed; the two commands of `--train` share the file, so it is
        read and replaced under a lock, nothing recorded is dropped (other seeds and overrides
        included), and it is replaced whole, never seen half-written. A run that exited
        without a result (a crash, a kill) is reported, not recorded: the next sitting
        retries it."""
        with open(out / ".host_seeds.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            before = _recorded(out)
            recorded = {r["seed"]: r for r in before if ours(r)}
            rows, pending = [], []
            for seed in args.seeds:
                r = row(seed, recorded)
                (rows.append(r) if r is not None else pending.append(seed))
            mine = {r["seed"] for r in rows}
            kept = [r for r in before if not (ours(r) and r["seed"] in mine)]
            tmp = out / f".host_seeds.{os.getpid()}.jsonl"
            tmp.write_text("".join(json.dumps(r) + "\n" for r in kept + rows))
            os.replace(tmp, out / "host_seeds.jsonl")
        for seed in list(pending):
            if exits.get(seed) not in (None, 0, 75):               # 75: saved and stopped
                pending.remove(seed)
                rows.append({"seed": seed, "status": f"exit {exits[seed]} (see its .log)",
                             "final_eval": None, "sps": None, "eval_curve": [],
                             "failed": True})
        rows.sort(key=lambda r: args.seeds.index(r["seed"]))
        return rows, pending

    train = list(dict.fromkeys(args.seeds if args.train is None else args.train))
    if set(train) - set(args.seeds):
        raise SystemExit(f"bench host: --train {train} names seeds outside --seeds "
                         f"{args.seeds}; pass them in --seeds too")
    _, pending = write_rows()
    todo = []
    for seed in train:
        _claim(_seed_dir(work, args.config, seed), args.config, args.set, seed)
        if seed in pending:
            todo.append(seed)
    running: dict[int, tuple[subprocess.Popen, int | None, float]] = {}
    stopping = []

    def stop(signum, _frame):
        stopping.append(signum)
        for proc, _, _ in running.values():
            proc.send_signal(signal.SIGTERM)   # each saves a checkpoint, then exits 75

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    termed: dict[int, float] = {}
    try:
        while todo or running:
            busy = {core for _, core, _ in running.values()}
            free = [c for c in cores[:parallel] if c not in busy]
            while todo and not stopping and len(running) < parallel:
                seed = todo.pop(0)
                core = free.pop(0) if args.pin else None
                running[seed] = (_start(args, _seed_dir(work, args.config, seed), seed, core),
                                 core, time.perf_counter())
            for seed, (proc, _, t0) in list(running.items()):
                now = time.perf_counter()
                if proc.poll() is None:
                    if now - t0 > args.timeout and seed not in termed:
                        proc.send_signal(signal.SIGTERM)   # out of time: save and stop
                        termed[seed] = now
                    elif seed in termed and now - termed[seed] > 300:
                        proc.kill()
                    continue
                del running[seed]
                exits[seed] = proc.returncode
                print(json.dumps({"seed": seed, "rc": proc.returncode,
                                  "wall_s": round(now - t0)}), flush=True)
                write_rows()
            if stopping and not running:
                break
            time.sleep(1)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    rows, pending = write_rows()
    if stopping:   # exit 75, as a stopped run's: a queue of benches stops, not goes on
        print(f"bench host: stopped; seeds {pending} saved checkpoints in {work}: run the "
              f"same command again to resume them", file=sys.stderr)
        raise SystemExit(75)
    return rows, _table(args, rows, pending)


def _table(args, rows: list[dict], pending: list[int]) -> str:
    finals = np.array([r["final_eval"] for r in rows if r["final_eval"] is not None], float)
    if not len(finals):
        return f"no seed finished (pending: {pending})"
    from jaxrl_dist import config as config_lib
    threshold = config_lib.load(args.config, list(args.set)).solved_return
    lo, hi = bootstrap_ci(finals)
    ilo, ihi = bootstrap_ci(finals, stat=iqm)
    solved = (f"{int(np.sum(finals >= threshold))}/{len(finals)}" if threshold is not None
              else "n/a")
    md = ["| config | overrides | seeds | final eval mean [95 % CI] | IQM [95 % CI] | min | "
          f"≥ threshold ({threshold}) | SPS median |",
          "|---|---|---|---|---|---|---|---|",
          f"| {args.config} | {' '.join(args.set) or '-'} | {len(finals)} | "
          f"{finals.mean():.1f} [{lo:.1f}, {hi:.1f}] | {iqm(finals):.1f} [{ilo:.1f}, {ihi:.1f}] "
          f"| {finals.min():.1f} | {solved} | {np.median([r['sps'] or 0 for r in rows]):.0f} |",
          "", "Per seed (final eval): " + ", ".join(
              f"{r['seed']}: {r['final_eval']:.1f}" if r["final_eval"] is not None
              else f"{r['seed']}: {r['status']}" for r in rows)]
    steps = sorted({s for r in rows for s, _ in r["eval_curve"]})
    if steps:
        md += ["", "Periodic evaluations (mean over the seeds that reached each point):", "",
               "| env steps | " + " | ".join(f"{s:,}" for s in steps) + " |",
               "|---|" + "---|" * len(steps),
               "| mean | " + " | ".join(
                   f"{np.mean([v for r in rows for s2, v in r['eval_curve'] if s2 == s]):.0f}"
                   for s in steps) + " |"]
    machines = {}
    for r in rows:
        if r["final_eval"] is not None:
            machines.setdefault(r.get("machine", "not recorded"), []).append(r["seed"])
    if len(machines) > 1 or "not recorded" in machines:   # seeds of earlier sittings (a record)
        md += ["", "Trained on: " + "; ".join(f"seeds {s}: {m}" for m, s in machines.items())]
    if pending:
        md += ["", f"Not finished (resume with the same command): seeds {pending}"]
    return "\n".join(md)


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
