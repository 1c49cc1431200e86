"""bench rejax: rejax's PPO and ours alternately, same task, hyperparameters and budget.

rejax runs in its own virtual environment (.bench/rejax, created on first use: it needs gymnax
0.0.9), never as a dependency of ours. Ours runs with the shipped defaults (time-based
checkpoints and replica checks ON) unless --set says otherwise.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from benches.common import CARTPOLE, PEERS, ROOT, VENVS, _fmt, run_command, stats, train_cmd
from jaxrl_dist.protocol import CPU_SCHEDULER_FLAG

REJAX_VENV = VENVS / "rejax"
REJAX_PYTHON = REJAX_VENV / "bin" / "python"
# rejax needs gymnax 0.0.9 (it breaks with gymnax 1.x), so it never shares our venv. Pinned
# whole (PureJaxRL's venv has the same set): unpinned, pip's resolver walked tfp-nightly's
# builds for distrax for over 10 minutes (2026-11-27) without finishing.
REJAX_PACKAGES = ("rejax==0.1.3", "gymnax==0.0.9", "jax==0.10.2", "jaxlib==0.10.2",
                  "flax==0.12.8", "optax==0.2.8", "distrax==0.1.9",
                  "tfp-nightly==0.26.0.dev20261027", "chex==0.1.92", "numpy==2.4.6")
REJAX_SETUP = (f"cd {ROOT} && python3.11 -m venv .bench/rejax && .bench/rejax/bin/python -m pip "
               f"install {' '.join(REJAX_PACKAGES)}")


# rejax's PPO on the shipped CartPole hyperparameters, sys.argv[1] env steps (shared by the
# throughput script below and bench kernels)
REJAX_CARTPOLE = textwrap.dedent("""
    import sys
    from rejax import PPO
    algo = PPO.create(env="CartPole-v1", num_envs=4, num_steps=128, num_epochs=4,
                      num_minibatches=4, total_timesteps=int(sys.argv[1]), learning_rate=2.5e-4,
                      max_grad_norm=0.5, gamma=0.99, gae_lambda=0.95, clip_eps=0.2,
                      ent_coef=0.01, vf_coef=0.5, eval_freq=int(sys.argv[1]),
                      skip_initial_evaluation=True,
                      agent_kwargs={"hidden_layer_sizes": (64, 64), "activation": "tanh"})
""")

REJAX_SCRIPT = textwrap.dedent("""
    import json, sys, time
    t0 = time.perf_counter()
    import jax
""") + REJAX_CARTPOLE + textwrap.dedent("""
    train = jax.jit(algo.train)
    t = time.perf_counter()
    compiled = train.lower(jax.random.PRNGKey(0)).compile()
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    ts, (lengths, returns) = compiled(jax.random.PRNGKey(0))
    jax.block_until_ready(ts)
    run_s = time.perf_counter() - t
    print(json.dumps({"rank": 0, "sps": int(sys.argv[1]) / run_s, "compile_time_s": compile_s,
                      "status": "completed", "final_return": float(returns[-1].mean()),
                      "wall_s": time.perf_counter() - t0}))
""")


# rejax's DQN or PQN with its own CartPole config, or its SAC with its own Pendulum config
# (benches/peers/rejax_configs.py), for
# sys.argv[2] env steps: the cold compile of its train() (what its users run), then the steady
# speed of its training iterations ALONE (one fori_loop of train_iteration: no evaluation, which
# rejax's train() interleaves), on a second seed's state with the loop already compiled.
REJAX_Q_SCRIPT = textwrap.dedent("""
    import json, sys, time
    t0 = time.perf_counter()
    sys.path.insert(0, sys.argv[3])
    import jax
    jax.config.update("jax_enable_compilation_cache", False)
    from rejax import DQN, PQN, SAC
    from rejax_configs import REJAX_CARTPOLE_DQN, REJAX_CARTPOLE_PQN, REJAX_PENDULUM_SAC
    algo_name, steps = sys.argv[1], int(sys.argv[2])
    cls, config = {"dqn": (DQN, REJAX_CARTPOLE_DQN), "pqn": (PQN, REJAX_CARTPOLE_PQN),
                   "sac": (SAC, REJAX_PENDULUM_SAC)}[algo_name]
    unit = config["num_envs"] * config.get("num_steps", 1) if algo_name == "pqn" else config["num_envs"]
    iterations = steps // unit
    algo = cls.create(**{**config, "total_timesteps": iterations * unit,
                         "eval_freq": iterations * unit, "skip_initial_evaluation": True})
    t = time.perf_counter()
    jax.jit(algo.train).lower(jax.random.PRNGKey(0)).compile()
    compile_s = time.perf_counter() - t
    loop = jax.jit(lambda ts: jax.lax.fori_loop(0, iterations,
                                                lambda i, ts: algo.train_iteration(ts), ts))
    state = algo.init_state(jax.random.PRNGKey(1))
    run = loop.lower(state).compile()
    t = time.perf_counter()
    ts = jax.block_until_ready(run(state))
    run_s = time.perf_counter() - t
    print(json.dumps({"rank": 0, "sps": iterations * unit / run_s, "compile_time_s": compile_s,
                      "status": "completed", "final_return": None,
                      "wall_s": time.perf_counter() - t0}))
