"""Atari through ale-py's XLA interface (``ale:`` suite, ``envs/pool.py``): the pool steps as
ale-py's own vector environment does, its late reset step never becomes training data, results
do not depend on the topology, and the launcher runs, kills, resumes and preempts a Pong job."""

import json
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("ale_py", reason="the ale extra is not installed: pip install -e '.[ale]'")

from helpers import (_env, max_rel_diff, params_of, run_launcher,  # noqa: E402
                     sigterm_after_rows, summaries, train_cli, train_in_process)
from jaxrl_dist import config as config_lib  # noqa: E402
from jaxrl_dist.envs import EnvError, make_env, pool as pool_lib  # noqa: E402

SHORT = dict(max_frames=200, repeat_action_probability=0.25)   # 50 agent steps per episode

# A tiny Pong DQN: 8 envs x 4 steps per update, a small strided CNN, learning from update 8.
DQN = dict(algo="dqn", env="ale:Pong", env_kwargs=SHORT, seed=1, num_envs=8,
           total_timesteps=8 * 4 * 16, updates_per_call=4, eval_episodes=2,
           dqn=dict(num_steps=4, gradient_steps=2, batch_size=16, buffer_size=8 * 4 * 12,
                    buffer_shards=2, learning_starts=8 * 4 * 8, n_step=3, obs_storage="uint8",
                    target_update_period=4,
                    network=dict(cnn_channels=[4, 8], cnn_kernels=[8, 4], cnn_strides=[4, 2],
                                 hidden=[32], dueling=True)))
PPO = dict(algo="ppo", env="ale:Pong", env_kwargs=SHORT, seed=2, num_envs=8,
           total_timesteps=8 * 16 * 4, updates_per_call=2, eval_episodes=2,
           ppo=dict(num_steps=16, num_minibatches=2, update_epochs=1,
                    normalize_observations=False,
                    network=dict(cnn_channels=[4, 8], cnn_kernels=[8, 4], cnn_strides=[4, 2],
                                 actor_hidden=[32], critic_hidden=[32], activation="relu")))


def test_the_pool_steps_as_ale_pys_vector_env_and_marks_its_reset_step():
    """Against ale-py's own AtariVectorEnv.step on a fixed action sequence (sticky actions on,
    50-step episodes): the same frames, rewards and ends; the step after each end is the pool's
    reset (valid False, no reward); episode scores and lengths count valid steps only."""
    from ale_py.vector_env import AtariVectorEnv

    spec = make_env("ale:Pong", env_kwargs=SHORT)
    E, T = 4, 120
    keys = jax.random.split(jax.random.PRNGKey(5), E)
    handles = jnp.broadcast_to(jnp.asarray(spec.pool.open(E)), (E, 8))
    actions = np.random.default_rng(0).integers(0, spec.action_dim, (T, E)).astype(np.int32)

    @jax.jit
    def play(handles, keys, actions):
        slots = pool_lib.reset(spec, handles, keys)

        def one(slots, action):
            slots, out = pool_lib.step(spec, slots, action)
            return slots, (slots.obs, out)
        return slots.obs, jax.lax.scan(one, slots, actions)[1]

    first, (obs, out) = jax.device_get(play(handles, keys, actions))
    reference = AtariVectorEnv("pong", E, num_threads=1, max_num_frames_per_episode=200,
                               repeat_action_probability=0.25, reward_clipping=False)
    ref_obs, _ = reference.reset(seed=np.asarray(pool_lib.seeds_of(keys)))
    np.testing.assert_array_equal(first, np.moveaxis(ref_obs, 1, -1))
    ended = np.zeros(E, bool)
    for t in range(T):
        ref_obs, reward, term, trunc, _ = reference.step(actions[t].astype(np.int64))
        np.testing.assert_array_equal(obs[t], np.moveaxis(ref_obs, 1, -1))
        np.testing.assert_array_equal(out.reward[t], np.sign(reward))      # clipped to learn
        np.testing.assert_array_equal(out.valid[t], ~ended)                # the reset step
        assert np.all(reward[ended] == 0)
        np.testing.assert_array_equal(out.terminated[t] | out.truncated[t], term | trunc)
        ended = term | trunc
    assert out.truncated.any() and not out.terminated.any()   # 50-step episodes, no game over
    lengths = out.finished_length[out.finished_length > 0]
    assert np.all(lengths == 50), lengths                       # the reset steps not counted
    assert out.valid.sum() == T * E - (out.finished_length > 0)[:-1].sum()


