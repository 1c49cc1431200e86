"""``python -m benches replay --config configs/cartpole_dqn.yaml``: what keeping the
replay buffer in checkpoints costs, in megabytes on disk and seconds per save.

Runs the config's learner in THIS process on one device until the buffer is full (real data:
zeros would compress to nothing), then saves the run state with the buffer and without it
(``dqn.checkpoint_buffer``), each ``--repeats`` times into a fresh directory, timing the save
until it is complete on disk (orbax writes in the background; the loop would only wait for it
at the next save).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from benches.common import _fmt, stats


def _size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def bench_replay(args) -> tuple[list[dict], str]:
    import jax

    from jaxrl_dist import config as config_lib
    from jaxrl_dist import policy as policy_lib
    from jaxrl_dist import sharding
    from jaxrl_dist import sizes as sizes_lib
    from jaxrl_dist.programs import make_learner
    from jaxrl_dist.agents.replay import buffer as replay_lib
    from jaxrl_dist.checkpoint import Checkpointer
    from jaxrl_dist.envs import from_config
    from jaxrl_dist.types import RunState

    config = config_lib.load(args.config, args.set)
    if config.algo != "dqn":
        raise SystemExit(f"bench replay needs a dqn config, {args.config} is algo {config.algo}")
    d = config.dqn
    layout = sharding.make_layout(jax.devices()[:1])
    sizes = sizes_lib.derive_sizes(config, 1)
    spec = from_config(config)
    learner = make_learner(config, sizes, spec, layout)
    state = learner.init(jax.random.PRNGKey(config.seed))
    fill = -(-d.buffer_size // sizes.batch_size)            # updates until the buffer is full
    done = 0
    while done < fill:
        n = min(500, fill - done)
        state, _ = learner.update(state, n)
        done += n
    jax.block_until_ready(state)
    buffer_mb = replay_lib.nbytes(state.data) / 2**20
    meta = {"updates": done, "config": config_lib.to_dict(config), "members": None,
            "policy": policy_lib.record(config.algo, config_lib.to_dict(config)[config.algo],
                                        spec)}
    rows, md = [], [f"Buffer: {d.buffer_size:,} transitions of {spec.name} ({list(spec.obs_shape)} "
                    f"observations stored as {d.obs_storage}, final observations "
                    f"{'stored' if d.bootstrap_truncation else 'not stored'}), "
                    f"{buffer_mb:.1f} MB in memory, full after {done:,} updates.\n",
                    "| checkpoint | size on disk, MB | save until on disk, s (min-max) |",
                    "|---|---|---|"]
    for with_buffer in (True, False):
        seconds, sizes_mb = [], []
        for _ in range(args.repeats):
            directory = Path(tempfile.mkdtemp()) / "checkpoints"
            ckpt = Checkpointer(directory, saved=RunState(True, True, with_buffer),
                                policy_params=learner.agent.policy_params)
            start = time.perf_counter()
            ckpt.save(state, meta)
            ckpt.wait()
            seconds.append(time.perf_counter() - start)
            ckpt.close()
            sizes_mb.append(_size_mb(directory))
            shutil.rmtree(directory.parent)
        label = "with the buffer" if with_buffer else "without (checkpoint_buffer: false)"
        row = {"label": label, "size_mb": float(np.median(sizes_mb)), "save_s": stats(seconds),
               "buffer_mb_in_memory": buffer_mb, "per_repeat_s": seconds}
        rows.append(row)
        md.append(f"| {label} | {row['size_mb']:.1f} | {_fmt(row['save_s'], 2)} |")
    return rows, "\n".join(md)
