"""Run skrl 2.1.1's JAX MAPPO (``skrl.multi_agents.jax.mappo``) on PettingZoo/mpe2
``simple_spread_v3`` (parallel API) for one seed, and print ONE JSON line: the FINAL policy's
greedy team return, the times and every MAPPO setting used.

Setup (Python 3.11.7, as our own venv; skrl's JAX path imports no torch and none is installed:
``set_seed`` tries ``import torch`` and skips it on ImportError). The top-level packages as
installed, then every package pinned as ``pip freeze`` listed it (45 packages):

    python3.11 -m venv .bench/skrl && .bench/skrl/bin/pip install skrl==2.1.1 jax==0.10.2 jaxlib==0.10.2 flax==0.12.8 optax==0.2.8 numpy==2.4.6 gymnasium==1.3.0 pettingzoo==1.27.0 mpe2==1.1.1
    .bench/skrl/bin/pip install absl-py==2.5.1 aiofiles==25.1.0 cloudpickle==3.1.3 etils==1.15.0 Farama-Notifications==0.0.6 flax==0.12.8 fsspec==2026.9.0 grpcio==1.85.3 gymnasium==1.3.0 humanize==4.17.0 jax==0.10.2 jaxlib==0.10.2 Markdown==3.11.3 markdown-it-py==4.3.0 MarkupSafe==3.0.4 mdurl==0.1.2 ml_dtypes==0.6.0 mpe2==1.1.1 msgpack==1.2.4 numpy==2.4.6 opt_einsum==3.4.0 optax==0.2.8 orbax-checkpoint==0.12.8 packaging==26.4 pettingzoo==1.27.0 pillow==13.0.0 prometheus_client==0.26.0 protobuf==7.36.2 psutil==7.2.2 pygame-ce==2.5.8 Pygments==2.21.0 PyYAML==6.0.4 rich==15.0.0 scipy==1.17.1 simplejson==4.3.0 skrl==2.1.1 tensorboard==2.21.0 tensorboard-data-server==0.7.2 tensorstore==0.1.86 tqdm==4.70.1 treescope==0.1.10 typing_extensions==4.16.0 uvloop==0.23.0 Werkzeug==3.1.9 zipp==4.1.2

(jax, jaxlib, flax, optax and numpy are the versions our own venv runs, so times compare.)

Run, from the repository root:

    .bench/skrl/bin/python benches/peers/skrl_runner.py --seed S --steps N [--eval-episodes 16] [--random]

What it runs. ``mpe2.simple_spread_v3.parallel_env(N=3, local_ratio=0.5, max_cycles=25,
continuous_actions=False)`` wrapped with ``wrap_env(env, wrapper="pettingzoo")`` (one env: skrl's
PettingZoo wrapper has no vectorisation, num_envs=1), skrl's MAPPO trained by its
``SequentialTrainer`` for exactly ``--steps`` env steps (``timesteps``; one step moves all 3
agents), headless, no progress bar, no TensorBoard and no checkpoints. Then the FINAL policies
are evaluated greedily (argmax of each agent's logits) on ``--eval-episodes`` fresh episodes
(``reset(seed=10_000 + 1_000 * seed + i)``: each seed its own), and again sampling each agent's
action from its categorical (``sampled_*``); team return = the sum over the 3 agents and 25 steps; mean over
episodes. ``--random`` adds the same evaluation of a uniform random policy.

Models, as skrl's own multi-agent example does it (the 1.x docs' ``jax_bidexhands_shadow_hand_over_
mappo.py``; skrl 2.0/2.1 ship no PettingZoo, MPE or MAPPO example, checked in the 2.0.0 repository
and the docs): one policy and one value model PER AGENT (no parameter sharing), each initialised with
``init_state_dict(role)``. Policy: ``CategoricalMixin`` on ``inputs["observations"]`` (18);
value: ``DeterministicMixin`` on ``inputs["states"]`` (the wrapper's ``state()``: mpe2's global
state, the 3 observations concatenated, 54), the centralised critic. Both MLPs 64-64 tanh (our
configs'; flax default init), linear output.

Settings: skrl has no example for simple_spread/MPE, so ``MAPPO_CFG()`` defaults (2.1.1):
rollouts 16, learning_epochs 8, mini_batches 2 (so 16 transitions per agent per update, minibatches
of 8, from the single env), discount 0.99, GAE lambda 0.95, learning_rate 1e-3 (policy and value,
no scheduler), grad_norm_clip 0.5, ratio_clip 0.2, value_clip 0.2, entropy_loss_scale 0.0,
value_loss_scale 2.5, kl_threshold 0, no preprocessors; changed only as the defects below require:

* Defaults raise on ANY multi-agent env, PettingZoo included: ``MAPPO(...)`` fails in
  ``MultiAgentCfg.expand`` with ``ValueError: Specified keys (set()) do not match possible agents``.
  The four ``*_kwargs`` fields (``learning_rate_scheduler_kwargs``, ``observation_preprocessor_kwargs``,
  ``state_preprocessor_kwargs``, ``value_preprocessor_kwargs``) default to ``{}``, and ``expand``
  reads any dict as a per-agent mapping whose keys must cover the agents. Set each to
  ``{agent: {} for agent in possible_agents}`` (same meaning: no kwargs). Verified: raises without,
  runs with.
* The JAX ``CategoricalMixin.act`` returns ``outputs["stddev"] = full_like(log_prob, nan)`` and
  MAPPO's loss computes the entropy as ``get_entropy(outputs["stddev"])``, i.e. the entropy of a
  constant NaN array: the "entropy loss" is NaN and constant in the parameters. Verified on this
  policy: gradients for entropy_loss_scale 0, 0.01 and 1.0 are bit-identical and finite (the true
  entropy of the same logits is 1.53). So entropy_loss_scale does NOT matter (no bonus is ever
  applied; only the logged entropy loss becomes NaN). Left at its default 0.0.
* ``time_limit_bootstrap`` defaults to False: ``_compute_gae`` then masks with ``terminated`` only,
  and simple_spread only ever truncates (at 25 steps), so returns and advantages chain from the
  last step of one episode into the next episode's values. Verified on a toy rollout (truncation at
  step 1, zero rewards, values 1..4): return at the truncated step 4.71 with False, 0.0 with True.
  Set True: done = terminated or truncated, and ``record_transition`` adds
  ``discount * V(next state) * truncated`` to the reward (bootstrap from the final state).

Also seen (left as skrl does it, reported for the comparison):
* ``init_state_dict`` and ``CategoricalMixin`` both use ``config.jax.key`` unsplit, so the three
  agents' policies start with IDENTICAL parameters (likewise the three value nets) and draw their
  actions with the SAME sequence of PRNG keys (each ``fold_in(key, i)`` with its own counter, in
  lockstep): the agents' action noise is shared (same Gumbel draws, different logits).
* ``experiment.write_interval``/``checkpoint_interval`` default to "auto" (TensorBoard + pickled
  checkpoints under ./runs); both are set to 0 here (off).
* Seeding: ``set_seed(seed)`` (python, numpy: minibatch sampling, skrl's JAX key =
  ``PRNGKey(seed)``); the wrapper's first ``reset`` uses ``seed=sum(config.jax.key)`` = seed, then
  ``None`` (the env's own RNG continues), so ``set_seed`` precedes ``wrap_env``.
* The wrapper warns "Invalid device specification (cuda:0)" on CPU-only jax and falls back to CPU;
  skrl logs go to stderr, so stdout holds only the JSON line.

Speed (smoke run, 2 shared CPU cores with another job running, --steps 2000): train 81.4 s =
24.6 env steps/s overall, of which ~30 s is XLA compilation (cProfile of a 480-step run: 133
compiles, 29.9 s: per-agent jitted
``_update_policy``/``_update_value``/optimizer steps, ``_compute_gae`` unrolled over 16 steps), so
~40 steps/s after warm-up; the rest is Python per step (3 policy + 3 value calls, host<->device
conversion in the wrapper) and per update (48 policy + 48 value minibatch steps for 16 env steps,
eager gathers in ``RandomMemory.sample``, ``.item()`` syncs). Budget runs accordingly.

Output keys: seed, steps, eval_team_return_mean, eval_episodes, train_seconds (``trainer.train()``,
JIT compilation included), whole_seconds (from process start, from /proc; imports included),
train_steps_per_s, random_team_return_mean (with ``--random``), skrl, jax, settings.
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()

import argparse
import dataclasses
import json
import os


def _process_age() -> float:
    """Seconds since this process started (Linux /proc), else since this module started."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - _T0


