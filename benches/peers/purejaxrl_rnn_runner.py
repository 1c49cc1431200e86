"""Run PureJaxRL's recurrent PPO (``ppo_rnn.py``, a GRU) on N seeds (vmapped, one program) on
one of our recurrent PPO configs, and print one JSON line in the format of
``python -m jaxrl_dist.seeds`` (trainer, env, seeds, final_eval, curve_steps, curve_return,
eval_method, wall_s, notes; plus timings and their config). PureJaxRL is not a package: this
runner imports ``ppo_rnn.py`` and its ``wrappers.py`` unchanged from ``.bench/purejaxrl_src/``,
exported from commit 31756b197773a52db763fdbe6d635e4b46522a73 of
https://github.com/luchris429/purejaxrl (the commit ``purejaxrl_runner.py`` pins; ppo_rnn.py last
changed in 1da1044, Aug 2023) and checks both files' git blob hashes. Setup (the venv is
``purejaxrl_runner.py``'s, same pins; add ppo_rnn.py to its source folder):

    python3.11 -m venv .bench/purejaxrl && .bench/purejaxrl/bin/pip install jax==0.10.2 jaxlib==0.10.2 flax==0.12.8 optax==0.2.8 distrax==0.1.9 tfp-nightly==0.26.0.dev20261027 chex==0.1.92 gymnax==0.0.9 numpy==2.4.6
    git clone https://github.com/luchris429/purejaxrl .bench/purejaxrl_repo && git -C .bench/purejaxrl_repo checkout 31756b197773a52db763fdbe6d635e4b46522a73 && mkdir -p .bench/purejaxrl_src && cp .bench/purejaxrl_repo/purejaxrl/{ppo,ppo_continuous_action,ppo_rnn,wrappers}.py .bench/purejaxrl_src/

(any export of those files at that commit will do, e.g. ``git show COMMIT:purejaxrl/ppo_rnn.py``
from a mirror). Run, from the repository root (the config is read with PyYAML, which flax
installs; ``--total-timesteps`` overrides the config's budget, e.g. for a smoke run):

    XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false .bench/purejaxrl/bin/python benches/peers/purejaxrl_rnn_runner.py --config configs/cartpole_pomdp_gru.yaml --seeds 100,101 > out.json

What the runner does, and nothing more: it builds their config dict from our config's PPO keys,
runs ``jax.jit(jax.vmap(make_train(config)))(keys)`` as their README does (compiled first, so
``compile_s`` and ``train_s`` are separate; ``wall_s`` is compile + train + evaluation, as in
``purejaxrl_runner.py``), sums their ``metric`` (``returned_episode_returns`` where
``returned_episode``) in the same program into one curve point per ``updates_per_call`` updates
(our logging interval, so ``curve_steps`` equal ours), and evaluates each seed's FINAL parameters
greedily (argmax) on 16 episodes of the same partially observed env, the GRU carry stepped from
zeros and reset where their rollout resets it (after a done). Three adaptations that leave their
algorithm alone:

* ``wrappers.py`` imports brax and navix at the top, for envs we don't use; empty stand-in modules
  are put in ``sys.modules`` instead of installing them (as in ``purejaxrl_runner.py``).
* ``ppo_rnn.py`` is written for flax <= 0.6.11's recurrent-cell API: ``nn.GRUCell()`` without
  ``features`` and the static ``nn.GRUCell.initialize_carry(rng, batch_dims, size)``; flax 0.7.0
  made ``features`` required and ``initialize_carry`` an instance method, so on any newer flax the
  file fails at ``initialize_carry`` (PureJaxRL issue #29, open). The runner gives ppo_rnn's
  ``nn`` a ``GRUCell`` with flax 0.6.11's construction API on top of flax 0.12.8's cell: its
  ``__call__`` is flax's own, whose math, parameter names and initialisers (lecun-normal input
  kernels with biases, orthogonal recurrent kernels, bias on ``hn`` only) are 0.6.11's line for
  line; the width is read from the carry, as in both versions. Everything else in ``nn`` is
  flax.linen itself.
* ``ppo_rnn.py`` builds its env with ``gymnax.make(ENV_NAME)`` and takes no env options. For
  ``env_kwargs: {hide_velocities: true}`` the runner replaces the ``gymnax`` name in ppo_rnn with
  one whose ``make`` wraps gymnax's env in an observation wrapper keeping only the non-velocity
  entries (the same indices as ``jaxrl_dist.envs.gymnax.WITHOUT_VELOCITIES``: CartPole [x,
  theta]); their FlattenObservationWrapper and LogWrapper then wrap it as usual. The greedy
  evaluation uses the same wrapper.

What ppo_rnn.py hard-codes (no config key), against ours (configs/cartpole_pomdp_gru.yaml):

* Network: ONE trunk shared by actor and critic: Dense 128 + relu, then a GRU of 128 (their
  ``initialize_carry(..., 128)``), then per head Dense 128 + relu and the output layer
  (orthogonal init: sqrt 2 on the embedding, 2.0 on the head's hidden layer, 0.01 policy, 1.0
  value). Ours: separate actor and critic, each Dense 64 + tanh, its own GRU of ``cell_size``,
  then the output layer directly. The GRU size (128) matches ours; ``activation``,
  ``actor_hidden``/``critic_hidden`` and ``cell_size`` cannot be passed (the runner refuses a
  ``cell`` other than gru and notes every difference in the JSON).
* Value loss clipped at CLIP_EPS around the old value, in raw return units; no value-target
  normalisation; done = terminated or truncated (no bootstrap at the 500-step limit; gymnax 0.0.x
  has no separate truncation); one global-norm gradient clip over the shared network; learning
  rate annealed per update (frac = 1 - update / NUM_UPDATES). Ours: unclipped, normalize_values,
  bootstrap_truncation, one clip per network, per-SGD-step linear decay to 0.
* Same as ours: minibatches of whole NUM_STEPS-step sequences of NUM_ENVS / NUM_MINIBATCHES envs
  (envs permuted per epoch), replayed from the carry stored at the rollout's start; the carry is
  reset to zeros before a step that begins an episode; Adam eps 1e-5; advantages normalised per
  minibatch; budget TOTAL_TIMESTEPS // NUM_STEPS // NUM_ENVS updates (500k: 244 updates,
  499,712 steps, as ours).
"""

