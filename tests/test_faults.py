"""Faults a long run meets, each ending in one line, a distinct exit code and nothing lost:
non-finite updates (skipped inside the program for every learner; too many in a row stop the
run), a full disk or a vanished directory while writing checkpoints, metrics or TensorBoard
(tmpfs mounted in a private mount namespace), processes with different device kinds, and the
matmul precision recorded. On 1 and 2 processes."""

import errno
import json
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import CFG, CROSSQ, SAC, TD3, TINY_ARGS, _env, run_launcher, summaries, train_cli
from jaxrl_dist import config as config_lib
from jaxrl_dist import faults, programs, reporting, sharding
from jaxrl_dist import sizes as sizes_lib
from jaxrl_dist.checkpoint import read_checkpoint
from jaxrl_dist.envs import make_env
from jaxrl_dist.programs import make_learner
from jaxrl_dist.protocol import EXIT_DIVERGED, EXIT_STORAGE

LEARNERS = {
    "ppo": dict(env="CartPole-v1", seed=1, num_envs=4, total_timesteps=4 * 16 * 4,
                ppo=dict(num_steps=16, update_epochs=1, num_minibatches=2)),
    "pqn": dict(algo="pqn", env="CartPole-v1", seed=1, num_envs=4, total_timesteps=4 * 16 * 4,
                pqn=dict(num_steps=16, update_epochs=1, num_minibatches=2)),
    "dqn": dict(algo="dqn", env="CartPole-v1", seed=1, num_envs=4, total_timesteps=4 * 4 * 20,
                dqn=dict(num_steps=4, gradient_steps=2, batch_size=16, buffer_size=64,
                         buffer_shards=2, learning_starts=16, n_step=1)),
}


def _poisoned(tree, name):
    """``tree`` (a NamedTuple) with every value of its float field ``name`` NaN."""
    return tree._replace(**{name: jnp.full_like(getattr(tree, name), jnp.nan)})


@pytest.mark.parametrize("algo", list(LEARNERS))
def test_a_non_finite_update_is_skipped_by_every_learner(algo):
    """Rewards that are NaN make the loss NaN: the update's parameters and optimizer state are
    dropped (the counter still advances) and it is counted; a finite update then learns."""
    config = config_lib.from_dict(LEARNERS[algo])
    layout = sharding.make_layout(jax.devices()[:2])
    learner = make_learner(config, sizes_lib.derive_sizes(config, 2), make_env(config.env),
                           layout)
    state = learner.init(jax.random.PRNGKey(0))
    if algo == "dqn":   # past the warm-up, with every stored reward NaN
        state, _ = learner.update(state, 2)
        state = state._replace(data=_poisoned(state.data, "reward"))
    key, key_act, key_learn = jax.random.split(state.train.key, 3)
    _, trajectory = learner.collect(state.train, state.actors, key_act)
    before = state.train._replace(key=key)
    bad = trajectory._replace(steps=_poisoned(trajectory.steps, "reward"))
    train, _, metrics = learner.learn(before, state.data, bad, key_learn)
    assert float(metrics[programs.SKIPPED]) == 1.0
    assert int(train.update) == int(before.update) + 1
    for kept, old in zip(jax.tree.leaves((train.params, train.opt_state)),
                         jax.tree.leaves((before.params, before.opt_state))):
        np.testing.assert_array_equal(np.asarray(kept), np.asarray(old))
    if algo != "dqn":   # DQN's buffer is still all NaN; the others learn from a clean batch
        train, _, metrics = learner.learn(before, state.data, trajectory, key_learn)
        assert float(metrics[programs.SKIPPED]) == 0.0
        assert not np.array_equal(np.asarray(jax.tree.leaves(train.params)[0]),
                                  np.asarray(jax.tree.leaves(before.params)[0]))


