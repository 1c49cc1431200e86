"""Test setup: 4 CPU devices in this process (set before jax is imported anywhere)."""

import os
import tempfile
from pathlib import Path

os.environ["XLA_FLAGS"] = (
    "--xla_force_host_platform_device_count=4 "
    "--xla_cpu_enable_concurrency_optimized_scheduler=false")
os.environ["JAX_PLATFORMS"] = "cpu"
# Tests name shipped files by repo-relative paths (configs/...): run from the repo root whatever
# directory pytest was started in.
os.chdir(Path(__file__).resolve().parent.parent)
# One compilation cache for the whole suite (subprocesses inherit it), never the user's own.
os.environ["JAXRL_DIST_CACHE"] = tempfile.mkdtemp(prefix="jaxrl_dist_test_xla_cache_")

import pytest  # noqa: E402

from jaxrl_dist import config as config_lib  # noqa: E402

# A tiny CartPole config shared by tests so they share compiled programs where they can.
TINY = dict(env="CartPole-v1", seed=3, total_timesteps=8 * 16 * 6, num_envs=8, num_steps=16,
            updates_per_call=3, ppo=dict(update_epochs=2, num_minibatches=2))


@pytest.fixture
def tiny_config():
    return config_lib.from_dict(TINY)
