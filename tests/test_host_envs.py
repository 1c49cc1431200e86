"""Host environments (``gymnasium:<id>``, a user's Gymnasium env through the Python API or a
``JAXRL_DIST_PLUGINS`` module): stepped on each process's CPUs, learning on the global mesh.

What is checked: the vector env's ends and final observations; bad input is one line; PPO, DQN
and PQN train on them; the same parameters on 1 and 2 devices and on 2 processes through the
launcher; kill -9 and ``--resume`` (fresh episodes, re-seeded deterministically); an exception
inside a user's environment on one rank ends the job with its message and traceback."""

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

from helpers import max_rel_diff, params_of, run_launcher, summaries, train_cli

TESTS = str(Path(__file__).resolve().parent)
PLUGIN = {"JAXRL_DIST_PLUGINS": "host_plugin",
          "PYTHONPATH": os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")]))}
CORRIDOR = "gymnasium:jaxrl_test/Corridor-v0"
# 4 envs x 16 steps, 12 updates, a checkpoint every 3: seconds per process.
HOST_ARGS = ["--set", f"env={CORRIDOR}", "--set", "num_envs=4", "--set", "ppo.num_steps=16",
             "--set", "total_timesteps=768", "--set", "updates_per_call=3",
             "--set", "ppo.num_minibatches=2", "--set", "ppo.update_epochs=2",
             "--set", "checkpoint_every=3", "--set", "eval_episodes=4",
             "--set", "ppo.normalize_observations=true"]   # statistics over every process


@pytest.fixture
def plugin(monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    monkeypatch.setenv("JAXRL_DIST_PLUGINS", "host_plugin")
    import host_plugin  # noqa: F401 (registers jaxrl_test/*)


def _vector(n, limit, mode="SameStep"):
    import gymnasium
    return gymnasium.make_vec("CartPole-v1", num_envs=n, vectorization_mode="sync",
                              vector_kwargs={"autoreset_mode": mode}, max_episode_steps=limit)


def test_vector_envs_keep_ends_apart_with_the_real_final_observation():
    import gymnasium

    from jaxrl_dist.envs.host import VectorEnvs

    envs = VectorEnvs(_vector(2, 3), "cartpole", np.float32, None, discrete=True)
    obs = envs.reset([5, 6])
    single = gymnasium.make("CartPole-v1", max_episode_steps=3)   # env 0, stepped alone
    want, _ = single.reset(seed=5)
    np.testing.assert_array_equal(obs[0], want)
    for t in range(3):
        out = envs.step(np.array([1, 1]))
        want, reward, terminated, truncated, _ = single.step(1)
        np.testing.assert_array_equal(out.final_obs[0], want)
        assert out.reward.dtype == np.float32 and out.reward[0] == reward
        assert out.terminated[0] == terminated and out.truncated[0] == (truncated and
                                                                         not terminated)
    assert out.truncated.all() and not out.terminated.any()   # the time limit, not an end
    assert not np.array_equal(out.obs[0], out.final_obs[0])   # obs is the next episode's


def test_a_vector_env_that_resets_a_step_late_is_refused():
    from jaxrl_dist.envs import EnvError
    from jaxrl_dist.envs.gymnasium import from_object

    with pytest.raises(EnvError, match="SAME_STEP") as error:
        from_object(_vector(2, 10, mode="NextStep"))
    assert len(str(error.value).splitlines()) == 1


@pytest.mark.parametrize("env_id,words", [
    ("gymnasium:CartPol-v1", ["unknown gymnasium environment", "gymnasium:CartPole-v1"]),
    ("gymnasium:jaxrl_test/MultiDiscrete-v0", ["MultiDiscrete", "not supported"]),
    ("gymnasium:jaxrl_test/NeedsMujoco-v0", ["not installed", ".[mujoco]"]),
])
def test_bad_gymnasium_input_is_one_line(env_id, words, plugin):
    from jaxrl_dist.envs import EnvError, make_env

    with pytest.raises(EnvError) as error:
        make_env(env_id)
    message = str(error.value)
    assert len(message.splitlines()) == 1 and all(w in message for w in words), message


def test_a_plugin_module_that_does_not_import_is_one_line(tmp_path, capsys, monkeypatch):
    from jaxrl_dist import train as train_cli

    monkeypatch.setenv("JAXRL_DIST_PLUGINS", "no_such_plugin_module")
    code = train_cli.main(["configs/gymnasium_cartpole.yaml", "--run-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "no_such_plugin_module" in err and "JAXRL_DIST_PLUGINS" in err
    assert not (tmp_path / "r").exists()


def _tiny(algo, **extra):
    from jaxrl_dist import config as config_lib

    section = {"ppo": {"num_steps": 16, "num_minibatches": 2, "update_epochs": 1},
               "dqn": {"num_steps": 4, "learning_starts": 32, "batch_size": 8, "buffer_shards": 2,
                       "buffer_size": 256},
               "pqn": {"num_steps": 16, "num_minibatches": 2, "update_epochs": 1}}[algo]
    steps = section["num_steps"]
    return config_lib.from_dict({"algo": algo, "env": "CartPole-v1", "num_envs": 4,
                                 "total_timesteps": 4 * steps * 4, "updates_per_call": 2,
                                 "eval_episodes": 2, algo: section, **extra})


class Drift(gymnasium.Env):
    """A user's own continuous environment (never registered): push x toward 0."""

    def __init__(self):
        self.observation_space = spaces.Box(-10, 10, (1,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = float(self.np_random.uniform(-2, 2))
        return np.array([self.x], np.float32), {}

    def step(self, action):
        self.x += float(np.clip(action[0], -1, 1)) * 0.5
        return np.array([self.x], np.float32), -abs(self.x), abs(self.x) > 9, False, {}


class BatchedDrift(gymnasium.vector.VectorEnv):
    """Drift as a user's batched simulator: every environment stepped in one numpy call (no
    loop per environment), resetting finished ones in the same step (SAME_STEP)."""

    metadata = {"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP}
    steps_called = 0

    def __init__(self, num_envs):
        self.num_envs = num_envs
        self.single_observation_space = spaces.Box(-10, 10, (1,), np.float32)
        self.single_action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.observation_space = spaces.Box(-10, 10, (num_envs, 1), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (num_envs, 1), np.float32)
        self.rngs = []

    def reset(self, *, seed=None, options=None):
        self.rngs = [np.random.default_rng(s) for s in seed]
        self.x = np.array([r.uniform(-2, 2) for r in self.rngs], np.float32)
        self.t = np.zeros(self.num_envs, np.int32)
        return self.x[:, None].copy(), {}

    def step(self, actions):
        type(self).steps_called += 1
        self.x = self.x + np.clip(actions[:, 0], -1, 1) * 0.5
        self.t += 1
        reward = -np.abs(self.x)
        terminated, truncated = np.abs(self.x) > 9, self.t >= 20
        done = terminated | truncated
        info = {}
        if done.any():
            final = np.empty(self.num_envs, object)
            for i in np.flatnonzero(done):
                final[i] = self.x[i, None].copy()
            info = {"final_obs": final, "_final_obs": done}
            for i in np.flatnonzero(done):
                self.x[i], self.t[i] = self.rngs[i].uniform(-2, 2), 0
        return self.x[:, None].copy(), reward, terminated, truncated, info


@pytest.mark.parametrize("algo", ["ppo", "dqn", "pqn"])
def test_every_learner_trains_on_a_registered_host_env(algo, plugin, tmp_path):
    import jax

    from jaxrl_dist.trainer import train

    summary = train(_tiny(algo, env=CORRIDOR), tmp_path / "run", devices=jax.devices()[:2],
                    progress=False)
    config = _tiny(algo)
    assert summary["status"] == "completed"
    assert summary["env_steps"] == config.total_timesteps and np.isfinite(summary["eval_return"])


def test_a_non_finite_observation_is_named_and_nothing_of_it_is_learned_or_saved(
        plugin, tmp_path, monkeypatch):
    """A NaN observation at env step 10 (update 3 of 4 env steps) stops the run with one line
    naming the environment, the process, the step and what was non-finite; the checkpoints
    left (after updates 1 and 2) hold finite values only, the replay included."""
    import jax

    from jaxrl_dist.checkpoint import read_checkpoint
    from jaxrl_dist.envs import EnvError
    from jaxrl_dist.trainer import train

    monkeypatch.setenv("JAXRL_TEST_FAULTY_RANK", "0")
    monkeypatch.setenv("JAXRL_TEST_FAULTY_STEPS", "9")
    config = _tiny("dqn", env="gymnasium:jaxrl_test/Glitch-v0", updates_per_call=1,
                   checkpoint_every=1, checkpoint_minutes=0)
    with pytest.raises(EnvError) as error:
        train(config, tmp_path / "run", devices=jax.devices()[:1], progress=False)
    message = str(error.value)
    assert len(message.splitlines()) == 1
    for words in ("jaxrl_test/Glitch-v0: environment 0 (process 0) returned a non-finite "
                  "observation at its env step 10 (update 3)", "nothing of that update was "
                  "learned or saved", "Repair the environment"):
        assert words in message, message
    assert "learning rate" not in message
    state, meta = read_checkpoint(tmp_path / "run" / "checkpoints")
    # 2 unless its save, written in the background, was still going when the error ended the
    # run (a save cut short is removed when the run directory is next opened)
    assert meta["updates"] in (1, 2)
    for leaf in jax.tree.leaves(state):
        if np.issubdtype(np.asarray(leaf).dtype, np.floating):
            assert np.isfinite(leaf).all()


def test_resume_with_env_nonfinite_reset_continues_a_run_a_glitch_stopped(
        plugin, tmp_path, monkeypatch):
    """The run the NaN observation stopped resumes with ``env_nonfinite=reset`` (a key a resume
    may change): the step is dropped, the environment reset, the run completes, everything it
    holds finite, and the summary and the rows count the reset."""
    import json

    import jax

    from jaxrl_dist.checkpoint import read_checkpoint
    from jaxrl_dist.envs import EnvError
    from jaxrl_dist.trainer import train

    monkeypatch.setenv("JAXRL_TEST_FAULTY_RANK", "0")
    monkeypatch.setenv("JAXRL_TEST_FAULTY_STEPS", "9")
    config = _tiny("dqn", env="gymnasium:jaxrl_test/Glitch-v0", updates_per_call=1,
                   checkpoint_every=1, checkpoint_minutes=0, total_timesteps=4 * 4 * 8)
    with pytest.raises(EnvError, match="--set env_nonfinite=reset"):
        train(config, tmp_path / "run", devices=jax.devices()[:1], progress=False)
    import dataclasses
    summary = train(dataclasses.replace(config, env_nonfinite="reset"), tmp_path / "run",
                    resume=True, devices=jax.devices()[:1], progress=False)
    assert summary["status"] == "completed" and np.isfinite(summary["eval_return"])
    # the resumed environments start afresh (their step counts too): each glitches once more,
    # 10 steps after the resume (of 16 or more left)
    assert summary["env_nonfinite_resets"] == 4 and summary["nonfinite_skipped"] == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert sum(r.get("env_nonfinite_resets", 0) for r in rows) == 4
    state, _ = read_checkpoint(tmp_path / "run" / "checkpoints")
    for leaf in jax.tree.leaves(state):
        if np.issubdtype(np.asarray(leaf).dtype, np.floating):
            assert np.isfinite(leaf).all()


def test_with_env_nonfinite_reset_2_processes_give_2_devices_parameters(tmp_path):
    """An environment whose sensor fails in some of its episodes (their own, on any topology)
    trained with ``env_nonfinite=reset``: each such step is dropped and its environment reset;
    2 processes through the launcher drop the same steps and end on 1 process x 2 devices'
    parameters bit for bit."""
    cfg = "configs/gymnasium_cartpole.yaml"
    args = [*HOST_ARGS, "--set", "env=gymnasium:jaxrl_test/Sensor-v0",
            "--set", "replicate_learn=false", "--set", "env_nonfinite=reset"]
    proc, one = train_cli(tmp_path / "d2", devices=2, args=args, config=cfg, **PLUGIN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert one["status"] == "completed" and one["env_nonfinite_resets"] > 0
    proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "1", cfg, *args,
                         "--run-dir", str(tmp_path / "p2")], **PLUGIN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = summaries(tmp_path / "p2" / "logs")
    assert len(ranks) == 2
    for rank in ranks.values():
        assert rank["param_fingerprint"] == one["param_fingerprint"]
        assert rank["env_nonfinite_resets"] == one["env_nonfinite_resets"]
        assert rank["eval_return"] == one["eval_return"]


def test_a_users_env_class_and_vector_env_through_the_python_api(tmp_path):
    import jax

    from jaxrl_dist.trainer import train

    config = _tiny("ppo", episode_length=20)   # a time limit for an env without one
    summary = train(config, tmp_path / "class", env=Drift, devices=jax.devices()[:2],
                    progress=False)
    assert summary["status"] == "completed" and np.isfinite(summary["eval_return"])
    # a batched simulator given as one vector env: this process's 4 environments, used as is
    vec = gymnasium.vector.SyncVectorEnv(
        [lambda: gymnasium.wrappers.TimeLimit(Drift(), 20)] * 4, autoreset_mode="SameStep")
    # an instance: this process's 4 training environments, used as is
    summary = train(config, tmp_path / "vector", env=vec, devices=jax.devices()[:1],
                    progress=False)
    assert summary["status"] == "completed"
    # a batched simulator's class: one step call per step of all of this process's envs
    summary = train(config, tmp_path / "batched", env=BatchedDrift, devices=jax.devices()[:2],
                    progress=False)
    assert summary["status"] == "completed" and np.isfinite(summary["eval_return"])
    updates, steps = config.total_timesteps // (4 * 16), 16
    assert BatchedDrift.steps_called == updates * steps + 20   # + the final evaluation's


@pytest.mark.slow
def test_overlapped_actors_act_apart_and_repeat_run_to_run(plugin, tmp_path):
    """overlap_actors: the last device acts during the updates, one update behind; two runs
    agree bit for bit, and differ from the synchronous run (the policy lag)."""
    import jax

    from jaxrl_dist.trainer import train

    config = _tiny("ppo", env=CORRIDOR, overlap_actors=True)
    runs = [train(config, tmp_path / f"o{i}", devices=jax.devices()[:2], progress=False)
            for i in range(2)]
    assert runs[0]["num_devices"] == 1   # the second device acted
    assert runs[0]["param_fingerprint"] == runs[1]["param_fingerprint"]
    sync = train(_tiny("ppo", env=CORRIDOR), tmp_path / "s", devices=jax.devices()[:1],
                 progress=False)
    assert sync["param_fingerprint"] != runs[0]["param_fingerprint"]


@pytest.mark.parametrize("env,devices,words", [
    (CORRIDOR, 1, ["overlap_actors needs an actor device", "--cpu-devices 2"]),
    ("CartPole-v1", 2, ["overlap_actors applies to host environments", "CartPole-v1"]),
])
def test_overlap_actors_without_an_actor_device_or_host_env_is_one_line(env, devices, words,
                                                                       plugin, tmp_path):
    import jax

    from jaxrl_dist.errors import ConfigError
    from jaxrl_dist.trainer import train

    with pytest.raises(ConfigError) as error:
        train(_tiny("ppo", env=env, overlap_actors=True), tmp_path / "run",
              devices=jax.devices()[:devices], progress=False)
    message = str(error.value)
    assert len(message.splitlines()) == 1 and all(w in message for w in words), message
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_same_parameters_on_1_and_2_devices_and_2_processes(tmp_path):
    """A deterministic environment registered by a plugin: 2 processes through the launcher
    learn every update from the whole batch on each device (``replicate_learn`` is on by
    default across CPU processes) and give those parameters bit for bit, 1 device's to float
    tolerance; with ``replicate_learn=false`` (the batch split, the gradient all-reduced at
    every SGD step) 2 processes give 2 devices' parameters bit for bit, and 1 device's to
    float tolerance (the gradient's sum order differs)."""
    cfg = "configs/gymnasium_cartpole.yaml"
    split = [*HOST_ARGS, "--set", "replicate_learn=false"]
    whole = [*HOST_ARGS, "--set", "replicate_learn=true"]
    runs = {}
    for name, devices, args in (("d1", 1, HOST_ARGS), ("d2", 2, HOST_ARGS), ("r2", 2, whole)):
        proc, runs[name] = train_cli(tmp_path / name, devices=devices, args=args, config=cfg,
                                     **PLUGIN)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert runs["d2"]["replicate_learn"] is False and runs["r2"]["replicate_learn"] is True
    for name, args, same in (("p2", HOST_ARGS, "r2"), ("s2", split, "d2")):
        proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "1", cfg,
                             *args, "--run-dir", str(tmp_path / name)], **PLUGIN)
        assert proc.returncode == 0, proc.stderr[-3000:]
        ranks = summaries(tmp_path / name / "logs")
        assert ranks[0]["param_fingerprint"] == ranks[1]["param_fingerprint"] == \
            runs[same]["param_fingerprint"], name
        assert ranks[0]["eval_return"] == runs[same]["eval_return"]
        assert ranks[0]["replicate_learn"] is (name == "p2")
    assert runs["r2"]["param_fingerprint"] != runs["d2"]["param_fingerprint"]
    assert max_rel_diff(params_of(tmp_path / "d1")[0], params_of(tmp_path / "d2")[0]) <= 1e-4
    assert max_rel_diff(params_of(tmp_path / "d1")[0], params_of(tmp_path / "r2")[0]) <= 1e-4


def test_pqn_learns_the_whole_batch_on_every_device(plugin, tmp_path):
    """PQN (as PPO in the launcher test) with ``replicate_learn``: each of 2 devices learns
    from the whole gathered batch and ends where 1 device does, to float tolerance."""
    import jax

    from jaxrl_dist.trainer import train

    runs = {}
    for name, devices, extra in (("d1", 1, {}), ("r2", 2, {"replicate_learn": True})):
        runs[name] = train(_tiny("pqn", env=CORRIDOR, **extra), tmp_path / name,
                           devices=jax.devices()[:devices], progress=False)
    assert runs["r2"]["replicate_learn"] is True and runs["d1"]["replicate_learn"] is False
    assert max_rel_diff(params_of(tmp_path / "d1")[0], params_of(tmp_path / "r2")[0]) <= 1e-4


POP_LRS = {"ppo": [2.5e-4, 1e-3], "dqn": [1e-4, 5e-4]}
# members, seed fastest: 0 = (3, lr0), 1 = (11, lr0), 2 = (3, lr1), 3 = (11, lr1)


def _host_population(algo):
    key = "learning_rate"
    return {"seeds": [3, 11], "sweep": {f"{algo}.{key}": POP_LRS[algo]}}


@pytest.fixture(scope="module")
def host_singles(tmp_path_factory):
    """(algo, k) -> member k of ``algo``'s population trained as a single run on 1 device:
    (its parameters, its final evaluation); each trained once, when first asked for (the
    asking test holds the plugin)."""
    import jax

    from jaxrl_dist import population
    from jaxrl_dist.trainer import train

    done = {}

    def single(algo, k):
        if (algo, k) not in done:
            config = _tiny(algo, env=CORRIDOR, population=_host_population(algo))
            run = tmp_path_factory.mktemp(f"{algo}{k}") / "run"
            summary = train(population.member_config(config, k), run,
                            devices=jax.devices()[:1], progress=False)
            done[algo, k] = params_of(run)[0], summary["eval_return"]
        return done[algo, k]
    return single


@pytest.mark.parametrize("algo,devices", [
    ("ppo", 2), pytest.param("ppo", 1, marks=pytest.mark.slow),
    pytest.param("dqn", 2, marks=pytest.mark.slow)])
def test_a_population_on_host_envs_is_its_single_runs(algo, devices, host_singles, plugin,
                                                      tmp_path):
    """Seeds x learning rates as one population on host environments: each member steps its
    own environments (seeded from its own seed), acts with its own parameters and learns in
    one vmapped ``learn_next``; member k ends where the single run with its seed and rate
    ends (to float tolerance: vmap batches the members' sums into other kernels), evaluates
    as it does, and the rate lives in the state."""
    import jax

    from jaxrl_dist.checkpoint import read_checkpoint
    from jaxrl_dist.trainer import train

    config = _tiny(algo, env=CORRIDOR, population=_host_population(algo))
    summary = train(config, tmp_path / "run", devices=jax.devices()[:devices], progress=False)
    assert summary["status"] == "completed"
    state, meta = read_checkpoint(tmp_path / "run" / "checkpoints")
    assert meta["updates"] == 4
    lrs = POP_LRS[algo]
    np.testing.assert_array_equal(state["train"]["hparams"]["learning_rate"],
                                  np.float32([lrs[0], lrs[0], lrs[1], lrs[1]]))
    members = summary["members"]
    for k in (1, 2):
        params, eval_return = host_singles(algo, k)
        member = jax.tree.map(lambda x, k=k: x[k], state["train"]["params"])
        assert max_rel_diff(member, params) <= 1e-5, k
        assert members[k]["eval_return"] == pytest.approx(eval_return, abs=1e-3), k
    assert len({m["param_fingerprint"] for m in members}) == 4


# 4 members (2 seeds x 2 rates) of HOST_ARGS's run: 12 updates, a checkpoint every 3.
HOST_POP_ARGS = [*HOST_ARGS, "--set", "population.seeds=[3,11]",
                 "--set", "population.sweep.ppo.learning_rate=[2.5e-4,1e-3]"]


@pytest.mark.slow
@pytest.mark.timeout(500)
def test_a_host_population_through_the_launcher_equals_one_process_and_resumes(tmp_path):
    """The population on 2 processes (each stepping its own members' environments) ends on
    1 process x 2 devices' parameters bit for bit (the same layout: two members per device,
    no collectives); killed with -9, it resumes from its last checkpoint twice (from copies)
    to the same parameters (host environments re-seeded from each member's seed and the
    update: fresh episodes)."""
    cfg = "configs/gymnasium_cartpole.yaml"
    proc, _ = train_cli(tmp_path / "d2", devices=2, args=HOST_POP_ARGS, config=cfg, **PLUGIN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one = json.loads((tmp_path / "d2" / "summary.json").read_text())
    prints = [m["param_fingerprint"] for m in one["members"]]
    assert len(set(prints)) == 4
    proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "1", cfg,
                         *HOST_POP_ARGS, "--run-dir", str(tmp_path / "p2")], **PLUGIN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = json.loads((tmp_path / "p2" / "summary.json").read_text())
    assert [m["param_fingerprint"] for m in two["members"]] == prints
    assert [m["eval_return"] for m in two["members"]] == [m["eval_return"]
                                                          for m in one["members"]]
    finished = [[m["param_fingerprint"] for m in resumed["members"]]
                for resumed in _killed_then_resumed_twice(tmp_path / "killed", 2,
                                                          HOST_POP_ARGS)]
    assert finished[0] == finished[1] and len(set(finished[0])) == 4


HOST_PBT = {"population": {"sweep": {"ppo.learning_rate": [1e-4, 3e-4, 1e-3, 3e-3]}},
            "pbt": {"enabled": True, "interval_updates": 3, "min_episodes": 1,
                    "mutations": {"ppo.learning_rate": {"low": 1e-5, "high": 1e-2},
                                  "ppo.ent_coef": {"low": 1e-4, "high": 0.1}}}}


def test_pbt_on_host_envs_ranks_each_members_training_episodes(plugin, tmp_path):
    """PBT on host environments: 4 members, a round after updates 3, 6 and 9; each round's
    fitness is the mean return of the training episodes each member finished since the last
    (the metrics row of the call that ends at the round: one call per round), and 1 and 2
    devices give the same rounds, fitness and copies."""
    import json

    import jax

    from jaxrl_dist.trainer import train

    config = _tiny("ppo", env=CORRIDOR, total_timesteps=4 * 16 * 12, updates_per_call=3,
                   eval_episodes=4, **HOST_PBT)
    runs = {d: train(config, tmp_path / f"d{d}", devices=jax.devices()[:d], progress=False)
            for d in (1, 2)}
    assert runs[1]["pbt"]["rounds"] == 3 and runs[1]["pbt"]["copies"]
    assert runs[2]["pbt"]["copies"] == runs[1]["pbt"]["copies"]
    np.testing.assert_allclose(runs[2]["pbt"]["fitness"], runs[1]["pbt"]["fitness"], rtol=1e-5)
    rows = [json.loads(line) for line in (tmp_path / "d1" / "metrics.jsonl").open()]
    rounds = [r for r in rows if r.get("event") == "pbt_round"]
    assert [r["updates"] for r in rounds] == [3, 6, 9]
    for r in rounds:
        trained = {x["member"]: x["episode_return"] for x in rows
                   if x.get("updates") == r["updates"] and "member" in x and "event" not in x}
        assert all(r["eligible"]) and r["fitness"] == pytest.approx(
            [trained[m] for m in range(4)], rel=1e-5), r


def test_overlap_actors_with_pbt_is_one_line(plugin, tmp_path):
    import jax

    from jaxrl_dist.errors import UserError
    from jaxrl_dist.trainer import train

    config = _tiny("ppo", env=CORRIDOR, overlap_actors=True, **HOST_PBT)
    with pytest.raises(UserError) as error:
        train(config, tmp_path / "run", devices=jax.devices()[:2], progress=False)
    message = str(error.value)
    assert len(message.splitlines()) == 1 and "overlap_actors with pbt" in message, message
    assert not (tmp_path / "run").exists()


def test_host_population_blocks_and_an_uneven_split_is_one_line():
    """Each process's members and environments are one block of the [members, envs] grid;
    a process holding part of one member row and part of another is refused."""
    from jaxrl_dist.actors import process_block
    from jaxrl_dist.errors import ConfigError

    class Grid:   # a sharding's addressable blocks, as jax gives them
        def __init__(self, blocks):
            self.blocks = blocks

        def addressable_devices_indices_map(self, shape):
            return {i: (slice(m0, m1), slice(e0, e1))
                    for i, (m0, m1, e0, e1) in enumerate(self.blocks)}

    assert process_block(Grid([(0, 2, 0, 4)]), 4, 4) == ((0, 2), (0, 4))
    assert process_block(Grid([(2, 3, 4, 8), (2, 3, 0, 4)]), 4, 8) == ((2, 3), (0, 8))
    assert process_block(Grid([(1, 2, 2, 4), (0, 1, 2, 4)]), 2, 4) == ((0, 2), (2, 4))
    with pytest.raises(ConfigError, match="population.member_devices") as error:
        process_block(Grid([(0, 1, 0, 4), (0, 1, 4, 8), (1, 2, 0, 4)]), 3, 8)
    assert len(str(error.value).splitlines()) == 1


def test_replicate_learn_for_a_population_is_one_line(tmp_path):
    import jax

    from jaxrl_dist.errors import UserError
    from jaxrl_dist.trainer import train

    with pytest.raises(UserError) as error:
        train(_tiny("ppo", replicate_learn=True, population={"seeds": [0, 1]}),
              tmp_path / "run", devices=jax.devices()[:2], progress=False)
    message = str(error.value)
    words = ["replicate_learn applies to a single run", "population"]
    assert len(message.splitlines()) == 1 and all(w in message for w in words), message
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_exception_in_a_users_env_on_one_rank_ends_the_job(tmp_path):
    start = time.monotonic()
    proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "1",
                         "configs/gymnasium_cartpole.yaml", *HOST_ARGS,
                         "--set", "env=gymnasium:jaxrl_test/Faulty-v0",
                         "--run-dir", str(tmp_path / "run")],
                        JAXRL_TEST_FAULTY_RANK="1", JAXRL_TEST_FAULTY_STEPS="60", **PLUGIN)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "rank 1 " in proc.stderr and "exited with code 1" in proc.stderr
    assert "simulator fault: joint 3 exploded" in proc.stderr and "Traceback" in proc.stderr
    assert "host_plugin.py" in proc.stderr   # the environment's own frames
    assert time.monotonic() - start < 150


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_hung_async_environment_is_stopped_by_the_step_timeout(tmp_path):
    start = time.monotonic()
    proc, _ = train_cli(tmp_path / "run", "--set", "env=gymnasium:jaxrl_test/Hangs-v0",
                        "--set", "env_kwargs={vectorization: async, step_timeout: 2}",
                        devices=1, args=HOST_ARGS, config="configs/gymnasium_cartpole.yaml",
                        JAXRL_TEST_FAULTY_RANK="0", JAXRL_TEST_FAULTY_STEPS="30", **PLUGIN)
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr.strip().splitlines()[-1]
    assert "jaxrl_test/Hangs-v0: a step took longer than 2 s" in err, proc.stderr[-3000:]
    assert time.monotonic() - start < 90


def _killed_then_resumed_twice(run, devices, args):
    """``configs/gymnasium_cartpole.yaml`` with ``args`` killed with -9 after update 6, then
    resumed from its last checkpoint twice (the run and a copy of it): each resume's
    summary.json."""
    cfg = "configs/gymnasium_cartpole.yaml"
    proc, _ = train_cli(run, devices=devices, args=args, config=cfg, JAXRL_FAULT="kill@0:6",
                        **PLUGIN)
    assert proc.returncode == -9, proc.stderr[-3000:]
    copy = run.parent / f"{run.name}_copy"
    shutil.copytree(run, copy)
    resumed = []
    for path in (run, copy):
        proc, _ = train_cli(path, "--resume", devices=devices, args=args, config=cfg,
                            **PLUGIN)
        assert proc.returncode == 0, proc.stderr[-3000:]
        said = proc.stdout + proc.stderr
        assert re.search(r"resuming at [36]\b", said), said[-2000:]
        assert "started afresh: actors" in said
        summary = json.loads((path / "summary.json").read_text())
        assert summary["env_steps"] == 768
        resumed.append(summary)
    return resumed


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_kill_9_then_resume_reseeds_fresh_episodes_deterministically(tmp_path):
    cfg = "configs/gymnasium_cartpole.yaml"
    finished = [summary["param_fingerprint"]
                for summary in _killed_then_resumed_twice(tmp_path / "run", 1, HOST_ARGS)]
    assert finished[0] == finished[1]   # re-seeded from (seed, update): the same episodes
    _, summary = train_cli(tmp_path / "straight", devices=1, args=HOST_ARGS, config=cfg,
                           **PLUGIN)
    assert summary["param_fingerprint"] != finished[0]   # fresh episodes after the resume


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_processes_on_cpus_with_other_vector_extensions_are_refused(tmp_path):
    """MuJoCo, numpy and XLA:CPU give other bits with and without AVX-512: a job whose
    processes differ there would drift apart, so it is refused at start-up, naming them."""
    from jaxrl_dist.integrity import local_vector_extensions

    mine = local_vector_extensions()
    other = "sse4_1 sse4_2" if mine != "sse4_1 sse4_2" else "sse4_1"
    proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "1",
                         "configs/gymnasium_cartpole.yaml", *HOST_ARGS,
                         "--run-dir", str(tmp_path / "run"), "--no-progress"],
                        JAXRL_FAKE_CPU_FLAGS=f"1:{other}", **PLUGIN)
    assert proc.returncode == 2, proc.stderr[-3000:]
    want = (f"processes run on CPUs with different vector extensions (rank(s) 0: "
            f"{mine or 'unknown'}; rank(s) 1: {other})")
    assert want in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigterm_saves_on_every_process_and_resumes(tmp_path):
    """SIGTERM to a 2-process host-env job: both ranks stop at the same update with status
    preempted and exit 75, the checkpoint is where they stopped, and --resume (here on 1
    process x 2 devices) finishes the run."""
    import json
    import subprocess

    from helpers import _env, sigterm_after_rows

    run = tmp_path / "run"
    long_run = [*HOST_ARGS, "--set", "total_timesteps=64000", "--set", "checkpoint_every=0"]
    launcher = subprocess.Popen(
        [sys.executable, "-m", "jaxrl_dist.launch", "--nproc-per-node", "2",
         "--cpu-devices-per-proc", "1", "configs/gymnasium_cartpole.yaml", *long_run,
         "--run-dir", str(run), "--no-progress"],
        env=_env(**PLUGIN), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err = sigterm_after_rows(launcher, run, 1)
    assert launcher.returncode == 75, err[-3000:]
    stopped = summaries(run / "logs")
    assert stopped[0]["status"] == stopped[1]["status"] == "preempted"
    assert stopped[0]["env_steps"] == stopped[1]["env_steps"] < 64000
    assert stopped[0]["param_fingerprint"] == stopped[1]["param_fingerprint"]
    _, meta = params_of(run)
    assert meta["updates"] * 64 == stopped[0]["env_steps"]   # saved where they stopped
    proc, resumed = train_cli(run, "--resume", devices=2, args=long_run,
                              config="configs/gymnasium_cartpole.yaml", timeout=240, **PLUGIN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resuming at {meta['updates']}" in proc.stderr
    assert resumed["env_steps"] == 64000 and resumed["status"] == "completed"
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))


def test_episode_sums_are_the_per_step_running_sums():
    """The host actors' vectorised episode statistics equal summing step by step, episodes
    that span rollouts included."""
    from jaxrl_dist.actors import episode_sums

    rng = np.random.default_rng(0)
    for i in range(100):
        T, n = (1 if i % 4 == 0 else rng.integers(2, 40)), rng.integers(1, 9)   # T=1: its own path
        reward = rng.normal(size=(T, n)).astype(np.float32)
        done = rng.random((T, n)) < rng.random()
        ret0, len0 = rng.normal(size=n), rng.integers(0, 50, n)
        ret, length, want_r, want_l = ret0.copy(), len0.copy(), [], []
        for t in range(T):
            ret, length = ret + reward[t], length + 1
            want_r.append(np.where(done[t], ret, 0.0))
            want_l.append(np.where(done[t], length, 0))
            ret, length = np.where(done[t], 0.0, ret), np.where(done[t], 0, length)
        got = episode_sums(reward, done, ret0, len0)
        np.testing.assert_allclose(got[0], np.stack(want_r), rtol=1e-6, atol=1e-5)
        np.testing.assert_array_equal(got[1], np.stack(want_l))
        np.testing.assert_allclose(got[2], ret, rtol=1e-9, atol=1e-9)
        np.testing.assert_array_equal(got[3], length)
        assert got[0].dtype == np.float32 and got[1].dtype == np.int32
        if T == 1:   # one step: exactly the step's own sums
            np.testing.assert_array_equal(got[0], np.stack(want_r).astype(np.float32))
            np.testing.assert_array_equal(got[2], ret)


def test_a_host_rollout_is_a_plain_loop_of_act_and_step(tmp_path):
    """What the host actors' rollout keeps (packed parameters and outputs, buffers unpacked once
    per rollout, the environment's action read as a view) is exactly a plain loop: ``act`` on
    the unpacked parameters, one call per step, and the environments stepped with its action.
    MountainCarContinuous charges the action it is given (unclipped) in its reward, so handing
    it the stored Gaussian sample instead of the clipped environment action fails here."""
    import time as _time

    import jax

    from jaxrl_dist import keys, trainer

    run = trainer.setup(config=_tiny("ppo", env="gymnasium:MountainCarContinuous-v0"),
                        run_dir=tmp_path / "run", resume=False,
                        env=None, env_params=None, devices=jax.devices()[:1], progress=False,
                        start=_time.perf_counter())
    host = run.driver.actors
    reference = host.spec.host(host.stop - host.start, False)
    try:
        obs = reference.reset(host._seeds(
            [keys.host_env_seeds_key(k, 0) for k in host.seed_keys], host.start, host.stop))
        np.testing.assert_array_equal(obs, host.obs)
        local = host._local(run.state.train)
        acting = host.agent.acting(local)
        noise = host._noise(local.key, host.row_ids)
        act = jax.jit(host._act_shapes)
        want_obs, want_action, want_extras, want_reward = [], [], [], []
        for t in range(host.T):
            action, _, extras, env_action = act(acting, host.carry, obs, noise, np.int32(t))
            out = reference.step(np.asarray(env_action))
            want_obs.append(obs)
            want_action.append(np.asarray(action))
            want_extras.append(jax.tree.map(np.asarray, extras))
            want_reward.append(out.reward)
            obs = out.obs
        got = jax.device_get(host.unpack(host.collect(run.state.train)))
    finally:
        reference.close()
        host.close()
    np.testing.assert_array_equal(got.steps.obs, np.stack(want_obs))
    np.testing.assert_array_equal(got.steps.action, np.stack(want_action))
    np.testing.assert_array_equal(got.steps.reward, np.stack(want_reward))
    np.testing.assert_array_equal(got.last_obs, obs)
    for name, value in got.steps.extras.items():
        np.testing.assert_array_equal(value, np.stack([e[name] for e in want_extras]))


GRU = ["--set", "ppo.network.cell=gru", "--set", "ppo.network.cell_size=16",
       "--set", "ppo.network.actor_hidden=[16]", "--set", "ppo.network.critic_hidden=[16]"]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_recurrent_ppo_on_host_envs_is_the_same_on_1_and_2_processes(tmp_path):
    """A GRU policy on a host environment: the host rollout hands ``learn`` the carry it
    started from, and the replay reproduces the rollout's log-probs (first_ratio_deviation
    ~0). One cell shared by actor and critic: 2 processes through the launcher (learning the
    whole batch on each device, replicate_learn's auto) give 1 process x 2 devices' replicated
    parameters bit for bit, 1 device's to float tolerance; a cell each (the critic's carries
    kept in the learner's data, held whole on every device): the same."""
    cfg = "configs/gymnasium_cartpole.yaml"
    shared = [*HOST_ARGS, *GRU, "--set", "ppo.network.shared=true"]
    apart = [*HOST_ARGS, *GRU, "--set", "ppo.network.shared=false"]
    runs = {}
    for name, devices, args in (("d1", 1, shared),
                                ("r2", 2, [*shared, "--set", "replicate_learn=true"]),
                                ("a2", 2, [*apart, "--set", "replicate_learn=true"])):
        proc, runs[name] = train_cli(tmp_path / name, devices=devices, args=args, config=cfg,
                                     **PLUGIN)
        assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "d1" / "metrics.jsonl").read_text().splitlines()]
    assert all(abs(r["first_ratio_deviation"]) < 1e-5 for r in rows), rows
    for name, args, same in (("p2", shared, "r2"), ("q2", apart, "a2")):
        proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "1", cfg,
                             *args, "--run-dir", str(tmp_path / name)], **PLUGIN)
        assert proc.returncode == 0, proc.stderr[-3000:]
        ranks = summaries(tmp_path / name / "logs")
        assert ranks[0]["param_fingerprint"] == ranks[1]["param_fingerprint"] == \
            runs[same]["param_fingerprint"], name
    assert max_rel_diff(params_of(tmp_path / "d1")[0], params_of(tmp_path / "r2")[0]) <= 1e-4


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_recurrent_ppo_on_host_envs_resumes_and_overlaps(tmp_path):
    """kill -9, then --resume twice from copies of the run: fresh episodes start fresh carries
    (the critic's, kept in the learner's data, included) and both resumes end on the same
    parameters; the overlapped mode trains a recurrent policy too."""
    cfg = "configs/gymnasium_cartpole.yaml"
    args = [*HOST_ARGS, *GRU, "--set", "ppo.network.shared=false"]
    run = tmp_path / "run"
    proc, _ = train_cli(run, devices=1, args=args, config=cfg, JAXRL_FAULT="kill@0:6",
                        **PLUGIN)
    assert proc.returncode == -9, proc.stderr[-3000:]
    shutil.copytree(run, tmp_path / "copy")
    finished = []
    for path in (run, tmp_path / "copy"):
        proc, summary = train_cli(path, "--resume", devices=1, args=args, config=cfg, **PLUGIN)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert re.search(r"resuming at [36]\b", proc.stdout + proc.stderr)
        assert summary["env_steps"] == 768
        finished.append(summary["param_fingerprint"])
    assert finished[0] == finished[1]
    proc, summary = train_cli(tmp_path / "overlap", devices=2, config=cfg, **PLUGIN,
                              args=[*args, "--set", "overlap_actors=true"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary["status"] == "completed" and np.isfinite(summary["eval_return"])


def test_a_metrics_row_is_timed_when_its_calls_ended(plugin, tmp_path, monkeypatch):
    """A host call steps its environments before it returns, and its row is logged after the
    NEXT call: the row's ``time_s`` is when its own calls ended. Each call here takes 0.8 s of
    host work more: the first row comes one call (not two) into the loop, and every interval
    between rows holds a call's 0.8 s, the last too (timed at the log, the last row followed the
    one before it by the final evaluation's time only)."""
    import time

    import jax

    from jaxrl_dist import actors
    from jaxrl_dist.trainer import train

    collect = actors.HostActors._collect

    def slow(self, *args, **kwargs):
        time.sleep(0.8)
        return collect(self, *args, **kwargs)

    monkeypatch.setattr(actors.HostActors, "_collect", slow)
    config = _tiny("ppo", env=CORRIDOR, updates_per_call=1)
    summary = train(config, tmp_path / "run", devices=jax.devices()[:1], progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").open()]
    times = [r["time_s"] for r in rows if "sps" in r]
    phases = summary["time_s"]
    loop_start = phases["start_up"] + phases["compile_and_init"] + phases["first_save"]
    assert len(times) == 4 and 0.8 <= times[0] - loop_start < 1.55, (times, phases)
    assert all(b - a >= 0.78 for a, b in zip(times, times[1:])), times
