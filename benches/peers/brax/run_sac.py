"""Brax's own SAC on a Brax task, with the settings of Brax's training notebook for hopper.

The peer for ``configs/brax_hopper_sac.yaml``: the same environment (Brax's default backend), the
same hyperparameters, timed the same way (wall seconds from the call, compile included). Prints
one JSON line per evaluation and writes them all to ``--out``. Runs in any environment with
``brax`` installed; not a runtime dependency of jaxrl_dist.

    python benches/peers/brax/run_sac.py --env hopper --num-timesteps 1048576 --num-evals 8 --out brax.json
"""
import argparse
import json
import time

import jax
import jax.numpy as jnp

# Brax 0.14.2's training still calls jax.device_put_replicated, which jax >= 0.10 removed: the
# drop-in of jax's pmap migration guide (a stacked copy per device; pmap shards it).
if "device_put_replicated" not in vars(jax):
    jax.device_put_replicated = lambda x, devices: jax.tree.map(
        lambda a: jnp.stack([jnp.asarray(a)] * len(devices)), x)

from brax import envs
from brax.training.agents.sac import train as sac


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="hopper")
    p.add_argument("--num-timesteps", type=int, default=6_553_600)
    p.add_argument("--num-evals", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deterministic-eval", action="store_true",
                   help="evaluate the mean action (ours does; Brax's default samples)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    env = envs.get_environment(a.env)
    rows, t0 = [], time.time()

    def progress(step, metrics):
        row = {"env_steps": int(step), "wall_s": round(time.time() - t0, 2),
               "eval_return": float(metrics["eval/episode_reward"]),
               "eval_return_std": float(metrics.get("eval/episode_reward_std", float("nan"))),
               # Brax's own timings (eval/epoch_eval_time, training/sps, ...): every scalar
               "metrics": {k: float(v) for k, v in metrics.items() if jnp.ndim(v) == 0}}
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(a.out, "w") as f:
            json.dump({"env": a.env, "seed": a.seed, "jax": jax.__version__,
                       "devices": [str(d) for d in jax.devices()], "rows": rows}, f, indent=1)

    # Brax's notebook (notebooks/training.ipynb), 'hopper': the settings configs/brax_hopper_sac.yaml copies.
    sac.train(environment=env, num_timesteps=a.num_timesteps, num_evals=a.num_evals,
              reward_scaling=30, episode_length=1000, normalize_observations=True,
              action_repeat=1, discounting=0.997, learning_rate=6e-4, num_envs=128,
              batch_size=512, grad_updates_per_step=64, max_devices_per_host=1,
              max_replay_size=1048576, min_replay_size=8192, seed=a.seed,
              deterministic_eval=a.deterministic_eval, progress_fn=progress)
    print(json.dumps({"done": True, "wall_s": round(time.time() - t0, 2)}), flush=True)


if __name__ == "__main__":
    main()
