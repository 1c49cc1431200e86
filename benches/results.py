"""``python -m benches results``: what the shipped configs reach, one run per seed
(first env steps at the config's threshold, best and final training return, wall, steady SPS).
For final evaluations over many seeds side by side with peers, see ``bench learning``."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from benches.common import SOLVED_RETURN, run_command, train_cmd

RESULT_TARGETS = {  # config -> (return threshold, steps budget) from each config's header
    config: (SOLVED_RETURN[config], budget) for config, budget in (
        ("configs/cartpole.yaml", 500_000),
        ("configs/acrobot.yaml", 1_000_000),
        ("configs/pendulum.yaml", 3_000_000),
        ("configs/minatar_spaceinvaders.yaml", 2_000_000))
}


def bench_results(args) -> tuple[list[dict], str]:
    rows = []
    md = ["| config | seed | threshold | first env steps ≥ threshold | best interval return | "
          "final return | wall s | steady SPS |", "|---|---|---|---|---|---|---|---|"]
    for config in args.configs:
        threshold, _ = RESULT_TARGETS.get(config, (None, None))
        for seed in args.seeds:
            with tempfile.TemporaryDirectory() as tmp:
                run = Path(tmp) / "run"
                out = run_command(train_cmd(run, 1, config, [f"seed={seed}"]))
                lines = (run / "metrics.jsonl").read_text().splitlines()
                metrics = [json.loads(line) for line in lines]
            returns = [(m["env_steps"], m["episode_return"]) for m in metrics
                       if m["episode_return"] is not None]
            first = next((s for s, r in returns if threshold is not None and r >= threshold),
                         None)
            row = {"config": config, "seed": seed, "threshold": threshold, "first": first,
                   "best": max(r for _, r in returns), "final": returns[-1][1],
                   "wall_s": out["wall_s"], "sps": out["summary"]["sps"]}
            rows.append(row)
            print(f"  {config} seed {seed}: first={first} best={row['best']:.1f}",
                  file=sys.stderr, flush=True)
            md.append(f"| {config} | {seed} | {threshold} | {first if first else '—'} | "
                      f"{row['best']:.1f} | {row['final']:.1f} | {row['wall_s']:.0f} | "
                      f"{row['sps']:,.0f} |")
    return rows, "\n".join(md)
