"""Start, watch and stop the workers: the launcher's only side effects.

One dead member leaves the rest blocked in a collective, so the first failure (exit, signal,
clean exit while siblings run on, or no progress for --hang-timeout) stops the siblings and is
reported by rank, pid and log tail. Signals are forwarded; workers die with the launcher.
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO, Sequence

from jaxrl_dist.launch.cli import LaunchConfig, LaunchError, parse_args
from jaxrl_dist.launch.plan import (WorkerSpec, banner, check_port_free, describe, is_loopback,
                                    pick_free_port, plan)
from jaxrl_dist.launch.worker import Worker, describe_exit, log_tail
from jaxrl_dist.protocol import EXIT_BAD_INPUT, EXIT_NEEDS_A_PERSON, EXIT_PREEMPTED

# Seconds the other ranks get to exit after a first failure before the root cause is named.
FAILURE_SETTLE_S = 3.0


def root_cause(failures: list[Worker]) -> Worker:
    """The failed worker to name: the earliest recorded failure, a worker that the distributed
    runtime ended for a sibling's failure never before one that failed on its own. A rank
    killed by a signal leaves no error file and is known only when reaped, which can lag its
    siblings' aborts on a busy machine (CI's extended tier once named the sibling that aborted
    after rank 0 was killed with -9)."""
    return min(failures, key=lambda w: (w.failed_for_a_peer(), w.failed_at()))


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
        first_failure = None
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
            # 2. Failures: the earliest recorded error is the root cause. The rank that raised
            # may exit AFTER a sibling whose collective it broke (closing its environments
            # takes time), so the others get FAILURE_SETTLE_S to exit before one is named.
            failures = [w for w in finished if w.exit_code != 0]
            if failures:
                first_failure = first_failure or now
                if len(finished) < len(workers) and now - first_failure < FAILURE_SETTLE_S:
                    continue
                root = root_cause(failures)
                return Outcome(self._exit_code(root.exit_code), root,
                               describe_exit(root.exit_code))
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
        error = log_tail(s.error_path, 60)
        if error:
            lines.append(f"--- error file {s.error_path} ---")
            lines += error
        lines.append(f"--- last lines of {s.log_path} ---")
        lines += log_tail(s.log_path)
        self.say("\n  ".join(lines))


def main(argv: Sequence[str] | None = None) -> int:
    """0, 2 on bad input, 65 when training diverged, 74 when a write failed, 75 when stopped
    resumably (schedulers requeue on it), else the failed rank's code (128+N for signal N; 1
    for a hang or an early clean exit). 2, 65 and 74 are never restarted."""
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
        print(describe(plan(cfg)))
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
        if outcome.code in EXIT_NEEDS_A_PERSON:   # bad input, divergence, a failed write
            supervisor.say(f"not restarting: exit code {outcome.code} is a failure a restart "
                           f"would repeat (see the error above)")
            return outcome.code
        restarts += 1
        supervisor.say(f"restarting all local workers ({restarts}/{cfg.max_restarts}), "
                       f"resuming from the latest checkpoint")

