"""Host SAC on HalfCheetah-v5, 1 env, 1 CPU device: median ms per update of each piece of the
host driver (acting, the MuJoCo step, packing, placing) and of the learn program, each
blocked. Run from the repository root: python docs/bench/sac_profile_2026-11-28/host_pieces.py"""
import os, sys, time, json, collections
sys.argv = sys.argv[:1]
from jaxrl_dist.train import set_xla_env
set_xla_env(1)
import jax, numpy as np
from jaxrl_dist import config as config_lib, distributed, programs, actors
from jaxrl_dist.trainer import setup
T = collections.defaultdict(list)
def timed(name, f):
    def g(*a, **k):
        t = time.perf_counter(); out = f(*a, **k); jax.block_until_ready(out) if name.startswith("j:") else None
        T[name].append(time.perf_counter() - t); return out
    return g
cfg = config_lib.load("configs/mujoco_halfcheetah_sac.yaml",
                      ["total_timesteps=100000", "sac.learning_starts=300", "updates_per_call=1",
                       "checkpoint_every=0", "eval_episodes=1", "compile_cache=null"])
distributed.initialize()
run = setup(config=cfg, run_dir=f"/tmp/split_{os.getpid()}", resume=False, env=None, env_params=None,
            devices=None, progress=False, start=time.perf_counter())
host = run.driver.actors; state = run.state
host._prepare = timed("j:prepare", host._prepare); host._act = timed("j:act", host._act)
actors.jax.device_get = timed("device_get", jax.device_get)
host.envs.step = timed("env.step", host.envs.step)
programs.pack_envs_host = timed("pack_envs_host", programs.pack_envs_host)
actors.episode_sums = timed("episode_sums", actors.episode_sums)
jax.make_array_from_process_local_data = timed("make_array", jax.make_array_from_process_local_data)
host.unpack = timed("j:unpack", host.unpack)
host.learn = timed("j:learn", host.learn)
coll = timed("collect_total", host.collect)
for i in range(600):
    traj = coll(state.train)
    train, data, m = host.learn(state.train, state.data, host.unpack(traj))
    state = state._replace(train=train, data=data)
    if i == 299: T.clear()
for k, v in T.items(): print(f"{k:16s} {1e3*np.median(v):7.3f} ms  x{len(v)/300:.0f}")
run.driver.close()
