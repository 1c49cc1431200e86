"""bench collectives: latency of one cross-process all-reduce over jax.distributed + gloo.

The floor under every multi-process SGD step on CPU; measured with each process pinned to its
own core and unpinned (docs/benchmarks_history.md explains why 2-process CPU runs are slow).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from benches.common import XLA_ENV, _clean_env, _fmt, stats


ALLREDUCE_SCRIPT = textwrap.dedent("""
    # One process of a 2-process all-reduce latency probe: psum of N floats, L times in one
    # compiled loop, over jax.distributed + gloo (the transport the trainer uses on CPU).
    import json, os, sys, time
    import numpy as np
    import jax
    rank, port, n, loops = (int(a) for a in sys.argv[1:5])
    jax.distributed.initialize(f"127.0.0.1:{port}", 2, rank)
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(np.array(jax.devices()), ("d",))

    def body(x):
        def step(_, x):
            return jax.lax.pcast(jax.lax.psum(x, "d") * 0.5, "d", to="varying")
        return jax.lax.fori_loop(0, loops, step, x)

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("d"), out_specs=P("d")))
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("d")),
                                               np.ones((1, n), np.float32))
    jax.block_until_ready(f(x))
    times = []
    for _ in range(5):
        t = time.perf_counter()
        jax.block_until_ready(f(x))
        times.append((time.perf_counter() - t) / loops * 1e6)
    if rank == 0:
        print(json.dumps({"us": times}))
    jax.distributed.shutdown()
""")


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_collectives(args) -> tuple[list[dict], str]:
    """Latency of one cross-process all-reduce (2 processes on 127.0.0.1, gloo), with each
    process pinned to its own core and unpinned: the floor under every multi-process SGD step."""
    script = Path(tempfile.mkdtemp()) / "allreduce.py"
    script.write_text(ALLREDUCE_SCRIPT)
    env = _clean_env(**XLA_ENV)
    rows, md = [], ["| floats | processes pinned | all-reduce µs, median (min–max) |",
                    "|---|---|---|"]
    for n in (8, 9_200):   # 9,200 ~ the CartPole actor + critic gradient
        for pinned in (False, True):
            samples = []
            for _ in range(args.repeats):
                port = _free_port()
                procs = []
                for rank in range(2):
                    pre = ["taskset", "-c", str(rank)] if pinned else []
                    procs.append(subprocess.Popen(
                        [*pre, sys.executable, str(script), str(rank), str(port), str(n), "200"],
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env))
                outs = [p.communicate(timeout=300)[0] for p in procs]
                samples.append(statistics.median(json.loads(outs[0].strip().splitlines()[-1])["us"]))
            row = {"floats": n, "pinned": pinned, "us": stats(samples)}
            rows.append(row)
            print(f"  {n} floats, pinned={pinned}: {row['us']['median']:.0f} us",
                  file=sys.stderr, flush=True)
            md.append(f"| {n:,} | {'yes (one core each)' if pinned else 'no'} | "
                      f"{_fmt(row['us'])} |")
    return rows, "\n".join(md)
