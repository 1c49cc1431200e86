"""python -m jaxrl_dist.plot RUN_DIR [RUN_DIR ...] [-o returns.png]

Episode return (and eval return, where logged) against global env steps, with steps/s below;
several runs are overlaid. Reads only metrics.jsonl (JSON lines).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def read_rows(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"no metrics.jsonl in {run_dir} (is it a run directory?)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot(run_dirs: list[Path], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
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
    except (FileNotFoundError, json.JSONDecodeError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
