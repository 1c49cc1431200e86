"""python -m jaxrl_dist.launch [options] [--] CONFIG [trainer args...]

Start and supervise the worker processes of one node of a multi-process JAX job; each worker is
``python -m jaxrl_dist.train`` and joins through ``jax.distributed.initialize``.

Examples:
  # one machine, 2 processes x 2 simulated CPU devices
  python -m jaxrl_dist.launch --nproc-per-node 2 --cpu-devices-per-proc 2 configs/cartpole.yaml
  # two hosts, run on each (node rank 0 hosts the coordinator on 10.0.0.1:5555)
  python -m jaxrl_dist.launch --nnodes 2 --node-rank 0 --coordinator 10.0.0.1:5555 cfg.yaml
  # under SLURM / Open MPI / a TPU pod / Kubernetes: one launcher per process, auto-discovery
  srun python -m jaxrl_dist.launch --auto configs/cartpole.yaml

Every option can also be given as an environment variable, e.g. --nproc-per-node as
JAXRL_LAUNCH_NPROC_PER_NODE (flags win).

Imports point one way, supervise -> worker -> plan -> cli -> jaxrl_dist.protocol, and never
reach jax or the trainer: the launcher must set XLA flags before any worker imports jax, and
parsing and planning stay pure so they are tested without starting processes.
"""

from jaxrl_dist.launch.cli import (_OPTIONS, DESCRIPTION, LaunchConfig, LaunchError,
                                   build_parser, env_name, parse_args, parse_host_port)
from jaxrl_dist.launch.plan import (WorkerSpec, banner, check_port_free, describe, is_loopback,
                                    pick_free_port, plan)
from jaxrl_dist.launch.supervise import Outcome, Supervisor, main
from jaxrl_dist.launch.worker import LOG_TAIL_LINES, Worker

__all__ = ["DESCRIPTION", "LOG_TAIL_LINES", "LaunchConfig", "LaunchError", "Outcome",
           "Supervisor", "Worker", "WorkerSpec", "banner", "build_parser", "check_port_free",
           "describe", "env_name", "is_loopback", "main", "parse_args", "parse_host_port",
           "pick_free_port", "plan"]
