"""Cluster recipes in launch/: each is parsed, and run locally where the entry point allows."""

import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import TINY_ARGS as TINY
from helpers import _env, summaries
from jaxrl_dist import launch

RECIPES = Path("launch")


def _fake_bin(tmp_path: Path, name: str, body: str) -> None:
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def _path_env(tmp_path, **extra):
    return _env(PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", **extra)


@pytest.mark.parametrize("script", ["slurm.sbatch", "tpu_pod.sh", "two_hosts.sh"])
def test_shell_recipes_parse(script):
    subprocess.run(["bash", "-n", str(RECIPES / script)], check=True)


def test_slurm_recipe_plans_one_launcher_per_node(tmp_path):
    # srun runs its command once per node with that node's SLURM_NODEID; the launchers only
    # print their plan (JAXRL_LAUNCH_DRY_RUN stands in for --dry-run).
    _fake_bin(tmp_path, "scontrol", 'echo gpu-node-07; echo gpu-node-08\n')
    _fake_bin(tmp_path, "srun", 'while [[ "$1" == --* ]]; do shift; done\n'
                                'for n in 0 1; do SLURM_NODEID=$n "$@" || exit $?; done\n')
    proc = subprocess.run(
        ["bash", str(RECIPES / "slurm.sbatch"), "configs/cartpole.yaml", "--set", "seed=4"],
        env=_path_env(tmp_path, SLURM_JOB_ID="777", SLURM_JOB_NODELIST="gpu-node-[07-08]",
                      SLURM_JOB_NUM_NODES="2", JAXRL_LAUNCH_DRY_RUN="1"),
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    port = 61440 + 777 % 4096
    assert proc.stdout.count(f"JAXRL_COORDINATOR=gpu-node-07:{port}") == 16
    ranks = [int(line.split()[1]) for line in proc.stdout.splitlines()
             if line.startswith("rank ")]
    assert ranks == list(range(16))  # 2 nodes x 8 GPUs, node-major
    assert "JAXRL_LOCAL_DEVICE_IDS=7" in proc.stdout  # one GPU per process
    assert "--run-dir runs/slurm-777 --set seed=4" in proc.stdout


def test_kubernetes_manifest_is_consistent():
    service, job = yaml.safe_load_all((RECIPES / "kubernetes.yaml").read_text())
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"]
    command = pod["containers"][0]["args"][0]
    argv = shlex.split(command.replace("${JOB_COMPLETION_INDEX}", "1"))
    assert argv[:3] == ["exec", "python", "-m"] and argv[3] == "jaxrl_dist.launch"
    cfg = launch.parse_args(argv[4:], {})
    assert cfg.nnodes == spec["completions"] and cfg.node_rank == 1
    job_name = job["metadata"]["name"]
    assert cfg.coordinator == (f"{job_name}-0.{service['metadata']['name']}:"
                               f"{service['spec']['ports'][0]['port']}")
    workers = launch.plan(cfg, base_env={})
    assert [w.global_rank for w in workers] == list(range(8, 16))


def test_tpu_recipe_runs_the_auto_launcher_on_every_worker(tmp_path):
    _fake_bin(tmp_path, "gcloud", 'printf "%s\\n" "$@" > "$GCLOUD_LOG"\n')
    log = tmp_path / "gcloud.log"
    proc = subprocess.run(["bash", str(RECIPES / "tpu_pod.sh"), "configs/cartpole.yaml"],
                          env=_path_env(tmp_path, TPU_NAME="pod", ZONE="z", GCLOUD_LOG=str(log),
                                        PYTHON=""),   # unset: the README's venv
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    args = log.read_text().splitlines()
    assert "--worker=all" in args
    remote = args[args.index("--command") + 1]
    argv = shlex.split(remote.split("&&", 1)[1])
    assert argv[:3] == [".venv/bin/python", "-m", "jaxrl_dist.launch"]
    cfg = launch.parse_args(argv[3:], {})
    assert cfg.auto and cfg.nproc_per_node == 1


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_two_hosts_recipe_runs_on_localhost(tmp_path):
    # "ssh HOST CMD" runs CMD here; both "hosts" are this machine (127.0.0.1).
    _fake_bin(tmp_path, "ssh", 'shift; exec bash -c "$*"\n')
    run = tmp_path / "run"
    proc = subprocess.run(
        ["bash", str(RECIPES / "two_hosts.sh"), "configs/cartpole.yaml", *TINY],
        env=_path_env(tmp_path, HOST0="127.0.0.1", HOST1="127.0.0.1",
                      PORT=str(launch.pick_free_port()), REPO_DIR=os.getcwd(),
                      RUN_DIR=str(run), JAXRL_LAUNCH_CPU_DEVICES_PER_PROC="2",
                      PYTHON=sys.executable),   # the interpreter running this test
        capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = summaries(run / "logs")
    assert set(ranks) == {0, 1}  # both launchers logged into RUN_DIR/logs
    assert ranks[0]["param_fingerprint"] == ranks[1]["param_fingerprint"]


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_auto_discovery_under_slurm_variables(tmp_path):
    """`launch --auto` lets jax.distributed.initialize() read SLURM's variables (as under
    `srun --ntasks=2`); here two such tasks run on localhost."""
    for job_id in range(1000, 5096):  # the coordinator port JAX derives from the job id
        try:
            launch.check_port_free("127.0.0.1", 61440 + job_id % 4096)
            break
        except launch.LaunchError:
            continue
    run = tmp_path / "run"
    procs = [subprocess.Popen(
        [sys.executable, "-m", "jaxrl_dist.launch", "--auto", "--cpu-devices-per-proc", "2",
         "--log-dir", str(tmp_path / f"logs{r}"), "configs/cartpole.yaml", *TINY,
         "--run-dir", str(run)],
        env=_env(SLURM_JOB_ID=str(job_id), SLURM_STEP_NODELIST="localhost", SLURM_NTASKS="2",
                 SLURM_PROCID=str(r), SLURM_LOCALID=str(r)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    r0, r1 = summaries(tmp_path / "logs0")[0], summaries(tmp_path / "logs1")[1]
    assert r0["param_fingerprint"] == r1["param_fingerprint"]
