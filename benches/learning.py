"""``python -m benches learning``: final returns of ours and of peer PPOs, many seeds.

Every trainer runs the same task, hyperparameters and budget on N seeds, each in ONE program
(seeds vmapped), in its own process and virtual environment: ours through
``python -m jaxrl_dist.seeds``, rejax through ``benches/peers/rejax_runner.py`` and PureJaxRL
(not a package: its ppo.py / ppo_continuous_action.py at a pinned commit, imported unchanged)
through ``benches/peers/purejaxrl_runner.py``; each runner's docstring has its venv and what the
peer does differently with the same hyperparameters. Each prints one JSON line: per-seed final
evaluation and curves.

Reported per task and trainer: mean and IQM of the final evaluation return with 95 % bootstrap
CIs, the fraction of seeds at or above the threshold at the END, the median env steps to first
reach it in training, and one PNG with each trainer's mean training curve and CI band.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benches.common import PEERS, ROOT, SOLVED_RETURN, VENVS, XLA_ENV
from benches.rejax import REJAX_SETUP, rejax_python
from jaxrl_dist.population import bootstrap_ci, iqm


def _solved(config: str, reference: float) -> tuple[str, float, float]:
    """A task with a solved return: the config's own (common.SOLVED_RETURN)."""
    return config, SOLVED_RETURN[config], reference


# name -> (config, threshold, gymnax-blines reference return or None). MinAtar has no solved
# return; a threshold there is a level the shipped configs' seeds pass (docs/learning.md), so
# the column says how many seeds of each trainer get at least that far.
TASKS = {
    "cartpole": _solved("configs/cartpole.yaml", 500.0),
    # DQN and PQN: rejax's own published CartPole configs on its side (rejax_q_runner.py), ours
    # written in our keys (the config files say which key is which of rejax's)
    "cartpole_dqn": _solved("configs/cartpole_dqn.yaml", 500.0),
    "cartpole_pqn": _solved("configs/cartpole_pqn.yaml", 500.0),
    "acrobot": _solved("configs/acrobot.yaml", -80.0),
    "pendulum": _solved("configs/pendulum.yaml", -130.0),
    "mountaincar_continuous": _solved("configs/mountaincar_continuous.yaml", 92.0),
    "minatar_freeway": ("configs/minatar_freeway.yaml", 20.0, None),
    "minatar_spaceinvaders": ("configs/minatar_spaceinvaders.yaml", 50.0, None),
    "minatar_asterix": ("configs/minatar_asterix.yaml", 4.0, None),
    # minatar_breakout.yaml reads the image with a CNN, which neither peer's PPO has
    "minatar_breakout_mlp": ("configs/minatar_breakout_mlp.yaml", 5.0, None),
}
PUREJAXRL_PYTHON = VENVS / "purejaxrl" / "bin" / "python"
PUREJAXRL_SRC = VENVS / "purejaxrl_src"
PUREJAXRL_COMMIT = "31756b197773a52db763fdbe6d635e4b46522a73"
PUREJAXRL_SETUP = (
    f"cd {ROOT} && python3.11 -m venv .bench/purejaxrl && .bench/purejaxrl/bin/pip install "
    "jax==0.10.2 jaxlib==0.10.2 flax==0.12.8 optax==0.2.8 distrax==0.1.9 "
    "tfp-nightly==0.26.0.dev20261027 chex==0.1.92 gymnax==0.0.9 numpy==2.4.6 && "
    "git clone https://github.com/luchris429/purejaxrl "
    f".bench/purejaxrl_repo && git -C .bench/purejaxrl_repo checkout {PUREJAXRL_COMMIT} && "
    "mkdir -p .bench/purejaxrl_src && cp .bench/purejaxrl_repo/purejaxrl/{ppo,"
    "ppo_continuous_action,wrappers}.py .bench/purejaxrl_src/")


# -------------------------------------------------------------------------------- statistics

def first_reach(steps: np.ndarray, curve: np.ndarray, threshold: float) -> list[int | None]:
    """Per seed: env steps at which the training curve first reached ``threshold``."""
    out = []
    for row in np.asarray(curve):
        hit = np.nonzero(row >= threshold)[0]
        out.append(int(steps[hit[0]]) if hit.size else None)
    return out


def summarize(result: dict[str, Any], threshold: float) -> dict[str, Any]:
    final = np.asarray(result["final_eval"], np.float64)
    reach = first_reach(np.asarray(result["curve_steps"]), np.asarray(result["curve_return"]),
                        threshold)
    reached = [r for r in reach if r is not None]
    return {
        "trainer": result["trainer"], "n": len(final), "final_eval": final.tolist(),
        "mean": float(final.mean()), "mean_ci": bootstrap_ci(final),
        "iqm": iqm(final), "iqm_ci": bootstrap_ci(final, iqm, n=2000),
        "solved_fraction": float(np.mean(final >= threshold)),
        "median_steps_to_threshold": float(np.median(reached)) if reached else None,
        "reached_in_training": len(reached), "eval_method": result.get("eval_method", ""),
        "wall_s": result.get("wall_s"),
    }