def _glitching_cartpole():
    """gymnax's CartPole, its observation NaN at the 10th step of every episode: a simulator
    inside the program returning NaN (Brax/MJX physics can)."""
    from gymnax.environments.classic_control.cartpole import CartPole

    class GlitchingCartPole(CartPole):
        def step_env(self, key, state, action, params):
            obs, state, reward, done, info = super().step_env(key, state, action, params)
            return jnp.where(state.time == 10, jnp.nan, obs), state, reward, done, info
    return GlitchingCartPole()


@pytest.mark.parametrize("algo", list(LEARNERS))
def test_an_environment_inside_the_program_returning_nan_is_named_before_a_save(algo, tmp_path):
    """The update that met it is not saved: the run stops with one line naming the
    environment, the step and what; the checkpoint left (update 0) holds finite values."""
    from jaxrl_dist.envs import EnvError
    from jaxrl_dist.trainer import train

    config = config_lib.from_dict({**LEARNERS[algo], "updates_per_call": 1,
                                   "checkpoint_every": 1, "checkpoint_minutes": 0})
    with pytest.raises(EnvError) as error:
        train(config, tmp_path / "run", env=_glitching_cartpole(), devices=jax.devices()[:2],
              progress=False)
    message = str(error.value)
    assert len(message.splitlines()) == 1 and "learning rate" not in message
    said = re.search(r": environment (\d) \(process 0\) returned a non-finite "
                     r"observation at its env step (\d+) \(update (\d+)\); "
                     r"nothing of that update was saved \(the latest checkpoint, update (\d+), "
                     r"was saved before it\)\. Repair the environment", message)
    assert said, message
    env, step, update, latest = map(int, said.groups())
    assert 0 <= env < 4 and step >= 10 and latest == update - 1
    state, meta = read_checkpoint(tmp_path / "run" / "checkpoints")
    assert meta["updates"] == latest
    for leaf in jax.tree.leaves(state):
        if np.issubdtype(np.asarray(leaf).dtype, np.floating):
            assert np.isfinite(leaf).all()


def _glitching_pendulum():
    """gymnax's Pendulum, its reward NaN at the 7th step of every episode."""
    from gymnax.environments.classic_control.pendulum import Pendulum

    class GlitchingPendulum(Pendulum):
        def step_env(self, key, state, action, params):
            obs, state, reward, done, info = super().step_env(key, state, action, params)
            return obs, state, jnp.where(state.time == 7, jnp.nan, reward), done, info
    return GlitchingPendulum()


RESET_LEARNERS = {**LEARNERS, "sac": SAC, "td3": TD3, "crossq": CROSSQ}


@pytest.mark.parametrize("algo", list(RESET_LEARNERS))
def test_with_env_nonfinite_reset_every_learner_drops_the_step_and_goes_on(algo, tmp_path):
    """``env_nonfinite=reset`` with an environment inside the program that returns NaN in
    every episode: each such step is dropped and its environment reset, the run completes
    with nothing non-finite learned or kept (no update skipped, the state finite), and the
    rows and the summary count the resets: as many on 1 device as on 2 (each environment's
    episodes are its own on any topology). (Evaluation plays the same environment, its NaN
    rewards included: not checked here.)"""
    import json

    from jaxrl_dist.trainer import train

    base = RESET_LEARNERS[algo]
    env = _glitching_cartpole() if base["env"] == "CartPole-v1" else _glitching_pendulum()
    config = config_lib.from_dict({**base, "env_nonfinite": "reset", "checkpoint_every": 0})
    counts = {}
    for devices in (2, 1) if algo in ("ppo", "dqn") else (2,):
        run = tmp_path / f"d{devices}"
        summary = train(config, run, env=env, devices=jax.devices()[:devices], progress=False)
        assert summary["status"] == "completed" and summary["nonfinite_skipped"] == 0
        rows = [json.loads(line) for line in (run / "metrics.jsonl").open()]
        counts[devices] = summary["env_nonfinite_resets"]
        assert counts[devices] == sum(r[programs.ENV_NONFINITE_RESETS] for r in rows) > 0
        state, _ = read_checkpoint(run / "checkpoints")
        for leaf in jax.tree.leaves(state):
            if np.issubdtype(np.asarray(leaf).dtype, np.floating):
                assert np.isfinite(leaf).all()
    assert len(set(counts.values())) == 1, counts


