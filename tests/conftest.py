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
# One compilation cache for the whole suite (subprocesses inherit it), never the user's own;
# shared by pytest-xdist's workers of one run (same run id), so a program compiles once per run.
# Two workers writing one key write the same bytes; a read of a half-written entry is a JAX
# warning and a recompile, never a wrong program.
_run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
if _run:
    _cache = Path(tempfile.gettempdir()) / f"jaxrl_dist_test_xla_cache_{_run}"
    _cache.mkdir(exist_ok=True)
    os.environ["JAXRL_DIST_CACHE"] = str(_cache)
else:
    os.environ["JAXRL_DIST_CACHE"] = tempfile.mkdtemp(prefix="jaxrl_dist_test_xla_cache_")

import pytest  # noqa: E402

from helpers import TINY  # noqa: E402
from jaxrl_dist import config as config_lib  # noqa: E402


@pytest.fixture
def tiny_config():
    return config_lib.from_dict(TINY)


# The smoke tier (`pytest -m smoke`): what CI runs again on Python 3.12 with the newest JAX the
# pins allow, one test per capability: train, the launcher on 2 processes, resume, DQN, an
# environment suite, the compile cache's version-guarded patch, the import graph.
SMOKE = {
    "tests/test_train.py::test_cartpole_learns_and_writes_run_files",
    "tests/test_launch.py::test_two_processes_match_one_process_four_devices",
    "tests/test_lifecycle.py::test_exact_resume_after_kill_9",
    "tests/test_qlearning.py::test_gradient_is_the_global_batch_mean[1]",
    "tests/test_qlearning.py::test_checkpoint_holds_the_buffer_and_resumes_exactly",
    "tests/test_env_suites.py::test_adapter_step_equals_library_step[jumanji]",
    "tests/test_compile_cache.py::test_every_process_writes_its_cpu_entries_on_the_supported_jax",
    "tests/test_compile_cache.py::test_second_run_reads_every_program_from_the_cache",
    "tests/test_imports.py",
}


def pytest_collection_modifyitems(config, items):
    found = set()
    for item in items:
        for name in SMOKE:
            if item.nodeid == name or item.nodeid.startswith(name + "::"):
                item.add_marker(pytest.mark.smoke)
                found.add(name)
    if config.getoption("-m") == "smoke" and not config.getoption("-k") and len(items) > 50:
        missing = SMOKE - found   # a renamed test must not drop out of the tier silently
        assert not missing, f"smoke tests not found: {sorted(missing)}"
