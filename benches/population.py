"""``python -m benches population``: N seeds of a shipped config, three ways.

  ours, one command   ``jaxrl_dist.train`` with ``population.seeds`` (all seeds one program),
                      on the topology given by ``--topology`` (P x D: processes x devices)
  rejax, vmapped      rejax's PPO on the same hyperparameters, ``jax.vmap(train)`` over the
                      seeds in one program (its own venv, benches/peers/rejax_runner.py, one
                      evaluation at the end like ours)
  ours, sequential    N single runs of ``jaxrl_dist.train``, one after another (1 device each)

Wall time is from command start to exit (imports and compiles included), alternated within
each repeat so drift hits all three alike. Peak RSS is the largest process's. To show that
memory does not grow with training length, ours is also run once at a quarter of the budget.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from benches.common import (CARTPOLE, PEERS, SOLVED_RETURN, XLA_ENV, _fmt, launch_cmd,
                            run_command, stats, train_cmd)
from benches.learning import hparams
from benches.rejax import REJAX_SETUP, rejax_python

THRESHOLD = SOLVED_RETURN[CARTPOLE]


def _ours_cmd(run: Path, args, seeds: list[int], steps: int) -> list[str]:
    procs, devices = (int(x) for x in args.topology.split("x"))
    sets = [f"population.seeds=[{','.join(map(str, seeds))}]", f"total_timesteps={steps}",
            *args.set]
    if procs == 1:
        return train_cmd(run, devices, args.config, sets)
    return launch_cmd(run, procs, devices, args.config, sets)


def _ours_population(args, seeds, steps) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = run_command(_ours_cmd(Path(tmp) / "run", args, seeds, steps))
        summary = json.loads((Path(tmp) / "run/summary.json").read_text())
    final = [m["eval_return"] for m in summary["members"]]
    return {"wall_s": out["wall_s"], "peak_rss_mb": out["peak_rss_mb"], "final": final,
            "compile_time_s": summary["compile_time_s"], "sps": summary["sps"]}


def _ours_sequential(args, seeds, steps) -> dict[str, Any]:
    wall, rss, final = 0.0, 0.0, []
    for seed in seeds:
        with tempfile.TemporaryDirectory() as tmp:
            out = run_command(train_cmd(Path(tmp) / "run", 1, args.config,
                                        [f"seed={seed}", f"total_timesteps={steps}", *args.set]))
        wall += out["wall_s"]
        rss = max(rss, out["peak_rss_mb"])
        final.append(out["summary"]["eval_return"])
    return {"wall_s": wall, "peak_rss_mb": rss, "final": final}


def _rejax(args, seeds, steps) -> dict[str, Any]:
    python = rejax_python(args)
    if not python.exists():
        raise SystemExit(f"rejax's venv is missing ({python}): {REJAX_SETUP}")
    from jaxrl_dist import config as config_lib
    config = config_lib.load(args.config)
    cmd = [str(python), str(PEERS / "rejax_runner.py"), "--env", config.env,
           "--seeds", ",".join(map(str, seeds)), "--total-timesteps", str(steps),
           "--hparams", json.dumps(hparams(config)), "--eval-points", "1"]
    out = run_command(cmd, summary=False, **XLA_ENV)
    line = json.loads(next(s for s in out["stdout"].splitlines() if s.startswith('{"trainer"')))
    return {"wall_s": out["wall_s"], "peak_rss_mb": out["peak_rss_mb"],
            "final": line["final_eval"], "compile_time_s": line["compile_s"]}


def bench_population(args) -> tuple[list[dict], str]:
    seeds = list(range(args.first_seed, args.first_seed + args.num_seeds))
    steps = args.steps
    kinds = {"ours": _ours_population, "rejax": _rejax, "sequential": _ours_sequential}
    if args.no_sequential:
        kinds.pop("sequential")
    results: dict[str, list[dict]] = {k: [] for k in kinds}
    for i in range(args.repeats):  # alternated
        for name, fn in kinds.items():
            r = fn(args, seeds, steps)
            results[name].append(r)
            solved = sum(v >= THRESHOLD for v in r["final"])
            print(f"  [{i + 1}/{args.repeats}] {name}: {r['wall_s']:.1f} s, peak RSS "
                  f"{r['peak_rss_mb']:.0f} MB, {solved}/{len(seeds)} >= {THRESHOLD:g}",
                  file=sys.stderr, flush=True)
    short = _ours_population(args, seeds, steps // 4)
    labels = {"ours": f"jaxrl_dist, one command ({args.topology})",
              "rejax": "rejax 0.1.3, vmapped (own venv)",
              "sequential": f"jaxrl_dist, {len(seeds)} sequential runs (1 device)"}
    rows, md = [], [f"{len(seeds)} seeds x {steps:,} env steps of `{args.config}`; wall time from "
                    f"command start, {args.repeats} alternated repeats.\n",
                    "| how | wall s, median (min–max) | peak RSS MB | "
                    f"seeds ≥ {THRESHOLD:g} at the end (each repeat) |", "|---|---|---|---|"]
    for name in kinds:
        rs = results[name]
        row = {"label": labels[name], "wall_s": stats([r["wall_s"] for r in rs]),
               "peak_rss_mb": stats([r["peak_rss_mb"] for r in rs]),
               "solved": [sum(v >= THRESHOLD for v in r["final"]) for r in rs],
               "final": [r["final"] for r in rs]}
        rows.append(row)
        md.append(f"| {labels[name]} | {_fmt(row['wall_s'], 1)} | "
                  f"{_fmt(row['peak_rss_mb'])} | "
                  f"{', '.join(f'{s}/{len(seeds)}' for s in row['solved'])} |")
    ours = rows[0]["wall_s"]["median"]
    ratios = f"rejax / ours: **{rows[1]['wall_s']['median'] / ours:.2f}x**"
    if "sequential" in kinds:
        ratios += f"; sequential / ours: **{rows[2]['wall_s']['median'] / ours:.2f}x**"
    full = rows[0]["peak_rss_mb"]["median"]
    rows.append({"label": "ours at 1/4 of the budget", "steps": steps // 4,
                 "peak_rss_mb": short["peak_rss_mb"], "wall_s": short["wall_s"]})
    md += ["", ratios, "",
           f"Peak RSS of ours: {short['peak_rss_mb']:.0f} MB at {steps // 4:,} env steps, "
           f"{full:.0f} MB at {steps:,} ({full - short['peak_rss_mb']:+.0f} MB for 4x the "
           f"updates)."]
    return rows, "\n".join(md)
