"""python -m jaxrl_dist.plot RUN_DIR [RUN_DIR ...] [-o returns.png]

Episode return (and eval return, where logged) against global env steps, with steps/s below;
several runs are overlaid. A population run (rows carry a ``member``) is drawn as its mean
curve with a 95 % bootstrap band over members; a sweep gets one curve per swept setting (mean
over its seeds) and a second panel of final return against the swept value. A PBT run gets each
member's return and learning rate over time, every copy marked. Reads the run's
metrics.jsonl, config.yaml and (when present) summary.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from jaxrl_dist.errors import UserError


def read_rows(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"no metrics.jsonl in {run_dir} (is it a run directory?)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, out: Path) -> Path:
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    fig.clf()
    return out


def plot(run_dirs: list[Path], out: Path) -> Path:
    if len(run_dirs) == 1 and any("member" in r for r in read_rows(run_dirs[0])[:1]):
        if any(r.get("event") == "pbt_round" for r in read_rows(run_dirs[0])):
            return plot_pbt(run_dirs[0], out)
        return plot_population(run_dirs[0], out)
    plt = _pyplot()

    fig, (ax_ret, ax_sps) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True,
                                         gridspec_kw={"height_ratios": [3, 1]})
    for run_dir in run_dirs:
        rows = read_rows(run_dir)
        label = Path(run_dir).name
        train = [(r["env_steps"], r["episode_return"]) for r in rows
                 if r.get("episode_return") is not None]
        line, = ax_ret.plot(*zip(*train), label=f"{label} (train)") if train else (None,)
        evals = [(r["env_steps"], r["eval/return_mean"]) for r in rows
                 if r.get("eval/return_mean") is not None]
        if evals:
            ax_ret.plot(*zip(*evals), "o--", ms=3, color=line.get_color() if line else None,
                        label=f"{label} (eval, deterministic)")
        sps = [(r["env_steps"], r["sps"]) for r in rows if r.get("sps")]
        if sps:
            ax_sps.plot(*zip(*sps), color=line.get_color() if line else None, lw=1)
    ax_ret.set_ylabel("episode return")
    ax_ret.grid(alpha=0.3)
    ax_ret.legend(fontsize=8)
    ax_sps.set_ylabel("env steps / s")
    ax_sps.set_xlabel("global env steps")
    ax_sps.grid(alpha=0.3)
    out = _save(fig, out)
    plt.close(fig)
    return out


def plot_population(run_dir: Path, out: Path) -> Path:
    """Mean curve + CI band per swept setting (all members when nothing is swept)."""
    import numpy as np

    from jaxrl_dist import config as config_lib, population

    run_dir = Path(run_dir)
    config = config_lib.load(run_dir / "config.yaml")
    members = population.members(config)
    curves: dict[int, dict[int, float]] = {}
    for r in read_rows(run_dir):
        if r.get("episode_return") is not None:
            curves.setdefault(r["member"], {})[r["env_steps"]] = r["episode_return"]
    steps = sorted({s for c in curves.values() for s in c})
    table = np.array([[curves.get(m.index, {}).get(s, np.nan) for s in steps] for m in members])
    finals = table[:, -1]
    summary = run_dir / "summary.json"
    if summary.is_file():   # the final evaluation, when the run got that far
        finals = np.array([m["eval_return"] for m in json.loads(summary.read_text())["members"]],
                          np.float64)
    groups: dict[tuple, list[int]] = {}
    for m in members:
        groups.setdefault(tuple(m.values.items()), []).append(m.index)

    plt = _pyplot()
    sweep = list(config.population.sweep)
    fig, axes = plt.subplots(1, 2 if sweep else 1, figsize=(12 if sweep else 8, 4.8),
                             squeeze=False)
    ax = axes[0, 0]
    for setting, idx in groups.items():
        rows = table[idx]
        mean = np.nanmean(rows, 0)
        band = [population.bootstrap_ci(c[np.isfinite(c)], n=1000) if np.isfinite(c).any()
                else (np.nan, np.nan) for c in rows.T]
        name = ", ".join(f"{k.split('.')[-1]}={v:g}" for k, v in setting) or "mean"
        line, = ax.plot(steps, mean, label=f"{name} ({len(idx)} seeds)")
        ax.fill_between(steps, *zip(*band), color=line.get_color(), alpha=0.2)
    ax.set(xlabel="global env steps", ylabel="episode return (training)",
           title=f"{config.env}: {len(members)} members, mean and 95 % bootstrap CI")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if sweep:
        ax = axes[0, 1]
        key = sweep[0]   # the first swept key on x; any others split the points by colour
        for setting, idx in groups.items():
            x = dict(setting)[key]
            ax.plot([x] * len(idx), finals[idx], "o", alpha=0.5, color="C0")
            ax.errorbar([x], [np.nanmean(finals[idx])], fmt="s", color="C3", ms=7)
        if key.endswith("learning_rate"):
            ax.set_xscale("log")
        ax.set(xlabel=key, ylabel="final return" + (" (evaluation)" if summary.is_file()
                                                     else " (training)"),
               title="final return per member (square: mean over seeds)")
        ax.grid(alpha=0.3)
    out = _save(fig, out)
    plt.close(fig)
    return out


def plot_pbt(run_dir: Path, out: Path) -> Path:
    """A PBT run: each member's training return and learning rate (as the update used it)
    against env steps, one colour per member; every copy marked on its target's curves (x)
    with a thin line from the source's point."""
    rows = read_rows(run_dir)
    curves: dict[int, list[tuple[int, float | None, float | None]]] = {}
    for r in rows:
        if "member" in r:
            curves.setdefault(r["member"], []).append(
                (r["env_steps"], r.get("episode_return"), r.get("learning_rate")))
    copies = [r for r in rows if r.get("event") == "pbt_copy"]

    def at(member: int, steps: int, column: int) -> float | None:
        for s, *values in curves.get(member, []):
            if s == steps:
                return values[column]
        return None

    plt = _pyplot()
    fig, (ax_ret, ax_lr) = plt.subplots(2, 1, figsize=(9, 7.5), sharex=True)
    for m in sorted(curves):
        steps, ret, lr = zip(*curves[m])
        color = f"C{m % 10}"
        ax_ret.plot(steps, [np.nan if v is None else v for v in ret], color=color, lw=1,
                    label=f"member {m}")
        if any(v is not None for v in lr):
            ax_lr.plot(steps, [np.nan if v is None else v for v in lr], color=color, lw=1)
    for c in copies:
        color = f"C{c['target'] % 10}"
        for ax, column in ((ax_ret, 0), (ax_lr, 1)):
            src, dst = at(c["source"], c["env_steps"], column), at(c["target"], c["env_steps"],
                                                                     column)
            if dst is not None:
                ax.plot([c["env_steps"]], [dst], "x", color=color, ms=5)
                if src is not None:
                    ax.plot([c["env_steps"]] * 2, [src, dst], color=color, lw=0.5, alpha=0.5)
    ax_ret.set(ylabel="episode return (training)",
               title=f"PBT: {len(curves)} members, {len(copies)} copies (x: a member "
                     f"overwritten by a better one)")
    ax_ret.grid(alpha=0.3)
    ax_ret.legend(fontsize=7, ncol=4)
    ax_lr.set(ylabel="learning rate (the update's)", xlabel="global env steps per member",
              yscale="log")
    ax_lr.grid(alpha=0.3)
    out = _save(fig, out)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxrl_dist.plot", description=__doc__)
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("-o", "--out", type=Path, default=None,
                        help="PNG path (default: RUN_DIR/returns.png of the first run)")
    args = parser.parse_args(argv)
    try:
        out = plot(args.run_dirs, args.out or args.run_dirs[0] / "returns.png")
    except (FileNotFoundError, json.JSONDecodeError, KeyError, UserError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
