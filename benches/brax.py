"""bench brax: Brax's own PPO (``brax.training.agents.ppo.train``) and ours, alternately, on the
same Brax task, hyperparameters and budget, on 1 and 2 CPU devices.

Hyperparameters come from OUR config (default ``configs/brax_inverted_pendulum.yaml``) and are
mapped onto Brax's: envs; Brax's ``unroll_length`` (``--brax-unroll``) x ``batch_size`` x
``num_minibatches`` / envs = our ``num_steps``; epochs, minibatches, learning rate, discount,
GAE lambda, entropy, clip, gradient clip, observation normalisation, episode length, timeout
bootstrap; both with
64x64 tanh networks and a Gaussian with a state-independent log std. Brax runs in this venv
(the ``brax`` extra). Ours runs with its shipped defaults (time-based checkpoints and replica
checks ON). Brax's steady SPS is its own ``training/sps`` (epochs after the first); its compile
time is its first epoch minus a steady epoch.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

from jaxrl_dist import config as config_lib
from benches.common import _fmt, run_command, stats, train_cmd
from jaxrl_dist.protocol import CPU_SCHEDULER_FLAG

BRAX_CONFIG = "configs/brax_inverted_pendulum.yaml"

BRAX_SCRIPT = textwrap.dedent("""
    import functools, json, statistics, sys, time
    t0 = time.perf_counter()
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    def device_put_replicated(x, devices):   # removed in jax 0.10, still called by Brax 0.14.2
        sharding = NamedSharding(Mesh(list(devices), ("d",)), PartitionSpec("d"))
        return jax.tree.map(lambda a: jax.device_put(
            jnp.broadcast_to(a, (len(devices), *jnp.shape(a))), sharding), x)
    jax.device_put_replicated = device_put_replicated
    from brax import envs
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as ppo
    hp = json.loads(sys.argv[1])
    epochs = []
    def progress(step, metrics):
        if "training/sps" in metrics:
            epochs.append((time.perf_counter(), metrics["training/sps"],
                           metrics["training/walltime"]))
        progress.last = metrics
    net = functools.partial(ppo_networks.make_ppo_networks,
                            policy_hidden_layer_sizes=hp.pop("hidden"),
                            value_hidden_layer_sizes=hp.pop("critic_hidden"),
                            activation=jax.nn.tanh, distribution_type="normal",
                            noise_std_type="log", init_noise_std=1.0)
    env = envs.get_environment(hp.pop("env"))
    _, params, metrics = ppo.train(env, network_factory=net, deterministic_eval=True,
                                   progress_fn=progress, **hp)
    walls = [w for _, _, w in epochs]
    per_epoch = [b - a for a, b in zip([0.0] + walls[:-1], walls)]
    steady = statistics.median(per_epoch[1:])
    print(json.dumps({"rank": 0, "status": "completed",
                      "sps": statistics.median([s for _, s, _ in epochs[1:]]),
                      "compile_time_s": per_epoch[0] - steady,
                      "eval_return": float(metrics["eval/episode_reward"]),
                      "epochs": len(epochs), "wall_s": time.perf_counter() - t0}))
""")


def brax_hyperparameters(config: config_lib.Config, num_evals: int, unroll: int) -> dict:
    """Our config in Brax's PPO arguments (same data per update and per minibatch)."""
    p, n = config.ppo, config.ppo.network
    unrolls = config.ppo.num_steps // unroll                # unrolls per env per update
    batch = config.num_envs * unrolls // p.num_minibatches
    if config.ppo.num_steps % unroll or batch * p.num_minibatches != config.num_envs * unrolls:
        raise SystemExit(f"bench brax: num_steps ({config.ppo.num_steps}) must be a multiple of "
                         f"--brax-unroll ({unroll}) and its unrolls split into "
                         f"{p.num_minibatches} minibatches")
    return {"env": config.env.split(":", 1)[1], "num_timesteps": config.total_timesteps,
            "num_evals": num_evals, "episode_length": config.episode_length,
            "num_envs": config.num_envs, "unroll_length": unroll, "batch_size": batch,
            "num_minibatches": p.num_minibatches, "num_updates_per_batch": p.update_epochs,
            "learning_rate": p.learning_rate, "entropy_cost": p.ent_coef,
            "discounting": p.gamma, "gae_lambda": p.gae_lambda, "clipping_epsilon": p.clip_eps,
            "max_grad_norm": p.max_grad_norm, "vf_loss_coefficient": p.vf_coef,
            "normalize_observations": p.normalize_observations, "reward_scaling": 1.0,
            "normalize_advantage": p.normalize_advantages, "bootstrap_on_timeout": True,
            "num_eval_envs": config.eval_episodes, "hidden": list(n.actor_hidden),
            "critic_hidden": list(n.critic_hidden)}


