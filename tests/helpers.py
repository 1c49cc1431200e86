"""What several test files share: the tiny configs, and running ``jaxrl_dist.train`` and the
launcher as real subprocesses and reading what they leave. Test files import these from here,
never from another test module or from conftest.

jax-free at import: conftest imports this module (for TINY) and sets XLA_FLAGS/JAX_PLATFORMS
before anything imports jax; what needs jax or a checkpoint imports it inside the function.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CFG = "configs/cartpole.yaml"

# A tiny CartPole config shared by tests so they share compiled programs where they can.
TINY = dict(env="CartPole-v1", seed=3, total_timesteps=8 * 16 * 6, num_envs=8, num_steps=16,
            updates_per_call=3, ppo=dict(update_epochs=2, num_minibatches=2))

# The command-line form for the launcher tests: 4 envs x 32 steps, 10 updates: small enough to
# compile and run in seconds per process.
TINY_ARGS = ["--set", "num_envs=4", "--set", "num_steps=32", "--set", "updates_per_call=5",
             "--set", "total_timesteps=1280", "--set", "ppo.num_minibatches=2"]

# 20 updates of 4 envs x 32 steps, a checkpoint every 5, evaluation every 10.
SMALL = ["--set", "num_envs=4", "--set", "num_steps=32", "--set", "updates_per_call=5",
         "--set", "total_timesteps=2560", "--set", "ppo.num_minibatches=2",
         "--set", "checkpoint_every=5", "--set", "eval_every=10", "--set", "eval_episodes=4"]


# The Q-learning tests' configs (test_qlearning, test_replicate_learn):
# 20 updates of 4 envs x 2 steps; the buffer (16 steps per environment) wraps twice; 4 shards
# so 1, 2 and 4 devices hold whole shards; 3-step returns; learning from the 4th update.
DQN = dict(algo="dqn", env="CartPole-v1", seed=2, num_envs=4, total_timesteps=4 * 2 * 20,
           updates_per_call=5, checkpoint_every=5, checkpoint_minutes=0, eval_episodes=4,
           dqn=dict(num_steps=2, gradient_steps=2, batch_size=16, buffer_size=64,
                    buffer_shards=4, learning_starts=24, n_step=3, target_update_period=3,
                    epsilon_decay_steps=100, learning_rate=3e-3))
# 6 updates of 4 envs x 16 steps, 2 epochs x 2 minibatches.
PQN = dict(algo="pqn", env="CartPole-v1", seed=3, num_envs=4, total_timesteps=4 * 16 * 6,
           updates_per_call=3, eval_episodes=4,
           pqn=dict(num_steps=16, update_epochs=2, num_minibatches=2, epsilon_decay_steps=200,
                    learning_rate=3e-3))


# The off-policy tests' configs (test_offpolicy, test_replicate_learn, test_faults):
# 20 updates of 4 envs x 2 steps; the buffer (16 steps per environment) wraps; 2 shards, so 1
# and 2 devices hold whole shards; learning from the 6th update, 2 gradient steps each, the
# actor every 2nd; observation moments reduced over the devices.
SECTION = dict(num_steps=2, utd=2, batch_size=16, buffer_size=64, buffer_shards=2,
               learning_starts=40, policy_delay=2, normalize_observations=True,
               actor_lr=1e-3, critic_lr=1e-3,
               network=dict(actor_hidden=[16, 16], critic_hidden=[16, 16]))
SAC = dict(algo="sac", env="Pendulum-v1", seed=4, num_envs=4, total_timesteps=4 * 2 * 20,
           updates_per_call=5, checkpoint_every=5, checkpoint_minutes=0, eval_episodes=2,
           sac=dict(SECTION, alpha_lr=1e-2))
TD3 = {**{k: v for k, v in SAC.items() if k != "sac"}, "algo": "td3", "td3": SECTION}
# CrossQ on the same sizes, 4 replay shards (1, 2 and 4 devices hold whole shards); batch
# renormalisation from the 10th update (40 random env steps + 40 of plain batch statistics).
CROSSQ = {**{k: v for k, v in SAC.items() if k != "sac"}, "algo": "crossq", "eval_episodes": 4,
          "crossq": dict(SECTION, buffer_shards=4, renorm_warmup_steps=40)}
# The command-line form (JSON is YAML): SAC on gymnax's Pendulum, 40 updates.
CLI_RUN = {**SAC, "total_timesteps": 4 * 2 * 40, "checkpoint_every": 10}
CROSSQ_CLI_RUN = {**CROSSQ, "total_timesteps": 4 * 2 * 40, "checkpoint_every": 10}


def write_config(tmp_path, config):
    """``config`` (a dict) as a YAML file in ``tmp_path`` (JSON is YAML); its path."""
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps(config))
    return str(path)

def _test_xla_flags() -> str:
    """XLA flags of every program the suite compiles, in its processes and their children.
    jaxlib 0.10's XLA:CPU generates code with its fusion emitters by default; its classic
    emitters compile the suite's ~2,000 programs ~35 % faster (measured: 11:44 -> 9:49 for the
    suite on 2 cores). LLVM at -O0 (``--xla_backend_optimization_level=0``) halves the compile
    again (a CrossQ gradient test: 26.7 -> 13.5 s) and, the suite's programs being small and
    short-lived, most of its runs end as soon or sooner (the CartPole learning test: 16.5 ->
    14.4 s; the launcher's longer runs a little later): the README's tier on a fresh clone
    10:47 -> 9:22, 2026-11-27 evening. Training keeps XLA's defaults. What the
    tests check (equalities between runs of one program on several topologies, resumes,
    learning) holds for either; two different programs can round an ulp apart (see
    test_envs' autoreset test); the README's train command and the newest-JAX smoke tier run
    the defaults. jaxlib >= 0.11 has only the fusion emitters (the flag is gone)."""
    from importlib import metadata
    try:
        jaxlib = metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        return ""
    return ("--xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=0"
            if jaxlib.startswith("0.10.") else "")


TEST_XLA_FLAGS = _test_xla_flags()


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    if TEST_XLA_FLAGS:
        env["XLA_FLAGS"] = TEST_XLA_FLAGS
    env.update(extra)
    return env


def run_launcher(args, timeout=180, **env):
    return subprocess.run([sys.executable, "-m", "jaxrl_dist.launch", *args], env=_env(**env),
                          capture_output=True, text=True, timeout=timeout)


def summaries(log_dir: Path) -> dict[int, dict]:
    """The summary line every rank prints at the end, read from each rank's log."""
    out = {}
    for log in sorted(log_dir.glob("rank*.log")):
        for line in log.read_text(errors="replace").splitlines():
            line = line.rsplit("\r", 1)[-1]
            if line.startswith('{"rank"'):
                row = json.loads(line)
                out[row["rank"]] = row
    return out


def _workers_of(marker: str) -> dict[int, int]:
    """rank -> pid of live trainer processes whose command line contains ``marker``."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"jaxrl_dist.train" in cmd and marker.encode() in b" ".join(cmd):
            for item in environ:
                if item.startswith(b"JAXRL_PROCESS_ID="):
                    found[int(item.split(b"=")[1])] = int(proc.name)
    return found


def _wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def start_training(run: Path, args: list[str]) -> subprocess.Popen:
    """A 2 x 2 launcher job, returned once its first metrics row is written (training runs)."""
    launcher = subprocess.Popen(
        [sys.executable, "-m", "jaxrl_dist.launch", "--nproc-per-node", "2",
         "--cpu-devices-per-proc", "2", CFG, *args, "--run-dir", str(run)],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (run / "metrics.jsonl").exists()
                  and (run / "metrics.jsonl").read_text().count("\n") >= 1, 150, "training")
    except BaseException:
        launcher.kill()
        raise
    return launcher


def train_cli(run_dir, *extra, devices=2, args=SMALL, timeout=240, config=CFG, **env):
    proc = subprocess.run([sys.executable, "-m", "jaxrl_dist.train", config, *args,
                           "--cpu-devices", str(devices), "--run-dir", str(run_dir),
                           "--no-progress", *extra],
                          env=_env(**env), capture_output=True, text=True, timeout=timeout)
    summary = None
    for line in proc.stdout.splitlines():
        if line.startswith('{"rank"'):
            summary = json.loads(line)
    return proc, summary


def sigterm_after_rows(proc, run, rows, wait=120, end=60):
    """SIGTERM ``proc`` (a Popen with piped output) once ``run``'s metrics.jsonl holds ``rows``
    rows (they must come within ``wait`` s, the run still going); its stderr once it ended
    (``end`` s at most). Killed on the way out whatever happened."""
    import signal

    try:
        deadline = time.monotonic() + wait
        while not ((run / "metrics.jsonl").exists()
                   and (run / "metrics.jsonl").read_text().count("\n") >= rows):
            assert time.monotonic() < deadline and proc.poll() is None, "no training"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=end)
    finally:
        proc.kill()
    return err


def sigterm_and_resume(tmp_path, config_file, calls=2):
    """SIGTERM a 2-device run once its metrics hold ``calls`` rows; then ``--resume`` it and run
    it uninterrupted, each as the same command line (so with the same thread setup); the stop
    must exit 75 and both runs 0. Returns (the stopped run's newest checkpoint as (state,
    meta), the resume's stderr, the resumed summary, the uninterrupted summary)."""
    from jaxrl_dist.checkpoint import read_checkpoint

    def command(run, *extra):
        return [sys.executable, "-m", "jaxrl_dist.train", str(config_file), "--cpu-devices",
                "2", "--run-dir", str(run), "--no-progress", *extra]

    def summary_of(out):
        return next(json.loads(x) for x in out.splitlines() if x.startswith('{"rank"'))

    run = tmp_path / "run"
    proc = subprocess.Popen(command(run), env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    err = sigterm_after_rows(proc, run, calls)
    assert proc.returncode == 75, err[-3000:]
    saved = read_checkpoint(run / "checkpoints")
    resumed = subprocess.run(command(run, "--resume"), env=_env(), capture_output=True,
                             text=True, timeout=120)
    reference = subprocess.run(command(tmp_path / "ref"), env=_env(), capture_output=True,
                               text=True, timeout=120)
    assert resumed.returncode == 0 and reference.returncode == 0, resumed.stderr[-3000:]
    return saved, resumed.stderr, summary_of(resumed.stdout), summary_of(reference.stdout)


def bad_input_exits_2(args, words, run_dir, capsys):
    """``python -m jaxrl_dist.train ARGS`` in process: exit 2, ONE line on stderr naming every
    one of ``words``, no traceback, nothing written at ``run_dir``."""
    from jaxrl_dist.train import main
    assert main([*args, "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    assert not Path(run_dir).exists()


def params_of(run_dir):
    from jaxrl_dist.checkpoint import read_checkpoint

    state, meta = read_checkpoint(Path(run_dir) / "checkpoints")
    return state["train"]["params"], meta


def train_in_process(config, num_devices, spec=None):
    """``config``'s learner on this process's first ``num_devices`` devices, every update:
    (final state, each call's metrics read back to the host). ``spec``: an environment other
    than the config's (a wrapped one)."""
    import jax

    from jaxrl_dist import sharding
    from jaxrl_dist import sizes as sizes_lib
    from jaxrl_dist.programs import make_learner
    from jaxrl_dist.envs import from_config

    mesh = sharding.make_mesh(jax.devices()[:num_devices])
    sizes = sizes_lib.derive_sizes(config, num_devices)
    learner = make_learner(config, sizes, spec or from_config(config), mesh)
    state = learner.init(jax.random.PRNGKey(config.seed))
    rows = []
    for _ in range(sizes.num_updates // config.updates_per_call):
        state, metrics = learner.update(state, config.updates_per_call)
        rows.append(sharding.to_host(metrics))
    return state, rows


def max_rel_diff(a, b):
    import jax
    return max(jax.tree.leaves(jax.tree.map(
        lambda x, y: float(np.max(np.abs(x - y)) / (np.max(np.abs(y)) + 1e-12)), a, b)))


def acting_agent(spec, dist_fn, keep_final_obs=True):
    """An Agent that only acts, for rollout tests: ``dist_fn(obs, mask)`` -> a distribution
    (jaxrl_dist.distributions); actions are drawn from it as a learner's ``act`` would."""
    from jaxrl_dist.agents.base import Agent
    from jaxrl_dist.distributions import action_noise

    def act(acting, carry, obs, mask, noise):
        dist = dist_fn(obs, mask)
        action = dist.sample_from_noise(noise)
        return action, carry, {"log_prob": dist.log_prob(action)}

    return Agent(init_params=None, init=None, init_carry=tuple, acting=lambda train: None,
                 noise=lambda key, t: action_noise(key, spec.continuous, (t, spec.action_dim)),
                 act=act, env_action=lambda a: a, learn=None, policy=None, policy_params=None,
                 metrics={}, steps_per_env=0, keep_final_obs=keep_final_obs)


def at_training_flags(check: str, timeout: int = 240) -> dict:
    """``tests/at_training_flags.py``'s ``check``, run in a subprocess with the trainer's XLA
    flags (not the suite's -O0 ones): its JSON result."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    proc = subprocess.run([sys.executable, str(Path(__file__).parent / "at_training_flags.py"),
                           check], env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
