"""What every bench shares: running a real command line as a subprocess (wall time, peak RSS,
its summary line), the train / launch command lines, min / median / max statistics and their
table format, the machine's description, and the tables several benches read (the shipped
configs' solved returns, the peers' runners, the XLA environment of a peer's process).

Imports nothing of the benches: every bench module imports this one.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from jaxrl_dist.protocol import CPU_SCHEDULER_FLAG

CARTPOLE = "configs/cartpole.yaml"

# config -> final evaluation return at which its task counts as solved: each config's own
# ``solved_return`` (tests/test_bench_learning.py keeps the two equal). The benches' tables and
# defaults read it from here.
SOLVED_RETURN = {
    CARTPOLE: 475.0,
    "configs/cartpole_dqn.yaml": 475.0,
    "configs/cartpole_pqn.yaml": 475.0,
    "configs/acrobot.yaml": -100.0,
    "configs/pendulum.yaml": -300.0,
    "configs/mountaincar_continuous.yaml": 90.0,
    "configs/minatar_spaceinvaders.yaml": 90.0,
}

# the repository's checkout: benches/ lives beside the package, never inside it (a wheel has
# neither benches/ nor the peers), and runs from the repository root (`python -m benches`)
ROOT = Path(__file__).resolve().parent.parent
# the peers' runners (rejax, PureJaxRL; DI-engine's scripts in peers/diengine), each run with
# its own venv's interpreter
PEERS = ROOT / "benches" / "peers"
# the peers' own venvs and sources (git-ignored), in the checkout whatever the working directory
VENVS = ROOT / ".bench"
# the environment of a peer's process: CPU, and the jaxlib 0.10.2 hang workaround
XLA_ENV = {"XLA_FLAGS": CPU_SCHEDULER_FLAG, "JAX_PLATFORMS": "cpu"}


def machine() -> dict[str, Any]:
    import jax

    cpu, flags = "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu == "unknown":
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    # A VM's model name ("AMD EPYC") hides the CPU kind; AVX-512 or not tells the two kinds
    # this project's machines come in apart (an off-policy step ~5x faster with it).
    return {"cpu": cpu, "avx512": "avx512f" in flags, "cores": os.cpu_count(),
            "python": platform.python_version(), "jax": jax.__version__,
            "platform": platform.platform()}


def describe(m: dict[str, Any]) -> str:
    """A machine() in words: the CPU, whether it has AVX-512, the cores."""
    return f"{m['cpu']}{' (AVX-512)' if m['avx512'] else ''}, {m['cores']} cores"


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env.update(extra)
    return env


def run_command(cmd: list[str], timeout: float = 1800, summary: bool = True, **env: str
                ) -> dict[str, Any]:
    """Run ``cmd``; return wall time, peak RSS of its largest process and (``summary``) its
    summary line."""
    wrapper = textwrap.dedent("""
        import json, resource, subprocess, sys, time
        t = time.perf_counter()
        p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
        wall = time.perf_counter() - t
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        print(json.dumps({"rc": p.returncode, "wall_s": wall, "peak_rss_mb": rss / 1024,
                          "stdout": p.stdout[-20000:], "stderr": p.stderr[-4000:]}))
    """)
    proc = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True,
                          timeout=timeout, env=_clean_env(**env))
    out = json.loads(proc.stdout)
    if not summary:
        if out["rc"] != 0:
            raise RuntimeError(f"benchmark command failed ({out['rc']}): {' '.join(cmd)}\n"
                               f"{out['stderr'][-2000:]}")
        return out
    summary = None
    for line in out["stdout"].splitlines():
        line = line.rsplit("\r", 1)[-1]
        if line.startswith('{"rank": 0'):
            summary = json.loads(line)
    if out["rc"] != 0 or summary is None:
        raise RuntimeError(f"benchmark command failed ({out['rc']}): {' '.join(cmd)}\n"
                           f"{out['stderr'][-2000:]}")
    out["summary"] = summary
    return out


def train_cmd(run_dir: Path, devices: int | None, config: str, sets: list[str]) -> list[str]:
    """``devices`` simulated CPU devices, or None: the machine's own accelerator."""
    cpu = ["--cpu-devices", str(devices)] if devices is not None else []
    return [sys.executable, "-m", "jaxrl_dist.train", config, *cpu,
            "--run-dir", str(run_dir), "--no-progress", *_sets(sets)]


