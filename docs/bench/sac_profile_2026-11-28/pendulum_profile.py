"""SAC on gymnax Pendulum inside the program (rejax's settings, 200 updates a call) under
jax.profiler: kernels run per update by kind (copies, loops, dots). Run from the repository
root."""
import os, sys, time, json, gzip, glob, collections, re
sys.argv = sys.argv[:1]
from jaxrl_dist.train import set_xla_env
set_xla_env(1)
os.environ["XLA_FLAGS"] += " --xla_cpu_enable_xprof_traceme=true"
import jax
sys.path.insert(0, ".")
from benches.peers.rejax_configs import OURS_AS_REJAX_PENDULUM_SAC
from jaxrl_dist import config as config_lib, distributed
from jaxrl_dist.trainer import setup
U = 200
cfg = config_lib.load("configs/pendulum_sac.yaml", list(OURS_AS_REJAX_PENDULUM_SAC) + [f"updates_per_call={U}", "total_timesteps=100000", "checkpoint_every=0", "compile_cache=null"])
distributed.initialize()
run = setup(config=cfg, run_dir=f"/tmp/pp_{os.getpid()}", resume=False, env=None, env_params=None, devices=None, progress=False, start=time.perf_counter())
f = run.compiled[U]; state = run.state
for i in range(3): state, m = f(state)
jax.block_until_ready(state)
t = time.perf_counter()
for i in range(3): state, m = f(state)
jax.block_until_ready(state); print("ms/update", (time.perf_counter() - t) / 3 / U * 1e3)
d = f"/tmp/trace_pp_{os.getpid()}"
with jax.profiler.trace(d, create_perfetto_trace=True):
    state, m = f(state); jax.block_until_ready(state)
fn = glob.glob(d + "/**/*.trace.json.gz", recursive=True)[0]
ev = json.load(gzip.open(fn)); evs = ev["traceEvents"] if isinstance(ev, dict) else ev
X = [e for e in evs if e.get("ph") == "X" and not e["name"].startswith("$") and not any(s in e["name"] for s in ("Thunk", "PjRt", "Pjit", "Execute", "Slinky", "Await"))]
cat = collections.Counter(); cnt = collections.Counter()
for e in X:
    c = re.sub(r"[._]\d+$", "", e["name"]); cat[c] += e["dur"]; cnt[c] += 1
print("events/update", len(X) / U)
for c, t in cat.most_common(30): print(f"{t/U:8.1f} us {cnt[c]/U:6.1f}/upd {c}")
import pickle; pickle.dump([(e["name"], e["dur"]) for e in X], open("/tmp/pend_events.pkl", "wb"))
