import os, sys, time, json
os.environ["XLA_FLAGS"] = "--xla_cpu_enable_concurrency_optimized_scheduler=false " + os.environ.get("EXTRA", "")
os.environ["JAX_PLATFORMS"] = "cpu"
import numpy as np, jax, jax.numpy as jnp
rank, port, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
jax.distributed.initialize(f"127.0.0.1:{port}", 2, rank)
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()).reshape(2, 1), ("a", "b"))
L = 2000
def body(x):
    def step(_, x):
        y = jnp.tanh(x) * 0.5
        if mode == "single":        # psum over the size-1 axis: replica groups {{0},{1}}
            y = jax.lax.psum(y, "b")
        elif mode == "gather":      # a real cross-process all-gather
            y = jax.lax.all_gather(y, "a", tiled=True)[:y.shape[0]]
        return y
    return jax.lax.fori_loop(0, L, step, x)
f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("a"), out_specs=P("a"), check_vma=False))
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("a")), np.ones((1, int(os.environ.get("N", "4677"))), np.float32))
jax.block_until_ready(f(x))
if rank == 0:
    txt = f.lower(x).compile().as_text()
    print("collectives in HLO:", txt.count("all-reduce("), "all-reduce,", txt.count("all-gather("), "all-gather")
ts = []
for _ in range(3):
    t = time.perf_counter(); jax.block_until_ready(f(x)); ts.append((time.perf_counter() - t) / L * 1e6)
if rank == 0: print(mode, "us/iter", [round(v, 1) for v in ts])
jax.distributed.shutdown()
