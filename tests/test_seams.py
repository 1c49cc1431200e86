"""The learner seams are real: a second algorithm (tests/toy_learner.py, registered from outside
the package) runs through the trainer, checkpoints, populations and the launcher, none of which
know it; ``learn`` works without collecting; a run directory alone rebuilds the policy; a
checkpoint written before the learner shape still resumes exactly."""

import json
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest

import toy_learner  # noqa: F401 (registers algo "reinforce")
from helpers import TINY, at_training_flags, max_rel_diff, run_launcher, summaries
from jaxrl_dist import config as config_lib
from jaxrl_dist import population, sharding
from jaxrl_dist import sizes as sizes_lib
from jaxrl_dist.checkpoint import Checkpointer, read_checkpoint
from jaxrl_dist.envs import make_env
from jaxrl_dist.programs import make_learner
from jaxrl_dist.trainer import train

TOY = dict(algo="reinforce", env="CartPole-v1", seed=1, num_envs=4, total_timesteps=4 * 16 * 8,
           updates_per_call=4, checkpoint_every=4, checkpoint_minutes=0, eval_episodes=4,
           compile_cache=None, reinforce=dict(num_steps=16, learning_rate=0.05))


def _toy(**overrides):
    return config_lib.from_dict({**TOY, **overrides})


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """The toy learner trained in this process on 2 devices, with checkpoints every 4 updates."""
    run_dir = tmp_path_factory.mktemp("toy") / "run"
    summary = train(_toy(), run_dir, devices=jax.devices()[:2], progress=False)
    return run_dir, summary


def test_toy_learner_runs_through_the_trainer(toy_run):
    run_dir, summary = toy_run
    assert summary["status"] == "completed" and summary["updates"] == 8
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["updates"] for r in rows] == [4, 8]
    assert all(np.isfinite(r["loss"]) and r["episodes"] > 0 for r in rows)   # its own metric
    assert rows[-1]["episode_return"] > 0 and "eval/return_mean" in rows[-1]
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["param_fingerprint"] == summary["param_fingerprint"]


def test_toy_learner_resumes_exactly(toy_run, tmp_path):
    run_dir, summary = toy_run
    resumed = tmp_path / "resumed"
    shutil.copytree(run_dir, resumed)
    shutil.rmtree(resumed / "checkpoints" / "8")          # as if killed after update 4's save
    again = train(_toy(), resumed, resume=True, devices=jax.devices()[:2], progress=False)
    assert again["param_fingerprint"] == summary["param_fingerprint"]


@pytest.fixture(scope="module")
def toy_population(tmp_path_factory):
    """2 seeds x 2 learning rates of the toy learner as one program on 1 device."""
    config = _toy(population=dict(seeds=[5, 6],
                                  sweep={"reinforce.learning_rate": [0.01, 0.05]}))
    run_dir = tmp_path_factory.mktemp("toy_pop") / "pop"
    return config, run_dir, train(config, run_dir, devices=jax.devices()[:1], progress=False)


def test_toy_population_member_is_its_single_run(toy_population, tmp_path):
    config, run_dir, summary = toy_population
    assert summary["population"]["size"] == 4
    k = 3   # seed 6, learning rate 0.05 (seed varies fastest)
    train(population.member_config(config, k), tmp_path / "single", devices=jax.devices()[:1],
          progress=False)
    member = summary["members"][k]
    assert (member["seed"], member["reinforce.learning_rate"]) == (6, 0.05)
    pop_params, _ = read_checkpoint(run_dir / "checkpoints")
    one, _ = read_checkpoint(tmp_path / "single" / "checkpoints")
    pop_k = jax.tree.map(lambda x: x[k], pop_params["train"]["params"])
    assert max_rel_diff(pop_k, one["train"]["params"]) <= 1e-6
    assert len({m["param_fingerprint"] for m in summary["members"]}) == 4


@pytest.mark.slow
def test_toy_learner_through_the_launcher(toy_run, tmp_path):
    """2 processes x 1 device, the plugin named in the environment, equal to 1 process x 2."""
    run_dir, _ = toy_run
    cfg = tmp_path / "toy.yaml"
    cfg.write_text(json.dumps({k: v for k, v in TOY.items()}))   # JSON is YAML
    logs = tmp_path / "logs"
    proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "1",
                         "--log-dir", str(logs), str(cfg), "--run-dir", str(tmp_path / "run")],
                        timeout=240, JAXRL_DIST_PLUGINS="toy_learner",
                        PYTHONPATH=str(Path(__file__).parent))
    assert proc.returncode == 0, proc.stderr[-2000:]
    ranks = summaries(logs)
    assert sorted(ranks) == [0, 1] and ranks[0]["status"] == "completed"
    assert ranks[0]["param_fingerprint"] == ranks[1]["param_fingerprint"]
    two_procs, _ = read_checkpoint(tmp_path / "run" / "checkpoints")
    one_proc, _ = read_checkpoint(run_dir / "checkpoints")
    assert max_rel_diff(two_procs["train"]["params"], one_proc["train"]["params"]) <= 1e-5


def test_learn_without_collecting_is_the_fused_update():
    """``collect`` then ``learn`` (what host actors do) == one fused update, bitwise, for the
    programs the trainer compiles (at the suite's -O0 flags the two programs round apart:
    tests/at_training_flags.py)."""
    result = at_training_flags("learn_after_collect")
    assert result == {"params": [], "obs": True, "metrics": True}