ENV_KWARGS = dict(N=3, local_ratio=0.5, max_cycles=25, continuous_actions=False)
HIDDEN = (64, 64)


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return getattr(value, "__qualname__", repr(value))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, required=True, help="environment steps to train")
    parser.add_argument("--eval-episodes", type=int, default=64)
    parser.add_argument("--random", action="store_true", help="also evaluate a uniform random policy")
    args = parser.parse_args()

    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np
    import skrl
    from mpe2 import simple_spread_v3
    from skrl.envs.wrappers.jax import wrap_env
    from skrl.memories.jax import RandomMemory
    from skrl.models.jax import CategoricalMixin, DeterministicMixin, Model
    from skrl.multi_agents.jax.mappo import MAPPO, MAPPO_CFG
    from skrl.trainers.jax import SequentialTrainer
    from skrl.utils import set_seed

    class Policy(CategoricalMixin, Model):
        def __init__(self, observation_space, state_space, action_space, device, unnormalized_log_prob=True, **kwargs):
            Model.__init__(self, observation_space=observation_space, state_space=state_space,
                           action_space=action_space, device=device, **kwargs)
            CategoricalMixin.__init__(self, unnormalized_log_prob=unnormalized_log_prob)

        @nn.compact
        def __call__(self, inputs, role):
            x = inputs["observations"]
            for width in HIDDEN:
                x = nn.tanh(nn.Dense(width)(x))
            return nn.Dense(self.num_actions)(x), {}

    class Value(DeterministicMixin, Model):
        def __init__(self, observation_space, state_space, action_space, device, **kwargs):
            Model.__init__(self, observation_space=observation_space, state_space=state_space,
                           action_space=action_space, device=device, **kwargs)
            DeterministicMixin.__init__(self)

        @nn.compact
        def __call__(self, inputs, role):
            x = inputs["states"]
            for width in HIDDEN:
                x = nn.tanh(nn.Dense(width)(x))
            return nn.Dense(1)(x), {}

    set_seed(args.seed)   # before wrap_env: the wrapper takes its first reset seed from config.jax.key
    env = wrap_env(simple_spread_v3.parallel_env(**ENV_KWARGS), wrapper="pettingzoo")
    agents = list(env.possible_agents)
    device = env.device

    cfg = MAPPO_CFG()
    # defect 1: the {} defaults of these fields make MultiAgentCfg.expand raise
    cfg.learning_rate_scheduler_kwargs = {uid: {} for uid in agents}
    cfg.observation_preprocessor_kwargs = {uid: {} for uid in agents}
    cfg.state_preprocessor_kwargs = {uid: {} for uid in agents}
    cfg.value_preprocessor_kwargs = {uid: {} for uid in agents}
    # defect 3: bootstrap at the time limit (simple_spread only truncates)
    cfg.time_limit_bootstrap = True
    # no TensorBoard, no checkpoints
    cfg.experiment.write_interval = 0
    cfg.experiment.checkpoint_interval = 0
    settings = _jsonable(dataclasses.asdict(cfg))   # before MAPPO expands it per agent

    models, memories = {}, {}
    for uid in agents:
        spaces = (env.observation_space(uid), env.state_space(uid), env.action_space(uid), device)
        models[uid] = {"policy": Policy(*spaces), "value": Value(*spaces)}
        for role, model in models[uid].items():
            model.init_state_dict(role=role)
        memories[uid] = RandomMemory(memory_size=cfg.rollouts, num_envs=env.num_envs, device=device)

    agent = MAPPO(possible_agents=agents, models=models, memories=memories, cfg=cfg,
                  observation_spaces=env.observation_spaces, state_spaces=env.state_spaces,
                  action_spaces=env.action_spaces, device=device)
    trainer_cfg = {"timesteps": args.steps, "headless": True, "disable_progressbar": True}
    trainer = SequentialTrainer(cfg=trainer_cfg, env=env, agents=agent)   # calls agent.init()
    env_reset_seed = env._seed

    t0 = time.perf_counter()
    if args.steps > 0:
        trainer.train()
    train_seconds = time.perf_counter() - t0

    # greedy evaluation of the FINAL policies on fresh episodes
    policies = {uid: agent.policies[uid] for uid in agents}
    logits_of = {uid: jax.jit(lambda params, obs, p=policies[uid]: p.apply(
        params, {"observations": obs}, "policy")[0]) for uid in agents}
    params = {uid: policies[uid].state_dict.params for uid in agents}

    seed_base = 10_000 + 1_000 * args.seed   # each seed's own evaluation episodes

    def evaluate(choose) -> tuple[float, float]:
        eval_env = simple_spread_v3.parallel_env(**ENV_KWARGS)
        returns = []
        for i in range(args.eval_episodes):
            obs, _ = eval_env.reset(seed=seed_base + i)
            total = 0.0
            while eval_env.agents:
                obs, rewards, _, _, _ = eval_env.step({uid: choose(uid, obs[uid]) for uid in eval_env.agents})
                total += float(sum(rewards.values()))
            returns.append(total)
        eval_env.close()
        return float(np.mean(returns)), float(np.std(returns))

    def logits(uid, o):
        return np.asarray(logits_of[uid](params[uid], jnp.asarray(o, jnp.float32)[None])[0])

    sampler = np.random.default_rng(args.seed + 777)

    def sample(uid, o):   # the stochastic policy: a draw from its categorical
        z = logits(uid, o).astype(np.float64)
        p = np.exp(z - z.max())
        return int(sampler.choice(len(p), p=p / p.sum()))

    eval_mean, eval_std = evaluate(lambda uid, o: int(np.argmax(logits(uid, o))))
    sampled_mean, sampled_std = evaluate(sample)
    out = {"seed": args.seed, "steps": args.steps, "eval_team_return_mean": eval_mean,
           "eval_team_return_std": eval_std, "eval_episodes": args.eval_episodes,
           "sampled_team_return_mean": sampled_mean, "sampled_team_return_std": sampled_std}
    if args.random:
        rng = np.random.default_rng(args.seed)
        n_actions = {uid: int(env.action_space(uid).n) for uid in agents}
        out["random_team_return_mean"] = evaluate(
            lambda uid, o: int(rng.integers(n_actions[uid])))[0]
    out.update({
        "train_seconds": train_seconds,
        "train_steps_per_s": args.steps / train_seconds if args.steps > 0 else None,
        "skrl": skrl.__version__, "jax": jax.__version__,
        "settings": {
            "mappo_cfg": settings,
            "mappo_cfg_changed_from_defaults": {
                "*_kwargs": "{agent: {}} (defaults {} raise)", "time_limit_bootstrap": True,
                "experiment.write_interval": 0, "experiment.checkpoint_interval": 0},
            "trainer": trainer_cfg | {"class": "SequentialTrainer"},
            "memory": {"class": "RandomMemory", "memory_size": cfg.rollouts, "num_envs": env.num_envs},
            "models": {"policy": f"CategoricalMixin MLP {HIDDEN} tanh on observations (18), per agent",
                       "value": f"DeterministicMixin MLP {HIDDEN} tanh on states (54), per agent",
                       "parameter_sharing": False, "optimizer": "skrl Adam (optax.adam, eps 1e-8) "
                       "after clip_by_global_norm, one per model"},
            "env": {"id": "mpe2.simple_spread_v3.parallel_env", **ENV_KWARGS,
                    "wrapper": "skrl pettingzoo (jax)", "first_reset_seed": env_reset_seed},
            "eval": {"policy": "greedy argmax per agent (eval_*), a draw from each agent's "
                               "categorical (sampled_*)",
                     "reset_seeds": f"{seed_base}..{seed_base + args.eval_episodes - 1}",
                     "team_return": "sum over agents and steps, mean over episodes"},
        },
    })
    out["whole_seconds"] = _process_age()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
