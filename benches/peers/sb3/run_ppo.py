"""Stable-Baselines3 PPO on a Gymnasium MuJoCo task, set up as CleanRL's ppo_continuous_action.py.

A peer for jaxrl_dist's PPO: run it in the venv made by make_venv.sh (not the package's venv), e.g.
    $VENV/bin/python benches/peers/sb3/run_ppo.py --out runs/sb3_ppo_halfcheetah_s1 --seed 1
and continue a stopped run with the same command plus --resume.

CleanRL reference: vwxyzjn/cleanrl cleanrl/ppo_continuous_action.py (read at commit fe8d8a03c41a).

Settings that map exactly onto SB3:
  1 env (num_envs=1), rollout 2048 steps (n_steps), gamma 0.99, gae_lambda 0.95, 10 epochs,
  32 minibatches of 2048 -> batch_size 64, clip 0.2, ent_coef 0, max_grad_norm 0.5, Adam eps 1e-5
  (SB3's default for ActorCriticPolicy), per-minibatch advantage normalisation (std + 1e-8),
  no target_kl, actions clipped to the action box only when sent to the env (ClipAction),
  separate 64x64 tanh actor and critic MLPs, orthogonal init (gain sqrt(2) hidden, 0.01 policy
  head, 1.0 value head, zero biases), state-independent log std initialised to 0,
  observation normalisation (running mean/var, eps 1e-8, clip to +-10) and reward normalisation
  by the std of a running discounted return (gamma 0.99, eps 1e-8, clip to +-10) -> VecNormalize,
  learning rate 3e-4 annealed linearly to 0, with CleanRL's per-iteration values
  (lr_k = 3e-4 * (1 - (k-1)/N) for iteration k of N = total_timesteps // 2048; see CleanRLAnneal).

Settings that differ (SB3 behaviour kept as is, or the nearest SB3 knob):
  * value loss: CleanRL uses 0.5 * mean(max(unclipped^2, clipped^2)) with clip 0.2 and vf_coef 0.5;
    SB3 uses mean(clipped^2) (no max) times vf_coef. We set clip_range_vf=0.2 and vf_coef=0.25 so
    the loss has CleanRL's scale (0.5 * 0.5); it differs only where the unclipped error is larger,
    where SB3 gives no value gradient and CleanRL does. (--vf-coef / --clip-range-vf change them.)
  * time-limit truncation: SB3 bootstraps the value of the final observation at a TimeLimit
    truncation (every HalfCheetah episode ends so, at 1000 steps); CleanRL treats it as terminal.
  * reward normalisation: VecNormalize resets its running return at every episode end; the
    gymnasium NormalizeReward wrapper CleanRL uses resets it only on termination.
  * step count: SB3 runs whole rollouts until >= total_timesteps (1,001,472 for 1M); CleanRL runs
    total_timesteps // 2048 iterations (999,424 for 1M).
  * env: HalfCheetah-v5 by default (CleanRL's default is HalfCheetah-v4); no dm_control flattening.
  * torch on CPU with --threads threads (CleanRL would use CUDA if present); no torch_deterministic.
  * a resumed run is not bit-identical to an uninterrupted one: each sitting reseeds with
    seed + 1000 * sitting and starts a fresh episode; the partial episode is dropped.

Outputs in --out DIR: state.json + ckpt/ (latest model + VecNormalize statistics, steps done,
wall time summed over sittings), result.json at the end (deterministic evaluation of the final
policy on a separate env with frozen observation statistics and raw rewards).
"""
import time

T0 = time.monotonic()  # the sitting's clock starts before the heavy imports: setup time counts

import argparse
import json
import os
import platform
import sys
from pathlib import Path