def test_the_programs_keep_the_state_before_a_non_finite_update():
    """Whatever the learner: new parameters with an infinity -> the train state from before
    the update, counter advanced; finite -> the new state."""
    from typing import Any, NamedTuple

    class Train(NamedTuple):
        params: Any
        opt_state: Any
        update: Any

    before = Train({"w": jnp.ones(3)}, jnp.zeros(3), jnp.int32(4))
    bad = Train({"w": jnp.array([1.0, jnp.inf, 2.0])}, jnp.ones(3), jnp.int32(5))
    kept, metrics = jax.jit(programs.keep_finite)(before, bad, {"loss": jnp.float32(1.0)})
    np.testing.assert_array_equal(kept.params["w"], before.params["w"])
    np.testing.assert_array_equal(kept.opt_state, before.opt_state)
    assert int(kept.update) == 5 and float(metrics[programs.SKIPPED]) == 1.0
    good = bad._replace(params={"w": jnp.full(3, 2.0)})
    kept, metrics = jax.jit(programs.keep_finite)(before, good, {"loss": jnp.float32(1.0)})
    np.testing.assert_array_equal(kept.params["w"], good.params["w"])
    assert float(metrics[programs.SKIPPED]) == 0.0
    kept, metrics = programs.keep_finite(before, good, {"loss": jnp.float32(jnp.nan)})
    assert float(metrics[programs.SKIPPED]) == 1.0 and int(kept.update) == 5


def test_divergence_watch_counts_streaks_across_calls_and_names_the_metric():
    watch = faults.DivergenceWatch(3, None, programs.SKIPPED, ("episodes",))
    nan = float("nan")
    watch.observe({programs.SKIPPED: [0, 1, 1], "loss": [1.0, nan, 2.0], "episodes": [1, 1, 1]},
                  last_update=3)
    assert watch.tripped is None and watch.streak[0] == 2
    watch.observe({programs.SKIPPED: [0, 1, 1], "loss": [1.0, 2.0, 2.0], "episodes": [1, 1, 1]},
                  last_update=6)   # the streak broke at update 4
    assert watch.tripped is None and watch.total[0] == 4
    watch.observe({programs.SKIPPED: [1, 0, 0], "loss": [1.0, 2.0, 2.0], "episodes": [1, 1, 1]},
                  last_update=9)
    assert watch.tripped.startswith("updates 5-7 (3 in a row"), watch.tripped
    assert "first at update 5: the parameters" in watch.tripped
    pop = faults.DivergenceWatch(1, 2, programs.SKIPPED, ())
    pop.observe({programs.SKIPPED: [[0, 0], [0, 1]], "loss": [[1.0, 1.0], [1.0, nan]]}, 2)
    assert pop.tripped is None and list(pop.diverged) == [1]   # the other member goes on
    assert "member 1: updates 2-2" in pop.diverged[1] and "loss" in pop.diverged[1]


