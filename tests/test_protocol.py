"""The launcher <-> worker contract: one typed record, two namespaces that never overlap."""

import dataclasses
import subprocess
import sys

import pytest

from jaxrl_dist import launch, protocol
from jaxrl_dist.protocol import ContractError, WorkerEnv


def test_worker_env_round_trips():
    worker = WorkerEnv(coordinator="10.0.0.1:5555", num_processes=8, process_id=3,
                       local_rank=1, local_world_size=4, local_device_ids="1",
                       bind_address="10.0.0.1", init_timeout=60, heartbeat_timeout=10,
                       error_file="/tmp/e", heartbeat_file="/tmp/h")
    env = worker.to_env()
    assert env["JAXRL_COORDINATOR"] == "10.0.0.1:5555" and env["JAXRL_PROCESS_ID"] == "3"
    assert WorkerEnv.from_env(env) == worker and worker.in_job
    auto = WorkerEnv(auto=True)
    assert WorkerEnv.from_env(auto.to_env()) == auto and auto.in_job
    assert not WorkerEnv.from_env({}).in_job


@pytest.mark.parametrize("env,words", [
    ({"JAXRL_COORDINATOR": "127.0.0.1:5555"}, ["JAXRL_NUM_PROCESSES", "JAXRL_PROCESS_ID"]),
    ({"JAXRL_COORDINATOR": "h:1", "JAXRL_NUM_PROCESSES": "2"}, ["JAXRL_PROCESS_ID"]),
    ({"JAXRL_NUM_PROCESSES": "two"}, ["JAXRL_NUM_PROCESSES", "integer"]),
])
def test_half_set_job_is_a_one_line_error(env, words):
    with pytest.raises(ContractError) as e:
        WorkerEnv.from_env(env)
    assert "\n" not in str(e.value) and all(w in str(e.value) for w in words)


def test_launcher_inputs_never_use_worker_names():
    workers = {WorkerEnv.var(f.name) for f in dataclasses.fields(WorkerEnv)}
    inputs = {launch.env_name(flag) for flag, *_ in launch._OPTIONS}
    inputs |= {launch.env_name(f"--{name}") for name in ("auto", "all-ranks", "dry-run")}
    assert all(name.startswith(protocol.LAUNCH_PREFIX) for name in inputs)
    assert not workers & inputs


@pytest.mark.timeout(120)
def test_a_launcher_setting_in_the_shell_does_not_break_the_trainer(tmp_path):
    """It was a traceback ("Number of processes must be defined"); now one line, exit 2,
    before jax is even imported; and the launcher itself never imports jax."""
    proc = subprocess.run(
        [sys.executable, "-m", "jaxrl_dist.train", "configs/cartpole.yaml",
         "--run-dir", str(tmp_path / "run")],
        env={"PATH": "/usr/bin:/bin", "JAXRL_COORDINATOR": "127.0.0.1:5555"},
        capture_output=True, text=True, timeout=100)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "JAXRL_NUM_PROCESSES" in proc.stderr
    assert not (tmp_path / "run").exists()
    check = subprocess.run([sys.executable, "-c", "import sys, jaxrl_dist.launch; "
                            "print('jax' in sys.modules)"], capture_output=True, text=True,
                           timeout=60)
    assert check.stdout.strip() == "False", check.stderr
