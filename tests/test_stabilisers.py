"""PPO stabilisers: value-target normalisation, KL early stop, clip-range schedule.

Each must be exact math and topology-invariant: its statistics are reduced over the whole mesh
and its decisions (stop this update's SGD steps) are the same on every device.
"""

import jax
import jax.numpy as jnp
import numpy as np

from helpers import TINY, train_in_process
from jaxrl_dist import config as config_lib
from jaxrl_dist import running_stats, sharding


def _train(overrides, num_devices):
    config = config_lib.from_dict({**TINY, "ppo": {**TINY["ppo"], **overrides}})
    state, rows = train_in_process(config, num_devices)
    metrics = jax.tree.map(lambda *x: np.concatenate(x), *rows)
    return sharding.to_host(state.train), metrics


def _leaves_close(a, b, rtol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=1e-6)


def test_standardize_denormalize_round_trip():
    m = running_stats.merge_moments(running_stats.init_moments(()), jnp.float32(40.0), jnp.float32(9.0),
                             jnp.float32(1000.0))
    x = jnp.array([-3.0, 40.0, 100.0])
    np.testing.assert_allclose(running_stats.denormalize(m, running_stats.standardize(m, x)), x, rtol=1e-5)
    np.testing.assert_allclose(running_stats.standardize(m, jnp.float32(43.0)), 1.0, rtol=1e-3)


def test_kl_early_stop_skips_the_rest_of_the_update():
    off, m_off = _train({}, 1)
    huge, m_huge = _train({"target_kl": 1e9}, 1)
    tiny, m_tiny = _train({"target_kl": 1e-12}, 1)
    # a target never reached changes nothing; every SGD step ran
    _leaves_close(huge.params, off.params, rtol=0)
    assert np.all(m_huge["sgd_steps_fraction"] == 1.0)
    # a tiny target: the first step (KL 0: params still equal the rollout's) runs, the
    # second sees KL > target and it and every later step of the update are skipped
    steps = TINY["ppo"]["update_epochs"] * TINY["ppo"]["num_minibatches"]
    np.testing.assert_allclose(m_tiny["sgd_steps_fraction"], 1.0 / steps)
    assert not np.allclose(jax.tree.leaves(tiny.params)[0], jax.tree.leaves(off.params)[0])


def test_stabilisers_are_topology_invariant_and_scheduled():
    overrides = {"normalize_values": True, "target_kl": 1e-5, "anneal_clip_eps": True}
    one, m1 = _train(overrides, 1)
    two, m2 = _train(overrides, 2)
    _leaves_close(two.params, one.params, rtol=1e-4)
    _leaves_close(two.value_moments, one.value_moments, rtol=1e-5)
    # the same stop decisions everywhere, and the early stop really triggered sometimes
    np.testing.assert_array_equal(m2["sgd_steps_fraction"], m1["sgd_steps_fraction"])
    assert np.any(m1["sgd_steps_fraction"] < 1.0), m1["sgd_steps_fraction"]
    # value moments saw every value target of the run (6 updates x the global batch)
    batch = TINY["num_envs"] * TINY["num_steps"]
    np.testing.assert_allclose(one.value_moments.count, 1e-4 + 6 * batch, rtol=1e-6)
    assert one.value_moments.mean > 0 and one.value_moments.var > 0   # CartPole pays +1
    # clip range: 0.2 linearly to 0 over the run's 6 updates
    np.testing.assert_allclose(m1["clip_eps"], 0.2 * (1 - np.arange(6) / 6), rtol=1e-6)