def test_divergence_watch_forgets_a_member_pbt_replaced():
    """A PBT round copies a healthy member into a diverged one: it is healthy (a population
    whose members each tripped once and were replaced is not stopped); a copy of a diverged
    member is diverged."""
    said = []
    nan = float("nan")
    watch = faults.DivergenceWatch(1, 3, programs.SKIPPED, (), say=said.append)
    watch.observe({programs.SKIPPED: [[0], [1], [1]], "loss": [[1.0], [nan], [nan]]}, 5)
    assert sorted(watch.diverged) == [1, 2] and watch.tripped is None
    watch.replaced(np.array([0, 0, 2]))          # member 0 copied into 1; 2 kept
    assert sorted(watch.diverged) == [2] and watch.streak[1] == 0
    assert said[-1] == "member 1 recovered: PBT replaced it with a copy of member 0"
    watch.observe({programs.SKIPPED: [[1], [0], [0]], "loss": [[nan], [1.0], [1.0]]}, 6)
    assert sorted(watch.diverged) == [0, 2] and watch.tripped is None   # 1 stays healthy
    watch.replaced(np.array([0, 2, 2]))          # a diverged member's copy is diverged
    assert sorted(watch.diverged) == [0, 1, 2] and watch.tripped is not None


def _one_error_line(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return errors[0]


def _strict_json(path: Path, lines: bool = True):
    """JSON Lines (or one document) that a strict parser reads: no NaN or Infinity."""
    def refuse(token):
        raise AssertionError(f"{path} has a non-JSON constant {token}")
    if not lines:
        return json.loads(path.read_text(), parse_constant=refuse)
    return [json.loads(line, parse_constant=refuse)
            for line in path.read_text().splitlines() if line.strip()]


def test_divergence_stops_the_run_naming_the_updates_and_the_checkpoint(tmp_path):
    run = tmp_path / "run"
    proc, _ = train_cli(run, "--set", "ppo.learning_rate=1e9", "--set", "max_nonfinite_skips=3",
                        "--set", "checkpoint_every=5", "--set", "checkpoint_minutes=0",
                        devices=1, args=TINY_ARGS)   # a checkpoint inside the skipped updates
    assert proc.returncode == EXIT_DIVERGED, proc.stderr[-2000:]
    line = _one_error_line(proc.stderr)
    for words in ("training diverged", "3 in a row", "non-finite", "latest checkpoint, update",
                  str(run / "checkpoints"), "learning rate"):
        assert words in line, (words, line)
    summary = _strict_json(run / "summary.json", lines=False)
    assert summary["status"] == "diverged" and summary["nonfinite_skipped"] >= 3
    rows = _strict_json(run / "metrics.jsonl")
    assert sum(r[programs.SKIPPED] for r in rows) == summary["nonfinite_skipped"]
    state, meta = read_checkpoint(run / "checkpoints")
    assert meta["updates"] == 5 and rows[0][programs.SKIPPED] > 0   # saved while skipping
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(state["train"]))


def test_a_diverged_population_member_is_kept_and_the_others_finish(tmp_path):
    from jaxrl_dist.trainer import train

    config = config_lib.load(CFG, [a for a in TINY_ARGS if a != "--set"] + [
        "max_nonfinite_skips=2", "population.sweep={ppo.learning_rate: [2.5e-4, 1e9]}"])
    summary = train(config, tmp_path / "run", progress=False)
    assert summary["status"] == "completed"
    assert list(summary["diverged"]) == ["1"] and "member 1:" in summary["diverged"]["1"]
    skipped = [m["nonfinite_skipped"] for m in summary["members"]]
    assert skipped[0] == 0 and skipped[1] >= 2
    state, _ = read_checkpoint(tmp_path / "run" / "checkpoints")
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(state["train"]["params"]))


@pytest.mark.timeout(200)
@pytest.mark.slow
def test_divergence_on_two_processes_is_reported_and_not_restarted(tmp_path):
    proc = run_launcher(["--nproc-per-node", "2", "--max-restarts", "1", CFG, *TINY_ARGS,
                         "--set", "ppo.learning_rate=1e9", "--set", "max_nonfinite_skips=3",
                         "--run-dir", str(tmp_path / "run"), "--no-progress"])
    assert proc.returncode == EXIT_DIVERGED, proc.stderr[-3000:]
    assert "exited with code 65" in proc.stderr and "training diverged" in proc.stderr
    assert "not restarting" in proc.stderr and "restarting all" not in proc.stderr


# ------------------------------------------------------------------------------ storage

