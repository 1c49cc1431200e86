"""bench atari: how close collection comes to the emulator's own speed.

Acting plus stepping (no learning) with the config's network, through the learner's own
``collect`` program (the Q-network's epsilon-greedy act and ale-py's pool stepped inside the
program), against ale-py's vectorised environment stepped from numpy with uniformly random
actions: the same game, environments, preprocessing and emulator threads, one device, in this
process, alternated repeat by repeat. Reported: env steps/s of each and their ratio (issue 33's
goal: at least 0.7).
"""

from __future__ import annotations

import time

import numpy as np

from benches.common import CARTPOLE, _fmt

DEFAULT_CONFIG = "configs/pong_dqn.yaml"


def _stats(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": float(np.median(values)), "max": max(values)}


def bench_atari(args) -> tuple[list[dict], str]:
    import jax

    from jaxrl_dist import config as config_lib, sharding, sizes as sizes_lib
    from jaxrl_dist.programs import make_learner
    from jaxrl_dist.envs import from_config

    path = DEFAULT_CONFIG if args.config == CARTPOLE else args.config
    config = config_lib.load(path, [*args.set, "eval_episodes=1"])
    spec = from_config(config)
    sizes = sizes_lib.derive_sizes(config, 1)
    learner = make_learner(config, sizes, spec, sharding.make_mesh(jax.devices()[:1]))
    state = learner.init(jax.random.PRNGKey(config.seed))
    per_call = sizes.local_envs * learner.agent.steps_per_env
    calls = max(1, min(args.steps, 40_000) // per_call)

    collect = learner.collect.lower(state.train, state.actors, state.train.key).compile()
    train, actors = state.train, state.actors

    def ours() -> float:
        nonlocal actors
        key = train.key
        jax.block_until_ready(actors)
        start = time.perf_counter()
        for i in range(calls):
            actors, trajectory = collect(train, actors, jax.random.fold_in(key, i))
        jax.block_until_ready(trajectory)
        return calls * per_call / (time.perf_counter() - start)

    from ale_py.vector_env import AtariVectorEnv
    s, E = spec.pool.settings, sizes.local_envs
    reference = AtariVectorEnv(
        spec.pool.game, E, num_threads=min(E, s["num_threads"]),
        max_num_frames_per_episode=s["max_frames"],
        repeat_action_probability=s["repeat_action_probability"],
        full_action_space=s["full_action_space"], img_height=s["image_size"],
        img_width=s["image_size"], stack_num=s["frame_stack"], frameskip=s["frame_skip"],
        maxpool=s["max_pool"], noop_max=s["noop_max"], reward_clipping=False,
        use_fire_reset=s["fire_reset"])
    reference.reset(seed=config.seed)
    rng = np.random.default_rng(0)

    def ale_py() -> float:
        steps = calls * per_call // E
        actions = rng.integers(0, spec.action_dim, (steps, E))
        start = time.perf_counter()
        for t in range(steps):
            reference.step(actions[t])
        return steps * E / (time.perf_counter() - start)

    ours(), ale_py()   # warm-up: first calls, emulator caches
    measured: dict[str, list[float]] = {"ours": [], "ale_py": []}
    for _ in range(args.repeats):
        measured["ours"].append(ours())
        measured["ale_py"].append(ale_py())
    ratios = [a / b for a, b in zip(measured["ours"], measured["ale_py"])]
    row = {"config": path, "game": spec.pool.game, "envs": E,
           "emulator_threads": min(E, s["num_threads"]), "env_steps_per_repeat": calls * per_call,
           "ours_sps": _stats(measured["ours"]), "ale_py_sps": _stats(measured["ale_py"]),
           "ratio": _stats(ratios)}
    md = ["| config | envs | emulator threads | acting + stepping, ours (env steps/s) | "
          "ale-py random actions | ours / ale-py |", "|---|---|---|---|---|---|",
          f"| {path} | {E} | {row['emulator_threads']} | {_fmt(row['ours_sps'])} | "
          f"{_fmt(row['ale_py_sps'])} | {_fmt(row['ratio'], 2)} |"]
    return [row], "\n".join(md)
