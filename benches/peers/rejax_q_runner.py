"""Run rejax's DQN or PQN on N seeds (vmapped, one program) and print one JSON line, like
``rejax_runner.py`` does for rejax's PPO. Runs in the rejax venv (rejax needs gymnax 0.0.9):

    python3.11 -m venv .bench/rejax && .bench/rejax/bin/pip install <benches/rejax.py's REJAX_PACKAGES>

    .bench/rejax/bin/python benches/peers/rejax_q_runner.py --algo dqn --env CartPole-v1 --seeds 0,1,2

Defaults are rejax's own published CartPole configs (``configs/gymnax/cartpole.yaml`` of
github.com/keraJLi/rejax, the ``dqn:`` and ``pqn:`` entries), copied below as REJAX_CARTPOLE_DQN and
REJAX_CARTPOLE_PQN and passed to ``Algo.create(**config)`` unchanged (``--hparams`` overrides keys,
``--total-timesteps`` the budget). The runner's only changes: ``skip_initial_evaluation`` (as the
PPO runner), ``total_timesteps`` rounded down to whole iterations, and ``eval_freq`` chosen so that
the evaluation blocks divide the training exactly (see below).

What rejax 0.1.3 does (read from rejax/algos/{dqn,pqn,mixins,algorithm}.py, networks.py,
buffers.py; line numbers are those of the installed 0.1.3 files):

DQN (algos/dqn.py)
* One iteration = 1 step in each of num_envs envs (collect_transitions, 117-165), appended to a
  circular replay buffer (84), then, once global_step > fill_buffer (75), num_epochs gradient steps
  (fori_loop, 102-107), each on batch_size transitions sampled uniformly WITHOUT replacement from
  the filled part of the buffer (buffers.py 198-199). CartPole config: 10 env steps, then 5 steps
  of 100 samples = 50 replayed samples per env step.
* Actions are uniform random while global_step <= fill_buffer (82, 122-124): fill_buffer + num_envs
  env steps (5,010), and no gradient step before that. After that, epsilon-greedy with epsilon
  linear from eps_start to eps_end over int(exploration_fraction * total_timesteps) env steps
  counted from step 0, not from fill_buffer (mixins.py 19-25): 1 -> 0.05 over the first 50,000.
* Target network: Polyak average every iteration (target_update_freq defaults to 1; mixins.py
  161-177; dqn.py 109-113): target <- polyak * target + (1 - polyak) * online = 0.98 / 0.02.
* Double DQN (ddqn true): online argmax at s', target net's value (177-183); target
  r + (1 - done) * gamma * Q'(s', a*) (190-191); loss optax.l2_loss (0.5 x squared error), mean.
* done = terminated OR truncated: gymnax 0.0.9's CartPole is_terminal includes
  time >= max_steps_in_episode (cartpole.py 132-133), so truncation at 500 is NOT bootstrapped.
* Optimizer: optax.clip(max_grad_norm) then Adam (67-70): the gradient is clipped per ELEMENT to
  [-10, 10], not by global norm; Adam eps 1e-8; constant learning rate.
* Network: EpsilonGreedyPolicy(DuelingQNetwork), hidden sizes (64, 64) hard-coded in create_agent
  (57-59), swish; Q = V + (A - mean A) (networks.py 284-295); flax default (lecun normal) init.

PQN (algos/pqn.py, "adapted from purejaxql/pqn_gymnax.py")
* One iteration = num_steps x num_envs env steps, epsilon-greedy from the current parameters
  (108-144), then num_epochs passes over the batch, each shuffled into num_minibatches minibatches,
  one Adam step each (92-105): CartPole 2,048 env steps, 5 x 16 steps of 128 samples. No target
  network, no replay buffer. Q(lambda) targets computed once per iteration from Q-values taken
  with the collection-time parameters (120) and max Q(last_obs) (88-89).
* Network: DiscreteQNetwork, hidden (64, 64) hard-coded, activation relu(LayerNorm(x)) forced
  whatever agent_kwargs says (64-70). Optimizer optax.clip (per element) + Adam, constant LR
  (77-80) (purejaxql: clip_by_global_norm + RAdam). Epsilon schedule in env steps, as DQN.
* Loss optax.l2_loss (0.5 x squared), mean; done = terminated OR truncated as above.
* Its Q(lambda) target is bootstrapped from the WRONG state, one step late. Rollout step t stores
  next_q = Q(o_{t+1}) (120, 134: Q of the obs the step returned; after a done, gymnax's auto-reset
  obs of the next episode). calculate_targets (146-163) scans backwards with carry
  (G_{t+1}, next_q): it starts with max Q(o_T) (154-158), and after step t passes on
  max_next_q = t.next_q.max() = max Q(o_{t+1}) (151-152), which step t-1 then uses as its own
  bootstrap (149-150). So for every t <= T-2:
      G_t = r_t + gamma (1 - d_t) [(1 - lambda) max Q(o_{t+2}) + lambda G_{t+1}]
  where Q(lambda) has max Q(o_{t+1}); only the last step (G_{T-1} = r + gamma max Q(o_T), 155) is
  right. purejaxql's _get_target has the same scan but its transitions store q_val = Q(o_t), so
  its carry after step t is max Q(o_t), right for step t-1; it is one step off only at t = T-2 (it
  starts the carry with max Q(o_T) too). rejax changed the stored Q from Q(o_t) to Q(o_{t+1})
  without shifting the scan. Consequence also across episodes: when d_{t+1} = 1, step t bootstraps
  (weight gamma (1 - lambda)) from max Q of the NEXT episode's first obs. Checked numerically
  (random next_q, rewards, no dones, T = 5): rejax's calculate_targets equals the lambda-return
  recursion with max Q(o_{t+2}), not with max Q(o_{t+1}). The runner leaves it as rejax ships it.

Evaluation. rejax's own evaluation (curve_*) plays 128 episodes with epsilon = 0.005
(make_act; algorithm.py 45-48) after every eval_freq env steps. It reads ts.rng without advancing
it (mixins.py 82, 146), so the number of evaluations does not change the training (checked: PQN,
65,536 steps, seeds 0,1, 4 points vs 1 point give identical final_eval). rejax runs
ceil(total_timesteps / eval_freq) blocks of ceil(eval_freq / iteration) iterations (mixins.py
72-89, 134-149), so an eval_freq that does not divide the training trains past the budget: the
runner picks the largest number of evaluations <= --eval-points (default: ceil(total_timesteps /
the config's eval_freq), i.e. rejax's own eval_freq where that divides exactly) that divides the
iteration count. Each evaluation can step 128 x 500 env steps on CartPole (greedy-ish
policies that balance): ``eval_env_steps`` says how many they took, because they are inside the
timed program. The FINAL policy is evaluated greedily (argmax of Q, no epsilon) on 16 episodes
per seed with rejax.evaluate.evaluate, like the PPO runner's greedy_return.

Timing: ``compile_s`` is ``jit(vmap(train)).lower(keys).compile()``, cold (JAX's persistent
compilation cache is switched off). ``train_s`` is the first run of the compiled program (the
learning run). ``steady_sps`` is the median over warm runs of the SAME compiled program on other
seeds (seed + 1000 * k), env steps of all seeds / seconds; rejax's in-training evaluations are
inside those seconds (``speed_runs`` lists each run with its eval_env_steps). One warm run by
default; --repeats-speed K runs K of them.
"""

