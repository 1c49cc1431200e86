"""The command line of :mod:`jaxrl_dist.export` (its docstring is the manual)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from jaxrl_dist.errors import UserError

EXIT_BAD_INPUT = 2
EXTRA = "pip install 'jaxrl_dist[export]'"


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="python -m jaxrl_dist.export",
                            description="Export a run's trained policy as ONNX (+ StableHLO), "
                                        "checked against the policy itself.")
    parser.add_argument("run_dir", help="a run directory (with checkpoints/)")
    parser.add_argument("-o", "--out", help="ONNX file to write (replaced if it exists); "
                        "default RUN_DIR/policy.onnx, never replaced")
    parser.add_argument("--opset", type=int, default=17,
                        help="ONNX opset (default 17; 11 writes LayerNorm as primitive ops)")
    parser.add_argument("--member", type=int, help="which member of a population run")
    parser.add_argument("--step", type=int, help="checkpoint step (default: the latest)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    missing = [m for m in ("onnx", "onnxruntime") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"error: exporting needs {' and '.join(missing)}: {EXTRA}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # The reference policy runs on the CPU: an accelerator's TF32 matrix products would miss
    # the 1e-5 parity tolerance against onnxruntime's float32 ones.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from jaxrl_dist.export.exporter import export_run

    try:
        result = export_run(args.run_dir, args.out, opset=args.opset, member=args.member,
                            step=args.step)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    steps = (f" over {result.sequence_length}-step sequences (carries included)"
             if result.sequence_length else "")
    print(f"wrote {result.onnx_path} (opset {result.opset}) and {result.stablehlo_path}; "
          f"parity with the trained policy at batch 1, 2, 7{steps} on {result.observations} "
          f"observations: largest |difference| {result.max_diff:.3g}")
    return 0


if __name__ == "__main__":
    code = main()
    # as jaxrl_dist.train: skip teardown, so orbax threads left by a failed restore print no
    # tracebacks after the one-line error
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
