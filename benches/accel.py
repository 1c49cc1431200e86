"""``python -m benches accel``: ours and rejax on the machine's accelerator (GPU/TPU).

The CPU benches simulate devices with ``--cpu-devices``; this one runs both trainers on the
real accelerator, at the sizes accelerators are bought for:

  throughput  the config's hyperparameters at each global ``--envs`` count, ``--updates``
              updates per run, one seed: steady env steps/s (ours: the summary's loop SPS;
              rejax: env steps / its one compiled training call) and cold compile time (ours
              with a fresh compile cache per run)
  population  ``--num-seeds`` seeds of the config at its own budget in one program: ours with
              ``population.seeds`` vs ``jax.vmap(rejax.train)``; wall time from command start,
              compile time, and how many seeds end at or above ``--target``

Runs alternate (ours, rejax, ours, ...) so drift hits both. rejax runs
``benches/peers/rejax_runner.py`` with ``--rejax-python`` (an interpreter that imports rejax
0.1.3 and gymnax 0.0.9; never our environment).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benches.common import PEERS, _fmt, run_command, stats, train_cmd
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


def _ours(args, sets: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:   # fresh run dir and compile cache: a cold run
        cmd = train_cmd(Path(tmp) / "run", None, args.config, [*sets, *args.set])
        out = run_command(cmd, timeout=args.timeout, JAXRL_DIST_CACHE=str(Path(tmp) / "xla"))
        summary = json.loads((Path(tmp) / "run/summary.json").read_text())
    return {"wall_s": out["wall_s"], "sps": summary["sps"],
            "compile_time_s": summary["compile_time_s"],
            "final": [m["eval_return"] for m in summary.get("members", [])]
            or [summary["eval_return"]]}


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
    md = [f"Accelerator: **{gpu}**. Hyperparameters of `{args.config}` except `num_envs`; "
          f"{args.repeats} alternated repeats; ours with its defaults (time-based checkpoints "
          "and replica checks on) and a fresh compile cache per run.\n",
          "| global envs | env steps per run | ours steady SPS | rejax steady SPS | ours / rejax "
          "| compile s, ours | compile s, rejax |", "|---|---|---|---|---|---|---|"]
    for envs in args.envs:
        steps = envs * config.ppo.num_steps * args.updates
        hp = {**hparams(config), "num_envs": envs}
        res: dict[str, list] = {"ours": [], "rejax": []}
        for i in range(args.repeats):
            res["ours"].append(_ours(args, [f"num_envs={envs}", f"total_timesteps={steps}"]))
            res["rejax"].append(_rejax(args, hp, [args.first_seed], steps))
            print(f"  envs {envs} [{i + 1}/{args.repeats}] ours {res['ours'][-1]['sps']:,.0f} "
                  f"sps, rejax {res['rejax'][-1]['sps']:,.0f} sps", file=sys.stderr, flush=True)
        row = {"section": "throughput", "envs": envs, "steps": steps, "accelerator": gpu,
               **{f"{k}_{m}": stats([r[m] for r in v]) for k, v in res.items()
                  for m in ("sps", "compile_time_s", "wall_s")}}
        row["ratio"] = row["ours_sps"]["median"] / row["rejax_sps"]["median"]
        rows.append(row)
        md.append(f"| {envs:,} | {steps:,} | {_fmt(row['ours_sps'])} | {_fmt(row['rejax_sps'])} "
                  f"| **{row['ratio']:.2f}x** | {_fmt(row['ours_compile_time_s'], 1)} | "
                  f"{_fmt(row['rejax_compile_time_s'], 1)} |")
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
    return rows, "\n".join(md)
