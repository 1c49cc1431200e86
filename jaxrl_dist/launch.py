"""python -m jaxrl_dist.launch [options] [--] CONFIG [trainer args...]

Start and supervise the worker processes of one node of a multi-process JAX job. Each worker
runs ``python -m jaxrl_dist.train CONFIG [trainer args...]`` and joins the job through
``jax.distributed.initialize`` (coordinator address, number of processes and process id come in
its environment; see ``jaxrl_dist/distributed.py``). JAX's coordination service and XLA's
collectives do the rest; this launcher only computes the plan, starts workers and watches them.

Examples:
  # one machine, 2 processes x 2 simulated CPU devices
  python -m jaxrl_dist.launch --nproc-per-node 2 --cpu-devices-per-proc 2 configs/cartpole.yaml
  # two hosts, run on each (node rank 0 hosts the coordinator on 10.0.0.1:5555)
  python -m jaxrl_dist.launch --nnodes 2 --node-rank 0 --coordinator 10.0.0.1:5555 cfg.yaml
  # under SLURM / Open MPI / a TPU pod / Kubernetes: one launcher per process, auto-discovery
  srun python -m jaxrl_dist.launch --auto configs/cartpole.yaml

Supervision: the first worker to fail (non-zero exit, signal, exit 0 while siblings run on, or no
progress for --hang-timeout seconds) stops its siblings (SIGTERM, then SIGKILL after --kill-grace)
and the launcher exits non-zero naming the rank, its pid, exit code or signal and the tail of its
log. SIGINT/SIGTERM to the launcher are forwarded to workers, which stop at an agreed update; a
second signal, or --stop-grace seconds, force-kills. Workers die with the launcher (PDEATHSIG).

Every option can also be given as an environment variable, e.g. --nproc-per-node as
JAXRL_LAUNCH_NPROC_PER_NODE (flags win).
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import ipaddress
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Sequence

from jaxrl_dist.protocol import (EXIT_BAD_INPUT, EXIT_PREEMPTED, WorkerEnv, launcher_env_name,
                                 set_xla_env)

LOG_TAIL_LINES = 25


class LaunchError(ValueError):
    """Bad launcher input; the message is one line for the user."""


# ------------------------------------------------------------------------------------------------
# Parsing: argv + environment -> frozen LaunchConfig (pure)


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
    ("--max-restarts", int, 0, "restart all local workers (with --resume) up to N times"),
]


env_name = launcher_env_name  # the launcher's own inputs: JAXRL_LAUNCH_*, never a worker's


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m jaxrl_dist.launch", add_help=True,
                     description=__doc__.split("\n\n")[1],
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


# ------------------------------------------------------------------------------------------------
# Planning: LaunchConfig -> one WorkerSpec per local process (pure)


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


def banner(cfg: LaunchConfig) -> str:
    where = "auto-discovered (--auto)" if cfg.auto else cfg.coordinator
    devices = (f"{cfg.cpu_devices_per_proc} CPU device(s)/process" if cfg.cpu_devices_per_proc
               else "all local devices" if cfg.nproc_per_node == 1
               else "one local device per process")
    return (f"jaxrl_dist.launch: node {cfg.node_rank}/{cfg.nnodes}, "
            f"{cfg.nproc_per_node} process(es) here, {cfg.world_size if not cfg.auto else '?'} "
            f"in total, {devices}; coordinator {where}; logs {cfg.log_dir}")


# ------------------------------------------------------------------------------------------------
# Preflight


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


# ------------------------------------------------------------------------------------------------
# Running and supervising


def _child_setup(cpus: tuple[int, ...] | None) -> Callable[[], None]:
    def setup() -> None:
        """In the child: die with SIGKILL when the launcher dies (never an orphan); pin."""
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PDEATHSIG
        except OSError:
            pass
        if cpus:
            os.sched_setaffinity(0, cpus)
    return setup


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        text = path.read_bytes()[-64_000:].decode(errors="replace")
    except OSError:
        return []
    out = [line.rsplit("\r", 1)[-1] for line in text.splitlines()]
    return [line for line in out if line.strip()][-lines:]


class Worker:
    """One running worker: its process, output pump and exit time."""

    def __init__(self, spec: WorkerSpec, console: IO[bytes] | None, prefix: bytes):
        self.spec = spec
        env = {**os.environ, **spec.env}
        for path in (spec.error_path, spec.heartbeat_path):
            path.unlink(missing_ok=True)
        spec.heartbeat_path.touch()
        self.log = open(spec.log_path, "ab")
        self.proc = subprocess.Popen(spec.cmd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True,
                                     preexec_fn=_child_setup(spec.cpus))
        self.exit_code: int | None = None
        self.exit_time: float | None = None
        self.hung = False
        self._pump = threading.Thread(target=self._copy, args=(console, prefix), daemon=True)
        self._pump.start()
        self._waiter = threading.Thread(target=self._wait, daemon=True)
        self._waiter.start()

    def _copy(self, console: IO[bytes] | None, prefix: bytes) -> None:
        at_line_start = True
        for chunk in iter(lambda: os.read(self.proc.stdout.fileno(), 65536), b""):
            self.log.write(chunk)
            self.log.flush()
            if console is None:
                continue
            if prefix:  # prefix every line (and every \r-redrawn progress line)
                out = bytearray()
                for byte in chunk:
                    if at_line_start:
                        out += prefix
                    out.append(byte)
                    at_line_start = byte in (10, 13)
                chunk = bytes(out)
            try:
                console.write(chunk)
                console.flush()
            except (OSError, ValueError):
                pass

    def _wait(self) -> None:
        code = self.proc.wait()
        self.exit_time = time.monotonic()
        self.exit_code = code

    @property
    def running(self) -> bool:
        return self.exit_code is None

    def signal(self, sig: int) -> None:
        if self.running:
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def seconds_without_progress(self) -> float:
        """Seconds since the last completed update; 0 until training has started."""
        try:
            if self.spec.heartbeat_path.read_text() != "train":
                return 0.0
            return time.time() - self.spec.heartbeat_path.stat().st_mtime
        except OSError:
            return 0.0

    def close(self) -> None:
        self._waiter.join(timeout=5)
        self._pump.join(timeout=5)
        self.log.close()


@dataclass
class Outcome:
    code: int
    failed: Worker | None = None
    reason: str = ""


class Supervisor:
    def __init__(self, cfg: LaunchConfig, console: IO[bytes] | None = None, poll: float = 0.1):
        self.cfg = cfg
        self.console = console if console is not None else sys.stdout.buffer
        self.poll = poll
        self.signals: list[int] = []
        self.started = time.monotonic()

    # -- signals to the launcher
    def _on_signal(self, signum, frame) -> None:
        self.signals.append(signum)

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    def say(self, text: str) -> None:
        sys.stderr.write(f"jaxrl_dist.launch: {text}\n")
        sys.stderr.flush()

    def run_once(self, specs: list[WorkerSpec]) -> Outcome:
        self.cfg.log_dir.mkdir(parents=True, exist_ok=True)
        workers = []
        for spec in specs:
            show = spec.global_rank == 0 or self.cfg.all_ranks
            prefix = f"[rank {spec.global_rank}] ".encode() if self.cfg.all_ranks else b""
            workers.append(Worker(spec, self.console if show else None, prefix))
        try:
            return self._supervise(workers)
        finally:
            self._teardown(workers)
            for w in workers:
                w.close()

    def _supervise(self, workers: list[Worker]) -> Outcome:
        forwarded_at = None
        first_clean_exit = None
        # A worker finishing while its siblings still run is normal for a moment (they leave
        # JAX's shutdown barrier together); past this it means the job lost a member.
        clean_exit_grace = max(30.0, 3.0 * self.cfg.heartbeat_timeout)
        while True:
            time.sleep(self.poll)
            now = time.monotonic()
            # 1. Signals to the launcher: forward once, force-kill on the second or after grace.
            if self.signals:
                if forwarded_at is None:
                    forwarded_at = now
                    self.say(f"received {signal.Signals(self.signals[0]).name}: asking workers "
                             f"to stop (again to force)")
                    for w in workers:
                        w.signal(signal.SIGTERM)
                elif len(self.signals) > 1 or now - forwarded_at > self.cfg.stop_grace:
                    for w in workers:
                        w.signal(signal.SIGKILL)
            finished = [w for w in workers if not w.running]
            if forwarded_at is not None:
                if len(finished) == len(workers):
                    codes = {w.exit_code for w in workers}
                    if codes <= {0, EXIT_PREEMPTED}:
                        return Outcome(EXIT_PREEMPTED if EXIT_PREEMPTED in codes else 0)
                    return Outcome(128 + self.signals[0], reason="stopped by signal")
                continue
            # 2. Failures: the earliest abnormal exit is the root cause.
            failures = sorted((w for w in finished if w.exit_code != 0),
                              key=lambda w: w.exit_time)
            if failures:
                return Outcome(self._exit_code(failures[0].exit_code), failures[0],
                               _describe_exit(failures[0].exit_code))
            if len(finished) == len(workers):
                return Outcome(0)
            if finished:
                first_clean_exit = first_clean_exit or min(w.exit_time for w in finished)
                if now - first_clean_exit > clean_exit_grace:
                    w = min(finished, key=lambda w: w.exit_time)
                    return Outcome(1, w, f"exited with code 0 while rank(s) "
                                         f"{[x.spec.global_rank for x in workers if x.running]}"
                                         f" kept running for {clean_exit_grace:.0f}s")
            # 3. Hangs: alive but no completed update for hang_timeout seconds.
            for w in workers:
                if w.running and w.seconds_without_progress() > self.cfg.hang_timeout:
                    self.say(f"rank {w.spec.global_rank} made no progress for "
                             f"{self.cfg.hang_timeout:.0f}s; dumping its stacks to its log")
                    w.signal(signal.SIGUSR1)
                    time.sleep(2.0)
                    w.hung = True
                    return Outcome(1, w, f"made no progress for {self.cfg.hang_timeout:.0f}s "
                                         f"(stuck; Python stacks are in its log)")

    @staticmethod
    def _exit_code(code: int) -> int:
        return code if code > 0 else 128 + (-code)

    def _teardown(self, workers: list[Worker]) -> None:
        alive = [w for w in workers if w.running]
        if not alive:
            return
        for w in alive:
            w.signal(signal.SIGTERM)
        deadline = time.monotonic() + self.cfg.kill_grace
        while time.monotonic() < deadline and any(w.running for w in alive):
            time.sleep(0.05)
        for w in alive:
            w.signal(signal.SIGKILL)
        for w in alive:
            try:
                w.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def report(self, outcome: Outcome) -> None:
        w = outcome.failed
        if w is None:
            return
        s = w.spec
        lines = [f"FAILED: node {self.cfg.node_rank}, rank {s.global_rank} (local rank "
                 f"{s.local_rank}, pid {w.proc.pid}) {outcome.reason}; "
                 f"{time.monotonic() - self.started:.1f}s after start; other local ranks were "
                 f"stopped"]
        error = _tail(s.error_path, 60)
        if error:
            lines.append(f"--- error file {s.error_path} ---")
            lines += error
        lines.append(f"--- last lines of {s.log_path} ---")
        lines += _tail(s.log_path)
        self.say("\n  ".join(lines))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        cfg = parse_args(argv)
        if not cfg.auto and cfg.coordinator_port is None:
            cfg = dataclasses.replace(cfg, coordinator_port=pick_free_port())
        if not cfg.auto and cfg.nnodes > 1 and is_loopback(cfg.coordinator_host):
            sys.stderr.write("jaxrl_dist.launch: warning: loopback coordinator with --nnodes > 1"
                             " only works when every node is this machine\n")
        if not cfg.auto and cfg.node_rank == 0 and not cfg.dry_run:
            check_port_free(cfg.coordinator_host, cfg.coordinator_port)
    except LaunchError as e:
        sys.stderr.write(f"jaxrl_dist.launch: error: {e}\n")
        return EXIT_BAD_INPUT

    print(banner(cfg), file=sys.stderr, flush=True)
    if cfg.dry_run:
        for spec in plan(cfg):
            print(f"rank {spec.global_rank} (local {spec.local_rank}):")
            for key, value in sorted(spec.env.items()):
                print(f"  {key}={value}")
            if spec.cpus:
                print(f"  cpus: {','.join(map(str, spec.cpus))}")
            print(f"  command: {shlex.join(spec.cmd)}")
            print(f"  log: {spec.log_path}")
        return 0

    supervisor = Supervisor(cfg)
    supervisor.install_signal_handlers()
    restarts = 0
    while True:
        outcome = supervisor.run_once(plan(cfg, resume=restarts > 0))
        if outcome.failed is None or outcome.code == 0:
            if outcome.code == EXIT_PREEMPTED:
                supervisor.say("workers stopped at an agreed update (resume with --resume)")
            return outcome.code
        supervisor.report(outcome)
        if restarts >= cfg.max_restarts or supervisor.signals:
            return outcome.code
        restarts += 1
        supervisor.say(f"restarting all local workers ({restarts}/{cfg.max_restarts}), "
                       f"resuming from the latest checkpoint")


if __name__ == "__main__":
    sys.exit(main())
