"""The launcher <-> worker contract, jax-free: what a launcher (ours, srun, mpirun, a user's
script) tells a worker through its environment, the XLA environment, and the exit codes.

Two namespaces that never overlap: the LAUNCHER reads its own options from ``JAXRL_LAUNCH_*``
(``--nproc-per-node`` <- ``JAXRL_LAUNCH_NPROC_PER_NODE``); a WORKER reads only the variables of
:class:`WorkerEnv`. So a launcher setting left in a shell never makes a plain
``python -m jaxrl_dist.train`` think it is part of a job.
"""

from __future__ import annotations

from jaxrl_dist.errors import UserError

import dataclasses
import os
from typing import Mapping

LAUNCH_PREFIX = "JAXRL_LAUNCH_"

EXIT_BAD_INPUT = 2     # one-line error: a flag, config value, address, path or checkpoint
EXIT_DIVERGED = 65     # stopped: too many consecutive updates had non-finite values
EXIT_STORAGE = 74      # a write of run files or checkpoints failed (disk full, permissions)
EXIT_PREEMPTED = 75    # stopped on SIGTERM at an agreed update, state saved: resumable
# Failures a restart cannot mend: the launcher's --max-restarts does not retry them.
EXIT_NEEDS_A_PERSON = (EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_STORAGE)

# Work around jaxlib 0.10.2's CPU runtime idling forever on small machines in long programs.
CPU_SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


class ContractError(UserError):
    """The worker variables are incomplete or malformed (one line for the user)."""


def launcher_env_name(flag: str) -> str:
    """``--nproc-per-node`` -> ``JAXRL_LAUNCH_NPROC_PER_NODE``."""
    return LAUNCH_PREFIX + flag.lstrip("-").upper().replace("-", "_")


@dataclasses.dataclass(frozen=True)
class WorkerEnv:
    """A worker's place in the job. ``coordinator``/``num_processes``/``process_id`` go
    together (explicit job); ``auto`` lets ``jax.distributed.initialize()`` discover
    SLURM / Open MPI / TPU pods / Kubernetes instead. The rest is optional."""

    coordinator: str | None = None       # JAXRL_COORDINATOR   host:port of process 0
    num_processes: int | None = None     # JAXRL_NUM_PROCESSES
    process_id: int | None = None        # JAXRL_PROCESS_ID    global rank
    auto: bool = False                   # JAXRL_AUTO=1
    local_rank: int | None = None        # JAXRL_LOCAL_RANK    for users' scripts (torchrun's)
    local_world_size: int | None = None  # JAXRL_LOCAL_WORLD_SIZE
    local_device_ids: str | None = None  # JAXRL_LOCAL_DEVICE_IDS, e.g. "3": one GPU a process
    bind_address: str | None = None      # JAXRL_BIND_ADDRESS  coordinator's listen address
    init_timeout: int | None = None      # JAXRL_INIT_TIMEOUT  seconds
    heartbeat_timeout: int | None = None  # JAXRL_HEARTBEAT_TIMEOUT seconds
    error_file: str | None = None        # JAXRL_ERROR_FILE    traceback for the launcher
    heartbeat_file: str | None = None    # JAXRL_HEARTBEAT_FILE touched after each update

    @staticmethod
    def var(field: str) -> str:
        return "JAXRL_" + field.upper()

    @property
    def in_job(self) -> bool:
        return self.auto or self.coordinator is not None

    def to_env(self) -> dict[str, str]:
        env = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or value is False:
                continue
            env[self.var(f.name)] = "1" if value is True else str(value)
        return env

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "WorkerEnv":
        values = {}
        for f in dataclasses.fields(cls):
            raw = environ.get(cls.var(f.name), "")
            if raw == "":
                continue
            if f.name == "auto":
                values[f.name] = raw in ("1", "true", "yes")
            elif "int" in str(f.type):
                try:
                    values[f.name] = int(raw)
                except ValueError:
                    raise ContractError(f"environment variable {cls.var(f.name)} must be an "
                                        f"integer, got {raw!r}") from None
            else:
                values[f.name] = raw
        worker = cls(**values)
        explicit = ("coordinator", "num_processes", "process_id")
        given = [name for name in explicit if getattr(worker, name) is not None]
        if given and len(given) < 3 and not worker.auto:
            missing = [cls.var(name) for name in explicit if name not in given]
            raise ContractError(
                f"{', '.join(cls.var(n) for n in given)} set but {', '.join(missing)} not: these "
                f"are worker variables a launcher sets; unset them to train in one process, or "
                f"start the job with python -m jaxrl_dist.launch (whose own settings are "
                f"{LAUNCH_PREFIX}*)")
        return worker


def set_xla_env(cpu_devices: int | None, environ=os.environ) -> None:
    """Flags jax reads at import: device count, CPU-only platform, hang workaround."""
    flags = environ.get("XLA_FLAGS", "")
    if cpu_devices is not None:
        flags = " ".join(f for f in flags.split()
                         if not f.startswith("--xla_force_host_platform_device_count"))
        flags += f" --xla_force_host_platform_device_count={cpu_devices}"
        environ["JAX_PLATFORMS"] = "cpu"
    if "concurrency_optimized_scheduler" not in flags:
        flags += " " + CPU_SCHEDULER_FLAG
    environ["XLA_FLAGS"] = flags.strip()
