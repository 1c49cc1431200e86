"""Who the members of a population are, and how their results are summarised.

A population is ``population.seeds`` x every combination of ``population.sweep`` values, seed
varying fastest. Member ``k`` is defined to equal the single run of :func:`member_config`
``(config, k)``; that is the contract the tests hold the one-program population to. Only the
swept values differ between members, and they travel as arrays in the train state
(``TrainState.hparams``), so one compiled program serves the whole sweep. jax-free.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Any, NamedTuple

import numpy as np

from jaxrl_dist import config as config_lib
from jaxrl_dist.config import Config


class Member(NamedTuple):
    index: int
    seed: int
    values: dict[str, float]   # swept key -> this member's value


def members(config: Config) -> list[Member]:
    """The members of ``config``'s population; one member (the run itself) without one."""
    pop = config.population
    seeds = list(pop.seeds) or [config.seed]
    keys = list(pop.sweep)
    combos = list(itertools.product(*(pop.sweep[k] for k in keys)))
    return [Member(i, seed, dict(zip(keys, combo)))
            for i, (combo, seed) in enumerate(itertools.product(combos, seeds))]


def member_config(config: Config, index: int) -> Config:
    """The single-run config member ``index`` equals: its seed, its swept values, no population."""
    member = members(config)[index]
    data = config_lib.to_dict(config)
    data.pop("population")
    data.pop("pbt")   # the single run selects nothing
    data["seed"] = member.seed
    data = config_lib.apply_overrides(data, [f"{k}={v!r}" for k, v in member.values.items()])
    return config_lib.from_dict(data)


def hparam_name(key: str) -> str:
    """``ppo.learning_rate`` -> ``learning_rate`` (the name inside the train state)."""
    return key.split(".", 1)[1]


def hparam_keys(config: Config) -> list[str]:
    """The dotted keys the train state holds as arrays: the swept ones, and (with PBT on) the
    ones PBT mutates, so that a round's new value is the one the next update reads."""
    keys = list(config.population.sweep)
    if config.pbt.enabled:
        keys += [k for k in config.pbt.mutations if k not in keys]
    return keys


def hparams(config: Config) -> dict[str, np.ndarray]:
    """Each member's starting values of :func:`hparam_keys` as float32 arrays ``[members]``
    (empty without a sweep or PBT mutations): swept values, else the config's."""
    ms, data = members(config), config_lib.to_dict(config)

    def value(member: Member, key: str) -> float:
        if key in member.values:
            return member.values[key]
        node = data
        for part in key.split("."):
            node = node[part]
        return node

    return {hparam_name(k): np.asarray([value(m, k) for m in ms], np.float32)
            for k in hparam_keys(config)}


def label(config: Config, member: Member) -> str:
    parts = [f"seed {member.seed}"] + [f"{k.split('.')[-1]}={v:g}" for k, v in member.values.items()]
    return ", ".join(parts)


# ---------------------------------------------------------------------------- statistics

def iqm(x: Any) -> float:
    """Interquartile mean: the mean of the middle 50 % (robust to a few outlier seeds)."""
    x = np.sort(np.asarray(x, np.float64))
    n = len(x)
    lo, hi = int(np.floor(0.25 * n)), int(np.ceil(0.75 * n))
    return float(np.mean(x[lo:hi])) if hi > lo else float(np.mean(x))


def bootstrap_ci(x: Any, stat=np.mean, n: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile-bootstrap CI of ``stat`` over members (seeds)."""
    x = np.asarray(x, np.float64)
    rng = np.random.default_rng(seed)
    samples = x[rng.integers(0, len(x), size=(n, len(x)))]
    values = samples.mean(1) if stat is np.mean else np.array([stat(s) for s in samples])
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def aggregate(values: Any, threshold: float | None = None) -> dict[str, Any]:
    """Mean, IQM and bootstrap CIs of one number per member (and the solved fraction)."""
    x = np.asarray([np.nan if v is None else v for v in values], np.float64)
    x = x[np.isfinite(x)]
    if not x.size:
        return {"n": 0}
    out = {"n": int(x.size), "mean": float(x.mean()), "mean_ci": bootstrap_ci(x),
           "iqm": iqm(x), "iqm_ci": bootstrap_ci(x, iqm, n=2000),
           "min": float(x.min()), "max": float(x.max())}
    if threshold is not None:
        out["solved"] = int(np.sum(x >= threshold))
    return out


def summarize(config: Config, member_rows: list[dict[str, Any]], layout: str) -> dict[str, Any]:
    """summary.json fields of a population: a ``members`` list, aggregates over members, and
    population-level numbers (means over members; one fingerprint that covers them all)."""
    rows = [{"member": m.index, "seed": m.seed, **m.values, **member_rows[m.index]}
            for m in members(config)]
    digest = hashlib.sha256(b"".join(bytes.fromhex(r["param_fingerprint"]) for r in rows))
    evals = aggregate([r["eval_return"] for r in rows], config.solved_return)
    finals = aggregate([r["final_return"] for r in rows])
    return {
        "members": rows,
        "population": {"size": len(rows), "layout": layout, "eval_return": evals,
                       "final_return": finals},
        "final_return": finals.get("mean"), "eval_return": evals.get("mean"),
        "eval_return_std": None, "best_return": None,
        "param_norm": float(np.sqrt(sum(r["param_norm"] ** 2 for r in rows))),
        "param_fingerprint": digest.hexdigest()}