def test_a_replay_sample_at_a_reset_step_weighs_nothing_and_a_time_limit_bootstraps():
    """A pool's buffer: the row after an end is stored (its observation is where the episode
    stopped) but a sample drawn there has weight 0; a window cut by a time limit bootstraps
    from that next row with discount gamma^k."""
    from jaxrl_dist.agents.replay import buffer as replay_lib
    from jaxrl_dist.types import Transition

    L, n, gamma = 8, 3, 0.5
    data = replay_lib.init(1, L, 1, (1,), jnp.float32, False, pool=True)
    t = jnp.arange(L, dtype=jnp.float32)[:, None]
    steps = Transition(obs=t[..., None], action=jnp.zeros((L, 1), jnp.int32),
                       reward=jnp.ones((L, 1)), terminated=jnp.zeros((L, 1), bool),
                       truncated=(t == 2), finished_return=jnp.zeros((L, 1)),
                       finished_length=jnp.zeros((L, 1), jnp.int32), extras={},
                       valid=(t != 3))
    data = replay_lib.add(data, steps)
    batch = replay_lib.sample(data, jax.random.PRNGKey(0), jnp.arange(1), 512, n, gamma)
    row = np.asarray(batch.obs[:, 0]).astype(int)
    assert set(row) == set(range(L - n)) and np.all(np.asarray(batch.weight) == (row != 3))
    at1 = row == 1   # window rows 1, 2: the time limit at 2 -> bootstrap from row 3, gamma^2
    assert np.all(np.asarray(batch.next_obs[at1, 0]) == 3)
    assert np.allclose(batch.discount[at1], gamma ** 2) and np.allclose(batch.reward[at1], 1.5)


def test_ppo_drops_zero_weight_steps_from_its_loss():
    from jaxrl_dist.agents.ppo import losses
    from jaxrl_dist.distributions import Categorical

    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(size=(4, 3)), jnp.float32)
    batch = losses.LossInputs(obs=logits, action=jnp.array([0, 1, 2, 0]),
                              old_log_prob=jnp.array([-1.0, -1.2, -0.9, -50.0]),
                              old_value=jnp.zeros(4), advantage=jnp.array([1.0, -1.0, 0.5, 1e6]),
                              target=jnp.array([1.0, 2.0, 0.5, 1e6]))
    weighted = batch._replace(weight=jnp.array([1.0, 1.0, 1.0, 0.0]))
    first3 = jax.tree.map(lambda x: x[:3], batch)

    def loss(b):
        return losses.ppo_loss(None, b, lambda p, o, m: Categorical(o), lambda p, o: o[:, 0],
                               0.2, None, 0.01, 0.5)[0]
    np.testing.assert_allclose(loss(weighted), loss(first3) * 3 / 4, rtol=1e-6)


@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_one_and_two_devices_learn_the_same_parameters(algo):
    """Each device steps its own pool; reset seeds come from global environment indices, so
    1 x 8 and 2 x 4 environments play the same games and learn the same parameters (to the
    float tolerance of a split gradient sum, as every topology test: PPO's reached 1.28e-5
    here, 2026-11-28, under the suite's -O0 flags)."""
    config = config_lib.from_dict(DQN if algo == "dqn" else PPO)
    one, rows = train_in_process(config, 1)
    two, _ = train_in_process(config, 2)
    assert max_rel_diff(*jax.device_get((two.train.params, one.train.params))) <= 1e-4
    assert sum(float(np.sum(r["episodes"])) for r in rows) > 0   # episodes ended and counted
    if algo == "dqn":
        assert float(rows[-1]["learning"][-1]) == 1.0


