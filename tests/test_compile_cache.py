"""The persistent compilation cache: a second run compiles nothing and computes the same."""

import os
import re
from pathlib import Path

import jax
import pytest

from helpers import TINY, at_training_flags
from jaxrl_dist import compile_cache
from jaxrl_dist import config as config_lib
from jaxrl_dist.errors import ConfigError
from jaxrl_dist.trainer import train


@pytest.mark.timeout(300)
def test_second_run_reads_every_program_from_the_cache(tmp_path):
    config = config_lib.from_dict({**TINY, "seed": 11})   # a seed no other test compiles with
    first = train(config, tmp_path / "a", devices=jax.devices()[:2], progress=False)
    second = train(config, tmp_path / "b", devices=jax.devices()[:2], progress=False)
    cache = Path(os.environ["JAXRL_DIST_CACHE"])
    assert second["compile_cache"]["dir"] == str(cache) and any(cache.iterdir())
    assert second["compile_cache"]["misses"] == 0, second["compile_cache"]
    assert second["compile_cache"]["hits"] >= 3, second["compile_cache"]  # init, update, eval
    assert second["param_fingerprint"] == first["param_fingerprint"]


def test_unwritable_cache_dir_is_one_line_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="compile_cache: cannot create .*compile_cache=null"):
        compile_cache.enable(str(blocker / "xla"))


