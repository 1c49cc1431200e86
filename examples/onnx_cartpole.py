"""Play Gymnasium's CartPole-v1 with an exported policy: numpy, onnxruntime and gymnasium only,
no jax and no jaxrl_dist.

    python -m jaxrl_dist.export RUN_DIR                  # writes RUN_DIR/policy.onnx
    python examples/onnx_cartpole.py RUN_DIR/policy.onnx --episodes 5 --seed 0

prints each episode's return (episode i is reset with seed SEED + i) and their mean. The
trainer's CartPole is gymnax's; its policy takes Gymnasium's observation, the same 4 floats.

A recurrent policy (configs/cartpole_pomdp_gru.yaml) works too: the file's ``carry`` metadata
names its carry inputs and outputs, each episode starts from the initial carry (zeros) and each
step feeds back the carry the step before returned; where the run observed only some entries
(``env_kwargs: {hide_velocities: true}``: [x, theta]), the ``observation_indices`` metadata
says which, and only those are fed.
"""

from __future__ import annotations

import argparse
import json

import gymnasium
import numpy as np
import onnxruntime


def initial_carry(carry: list[dict]) -> dict[str, np.ndarray]:
    """{input name: [1, *shape]} at an episode's start, as the ``carry`` metadata says."""
    return {e["input"]: (np.zeros((1, *e["shape"]), np.float32) if e["initial"] == "zeros"
                         else np.asarray(e["initial"], np.float32).reshape(1, *e["shape"]))
            for e in carry}


def play(model_path: str, seeds: list[int]) -> list[float]:
    """One episode per seed, actions from the ONNX policy; their undiscounted returns."""
    session = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    props = session.get_modelmeta().custom_metadata_map
    carry = json.loads(props.get("carry", "[]"))               # [] for a feed-forward policy
    indices = json.loads(props.get("observation_indices", "null"))
    outputs = ["actions", *(e["output"] for e in carry)]
    env = gymnasium.make("CartPole-v1")
    returns = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        state = initial_carry(carry)
        total, done = 0.0, False
        while not done:
            seen = obs if indices is None else obs[indices]
            action, *next_carry = session.run(outputs, {"obs": seen[None].astype(np.float32),
                                                        **state})
            state = {e["input"]: c for e, c in zip(carry, next_carry)}
            obs, reward, terminated, truncated, _ = env.step(int(action[0]))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="policy.onnx written by python -m jaxrl_dist.export")
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="episode i resets with seed + i")
    args = parser.parse_args(argv)
    props = onnxruntime.InferenceSession(
        args.model, providers=["CPUExecutionProvider"]).get_modelmeta().custom_metadata_map
    print(f"{props.get('algorithm')} policy for {props.get('env_id')}, "
          f"action space {json.loads(props.get('action_space', '{}'))}")
    seeds = [args.seed + i for i in range(args.episodes)]
    returns = play(args.model, seeds)
    for seed, ret in zip(seeds, returns):
        print(f"seed {seed}: return {ret:.1f}")
    print(f"mean return {np.mean(returns):.1f} over {len(returns)} episodes")


if __name__ == "__main__":
    main()