def _flags(devices: int) -> str:
    return f"--xla_force_host_platform_device_count={devices} {CPU_SCHEDULER_FLAG}"


def bench_brax(args) -> tuple[list[dict], str]:
    config_path = args.config if args.config.startswith("configs/brax") else BRAX_CONFIG
    sets = [f"total_timesteps={args.steps}", *args.set]
    config = config_lib.load(config_path, sets)
    script = Path(tempfile.mkdtemp()) / "brax_ppo.py"
    script.write_text(BRAX_SCRIPT)
    results: dict[tuple[str, int], list[dict]] = {}
    for devices in (1, 2):
        for seed in args.seeds:   # alternate so drift hits both equally
            with tempfile.TemporaryDirectory() as tmp:
                ours = run_command(train_cmd(Path(tmp) / "run", devices, config_path,
                                             [*sets, f"seed={seed}"]),
                                   XLA_FLAGS=_flags(devices), JAX_PLATFORMS="cpu",
                                   JAXRL_DIST_CACHE=str(Path(tmp) / "xla"))
            hp = {**brax_hyperparameters(config, 4, args.brax_unroll), "seed": seed}
            theirs = run_command([sys.executable, str(script), json.dumps(hp)],
                                 XLA_FLAGS=_flags(devices), JAX_PLATFORMS="cpu")
            for name, out in (("jaxrl_dist", ours), ("brax", theirs)):
                s = out["summary"]
                # Like for like: Brax's number is its training program's first call minus a
                # steady one; ours is the update program's trace, lower and compile (the whole
                # setup, init and evaluation programs included, is in compile_setup_s).
                update_s = s.get("compile_programs_s", {}).get("update", s["compile_time_s"])
                results.setdefault((name, devices), []).append({
                    "sps": s["sps"], "compile_time_s": update_s,
                    "compile_setup_s": s["compile_time_s"],
                    "eval_return": s["eval_return"], "wall_s": out["wall_s"], "seed": seed})
            print(f"  [{devices} dev, seed {seed}] ours {ours['summary']['sps']:,.0f} sps "
                  f"eval {ours['summary']['eval_return']:.1f}, brax "
                  f"{theirs['summary']['sps']:,.0f} sps eval "
                  f"{theirs['summary']['eval_return']:.1f}", file=sys.stderr, flush=True)
    rows, md = [], [
        "| trainer | devices | steady SPS, median (min–max) | training program's compile s "
        "(ours: update trace+lower+compile; Brax: first epoch - steady) | wall s | "
        "final eval return, mean [min, max] | seeds |", "|---|---|---|---|---|---|---|"]
    for (name, devices), runs in results.items():
        r = {"trainer": name, "devices": devices,
             **{k: stats([x[k] for x in runs]) for k in ("sps", "compile_time_s", "wall_s")},
             "compile_setup_s": stats([x["compile_setup_s"] for x in runs]),
             "eval_return": [x["eval_return"] for x in runs], "seeds": [x["seed"] for x in runs]}
        rows.append(r)
        ev = r["eval_return"]
        md.append(f"| {name} | {devices} | {_fmt(r['sps'])} | {_fmt(r['compile_time_s'], 1)} | "
                  f"{_fmt(r['wall_s'], 1)} | {statistics.mean(ev):.1f} [{min(ev):.1f}, "
                  f"{max(ev):.1f}] | {len(ev)} |")
    for devices in (1, 2):
        ours = next(r for r in rows if r["trainer"] == "jaxrl_dist" and r["devices"] == devices)
        theirs = next(r for r in rows if r["trainer"] == "brax" and r["devices"] == devices)
        md.append(f"\n{devices} device(s): median steady SPS ours / Brax = "
                  f"**{ours['sps']['median'] / theirs['sps']['median']:.2f}x**")
    md.append(f"\nOurs: `{config_path}` with {' '.join(sets)}; Brax: the same hyperparameters "
              f"({json.dumps(brax_hyperparameters(config, 4, args.brax_unroll))})")
    return rows, "\n".join(md)
