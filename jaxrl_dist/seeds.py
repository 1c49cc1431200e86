"""Many seeds of one config as ONE program on one device: a population of seeds, read back
as arrays (no run directory, no checkpoints).

Used to measure learning (``bench learning``) and by the CI learning test: a claim about a
config is only as good as the number of seeds behind it, and 16 sequential runs cost 16
compiles. Each seed's result equals a single run with that seed (same keys, same math).
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_dist import config as config_lib
from jaxrl_dist import sizes as sizes_lib
from jaxrl_dist import sharding
from jaxrl_dist.config import Config
from jaxrl_dist.envs import from_config as make_env_from_config
from jaxrl_dist.programs import make_learner


def train_seeds(config: Config, seeds: Sequence[int], *, env: Any = None,
                device: jax.Device | None = None) -> dict[str, Any]:
    """Train ``config`` once per seed, all seeds vmapped in one program on one device.

    Returns ``params`` (one tree per seed) and numpy arrays: ``curve_steps`` [C],
    ``curve_return`` [S, C] (mean return of the
    episodes finished in each call of ``updates_per_call`` updates, NaN if none) and
    ``eval_return`` [S] (deterministic evaluation of the final parameters,
    ``config.eval_episodes`` episodes per seed), and ``curve_NAME`` [S, C] for each metric the
    learner declares as a mean. ``config.population`` is ignored.
    """
    layout = sharding.make_layout([device or jax.devices()[0]], members=len(seeds))
    sizes = sizes_lib.derive_sizes(config, 1)
    spec = make_env_from_config(config, env)
    learner = make_learner(config, sizes, spec, layout)
    keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray(list(seeds), jnp.uint32))

    state = learner.init(keys)
    steps, returns, done, curves = [], [], 0, {}
    for n in sizes_lib.calls(sizes):
        state, metrics = learner.update(state, n)
        metrics = jax.device_get(metrics)   # one packed array, read by name below
        done += n
        ret = np.asarray(metrics["episode_return_sum"]).sum(1)
        episodes = np.asarray(metrics["episodes"]).sum(1)
        steps.append(done * sizes.batch_size)
        returns.append(np.where(episodes > 0, ret / np.maximum(episodes, 1), np.nan))
        for name, how in learner.agent.metrics.items():   # the learner's own diagnostics
            if how == "mean":
                curves.setdefault(name, []).append(np.asarray(metrics[name]).mean(1))
    final = learner.evaluate(state.train, keys, learner.env_inputs.eval)
    params = jax.device_get(state.train.params)
    return {"params": [jax.tree.map(lambda x, i=i: x[i], params) for i in range(len(seeds))],
            "curve_steps": np.asarray(steps), "curve_return": np.stack(returns, 1),
            "eval_return": np.asarray(final["return_mean"]), "seeds": list(seeds),
            **({"eval_win_rate": np.asarray(final["win_rate"])} if "win_rate" in final else {}),
            **{f"curve_{name}": np.stack(v, 1) for name, v in curves.items()}}


def main(argv: list[str] | None = None) -> int:
    """``python -m jaxrl_dist.seeds CONFIG --seeds 0,1,2 [--set K=V ...]``: one JSON line with
    every seed's final evaluation and training curve (the format ``bench learning`` reads from
    every trainer it compares)."""
    import argparse
    import json
    import os
    import sys
    import time

    parser = argparse.ArgumentParser(prog="python -m jaxrl_dist.seeds")
    parser.add_argument("config")
    parser.add_argument("--seeds", required=True, help="comma-separated, e.g. 0,1,2")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args(argv)
    config = config_lib.load(args.config, args.overrides)
    seeds = [int(s) for s in args.seeds.split(",")]
    start = time.perf_counter()
    result = train_seeds(config, seeds)
    print(json.dumps({
        "trainer": "jaxrl_dist", "env": config.env, "seeds": seeds,
        "final_eval": result["eval_return"].tolist(),
        **({"final_win_rate": result["eval_win_rate"].tolist()}
           if "eval_win_rate" in result else {}),
        "curve_steps": result["curve_steps"].tolist(),
        "curve_return": np.nan_to_num(result["curve_return"], nan=-1e9).tolist(),
        "eval_method": f"{'greedy' if config.eval_deterministic else 'sampled'} policy, "
                       f"{config.eval_episodes} episodes per seed",
        "wall_s": time.perf_counter() - start, "xla_flags": os.environ.get("XLA_FLAGS", "")}),
        flush=True)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
