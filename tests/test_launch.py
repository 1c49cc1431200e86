"""The launcher: real multi-process runs on 127.0.0.1, failures, hangs, signals, bad input."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from helpers import CFG, _env, _workers_of, run_launcher, start_training, summaries
from helpers import TINY_ARGS as TINY
from jaxrl_dist import launch

LONG = ["--set", "num_envs=4", "--set", "num_steps=32", "--set", "updates_per_call=5",
        "--set", "total_timesteps=10000000"]


# ------------------------------------------------------------------------------------------------
# Real runs


def test_the_rank_that_failed_is_named_not_the_sibling_the_runtime_ended(tmp_path):
    """A rank killed by a signal is known only when reaped, which on a busy machine can come
    after its sibling's abort ("the JAX distributed service detected fatal errors", XLA's
    words for a peer's failure): the killed rank is still the root cause; among failures of
    their own the earliest is."""
    from types import SimpleNamespace

    from jaxrl_dist.launch.supervise import root_cause
    from jaxrl_dist.launch.worker import PEER_FAILED, Worker

    def worker(name, log, failed_at):
        path = tmp_path / f"{name}.log"
        path.write_text(log)
        w = Worker.__new__(Worker)   # only what the choice reads: the log and the time
        w.spec, w.failed_at, w.name = SimpleNamespace(log_path=path), lambda: failed_at, name
        return w

    killed = worker("killed", "step 12\n", failed_at=10.0)        # reaped late
    ended = worker("ended", f"step 12\nF client.h:80] Terminating process because the "
                             f"{PEER_FAILED}. This most likely indicates that another task "
                             f"died\n", failed_at=9.5)
    assert ended.failed_for_a_peer() and not killed.failed_for_a_peer()
    assert root_cause([ended, killed]).name == "killed"
    raised = worker("raised", "Traceback ...\nValueError: boom\n", failed_at=9.0)
    assert root_cause([killed, raised, ended]).name == "raised"   # the earliest of their own
    assert root_cause([ended]).name == "ended"


@pytest.mark.timeout(400)
@pytest.mark.slow
def test_two_processes_match_one_process_four_devices(tmp_path):
    run = tmp_path / "mp"
    proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "2", CFG, *TINY,
                         "--run-dir", str(run)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = summaries(run / "logs")
    assert set(ranks) == {0, 1}
    assert ranks[0]["param_fingerprint"] == ranks[1]["param_fingerprint"]  # replicas identical
    assert ranks[0]["env_steps"] == 1280
    assert (run / "summary.json").exists() and (run / "metrics.jsonl").exists()
    # only rank 0 writes run files: rank 1's log has no progress line, and nothing else is there
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "config.yaml", "logs",
                                                     "metrics.jsonl", "summary.json", "tb"]
    # again: EVERY process reads its programs from the persistent cache (on CPUs each
    # process's cache keys are its own; JAX alone writes process 0's only)
    again = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "2", CFG, *TINY,
                          "--run-dir", str(tmp_path / "mp2")])
    assert again.returncode == 0, again.stderr[-3000:]
    for rank, line in summaries(tmp_path / "mp2" / "logs").items():
        # hits: init, update, evaluation (JAX counts a miss only when it WRITES an entry)
        assert line["compile_cache"]["hits"] >= 3, (rank, line["compile_cache"])
        assert line["compile_cache"]["misses"] == 0, (rank, line["compile_cache"])
        assert line["param_fingerprint"] == ranks[0]["param_fingerprint"]

    single = subprocess.run([sys.executable, "-m", "jaxrl_dist.train", CFG, *TINY,
                             "--cpu-devices", "4", "--run-dir", str(tmp_path / "sp"),
                             "--no-progress"], env=_env(), capture_output=True, text=True,
                            timeout=180)
    assert single.returncode == 0, single.stderr[-3000:]
    ref = json.loads(next(line for line in single.stdout.splitlines()
                          if line.startswith('{"rank"')))
    assert single.stdout.strip().splitlines()[-1].startswith("CartPole-v1: final evaluation")
    assert abs(ranks[0]["param_norm"] - ref["param_norm"]) <= 1e-4 * ref["param_norm"]
    from helpers import max_rel_diff, params_of

    diff = max_rel_diff(params_of(run)[0], params_of(tmp_path / "sp")[0])
    assert 0 < diff <= 1e-4 or ranks[0]["param_fingerprint"] == ref["param_fingerprint"], diff


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_two_launchers_as_two_nodes(tmp_path):
    port = launch.pick_free_port()
    run = tmp_path / "run"
    common = ["--nnodes", "2", "--coordinator", f"127.0.0.1:{port}", "--cpu-devices-per-proc",
              "2"]
    nodes = [subprocess.Popen([sys.executable, "-m", "jaxrl_dist.launch", *common,
                               "--node-rank", str(r), "--log-dir", str(tmp_path / f"logs{r}"),
                               CFG, *TINY, "--run-dir", str(run)],
                              env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for r in (0, 1)]
    outs = [n.communicate(timeout=240) for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], [o[1][-2000:] for o in outs]
    assert "loopback coordinator" in outs[0][1]  # the warning for nnodes > 1 on 127.0.0.1
    r0, r1 = summaries(tmp_path / "logs0")[0], summaries(tmp_path / "logs1")[1]
    assert r0["param_fingerprint"] == r1["param_fingerprint"]
    assert not (tmp_path / "logs1" / "metrics.jsonl").exists()


# ------------------------------------------------------------------------------------------------
# Failures: every process gone, launcher names the rank, bounded time


@pytest.mark.timeout(200)
@pytest.mark.parametrize("victim", [1, 0])
@pytest.mark.slow
def test_kill_9_a_rank_tears_down_the_job(tmp_path, victim):
    run = tmp_path / "run"
    launcher = start_training(run, LONG)
    try:
        workers = _workers_of(str(run))
        assert set(workers) == {0, 1}
        killed_at = time.monotonic()
        os.kill(workers[victim], signal.SIGKILL)
        _, err = launcher.communicate(timeout=30)
        elapsed = time.monotonic() - killed_at
    finally:
        launcher.kill()
    assert launcher.returncode == 128 + 9, err[-2000:]
    assert f"rank {victim} " in err and "SIGKILL" in err, err[-2000:]
    assert elapsed < 30
    assert _workers_of(str(run)) == {}


@pytest.mark.timeout(200)
@pytest.mark.slow
def test_exception_shows_traceback_and_exit_code_1(tmp_path):
    run = tmp_path / "run"
    start = time.monotonic()
    proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "2", CFG, *LONG,
                         "--run-dir", str(run)], JAXRL_FAULT="raise@1:10")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "rank 1 " in proc.stderr and "exited with code 1" in proc.stderr
    assert "Traceback" in proc.stderr and "injected fault on rank 1" in proc.stderr
    assert time.monotonic() - start < 120
    assert _workers_of(str(run)) == {}


@pytest.mark.timeout(200)
@pytest.mark.slow
def test_stuck_worker_is_detected_and_its_stacks_dumped(tmp_path):
    run = tmp_path / "run"
    proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "2",
                         "--hang-timeout", "6", CFG, *LONG, "--run-dir", str(run)],
                        JAXRL_FAULT="hang@1:10")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "rank 1 " in proc.stderr and "made no progress" in proc.stderr
    log = (run / "logs" / "rank1.log").read_text(errors="replace")
    assert "maybe_inject_fault" in log and "most recent call first" in log  # faulthandler dump
    assert _workers_of(str(run)) == {}


# ------------------------------------------------------------------------------------------------
# Bad input: one line, exit 2, nothing started


BAD = [
    (["--nnodes", "0", CFG], "--nnodes must be >= 1"),
    (["--nproc-per-node", "0", CFG], "--nproc-per-node must be >= 1"),
    (["--nnodes", "2", "--node-rank", "2", "--coordinator", "127.0.0.1:5555", CFG],
     "--node-rank must be in 0..1"),
    (["--node-rank", "-1", CFG], "--node-rank must be in 0..0"),
    (["--nnodes", "2", CFG], "--coordinator HOST:PORT is required"),
    (["--coordinator", "localhost", CFG], "expected HOST:PORT"),
    (["--coordinator", "10.0.0.1:99999", CFG], "port must be 1-65535"),
    (["--coordinator", "10.0.0.1:abc", CFG], "port must be 1-65535"),
    (["--coordinator", "::1:5555", CFG], "IPv6 addresses in brackets"),
    (["--cpu-devices-per-proc", "0", CFG], "--cpu-devices-per-proc must be >= 1"),
    (["--nnodes", "two", CFG], "invalid int value"),
    (["missing.yaml"], "config file not found: missing.yaml"),
    ([], "missing CONFIG"),
    (["--auto", "--nproc-per-node", "2", CFG], "--auto starts one worker"),
    (["--auto", "--coordinator", "10.0.0.1:5555", CFG], "drop --coordinator"),
    (["--hang-timeout", "0", CFG], "--hang-timeout must be > 0"),
    (["--max-restarts", "-1", CFG], "--max-restarts must be >= 0"),
    ([CFG, "--cpu-devices", "2"], "--cpu-devices-per-proc to the launcher"),
    (["--coordinator", "192.0.2.1:5555", CFG], "must run on the coordinator host"),
]


@pytest.mark.parametrize("argv,message", BAD, ids=[m for _, m in BAD])
def test_bad_launcher_input(argv, message, capsys):
    assert launch.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert message in err, err


def test_bad_environment_variable(capsys, monkeypatch):
    monkeypatch.setenv("JAXRL_LAUNCH_NPROC_PER_NODE", "lots")
    assert launch.main([CFG]) == 2
    assert "JAXRL_LAUNCH_NPROC_PER_NODE='lots'" in capsys.readouterr().err


def test_coordinator_port_in_use(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert launch.main(["--coordinator", f"127.0.0.1:{port}", CFG]) == 2
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is already in use" in err and len(err.splitlines()) == 1


def test_environment_variables_stand_in_for_flags():
    cfg = launch.parse_args([CFG], {"JAXRL_LAUNCH_NNODES": "3", "JAXRL_LAUNCH_NODE_RANK": "2",
                                    "JAXRL_LAUNCH_NPROC_PER_NODE": "4",
                                    "JAXRL_LAUNCH_COORDINATOR": "10.1.2.3:7000"})
    assert (cfg.nnodes, cfg.node_rank, cfg.nproc_per_node, cfg.coordinator) == (
        3, 2, 4, "10.1.2.3:7000")
    flags_win = launch.parse_args(["--nnodes", "1", CFG], {"JAXRL_LAUNCH_NNODES": "3"})
    assert flags_win.nnodes == 1


def test_plan_assigns_global_ranks_and_devices():
    cfg = launch.parse_args(["--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2",
                             "--coordinator", "[::1]:6000", CFG, "--set", "seed=1"], {})
    workers = launch.plan(cfg, base_env={})
    assert [w.global_rank for w in workers] == [2, 3]
    assert [w.env["JAXRL_LOCAL_DEVICE_IDS"] for w in workers] == ["0", "1"]  # 1 GPU each
    assert all(w.env["JAXRL_COORDINATOR"] == "[::1]:6000" for w in workers)
    assert all(w.env["JAXRL_NUM_PROCESSES"] == "4" for w in workers)
    assert all(w.cmd[-1] == "--no-progress" for w in workers)  # only rank 0 shows progress
    auto = launch.plan(launch.parse_args(["--auto", CFG], {}), base_env={})
    assert auto[0].env["JAXRL_AUTO"] == "1" and "JAXRL_PROCESS_ID" not in auto[0].env


def test_dry_run_prints_every_worker_and_starts_nothing(tmp_path, capsys):
    assert launch.main(["--dry-run", "--nproc-per-node", "2", "--cpu-devices-per-proc", "3",
                        "--log-dir", str(tmp_path / "logs"), CFG]) == 0
    out = capsys.readouterr()
    assert "node 0/1, 2 process(es) here" in out.err
    assert "JAXRL_PROCESS_ID=0" in out.out and "JAXRL_PROCESS_ID=1" in out.out
    assert out.out.count("--xla_force_host_platform_device_count=3") == 2
    assert "jaxrl_dist.train configs/cartpole.yaml" in out.out
    assert not (tmp_path / "logs").exists()


@pytest.mark.timeout(200)
@pytest.mark.slow
def test_nodes_that_disagree_on_the_job_size_fail_fast(tmp_path):
    """Node 1 thinks the job has 4 processes, node 0 thinks 2: JAX's coordinator rejects the
    extra task; both launchers fail (no hang) and name the failing rank."""
    port = launch.pick_free_port()
    start = time.monotonic()
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "jaxrl_dist.launch", "--nnodes", "2", "--node-rank", str(r),
         "--nproc-per-node", str(r + 1), "--cpu-devices-per-proc", "1", "--init-timeout", "4",
         "--coordinator", f"127.0.0.1:{port}", "--log-dir", str(tmp_path / f"l{r}"), CFG,
         "--run-dir", str(tmp_path / "run")],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    outs = [n.communicate(timeout=150) for n in nodes]
    assert all(n.returncode != 0 for n in nodes)
    assert all("FAILED: node" in err for _, err in outs)
    assert time.monotonic() - start < 90
    assert _workers_of(str(tmp_path / "run")) == {}


HELPERS_SCRIPT = """
import json, sys
import jax, numpy as np
from jaxrl_dist import distributed

