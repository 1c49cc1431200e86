"""python -m jaxrl_dist.train CONFIG [--set KEY=VALUE ...] [--run-dir DIR] [--cpu-devices N]
                          [--resume | --resume-from STEP]

Train the config's algorithm (``algo:``, PPO by default) on every device this process (and,
when launched by ``jaxrl_dist.launch``, every process of the job) can see. Bad input ends with
one line on stderr and exit code 2; divergence (too many non-finite updates) with 65; a failed
write (disk full, permissions) with 74; a stop on SIGTERM, saved and resumable, with 75.

This module imports jax only after parsing the command line: ``--cpu-devices`` works by setting
XLA_FLAGS, which jax reads once when it starts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from jaxrl_dist.config import ConfigError
from jaxrl_dist.errors import UserError

from jaxrl_dist.protocol import (CPU_SCHEDULER_FLAG, EXIT_BAD_INPUT,  # noqa: F401 (API)
                                 ContractError, set_xla_env)


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse prints usage + message; we print one line
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m jaxrl_dist.train",
                           description="Data-parallel RL (PPO by default) on one global JAX mesh.")
    parser.add_argument("config", nargs="?", help="YAML config, e.g. configs/cartpole.yaml")
    parser.add_argument("--set", dest="overrides", action="extend", nargs="+", default=[],
                        metavar="KEY=VALUE", help="override config keys (dotted for nesting), "
                        "e.g. --set num_envs=8 ppo.learning_rate=1e-3; repeatable")
    parser.add_argument("--run-dir", help="where run files go (default runs/ENV-seedS-TIME)")
    parser.add_argument("--cpu-devices", type=int, metavar="N",
                        help="make this process see N CPU devices (simulates N accelerators)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --run-dir from its newest intact checkpoint "
                             "(damaged ones are named and set aside, never deleted)")
    parser.add_argument("--resume-from", type=int, metavar="STEP",
                        help="continue from checkpoint STEP (implies --resume); newer "
                             "checkpoints are set aside")
    parser.add_argument("--no-progress", action="store_true", help="no live progress line")
    parser.add_argument("--help-config", action="store_true",
                        help="list every config key with its default and meaning")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # `--set K=V CONFIG`: the greedy --set took the config file; give it back
    if args.config is None and args.overrides and "=" not in args.overrides[-1]:
        args.config = args.overrides.pop()
    if args.help_config:
        from jaxrl_dist.config import describe
        try:
            for key, default, text in describe():
                print(f"{key:<32} {default:<14} {text}")
            sys.stdout.flush()
        except BrokenPipeError:   # `--help-config | head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if args.config is None:
        build_parser().error("missing CONFIG (a YAML file such as configs/cartpole.yaml)")
    if args.cpu_devices is not None and args.cpu_devices < 1:
        build_parser().error(f"--cpu-devices must be >= 1, got {args.cpu_devices}")
    if args.resume_from is not None and args.resume_from < 0:
        build_parser().error(f"--resume-from must be >= 0, got {args.resume_from}")

    if args.cpu_devices is not None and "jax" in sys.modules:
        return _bad_input("--cpu-devices must be applied before jax is imported; "
                          "run the CLI in a fresh process")
    set_xla_env(args.cpu_devices)   # before the config's plugins, which may import jax

    from jaxrl_dist import config as config_lib
    try:
        config = config_lib.load(args.config, args.overrides)
    except ConfigError as e:
        return _bad_input(e)

    from jaxrl_dist.protocol import WorkerEnv
    try:
        WorkerEnv.from_env(os.environ)  # before jax: a half-set job is a one-line error
    except ContractError as e:
        return _bad_input(e)
    from jaxrl_dist import distributed
    from jaxrl_dist.trainer import train

    try:
        summary = train(config, args.run_dir, resume=args.resume, resume_from=args.resume_from,
                        progress=not args.no_progress)
    except UserError as e:   # bad input, divergence, a failed write: one line, its own code
        if distributed.process_count() > 1:  # leave without waiting at the shutdown barrier
            print(f"error: {e}", file=sys.stderr, flush=True)
            distributed.fail_fast(SystemExit(e.exit_code))
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    except BaseException as e:  # noqa: BLE001 - a failing worker must not wait at the barrier
        distributed.write_error_file(e)
        if distributed.process_count() > 1:
            distributed.fail_fast(e)
        raise
    # Every rank prints its summary line (non-zero ranks into their own log under the launcher),
    # so replica agreement can be checked from the outside.
    keys = ("status", "env_steps", "final_return", "eval_return", "solved_at_env_steps", "sps",
            "compile_time_s", "compile_programs_s", "compile_cache", "wall_time_s", "time_s",
            "param_norm",
            "param_fingerprint", "periodic", "replicate_learn", "replicate_act", "run_dir",
            "nonfinite_skipped", "env_nonfinite_resets")
    print(json.dumps({"rank": distributed.process_index(), **{k: summary[k] for k in keys}}),
          flush=True)
    if distributed.is_main_process():
        print(final_line(summary), flush=True)
    distributed.shutdown()
    return distributed.EXIT_PREEMPTED if summary["status"] == "preempted" else 0


def _num(x: float, scale: float | None = None) -> str:
    """Returns as read: 500.0, -83.0; small scales (MiniGrid's 0-1) keep their digits."""
    return f"{x:.1f}" if abs(x if scale is None else scale) >= 10 else f"{x:.3f}"


def final_line(summary: dict) -> str:
    """What a person reads last: the final policy's evaluation and whether that solves it."""
    if summary["eval_return"] is None:
        return f"{summary['env']}: {summary['status']} (no final evaluation)"
    # a run stopped between evaluations (preempted, diverged) reports its last one as such
    steps, evaluated = summary["env_steps"], summary.get("eval_env_steps", summary["env_steps"])
    which = "final evaluation" if evaluated == steps else "last evaluation"
    at = f"{evaluated:,} env steps" + (
        "" if evaluated == steps else f" ({summary['status']} at {steps:,})")
    if "population" in summary:
        agg, solved = summary["population"]["eval_return"], summary["solved_return"]
        line = (f"{summary['env']}: {agg['n']} members, {which} return mean "
                f"{_num(agg['mean'])} [95% CI {_num(agg['mean_ci'][0])}, {_num(agg['mean_ci'][1])}]"
                f", IQM {_num(agg['iqm'])}, min {_num(agg['min'])} over {summary['eval_episodes']} "
                f"episodes each after {at}")
        if solved is not None:
            verdict = "ALL SOLVED" if agg["solved"] == agg["n"] else "NOT all solved"
            line += f" -> {agg['solved']}/{agg['n']} >= {solved:g}: {verdict}"
        return line
    mean, std = summary["eval_return"], summary["eval_return_std"]
    won = summary.get("eval_win_rate")   # environments with an outcome of their own (SMAX)
    line = (f"{summary['env']}: {which} return {_num(mean)} ± {_num(std, mean)}"
            f"{'' if won is None else f', win rate {won:.0%}'} over "
            f"{summary['eval_episodes']} episodes after {at}")
    solved = summary["solved_return"]
    if solved is not None:
        verdict = "SOLVED" if summary["eval_return"] >= solved else "NOT solved"
        line += f" -> {verdict} (threshold {solved:g})"
    return line


def _bad_input(error: object) -> int:
    print(f"error: {error}", file=sys.stderr, flush=True)
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    code = main()
    # Skip interpreter teardown: orbax/tensorstore worker threads left by a failed restore
    # would print their own tracebacks after our one-line error. Everything is closed by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
