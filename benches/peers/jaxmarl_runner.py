"""Run JaxMARL's IPPO (``baselines/IPPO/ippo_ff_mpe.py``) on N seeds, vmapped as its own
``main`` does, and print one JSON line: the final greedy evaluation of each seed and the times.

JaxMARL ships its baselines outside the package: this runner imports the script unchanged
from ``.bench/jaxmarl_src/`` (exported from commit c793d095618c6d3edfb5632802348f57b70a4b94
of https://github.com/FLAIROx/JaxMARL, jaxmarl 0.2.0) and checks its git blob hash. Setup:

    python3.11 -m venv .bench/jaxmarl && .bench/jaxmarl/bin/pip install jax==0.10.2 jaxlib==0.10.2 flax==0.12.8 optax==0.2.8 distrax==0.1.9 tfp-nightly==0.26.0.dev20261027 chex==0.1.92 jaxmarl==0.2.0 numpy==2.4.6
    mkdir -p .bench/jaxmarl_src && git -C JAXMARL_CLONE show c793d09:baselines/IPPO/ippo_ff_mpe.py > .bench/jaxmarl_src/ippo_ff_mpe.py

(jax, flax and optax: the versions our own venv runs, so times compare.)

What it does, and nothing more: their config (``ippo_ff_mpe.yaml``'s values, below) with
``TOTAL_TIMESTEPS``, ``SEED`` and ``NUM_SEEDS`` from the command line; ``jax.jit(jax.vmap(
make_train(config)))`` on ``jax.random.split(PRNGKey(SEED), NUM_SEEDS)`` as their ``main``
does (compiled first, so compile and run are timed apart); their logged team return
(``returned_episode_returns``: ``MPELogWrapper`` logs num_agents x each agent's return, the
sum over the agents on MPE) averaged over each update's finished episodes; then each seed's
FINAL parameters evaluated greedily (argmax) on ``--eval-episodes`` episodes of the same
environment, the team return summed over agents as ours is. Two stand-ins that leave their
algorithm alone: ``hydra``/``omegaconf`` (their ``main``'s config loader, unused) and
``wandb`` (its ``log`` is the per-update ``io_callback``; ``WANDB_MODE: disabled`` makes it a
no-op there too) are empty modules.

Usage: .bench/jaxmarl/bin/python benches/peers/jaxmarl_runner.py --seeds 8 --steps 2000000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import types
from pathlib import Path

# as in purejaxrl_runner.py (jaxlib 0.10.2's CPU runtime), for this runner and the siblings that
# import it before jax: without it the vmapped network init (their orthogonal initialisers'
# batched QR, two LAPACK calls at once) can deadlock the 2-thread pool of a 2-core machine (this
# runner hung so once in 8 seeds x 40,960 steps, 2026-11-29). Scheduling only; the program is the
# same, and the trainer it is compared with sets the same flag.
if "concurrency_optimized_scheduler" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_"
                               "concurrency_optimized_scheduler=false").strip()

SRC = Path(__file__).resolve().parents[2] / ".bench" / "jaxmarl_src"
BLOB = "15507c41986e70f13f2ea3c1df17b3b47f13ca99"   # ippo_ff_mpe.py at c793d09
CONFIG = {   # baselines/IPPO/config/ippo_ff_mpe.yaml at c793d09 (blob 3ae66ce7)
    "LR": 2.5e-4, "NUM_ENVS": 16, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 1e7,
    "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh", "ENV_NAME": "MPE_simple_spread_v3", "ENV_KWARGS": {},
    "ANNEAL_LR": True, "SEED": 30, "NUM_SEEDS": 10, "ENTITY": "", "PROJECT": "jaxmarl-mpe",
    "WANDB_MODE": "disabled"}


def _blob(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _stand_ins() -> None:
    hydra = types.ModuleType("hydra")
    hydra.main = lambda **kwargs: (lambda f: f)
    omegaconf = types.ModuleType("omegaconf")
    omegaconf.OmegaConf = None
    wandb = types.ModuleType("wandb")
    wandb.log = lambda *a, **k: None
    wandb.init = lambda *a, **k: None
    sys.modules.update(hydra=hydra, omegaconf=omegaconf, wandb=wandb)


def their_script(name: str, blob: str) -> list[dict]:
    """Check that ``SRC/name`` is that script of JaxMARL c793d09 (its git blob), install the
    stand-ins and make ``SRC`` importable; returns the list their per-update ``wandb.log``
    dicts land in (one per seed per update), for the siblings whose metrics leave that way."""
    path = SRC / name
    if not path.exists() or _blob(path) != blob:
        sys.exit(f"{path} is not {name} of JaxMARL c793d09 (git blob {blob})")
    _stand_ins()
    logged: list[dict] = []
    sys.modules["wandb"].log = lambda d, *a, **k: logged.append(
        {key: float(v) for key, v in d.items()})
    sys.path.insert(0, str(SRC))
    return logged


def compile_and_run(make_train, config: dict) -> tuple[object, float, float]:
    """JaxMARL's ``main``: ``jit(vmap(make_train(config)))`` over ``NUM_SEEDS`` keys split from
    ``SEED``, compiled first so compile and run are timed apart: (its output, compile seconds,
    run seconds, its io_callbacks included)."""
    import jax
    rngs = jax.random.split(jax.random.PRNGKey(config["SEED"]), config["NUM_SEEDS"])
    train = jax.jit(jax.vmap(make_train(dict(config))))
    t0 = time.perf_counter()
    compiled = train.lower(rngs).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = compiled(rngs)
    jax.block_until_ready(out)
    jax.effects_barrier()   # the io_callbacks (their wandb.log) have all run
    return out, compile_s, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument("--steps", type=float, default=2e6)
    parser.add_argument("--eval-episodes", type=int, default=16)
    args = parser.parse_args()
    path = SRC / "ippo_ff_mpe.py"
    if _blob(path) != BLOB:
        sys.exit(f"{path} is not ippo_ff_mpe.py of JaxMARL c793d09 (git blob {BLOB})")
    _stand_ins()
    sys.path.insert(0, str(SRC))
    start = time.perf_counter()
    import jax
    import jax.numpy as jnp
    import numpy as np
    import ippo_ff_mpe as their
    import jaxmarl

    config = {**CONFIG, "TOTAL_TIMESTEPS": args.steps, "SEED": args.seed,
              "NUM_SEEDS": args.seeds}
    out, compile_s, run_s = compile_and_run(their.make_train, config)

    metrics = out["metrics"]
    returns = np.asarray(metrics["returned_episode_returns"])   # [seeds, updates], means
    params = out["runner_state"][0].params

    env = jaxmarl.make(config["ENV_NAME"], **config["ENV_KWARGS"])
    network = their.ActorCritic(env.action_space(env.agents[0]).n,
                                activation=config["ACTIVATION"])

    def evaluate(p, key):   # one episode per key, greedy, the team's return
        obs, state = env.reset(key)

        def step(carry, k):
            obs, state, ret, done = carry
            x = jnp.stack([obs[a] for a in env.agents])
            pi, _ = network.apply(p, x)
            act = {a: pi.mode()[i] for i, a in enumerate(env.agents)}
            obs, state, reward, dones, _ = env.step_env(k, state, act)
            r = sum(reward[a] for a in env.agents)
            ret = ret + jnp.where(done, 0.0, r)
            return (obs, state, ret, done | dones["__all__"]), None

        keys = jax.random.split(jax.random.fold_in(key, 1), env.max_steps + 1)
        (_, _, ret, _), _ = jax.lax.scan(step, (obs, state, jnp.float32(0), False), keys)
        return ret

    keys = jax.random.split(jax.random.PRNGKey(12345), args.eval_episodes)
    final = jax.jit(jax.vmap(lambda p: jax.vmap(lambda k: evaluate(p, k))(keys)))(params)
    final = np.asarray(final).mean(axis=1)
    points = np.linspace(0, returns.shape[1] - 1, 20).astype(int)
    print(json.dumps({
        "trainer": "jaxmarl", "commit": "c793d09", "script": "baselines/IPPO/ippo_ff_mpe.py",
        "env": config["ENV_NAME"], "seeds": args.seeds, "seed": args.seed,
        "total_timesteps": args.steps, "final_eval": final.tolist(),
        "final_train_return": returns[:, -10:].mean(axis=1).tolist(),
        "curve_updates": points.tolist(),
        "curve_return": returns[:, points].tolist(),
        "compile_s": compile_s, "run_s": run_s, "whole_s": time.perf_counter() - start,
        "env_steps_per_s": args.seeds * args.steps / run_s,
        "eval_method": f"greedy (argmax), {args.eval_episodes} episodes per seed, team return",
        "xla_flags": os.environ.get("XLA_FLAGS", "")}))


if __name__ == "__main__":
    main()