STATE = "state.json"
RESULT = "result.json"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-timesteps", type=int, default=1_000_000)
    p.add_argument("--out", required=True, help="run directory (checkpoints, state.json, result.json)")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--checkpoint-every", type=int, default=100_000, help="env steps between checkpoints")
    p.add_argument("--resume", action="store_true", help="continue from DIR's latest checkpoint (or start)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="torch.set_num_threads")
    p.add_argument("--max-sitting-seconds", type=float, default=0.0,
                   help="if > 0, checkpoint and exit (code 3) at the first rollout boundary past this")
    p.add_argument("--vf-coef", type=float, default=0.25, help="0.25 = CleanRL's 0.5 * 0.5 (see docstring)")
    p.add_argument("--clip-range-vf", type=float, default=0.2, help="0 disables SB3 value clipping")
    return p.parse_args(argv)


class CleanRLAnneal:
    """CleanRL's lr annealing as an SB3 schedule.

    SB3 evaluates the schedule before iteration k's update with progress_remaining
    p = 1 - k * n_steps / total; CleanRL uses lr0 * (1 - (k-1) / (total // n_steps)).
    """

    def __init__(self, lr0, n_steps, total):
        self.lr0, self.n_steps, self.total = lr0, n_steps, total
        self.iters = max(1, total // n_steps)

    def __call__(self, progress_remaining):
        k = round((1.0 - progress_remaining) * self.total / self.n_steps)  # iteration just collected
        return self.lr0 * min(1.0, max(0.0, 1.0 - (k - 1) / self.iters))


def hyperparams(args):
    return dict(
        n_envs=1, n_steps=2048, batch_size=64, n_epochs=10, learning_rate=3e-4, anneal_lr=True,
        gamma=0.99, gae_lambda=0.95, clip_range=0.2, clip_range_vf=args.clip_range_vf or None,
        normalize_advantage=True, ent_coef=0.0, vf_coef=args.vf_coef, max_grad_norm=0.5,
        target_kl=None, net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn="Tanh",
        ortho_init=True, log_std_init=0.0, adam_eps=1e-5,
        vecnormalize=dict(norm_obs=True, norm_reward=True, clip_obs=10.0, clip_reward=10.0,
                          gamma=0.99, epsilon=1e-8),
    )


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write_json(path, obj):
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)  # atomic: a kill never leaves a half-written file


def main(argv=None):
    args = parse_args(argv)
    out = Path(args.out).resolve()
    state_path = out / STATE
    state = json.loads(state_path.read_text()) if state_path.exists() else None
    if state is not None and not args.resume:
        sys.exit(f"{state_path} exists: pass --resume to continue it, or use another --out")
    if state is not None:
        cfg = state["config"]
        for k in ("env", "seed", "total_timesteps"):
            if getattr(args, k) != cfg[k]:
                print(f"[resume] using the run's {k}={cfg[k]!r} (ignoring --{k.replace('_', '-')} {getattr(args, k)!r})")
            setattr(args, k, cfg[k])
        hp = state["hyperparams"]
        if (out / RESULT).exists():
            print(f"[resume] run already finished: {out / RESULT}")
            return 0
    else:
        hp = hyperparams(args)
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(out)  # MuJoCo writes MUJOCO_LOG.TXT (warnings) into the working directory

    import numpy as np
    import torch
    import torch.nn as nn
    import gymnasium as gym
    import mujoco
    import stable_baselines3 as sb3
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    torch.set_num_threads(args.threads)
    sitting = 0 if state is None else len(state["sittings"])
    seed = args.seed + 1000 * sitting
    steps_before = 0 if state is None else state["steps_done"]
    wall_before = 0.0 if state is None else state["train_wall_s"]
    vn_kw = hp["vecnormalize"]

    def make_venv():
        return DummyVecEnv([lambda: Monitor(gym.make(args.env))])

    lr = CleanRLAnneal(hp["learning_rate"], hp["n_steps"], args.total_timesteps)
    if state is None:
        venv = VecNormalize(make_venv(), **vn_kw)
        model = PPO(
            "MlpPolicy", venv, learning_rate=lr, n_steps=hp["n_steps"], batch_size=hp["batch_size"],
            n_epochs=hp["n_epochs"], gamma=hp["gamma"], gae_lambda=hp["gae_lambda"],
            clip_range=hp["clip_range"], clip_range_vf=hp["clip_range_vf"],
            normalize_advantage=hp["normalize_advantage"], ent_coef=hp["ent_coef"], vf_coef=hp["vf_coef"],
            max_grad_norm=hp["max_grad_norm"], target_kl=hp["target_kl"],
            policy_kwargs=dict(net_arch=hp["net_arch"], activation_fn=nn.Tanh, ortho_init=hp["ortho_init"],
                               log_std_init=hp["log_std_init"], optimizer_kwargs=dict(eps=hp["adam_eps"])),
            seed=seed, device="cpu", verbose=0,
        )
        sittings = []
    else:
        venv = VecNormalize.load(str(out / state["vecnormalize"]), make_venv())
        venv.training, venv.norm_reward = True, True
        model = PPO.load(str(out / state["model"]), env=venv, device="cpu", custom_objects={"learning_rate": lr})
        model.set_random_seed(seed)
        sittings = state["sittings"]
        assert model.num_timesteps == steps_before, (model.num_timesteps, steps_before)
    setup_s = time.monotonic() - T0
    versions = dict(python=platform.python_version(), torch=torch.__version__, stable_baselines3=sb3.__version__,
                    gymnasium=gym.__version__, mujoco=mujoco.__version__, numpy=np.__version__)

    def save(steps, done):
        """Checkpoint model + VecNormalize, then point state.json at them (atomically)."""
        ck = out / "ckpt"
        ck.mkdir(exist_ok=True)
        m, v = f"ckpt/model_{steps}.zip", f"ckpt/vecnormalize_{steps}.pkl"
        model.save(str(out / m))
        venv.save(str(out / v))
        wall = time.monotonic() - T0
        rec = dict(sitting=sitting, seed=seed, threads=args.threads, steps_from=steps_before, steps_to=steps,
                   wall_s=round(wall, 3), setup_s=round(setup_s, 3))
        write_json(state_path, dict(
            config=dict(env=args.env, seed=args.seed, total_timesteps=args.total_timesteps),
            hyperparams=hp, steps_done=steps, done=done, train_wall_s=round(wall_before + wall, 3),
            model=m, vecnormalize=v, sittings=sittings + [rec], versions=versions))
        for f in ck.iterdir():  # keep only the latest checkpoint
            if f.name not in (Path(m).name, Path(v).name):
                f.unlink()
        print(f"[ckpt] steps={steps} wall={wall_before + wall:.1f}s -> {out / m}", flush=True)

    class Checkpointer(BaseCallback):
        def __init__(self):
            super().__init__()
            self.next = (steps_before // args.checkpoint_every + 1) * args.checkpoint_every
            self.stop = False

        def _on_rollout_start(self):  # called after the previous rollout's update: a consistent point
            n = self.model.num_timesteps
            if n > steps_before:
                el = time.monotonic() - T0
                ep = [e["r"] for e in self.model.ep_info_buffer] if self.model.ep_info_buffer else []
                print(f"steps={n} sps={(n - steps_before) / el:.0f} "
                      f"ep_return_mean100={np.mean(ep) if ep else float('nan'):.1f}", flush=True)
            over = args.max_sitting_seconds > 0 and time.monotonic() - T0 > args.max_sitting_seconds
            if n >= self.next or (over and n > steps_before):
                save(n, done=False)
                self.next = (n // args.checkpoint_every + 1) * args.checkpoint_every
            self.stop = over and n > steps_before

        def _on_step(self):
            return not self.stop

    remaining = args.total_timesteps - steps_before
    stopped = False
    if remaining > 0:
        print(f"[sitting {sitting}] {args.env} seed={args.seed} steps {steps_before} -> {args.total_timesteps}, "
              f"threads={args.threads}, setup {setup_s:.1f}s", flush=True)
        cb = Checkpointer()
        model.learn(total_timesteps=remaining, callback=cb, reset_num_timesteps=False)
        stopped = cb.stop
    if stopped:
        print("[stop] --max-sitting-seconds reached; continue with --resume", flush=True)
        return 3
    steps_done = model.num_timesteps
    if state is None or not state.get("done"):
        save(steps_done, done=True)
    state = json.loads(state_path.read_text())

    # Final evaluation: separate env, frozen observation statistics, raw rewards, deterministic actions.
    t_eval = time.monotonic()
    eval_env = VecNormalize(make_venv(), training=False, norm_obs=True, norm_reward=False,
                            clip_obs=vn_kw["clip_obs"], epsilon=vn_kw["epsilon"])
    eval_env.obs_rms = venv.obs_rms.copy()
    eval_env.seed(args.seed + 10_000)
    returns, lengths = evaluate_policy(model, eval_env, n_eval_episodes=args.eval_episodes,
                                       deterministic=True, return_episode_rewards=True)
    eval_s = time.monotonic() - t_eval
    wall = state["train_wall_s"]
    result = dict(
        env=args.env, seed=args.seed, total_timesteps=args.total_timesteps, steps_done=steps_done,
        eval=dict(episodes=args.eval_episodes, deterministic=True, mean_return=float(np.mean(returns)),
                  std_return=float(np.std(returns)), returns=[float(r) for r in returns],
                  lengths=[int(n) for n in lengths], wall_s=round(eval_s, 3)),
        train_wall_s=wall, env_steps_per_s=round(steps_done / wall, 2) if wall > 0 else None,
        setup_s_total=round(sum(s["setup_s"] for s in state["sittings"]), 3),
        n_sittings=len(state["sittings"]), sittings=state["sittings"],
        torch_threads=sorted({s["threads"] for s in state["sittings"]}),
        versions=state["versions"], cpu_model=cpu_model(), cpu_count=os.cpu_count(),
        hyperparams=hp, algo="stable-baselines3 PPO (CleanRL ppo_continuous_action settings)",
        finished_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    write_json(out / RESULT, result)
    print(f"[result] eval mean {result['eval']['mean_return']:.1f} +- {result['eval']['std_return']:.1f} "
          f"over {args.eval_episodes} episodes; train wall {wall:.1f}s, {result['env_steps_per_s']} env steps/s "
          f"-> {out / RESULT}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