def join_raw(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One trainer's raw results from runs on disjoint seeds, as one result. Each seed is its
    own run whatever program it shared, so grouping seeds changes nothing but wall time (a long
    task's seeds can be run over several sessions); the wall times add up."""
    parts = sorted(parts, key=lambda r: r["seeds"][0])
    seeds = [seed for r in parts for seed in r["seeds"]]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"{parts[0]['trainer']}: raw results share seeds ({sorted(seeds)})")
    if any(r["curve_steps"] != parts[0]["curve_steps"] for r in parts):
        raise ValueError(f"{parts[0]['trainer']}: raw results logged at different env steps")
    return {**parts[0], "seeds": seeds,
            "final_eval": [x for r in parts for x in r["final_eval"]],
            "curve_return": [row for r in parts for row in r["curve_return"]],
            "wall_s": sum(r.get("wall_s") or 0.0 for r in parts)}


def read_raw(directory: Path, task: str, trainer: str) -> dict[str, Any]:
    """A trainer's results on ``task`` from its raw files in ``directory``
    (``learning_{task}_{trainer}_raw*.json``, one per run), joined."""
    paths = sorted(Path(directory).glob(f"learning_{task}_{trainer}_raw*.json"))
    if not paths:
        raise RuntimeError(f"no learning_{task}_{trainer}_raw*.json in {directory}")
    return join_raw([json.loads(p.read_text()) for p in paths])


# -------------------------------------------------------------------------------- runners

def hparams(config) -> dict[str, Any]:
    """The shared hyperparameters, in the peers' runners' vocabulary."""
    p, n = config.ppo, config.ppo.network
    return {"num_envs": config.num_envs, "num_steps": config.ppo.num_steps,
            "update_epochs": p.update_epochs, "num_minibatches": p.num_minibatches,
            "learning_rate": p.learning_rate, "anneal_lr": p.anneal_lr,
            "max_grad_norm": p.max_grad_norm, "gamma": p.gamma, "gae_lambda": p.gae_lambda,
            "clip_eps": p.clip_eps, "ent_coef": p.ent_coef, "vf_coef": p.vf_coef,
            "hidden": list(n.actor_hidden), "activation": n.activation,
            "normalize_observations": p.normalize_observations}


def _run_json(cmd: list[str], timeout: float) -> dict[str, Any]:
    env = {**{k: v for k, v in os.environ.items() if k not in XLA_ENV}, **XLA_ENV}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed ({proc.returncode}):\n"
                           f"{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def run_trainer(trainer: str, config_path: str, config, seeds: list[int], args) -> dict:
    seed_arg = ",".join(map(str, seeds))
    if trainer == "jaxrl_dist":
        cmd = [sys.executable, "-m", "jaxrl_dist.seeds", config_path, "--seeds", seed_arg,
               *[a for s in args.set for a in ("--set", s)]]
    elif trainer == "purejaxrl":
        if not PUREJAXRL_PYTHON.exists() or not PUREJAXRL_SRC.is_dir():
            raise RuntimeError(f"PureJaxRL venv or source missing ({PUREJAXRL_PYTHON}, "
                               f"{PUREJAXRL_SRC}/): {PUREJAXRL_SETUP}")
        cmd = [str(PUREJAXRL_PYTHON), str(PEERS / "purejaxrl_runner.py"), "--env", config.env,
               "--seeds", seed_arg, "--total-timesteps", str(config.total_timesteps),
               "--hparams", json.dumps(hparams(config)), "--src", str(PUREJAXRL_SRC)]
    else:
        python = rejax_python(args)
        if not python.exists():
            raise RuntimeError(f"rejax venv missing ({python}): {REJAX_SETUP}")
        if config.algo in ("dqn", "pqn"):   # rejax's own config for the algorithm
            cmd = [str(python), str(PEERS / "rejax_q_runner.py"), "--algo", config.algo,
                   "--env", config.env, "--seeds", seed_arg, "--total-timesteps",
                   str(config.total_timesteps), "--eval-points", "10"]
        else:
            cmd = [str(python), str(PEERS / "rejax_runner.py"), "--env", config.env,
                   "--seeds", seed_arg, "--total-timesteps", str(config.total_timesteps),
                   "--hparams", json.dumps(hparams(config))]
    return _run_json(cmd, timeout=args.timeout)


def plot(task: str, results: dict[str, dict], threshold: float, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, r in results.items():
        steps = np.asarray(r["curve_steps"])
        curve = np.asarray(r["curve_return"], np.float64)
        curve = np.where(curve < -1e8, np.nan, curve)
        # points where no seed finished an episode are dropped, and the line joins the rest
        # (Freeway's 2,500-step episodes end in every other logged interval)
        has = ~np.all(np.isnan(curve), 0)
        steps, curve = steps[has], curve[:, has]
        mean = np.nanmean(curve, 0)
        lo, hi = zip(*[bootstrap_ci(c[~np.isnan(c)], n=1000) if np.any(~np.isnan(c))
                       else (np.nan, np.nan) for c in curve.T])
        ax.plot(steps, mean, label=f"{name} ({curve.shape[0]} seeds)")
        ax.fill_between(steps, lo, hi, alpha=0.25)
    ax.axhline(threshold, color="gray", ls="--", lw=1)
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode return (mean, 95% CI over seeds)")
    ax.set_title(task)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def span(seeds: list[int]) -> str:
    """``100–115`` for consecutive seeds, else the list."""
    seeds = sorted(seeds)
    if seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def task_table(task: str, config, seeds: list[int], results: dict[str, dict]
               ) -> tuple[list[dict], list[str]]:
    """Rows (summaries + curves) and the markdown table of one task's trainers."""
    _, threshold, reference = TASKS[task]
    rows = []
    per_trainer = {t: r["seeds"] for t, r in results.items() if r.get("seeds")}
    if len({tuple(s) for s in per_trainer.values()}) > 1:   # joined from runs on other seeds
        which = "; ".join(f"{t}: {len(s)} seeds {span(s)}" for t, s in per_trainer.items())
    else:
        which = f"{len(seeds)} seeds {span(seeds)}"
    md = [f"\n### {task} ({config.env}, {config.total_timesteps:,} steps, {which}; "
          f"threshold {threshold:g}"
          + (f", gymnax-blines reference {reference:g}" if reference is not None else "")
          + ")\n",
          "| trainer | final eval mean [95% CI] | IQM [95% CI] | seeds ≥ threshold at end "
          "| median steps to threshold (seeds reaching it) | wall s |",
          "|---|---|---|---|---|---|"]
    for trainer, result in results.items():
        s = summarize(result, threshold)
        rows.append({"task": task, **s, "curve_steps": result["curve_steps"],
                     "curve_return": result["curve_return"]})
        steps = (f"{s['median_steps_to_threshold']:,.0f} ({s['reached_in_training']}/"
                 f"{s['n']})" if s["median_steps_to_threshold"] is not None else
                 f"— (0/{s['n']})")
        md.append(f"| {trainer} | {s['mean']:.1f} [{s['mean_ci'][0]:.1f}, "
                  f"{s['mean_ci'][1]:.1f}] | {s['iqm']:.1f} [{s['iqm_ci'][0]:.1f}, "
                  f"{s['iqm_ci'][1]:.1f}] | {round(s['solved_fraction'] * s['n'])}/{s['n']} "
                  f"| {steps} | {s['wall_s']:.0f} |")
    md.append("\nEvaluation: " + "; ".join(f"{r['trainer']}: {r['eval_method']}" for r in rows))
    md.append(f"\n![{task}](bench/learning_{task}.png)")
    return rows, md


def bench_learning(args) -> tuple[list[dict], str]:
    from jaxrl_dist import config as config_lib

    seeds = list(range(args.first_seed, args.first_seed + args.num_seeds))
    rows, md = [], []
    for task in args.tasks:
        config_path, threshold, _ = TASKS[task]
        config = config_lib.load(config_path, args.set)
        results, failed = {}, {}
        for trainer in args.trainers:
            print(f"  {task}: {trainer} " + (f"from {args.raw_from}" if args.raw_from else
                                              f"on {len(seeds)} seeds ..."), file=sys.stderr)
            try:
                if args.raw_from:
                    results[trainer] = read_raw(args.raw_from, task, trainer)
                    continue   # already saved
                results[trainer] = run_trainer(trainer, config_path, config, seeds, args)
            except subprocess.TimeoutExpired:
                failed[trainer] = f"timed out after {args.timeout:.0f} s (--timeout)"
            except (RuntimeError, ValueError) as e:   # a failed run; raw files that clash
                failed[trainer] = str(e).splitlines()[0]
            if trainer in failed:   # the other trainers' results still count
                print(f"  {task}: {trainer} FAILED: {failed[trainer]}", file=sys.stderr)
                continue
            # each trainer's raw result as soon as it exists: a later failure loses nothing
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"learning_{task}_{trainer}_raw.json").write_text(
                json.dumps(results[trainer]) + "\n")
        plot(task, results, threshold, args.out / f"learning_{task}.png")
        if args.raw_from and results:
            seeds = sorted({seed for r in results.values() for seed in r["seeds"]})
        task_rows, task_md = task_table(task, config, seeds, results)
        rows += task_rows + [{"task": task, "trainer": t, "failed": why}
                             for t, why in failed.items()]
        md += task_md + [f"\n{t} FAILED: {why}" for t, why in failed.items()]
    return rows, "\n".join(md)
