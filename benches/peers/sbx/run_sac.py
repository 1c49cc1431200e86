"""sbx's SAC (Stable-Baselines3's JAX port), or Stable-Baselines3's own (torch, CPU), on a
Gymnasium task: env steps/s and gradient updates/s after its random warm-up, for a side-by-side
speed check (benches/peers/sbx/README.md). The sbx venv holds both libraries.

Usage: python run_sac.py ENV N_ENVS LEARNING_STARTS TOTAL_STEPS [SEED] [--lib sbx|sb3]
SB3's default SAC settings otherwise (batch 256, buffer 1M, train_freq 1, gradient_steps 1,
lr 3e-4, tau 0.005, 256x256 networks, entropy auto). Prints one JSON line."""

import argparse
import json
import platform
import time

import jax
import sbx
import stable_baselines3
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env


class Clock(BaseCallback):
    """Times the steps after the warm-up (the learner's steady rate)."""

    def __init__(self, learning_starts):
        super().__init__()
        self.learning_starts, self.start, self.start_steps = learning_starts, None, 0

    def _on_step(self):
        if self.start is None and self.num_timesteps >= self.learning_starts + 1000:
            self.start, self.start_steps = time.perf_counter(), self.num_timesteps
        return True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("env_id")
    for name in ("n_envs", "learning_starts", "total"):
        parser.add_argument(name, type=int)
    parser.add_argument("seed", type=int, nargs="?", default=0)
    parser.add_argument("--lib", choices=("sbx", "sb3"), default="sbx")
    a = parser.parse_args()
    env_id, n_envs, learning_starts, total, seed, lib = (
        a.env_id, a.n_envs, a.learning_starts, a.total, a.seed, a.lib)
    env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    if lib == "sbx":
        model = sbx.SAC("MlpPolicy", env, learning_starts=learning_starts, seed=seed, verbose=0)
    else:   # torch on the CPU, its threads as torch picks them
        model = stable_baselines3.SAC("MlpPolicy", env, learning_starts=learning_starts,
                                      seed=seed, verbose=0, device="cpu")
    clock = Clock(learning_starts)
    begin = time.perf_counter()
    model.learn(total, callback=clock)
    end = time.perf_counter()
    steps = model.num_timesteps - clock.start_steps
    updates = steps // n_envs   # gradient_steps=1 per env.step() of the vector env
    print(json.dumps({"peer": lib, "sbx": sbx.__version__, "jax": jax.__version__,
                      "sb3": stable_baselines3.__version__, "torch": torch.__version__,
                      "env": env_id, "n_envs": n_envs, "env_steps_per_s": steps / (end - clock.start),
                      "gradient_updates_per_s": updates / (end - clock.start),
                      "timed_env_steps": steps, "wall_s": end - begin,
                      "cpu": platform.processor() or platform.machine()}))


if __name__ == "__main__":
    main()
