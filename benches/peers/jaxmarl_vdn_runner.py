"""Run JaxMARL's PQN-VDN (feed-forward) on MPE simple spread (``baselines/QLearning/pqn_vdn_ff.py``)
on N seeds, vmapped as its own ``single_run`` does, and print one JSON line: each seed's final
greedy evaluation (team return) and the times. The value-decomposition sibling of
``jaxmarl_runner.py`` (MPE IPPO), ``jaxmarl_mappo_runner.py`` (MPE MAPPO) and
``jaxmarl_smax_runner.py`` (SMAX), whose helpers it uses; our side is ``configs/mpe_spread_vdn.yaml``.

The script is imported unchanged from ``.bench/jaxmarl_src/`` (commit c793d095618c6d3edfb5632802
348f57b70a4b94 of https://github.com/FLAIROx/JaxMARL, jaxmarl 0.2.0) after its git blob hash is
checked. Setup: the venv of ``jaxmarl_runner.py``'s docstring, then

    git -C JAXMARL_CLONE show c793d09:baselines/QLearning/pqn_vdn_ff.py > .bench/jaxmarl_src/pqn_vdn_ff.py
    git -C JAXMARL_CLONE show c793d09:baselines/QLearning/config/alg/pqn_vdn_ff_mpe.yaml > .bench/jaxmarl_src/pqn_vdn_ff_mpe.yaml
    git -C JAXMARL_CLONE show c793d09:baselines/QLearning/config/config.yaml > .bench/jaxmarl_src/pqn_vdn_config.yaml

(the yamls for reference only: their values are ``CONFIG`` below).

What it does, and nothing more: their config (``pqn_vdn_ff_mpe.yaml``'s values merged over the
top-level ``config.yaml``'s, as their ``single_run`` merges ``alg`` into the main config) with
``TOTAL_TIMESTEPS``, ``SEED`` and ``NUM_SEEDS`` from the command line; their environment,
``env_from_config`` (``MPELogWrapper(make("MPE_simple_spread_v3"))``); ``jax.jit(jax.vmap(
make_train(config, env)))`` on ``jax.random.split(PRNGKey(SEED), NUM_SEEDS)`` as their
``single_run`` does (compiled first, so compile and run are timed apart). Three settings differ
from the yamls, none touching the algorithm:

* ``TEST_DURING_TRAINING: False`` (the yaml: True): their greedy test (512 environments x 30
  steps at the start and every 5 % of the updates, a ``lax.cond`` inside the training scan) is
  left out, so the program is purely training, as the siblings'; their ``train`` returns its
  final parameters either way (``runner_state[0]``), and the final greedy evaluation below is
  their test function run on them.
* ``WANDB_MODE: "offline"`` (``config.yaml``: disabled): their metrics leave ONLY through
  ``wandb.log`` in a ``jax.debug.callback`` (not an ``io_callback``) that their ``_update_step``
  adds only when ``WANDB_MODE != "disabled"`` (``train`` returns ``"metrics": None``); the
  ``wandb`` stand-in records those dicts, so that callback runs as the siblings' do (inside
  ``run_s``), and nothing reaches wandb.
* ``WANDB_LOG_ALL_SEEDS: True`` (``config.yaml``: False): it only adds copies ``rng{rng[0]}/...``
  of the logged values to each dict, which tells the seeds apart: ``jax.debug.callback`` is
  unordered and unrolled once per seed under ``vmap``, so the runner sorts the dicts by update
  (``update_steps``) and seed, and checks there is exactly one per update per seed.

Environment steps are counted as their ``TOTAL_TIMESTEPS`` counts them: ``NUM_UPDATES =
TOTAL_TIMESTEPS // NUM_STEPS // NUM_ENVS``, each update stepping ``NUM_ENVS`` (256) environments
``NUM_STEPS`` (16) times, 4,096 steps, each moving all 3 agents (their ``env_step``,
``update_steps x NUM_ENVS x NUM_STEPS``); ``env_steps`` below is that per seed x the seeds
(2,000,000 asks 488 updates: 1,998,848 steps per seed). The logged training team return
(``returned_episode_returns``: ``MPELogWrapper`` logs num_agents x each agent's return, so its
mean over the agents is the sum over them) is their mean over the update's steps, environments
and agents of each environment's LATEST finished episode (0 before an environment's first end,
so the first updates read low); ``final_train_return`` is its mean over the last 10 updates.

Then each seed's FINAL parameters are evaluated greedily as their ``get_greedy_metrics`` does:
their ``CTRolloutManager(env, preprocess_obs=True)`` (the agent's one-hot appended to its
observation), their ``QNetwork`` applied to each agent's own observation with the final
``params`` and ``batch_stats``, argmax over the valid actions (all 5 on MPE), on
``--eval-episodes`` episodes (one per environment from reset, the same episodes for every seed).
An episode is 26 steps (``env.max_steps`` 25: ``done`` is ``step >= max_steps`` before the step
counter increments); the scan runs ``max_steps + 1`` steps and checks every episode ended. The
team return is the sum over the agents of their rewards (``reward["__all__"]``, their team
reward) over the episode; their own test metric (the nanmean of ``returned_episode_returns`` at
the episodes' ends) is computed beside it and must agree.

Usage: .bench/jaxmarl/bin/python benches/peers/jaxmarl_vdn_runner.py --seeds 8 --steps 2000000
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import sys
import time

from jaxmarl_runner import compile_and_run, their_script


from jaxmarl_smax_runner import _stdout_to_stderr  # noqa: E402

BLOB = "7c13aeca406836b3660e55f5905b9980a2b0ec6d"   # pqn_vdn_ff.py at c793d09
CONFIG = {   # baselines/QLearning/config/alg/pqn_vdn_ff_mpe.yaml at c793d09 (blob e4cec909)
    "TOTAL_TIMESTEPS": 1e7, "NUM_ENVS": 256, "NUM_STEPS": 16, "MEMORY_WINDOW": 0,
    "HIDDEN_SIZE": 256, "NUM_LAYERS": 2, "NORM_INPUTS": False, "NORM_TYPE": "layer_norm",
    "EPS_START": 1.0, "EPS_FINISH": 0.1, "EPS_DECAY": 0.1, "MAX_GRAD_NORM": 1,
    "NUM_MINIBATCHES": 16, "NUM_EPOCHS": 4, "LR": 0.0005, "LR_LINEAR_DECAY": False,
    "GAMMA": 0.9, "LAMBDA": 0.3, "ENV_NAME": "MPE_simple_spread_v3", "ENV_KWARGS": {},
    "TEST_DURING_TRAINING": False,   # the yaml: True (see the docstring)
    "TEST_INTERVAL": 0.05, "TEST_NUM_STEPS": 30, "TEST_NUM_ENVS": 512,
    # baselines/QLearning/config/config.yaml at c793d09 (blob 95e02b99), the keys the script
    # reads (HYP_TUNE and SAVE_PATH: their main/single_run only)
    "NUM_SEEDS": 1, "SEED": 0, "ENTITY": "", "PROJECT": "",
    "WANDB_MODE": "offline",         # config.yaml: disabled (see the docstring)
    "WANDB_LOG_ALL_SEEDS": True}     # config.yaml: False (see the docstring)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=float, default=2e6)
    parser.add_argument("--eval-episodes", type=int, default=64)
    args = parser.parse_args()
    logged = their_script("pqn_vdn_ff.py", BLOB)   # their wandb.log dicts
    start = time.perf_counter()
    import jax
    import jax.numpy as jnp
    import numpy as np
    with _stdout_to_stderr():   # jaxmarl prints on import; stdout is the JSON line's
        import pqn_vdn_ff as their
        from jaxmarl.wrappers.baselines import CTRolloutManager

    # an int, as hydra gives `alg.TOTAL_TIMESTEPS=2000000` (lax.scan takes no float length)
    config = {**CONFIG, "TOTAL_TIMESTEPS": int(args.steps), "SEED": args.seed,
              "NUM_SEEDS": args.seeds}
    env, _ = their.env_from_config(copy.deepcopy(config))   # as their single_run
    out, compile_s, run_s = compile_and_run(functools.partial(their.make_train, env=env),
                                            config)

    updates = int(config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"])
    per_update = config["NUM_ENVS"] * config["NUM_STEPS"]
    env_steps = args.seeds * updates * per_update
    # their callback's original_seed: rng[0] of each seed's key, as compile_and_run splits them
    ids = [int(k[0]) for k in np.asarray(
        jax.random.split(jax.random.PRNGKey(args.seed), args.seeds))]
    rows = {}
    for d in logged:
        seed = [i for i, s in enumerate(ids) if f"rng{s}/update_steps" in d]
        rows[(int(d["update_steps"]), *seed)] = d
    if len(set(ids)) != args.seeds or len(logged) != updates * args.seeds or sorted(rows) != [
            (u, i) for u in range(1, updates + 1) for i in range(args.seeds)] or any(
            d["env_step"] != u * per_update for (u, _), d in rows.items()):
        sys.exit(f"their logged metrics: {len(logged)} dicts, expected one per update "
                 f"({updates}) per seed ({args.seeds}), env_step = update x {per_update}")
    returns = np.array([[rows[(u, i)]["returned_episode_returns"]
                         for u in range(1, updates + 1)] for i in range(args.seeds)])
    train_state = out["runner_state"][0]   # (train_state, expl_state, test_state, rng)

    test_env = CTRolloutManager(env, batch_size=args.eval_episodes, preprocess_obs=True)
    network = their.QNetwork(
        action_dim=test_env.max_action_space, hidden_size=config["HIDDEN_SIZE"],
        num_layers=config["NUM_LAYERS"], norm_type=config["NORM_TYPE"],
        norm_input=config.get("NORM_INPUT", False), dueling=config.get("DUELING", False))
    agents = env.agents

    def evaluate(params, batch_stats, key):   # their get_greedy_metrics, to the first ends
        key_r, key_s = jax.random.split(key)
        obs, state = test_env.batch_reset(key_r)

        def step(carry, k):
            obs, state, ret, theirs, done = carry
            q = jax.vmap(network.apply, in_axes=(None, 0))(
                {"params": params, "batch_stats": batch_stats},
                jnp.stack([obs[a] for a in agents]))   # [agents, episodes, actions]
            valid = test_env.get_valid_actions(state.env_state)
            q = q - (1 - jnp.stack([valid[a] for a in agents])) * 1e10
            act = jnp.argmax(q, axis=-1)
            obs, state, reward, dones, infos = test_env.batch_step(
                k, state, {a: act[i] for i, a in enumerate(agents)})
            live = ~done
            ret = ret + jnp.where(live, reward["__all__"], 0.0)
            end = live & dones["__all__"]
            theirs = jnp.where(end, infos["returned_episode_returns"].mean(-1), theirs)
            return (obs, state, ret, theirs, done | dones["__all__"]), None

        zeros = jnp.zeros(args.eval_episodes)
        init = (obs, state, zeros, zeros, jnp.zeros(args.eval_episodes, bool))
        keys = jax.random.split(key_s, env.max_steps + 1)
        (_, _, ret, theirs, done), _ = jax.lax.scan(step, init, keys)
        return ret, theirs, done

    ev_ret, ev_theirs, ev_done = (np.asarray(x) for x in jax.jit(jax.vmap(
        evaluate, in_axes=(0, 0, None)))(train_state.params, train_state.batch_stats,
                                         jax.random.PRNGKey(12345)))
    assert ev_done.all(), "an evaluation episode outlived the scan"
    final = ev_ret.mean(axis=1)
    assert np.allclose(final, ev_theirs.mean(axis=1), rtol=1e-4, atol=1e-3), \
        "the team return disagrees with their test metric"
    points = np.linspace(0, updates - 1, min(20, updates)).astype(int)
    print(json.dumps({
        "trainer": "jaxmarl", "commit": "c793d09", "script": "baselines/QLearning/pqn_vdn_ff.py",
        "env": config["ENV_NAME"], "seeds": args.seeds, "seed": args.seed,
        "total_timesteps": args.steps, "updates": updates, "env_steps": env_steps,
        "final_eval": final.tolist(), "mean": float(final.mean()),
        "final_train_return": returns[:, -10:].mean(axis=1).tolist(),
        "curve_updates": points.tolist(), "curve_return": returns[:, points].tolist(),
        "compile_s": compile_s, "run_s": run_s, "whole_s": time.perf_counter() - start,
        "env_steps_per_s": env_steps / run_s,
        "eval_method": (f"greedy (argmax Q over each agent's own observation + one-hot id), "
                        f"{args.eval_episodes} episodes per seed, final parameters; team "
                        "return: sum over agents"),
        "config": config, "xla_flags": os.environ.get("XLA_FLAGS", "")}))


if __name__ == "__main__":
    main()
