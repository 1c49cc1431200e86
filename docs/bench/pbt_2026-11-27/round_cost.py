"""Seconds of one PBT round of configs/cartpole_pbt.yaml (8 members, 1 process x 2 CPU devices),
the compiled program alone, blocking on its result: the rounds' share of a run's wall time is
this x its rounds. Prints one JSON line."""
import json
import os
import time

os.environ.setdefault("XLA_FLAGS", "")
os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=2"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxrl_dist import config as config_lib, population, sharding  # noqa: E402
from jaxrl_dist import sizes as sizes_lib  # noqa: E402
from jaxrl_dist.drivers.base import lower_exploit  # noqa: E402
from jaxrl_dist.envs import from_config  # noqa: E402
from jaxrl_dist.programs import make_learner  # noqa: E402

config = config_lib.load("configs/cartpole_pbt.yaml")
members = population.members(config)
layout = sharding.make_layout(jax.devices()[:2], len(members))
learner = make_learner(config, sizes_lib.derive_sizes(config, layout.data_size),
                       from_config(config), layout)
seed_keys = layout.put(np.stack([np.asarray(jax.random.PRNGKey(m.seed)) for m in members]),
                       layout.train)
state = learner.init(seed_keys, layout.put(population.hparams(config), layout.train))
state = state._replace(pbt=state.pbt._replace(
    return_sum=layout.put(np.arange(8, dtype=np.float32), layout.train),
    episodes=layout.put(np.full(8, 4.0, np.float32), layout.train)))
exploit = lower_exploit(learner, learner.abstract_state()).compile()
key = layout.put(np.asarray(jax.random.PRNGKey(0)), jax.sharding.PartitionSpec())
times = []
train, pbt = state.train, state.pbt
for i in range(30):
    begin = time.perf_counter()
    train, pbt, record = exploit(train, pbt._replace(round=pbt.round * 0), key, None)
    jax.block_until_ready((train, pbt, record))
    times.append(time.perf_counter() - begin)
print(json.dumps({"round_s_median": float(np.median(times[5:])),
                  "round_s_max": float(np.max(times[5:])), "rounds_timed": len(times) - 5,
                  "devices": 2, "members": len(members)}))
