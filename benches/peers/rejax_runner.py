"""Run rejax's PPO on N seeds (vmapped, one program) and print one JSON line for
``python -m benches learning``. Runs in its own venv (rejax needs gymnax 0.0.9):

    python3.11 -m venv .bench/rejax && .bench/rejax/bin/pip install <benches/rejax.py's REJAX_PACKAGES>

What rejax does differently with the "same" hyperparameters (read from rejax 0.1.3's
algos/ppo.py): no learning-rate annealing (constant LR), gradient clipped per ELEMENT
(optax.clip), Adam eps 1e-8, value loss clipped at clip_eps, lecun-normal init, done = terminated
or truncated (gymnax 0.0.9: no truncation bootstrap), and its own evaluation samples the
stochastic policy (128 episodes). We report that curve as rejax's, and evaluate the FINAL policy
greedily (argmax / Gaussian mean, clipped) on 16 episodes per seed like ours.
"""

import argparse
import json
import time

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
from rejax import PPO
from rejax.evaluate import evaluate

parser = argparse.ArgumentParser()
parser.add_argument("--env", required=True)
parser.add_argument("--seeds", required=True)
parser.add_argument("--total-timesteps", type=int, required=True)
parser.add_argument("--hparams", required=True)
parser.add_argument("--eval-points", type=int, default=20,
                    help="at most this many of rejax's in-training evaluations")
args = parser.parse_args()
hp = json.loads(args.hparams)
seeds = [int(s) for s in args.seeds.split(",")]
batch = hp["num_envs"] * hp["num_steps"]
updates = args.total_timesteps // batch
steps = updates * batch   # what ours and PureJaxRL train: total_timesteps // batch updates
# rejax trains ceil(total_timesteps / eval_freq) blocks of eval_freq steps, evaluating after
# each, so eval_freq must divide the training exactly or it trains past the budget (Freeway
# trained 1.31x its budget before this: 4 blocks of 344,064 steps for 1,048,576).
# Each of rejax's evaluations plays 128 episodes to the end: on long episodes (Freeway: 2,500
# steps) 20 of them step the env 6x more than training does (a 16-seed run passed an hour).
# Cap them so evaluation steps at most as many env steps as training.
_, _env_params = gymnax.make(args.env)
cap = max(2, min(args.eval_points, steps // (128 * int(_env_params.max_steps_in_episode))))
points = max(d for d in range(1, cap + 1) if updates % d == 0)
eval_freq = updates // points * batch
assert points * eval_freq == steps, (points, eval_freq, steps)

algo = PPO.create(
    env=args.env, num_envs=hp["num_envs"], num_steps=hp["num_steps"],
    num_epochs=hp["update_epochs"], num_minibatches=hp["num_minibatches"],
    total_timesteps=steps, learning_rate=hp["learning_rate"],
    max_grad_norm=hp["max_grad_norm"], gamma=hp["gamma"], gae_lambda=hp["gae_lambda"],
    clip_eps=hp["clip_eps"], ent_coef=hp["ent_coef"], vf_coef=hp["vf_coef"],
    normalize_observations=hp["normalize_observations"], eval_freq=eval_freq,
    skip_initial_evaluation=True,
    agent_kwargs={"hidden_layer_sizes": tuple(hp["hidden"]), "activation": hp["activation"]})


def greedy_return(ts, rng):
    def act(obs, rng):
        if hp["normalize_observations"]:
            obs = algo.normalize_obs(ts.obs_rms_state, obs)
        dist = algo.actor.apply(ts.actor_ts.params, obs[None], method="_action_dist")
        action = jnp.squeeze(dist.mode())
        if hasattr(algo.actor, "action_range"):
            action = jnp.clip(action, *algo.actor.action_range)
        return action
    _, returns = evaluate(act, rng, algo.env, algo.env_params, 16)
    return returns.mean()


start = time.perf_counter()
keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds, jnp.uint32))
train = jax.jit(jax.vmap(algo.train))
compiled = train.lower(keys).compile()
compile_s = time.perf_counter() - start
start_train = time.perf_counter()
ts, (lengths, returns) = compiled(keys)               # returns: [S, points, 128 episodes]
jax.block_until_ready(ts)
train_s = time.perf_counter() - start_train           # training and its evaluations
final = jax.jit(jax.vmap(greedy_return))(ts, jax.vmap(jax.random.PRNGKey)(
    jnp.asarray(seeds, jnp.uint32) + 7919))
jax.block_until_ready(final)
curve = np.asarray(returns).mean(-1)
points = curve.shape[1]
print(json.dumps({
    "trainer": "rejax", "version": __import__("rejax").__version__
    if hasattr(__import__("rejax"), "__version__") else "0.1.3", "env": args.env, "seeds": seeds,
    "final_eval": np.asarray(final).tolist(),
    "curve_steps": [(i + 1) * eval_freq for i in range(points)],
    "curve_return": curve.tolist(),
    "eval_method": "final: greedy policy, 16 episodes per seed; curve: rejax's own evaluation "
                   f"(stochastic policy, 128 episodes, {points} points)"
                   + (f"; learning rate constant at {hp['learning_rate']:g} (rejax has no "
                      "annealing; the config anneals it to 0)" if hp["anneal_lr"] else ""),
    "wall_s": time.perf_counter() - start, "compile_s": compile_s, "train_s": train_s,
    "env_steps": steps}), flush=True)