def test_auto_follows_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("JAXRL_DIST_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compile_cache.default_dir() == tmp_path / "jaxrl_dist" / "xla"
    monkeypatch.setenv("JAXRL_DIST_CACHE", str(tmp_path / "mine"))
    assert compile_cache.default_dir() == tmp_path / "mine"


@pytest.mark.timeout(300)
def test_run_once_programs_compile_cheaper_to_bitwise_the_same_results():
    """init and evaluation compile at the run-once options: the same state and returns as at
    XLA's default level, on 2 devices (what the trainer relies on to use them), checked at the
    trainer's flags (the suite's -O0 is a third level: tests/at_training_flags.py)."""
    result = at_training_flags("run_once_level")
    assert result["options"] == {"xla_backend_optimization_level": 1}
    assert result["init"] == []
    for name, (default, once) in result["evaluation"].items():
        assert default == once, name


def test_unrolled_threefry_draws_bitwise_the_same_numbers():
    """The update program is lowered with jax.random's hash unrolled on CPU (fewer kernels to
    compile): every kind of draw our programs make gives the same bits as JAX's own rolled CPU
    lowering, which is back once the block ends."""
    def draws(key):   # a fresh function per call: a new trace, so a new lowering
        k1, k2 = jax.random.split(key)
        keys = jax.vmap(jax.random.fold_in, (None, 0))(k1, jax.numpy.arange(6))
        return (keys, jax.random.split(keys[3], 4), jax.random.uniform(k2, (5,)),
                jax.random.normal(key, (3, 2)), jax.random.permutation(k1, 128),
                jax.random.categorical(k2, jax.numpy.zeros((4, 3))), jax.random.bits(k1, (7,)))

    def lower():
        return jax.jit(lambda k: draws(k)).lower(key)

    key = jax.random.PRNGKey(3)
    rolled = lower()
    with compile_cache.unrolled_threefry():
        unrolled = lower()
    after = lower()
    # it took effect (the lowering before it: JAX's loop, or ours once a run installed it)
    assert "while" not in unrolled.as_text() and unrolled.as_text() != rolled.as_text()
    assert after.as_text() == rolled.as_text()   # and ended
    for a, b in zip(jax.tree.leaves(rolled.compile()(key)),
                    jax.tree.leaves(unrolled.compile()(key))):
        assert a.dtype == b.dtype and (a == b).all()


def _hash_kernels(compiled) -> tuple[int, bool]:
    """(kernels that compute threefry rounds (their rotations shift left), whether the
    program has a loop)."""
    text = compiled.as_text()
    bodies = {m.group(1): m.group(2)
              for m in re.finditer(r"\n(%[\w.-]+) [^\n]*\{\n(.*?)\n\}", text, re.S)}
    calls = re.findall(r" fusion\([^\n]*?calls=(%[\w.-]+)", text)
    return sum(" shift-left(" in bodies.get(c, "") for c in calls), " while(" in text


def test_fenced_threefry_draws_bitwise_the_same_numbers_in_one_kernel_a_site():
    """The CPU hash every run lowers (compile_cache.install_fenced_threefry): the bits of
    JAX's own lowering for every kind of draw; each hash ONE kernel, without JAX's loop, and
    not fused into (so not recomputed in) each consumer of its words as JAX's unrolled one."""
    from jax._src.interpreters import mlir
    from jax._src.random import threefry2x32 as threefry
    table = mlir._platform_specific_lowerings["cpu"]
    before = table.get(threefry.threefry2x32_p)

    def draws(key):
        k1, k2 = jax.random.split(key)
        keys = jax.vmap(jax.random.fold_in, (None, 0))(k1, jax.numpy.arange(6))
        return (keys, jax.random.split(keys[3], 4), jax.random.uniform(k2, (5,)),
                jax.random.normal(key, (256, 6)), jax.random.randint(k1, (256,), 0, 1000),
                jax.random.permutation(k1, 128), jax.random.bits(k1, (7, 3)))

    def two_consumers(key):   # one hash, its words read by two kernels
        x = jax.random.normal(key, (256, 6))
        return x * 2.0, jax.numpy.exp(x).sum(axis=0)

    def compile_both(rule=None):
        if rule is not None:
            mlir.register_lowering(threefry.threefry2x32_p, rule, platform="cpu")
        else:
            assert compile_cache.install_fenced_threefry()
        return [jax.jit(lambda k: f(k)).lower(key).compile() for f in (draws, two_consumers)]

    key = jax.random.PRNGKey(5)
    try:
        theirs, theirs_two = compile_both(threefry._threefry2x32_cpu_lowering_rule)
        _, unrolled_two = compile_both(threefry._threefry2x32_lowering_rule)
        ours, ours_two = compile_both()
    finally:
        if before is not None:
            table[threefry.threefry2x32_p] = before
    for a, b in zip(jax.tree.leaves(theirs(key)), jax.tree.leaves(ours(key))):
        assert a.dtype == b.dtype and (a == b).all()
    for a, b in zip(theirs_two(key), ours_two(key)):
        assert (a == b).all()
    assert _hash_kernels(theirs_two)[1] and not _hash_kernels(ours)[1]   # JAX's loop; none
    assert _hash_kernels(unrolled_two)[0] >= 2   # fused into (each) consumer
    assert _hash_kernels(ours_two) == (1, False)


def test_every_process_writes_its_cpu_entries_on_the_supported_jax():
    """The patch of JAX's private cache write is in place on every JAX we support (CI runs this
    on jax 0.10.2 and the newest allowed 0.11.x); outside that range JAX keeps its own."""
    from jax._src import compiler
    lo, hi = compile_cache._PATCHED_JAX
    assert lo <= compile_cache._jax_version() < hi, jax.__version__
    assert compile_cache._write_from_every_process()
    assert getattr(compiler._cache_write, "_jaxrl_dist", False)


def test_gpu_command_buffers_are_options_this_jaxlib_takes_and_nothing_elsewhere():
    """``gpu_command_buffers`` becomes XLA's ``xla_gpu_enable_command_buffer`` on GPUs only;
    every value it sets is one the installed jaxlib parses (XLA:CPU takes and ignores the GPU
    options, so a kind renamed or removed in a jaxlib raises here: CI runs this on jax 0.10.2 and
    on the newest allowed, the GPU machines' 0.11.x), and a loop compiled with them computes
    what it computes without."""
    from types import SimpleNamespace

    gpus, cpus = [SimpleNamespace(platform="gpu")] * 2, jax.devices()[:1]
    assert compile_cache.speed_options(gpus, "auto") == {
        "xla_gpu_enable_command_buffer": compile_cache.GPU_LOOP_GRAPHS}
    assert {"WHILE", "CONDITIONAL"} <= set(compile_cache.GPU_LOOP_GRAPHS.split(","))
    assert compile_cache.speed_options(gpus, "disabled") == {"xla_gpu_enable_command_buffer": ""}
    assert compile_cache.speed_options(gpus, "xla") is None
    assert compile_cache.speed_options([*gpus, *cpus], "auto") is None   # not all GPUs
    for value in config_lib.GPU_COMMAND_BUFFERS:
        assert compile_cache.speed_options(cpus, value) is None

    def loop(x):
        return jax.lax.fori_loop(0, 7, lambda i, y: jax.lax.cond(i % 2 == 0, jax.numpy.sin,
                                                                  jax.numpy.cos, y) * 1.5, x)

    x = jax.numpy.linspace(0.0, 1.0, 16)
    lowered = jax.jit(loop).lower(x)
    plain = lowered.compile()(x)
    for value in ("auto", "disabled"):
        options = compile_cache.speed_options(gpus, value)
        assert (lowered.compile(options)(x) == plain).all()
    with pytest.raises(Exception, match="not a valid enum value"):   # the check has teeth
        lowered.compile({"xla_gpu_enable_command_buffer": "FUSION,NO_SUCH_KIND"})


@pytest.mark.timeout(300)
@pytest.mark.parametrize("env", ["CartPole-v1", "gymnasium:CartPole-v1"])
def test_the_update_compiles_with_the_speed_options_and_the_summary_says_so(env, tmp_path,
                                                                            monkeypatch):
    """Where ``speed_options`` gives options (GPUs), the update program (the fused driver's) or
    the learn step (the host driver's) compiles with them and ``summary.json``'s xla_options
    records them; here they are GPU options on a CPU, which XLA:CPU ignores: the parameters are
    those of a run without them. Without them (every CPU run) xla_options is empty."""
    sets = [f"env={env}", "num_envs=4", "total_timesteps=384", "updates_per_call=3",
            "ppo.num_steps=16", "ppo.update_epochs=1", "ppo.num_minibatches=2",
            "eval_episodes=2", "compile_cache=null"]
    config = config_lib.load("configs/cartpole.yaml", sets)
    plain = train(config, tmp_path / "plain", devices=jax.devices()[:1], progress=False)
    assert plain["xla_options"] == {}

    fast = {"xla_gpu_enable_command_buffer": compile_cache.GPU_LOOP_GRAPHS}
    monkeypatch.setattr(compile_cache, "speed_options", lambda devices, value: dict(fast))
    compiled = []
    real = jax.stages.Lowered.compile

    def spy(self, compiler_options=None, **kwargs):
        compiled.append((self.as_text().split("\n", 1)[0], compiler_options))
        return real(self, compiler_options, **kwargs)

    monkeypatch.setattr(jax.stages.Lowered, "compile", spy)
    summary = train(config, tmp_path / "fast", devices=jax.devices()[:1], progress=False)
    assert summary["xla_options"] == fast
    program = "@jit_update" if env == "CartPole-v1" else "@jit_learn_next"
    assert [options for name, options in compiled if program in name] == [fast], compiled
    assert summary["param_fingerprint"] == plain["param_fingerprint"]


def test_init_draws_unrolled_where_this_jax_compiles_it_and_the_evaluation_fenced(monkeypatch):
    """On jax 0.10 init lowers jax.random's hash unrolled (fewer kernels) and computes exactly
    what the fenced hash computes; from jax 0.11 it takes the fenced hash (jaxlib 0.11.2 did
    not finish compiling it unrolled). The evaluation takes the fenced hash on every jax (it
    compiles faster so), its episodes' loop its only one."""
    import numpy as np

    from jaxrl_dist import sharding
    from jaxrl_dist import sizes as sizes_lib
    from jaxrl_dist.envs import make_env
    from jaxrl_dist.programs import make_learner

    assert compile_cache.install_fenced_threefry()   # as every run does first
    config = config_lib.from_dict({**TINY, "eval_episodes": 3})
    layout = sharding.make_layout(jax.devices()[:1])
    key = jax.random.PRNGKey(7)

    def programs():   # a learner of its own: JAX caches a program's lowering, not the rule's
        learner = make_learner(config, sizes_lib.derive_sizes(config, 1),
                               make_env(config.env), layout)
        init = learner.init_program.lower(key, {}, ())
        state = init.compile()(key, {}, ())
        evaluate = learner.evaluate.lower(state.train, key, ())
        return init.as_text(), evaluate.as_text(), state

    unrolled = compile_cache.unroll_init()
    assert unrolled == (compile_cache._jax_version() < (0, 11))
    init_text, eval_text, state = programs()
    monkeypatch.setattr(compile_cache, "unroll_init", lambda: False)
    fenced_init, _, fenced_state = programs()
    barrier = "stablehlo.optimization_barrier"
    assert barrier in fenced_init and (barrier in init_text) is not unrolled
    assert barrier in eval_text and eval_text.count("stablehlo.while") == 1
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(fenced_state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_seed_key_is_jaxs_prngkey_built_on_the_host():
    """keys.seed_key stands in for jax.random.PRNGKey (whose two small programs a cold start
    compiled on its critical path): the same words, dtype and placement on this JAX."""
    import numpy as np

    from jaxrl_dist import keys
    for seed in (0, 1, 7, 12345, 2**31 - 1, 2**31, 2**32 - 1, 2**32 + 5):
        ours, theirs = keys.seed_key(seed), jax.random.PRNGKey(seed)
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, seed
        assert np.array_equal(np.asarray(ours), np.asarray(theirs)), seed
        assert ours.sharding == theirs.sharding and ours.committed == theirs.committed


def test_building_a_run_compiles_nothing_before_its_programs(monkeypatch):
    """Setup's environment, networks and seed key are built without running jnp ops one by
    one: each would be an XLA compile of its own on the cold start's critical path (CartPole:
    7 of them, ~0.2 s on a 2-core VM, before the run's own programs began to trace)."""
    from jax._src import compiler

    from jaxrl_dist import keys, sharding
    from jaxrl_dist import sizes as sizes_lib
    from jaxrl_dist.envs import from_config
    from jaxrl_dist.envs.gymnax import import_gymnax
    from jaxrl_dist.programs import make_learner
    import_gymnax()   # gymnax's own import runs an op: not ours
    compiled = []
    original = compiler.compile_or_get_cached
    monkeypatch.setattr(compiler, "compile_or_get_cached",
                        lambda backend, module, *a, **k: compiled.append(
                            str(module.operation.attributes["sym_name"]))
                        or original(backend, module, *a, **k))
    for path in ("configs/cartpole.yaml", "configs/cartpole_dqn.yaml",
                 "configs/pendulum_sac.yaml"):
        config = config_lib.load(Path(__file__).parent.parent / path)
        layout = sharding.make_layout(jax.devices()[:1])
        sizes = sizes_lib.derive_sizes(config, layout.data_size)
        make_learner(config, sizes, from_config(config, None, None), layout)
        keys.seed_key(config.seed)
    assert compiled == []


_NICENESS = r"""
import json, os, threading
import jax, jax.numpy as jnp
from jaxrl_dist import compile_cache
jax.jit(lambda x: jnp.tanh(x) * 2).lower(jnp.ones(3)).compile()   # XLA's helpers exist now
idle = threading.Event()
bystander = threading.Thread(target=idle.wait, daemon=True)   # a thread of our own
bystander.start()
caller, called = [], threading.Event()
def run():
    caller.append(threading.get_native_id())
    caller.append(compile_cache.compile_in_background())
    called.set()
    idle.wait()   # alive while its priority is read
worker = threading.Thread(target=run, daemon=True)
worker.start(); called.wait(60)
def field(tid, name):
    path = f"/proc/self/task/{tid}/" + name
    return open(path).read().strip() if name == "comm" else int(
        open(path).read().rsplit(")", 1)[1].split()[16])
tids = [int(t) for t in os.listdir("/proc/self/task")]
print(json.dumps({"caller": caller[0], "lowered": caller[1], "main": os.getpid(),
                  "bystander": bystander.native_id,
                  "threads": {t: [field(t, "comm"), field(t, "stat")] for t in tids}}))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux's /proc only")
def test_a_background_compile_lowers_its_thread_and_xlas_helpers_not_training():
    """compile_in_background (the evaluation's compile beside training): the calling thread
    and XLA's unnamed compile helpers drop to the lowest priority; the main thread, Python's
    other threads and XLA's named executors (which run the programs) keep theirs. In a
    subprocess: priorities cannot be raised back."""
    import json
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", _NICENESS], capture_output=True, text=True,
                         timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    threads = {int(t): v for t, v in got["threads"].items()}
    nice = {t: v[1] for t, v in threads.items()}
    main_name = threads[got["main"]][0]
    helpers = [t for t, (name, _) in threads.items()
               if name == main_name and t not in (got["main"], got["bystander"], got["caller"])]
    assert got["lowered"] >= 2 and len(helpers) >= 1 and nice[got["caller"]] == 19
    assert all(nice[t] == compile_cache.BACKGROUND_NICE for t in helpers)
    assert nice[got["main"]] == 0 and nice[got["bystander"]] == 0
    executors = [t for t, (name, _) in threads.items() if name != main_name]
    assert executors and all(nice[t] == 0 for t in executors)   # tf_XLAEigen: the programs
