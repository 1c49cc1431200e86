"""Run JaxMARL's recurrent IPPO on SMAX (``baselines/IPPO/ippo_rnn_smax.py``) on N seeds, vmapped
as its own ``main`` does, and print one JSON line: each seed's final greedy evaluation (win rate,
team return) and the times. The SMAX sibling of ``jaxmarl_runner.py`` (MPE), whose helpers it uses.

The script is imported unchanged from ``.bench/jaxmarl_src/`` (commit c793d095618c6d3edfb5632802
348f57b70a4b94 of https://github.com/FLAIROx/JaxMARL, jaxmarl 0.2.0) after its git blob hash is
checked. Setup: the venv of ``jaxmarl_runner.py``'s docstring, then

    git -C JAXMARL_CLONE show c793d09:baselines/IPPO/ippo_rnn_smax.py > .bench/jaxmarl_src/ippo_rnn_smax.py

What it does, and nothing more: their config (``ippo_rnn_smax.yaml``'s values, below) with
``TOTAL_TIMESTEPS``, ``SEED``, ``NUM_SEEDS``, ``MAP_NAME`` (default 3m, our
``configs/smax_ippo_rnn.yaml``'s scenario; theirs is 2s3z) and, if asked, ``NUM_ENVS`` from the
command line; ``jax.jit(jax.vmap(make_train(config)))`` on ``jax.random.split(PRNGKey(SEED),
NUM_SEEDS)`` as their ``main`` does (compiled first, so compile and run are timed apart). Their
``train`` returns only the runner state: their metrics leave through ``wandb.log`` (called from
an ``io_callback`` each update; under ``vmap`` once per seed, in seed order), so the ``wandb``
stand-in records those dicts: the logged training win rate (``returned_won_episode``, which
SMAXLogWrapper sets when the last step's reward is >= 1) and return (ally 0's; the reward is
shared, so the team's is num_allies x that) over each update's finished episodes. Then each
seed's FINAL parameters are evaluated greedily (argmax over the legal actions: their actor's
logits masked with ``get_avail_actions``) on ``--eval-episodes`` episodes of the same
HeuristicEnemySMAX, the GRU carry zeroed at each episode's start. An episode is won when every
enemy unit is dead at its end (``unit_alive`` of the state; ``final_eval_win_rate``); their
reward-based definition (last reward >= 1: enemies dead AND an ally alive, so a draw is not a
win) is reported beside it (``final_eval_win_rate_reward``). The team return is the sum over
the allies of their rewards, summed over the episode.

Usage: .bench/jaxmarl/bin/python benches/peers/jaxmarl_smax_runner.py --seeds 2 --steps 2000000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

from jaxmarl_runner import compile_and_run, their_script


BLOB = "a707207375e1caee039169f446f9e04bd5a33cc4"   # ippo_rnn_smax.py at c793d09
CONFIG = {   # baselines/IPPO/config/ippo_rnn_smax.yaml at c793d09 (blob f7ba0ae8)
    "LR": 0.004, "NUM_ENVS": 128, "NUM_STEPS": 128, "GRU_HIDDEN_DIM": 128, "FC_DIM_SIZE": 128,
    "TOTAL_TIMESTEPS": 1e7, "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4, "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.05, "SCALE_CLIP_EPS": False, "ENT_COEF": 0.01,
    "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.25, "ACTIVATION": "relu",
    "ENV_NAME": "HeuristicEnemySMAX", "MAP_NAME": "2s3z", "SEED": 0, "NUM_SEEDS": 1,
    "ENV_KWARGS": {"see_enemy_actions": True, "walls_cause_death": True,
                   "attack_mode": "closest"},
    "ANNEAL_LR": True,
    "ENTITY": "", "PROJECT": "jaxmarl-smax", "WANDB_MODE": "disabled"}   # ENTITY: ${oc.env:...}


@contextlib.contextmanager
def _stdout_to_stderr():
    """File descriptor 1 onto 2 (an import in jaxmarl's chain resets ``sys.stdout``, so
    ``contextlib.redirect_stdout`` does not hold)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.__stdout__.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=float, default=2e6)
    parser.add_argument("--map", default="3m")
    parser.add_argument("--num-envs", type=int, default=None)
    parser.add_argument("--eval-episodes", type=int, default=32)
    args = parser.parse_args()
    logged = their_script("ippo_rnn_smax.py", BLOB)   # their wandb.log dicts
    start = time.perf_counter()
    import jax
    import jax.numpy as jnp
    import numpy as np
    with _stdout_to_stderr():   # jaxmarl prints on import; stdout is the JSON line's
        import ippo_rnn_smax as their
        from jaxmarl.environments.smax import HeuristicEnemySMAX, map_name_to_scenario

    config = {**CONFIG, "TOTAL_TIMESTEPS": args.steps, "SEED": args.seed,
              "NUM_SEEDS": args.seeds, "MAP_NAME": args.map}
    if args.num_envs is not None:
        config["NUM_ENVS"] = args.num_envs
    out, compile_s, run_s = compile_and_run(their.make_train, config)

    updates = int(config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"])
    per_update = config["NUM_ENVS"] * config["NUM_STEPS"]
    env_steps = args.seeds * updates * per_update
    if len(logged) != updates * args.seeds or any(
            d["env_step"] != (i // args.seeds) * per_update for i, d in enumerate(logged)):
        sys.exit(f"their logged metrics: {len(logged)} dicts, expected {updates} updates x "
                 f"{args.seeds} seeds in update-then-seed order")
    def per_seed(key):   # [seeds, updates]; NaN (no episode finished in an update) -> null
        x = np.array([d[key] for d in logged]).reshape(updates, args.seeds).T
        return np.where(np.isnan(x), None, x)

    win, ret = per_seed("win_rate"), per_seed("returns")
    params = out["runner_state"][0][0].params   # ((train_state, ...), update_steps)

    env = HeuristicEnemySMAX(scenario=map_name_to_scenario(config["MAP_NAME"]),
                             **config["ENV_KWARGS"])
    n_actions = env.action_space(env.agents[0]).n
    network = their.ActorCriticRNN(n_actions, config=config)
    allies = env.agents

    def evaluate(p, key):   # one episode per key, greedy over the legal actions
        obs, state = env.reset(key)
        hidden = their.ScannedRNN.initialize_carry(len(allies), config["GRU_HIDDEN_DIM"])

        def step(carry, k):
            obs, state, hidden, ret, done, won, won_r = carry
            avail = env.get_avail_actions(state)
            x = (jnp.stack([obs[a] for a in allies])[None],
                 jnp.zeros((1, len(allies)), dtype=bool),
                 jnp.stack([avail[a] for a in allies]))
            hidden, pi, _ = network.apply(p, hidden, x)
            act = {a: pi.mode()[0, i] for i, a in enumerate(allies)}
            obs, state, reward, dones, _ = env.step_env(k, state, act)
            live = ~done
            ret = ret + jnp.where(live, sum(reward[a] for a in allies), 0.0)
            end = live & dones["__all__"]
            enemies_dead = jnp.all(~state.state.unit_alive[env.num_allies:])
            won = jnp.where(end, enemies_dead, won)
            won_r = jnp.where(end, reward[allies[0]] >= 1.0, won_r)
            return (obs, state, hidden, ret, done | dones["__all__"], won, won_r), None

        keys = jax.random.split(jax.random.fold_in(key, 1), env.max_steps + 1)
        init = (obs, state, hidden, jnp.float32(0), False, False, False)
        (_, _, _, ret, done, won, won_r), _ = jax.lax.scan(step, init, keys)
        return ret, won, won_r, done

    keys = jax.random.split(jax.random.PRNGKey(12345), args.eval_episodes)
    ev = jax.jit(jax.vmap(lambda p: jax.vmap(lambda k: evaluate(p, k))(keys)))(params)
    ev_ret, ev_won, ev_won_r, ev_done = (np.asarray(x) for x in ev)
    assert ev_done.all(), "an evaluation episode outlived the scan"
    win_rate = ev_won.mean(axis=1)
    team_return = ev_ret.mean(axis=1)
    points = np.linspace(0, updates - 1, min(20, updates)).astype(int)
    print(json.dumps({
        "trainer": "jaxmarl", "commit": "c793d09", "script": "baselines/IPPO/ippo_rnn_smax.py",
        "env": config["ENV_NAME"], "map": config["MAP_NAME"], "seeds": args.seeds,
        "seed": args.seed, "total_timesteps": args.steps, "updates": updates,
        "env_steps": env_steps,
        "final_eval_win_rate": win_rate.tolist(), "mean_eval_win_rate": float(win_rate.mean()),
        "final_eval_return": team_return.tolist(),
        "mean_eval_return": float(team_return.mean()),
        "final_eval_win_rate_reward": ev_won_r.mean(axis=1).tolist(),
        "final_train_win_rate": win[:, -1].tolist(),
        "final_train_return_ally0": ret[:, -1].tolist(),
        "curve_updates": points.tolist(), "curve_win_rate": win[:, points].tolist(),
        "compile_s": compile_s, "run_s": run_s, "whole_s": time.perf_counter() - start,
        "env_steps_per_s": env_steps / run_s,
        "eval_method": (f"greedy (argmax over legal actions), {args.eval_episodes} episodes "
                        "per seed, carry zeroed at reset; win: all enemies dead at the end "
                        "(state); return: sum over allies"),
        "config": config, "xla_flags": os.environ.get("XLA_FLAGS", "")}))


if __name__ == "__main__":
    main()
