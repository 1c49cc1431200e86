"""Run PureJaxRL's PPO on N seeds (vmapped, one program) and print one JSON line for
``python -m benches learning``. PureJaxRL is not a package: this runner imports its
scripts unchanged from ``.bench/purejaxrl_src/`` (``ppo.py`` for discrete actions,
``ppo_continuous_action.py`` for continuous ones, and their ``wrappers.py``), exported from commit
31756b197773a52db763fdbe6d635e4b46522a73 of https://github.com/luchris429/purejaxrl (Sep 2024,
the newest; the three files last changed in 5343613, Jun 2024). The runner checks the three
files' git blob hashes against that commit. Setup, one line each:

    python3.11 -m venv .bench/purejaxrl && .bench/purejaxrl/bin/pip install jax==0.10.2 jaxlib==0.10.2 flax==0.12.8 optax==0.2.8 distrax==0.1.9 tfp-nightly==0.26.0.dev20261027 chex==0.1.92 gymnax==0.0.9 numpy==2.4.6
    git clone https://github.com/luchris429/purejaxrl .bench/purejaxrl_repo && git -C .bench/purejaxrl_repo checkout 31756b197773a52db763fdbe6d635e4b46522a73 && mkdir -p .bench/purejaxrl_src && cp .bench/purejaxrl_repo/purejaxrl/{ppo,ppo_continuous_action,wrappers}.py .bench/purejaxrl_src/

The jax/flax/optax are the versions our own venv and the rejax venv run (so wall times compare);
PureJaxRL's code runs on them unchanged. gymnax must be 0.0.x: PureJaxRL expects gymnax's
5-tuple ``step`` (1.0 returns terminated and truncated separately). distrax 0.1.9 pulls in
tfp-nightly.

What the runner does, and nothing more: it builds their config dict from our hyperparameters
(benches.learning.hparams), runs ``jax.jit(jax.vmap(make_train(config)))(keys)`` as their README
does, sums their ``metrics`` (``returned_episode_returns`` where ``returned_episode``) in the same
program into ~20 curve points, and evaluates each seed's FINAL parameters greedily (argmax /
Gaussian mean clipped to the action bounds) on 16 episodes of the gymnax env, like ours. Three
adaptations that leave their algorithm alone:

* ``wrappers.py`` imports brax and navix at the top, for envs we don't use; empty stand-in modules
  are put in ``sys.modules`` instead of installing them.
* ``ppo_continuous_action.py`` is written for Brax only (``BraxGymnaxWrapper(ENV_NAME)`` is hard-
  coded, and its ``ClipAction`` clips to Brax's [-1, 1] action range whatever the env). The runner
  replaces ``BraxGymnaxWrapper`` in that module with a gymnax env in Brax's convention: the policy
  acts in [-1, 1], mapped affinely onto the env's bounds (Pendulum: x 2 N m). So the Gaussian's
  initial std (log_std = 0) is 2 N m where ours is 1 N m. The greedy evaluation goes through the
  same mapping (mean clipped to [-1, 1], then scaled: the mean clipped to [-2, 2]).
* Their ``ACTIVATION`` knows relu and tanh only (anything else silently means tanh): the runner
  refuses any other.

What PureJaxRL does differently with the "same" hyperparameters (read from the files above):

* Network width is hard-coded: 64x64 in ppo.py (= ours), 256x256 in ppo_continuous_action.py
  (ours: 64x64 in every config), so Pendulum runs a 16x larger hidden layer. ``hidden`` is not
  passed; the JSON's ``notes`` and ``eval_method`` say when it differs from ours.
* Value loss clipped at CLIP_EPS around the old value, in raw return units (ours: unclipped,
  vf_clip_eps null), and no value-target normalisation (ours: normalize_values on).
* done = terminated or truncated (gymnax 0.0.x has no separate truncation): no bootstrap at the
  time limit (ours: bootstrap_truncation on). Pendulum never terminates, so every episode end is
  treated as terminal there.
* One global-norm gradient clip over actor and critic together (ours: a separate clip per network).
* Learning-rate annealing steps once per UPDATE (frac = 1 - update / NUM_UPDATES, so the last
  update still uses LR / NUM_UPDATES); ours decays linearly per SGD step to 0.
* NORMALIZE_ENV (continuous only; set from our normalize_observations, false in every config)
  normalises rewards too, not only observations; the discrete script has no normalisation.
* Same as ours: Adam eps 1e-5, orthogonal init (sqrt 2 hidden, 0.01 policy head, 1.0 value head,
  zero biases), separate actor and critic MLPs, advantages normalised per minibatch (std + 1e-8),
  state-independent log_std initialised at 0, budget TOTAL_TIMESTEPS // NUM_STEPS // NUM_ENVS
  updates.
* gymnax 0.0.9 rather than our 1.0.1 (same classic-control dynamics).

The curve is PureJaxRL's own logging: returns of the training (stochastic) policy's episodes that
ended in each chunk of updates; a chunk in which no episode ended is -1e9 (drawn as a gap).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

# jaxlib 0.10.2's CPU runtime can idle forever in long programs on small machines (seen here: a
# 20-update Pendulum run sat at 0 % CPU); benches/learning.py sets this too, this covers direct
# runs.
if "concurrency_optimized_scheduler" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_"
                               "concurrency_optimized_scheduler=false").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import purejaxrl_src  # noqa: E402  (beside this file: the pinned source, checked)

COMMIT = purejaxrl_src.COMMIT
BLOBS = {"ppo.py": "0c62cc8ca7cf78354022e8a40e3877de042f39f1",
         "ppo_continuous_action.py": "1bced7f77149d4ac0a314ae56d92a893245407e8",
         "wrappers.py": "09c520b1c876fbd675c1d798316d3901e1baedf9"}
WIDTH = {"discrete": 64, "continuous": 256}   # hard-coded in ppo.py / ppo_continuous_action.py
EVAL_EPISODES = 16
ROOT = Path(__file__).resolve().parents[2]

parser = argparse.ArgumentParser()
parser.add_argument("--env", required=True)
parser.add_argument("--seeds", required=True)
parser.add_argument("--total-timesteps", type=int, required=True)
parser.add_argument("--hparams", required=True)
parser.add_argument("--eval-points", type=int, default=20)
parser.add_argument("--src", type=Path, default=Path(os.environ.get(
    "PUREJAXRL_SRC", ROOT / ".bench" / "purejaxrl_src")))
args = parser.parse_args()
hp = json.loads(args.hparams)
seeds = [int(s) for s in args.seeds.split(",")]

# ---------------------------------------------------------------- PureJaxRL's files, unchanged
purejaxrl_src.prepare(args.src, BLOBS)   # blob-checked; brax/navix stand-ins

import gymnax  # noqa: E402
from gymnax.environments import spaces  # noqa: E402

import ppo  # noqa: E402
import ppo_continuous_action  # noqa: E402
from wrappers import FlattenObservationWrapper  # noqa: E402


class GymnaxInBraxConvention:
    """Stands in for wrappers.BraxGymnaxWrapper: a gymnax env whose actions are in [-1, 1]
    (Brax's convention, which ppo_continuous_action.py's ClipAction assumes), mapped affinely
    onto the env's action bounds."""

    def __init__(self, env_name, backend=None):
        self._env, self._params = gymnax.make(env_name)
        space = self._env.action_space(self._params)
        self._low, self._high = jnp.asarray(space.low), jnp.asarray(space.high)
        self.action_size = space.shape[0]
        self.observation_size = self._env.observation_space(self._params).shape

    def reset(self, key, params=None):
        return self._env.reset(key, self._params)

    def step(self, key, state, action, params=None):
        action = self._low + (action + 1.0) * 0.5 * (self._high - self._low)
        return self._env.step(key, state, action, self._params)

    def observation_space(self, params):
        return self._env.observation_space(self._params)

    def action_space(self, params):
        return spaces.Box(low=-1.0, high=1.0, shape=(self.action_size,))


