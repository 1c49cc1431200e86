"""How a run's programs are compiled: a persistent XLA compilation cache, so each is compiled
once per machine, the options of the programs that run once, and the update program's random
numbers lowered without loops (fewer kernels for XLA:CPU to compile), and every other program's
with a loop XLA runs without copies.

JAX keys each compiled program by its HLO, compile options, XLA flags, backend and devices, so a
hit is exactly the program a fresh compile would give (results stay bitwise the same). On GPUs
and TPUs the key is the same on every process: process 0 writes entries and every process reads
them. On CPUs each process's key differs (its compile options and device hash name its own
device), so each process writes its own entries (:func:`_write_from_every_process`); without
that, process 1 of every multi-process CPU job recompiled everything on every run. The
directory is fixed by the first compile in a process, so it is set before anything is compiled.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from pathlib import Path
from typing import Any

import jax

from jaxrl_dist.errors import ConfigError

_EVENTS = {"/jax/compilation_cache/cache_hits": "hits",
           "/jax/compilation_cache/cache_misses": "misses"}
_counts = {"hits": 0, "misses": 0}
_listening = False


def default_dir() -> Path:
    if os.environ.get("JAXRL_DIST_CACHE"):
        return Path(os.environ["JAXRL_DIST_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jaxrl_dist" / "xla"


def _count(event: str, **_: object) -> None:
    if event in _EVENTS:
        _counts[_EVENTS[event]] += 1


def enable(setting: str | None) -> Path | None:
    """Point JAX at the cache (``setting``: a directory, 'auto' or None = off); returns the
    directory in use. The first directory set in a process stays (JAX reads it once), and one
    the user gave JAX directly (JAX_COMPILATION_CACHE_DIR) wins over ours."""
    global _listening
    if not _listening:
        jax.monitoring.register_event_listener(_count)
        _listening = True
    current = jax.config.jax_compilation_cache_dir
    if setting is None:
        return Path(current) if current else None
    path = default_dir() if setting == "auto" else Path(setting).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"compile_cache: cannot create {path} ({e.strerror}); pass a "
                          f"writable directory or --set compile_cache=null") from None
    _write_from_every_process()
    if current:
        return Path(current)
    jax.config.update("jax_compilation_cache_dir", str(path))
    # cache every program of a run (the default skips those compiled in under a second)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


# The signatures of JAX's private ``compiler._cache_write`` that the patch below was read from
# and tested on (jax 0.10.2: with host callbacks; 0.11.x: without). Any other JAX keeps its own.
_CACHE_WRITE_SIGNATURES = {
    ("cache_key", "compile_time_secs", "module_name", "backend", "executable", "host_callbacks"),
    ("cache_key", "compile_time_secs", "module_name", "backend", "executable"),
}
_PATCHED_JAX = ((0, 10, 2), (0, 12))   # [first, last) versions the patch is applied to


def _jax_version() -> tuple[int, ...]:
    return tuple(int(p) for p in jax.__version__.split(".")[:3] if p.isdigit())


def _write_from_every_process() -> bool:
    """Let processes other than 0 write their CPU programs to the cache too; returns whether
    the patch is in place. JAX writes from process 0 only (to spare shared filesystems
    concurrent writes of one key); on CPUs the processes' keys differ (measured with jax 0.10.2:
    compile options and device hash), so the others never hit and recompiled every program of
    every run: 4.2 s vs 1.3 s for rank 1 vs rank 0 of a 2-process CartPole DQN start. Their
    entries have keys of their own, so processes do not write one file (were two keys ever
    equal, the cost would be a cache warning and a miss). Uses a JAX internal: patched only on
    the versions in ``_PATCHED_JAX`` and where its signature is one read here, so another JAX
    keeps its own behaviour (slower multi-process CPU starts, nothing else)."""
    lo, hi = _PATCHED_JAX
    if not lo <= _jax_version() < hi:
        return False
    try:
        import inspect

        from jax._src import compilation_cache as jax_cache
        from jax._src import compiler
        from jax._src import distributed as jax_distributed
        original = compiler._cache_write
        names = tuple(inspect.signature(original).parameters)
    except (ImportError, AttributeError, TypeError, ValueError):
        return False
    if getattr(original, "_jaxrl_dist", False):
        return True
    if names not in _CACHE_WRITE_SIGNATURES:
        return False

    def cache_write(*args):
        a = dict(zip(names, args))
        if (jax_distributed.global_state.process_id == 0 or a["backend"].platform != "cpu"
                or a.get("host_callbacks")
                or a["compile_time_secs"] < jax.config.jax_persistent_cache_min_compile_time_secs):
            return original(*args)
        try:
            jax_cache.put_executable_and_time(a["cache_key"], a["module_name"], a["executable"],
                                              a["backend"], int(a["compile_time_secs"]))
        except Exception as e:   # as JAX's own write: a warning unless told to raise
            should_raise = getattr(compiler, "_should_raise_persistent_cache_error", None)
            if should_raise is not None and should_raise(e):
                raise
            warnings.warn(f"Error writing persistent compilation cache entry for "
                          f"'{a['module_name']}': {type(e).__name__}: {e}")

    cache_write._jaxrl_dist = True
    compiler._cache_write = cache_write
    return True


def counts() -> dict[str, int]:
    """Persistent-cache hits and misses of this process so far."""
    return dict(_counts)


# The niceness of a compile that runs beside training (the highest: the lowest priority)
BACKGROUND_NICE = 19


def compile_in_background() -> int:
    """Lower the CPU priority of the calling thread and of XLA's compile helpers (the native
    threads of this process that Python did not start and that bear the process's own name;
    XLA's executors name theirs, e.g. ``tf_XLAEigen``), so that a compile running beside
    training takes what the training threads leave idle rather than a share of their cores.
    XLA compiles a program's kernels in parallel on those helpers: CartPole PPO's evaluation,
    compiled beside its first calls, held both cores of a 2-core VM and made those calls
    ~1.6x slower (cold steady rate 292k -> 305k env steps/s with this, medians of 5
    alternated pairs, Zen 5, 2026-11-30). Linux only (elsewhere nothing changes); returns how
    many threads it lowered. An unprivileged process cannot raise a priority back: the
    helpers compile at this priority for the rest of the process, which costs nothing where
    no other thread wants the CPU. Nothing changes in a multi-process job: the distributed
    runtime's unnamed threads would be lowered too, and a SIGKILLed worker's teardown would
    partly run on lowered threads on a busy machine, while the launcher names the failed rank
    by when each rank exits."""
    task = Path("/proc/self/task")
    if not task.is_dir() or jax.process_count() > 1:
        return 0
    me, main = threading.get_native_id(), os.getpid()
    started_by_python = {t.native_id for t in threading.enumerate()}
    try:
        name = (task / str(main) / "comm").read_text().strip()
        tids = [int(t.name) for t in task.iterdir()]
    except OSError:
        return 0
    lowered = 0
    for tid in tids:
        if tid != me and (tid == main or tid in started_by_python):
            continue
        try:
            if tid != me and (task / str(tid) / "comm").read_text().strip() != name:
                continue
            os.setpriority(os.PRIO_PROCESS, tid, max(BACKGROUND_NICE,
                                                     os.getpriority(os.PRIO_PROCESS, tid)))
        except OSError:   # the thread ended meanwhile
            continue
        lowered += 1
    return lowered


def run_once_options(devices) -> dict[str, int] | None:
    """XLA compile options for programs whose speed does not matter (init runs once, the
    evaluation at the end and every ``eval_every``): on CPU, backend optimisation level 1, which
    cuts their LLVM codegen by 35-45 %. Same HLO; bitwise the same results as level 2 for init
    and evaluation on CartPole (tested on 2 devices) and for Brax inverted pendulum's init (2026-
    11-25). NOT in general: level 1 changed the Brax update program's output bits, and level 0
    changed its init's, so the update keeps the default level (level 1 also made it ~13-15 %
    slower) and nothing compiles at level 0."""
    return ({"xla_backend_optimization_level": 1}
            if all(d.platform == "cpu" for d in devices) else None)


# XLA's default command buffer kinds (jaxlib 0.10-0.11) plus loops and conditionals: with
# WHILE and CONDITIONAL a scan's trips run inside the CUDA graph (conditional nodes), so an
# update of thousands of small kernel launches becomes one graph launch.
GPU_LOOP_GRAPHS = "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,DYNAMIC_SLICE_FUSION,WHILE,CONDITIONAL"


def speed_options(devices, command_buffers: str = "auto") -> dict[str, str] | None:
    """XLA compile options for the programs whose speed is the run's (the update; on host
    environments the learn step): on GPUs, ``gpu_command_buffers`` (config) as XLA's
    ``xla_gpu_enable_command_buffer``; ``auto`` graphs whole loops (small batches are
    launch-bound there: one kernel launch per op per scan trip). None (the programs as they
    were) on CPUs and TPUs, or with ``xla`` (XLA's defaults). XLA itself drops the loop kinds
    where the CUDA toolkit or driver cannot run conditional graph nodes."""
    if command_buffers == "xla" or not all(d.platform == "gpu" for d in devices):
        return None
    return {"xla_gpu_enable_command_buffer": GPU_LOOP_GRAPHS if command_buffers == "auto"
            else ""}


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))   # threefry2x32's, alternating by trip


def _threefry_fenced(key1: Any, key2: Any, x1: Any, x2: Any) -> tuple[Any, Any]:
    """JAX's threefry2x32 (5 trips of 4 rounds, each trip then adding key words) with the
    same uint32 arithmetic, unrolled into ONE kernel per call site whose two words XLA cannot
    fuse into their consumers (an optimization barrier after them).

    JAX's own CPU lowering is a 5-trip while loop: several kernels to compile per site and,
    per trip, a kernel per word (each computing all four rounds), a copy of the carry and the
    loop's own bookkeeping, ~20 thunks a site at run time. JAX's unrolled lowering (other
    backends; :func:`unrolled_threefry`) is one kernel, but XLA fuses it into each consumer of
    its words, so a site with several consumers is compiled and computed several times: the
    off-policy learners' updates compiled ~30 % slower unrolled, and jaxlib 0.11.2 did not
    finish compiling SAC's or CartPole's evaluation that way (docs/usage.md). Fenced: SAC's
    update on Pendulum 259 -> 223 kernels, its init and evaluation on jax 0.11.2 59 -> 42 and
    37 -> 29, compile and run time the same within noise (2026-11-30, Zen 5)."""
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax._src.random import threefry2x32 as threefry

    ks = (key1, key2, key1 ^ key2 ^ np.uint32(0x1BD11BDA))
    v = [x1 + key1, x2 + key2]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            v = threefry.apply_round(v, np.uint32(r))
        v = [v[0] + ks[(i + 1) % 3], v[1] + ks[(i + 2) % 3] + np.uint32(i + 1)]
    words = lax.optimization_barrier(jnp.stack(jnp.broadcast_arrays(*v)))
    return words[0], words[1]


def install_fenced_threefry() -> bool:
    """Lower jax.random's hash on CPU with :func:`_threefry_fenced` from now on (in this
    process): the same bits as JAX's own lowering (tested). Programs lowered inside
    :func:`unrolled_threefry` still take JAX's unrolled lowering. Called before a run traces
    anything; False (JAX's own lowering stays) if JAX's internals moved."""
    try:
        from jax._src.interpreters import mlir
        from jax._src.random import threefry2x32 as threefry
        threefry.apply_round   # noqa: B018 - the round function the hash applies
        primitive = threefry.threefry2x32_p
    except (ImportError, AttributeError):
        return False
    mlir.register_lowering(primitive, mlir.lower_fun(_threefry_fenced, multiple_results=True),
                           platform="cpu", inline=False)
    return True


def unroll_init() -> bool:
    """Whether init lowers its threefry unrolled (programs.py): on jax 0.10 CartPole PPO's
    init is then 36 kernels, not 44 with the fenced hash (what keeps its programs within
    rejax's kernel count), with the same bits. jaxlib 0.11.2's XLA did not finish compiling
    init and the evaluation unrolled (CartPole's evaluation still compiling after minutes, one
    core busy; 2026-11-30), so from jax 0.11 init takes the fenced hash. The evaluation takes
    it on every jax: unrolled it had 2 fewer kernels but compiled ~40 % longer (CartPole 0.8
    -> 0.45 s of CPU, DQN 0.9 -> 0.5, PQN 0.83 -> 0.51, Pendulum SAC 0.67 -> 0.55; Zen 5,
    2026-11-30), and a cold run compiles it beside its first calls."""
    return _jax_version() < (0, 11)


@contextlib.contextmanager
def unrolled_threefry():
    """Programs LOWERED inside draw jax.random's threefry hash unrolled on CPU, as JAX does on
    every other backend: the update program, whose per-environment and per-step keys (what
    makes it topology-invariant) were ~20 % of its kernels.

    On CPU JAX lowers each hash as a 5-trip while loop (every run lowers
    :func:`_threefry_fenced` instead: one kernel a call site, its words materialized once).
    Unrolled, each hash is fused into its consumers: PPO's update program compiles ~25 % faster
    (260 -> 209 kernels); init unrolled has fewer kernels (:func:`unroll_init`); the
    off-policy continuous learners' updates, whose many sampling sites XLA copies unrolled
    into each consumer, take the fenced hash
    (``Agent.unroll_threefry``; jaxlib 0.11.2 did not finish compiling SAC's unrolled). The
    same uint32 arithmetic, so the same bits (tested).
    Uses JAX internals (jax 0.10); if they moved, nothing changes but compile time.
    """
    try:
        from jax._src.interpreters import mlir
        from jax._src.random import threefry2x32 as threefry
        table = mlir._platform_specific_lowerings["cpu"]
        primitive, unrolled = threefry.threefry2x32_p, threefry._threefry2x32_lowering_rule
    except (ImportError, AttributeError, KeyError):
        unrolled = None
    if unrolled is None:
        yield
        return
    before = table.get(primitive)
    mlir.register_lowering(primitive, unrolled, platform="cpu", inline=False)
    try:
        yield
    finally:
        if before is None:
            table.pop(primitive, None)
        else:
            table[primitive] = before
