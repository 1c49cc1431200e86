"""argv + ``JAXRL_LAUNCH_*`` environment -> a frozen :class:`LaunchConfig`.

Pure and jax-free, so every bad input becomes a one-line :class:`LaunchError` (exit 2) before
a port is probed or a process started, and the rules are testable without spawning anything.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from jaxrl_dist.errors import UserError
from jaxrl_dist.protocol import launcher_env_name

# The --help description (kept word for word from the single-module launcher).
DESCRIPTION = """\
Start and supervise the worker processes of one node of a multi-process JAX job. Each worker
runs ``python -m jaxrl_dist.train CONFIG [trainer args...]`` and joins the job through
``jax.distributed.initialize`` (coordinator address, number of processes and process id come in
its environment; see ``jaxrl_dist/distributed.py``). JAX's coordination service and XLA's
collectives do the rest; this launcher only computes the plan, starts workers and watches them."""


class LaunchError(UserError):
    """Bad launcher input; the message is one line for the user."""


@dataclass(frozen=True)
class LaunchConfig:
    nnodes: int
    nproc_per_node: int
    node_rank: int
    coordinator_host: str | None
    coordinator_port: int | None
    cpu_devices_per_proc: int | None
    cpus_per_proc: int | None
    auto: bool
    init_timeout: int
    heartbeat_timeout: int
    hang_timeout: float
    kill_grace: float
    stop_grace: float
    log_dir: Path
    all_ranks: bool
    dry_run: bool
    max_restarts: int
    config: str
    trainer_args: tuple[str, ...]

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def coordinator(self) -> str | None:
        if self.coordinator_host is None:
            return None
        host = self.coordinator_host
        return f"[{host}]:{self.coordinator_port}" if ":" in host else (
            f"{host}:{self.coordinator_port}")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise LaunchError(message)


# (flag, env var, type, default, help)
_OPTIONS = [
    ("--nnodes", int, 1, "number of nodes (hosts) in the job"),
    ("--nproc-per-node", int, 1, "worker processes on this node (one per GPU, typically)"),
    ("--node-rank", int, 0, "this node's rank, 0 .. nnodes-1 (node 0 hosts the coordinator)"),
    ("--coordinator", str, None, "HOST:PORT of the coordinator on node 0 (required if nnodes>1; "
                                 "single node: 127.0.0.1 and a free port)"),
    ("--cpu-devices-per-proc", int, None, "simulate N CPU devices per worker (XLA flag)"),
    ("--cpus-per-proc", int, None, "pin local rank r to host cores [r*N, (r+1)*N) "
                                   "(benchmarks: no core contention between workers)"),
    ("--init-timeout", int, 60, "seconds for all processes to join the job"),
    ("--heartbeat-timeout", int, 10, "seconds before JAX declares a silent peer dead"),
    ("--hang-timeout", float, 300.0, "seconds without a completed update before a worker "
                                     "counts as stuck (its stacks are dumped)"),
    ("--kill-grace", float, 5.0, "seconds between SIGTERM and SIGKILL when tearing down"),
    ("--stop-grace", float, 30.0, "seconds workers get to stop after a forwarded signal"),
    ("--log-dir", str, None, "per-rank logs (default RUN_DIR/logs or runs/logs/TIME)"),
    ("--max-restarts", int, 0, "restart all local workers (with --resume) up to N times; not "
                               "after bad input, divergence or a failed write (exit 2, 65, 74)"),
]


env_name = launcher_env_name  # the launcher's own inputs: JAXRL_LAUNCH_*, never a worker's


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m jaxrl_dist.launch", add_help=True,
                     description=DESCRIPTION,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, tp, default, text in _OPTIONS:
        parser.add_argument(flag, type=tp, default=None,
                            help=f"{text} [env {env_name(flag)}; default {default}]")
    parser.add_argument("--auto", action="store_true", default=None,
                        help="let jax.distributed.initialize() discover SLURM / Open MPI / "
                             "TPU pod / Kubernetes (one launcher per process) "
                             "[env JAXRL_LAUNCH_AUTO]")
    parser.add_argument("--all-ranks", action="store_true", default=None,
                        help="show every rank's output on the console, prefixed")
    parser.add_argument("--dry-run", action="store_true", default=None,
                        help="print each worker's rank, devices, environment and command; "
                             "start nothing")
    parser.add_argument("rest", nargs=argparse.REMAINDER,
                        help="CONFIG [trainer args...] (passed to python -m jaxrl_dist.train)")
    return parser


def parse_host_port(text: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' -> (host, port); raises LaunchError with a fix."""
    hint = "expected HOST:PORT, e.g. 10.0.0.1:5555 or [::1]:5555"
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
    else:
        host, sep, port = text.rpartition(":")
    if not sep or not host or not port:
        raise LaunchError(f"--coordinator {text!r}: {hint}")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise LaunchError(f"--coordinator {text!r}: port must be 1-65535; {hint}")
    if ":" in host and not text.startswith("["):
        raise LaunchError(f"--coordinator {text!r}: put IPv6 addresses in brackets; {hint}")
    return host, int(port)


