"""LaunchConfig -> one :class:`WorkerSpec` per local process, plus the banner and port checks.

Pure (the port helpers aside), so ``--dry-run`` prints exactly what would start, and tests check
ranks, environments and commands without starting a process. The worker side of every variable
is :class:`jaxrl_dist.protocol.WorkerEnv`, never spelled out here.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from jaxrl_dist.launch.cli import LaunchConfig, LaunchError
from jaxrl_dist.protocol import WorkerEnv, set_xla_env


@dataclass(frozen=True)
class WorkerSpec:
    global_rank: int
    local_rank: int
    env: dict[str, str]     # variables added to the launcher's environment
    cmd: tuple[str, ...]
    log_path: Path
    error_path: Path
    heartbeat_path: Path
    cpus: tuple[int, ...] | None = None   # host cores this worker is pinned to


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def plan(cfg: LaunchConfig, base_env: dict | None = None, resume: bool = False
         ) -> list[WorkerSpec]:
    base_env = dict(os.environ if base_env is None else base_env)
    workers = []
    for local_rank in range(cfg.nproc_per_node):
        rank = cfg.node_rank * cfg.nproc_per_node + local_rank
        one_device_each = (cfg.cpu_devices_per_proc is None and cfg.nproc_per_node > 1
                           and not cfg.auto)
        worker = WorkerEnv(
            coordinator=None if cfg.auto else cfg.coordinator,
            num_processes=None if cfg.auto else cfg.world_size,
            process_id=None if cfg.auto else rank,
            auto=cfg.auto, local_rank=local_rank, local_world_size=cfg.nproc_per_node,
            local_device_ids=str(local_rank) if one_device_each else None,
            init_timeout=cfg.init_timeout, heartbeat_timeout=cfg.heartbeat_timeout,
            error_file=str(cfg.log_dir / f"rank{rank}.error"),
            heartbeat_file=str(cfg.log_dir / f"rank{rank}.heartbeat"))
        env = {**worker.to_env(), "PYTHONUNBUFFERED": "1"}
        xla = {"XLA_FLAGS": base_env.get("XLA_FLAGS", "")}
        set_xla_env(cfg.cpu_devices_per_proc, xla)  # the same flag logic as the trainer CLI
        env.update(xla)
        args = list(cfg.trainer_args)
        if resume:   # a restart continues from the newest checkpoint: the attempt before
            args = without_resume_from(args)   # it saved past the --resume-from step
        if resume and "--resume" not in args:
            args.append("--resume")
        if rank != 0 and "--no-progress" not in args:
            args.append("--no-progress")
        cmd = (sys.executable, "-m", "jaxrl_dist.train", cfg.config, *args)
        cpus = None
        if cfg.cpus_per_proc:
            cpus = tuple(range(local_rank * cfg.cpus_per_proc,
                               (local_rank + 1) * cfg.cpus_per_proc))
        workers.append(WorkerSpec(rank, local_rank, env, cmd,
                                  cfg.log_dir / f"rank{rank}.log",
                                  cfg.log_dir / f"rank{rank}.error",
                                  cfg.log_dir / f"rank{rank}.heartbeat", cpus))
    return workers


def without_resume_from(args: list[str]) -> list[str]:
    """The trainer's arguments less ``--resume-from STEP`` (or ``--resume-from=STEP``)."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--resume-from":
            skip = True
        elif not arg.startswith("--resume-from="):
            out.append(arg)
    return out


def banner(cfg: LaunchConfig) -> str:
    where = "auto-discovered (--auto)" if cfg.auto else cfg.coordinator
    devices = (f"{cfg.cpu_devices_per_proc} CPU device(s)/process" if cfg.cpu_devices_per_proc
               else "all local devices" if cfg.nproc_per_node == 1
               else "one local device per process")
    return (f"jaxrl_dist.launch: node {cfg.node_rank}/{cfg.nnodes}, "
            f"{cfg.nproc_per_node} process(es) here, {cfg.world_size if not cfg.auto else '?'} "
            f"in total, {devices}; coordinator {where}; logs {cfg.log_dir}")



def describe(specs: list[WorkerSpec]) -> str:
    """What ``--dry-run`` prints: each worker's rank, added environment, cores and command."""
    lines = []
    for spec in specs:
        lines.append(f"rank {spec.global_rank} (local {spec.local_rank}):")
        lines += [f"  {key}={value}" for key, value in sorted(spec.env.items())]
        if spec.cpus:
            lines.append(f"  cpus: {','.join(map(str, spec.cpus))}")
        lines.append(f"  command: {shlex.join(spec.cmd)}")
        lines.append(f"  log: {spec.log_path}")
    return "\n".join(lines)


# Preflight: the coordinator's port, checked on node 0 before any worker exists.


def pick_free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_port_free(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == 98:  # EADDRINUSE
                raise LaunchError(f"coordinator port {port} on {host} is already in use; choose "
                                  f"another --coordinator port") from None
            raise LaunchError(f"cannot listen on coordinator {host}:{port} ({e.strerror}); node "
                              f"0 must run on the coordinator host") from None

