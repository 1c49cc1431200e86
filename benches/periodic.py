"""bench periodic: what checkpoints and replica checks cost the training loop.

One device, the shipped config, three settings run alternately in each repeat: the shipped
defaults (time-based: a checkpoint every 10 minutes plus at start and end, a replica check every
5 minutes plus at the end), periodic work off (start/end saves only), and the old update-based
defaults (a checkpoint every 100 updates, a replica check every 100 updates) for reference.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from benches.common import _fmt, run_command, stats, train_cmd

VARIANTS = {
    "shipped defaults (time-based)": [],
    "periodic work off": ["checkpoint_minutes=0", "check_replicas_minutes=0"],
    "every 100 updates (old defaults)": ["checkpoint_every=100", "check_replicas_every=100"],
}


def bench_periodic(args) -> tuple[list[dict], str]:
    base = [f"total_timesteps={args.steps}", *args.set]
    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    for i in range(args.repeats):
        for name, sets in VARIANTS.items():   # alternate so drift hits every variant
            with tempfile.TemporaryDirectory() as tmp:
                out = run_command(train_cmd(Path(tmp) / "run", 1, args.config, base + sets))
            runs[name].append(out)
            s = out["summary"]
            print(f"  [{i + 1}/{args.repeats}] {name}: {s['sps']:,.0f} sps, "
                  f"{s['periodic']}", file=sys.stderr, flush=True)
    rows = []
    md = ["| periodic work | as it ran | steady SPS, median (min–max) | wall s |",
          "|---|---|---|---|"]
    for name, outs in runs.items():
        row = {"label": name, "sets": VARIANTS[name],
               "periodic": outs[0]["summary"]["periodic"],
               "sps": stats([o["summary"]["sps"] for o in outs]),
               "wall_s": stats([o["wall_s"] for o in outs])}
        rows.append(row)
        md.append(f"| {name} | {row['periodic']} | {_fmt(row['sps'])} | "
                  f"{_fmt(row['wall_s'], 1)} |")
    off = rows[1]["sps"]["median"]
    md.append("\nSteady SPS relative to periodic work off: " + ", ".join(
        f"{r['label']} {r['sps']['median'] / off:.2f}x" for r in rows))
    return rows, "\n".join(md)
