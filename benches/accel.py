"""``python -m benches accel``: ours and rejax on the machine's accelerator (GPU/TPU).

The CPU benches simulate devices with ``--cpu-devices``; this one runs both trainers on the
real accelerator, at the sizes accelerators are bought for:

  throughput  the config's hyperparameters at each global ``--envs`` count, ``--updates``
              updates per run, one seed: steady env steps/s (ours: the summary's loop SPS;
              rejax: env steps / its one compiled training call) and cold compile time (ours
              with a fresh compile cache per run)
              ours once per ``--command-buffers`` value (``gpu_command_buffers``: ``auto``
              graphs the update's loops, ``xla`` is XLA's defaults), so one lease measures the
              lever and the comparison
  population  ``--num-seeds`` seeds of the config at its own budget in one program: ours with
              ``population.seeds`` vs ``jax.vmap(rejax.train)``; wall time from command start,
              compile time, and how many seeds end at or above ``--target``
  host SAC    with ``--host-sac-steps N``: SAC on HalfCheetah-v5 (Gymnasium, MuJoCo on the
              host), one environment, SB3's settings, N env steps after 1,000 of learning starts:
              env steps/s while learning (each step one gradient step), per
              ``--command-buffers`` value, beside LeanRL's CUDA-graph SAC on an H100 (~725)

Runs alternate (ours, rejax, ours, ...) so drift hits both. rejax runs
``benches/peers/rejax_runner.py`` with ``--rejax-python`` (an interpreter that imports rejax
0.1.3 and gymnax 0.0.9; never our environment).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from benches.common import PEERS, _fmt, cold_run, learning_rate, run_command, stats
from benches.learning import hparams
from benches.rejax import rejax_python


def accelerator() -> str:
    """The GPU's name from nvidia-smi, without initialising jax in this (parent) process: a
    jax client here would preallocate the GPU memory the measured runs need."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
        return out.splitlines()[0] if out else "unknown accelerator"
    except (OSError, subprocess.SubprocessError):
        return "unknown accelerator"


# LeanRL's SAC with CUDA graphs on an H100, HalfCheetah, one environment, while learning
LEANRL_SAC_SPS = 725.0
HOST_SAC_CONFIG = "configs/mujoco_halfcheetah_sac.yaml"
HOST_SAC_STARTS = 1000   # env steps of random actions before the first gradient step


def _ours(args, sets: list[str], config: str | None = None) -> dict[str, Any]:
    out = cold_run(args, config or args.config, sets)   # on the machine's own accelerator
    summary = out["summary"]
    return {"wall_s": out["wall_s"], "sps": summary["sps"],
            "compile_time_s": summary["compile_time_s"], "xla_options": summary["xla_options"],
            "final": [m["eval_return"] for m in summary.get("members", [])]
            or [summary["eval_return"]], "rows": out["rows"]}


def _rejax(args, hp: dict, seeds: list[int], steps: int) -> dict[str, Any]:
    cmd = [str(args.rejax_python), str(PEERS / "rejax_runner.py"), "--env", args.env_id,
           "--seeds", ",".join(map(str, seeds)), "--total-timesteps", str(steps),
           "--hparams", json.dumps(hp), "--eval-points", "1"]
    out = run_command(cmd, timeout=args.timeout, summary=False)
    line = json.loads(next(s for s in out["stdout"].splitlines() if s.startswith('{"trainer"')))
    return {"wall_s": out["wall_s"], "sps": line["env_steps"] * len(seeds) / line["train_s"],
            "compile_time_s": line["compile_s"], "final": line["final_eval"]}