@pytest.mark.parametrize("env_name", ["CartPole-v1", "Pendulum-v1"])
def test_act_jits_alone_on_one_device_and_agrees_with_policy(env_name):
    """What a host actor does: ``act`` jitted on one local device, outside any mesh. With zero
    noise it takes the policy's deterministic action (before the environment's clip)."""
    config = config_lib.from_dict({**TINY, "env": env_name})
    spec = make_env(env_name)
    learner = make_learner(config, sizes_lib.derive_sizes(config, 1), spec,
                           sharding.make_layout(jax.devices()[:1]))
    agent = learner.agent
    train_state = jax.device_get(learner.init(jax.random.PRNGKey(0)).train)
    obs = np.random.default_rng(1).normal(size=(5, *spec.obs_shape)).astype(np.float32)
    noise = np.zeros((5, spec.action_dim), np.float32)
    here = jax.local_devices()[1]
    action, carry, extras = jax.jit(agent.act)(
        *jax.device_put((agent.acting(train_state), (), obs, None, noise), here))
    assert action.devices() == {here}
    assert carry == () and extras["log_prob"].shape == (5,)
    expected, carry = agent.policy(agent.policy_params(train_state), (), obs, None)
    assert carry == ()
    np.testing.assert_allclose(np.asarray(agent.env_action(action)), np.asarray(expected),
                               rtol=1e-6)


@pytest.mark.parametrize("env_name", ["CartPole-v1", "Pendulum-v1"])
def test_run_dir_alone_rebuilds_the_policy(env_name, tmp_path):
    """A checkpoint's policy item + record give the learner's own policy, bit for bit, with no
    environment and no config (continuous actions clipped to the bounds)."""
    from jaxrl_dist import policy as policy_lib

    config = config_lib.from_dict({**TINY, "env": env_name,
                                   "ppo": {**TINY["ppo"], "normalize_observations": True}})
    spec = make_env(env_name)
    layout = sharding.make_layout(jax.devices()[:1])
    learner = make_learner(config, sizes_lib.derive_sizes(config, 1), spec, layout)
    state, _ = learner.update(learner.init(jax.random.PRNGKey(0)), 2)
    agent = learner.agent
    ckpt = Checkpointer(tmp_path / "run" / "checkpoints", policy_params=agent.policy_params)
    record = policy_lib.record(config.algo, config_lib.to_dict(config)[config.algo], spec)
    ckpt.save(state, {"updates": 2, "policy": record, "members": None})
    ckpt.close()

    loaded = policy_lib.load(tmp_path / "run")
    obs = np.random.default_rng(0).normal(size=(64, *spec.obs_shape)).astype(np.float32) * 3
    expected, _ = jax.jit(agent.policy)(agent.policy_params(state.train), (), obs, None)
    np.testing.assert_array_equal(loaded(obs), np.asarray(expected))
    action, carry = loaded.act(obs, loaded.initial_carry(64))   # the carry-taking form
    np.testing.assert_array_equal(action, np.asarray(expected))
    assert carry == () and not loaded.recurrent
    assert loaded.spec.obs_shape == spec.obs_shape and loaded.step == 2
    if spec.continuous:
        assert np.all(np.abs(loaded(obs * 100)) <= 2.0)


def test_population_run_dir_needs_a_member(toy_run, toy_population):
    from jaxrl_dist import policy as policy_lib
    from jaxrl_dist.checkpoint import CheckpointError

    run_dir, _ = toy_run
    toy_policy = policy_lib.load(run_dir)            # the toy learner's policy, too
    assert toy_policy.algo == "reinforce" and toy_policy(np.zeros((2, 4))).shape == (2,)
    _, pop_dir, _ = toy_population
    with pytest.raises(CheckpointError, match="member=0..3"):
        policy_lib.load(pop_dir)
    assert policy_lib.load(pop_dir, member=1)(np.zeros((3, 4))).shape == (3,)


def test_checkpoint_from_before_the_learner_shape_resumes_exactly(tmp_path):
    """tests/data/v1_cartpole_run: update 0 of ``configs/cartpole.yaml`` at 5,120 steps, written
    by commit abd6829 (state ``RunState(train, envs)``, top-level num_steps and network).
    tests/data/v1_cartpole_final_params.npz: that version's parameters after resuming it to the
    end. The bits depend on the CPU (the same code ends with fingerprint 4ce41be5... on one
    2-core AMD EPYC VM and a8771224... on another, old and new code alike), so the parameters
    are compared to float tolerance."""
    run = tmp_path / "v1"
    shutil.copytree(Path(__file__).parent / "data" / "v1_cartpole_run", run)
    config = config_lib.load(run / "config.yaml")
    summary = train(config, run, resume=True, devices=jax.devices()[:1], progress=False)
    assert summary["updates"] == 10
    old = np.load(Path(__file__).parent / "data" / "v1_cartpole_final_params.npz")
    state, _ = read_checkpoint(run / "checkpoints")
    new = {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(v) for path, v in
           jax.tree_util.tree_flatten_with_path(state["train"]["params"])[0]}
    assert sorted(new) == sorted(old.files)
    assert max_rel_diff(new, {k: old[k] for k in old.files}) <= 1e-4
