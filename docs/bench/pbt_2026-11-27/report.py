"""README.md of the PBT measurement from raw/*/summary.json and round_cost.json."""
import json
import sys
from pathlib import Path

out = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/bench/pbt_2026-11-27")
HOPELESS = 3e-6   # members starting at or below this rate do not solve CartPole without PBT
cost = json.loads((out / "round_cost.json").read_text())
lines = ["# PBT on CartPole: configs/cartpole_pbt.yaml, 3 seeds x (PBT, no PBT)", "",
         "8 PPO members, 500k env steps each, learning rates 1e-7 ... 1e-3 at the start; "
         "1 process x 2 CPU devices (AMD EPYC, 2 cores shared); `run.sh` made every file here. "
         "A member counts when its final deterministic evaluation (16 episodes) is >= 400.", "",
         "| seed | arm | members >= 400 | final eval return per member | start -> final lr, "
         "best member | hopeless starters (lr <= 3e-6) >= 400: start -> final lr | copies | "
         "wall s | loop s |", "|---|---|---|---|---|---|---|---|---|"]
rows = {}
for seed in (0, 1, 2):
    for arm in ("pbt", "nopbt"):
        s = json.loads((out / "raw" / f"{arm}_seed{seed}" / "summary.json").read_text())
        members = s["members"]
        evals = [m["eval_return"] for m in members]
        start = [m["ppo.learning_rate"] for m in members]
        final = [m.get("final_hparams", {}).get("learning_rate", lr)
                 for m, lr in zip(members, start)]
        best = max(range(len(members)), key=lambda i: evals[i])
        rescued = [f"m{i}: {start[i]:.0e} -> {final[i]:.2e}" for i in range(len(members))
                   if start[i] <= HOPELESS and evals[i] >= 400]
        copies = len(s["pbt"]["copies"]) if "pbt" in s else 0
        solved = sum(e >= 400 for e in evals)
        rows[(seed, arm)] = {"solved": solved, "evals": evals, "start_lr": start,
                             "final_lr": final, "wall_s": s["wall_time_s"],
                             "loop_s": s["time_s"]["loop"], "rounds": s.get("pbt", {}).get("rounds", 0),
                             "copies": copies}
        lines.append(f"| {seed} | {'PBT' if arm == 'pbt' else 'no PBT'} | {solved}/8 | "
                     f"{', '.join(f'{e:.0f}' for e in evals)} | m{best}: {start[best]:.1e} -> "
                     f"{final[best]:.2e} | {'; '.join(rescued) or '-'} | {copies} | "
                     f"{s['wall_time_s']:.1f} | {s['time_s']['loop']:.1f} |")
share = [cost["round_s_median"] * rows[(seed, "pbt")]["rounds"] / rows[(seed, "pbt")]["wall_s"]
         for seed in (0, 1, 2)]
lines += ["", f"PBT's cost: one round (the compiled program alone, blocking) takes "
          f"{cost['round_s_median'] * 1e3:.2f} ms (median of {cost['rounds_timed']}); "
          f"x {rows[(0, 'pbt')]['rounds']} rounds = "
          f"{', '.join(f'{100 * x:.2f} %' for x in share)} of the PBT runs' wall time "
          f"(seeds 0, 1, 2). Loop time with / without PBT: "
          + ", ".join(f"{rows[(s, 'pbt')]['loop_s']:.1f} / {rows[(s, 'nopbt')]['loop_s']:.1f} s"
                      for s in (0, 1, 2)) + " (the same updates; the rounds and their "
          "logging are the difference, within run-to-run noise).", ""]
(out / "results.json").write_text(json.dumps(
    {f"{arm}_seed{seed}": v for (seed, arm), v in rows.items()} | {"round_cost": cost},
    indent=1) + "\n")
print("\n".join(lines))