import argparse
import json
import os
import sys
import time
import types
from pathlib import Path

# as in purejaxrl_runner.py: jaxlib 0.10.2's CPU runtime can idle forever in long programs
if "concurrency_optimized_scheduler" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_"
                               "concurrency_optimized_scheduler=false").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import purejaxrl_src  # noqa: E402  (beside this file: the pinned source, checked)
import yaml  # noqa: E402

COMMIT = purejaxrl_src.COMMIT
BLOBS = {"ppo_rnn.py": "816dd43e829c584c1019c4741748b9eda3e91eb9",
         "wrappers.py": "09c520b1c876fbd675c1d798316d3901e1baedf9"}
GRU_SIZE = 128   # hard-coded in ppo_rnn.py (ScannedRNN.initialize_carry(NUM_ENVS, 128))
EVAL_EPISODES = 16
# the non-velocity observation entries, as jaxrl_dist.envs.gymnax.WITHOUT_VELOCITIES (ppo_rnn.py
# is discrete-only, so the discrete classic-control envs)
WITHOUT_VELOCITIES = {"CartPole-v1": (0, 2), "Acrobot-v1": (0, 1, 2, 3),
                      "MountainCar-v0": (0,)}
ROOT = Path(__file__).resolve().parents[2]

parser = argparse.ArgumentParser()
parser.add_argument("--config", required=True, type=Path, help="one of our recurrent PPO configs")
parser.add_argument("--seeds", required=True, help="comma-separated, e.g. 100,101")
parser.add_argument("--total-timesteps", type=int, help="default: the config's")
parser.add_argument("--src", type=Path, default=Path(os.environ.get(
    "PUREJAXRL_SRC", ROOT / ".bench" / "purejaxrl_src")))
args = parser.parse_args()
seeds = [int(s) for s in args.seeds.split(",")]
ours = yaml.safe_load(args.config.read_text())

# ---------------------------------------------------------------- PureJaxRL's files, unchanged
purejaxrl_src.prepare(args.src, BLOBS)   # blob-checked; brax/navix stand-ins

import flax.linen as linen  # noqa: E402
import gymnax  # noqa: E402
from gymnax.environments import spaces  # noqa: E402

import ppo_rnn  # noqa: E402
from wrappers import FlattenObservationWrapper, GymnaxWrapper  # noqa: E402


# ---------------------------------------------------------------- adaptation: flax 0.6.11's GRUCell
class GRUCell(linen.GRUCell):
    """flax 0.12.8's GRUCell constructed as in flax <= 0.6.11: ``GRUCell()`` (the width comes
    from the carry in ``__call__``, flax's own) and the static
    ``GRUCell.initialize_carry(rng, batch_dims, size, init_fn=zeros)``."""

    features: int = 0   # not read by __call__; only the instance initialize_carry read it

    @staticmethod
    def initialize_carry(rng, batch_dims, size, init_fn=linen.initializers.zeros_init()):
        return init_fn(rng, tuple(batch_dims) + (size,))