import argparse
import copy
import importlib.metadata
import json
import math
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from rejax import DQN, PQN
from rejax.evaluate import evaluate

jax.config.update("jax_enable_compilation_cache", False)   # compile_s is a cold compile

# configs/gymnax/cartpole.yaml of github.com/keraJLi/rejax, ``dqn:`` entry, verbatim
from rejax_configs import REJAX_CARTPOLE_DQN, REJAX_CARTPOLE_PQN  # noqa: E402 (beside this file)

ALGOS = {"dqn": (DQN, REJAX_CARTPOLE_DQN), "pqn": (PQN, REJAX_CARTPOLE_PQN)}

parser = argparse.ArgumentParser()
parser.add_argument("--algo", required=True, choices=sorted(ALGOS))
parser.add_argument("--env", default="CartPole-v1")
parser.add_argument("--seeds", required=True)
parser.add_argument("--total-timesteps", type=int, default=None,
                    help="default: the config's (rounded down to whole iterations)")
parser.add_argument("--hparams", default="{}",
                    help="JSON object of rejax config keys overriding the defaults")
parser.add_argument("--eval-points", type=int, default=None,
                    help="at most this many of rejax's in-training evaluations "
                         "(default: ceil(total_timesteps / the config's eval_freq))")
parser.add_argument("--repeats-speed", type=int, default=0,
                    help="time this many warm runs of the compiled program (default 0: one)")
args = parser.parse_args()
seeds = [int(s) for s in args.seeds.split(",")]
cls, defaults = ALGOS[args.algo]

config = copy.deepcopy(defaults)
overrides = json.loads(args.hparams)
if "agent_kwargs" in overrides:
    config["agent_kwargs"] = {**config.get("agent_kwargs", {}), **overrides.pop("agent_kwargs")}
