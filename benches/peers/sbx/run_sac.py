"""sbx's SAC (Stable-Baselines3's JAX port) on a Gymnasium task: env steps/s and gradient
updates/s after its random warm-up, for a side-by-side speed check (benches/peers/sbx/README.md).

Usage: python run_sac.py ENV N_ENVS LEARNING_STARTS TOTAL_STEPS [SEED]
SB3's default SAC settings otherwise (batch 256, buffer 1M, train_freq 1, gradient_steps 1,
lr 3e-4, tau 0.005, 256x256 networks, entropy auto). Prints one JSON line."""

import json
import platform
import sys
import time

import gymnasium as gym
import jax
import sbx
from sbx import SAC
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
    env_id, n_envs, learning_starts, total = sys.argv[1], *map(int, sys.argv[2:5])
    seed = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    model = SAC("MlpPolicy", env, learning_starts=learning_starts, seed=seed, verbose=0)
    clock = Clock(learning_starts)
    begin = time.perf_counter()
    model.learn(total, callback=clock)
    end = time.perf_counter()
    steps = model.num_timesteps - clock.start_steps
    updates = steps // n_envs   # gradient_steps=1 per env.step() of the vector env
    print(json.dumps({"peer": "sbx", "sbx": sbx.__version__, "jax": jax.__version__,
                      "env": env_id, "n_envs": n_envs, "env_steps_per_s": steps / (end - clock.start),
                      "gradient_updates_per_s": updates / (end - clock.start),
                      "timed_env_steps": steps, "wall_s": end - begin,
                      "cpu": platform.processor() or platform.machine()}))


if __name__ == "__main__":
    main()
