"""The jax side of the export check: ``policy.load(RUN_DIR)`` playing the Gymnasium task the
way examples/onnx_play.py plays the exported file (episode i reset with seed SEED + i, one
observation at a time), printing the same lines.

    python docs/bench/export_sac_halfcheetah/policy_play.py RUN_DIR --episodes 10 --seed 100
"""

from __future__ import annotations

import argparse

import gymnasium
import numpy as np

from jaxrl_dist import policy as policy_lib


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    policy = policy_lib.load(args.run_dir)
    env = gymnasium.make(policy.spec.name.split(":", 1)[-1])   # gymnasium:X -> X
    returns = []
    for seed in range(args.seed, args.seed + args.episodes):
        obs, _ = env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            action = np.asarray(policy(obs[None].astype(np.float32)))[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
        print(f"seed {seed}: return {total:.1f}")
    print(f"mean return {np.mean(returns):.1f} over {len(returns)} episodes")


if __name__ == "__main__":
    main()