def launch_cmd(run_dir: Path, procs: int, devices: int, config: str, sets: list[str],
               pin: int | None = None) -> list[str]:
    pin_args = ["--cpus-per-proc", str(pin)] if pin else []
    return [sys.executable, "-m", "jaxrl_dist.launch", "--nproc-per-node", str(procs),
            "--cpu-devices-per-proc", str(devices), *pin_args, config,
            "--run-dir", str(run_dir), "--no-progress", *_sets(sets)]


def _sets(sets: list[str]) -> list[str]:
    return [arg for s in sets for arg in ("--set", s)]


def stats(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values),
            "n": len(values)}


def _fmt(s: dict[str, float], digits: int = 0) -> str:
    return f"{s['median']:,.{digits}f} ({s['min']:,.{digits}f}–{s['max']:,.{digits}f})"


def repeat(label: str, make_cmd, repeats: int, **env: str) -> dict[str, Any]:
    runs = []
    for i in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            out = run_command(make_cmd(Path(tmp) / "run"), **env)
        runs.append(out)
        s = out["summary"]
        print(f"  {label} [{i + 1}/{repeats}] sps={s['sps']:,.0f} compile={s['compile_time_s']:.1f}s"
              f" wall={out['wall_s']:.1f}s", file=sys.stderr, flush=True)
    return {
        "label": label,
        "sps": stats([r["summary"]["sps"] for r in runs]),
        "compile_time_s": stats([r["summary"]["compile_time_s"] for r in runs]),
        "wall_s": stats([r["wall_s"] for r in runs]),
        "peak_rss_mb": stats([r["peak_rss_mb"] for r in runs]),
        "final_return": [r["summary"]["final_return"] for r in runs],
        "eval_return": [r["summary"].get("eval_return") for r in runs],
        "solved_at_env_steps": [r["summary"].get("solved_at_env_steps") for r in runs],
        "status": [r["summary"]["status"] for r in runs],
    }


def cold_run(args, config: str, sets: list[str], devices: int | None = None) -> dict[str, Any]:
    """One ``jaxrl_dist.train`` run of ``config`` with ``sets`` and ``--set``'s, in a fresh run
    directory and compile cache (a cold run): its wall time, summary and the metrics rows of
    its calls (those with ``sps``)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = train_cmd(Path(tmp) / "run", devices, config, [*sets, *args.set])
        out = run_command(cmd, timeout=args.timeout, JAXRL_DIST_CACHE=str(Path(tmp) / "xla"))
        summary = json.loads((Path(tmp) / "run/summary.json").read_text())
        rows = [json.loads(line) for line in (Path(tmp) / "run/metrics.jsonl").open()]
    return {"wall_s": out["wall_s"], "summary": summary, "rows": [r for r in rows if "sps" in r]}


def learning_rate(rows: list[dict], after: int) -> float:
    """Env steps/s once learning runs: from the first metrics row at or past ``after`` env
    steps to the second-to-last (the last can hold the final evaluation). A row's ``time_s``
    is when its calls ended; before 2026-11-30 it was when the row was logged, after the NEXT
    call, which for host calls (they step their environments before returning) put every
    row's time a call late: timed from a row to the LAST row, that counted one call's steps
    more than its time (the host SAC rates of 2026-11-27 to 2026-11-30 ~1.3x too high)."""
    start = next(r for r in rows if r["env_steps"] >= after)
    end = rows[-2]
    return (end["env_steps"] - start["env_steps"]) / (end["time_s"] - start["time_s"])
