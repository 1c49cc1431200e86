"""Play a Gymnasium environment with an exported policy: numpy, onnxruntime and gymnasium only
(gymnasium[mujoco] for MuJoCo tasks), no jax and no jaxrl_dist.

    python -m jaxrl_dist.export RUN_DIR                  # writes RUN_DIR/policy.onnx
    python examples/onnx_play.py RUN_DIR/policy.onnx --episodes 5 --seed 0

prints each episode's return (episode i is reset with seed SEED + i) and their mean. The
environment is the one the policy was trained on (the file's ``env_id`` metadata: a
``gymnasium:`` id as it is; a gymnax id such as ``CartPole-v1`` or ``Pendulum-v1`` as
Gymnasium's task of the same name, which observes the same floats); ``--env`` names another.
Discrete policies output the action's index, continuous ones the action in the environment's
units (SAC's tanh of the mean, already in the bounds).

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


def gymnasium_id(env_id: str) -> str:
    """The Gymnasium task a trained ``env`` plays: ``gymnasium:X`` is X; a gymnax id is
    Gymnasium's task of the same name."""
    if env_id.startswith("gymnasium:"):
        return env_id.split(":", 1)[1]
    if ":" in env_id:
        raise SystemExit(f"{env_id} is not a Gymnasium task; pass --env with one that observes "
                         f"what the policy was trained on")
    return env_id


def play(model_path: str, seeds: list[int], env_id: str | None = None,
         record: list | None = None) -> list[float]:
    """One episode per seed, actions from the ONNX policy; their undiscounted returns.
    ``record``: a list that gets each step's (observation fed, action taken)."""
    session = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    props = session.get_modelmeta().custom_metadata_map
    carry = json.loads(props.get("carry", "[]"))               # [] for a feed-forward policy
    indices = json.loads(props.get("observation_indices", "null"))
    discrete = "n" in json.loads(props["action_space"])
    outputs = ["actions", *(e["output"] for e in carry)]
    env = gymnasium.make(env_id or gymnasium_id(props["env_id"]))
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
            if record is not None:
                record.append((seen, action[0]))
            obs, reward, terminated, truncated, _ = env.step(
                int(action[0]) if discrete else action[0])
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
    parser.add_argument("--env", help="a Gymnasium id (default: the one the policy trained on)")
    args = parser.parse_args(argv)
    props = onnxruntime.InferenceSession(
        args.model, providers=["CPUExecutionProvider"]).get_modelmeta().custom_metadata_map
    env_id = args.env or gymnasium_id(props["env_id"])
    print(f"{props.get('algorithm')} policy for {props.get('env_id')}, playing {env_id}, "
          f"action space {json.loads(props.get('action_space', '{}'))}")
    seeds = [args.seed + i for i in range(args.episodes)]
    returns = play(args.model, seeds, env_id)
    for seed, ret in zip(seeds, returns):
        print(f"seed {seed}: return {ret:.1f}")
    print(f"mean return {np.mean(returns):.1f} over {len(returns)} episodes")


if __name__ == "__main__":
    main()