ppo_continuous_action.BraxGymnaxWrapper = GymnaxInBraxConvention

# ---------------------------------------------------------------- their config from ours
_probe_env, _probe_params = gymnax.make(args.env)
continuous = not isinstance(_probe_env.action_space(_probe_params), spaces.Discrete)
kind = "continuous" if continuous else "discrete"
if hp["activation"] not in ("tanh", "relu"):
    sys.exit(f"PureJaxRL's ACTIVATION is relu or tanh (anything else means tanh); "
             f"got {hp['activation']!r}")
config = {
    "LR": hp["learning_rate"], "NUM_ENVS": hp["num_envs"], "NUM_STEPS": hp["num_steps"],
    "TOTAL_TIMESTEPS": args.total_timesteps, "UPDATE_EPOCHS": hp["update_epochs"],
    "NUM_MINIBATCHES": hp["num_minibatches"], "GAMMA": hp["gamma"],
    "GAE_LAMBDA": hp["gae_lambda"], "CLIP_EPS": hp["clip_eps"], "ENT_COEF": hp["ent_coef"],
    "VF_COEF": hp["vf_coef"], "MAX_GRAD_NORM": hp["max_grad_norm"],
    "ACTIVATION": hp["activation"], "ENV_NAME": args.env, "ANNEAL_LR": hp["anneal_lr"],
    "DEBUG": False}
notes = []
if continuous:
    config["NORMALIZE_ENV"] = hp["normalize_observations"]
elif hp["normalize_observations"]:
    notes.append("normalize_observations is on in our config, but ppo.py has no observation "
                 "normalisation: run without")
