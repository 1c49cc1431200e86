"""Run JaxMARL's recurrent MAPPO on MPE simple spread (``baselines/MAPPO/mappo_rnn_mpe.py``) on N
seeds, vmapped as the siblings run JaxMARL's scripts, and print one JSON line: each seed's final
greedy evaluation (team return) and the times. The MAPPO sibling of ``jaxmarl_runner.py`` (MPE
IPPO) and ``jaxmarl_smax_runner.py`` (SMAX), whose helpers it uses.

The script is imported unchanged from ``.bench/jaxmarl_src/`` (commit c793d095618c6d3edfb5632802
348f57b70a4b94 of https://github.com/FLAIROx/JaxMARL, jaxmarl 0.2.0) after its git blob hash is
checked. Setup: the venv of ``jaxmarl_runner.py``'s docstring, then

    git -C JAXMARL_CLONE show c793d09:baselines/MAPPO/mappo_rnn_mpe.py > .bench/jaxmarl_src/mappo_rnn_mpe.py
    git -C JAXMARL_CLONE show c793d09:baselines/MAPPO/config/mappo_homogenous_rnn_mpe.yaml > .bench/jaxmarl_src/mappo_homogenous_rnn_mpe.yaml

(the yaml for reference only: its values are ``CONFIG`` below).

What it does, and nothing more: their config (``mappo_homogenous_rnn_mpe.yaml``'s values, the
config their hydra decorator names) with ``TOTAL_TIMESTEPS``, ``SEED`` and ``NUM_SEEDS`` from
the command line; ``jax.jit(jax.vmap(make_train(config)))`` on ``jax.random.split(PRNGKey(SEED),
NUM_SEEDS)`` (compiled first, so compile and run are timed apart). Their ``main`` runs ONE seed,
``jax.jit(make_train(config))(PRNGKey(SEED))`` (the yaml's ``NUM_SEEDS`` is unused there); the
seeds are vmapped here as for their IPPO scripts, so N seeds are one program. ``TOTAL_TIMESTEPS``
counts environment steps (``NUM_UPDATES = TOTAL_TIMESTEPS // NUM_STEPS // NUM_ENVS``), each
moving all 3 agents. Their ``train`` returns only the runner state: their metrics leave through
``wandb.log`` (called from an ``io_callback`` each update; under ``vmap`` once per seed, in
seed order), so the ``wandb`` stand-in records those dicts: the logged training team return
(``returns``: ``returned_episode_returns`` at the rollout's last step, averaged over the agents
of every environment, i.e. each environment's latest finished episode; ``MPELogWrapper`` logs
num_agents x each agent's return, so the mean is the sum over the agents). Then each seed's
FINAL actor parameters are evaluated greedily (argmax of their ``ActorRNN``'s logits, the GRU
carry zeroed at each episode's start as their ``ScannedRNN.initialize_carry`` does) on
``--eval-episodes`` episodes of the same environment; the team return is the sum over the
agents of their rewards, summed over the episode.

Usage: .bench/jaxmarl/bin/python benches/peers/jaxmarl_mappo_runner.py --seeds 8 --steps 2000000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from jaxmarl_runner import compile_and_run, their_script


from jaxmarl_smax_runner import _stdout_to_stderr  # noqa: E402

BLOB = "4e63b53297efa36fc8cd13db00bb291f9d8c91da"   # mappo_rnn_mpe.py at c793d09
CONFIG = {   # baselines/MAPPO/config/mappo_homogenous_rnn_mpe.yaml at c793d09 (blob 3cd19393)
    "LR": 2e-3, "NUM_ENVS": 16, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 1e7, "FC_DIM_SIZE": 128,
    "GRU_HIDDEN_DIM": 128, "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4, "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "SCALE_CLIP_EPS": False, "ENT_COEF": 0.01,
    "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh",
    "ENV_NAME": "MPE_simple_spread_v3", "SEED": 1, "NUM_SEEDS": 2, "ENV_KWARGS": {},
    "ANNEAL_LR": True, "WANDB_MODE": "disabled", "ENTITY": "", "PROJECT": ""}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=float, default=2e6)
    parser.add_argument("--eval-episodes", type=int, default=16)
    args = parser.parse_args()
    logged = their_script("mappo_rnn_mpe.py", BLOB)   # their wandb.log dicts
    start = time.perf_counter()
    import jax
    import jax.numpy as jnp
    import numpy as np
    with _stdout_to_stderr():   # jaxmarl prints on import; stdout is the JSON line's
        import mappo_rnn_mpe as their
        import jaxmarl

    config = {**CONFIG, "TOTAL_TIMESTEPS": args.steps, "SEED": args.seed,
              "NUM_SEEDS": args.seeds}
    out, compile_s, run_s = compile_and_run(their.make_train, config)

    updates = int(config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"])
    per_update = config["NUM_ENVS"] * config["NUM_STEPS"]
    env_steps = args.seeds * updates * per_update
    if len(logged) != updates * args.seeds or any(
            d["env_step"] != (i // args.seeds) * per_update for i, d in enumerate(logged)):
        sys.exit(f"their logged metrics: {len(logged)} dicts, expected {updates} updates x "
                 f"{args.seeds} seeds in update-then-seed order")
    returns = np.array([d["returns"] for d in logged]).reshape(updates, args.seeds).T
    # {"runner_state": ((train_states, env_state, obs, done, hstates, rng), update_steps)}
    params = out["runner_state"][0][0][0].params   # the actor's (train_states[1]: critic's)

    env = jaxmarl.make(config["ENV_NAME"], **config["ENV_KWARGS"])
    network = their.ActorRNN(env.action_space(env.agents[0]).n, config=config)
    agents = env.agents

    def evaluate(p, key):   # one episode per key, greedy, the team's return
        obs, state = env.reset(key)
        hidden = their.ScannedRNN.initialize_carry(len(agents), config["GRU_HIDDEN_DIM"])

        def step(carry, k):
            obs, state, hidden, ret, done = carry
            x = (jnp.stack([obs[a] for a in agents])[None],
                 jnp.zeros((1, len(agents)), dtype=bool))
            hidden, pi = network.apply(p, hidden, x)
            act = {a: pi.mode()[0, i] for i, a in enumerate(agents)}
            obs, state, reward, dones, _ = env.step_env(k, state, act)
            ret = ret + jnp.where(done, 0.0, sum(reward[a] for a in agents))
            return (obs, state, hidden, ret, done | dones["__all__"]), None

        keys = jax.random.split(jax.random.fold_in(key, 1), env.max_steps + 1)
        init = (obs, state, hidden, jnp.float32(0), False)
        (_, _, _, ret, done), _ = jax.lax.scan(step, init, keys)
        return ret, done

    keys = jax.random.split(jax.random.PRNGKey(12345), args.eval_episodes)
    ev_ret, ev_done = (np.asarray(x) for x in jax.jit(
        jax.vmap(lambda p: jax.vmap(lambda k: evaluate(p, k))(keys)))(params))
    assert ev_done.all(), "an evaluation episode outlived the scan"
    final = ev_ret.mean(axis=1)
    points = np.linspace(0, updates - 1, min(20, updates)).astype(int)
    print(json.dumps({
        "trainer": "jaxmarl", "commit": "c793d09", "script": "baselines/MAPPO/mappo_rnn_mpe.py",
        "env": config["ENV_NAME"], "seeds": args.seeds, "seed": args.seed,
        "total_timesteps": args.steps, "updates": updates, "env_steps": env_steps,
        "final_eval": final.tolist(), "mean": float(final.mean()),
        "final_train_return": returns[:, -10:].mean(axis=1).tolist(),
        "curve_updates": points.tolist(), "curve_return": returns[:, points].tolist(),
        "compile_s": compile_s, "run_s": run_s, "whole_s": time.perf_counter() - start,
        "env_steps_per_s": env_steps / run_s,
        "eval_method": (f"greedy (argmax), {args.eval_episodes} episodes per seed, GRU carry "
                        "zeroed at reset, final actor parameters; team return: sum over agents"),
        "config": config, "xla_flags": os.environ.get("XLA_FLAGS", "")}))


if __name__ == "__main__":
    main()
