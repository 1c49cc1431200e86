"""Test setup: 4 CPU devices in this process (set before jax is imported anywhere)."""

import os
import tempfile
from pathlib import Path

from jaxrl_dist.protocol import CPU_SCHEDULER_FLAG  # jax-free

os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count=4 {CPU_SCHEDULER_FLAG}"
os.environ["JAX_PLATFORMS"] = "cpu"
# Tests name shipped files by repo-relative paths (configs/...): run from the repo root whatever
# directory pytest was started in.
os.chdir(Path(__file__).resolve().parent.parent)
# One compilation cache for the whole suite (subprocesses inherit it), never the user's own.
os.environ["JAXRL_DIST_CACHE"] = tempfile.mkdtemp(prefix="jaxrl_dist_test_xla_cache_")

import pytest  # noqa: E402

from helpers import TINY  # noqa: E402
from jaxrl_dist import config as config_lib  # noqa: E402


@pytest.fixture
def tiny_config():
    return config_lib.from_dict(TINY)
