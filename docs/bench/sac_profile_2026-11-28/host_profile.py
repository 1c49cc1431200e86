"""The same run under jax.profiler (XLA:CPU thunks traced): ms per update of every kernel of
the learn program, 50 updates after 400. Run from the repository root."""
import os, sys, time, json, gzip, glob, collections
sys.argv = sys.argv[:1]
from jaxrl_dist.train import set_xla_env
set_xla_env(1)
os.environ["XLA_FLAGS"] += " --xla_cpu_enable_xprof_traceme=true"
import jax
from jaxrl_dist import config as config_lib, distributed
from jaxrl_dist.trainer import setup
cfg = config_lib.load("configs/mujoco_halfcheetah_sac.yaml",
                      ["total_timesteps=100000", "sac.learning_starts=300", "updates_per_call=1",
                       "checkpoint_every=0", "eval_episodes=1", "compile_cache=null"] + os.environ.get("OVER", "").split())
distributed.initialize()
run = setup(config=cfg, run_dir=f"/tmp/prof_{os.getpid()}", resume=False, env=None, env_params=None,
            devices=None, progress=False, start=time.perf_counter())
host = run.driver.actors; state = run.state
def step(state):
    traj = host.collect(state.train)
    train, data, m = host.learn(state.train, state.data, host.unpack(traj))
    return state._replace(train=train, data=data)
for i in range(400): state = step(state)
jax.block_until_ready(state)
d = f"/tmp/trace_{os.getpid()}"
with jax.profiler.trace(d, create_perfetto_trace=True):
    for i in range(50): state = step(state)
    jax.block_until_ready(state)
run.driver.close()
f = glob.glob(d + "/**/*.trace.json.gz", recursive=True)[0]
ev = json.load(gzip.open(f))
evs = ev["traceEvents"] if isinstance(ev, dict) else ev
tot = collections.Counter(); cnt = collections.Counter(); tids = collections.Counter()
names = {}
for e in evs:
    if e.get("ph") == "M" and e.get("name") == "thread_name":
        names[(e["pid"], e["tid"])] = e["args"]["name"]
for e in evs:
    if e.get("ph") == "X":
        tot[e["name"]] += e.get("dur", 0); cnt[e["name"]] += 1
        tids[names.get((e["pid"], e["tid"]), "?")] += e.get("dur", 0)
print("threads", tids.most_common(8))
for n, t in tot.most_common(60):
    print(f"{t/50/1000:8.3f} ms/step {cnt[n]/50:6.1f}/step  {n[:110]}")