def bench_accel(args) -> tuple[list[dict], str]:
    from jaxrl_dist import config as config_lib
    config = config_lib.load(args.config, args.set)
    args.env_id = config.env
    args.rejax_python = rejax_python(args)
    if not Path(args.rejax_python).exists():
        raise SystemExit(f"--rejax-python {args.rejax_python} does not exist (an interpreter "
                         "that imports rejax 0.1.3 and gymnax 0.0.9)")
    gpu = accelerator()
    rows: list[dict] = []
    buffers = list(args.command_buffers)
    md = [f"Accelerator: **{gpu}**. Hyperparameters of `{args.config}` except `num_envs`; "
          f"{args.repeats} alternated repeats; ours with its defaults (time-based checkpoints "
          "and replica checks on) and a fresh compile cache per run, once per "
          "`gpu_command_buffers` value.\n",
          "| global envs | env steps per run | ours: gpu_command_buffers | ours steady SPS | "
          "rejax steady SPS | ours / rejax | compile s, ours | compile s, rejax |",
          "|---|---|---|---|---|---|---|---|"]
    for envs in args.envs:
        steps = envs * config.ppo.num_steps * args.updates
        hp = {**hparams(config), "num_envs": envs}
        res: dict[str, list] = {**{f"ours_{b}": [] for b in buffers}, "rejax": []}
        for i in range(args.repeats):
            for b in buffers:
                res[f"ours_{b}"].append(_ours(args, [f"num_envs={envs}", f"total_timesteps={steps}",
                                                     f"gpu_command_buffers={b}"]))
            res["rejax"].append(_rejax(args, hp, [args.first_seed], steps))
            print(f"  envs {envs} [{i + 1}/{args.repeats}] " + ", ".join(
                f"{k} {v[-1]['sps']:,.0f} sps" for k, v in res.items()), file=sys.stderr,
                flush=True)
        row = {"section": "throughput", "envs": envs, "steps": steps, "accelerator": gpu,
               **{f"{k}_{m}": stats([r[m] for r in v]) for k, v in res.items()
                  for m in ("sps", "compile_time_s", "wall_s")},
               **{f"ours_{b}_xla_options": res[f"ours_{b}"][0]["xla_options"] for b in buffers}}
        for b in buffers:
            row[f"ratio_{b}"] = row[f"ours_{b}_sps"]["median"] / row["rejax_sps"]["median"]
            md.append(f"| {envs:,} | {steps:,} | {b} | {_fmt(row[f'ours_{b}_sps'])} | "
                      f"{_fmt(row['rejax_sps'])} | **{row[f'ratio_{b}']:.2f}x** | "
                      f"{_fmt(row[f'ours_{b}_compile_time_s'], 1)} | "
                      f"{_fmt(row['rejax_compile_time_s'], 1)} |")
        rows.append(row)
    if args.num_seeds:
        seeds = list(range(args.first_seed, args.first_seed + args.num_seeds))
        steps = config.total_timesteps
        md += ["", f"Population: {len(seeds)} seeds x {steps:,} env steps of `{args.config}` "
               f"in one program each; wall time from command start.\n",
               f"| trainer | wall s | compile s | seeds ≥ {args.target:g} at the end | mean final "
               "return |", "|---|---|---|---|---|"]
        res = {"ours": [], "rejax": []}
        for i in range(args.repeats):
            res["ours"].append(_ours(args, [f"population.seeds=[{','.join(map(str, seeds))}]"]))
            res["rejax"].append(_rejax(args, hparams(config), seeds, steps))
        for name, rs in res.items():
            row = {"section": "population", "trainer": name, "seeds": len(seeds),
                   "steps": steps, "accelerator": gpu,
                   "wall_s": stats([r["wall_s"] for r in rs]),
                   "compile_time_s": stats([r["compile_time_s"] for r in rs]),
                   "solved": [sum(v >= args.target for v in r["final"]) for r in rs],
                   "mean_final": [sum(r["final"]) / len(r["final"]) for r in rs]}
            rows.append(row)
            md.append(f"| {name} | {_fmt(row['wall_s'], 1)} | "
                      f"{_fmt(row['compile_time_s'], 1)} | "
                      f"{', '.join(f'{s}/{len(seeds)}' for s in row['solved'])} | "
                      f"{', '.join(f'{v:.1f}' for v in row['mean_final'])} |")
    if args.host_sac_steps:
        rows_sac, md_sac = host_sac(args, gpu, buffers)
        rows += rows_sac
        md += md_sac
    return rows, "\n".join(md)


def host_sac(args, gpu: str, buffers: list[str]) -> tuple[list[dict], list[str]]:
    """SAC on HalfCheetah-v5 with one environment stepped on the host (SB3's settings): the
    env steps/s once learning runs, per ``gpu_command_buffers`` value, alternated."""
    if args.host_sac_steps % 500 or args.host_sac_steps < 1500:
        raise SystemExit(f"--host-sac-steps must be a multiple of 500 and at least 1500 (a "
                         f"metrics row per 500 env steps, the last not timed), got "
                         f"{args.host_sac_steps}")
    total = HOST_SAC_STARTS + args.host_sac_steps
    sets = ["num_envs=1", f"total_timesteps={total}", f"sac.learning_starts={HOST_SAC_STARTS}",
            "updates_per_call=500", "eval_episodes=1", "checkpoint_every=0"]
    res: dict[str, list] = {b: [] for b in buffers}
    for i in range(args.repeats):
        for b in buffers:
            out = _ours(args, [*sets, f"gpu_command_buffers={b}"], HOST_SAC_CONFIG)
            res[b].append({**out, "learning_sps": learning_rate(out["rows"], HOST_SAC_STARTS)})
            print(f"  host SAC [{i + 1}/{args.repeats}] {b}: "
                  f"{res[b][-1]['learning_sps']:,.1f} env steps/s while learning",
                  file=sys.stderr, flush=True)
    md = ["", f"Host SAC: `{HOST_SAC_CONFIG}` (HalfCheetah-v5, one environment on the host, "
          f"SB3's settings), {total:,} env steps of which the first {HOST_SAC_STARTS:,} act at "
          f"random; env steps/s from the metrics row at them to the second-to-last (one "
          f"gradient step each), {args.repeats} alternated repeats; LeanRL's CUDA-graph SAC on an H100: "
          f"~{LEANRL_SAC_SPS:.0f}.\n",
          "| gpu_command_buffers | env steps/s while learning | / 725 | compile s |",
          "|---|---|---|---|"]
    rows = []
    for b, runs in res.items():
        row = {"section": "host_sac", "command_buffers": b, "steps": total,
               "accelerator": gpu, "xla_options": runs[0]["xla_options"],
               "learning_sps": stats([r["learning_sps"] for r in runs]),
               "compile_time_s": stats([r["compile_time_s"] for r in runs])}
        rows.append(row)
        md.append(f"| {b} | {_fmt(row['learning_sps'], 1)} | "
                  f"**{row['learning_sps']['median'] / LEANRL_SAC_SPS:.2f}** | "
                  f"{_fmt(row['compile_time_s'], 1)} |")
    return rows, md
