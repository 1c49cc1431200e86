"""Checks of properties that hold for the programs the trainer compiles, run in a subprocess
with the trainer's XLA flags (``python tests/at_training_flags.py NAME`` prints one JSON line).

The suite compiles with LLVM at -O0 and the classic emitters (tests/helpers.py,
TEST_XLA_FLAGS): cheaper compiles, and what most tests compare (one program on several
topologies, a run and its resume) is the same under either. Two DIFFERENT programs of the same
math are another matter: at -O0 they round apart where the trainer's programs are bitwise
equal (measured 2026-11-28, AMD EPYC with AVX-512, jaxlib 0.10.2: ``collect`` + ``learn`` vs
the fused update 3.8e-6 apart at -O0, 0.0 at the defaults; init at level 1 vs -O0 one ulp in
the critic's kernel). These checks are of such pairs, so they run at the trainer's flags.
Not a test module: test_seams and test_compile_cache run it."""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.chdir(Path(__file__).resolve().parent.parent)


def _setup():
    from jaxrl_dist.protocol import CPU_SCHEDULER_FLAG
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count=2 {CPU_SCHEDULER_FLAG}"
    os.environ["JAX_PLATFORMS"] = "cpu"


def _learner(config):
    import jax
    from jaxrl_dist import sharding
    from jaxrl_dist import sizes as sizes_lib
    from jaxrl_dist.envs import from_config
    from jaxrl_dist.programs import make_learner
    layout = sharding.make_layout(jax.devices()[:2])
    return make_learner(config, sizes_lib.derive_sizes(config, layout.data_size),
                        from_config(config, None, None), layout)


def _differing(a, b) -> list[str]:
    import jax
    import numpy as np
    paths = jax.tree_util.tree_leaves_with_path(a)
    return [jax.tree_util.keystr(p) for (p, x), y in zip(paths, jax.tree.leaves(b))
            if not np.array_equal(np.asarray(x), np.asarray(y))]


def learn_after_collect():
    """``collect`` then ``learn`` (what host actors do) against one fused update."""
    import jax
    import numpy as np
    from helpers import TINY
    from jaxrl_dist import config as config_lib, programs, sharding
    config = config_lib.from_dict(TINY)
    learner = _learner(config)
    key = jax.random.PRNGKey(config.seed)
    state = learner.init(key)
    key_next, key_act, key_learn = jax.random.split(state.train.key, 3)
    actors, trajectory = learner.collect(state.train, state.actors, key_act)
    train, _, metrics = learner.learn(state.train._replace(key=key_next), state.data,
                                      trajectory, key_learn)
    fused, fused_metrics = learner.update(learner.init(key), 1)
    checked = set(metrics) | set(programs.ENV_CHECKS)   # the update also checks the envs
    return {"params": _differing(sharding.to_host(train.params),
                                 sharding.to_host(fused.train.params)),
            "obs": bool(np.array_equal(np.asarray(actors.env.obs),
                                       np.asarray(fused.actors.env.obs))),
            "metrics": checked == set(learner.metrics) == set(fused_metrics)}


def run_once_level():
    """init and evaluation compiled at :func:`compile_cache.run_once_options` against XLA's
    default level."""
    import jax
    from helpers import TINY
    from jaxrl_dist import compile_cache, config as config_lib
    learner = _learner(config_lib.from_dict(TINY))
    once = compile_cache.run_once_options(learner.layout.mesh.devices.flat)
    key = jax.random.PRNGKey(5)
    init = learner.init_program.lower(key, {}, ())
    states = [init.compile(options)(key, {}, ()) for options in (None, once)]
    init_differs = _differing(*states)
    state, _ = learner.update(states[0], 2)   # trained parameters: a non-trivial policy
    evaluate = learner.evaluate.lower(state.train, key, ())
    returns = [evaluate.compile(options)(state.train, key, ()) for options in (None, once)]
    return {"options": once, "init": init_differs,
            "evaluation": {k: [float(r[k]) for r in returns] for k in returns[0]}}


if __name__ == "__main__":
    _setup()
    print(json.dumps(globals()[sys.argv[1]]()))
