"""``python -m benches sac-limit``: host SAC on HalfCheetah-v5 (one environment, SB3's
settings: 256x256 networks, batch 256, one gradient step per env step) against what no trainer
of it can beat on this machine, measured in the same sitting: the limit
1 / (a minimal flax/optax SAC gradient step + one MuJoCo step), and sbx's SAC beside it.

  minimal step  ``peers/minimal_sac_step.py``: the same update written plainly, 200 steps
                scanned in ONE compiled call (no dispatch, no host work, no metrics or checks),
                median ms per step over 5 calls
  MuJoCo step   ``HalfCheetah-v5`` through Gymnasium, 1,000 random actions (one time-limit
                reset among them), median ms per step over 5 passes
  ours          ``configs/mujoco_halfcheetah_sac.yaml`` on one CPU device, 1,000 env steps of
                random actions, then learning; env steps/s from ``--after`` env steps to the end
                (``common.learning_rate``)
  sbx           ``peers/sbx/run_sac.py`` (its own venv): env steps/s from 1,000 steps after its
                learning starts to the end

Each repeat runs the four in turn (alternated: drift hits them alike). Issue 67's floors: ours
>= 0.85 of the limit, >= 1.2x sbx's env steps/s."""

from __future__ import annotations

import json
import statistics
import sys
import textwrap

from benches.common import PEERS, cold_run, learning_rate, run_command

CONFIG = "configs/mujoco_halfcheetah_sac.yaml"
ENV_ID = "HalfCheetah-v5"
STARTS = 1000   # env steps of random actions before learning, ours and sbx's

MUJOCO = textwrap.dedent("""
    import json, statistics, time
    import gymnasium as gym
    env = gym.make("HalfCheetah-v5")
    env.reset(seed=0)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(1000)]
    ms = []
    for _ in range(6):
        begin = time.perf_counter()
        for a in actions:
            _, _, terminated, truncated, _ = env.step(a)
            if terminated or truncated:
                env.reset()
        ms.append((time.perf_counter() - begin) / len(actions) * 1e3)
    print(json.dumps({"ms_per_step": statistics.median(ms[1:])}))   # the first pass warms up
""")


def _last_json(out: dict) -> dict:
    return json.loads(out["stdout"].strip().splitlines()[-1])


def _ours(args, steps: int, after: int) -> float:
    out = cold_run(args, CONFIG, ["num_envs=1", f"total_timesteps={steps}",
                                  f"sac.learning_starts={STARTS}", "updates_per_call=500",
                                  "eval_episodes=1", "checkpoint_every=0"], devices=1)
    return learning_rate(out["rows"], after)


def bench_sac_limit(args) -> tuple[list[dict], str]:
    from benches.kernels import sbx_python

    sbx = sbx_python(args)
    learn = args.sac_steps
    if learn % 500 or learn < 1500:
        raise SystemExit(f"--sac-steps must be a multiple of 500 and at least 1500, got {learn}")
    total, after = 2 * STARTS + learn, 2 * STARTS   # both timed from 1,000 steps into learning
    runs = []
    for i in range(args.repeats):
        minimal = _last_json(run_command([sys.executable, str(PEERS / "minimal_sac_step.py"),
                                          "200", "5"], summary=False))["ms_per_step"]
        mujoco = _last_json(run_command([sys.executable, "-c", MUJOCO],
                                        summary=False))["ms_per_step"]
        ours = _ours(args, total, after)
        theirs = _last_json(run_command([str(sbx), str(PEERS / "sbx" / "run_sac.py"), ENV_ID,
                                         "1", str(STARTS), str(total)], summary=False,
                                        timeout=args.timeout))["env_steps_per_s"]
        limit = 1e3 / (minimal + mujoco)
        runs.append({"minimal_ms": minimal, "mujoco_ms": mujoco, "limit_sps": limit,
                     "ours_sps": ours, "sbx_sps": theirs, "of_limit": ours / limit,
                     "vs_sbx": ours / theirs})
        print(f"  [{i + 1}/{args.repeats}] minimal {minimal:.2f} ms + MuJoCo {mujoco:.2f} ms -> "
              f"limit {limit:.1f}; ours {ours:.1f} ({ours / limit:.2f} of it), sbx "
              f"{theirs:.1f} ({ours / theirs:.2f}x)", file=sys.stderr, flush=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    md = [f"Host SAC on {ENV_ID}, one environment, SB3's settings: {total:,} env steps each "
          f"({STARTS:,} at random), env steps/s timed from {after:,}; {args.repeats} repeats, "
          "each: minimal step, MuJoCo step, ours, sbx in turn.\n",
          "| repeat | minimal step ms | MuJoCo step ms | limit env steps/s | ours | sbx | "
          "ours / limit | ours / sbx |", "|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(runs, 1):
        md.append(f"| {i} | {r['minimal_ms']:.2f} | {r['mujoco_ms']:.3f} | {r['limit_sps']:.1f} "
                  f"| {r['ours_sps']:.1f} | {r['sbx_sps']:.1f} | {r['of_limit']:.2f} | "
                  f"{r['vs_sbx']:.2f}x |")
    md.append(f"| **median** | {med['minimal_ms']:.2f} | {med['mujoco_ms']:.3f} | "
              f"{med['limit_sps']:.1f} | {med['ours_sps']:.1f} | {med['sbx_sps']:.1f} | "
              f"**{med['of_limit']:.2f}** | **{med['vs_sbx']:.2f}x** |")
    md.append(f"\nIssue 67's floors: ours >= 0.85 of the limit ({sum(r['of_limit'] >= 0.85 for r in runs)}"
              f" of {len(runs)} repeats), >= 1.2x sbx ({sum(r['vs_sbx'] >= 1.2 for r in runs)} of "
              f"{len(runs)}).")
    return [{"what": "sac_limit", "env": ENV_ID, "steps": total, "timed_from": after,
             "repeats": runs, "median": med}], "\n".join(md)