width = WIDTH[kind]
if list(hp["hidden"]) != [width, width]:
    notes.append(f"network {width}x{width} (hard-coded in PureJaxRL's "
                 f"{'ppo_continuous_action' if continuous else 'ppo'}.py), ours "
                 f"{'x'.join(map(str, hp['hidden']))}")
if continuous:
    notes.append("continuous: policy acts in [-1, 1] mapped onto the env's action bounds "
                 "(Brax convention of ppo_continuous_action.py)")
module = ppo_continuous_action if continuous else ppo
train = module.make_train(dict(config))   # make_train adds NUM_UPDATES, MINIBATCH_SIZE
num_updates = args.total_timesteps // hp["num_steps"] // hp["num_envs"]
batch = hp["num_envs"] * hp["num_steps"]


def train_and_log(rng):
    """Their train(rng), with their metrics summed per update inside the same program."""
    out = train(rng)
    info = out["metrics"]                                   # leaves: [updates, steps, envs]
    ended = info["returned_episode"]
    sums = jnp.sum(jnp.where(ended, info["returned_episode_returns"], 0.0), axis=(1, 2))
    return out["runner_state"], sums, jnp.sum(ended, axis=(1, 2))


# ---------------------------------------------------------------- greedy final evaluation
if continuous:
    eval_env, eval_params = GymnaxInBraxConvention(args.env), None
else:
    eval_env, eval_params = gymnax.make(args.env)
    eval_env = FlattenObservationWrapper(eval_env)
action_dim = (eval_env.action_space(eval_params).shape[0] if continuous
              else eval_env.action_space(eval_params).n)
network = module.ActorCritic(action_dim, activation=config["ACTIVATION"])
max_steps = int(_probe_params.max_steps_in_episode)


def greedy_return(runner_state, key):
    params, env_state = runner_state[0].params, runner_state[1]
    obs_norm = None
    if continuous and config["NORMALIZE_ENV"]:   # NormalizeVecReward(NormalizeVecObservation(.))
        obs_norm = env_state.env_state
    key_reset, key_steps = jax.random.split(key)
    obs, state = jax.vmap(eval_env.reset, in_axes=(0, None))(
        jax.random.split(key_reset, EVAL_EPISODES), eval_params)

    def step(carry, k):
        obs, state, ret, done = carry
        if obs_norm is not None:   # their moments are [num_envs, obs] with identical rows
            obs = (obs - obs_norm.mean[0]) / jnp.sqrt(obs_norm.var[0] + 1e-8)
        pi, _ = network.apply(params, obs)
        action = (jnp.clip(pi.mean(), -1.0, 1.0) if continuous
                  else jnp.argmax(pi.logits, axis=-1))
        obs, state, reward, d, _ = jax.vmap(eval_env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k, EVAL_EPISODES), state, action, eval_params)
        ret = ret + jnp.where(done, 0.0, reward)
        return (obs, state, ret, done | d), None

    zeros = jnp.zeros(EVAL_EPISODES)
    (_, _, ret, _), _ = jax.lax.scan(step, (obs, state, zeros, zeros.astype(bool)),
                                     jax.random.split(key_steps, max_steps))
    return ret.mean()


start = time.perf_counter()
keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds, jnp.uint32))
compiled = jax.jit(jax.vmap(train_and_log)).lower(keys).compile()
compile_s = time.perf_counter() - start
runner_state, sums, counts = compiled(keys)
final = jax.jit(jax.vmap(greedy_return))(runner_state, jax.vmap(jax.random.PRNGKey)(
    jnp.asarray(seeds, jnp.uint32) + 7919))
jax.block_until_ready(final)
wall_s = time.perf_counter() - start

edges = np.linspace(0, num_updates, min(args.eval_points, num_updates) + 1).round().astype(int)
sums, counts = np.asarray(sums, np.float64), np.asarray(counts, np.float64)
chunk_sums = np.add.reduceat(sums, edges[:-1], axis=1)
chunk_counts = np.add.reduceat(counts, edges[:-1], axis=1)
curve = np.where(chunk_counts > 0, chunk_sums / np.maximum(chunk_counts, 1), -1e9)
note = "; ".join(notes)
print(json.dumps({
    "trainer": "purejaxrl", "version": f"git {COMMIT[:12]}", "env": args.env, "seeds": seeds,
    "final_eval": np.asarray(final).tolist(),
    "curve_steps": (edges[1:] * batch).tolist(),
    "curve_return": curve.tolist(),
    "eval_method": f"final: greedy policy, {EVAL_EPISODES} episodes per seed; curve: "
                   f"PureJaxRL's own logging (returns of training episodes ending in each "
                   f"chunk)" + (f"; {note}" if note else ""),
    "notes": notes, "config": config,
    "wall_s": wall_s, "compile_s": compile_s}), flush=True)