config.update(overrides)
config["env"] = args.env
if args.total_timesteps is not None:
    config["total_timesteps"] = args.total_timesteps

# env steps per training iteration: DQN steps every env once, PQN num_steps times
unit = config["num_envs"] * (config["num_steps"] if args.algo == "pqn" else 1)
iterations = config["total_timesteps"] // unit
steps = iterations * unit
if iterations < 1:
    raise SystemExit(f"total_timesteps {config['total_timesteps']} < one iteration ({unit})")
cap = args.eval_points or math.ceil(config["total_timesteps"] / config["eval_freq"])
points = max(d for d in range(1, max(1, cap) + 1) if iterations % d == 0)
eval_freq = iterations // points * unit
assert points * eval_freq == steps, (points, eval_freq, steps)
config.update(total_timesteps=steps, eval_freq=eval_freq)
config.setdefault("skip_initial_evaluation", True)
algo = cls.create(**config)     # create deep-copies config: it stays JSON-able for the output


def greedy_return(ts, rng):
    def act(obs, rng):
        if config.get("normalize_observations", False):
            obs = algo.normalize_obs(ts.obs_rms_state, obs)
        q = algo.agent.apply(ts.q_ts.params, obs[None])    # EpsilonGreedyPolicy(Q)'s __call__: Q
        return jnp.argmax(q[0])
    _, returns = evaluate(act, rng, algo.env, algo.env_params, 16)
    return returns.mean()


def keys_of(ss):
    return jax.vmap(jax.random.PRNGKey)(jnp.asarray(ss, jnp.uint32))


start = time.perf_counter()
keys = keys_of(seeds)
compiled = jax.jit(jax.vmap(algo.train)).lower(keys).compile()
compile_s = time.perf_counter() - start
start_train = time.perf_counter()
ts, (lengths, returns) = compiled(keys)               # returns: [S, points(+1), 128 episodes]
jax.block_until_ready((ts, lengths, returns))
train_s = time.perf_counter() - start_train           # training and its evaluations
eval_env_steps = int(np.asarray(lengths).astype(np.int64).sum())
final = jax.jit(jax.vmap(greedy_return))(ts, keys_of([s + 7919 for s in seeds]))
final = np.asarray(jax.block_until_ready(final))
curve = np.asarray(returns).mean(-1)
curve_steps = [(i + 1) * eval_freq for i in range(points)]
if not config["skip_initial_evaluation"]:
    curve_steps = [0] + curve_steps
wall_s = time.perf_counter() - start                  # compile + learning run + final eval

speed_runs = []
for k in range(1, max(1, args.repeats_speed) + 1):
    warm_seeds = [s + 1000 * k for s in seeds]
    warm_keys = jax.block_until_ready(keys_of(warm_seeds))
    t0 = time.perf_counter()
    out = jax.block_until_ready(compiled(warm_keys))
    run_s = time.perf_counter() - t0
    speed_runs.append({"seeds": warm_seeds, "train_s": run_s,
                       "sps": steps * len(seeds) / run_s,
                       "eval_env_steps": int(np.asarray(out[1][0]).astype(np.int64).sum())})
    del out

print(json.dumps({
    "trainer": "rejax", "version": importlib.metadata.version("rejax"),
    "algo": args.algo, "env": args.env, "seeds": seeds,
    "config": config,
    "final_eval": final.tolist(),
    "curve_steps": curve_steps,
    "curve_return": curve.tolist(),
    "eval_method": "final: greedy policy (argmax Q, no epsilon), 16 episodes per seed "
                   "(rejax.evaluate.evaluate); curve: rejax's own evaluation (epsilon-greedy, "
                   f"epsilon 0.005, 128 episodes, {curve.shape[1]} points, every {eval_freq:,} "
                   "env steps), mean over episodes",
    "wall_s": wall_s, "compile_s": compile_s, "train_s": train_s,
    "env_steps": steps, "eval_freq": eval_freq, "iterations": iterations,
    "eval_env_steps": eval_env_steps,
    "sps": steps * len(seeds) / train_s,
    "steady_sps": statistics.median(r["sps"] for r in speed_runs),
    "steady_sps_method": f"median of {len(speed_runs)} warm run(s) of the same compiled program "
                         "(jit(vmap(train)), not recompiled) on other seeds (seed + 1000 k); "
                         "env steps of all seeds / wall seconds, rejax's in-training "
                         "evaluations included (their eval_env_steps in speed_runs)",
    "speed_runs": speed_runs}), flush=True)