def _typed_env(flag: str, tp: type, environ: dict) -> object:
    raw = environ.get(env_name(flag))
    if raw in (None, ""):
        return None
    try:
        return tp(raw)
    except ValueError:
        raise LaunchError(f"{env_name(flag)}={raw!r}: expected {tp.__name__}") from None


def parse_args(argv: Sequence[str] | None = None, environ: dict | None = None) -> LaunchConfig:
    """argv + environment -> LaunchConfig, or LaunchError naming what is wrong."""
    environ = dict(os.environ if environ is None else environ)
    ns = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    values = {}
    for flag, tp, default, _ in _OPTIONS:
        name = flag.lstrip("-").replace("-", "_")
        value = getattr(ns, name)
        values[name] = value if value is not None else _typed_env(flag, tp, environ)
        if values[name] is None:
            values[name] = default
    flags = {}
    for name in ("auto", "all_ranks", "dry_run"):
        value = getattr(ns, name)
        flags[name] = bool(value) if value is not None else (
            environ.get(env_name("--" + name.replace("_", "-")), "") in ("1", "true", "yes"))

    rest = list(ns.rest)
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest:
        raise LaunchError("missing CONFIG: give a YAML file, e.g. configs/cartpole.yaml")
    config, trainer_args = rest[0], tuple(rest[1:])
    if config.startswith("-"):
        raise LaunchError(f"unknown launcher option {config!r} (trainer options go after CONFIG)")
    if not Path(config).is_file():
        raise LaunchError(f"config file not found: {config}")

    nnodes, nproc, node_rank = values["nnodes"], values["nproc_per_node"], values["node_rank"]
    if nnodes < 1:
        raise LaunchError(f"--nnodes must be >= 1, got {nnodes}")
    if nproc < 1:
        raise LaunchError(f"--nproc-per-node must be >= 1, got {nproc}")
    if not 0 <= node_rank < nnodes:
        raise LaunchError(f"--node-rank must be in 0..{nnodes - 1} for --nnodes {nnodes}, "
                          f"got {node_rank}")
    cpu = values["cpu_devices_per_proc"]
    if cpu is not None and cpu < 1:
        raise LaunchError(f"--cpu-devices-per-proc must be >= 1, got {cpu}")
    pin = values["cpus_per_proc"]
    if pin is not None and not 1 <= pin * nproc <= os.cpu_count():
        raise LaunchError(f"--cpus-per-proc {pin} x --nproc-per-node {nproc} needs "
                          f"{pin * nproc} cores; this host has {os.cpu_count()}")
    for name in ("init_timeout", "heartbeat_timeout", "hang_timeout", "kill_grace", "stop_grace"):
        if values[name] <= 0:
            raise LaunchError(f"--{name.replace('_', '-')} must be > 0, got {values[name]}")
    if values["max_restarts"] < 0:
        raise LaunchError(f"--max-restarts must be >= 0, got {values['max_restarts']}")
    for arg in trainer_args:
        if arg.startswith("--cpu-devices"):
            raise LaunchError("pass --cpu-devices-per-proc to the launcher, not --cpu-devices "
                              "to the trainer")

    host = port = None
    if flags["auto"]:
        if nproc != 1:
            raise LaunchError("--auto starts one worker per launcher (the cluster starts one "
                              "launcher per process); drop --nproc-per-node")
        if values["coordinator"]:
            raise LaunchError("--auto discovers the coordinator; drop --coordinator")
    elif values["coordinator"]:
        host, port = parse_host_port(values["coordinator"])
    elif nnodes > 1:
        raise LaunchError("--coordinator HOST:PORT is required when --nnodes > 1 (the address "
                          "of node 0, reachable from every node)")
    else:
        host = "127.0.0.1"  # port picked at launch time

    log_dir = values["log_dir"]
    if log_dir is None:
        run_dir = _trainer_run_dir(trainer_args)
        log_dir = (Path(run_dir) / "logs" if run_dir
                   else Path("runs") / "logs" / time.strftime("%Y%m%d-%H%M%S"))
    return LaunchConfig(
        nnodes=nnodes, nproc_per_node=nproc, node_rank=node_rank, coordinator_host=host,
        coordinator_port=port, cpu_devices_per_proc=cpu, cpus_per_proc=pin, auto=flags["auto"],
        init_timeout=values["init_timeout"], heartbeat_timeout=values["heartbeat_timeout"],
        hang_timeout=values["hang_timeout"], kill_grace=values["kill_grace"],
        stop_grace=values["stop_grace"], log_dir=Path(log_dir), all_ranks=flags["all_ranks"],
        dry_run=flags["dry_run"], max_restarts=values["max_restarts"], config=config,
        trainer_args=trainer_args)


def _trainer_run_dir(args: Sequence[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg == "--run-dir" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--run-dir="):
            return arg.split("=", 1)[1]
    return None

