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
    threshold = next((r["solved_return"] for r in rows if r.get("solved_return") is not None),
                     None)
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