class _LinenWithOldGRUCell(types.ModuleType):
    GRUCell = GRUCell

    def __getattr__(self, name):
        return getattr(linen, name)


ppo_rnn.nn = _LinenWithOldGRUCell("flax.linen, GRUCell with flax 0.6.11's API")


# ---------------------------------------------------------------- adaptation: hidden velocities
class ObservationSubset(GymnaxWrapper):
    """A gymnax env observing only ``keep`` (entries of its flat observation)."""

    def __init__(self, env, keep):
        super().__init__(env)
        self._keep = tuple(keep)

    def observation_space(self, params):
        space = self._env.observation_space(params)
        shape = space.shape
        low = jnp.broadcast_to(space.low, shape)[jnp.asarray(self._keep)]   # traced in jit
        high = jnp.broadcast_to(space.high, shape)[jnp.asarray(self._keep)]
        return spaces.Box(low=low, high=high, shape=(len(self._keep),), dtype=space.dtype)

    def reset(self, key, params=None):
        obs, state = self._env.reset(key, params)
        return obs[..., list(self._keep)], state

    def step(self, key, state, action, params=None):
        obs, state, reward, done, info = self._env.step(key, state, action, params)
        return obs[..., list(self._keep)], state, reward, done, info


env_kwargs = dict(ours.get("env_kwargs") or {})
hide = bool(env_kwargs.pop("hide_velocities", False))
if env_kwargs:
    sys.exit(f"env_kwargs {sorted(env_kwargs)}: only hide_velocities is mapped")
if hide and ours["env"] not in WITHOUT_VELOCITIES:
    sys.exit(f"hide_velocities: no velocity entries known for {ours['env']}")


def make_env(name, **kwargs):
    env, params = gymnax.make(name, **kwargs)
    return (ObservationSubset(env, WITHOUT_VELOCITIES[name]) if hide else env), params


ppo_rnn.gymnax = types.SimpleNamespace(make=make_env)

# ---------------------------------------------------------------- their config from ours
if ours.get("algo", "ppo") != "ppo":
    sys.exit(f"{args.config}: algo {ours['algo']}, not ppo")
p, net = ours["ppo"], ours["ppo"]["network"]
if net.get("cell") != "gru":
    sys.exit(f"ppo_rnn.py is a GRU; {args.config} has network.cell {net.get('cell')!r}")
if p.get("sequence_length") is not None:
    sys.exit("ppo_rnn.py trains on whole NUM_STEPS rollouts; ppo.sequence_length must be null")
total = args.total_timesteps or int(ours["total_timesteps"])
config = {
    "LR": p["learning_rate"], "NUM_ENVS": ours["num_envs"], "NUM_STEPS": p["num_steps"],
    "TOTAL_TIMESTEPS": total, "UPDATE_EPOCHS": p["update_epochs"],
    "NUM_MINIBATCHES": p["num_minibatches"], "GAMMA": p["gamma"], "GAE_LAMBDA": p["gae_lambda"],
    "CLIP_EPS": p["clip_eps"], "ENT_COEF": p["ent_coef"], "VF_COEF": p["vf_coef"],
    "MAX_GRAD_NORM": p["max_grad_norm"], "ENV_NAME": ours["env"], "ANNEAL_LR": p["anneal_lr"],
    "DEBUG": False}
if config["NUM_ENVS"] % config["NUM_MINIBATCHES"]:
    sys.exit("ppo_rnn.py splits the envs into minibatches: num_envs % num_minibatches != 0")
notes = []
if hide:
    notes.append(f"observations: {ours['env']} entries {list(WITHOUT_VELOCITIES[ours['env']])} "
                 f"only (runner's observation wrapper under their FlattenObservationWrapper)")
if net.get("cell_size", GRU_SIZE) != GRU_SIZE:
    notes.append(f"GRU {GRU_SIZE} (hard-coded in ppo_rnn.py), ours {net['cell_size']}")
notes.append(f"network (hard-coded in ppo_rnn.py): shared Dense 128 relu -> shared GRU "
             f"{GRU_SIZE} -> per head Dense 128 relu -> output; ours: separate actor and critic, "
             f"each Dense {'x'.join(map(str, net.get('actor_hidden', [])))} "
             f"{net.get('activation')} -> own GRU {net.get('cell_size')} -> output")
notes.append("ppo_rnn.py runs on flax 0.12.8 through a GRUCell with flax 0.6.11's construction "
             "API (same cell math and initialisers)")