with distributed.distributed_context():
    rank = distributed.process_index()
    out = {
        "rank": rank,
        "count": distributed.process_count(),
        "main": distributed.is_main_process(),
        "sum": int(distributed.allreduce_sum(np.int32(rank + 1))),
        "from_0": int(distributed.broadcast(np.int32(100 + rank))),
        "gathered": distributed.allgather(np.int32(rank)).tolist(),
        "devices": jax.device_count(),
    }
    distributed.barrier("done")
    print(json.dumps(out), flush=True)
    if rank == 1 and sys.argv[1] == "fail":
        raise RuntimeError("boom in rank 1")
"""


@pytest.mark.timeout(200)
@pytest.mark.parametrize("mode", ["ok", "fail"])
def test_distributed_context_and_process_helpers(tmp_path, mode):
    """A custom script (no launcher) joins a 2-process job from JAXRL_* variables; the helpers
    agree; an exception inside the context exits 1 at once, not at JAX's shutdown barrier."""
    script = tmp_path / "script.py"
    script.write_text(HELPERS_SCRIPT)
    port = launch.pick_free_port()
    procs = [subprocess.Popen(
        [sys.executable, str(script), mode],
        env=_env(JAXRL_COORDINATOR=f"127.0.0.1:{port}", JAXRL_NUM_PROCESSES="2",
                 JAXRL_PROCESS_ID=str(r), JAX_PLATFORMS="cpu",
                 XLA_FLAGS="--xla_force_host_platform_device_count=2"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    start = time.monotonic()
    outs = [p.communicate(timeout=120) for p in procs]
    results = [json.loads(o[0].strip().splitlines()[-1]) for o in outs]
    for r, res in enumerate(results):
        assert res == {"rank": r, "count": 2, "main": r == 0, "sum": 3, "from_0": 100,
                       "gathered": [0, 1], "devices": 4}
    if mode == "ok":
        assert [p.returncode for p in procs] == [0, 0]
    else:
        assert procs[1].returncode == 1 and "boom in rank 1" in outs[1][1]
        assert time.monotonic() - start < 60