@pytest.mark.parametrize("env,kwargs,words", [
    ("ale:Pongg", {}, ["ale:Pongg", "did you mean pong"]),
    ("ale:Pong", {"frameskip": 4}, ["unknown env_kwargs ['frameskip']", "frame_skip"]),
    ("ale:Pong", {"frame_skip": 0}, ["frame_skip", ">= 1"]),
])
def test_bad_atari_input_is_one_line(env, kwargs, words):
    with pytest.raises(EnvError) as error:
        make_env(env, env_kwargs=kwargs)
    message = str(error.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_env_nonfinite_reset_on_a_pool_is_one_line():
    """A pool's environments reset themselves, one step late: ``env_nonfinite=reset`` cannot
    end one of their episodes from the program, and says so before anything compiles."""
    import jax

    from jaxrl_dist import sharding
    from jaxrl_dist import sizes as sizes_lib
    from jaxrl_dist.programs import make_learner

    config = config_lib.from_dict({**PPO, "env_nonfinite": "reset"})
    with pytest.raises(EnvError) as error:
        make_learner(config, sizes_lib.derive_sizes(config, 1), make_env(
            config.env, env_kwargs=config.env_kwargs), sharding.make_layout(jax.devices()[:1]))
    message = str(error.value)
    assert "\n" not in message and "env_nonfinite=reset" in message and "pool" in message


def test_a_missing_ale_extra_names_the_install(monkeypatch):
    from jaxrl_dist.envs import registry
    monkeypatch.setattr(registry, "available", lambda suite: suite != "ale")
    with pytest.raises(EnvError, match=r"ale_py.*pip install -e '\.\[ale\]'"):
        make_env("ale:Pong")


def _tiny_pong(tmp_path, **extra):
    """configs/pong_dqn.yaml at a tiny budget: 20 updates of 8 x 4 steps, learning from 8."""
    args = {"total_timesteps": 640, "updates_per_call": 2, "eval_every": 10, "eval_episodes": 2,
            "checkpoint_every": 4, "dqn.num_steps": 4, "dqn.learning_starts": 256,
            "dqn.buffer_size": 384, "dqn.batch_size": 16, "dqn.gradient_steps": 1,
            "env_kwargs.max_frames": 400, "dqn.network.cnn_channels": "[4, 8]",
            "dqn.network.cnn_kernels": "[8, 4]", "dqn.network.cnn_strides": "[4, 2]",
            "dqn.network.hidden": "[32]", **extra}
    return [x for k, v in args.items() for x in ("--set", f"{k}={v}")]


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_pong_dqn_through_the_launcher_killed_and_restarted(tmp_path):
    """DI-engine's command, here: 2 processes via the launcher on configs/pong_dqn.yaml (tiny
    budget); rank 1 is killed (SIGKILL) after update 10 and the job restarts from its last
    checkpoint: the learner state comes back, the pools start fresh games, and it says so."""
    run = tmp_path / "run"
    proc = run_launcher(["--nproc-per-node", "2", "--max-restarts", "1", "configs/pong_dqn.yaml",
                         *_tiny_pong(tmp_path), "--run-dir", str(run)], timeout=280,
                        JAXRL_FAULT="kill@1:10", JAXRL_FAULT_ONCE=str(tmp_path / "fired"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "restarting all local workers" in proc.stderr
    ranks = summaries(run / "logs")
    assert ranks[0]["param_fingerprint"] == ranks[1]["param_fingerprint"]
    saved = json.loads((run / "summary.json").read_text())
    assert saved["updates"] == 20 and saved["rebuilt_on_resume"] == ["actors"]
    assert saved["num_processes"] == 2 and saved["eval_return"] is not None
    log = (run / "logs" / "rank0.log").read_text(errors="replace")
    # the newest checkpoint complete when rank 1 died (8 unless its async write was still going)
    assert re.search(r"resuming at [48] ", log) and "started afresh: actors" in log


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_two_processes_learn_what_one_process_with_two_devices_learns(tmp_path):
    """Topology invariance across processes: each process opens its own pool, seeded by global
    environment indices, so 2 processes x 1 device play the games and learn the parameters of
    1 process x 2 devices (up to the float order of the cross-process reductions), each
    learning the whole batch (replicate_learn: auto across CPU processes, set for the one)."""
    args = _tiny_pong(tmp_path, checkpoint_every=0, eval_every=0, total_timesteps=384)
    multi = run_launcher(["--nproc-per-node", "2", "configs/pong_dqn.yaml", *args,
                          "--run-dir", str(tmp_path / "mp")], timeout=280)
    assert multi.returncode == 0, multi.stderr[-3000:]
    single, _ = train_cli(tmp_path / "sp", config="configs/pong_dqn.yaml",
                          args=[*args, "--set", "replicate_learn=true"], timeout=280)
    assert single.returncode == 0, single.stderr[-3000:]
    (mp, mp_meta), (sp, _) = params_of(tmp_path / "mp"), params_of(tmp_path / "sp")
    assert mp_meta["updates"] == 12   # 4 of them learned (learning starts after update 8)
    assert max_rel_diff(mp, sp) <= 1e-5
    ranks = summaries(tmp_path / "mp" / "logs")
    assert ranks[0]["param_fingerprint"] == ranks[1]["param_fingerprint"]


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_sigterm_saves_the_learner_and_a_resumed_run_finishes(tmp_path):
    """Preemption on Atari: SIGTERM saves the learner (replay buffer included) at an agreed
    update and exits 75; --resume restores it exactly, opens new pools and completes."""
    from jaxrl_dist.checkpoint import read_checkpoint

    run = tmp_path / "run"
    command = [sys.executable, "-m", "jaxrl_dist.train", "configs/pong_dqn.yaml",
               *_tiny_pong(tmp_path, total_timesteps=32 * 400, checkpoint_every=0),
               "--cpu-devices", "2", "--run-dir", str(run), "--no-progress"]
    proc = subprocess.Popen(command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    err = sigterm_after_rows(proc, run, 6, wait=150, end=90)
    assert proc.returncode == 75, err[-3000:]
    state, meta = read_checkpoint(run / "checkpoints")
    assert 12 <= meta["updates"] < 400 and np.all(state["data"]["rows"] == 48)   # buffer full
    resumed = subprocess.run(command + ["--resume"], env=_env(), capture_output=True, text=True,
                             timeout=200)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["updates"] == 400 and summary["rebuilt_on_resume"] == ["actors"]


def test_after_new_games_the_newest_rows_weigh_nothing():
    """A resume starts new games in the pools; the buffer's newest n rows per column would
    run on into them with no end between, so ``replay.cut`` gives them weight 0 (and only
    them)."""
    from jaxrl_dist.agents.replay import buffer as replay_lib

    data = replay_lib.init(2, 6, 1, (1,), jnp.float32, False, pool=True)
    data = data._replace(valid=jnp.ones((2, 6, 1), bool), position=jnp.array([4, 4]),
                         rows=jnp.array([6, 6]))
    cut = replay_lib.cut(data, 3)
    np.testing.assert_array_equal(cut.valid[:, :, 0], [[1, 0, 0, 0, 1, 1]] * 2)
    partial = replay_lib.cut(data._replace(position=jnp.array([2, 2]), rows=jnp.array([2, 2])), 3)
    np.testing.assert_array_equal(partial.valid[:, :, 0], [[0, 0, 1, 1, 1, 1]] * 2)
