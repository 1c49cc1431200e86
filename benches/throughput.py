"""bench throughput / scaling / solve: our own command lines (``jaxrl_dist.train`` and the
launcher) timed end to end.

  throughput  steady env steps/s (compile excluded), compile time, wall time and peak memory
              for 1 process x 1 device, 1 x N devices, and P x D through the launcher
  scaling     weak (fixed envs per process) and strong (fixed global envs) scaling from 1 to 2
              processes, each pinned to its own core; efficiency = SPS(P) / (P x SPS(1))
  solve       time from command start to eval return >= target, through the launcher
"""

from __future__ import annotations

from benches.common import _fmt, launch_cmd, repeat, train_cmd


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