notes.append("their PPO: clipped value loss, no value normalisation, no truncation bootstrap, "
             "one global grad clip, LR annealed per update")
train = ppo_rnn.make_train(dict(config))   # make_train adds NUM_UPDATES, MINIBATCH_SIZE
num_updates = total // config["NUM_STEPS"] // config["NUM_ENVS"]
batch = config["NUM_ENVS"] * config["NUM_STEPS"]
if num_updates < 1:
    sys.exit(f"total_timesteps {total} is less than one update ({batch} steps)")


def train_and_log(rng):
    """Their train(rng), with their metric summed per update inside the same program."""
    out = train(rng)
    info = out["metric"]                                    # leaves: [updates, steps, envs]
    ended = info["returned_episode"]
    sums = jnp.sum(jnp.where(ended, info["returned_episode_returns"], 0.0), axis=(1, 2))
    return out["runner_state"], sums, jnp.sum(ended, axis=(1, 2))


# ---------------------------------------------------------------- greedy final evaluation
eval_env, eval_params = make_env(ours["env"])
eval_env = FlattenObservationWrapper(eval_env)
network = ppo_rnn.ActorCriticRNN(eval_env.action_space(eval_params).n, config=config)
max_steps = int(eval_params.max_steps_in_episode)


def greedy_return(runner_state, key):
    params = runner_state[0].params
    key_reset, key_steps = jax.random.split(key)
    obs, state = jax.vmap(eval_env.reset, in_axes=(0, None))(
        jax.random.split(key_reset, EVAL_EPISODES), eval_params)
    hidden = ppo_rnn.ScannedRNN.initialize_carry(EVAL_EPISODES, GRU_SIZE)

    def step(carry, k):
        obs, state, hidden, last_done, ret, finished = carry
        hidden, pi, _ = network.apply(params, hidden, (obs[None], last_done[None]))
        action = jnp.argmax(pi.logits[0], axis=-1)
        obs, state, reward, d, _ = jax.vmap(eval_env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k, EVAL_EPISODES), state, action, eval_params)
        ret = ret + jnp.where(finished, 0.0, reward)
        return (obs, state, hidden, d, ret, finished | d), None

    zeros = jnp.zeros(EVAL_EPISODES)
    false = zeros.astype(bool)
    (*_, ret, _), _ = jax.lax.scan(step, (obs, state, hidden, false, zeros, false),
                                   jax.random.split(key_steps, max_steps))
    return ret.mean()


start = time.perf_counter()
keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds, jnp.uint32))
compiled = jax.jit(jax.vmap(train_and_log)).lower(keys).compile()
compile_s = time.perf_counter() - start
runner_state, sums, counts = jax.block_until_ready(compiled(keys))
train_s = time.perf_counter() - start - compile_s
final = jax.block_until_ready(jax.jit(jax.vmap(greedy_return))(
    runner_state, jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds, jnp.uint32) + 7919)))
wall_s = time.perf_counter() - start

chunk = int(ours.get("updates_per_call", 10))
edges = np.unique(np.r_[np.arange(0, num_updates, chunk), num_updates])
sums, counts = np.asarray(sums, np.float64), np.asarray(counts, np.float64)
chunk_sums = np.add.reduceat(sums, edges[:-1], axis=1)
chunk_counts = np.add.reduceat(counts, edges[:-1], axis=1)
curve = np.where(chunk_counts > 0, chunk_sums / np.maximum(chunk_counts, 1), -1e9)
steps_done = len(seeds) * num_updates * batch
print(json.dumps({
    "trainer": "purejaxrl_rnn", "version": f"git {COMMIT[:12]} ppo_rnn.py", "env": ours["env"],
    "env_kwargs": ours.get("env_kwargs") or {}, "seeds": seeds,
    "final_eval": np.asarray(final).tolist(),
    "curve_steps": (edges[1:] * batch).tolist(),
    "curve_return": curve.tolist(),
    "eval_method": f"final: greedy policy (argmax, GRU carry stepped), {EVAL_EPISODES} "
                   f"episodes per seed; curve: PureJaxRL's own logging (returns of training "
                   f"episodes ending in each chunk of {chunk} updates)",
    "notes": notes, "config": config, "our_config": str(args.config),
    "wall_s": wall_s, "compile_s": compile_s, "train_s": train_s,
    "env_steps": steps_done, "env_steps_per_s_train": steps_done / train_s,
    "env_steps_per_s_wall": steps_done / wall_s,
    "xla_flags": os.environ.get("XLA_FLAGS", "")}), flush=True)