""")


def ensure_rejax() -> Path:
    if not REJAX_PYTHON.exists():
        subprocess.run([sys.executable, "-m", "venv", str(REJAX_VENV)], check=True)
        subprocess.run([str(REJAX_PYTHON), "-m", "pip", "install", "-q", *REJAX_PACKAGES],
                       check=True)
    return REJAX_PYTHON


def rejax_python(args, create: bool = False) -> Path:
    """The interpreter that runs rejax: ``--rejax-python`` when given, else the checkout's
    .bench/rejax's, whatever the working directory (made first if ``create``)."""
    if getattr(args, "rejax_python", None):
        return Path(args.rejax_python)
    return ensure_rejax() if create else REJAX_PYTHON


def bench_rejax(args) -> tuple[list[dict], str]:
    """PPO (configs/cartpole.yaml, --steps) or, with ``--config`` a DQN/PQN config, that
    algorithm against rejax's own CartPole config for it, at the config's budget; with a SAC
    config (configs/pendulum_sac.yaml), rejax's own Pendulum SAC config, ours set to the same
    settings (rejax_configs.OURS_AS_REJAX_PENDULUM_SAC), at our config's budget."""
    from jaxrl_dist import config as config_lib

    python = rejax_python(args, create=True)
    algo = config_lib.load(args.config).algo if args.config != CARTPOLE else "ppo"
    script = Path(tempfile.mkdtemp()) / "rejax_bench.py"
    matched = []   # our settings that make a config rejax's
    if algo in ("dqn", "pqn", "sac"):
        config_path, steps = args.config, config_lib.load(args.config).total_timesteps
        script.write_text(REJAX_Q_SCRIPT)
        rejax_cmd = [str(python), str(script), algo, str(steps), str(PEERS)]
        if algo == "sac":
            from benches.peers.rejax_configs import OURS_AS_REJAX_PENDULUM_SAC
            matched = list(OURS_AS_REJAX_PENDULUM_SAC)
    elif algo == "ppo":
        config_path, steps = CARTPOLE, args.steps
        script.write_text(REJAX_SCRIPT)
        rejax_cmd = [str(python), str(script), str(steps)]
    else:
        raise SystemExit(f"bench rejax compares ppo, dqn, pqn or sac configs, not algo {algo}")
    # the shipped config as a user runs it: time-based checkpoints and replica checks stay ON
    ours_sets = [f"total_timesteps={steps}", *matched, *args.set]
    names = ("ours, cold cache", "ours, warm cache", "rejax")
    results = {name: [] for name in names}
    for i in range(args.repeats):  # alternate so drift hits both equally
        with tempfile.TemporaryDirectory() as tmp:   # a fresh compile cache per repeat
            cache = str(Path(tmp) / "xla")
            cold = run_command(train_cmd(Path(tmp) / "cold", 1, config_path, ours_sets),
                               JAXRL_DIST_CACHE=cache)
            theirs = run_command(rejax_cmd, XLA_FLAGS=CPU_SCHEDULER_FLAG)
            warm = run_command(train_cmd(Path(tmp) / "warm", 1, config_path, ours_sets),
                               JAXRL_DIST_CACHE=cache)
        for name, out in zip(names, (cold, warm, theirs)):
            results[name].append({"sps": out["summary"]["sps"],
                                  "compile_time_s": out["summary"]["compile_time_s"],
                                  "wall_s": out["wall_s"],
                                  "final_return": out["summary"]["final_return"]})
        print(f"  [{i + 1}/{args.repeats}] ours {cold['summary']['sps']:,.0f} sps (compile "
              f"{cold['summary']['compile_time_s']:.1f} s cold, "
              f"{warm['summary']['compile_time_s']:.1f} s warm), rejax "
              f"{theirs['summary']['sps']:,.0f} sps (compile "
              f"{theirs['summary']['compile_time_s']:.1f} s)", file=sys.stderr, flush=True)
    rows = []
    md = ["| trainer | steady SPS, median (min–max) | compile s | wall s | final return |",
          "|---|---|---|---|---|"]
    for name in names:
        r = {"label": name, **{k: stats([x[k] for x in results[name]])
                               for k in ("sps", "compile_time_s", "wall_s")},
             "final_return": [x["final_return"] for x in results[name]],
             "per_repeat": results[name]}   # in run order: pair i is repeat i of each trainer
        rows.append(r)
        md.append(f"| {name} | {_fmt(r['sps'])} | {_fmt(r['compile_time_s'], 1)} | "
                  f"{_fmt(r['wall_s'], 1)} | "
                  f"{', '.join('—' if v is None else f'{v:.0f}' for v in r['final_return'])} |")
    ratio = rows[0]["sps"]["median"] / rows[2]["sps"]["median"]
    pairs = [a["sps"] / b["sps"] for a, b in zip(results[names[0]], results[names[2]])]
    md.append(f"\nRatio of median steady SPS (ours, cold / rejax): **{ratio:.2f}x** (per pair "
              f"{min(pairs):.2f}x-{max(pairs):.2f}x); ours runs "
              f"{config_path} with its defaults ({' '.join(ours_sets)}); the warm run "
              f"reuses the cold run's compile cache"
              + (f"; rejax: its own {'Pendulum' if algo == 'sac' else 'CartPole'} config, steady speed of its train_iteration loop "
                 "alone (no evaluation), compile of its train()" if algo != "ppo" else ""))
    return rows, "\n".join(md)