def _namespace_prefix() -> list[str] | None:
    """A command prefix giving the test a private mount namespace (so it may mount a tmpfs
    that vanishes with it), or None where the machine does not allow one."""
    if shutil.which("unshare") is None:
        return None
    for prefix in (["unshare", "-m"], ["unshare", "-rm"]):
        probe = subprocess.run([*prefix, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                               capture_output=True, timeout=30)
        if probe.returncode == 0:
            return prefix
    return None


NAMESPACE = _namespace_prefix()
needs_tmpfs = pytest.mark.skipif(NAMESPACE is None, reason="needs a private mount namespace "
                                 "(unshare -m or -rm) to mount a tiny tmpfs")

# 16 updates, a checkpoint every 2: 5 checkpoints of ~240 kB do not fit in 700 kB (3 kept).
FILLING = ["--set", "num_envs=4", "--set", "num_steps=32", "--set", "updates_per_call=2",
           "--set", "total_timesteps=2048", "--set", "ppo.num_minibatches=2",
           "--set", "checkpoint_every=2", "--set", "checkpoint_minutes=0",
           "--set", "keep_checkpoints=3", "--set", "eval_episodes=4", "--no-progress"]


def _in_tmpfs(tmp_path: Path, script: str, timeout: int = 300,
              size: str = "700k") -> subprocess.CompletedProcess:
    """Run ``script`` (bash) with $D a ``size`` tmpfs; ``grow`` makes it 50 MB (space freed)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    body = (f"set -u; D={mount}; mount -t tmpfs -o size={size} tmpfs $D || exit 99; "
            f"grow() {{ mount -o remount,size=50m $D; }}; {script}")
    return subprocess.run([*NAMESPACE, "bash", "-c", body], env=_env(), capture_output=True,
                          text=True, timeout=timeout)


def _trainer(*args: str) -> str:
    return " ".join([sys.executable, "-m", "jaxrl_dist.train", CFG, *FILLING, *args])


@pytest.mark.timeout(400)
@needs_tmpfs
def test_a_full_disk_is_one_line_keeps_the_last_checkpoint_and_resume_is_exact(tmp_path):
    out = tmp_path / "out"
    script = (f"{_trainer('--cpu-devices 1 --run-dir $D/run')} 2> {tmp_path}/err1; "
              f"echo $? > {tmp_path}/rc1; ls $D/run/checkpoints > {tmp_path}/ls1; grow; "
              f"{_trainer('--cpu-devices 1 --run-dir $D/run --resume')} > {tmp_path}/out2 "
              f"2> {tmp_path}/err2; echo $? > {tmp_path}/rc2; cp -r $D/run {out}")
    proc = _in_tmpfs(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rc1, err1 = int((tmp_path / "rc1").read_text()), (tmp_path / "err1").read_text()
    assert rc1 == EXIT_STORAGE, err1[-3000:]
    line = _one_error_line(err1)
    assert "No space left on device" in line and "ENOSPC" in line and "--resume" in line
    assert str(tmp_path / "disk" / "run") in line
    left = (tmp_path / "ls1").read_text().split()
    assert any(name.isdigit() for name in left), left   # the complete checkpoints are kept
    if "checkpoint" in line:   # that save's half-written directory is gone (another write
        assert all(name.isdigit() for name in left), left   # may fail first, mid-save)
    assert int((tmp_path / "rc2").read_text()) == 0, (tmp_path / "err2").read_text()[-3000:]
    resumed = [json.loads(x) for x in (tmp_path / "out2").read_text().splitlines()
               if x.startswith('{"rank"')][0]
    _, reference = train_cli(tmp_path / "reference", devices=1, args=FILLING)
    assert resumed["status"] == "completed"
    assert resumed["param_fingerprint"] == reference["param_fingerprint"]
    assert not list((out / "checkpoints").glob("*tmp*"))
    rows = _strict_json(out / "metrics.jsonl")
    assert [r["updates"] for r in rows] == list(range(2, 17, 2))   # each call logged once


@pytest.mark.timeout(400)
@pytest.mark.slow
@needs_tmpfs
def test_a_full_disk_on_two_processes_stops_both_and_resume_completes(tmp_path):
    launch = " ".join([sys.executable, "-m", "jaxrl_dist.launch", "--nproc-per-node", "2",
                       "--max-restarts", "1", "--log-dir", str(tmp_path / "logs"), CFG,
                       *FILLING, "--run-dir", "$D/run"])
    script = (f"{launch} 2> {tmp_path}/err1; echo $? > {tmp_path}/rc1; grow; "
              f"{launch} --resume 2> {tmp_path}/err2; echo $? > {tmp_path}/rc2; "
              f"ls $D/run/checkpoints > {tmp_path}/ls2")
    proc = _in_tmpfs(tmp_path, script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    err1 = (tmp_path / "err1").read_text()
    assert int((tmp_path / "rc1").read_text()) == EXIT_STORAGE, err1[-3000:]
    assert "exited with code 74" in err1 and "not restarting" in err1
    errors = [x.strip() for x in err1.splitlines() if x.strip().startswith("error: writing")]
    assert errors and "No space left on device" in errors[-1], err1[-3000:]
    assert "Traceback" not in err1, err1[-3000:]
    assert int((tmp_path / "rc2").read_text()) == 0, (tmp_path / "err2").read_text()[-3000:]
    assert summaries(tmp_path / "logs")[0]["status"] == "completed"
    assert all(name.isdigit() for name in (tmp_path / "ls2").read_text().split())


@pytest.mark.timeout(400)
@needs_tmpfs
def test_resume_before_the_first_checkpoint_starts_the_run(tmp_path):
    """A requeued job always passes --resume: before its run dir exists, and after its first
    checkpoint failed on a full disk (no complete checkpoint, nothing to lose), it trains from
    update 0, saying so, and ends as a run that never failed."""
    resume = _trainer("--cpu-devices 1 --run-dir $D/run --resume")
    script = (f"{resume} 2> {tmp_path}/err1; echo $? > {tmp_path}/rc1; "
              f"ls $D/run/checkpoints > {tmp_path}/ls1; grow; "
              f"{resume} > {tmp_path}/out2 2> {tmp_path}/err2; echo $? > {tmp_path}/rc2; "
              f"cp -r $D/run {tmp_path}/out")
    proc = _in_tmpfs(tmp_path, script, size="150k")   # a checkpoint is ~240 kB
    assert proc.returncode == 0, proc.stderr[-2000:]
    err1 = (tmp_path / "err1").read_text()
    assert int((tmp_path / "rc1").read_text()) == EXIT_STORAGE, err1[-3000:]
    assert "does not exist yet" in err1 and "No space left on device" in _one_error_line(err1)
    assert not any(name.isdigit() for name in (tmp_path / "ls1").read_text().split())
    err2 = (tmp_path / "err2").read_text()
    assert int((tmp_path / "rc2").read_text()) == 0, err2[-3000:]
    assert "holds no complete checkpoint" in err2 and "starting the run from update 0" in err2
    resumed = [json.loads(x) for x in (tmp_path / "out2").read_text().splitlines()
               if x.startswith('{"rank"')][0]
    _, reference = train_cli(tmp_path / "reference", devices=1, args=FILLING)
    assert resumed["status"] == "completed"
    assert resumed["param_fingerprint"] == reference["param_fingerprint"]
    rows = _strict_json(tmp_path / "out" / "metrics.jsonl")
    assert [r["updates"] for r in rows] == list(range(2, 17, 2))   # each call logged once


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_metrics_tensorboard_and_summary_write_failures_are_one_line(tmp_path, monkeypatch):
    reporter = reporting.RunReporter(tmp_path / "run", 100, progress=False)
    reporter.start({"env": "x"})
    row = {"env_steps": 1, "updates": 1, "loss": 1.0}

    class Failing:
        def write(self, text):
            raise OSError(errno.EACCES, "Permission denied")

        close = write

    real, reporter._metrics = reporter._metrics, Failing()
    with pytest.raises(faults.StorageError) as e:
        reporter.log(row)
    assert "metrics.jsonl failed: [Errno 13 EACCES] Permission denied" in str(e.value)
    assert "writable" in str(e.value) and e.value.exit_code == EXIT_STORAGE
    reporter._metrics = real

    # TensorBoard's writer thread dies on a failed write (here: tensorboardX opening a file in
    # a directory that is gone); the next log says so. Other threads' errors are not ours.
    from tensorboardX.record_writer import RecordWriter

    def dying():
        RecordWriter(str(tmp_path / "gone" / "events"))
    thread = threading.Thread(target=dying, name="tb-writer")
    thread.start()
    thread.join()
    with pytest.raises(faults.StorageError) as e:
        reporter.log(row)
    assert "TensorBoard events to" in str(e.value) and "ENOENT" in str(e.value)
    reporter.log(row)   # reported once

    def unrelated():
        raise OSError(errno.ENOSPC, "No space left on device")
    thread = threading.Thread(target=unrelated)
    thread.start()
    thread.join()
    reporter.log(row)   # not a TensorBoard write: printed by Python's hook, not raised here

    def refuse(self, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(Path, "write_text", refuse)
    with pytest.raises(faults.StorageError) as e:
        reporter.finish({"status": "completed"})
    assert "summary.json failed: [Errno 30 EROFS]" in str(e.value)
    assert not (tmp_path / "run" / "summary.json.tmp").exists()


def test_tensorstore_errors_are_read_as_os_errors():
    text = ('RESOURCE_EXHAUSTED: Error writing local file "/x/_sharding": Failed to write 8669 '
            "bytes to file 12: No space left on device [os_error_code='28']")
    assert faults.storage_reason(ValueError(text)) == \
        "[Errno 28 ENOSPC] No space left on device"
    assert faults.storage_reason(ValueError("NOT_FOUND: a peer left the barrier")) is None
    assert faults.storage_reason(ValueError("a bug")) is None
    assert faults.storage_reason(OSError(errno.EDQUOT, "Disk quota exceeded")) == \
        "[Errno 122 EDQUOT] Disk quota exceeded"


# ------------------------------------------------------------------------------ hardware

@pytest.mark.timeout(200)
def test_processes_with_different_device_kinds_are_refused(tmp_path):
    proc = run_launcher(["--nproc-per-node", "2", CFG, *TINY_ARGS,
                         "--run-dir", str(tmp_path / "run"), "--no-progress"],
                        JAXRL_FAKE_DEVICE_KIND="1:NVIDIA A100-SXM4-40GB")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert ("processes have different device kinds (rank(s) 0: cpu; rank(s) 1: NVIDIA "
            "A100-SXM4-40GB)") in proc.stderr, proc.stderr[-3000:]


def test_matmul_precision_reaches_the_programs_and_the_summary(tmp_path):
    from jaxrl_dist import trainer

    config = config_lib.load(CFG, [a for a in TINY_ARGS if a != "--set"] + [
        "matmul_precision=float32"])
    layout = sharding.make_layout(jax.devices()[:1])
    learner = make_learner(config, sizes_lib.derive_sizes(config, 1), make_env(config.env),
                           layout)
    with trainer.matmul_precision(config):
        text = learner.update.lower(learner.abstract_state(), 1).as_text()
    assert "precision = [HIGHEST, HIGHEST]" in text and "DEFAULT" not in text
    summary = trainer.train(config, tmp_path / "run", progress=False)
    assert summary["matmul_precision"] == "float32" and summary["device_kind"] == "cpu"
