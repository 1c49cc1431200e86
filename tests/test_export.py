"""``python -m jaxrl_dist.export``: every network the trainer builds (feed-forward, recurrent
PPO stepping its carry, SAC's, TD3's and CrossQ's actors), as ONNX (and StableHLO), acts as
``policy.load`` does; a mismatch writes nothing; bad input is one line. A plug-in algorithm
(tests/toy_learner.py) exports through its registry record's emitter, and one without an
emitter is a one-line error.

Policies are built without training: the learner's own parameter tree with every leaf drawn at
random (biases, LayerNorm scales and normalisation moments included, so a parameter mapped to
the wrong place shows), checked at batch 1, 2 and 7 by the exporter itself."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import onnx
import onnxruntime
import pytest

from helpers import TINY
from jaxrl_dist import agents, sharding, typed
from jaxrl_dist import config as config_lib
from jaxrl_dist import policy as policy_lib
from jaxrl_dist.checkpoint import Checkpointer
from jaxrl_dist.envs import EnvSpec, make_env
from jaxrl_dist.export import __main__ as cli
from jaxrl_dist.export import graph, parity
from jaxrl_dist.export.exporter import config_hash, export_policy
from jaxrl_dist.export.graph import ExportError
from jaxrl_dist.sizes import Sizes
from jaxrl_dist.types import RunState

ROOT = Path(__file__).resolve().parent.parent


def _env(name, obs_shape, action_dim, continuous=False, low=None, high=None, masked=False,
         obs_dtype="float32"):
    return dict(name=name, obs_shape=list(obs_shape), action_dim=action_dim,
                continuous=continuous, action_low=low, action_high=high, masked=masked,
                max_episode_steps=100, obs_dtype=obs_dtype)


def _random_like(shapes, seed):
    """Every leaf random: kernels ~ N(0, 1/fan_in), the rest ~ N(0, 0.1); variances > 0."""
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        name = jax.tree_util.keystr(path)
        if "var" in name:
            return rng.uniform(0.2, 4.0, leaf.shape).astype(np.float32)
        scale = 1 / np.sqrt(np.prod(leaf.shape[:-1])) if "kernel" in name else 0.1
        return (rng.normal(size=leaf.shape) * scale).astype(np.float32)
    return jax.tree_util.tree_map_with_path(draw, shapes)


def make_policy(algo, section, env, seed=0):
    """(Policy, its checkpoint record): the learner's policy tree, shaped by eval_shape (no
    initialiser runs), filled at random."""
    algorithm = agents.get(algo)
    spec = EnvSpec.from_description(env)
    sizes = Sizes(num_devices=1, local_envs=1, steps_per_env=8, batch_size=8, num_updates=1,
                  updates_per_call=1)
    agent = algorithm.agent_factory()(typed.build(algorithm.section, section, f"{algo}."),
                                      sizes, spec, sharding.make_layout(jax.devices()[:1]))

    def policy_tree(key):
        return agent.policy_params(agent.init(key, agent.init_params(key), {})[0])
    params = _random_like(jax.eval_shape(policy_tree, jax.random.PRNGKey(0)), seed)
    record = policy_lib.record(algo, section, spec)
    deployed, spec = policy_lib.make_deployment(record)       # as policy_lib.load builds it
    return policy_lib.Policy(policy_lib.feed_forward(deployed), params, spec, algo, 0,
                             jax.jit(deployed.policy), deployed.init_carry), record


def _policy_actions(policy, obs, mask=None):
    """``policy`` in batches of 7, the size the exporter's parity check compiled."""
    chunks = [policy(obs[i:i + 7], None if mask is None else mask[i:i + 7])
              for i in range(0, len(obs), 7)]
    return np.concatenate(chunks)


def _session(path):
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _ops(path):
    return {node.op_type for node in onnx.load(str(path)).graph.node}


def _export(tmp_path, algo, section, env, opset=17, name="policy.onnx"):
    policy, record = make_policy(algo, section, env)
    result = export_policy(policy, record, tmp_path / name, opset=opset)
    return policy, result


# ---------------------------------------------------------------- a run directory, end to end

@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    """A CartPole PPO run directory as the trainer leaves one (its meta and policy items),
    checkpoints 0 and 3 with different parameters, exported by the command line."""
    config = config_lib.from_dict(TINY)
    spec = make_env(config.env)
    section = config_lib.to_dict(config)["ppo"]
    record = policy_lib.record("ppo", section, spec)
    run_dir = tmp_path_factory.mktemp("export") / "run"
    ckpt = Checkpointer(run_dir / "checkpoints", policy_params=lambda train: train)
    for step in (0, 3):
        params = make_policy("ppo", section, record["env"], seed=step)[0].params
        ckpt.save(RunState(params, (), ()),
                  {"updates": step, "config": config_lib.to_dict(config), "policy": record,
                   "members": None})
    ckpt.close()
    assert cli.main([str(run_dir)]) == 0
    return run_dir, config


def test_the_command_line_writes_the_files_with_metadata_and_symbolic_batch(cartpole_run):
    run_dir, config = cartpole_run
    model = onnx.load(str(run_dir / "policy.onnx"))
    props = {p.key: p.value for p in model.metadata_props}
    assert props["env_id"] == "CartPole-v1" and props["algorithm"] == "ppo"
    assert props["config_hash"] == config_hash(config_lib.to_dict(config))
    assert props["jaxrl_dist_version"] == "0.1.0" and props["checkpoint_step"] == "3"
    assert json.loads(props["observation_space"]) == {"shape": [4], "dtype": "float32"}
    assert json.loads(props["action_space"])["n"] == 2
    assert model.opset_import[0].version == 17
    [obs] = model.graph.input
    assert obs.name == "obs" and obs.type.tensor_type.shape.dim[0].dim_param == "batch"
    assert [o.name for o in model.graph.output] == ["actions"]

    loaded = policy_lib.load(run_dir)
    observations = parity.sampled_observations(loaded.spec, 64, seed=5)
    got = _session(run_dir / "policy.onnx").run(["actions"], {"obs": observations})[0]
    np.testing.assert_array_equal(got, loaded(observations))
    exported = jax.export.deserialize((run_dir / "policy.stablehlo").read_bytes())
    np.testing.assert_array_equal(np.asarray(exported.call(observations)), got)


def test_an_existing_default_file_is_kept_and_step_picks_the_checkpoint(cartpole_run, tmp_path,
                                                                        capsys):
    run_dir, _ = cartpole_run
    before = (run_dir / "policy.onnx").read_bytes()
    assert cli.main([str(run_dir)]) == 2
    assert "exists; pass -o" in capsys.readouterr().err
    assert (run_dir / "policy.onnx").read_bytes() == before

    out = tmp_path / "step0.onnx"
    out.write_text("an older export")                                       # -o replaces
    assert cli.main([str(run_dir), "--step", "0", "-o", str(out), "--opset", "11"]) == 0
    observations = parity.sampled_observations(policy_lib.load(run_dir).spec, 64, seed=6)
    got = _session(out).run(["actions"], {"obs": observations})[0]
    np.testing.assert_array_equal(got, policy_lib.load(run_dir, step=0)(observations))
    assert not np.array_equal(got, policy_lib.load(run_dir)(observations))


def test_the_example_plays_the_episodes_the_policy_plays(cartpole_run):
    """examples/onnx_play.py (no jax) on Gymnasium's CartPole returns what policy.load
    returns on the same seeds."""
    import gymnasium

    run_dir, _ = cartpole_run
    seeds = [0, 1, 2]
    code = ("import runpy, sys; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__'); "
            "assert 'jax' not in sys.modules and 'jaxrl_dist' not in sys.modules")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "examples/onnx_play.py"),
                          str(run_dir / "policy.onnx"), "--episodes", "3", "--seed", "0"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    printed = [float(line.split()[-1]) for line in out.stdout.splitlines()
               if line.startswith("seed ")]

    loaded, env, expected = policy_lib.load(run_dir), gymnasium.make("CartPole-v1"), []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(int(loaded(obs[None])[0]))
            total, done = total + reward, terminated or truncated
        expected.append(total)
    assert printed == expected and len(printed) == 3


def test_the_example_steps_a_recurrent_policy_on_hidden_velocities(tmp_path):
    """configs/cartpole_pomdp_gru.yaml's kind of run (a GRU observing [x, theta]) through the
    command line: the metadata names the carry and ``observation_indices``, and the example,
    feeding back the carry and only those entries, returns what ``Policy.act`` does playing
    Gymnasium's CartPole on the same seeds."""
    import runpy

    import gymnasium

    data = {**TINY, "env_kwargs": {"hide_velocities": True},
            "ppo": {**TINY["ppo"], "network": {"actor_hidden": [16], "critic_hidden": [16],
                                               "cell": "gru", "cell_size": 8}}}
    config = config_lib.from_dict(data)
    spec = make_env(config.env, env_kwargs={"hide_velocities": True})
    section = config_lib.to_dict(config)["ppo"]
    record = policy_lib.record("ppo", section, spec)
    run_dir = tmp_path / "pomdp"
    ckpt = Checkpointer(run_dir / "checkpoints", policy_params=lambda train: train)
    ckpt.save(RunState(make_policy("ppo", section, record["env"], seed=4)[0].params, (), ()),
              {"updates": 1, "config": config_lib.to_dict(config), "policy": record,
               "members": None})
    ckpt.close()
    assert cli.main([str(run_dir)]) == 0
    props = _session(run_dir / "policy.onnx").get_modelmeta().custom_metadata_map
    assert json.loads(props["observation_indices"]) == [0, 2]
    assert json.loads(props["observation_space"])["shape"] == [2]

    seeds = [0, 1, 2]
    printed = runpy.run_path(str(ROOT / "examples/onnx_play.py"))["play"](
        str(run_dir / "policy.onnx"), seeds)
    loaded, env, expected = policy_lib.load(run_dir), gymnasium.make("CartPole-v1"), []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        carry, total, done = loaded.initial_carry(1), 0.0, False
        while not done:
            action, carry = loaded.act(obs[None, [0, 2]], carry)
            obs, reward, terminated, truncated, _ = env.step(int(action[0]))
            total, done = total + reward, terminated or truncated
        expected.append(total)
    assert printed == expected


def test_the_example_plays_a_sac_actor_on_mujoco_as_the_policy_acts(tmp_path):
    """A SAC actor for gymnasium:HalfCheetah-v5 (continuous actions, bounds in the graph)
    exported and played by examples/onnx_play.py (the task from the file's metadata): on every
    observation of its two 1000-step episodes the Policy acts as the graph did, to float
    rounding (1 ulp apart, the chaotic physics then carries the episodes apart: returns
    of a random actor are not compared)."""
    import runpy

    pytest.importorskip("mujoco")

    env = make_env("gymnasium:HalfCheetah-v5").describe()
    section = {"network": {"actor_hidden": [32, 32], "critic_hidden": [8]}}
    policy, result = _export(tmp_path, "sac", section, env)
    steps = []
    returns = runpy.run_path(str(ROOT / "examples/onnx_play.py"))["play"](
        str(result.onnx_path), [0, 1], record=steps)
    assert len(steps) == 2000 and np.all(np.isfinite(returns))
    observations = np.stack([o for o, _ in steps]).astype(np.float32)
    played = np.stack([a for _, a in steps])
    np.testing.assert_allclose(played, _policy_actions(policy, observations), atol=1e-5, rtol=0)
    assert played.shape == (2000, 6) and np.ptp(played) > 0.1 and np.all(np.abs(played) <= 1)


def test_a_mismatch_fails_in_one_line_and_writes_nothing(cartpole_run, tmp_path, monkeypatch,
                                                         capsys):
    run_dir, _ = cartpole_run
    real_dense = graph.dense

    def off_by_a_bit(g, x, path, bias=True):   # the head's bias moved: a wrong graph
        out = real_dense(g, x, path, bias)
        return g.op("Add", out, g.const([0.0, 5.0])) if path.endswith("Dense_2") else out
    monkeypatch.setattr(graph, "dense", off_by_a_bit)
    out = tmp_path / "bad.onnx"
    assert cli.main([str(run_dir), "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "largest |difference| 1" in err, err
    assert list(tmp_path.iterdir()) == []


def test_bad_input_is_one_line(cartpole_run, tmp_path, monkeypatch, capsys):
    run_dir, _ = cartpole_run
    cases = {
        (str(tmp_path / "nowhere"),): "no run directory",
        (str(tmp_path),): "no checkpoint directory",
        (str(run_dir), "--member", "1", "-o", str(tmp_path / "m.onnx")): "single run",
        (str(run_dir), "--step", "99", "-o", str(tmp_path / "s.onnx")): "no checkpoint 99 in",
        (str(run_dir), "--opset", "9", "-o", str(tmp_path / "o.onnx")): "--opset must be in 11..",
    }
    for argv, message in cases.items():
        assert cli.main(list(argv)) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err
    import importlib.util
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnxruntime" else find_spec(name, *a))
    assert cli.main([str(run_dir)]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: exporting needs onnxruntime: pip install 'jaxrl_dist[export]'")
    assert not list(tmp_path.glob("*.onnx"))


def test_real_observations_come_from_gymnax_and_gymnasium():
    spec = EnvSpec.from_description(_env("CartPole-v1", [4], 2))
    for env in ("CartPole-v1", "gymnasium:CartPole-v1"):
        obs = parity.real_observations({"env": env}, spec)
        assert obs.shape == (7, 4) and obs.dtype == np.float32
        assert len({tuple(row) for row in obs}) == 7
        assert np.abs(obs[:, [0, 2]]).max() < 0.25   # a cart near the middle, a pole upright
    assert parity.real_observations({"env": "brax:ant"}, spec) is None


def test_a_population_member_needs_member(tmp_path, capsys):
    env = _env("CartPole-v1", [4], 2)
    members = [make_policy("ppo", {}, env, seed=s) for s in (1, 2)]
    record = members[0][1]
    stacked = jax.tree.map(lambda *x: np.stack(x), *(p.params for p, _ in members))
    ckpt = Checkpointer(tmp_path / "pop" / "checkpoints", policy_params=lambda train: train)
    ckpt.save(RunState(stacked, (), ()), {"updates": 1, "policy": record, "members": 2})
    ckpt.close()
    assert cli.main([str(tmp_path / "pop")]) == 2
    assert "population of 2 members: pass --member 0..1" in capsys.readouterr().err
    assert cli.main([str(tmp_path / "pop"), "--member", "1"]) == 0
    observations = parity.sampled_observations(members[1][0].spec, 35, seed=7)
    got = _session(tmp_path / "pop" / "policy-member1.onnx").run(["actions"],
                                                                 {"obs": observations})[0]
    np.testing.assert_array_equal(got, _policy_actions(members[1][0], observations))


# ------------------------------------------------------------- every network the trainer builds

def test_continuous_clipped_gaussian_with_observation_normalisation(tmp_path):
    """Pendulum's shape: normalisation and its clip at 10 inside the graph, the mean clipped
    to the bounds."""
    env = _env("Pendulum-v1", [3], 1, continuous=True, low=[-0.5], high=[0.5])
    section = {"normalize_observations": True, "network": {"actor_hidden": [16, 16]}}
    policy, result = _export(tmp_path, "ppo", section, env)
    observations = parity.sampled_observations(policy.spec, 252, seed=3) * 10
    got = _session(result.onnx_path).run(["actions"], {"obs": observations})[0]
    np.testing.assert_allclose(got, _policy_actions(policy, observations), atol=1e-5, rtol=0)
    assert got.dtype == np.float32 and got.shape == (252, 1)
    assert np.abs(got).max() == 0.5 and np.abs(got).min() < 0.5   # some clipped, by the graph
    assert {"Clip", "Sqrt", "Max", "Min"} <= _ops(result.onnx_path)


def test_continuous_tanh_squashed_into_asymmetric_bounds(tmp_path):
    env = _env("brax:toy", [5], 2, continuous=True, low=[-1.0, 0.0], high=[2.0, 0.5])
    section = {"network": {"actor_hidden": [16], "bounded_actions": "tanh", "activation": "relu"}}
    policy, result = _export(tmp_path, "ppo", section, env)
    observations = parity.sampled_observations(policy.spec, 126, seed=4)
    got = _session(result.onnx_path).run(["actions"], {"obs": observations})[0]
    np.testing.assert_allclose(got, _policy_actions(policy, observations), atol=1e-5, rtol=0)
    assert np.all(got >= [-1.0, 0.0]) and np.all(got <= [2.0, 0.5])
    assert result.max_diff <= 1e-5


def test_sac_tanh_mean_rescaled_into_asymmetric_bounds_with_normalisation(tmp_path):
    """SAC's deterministic action: tanh of the mean head (the log-std head mapped and unused),
    from [-1, 1] onto asymmetric bounds, on normalised observations."""
    env = _env("brax:toy", [5], 2, continuous=True, low=[-1.0, 0.0], high=[2.0, 0.5])
    section = {"normalize_observations": True,
               "network": {"actor_hidden": [16, 16], "critic_hidden": [8]}}
    policy, result = _export(tmp_path, "sac", section, env)
    observations = parity.sampled_observations(policy.spec, 126, seed=5) * 10
    got = _session(result.onnx_path).run(["actions"], {"obs": observations})[0]
    np.testing.assert_allclose(got, _policy_actions(policy, observations), atol=1e-5, rtol=0)
    assert np.all(got >= [-1.0, 0.0]) and np.all(got <= [2.0, 0.5]) and got.shape == (126, 2)
    assert np.ptp(got[:, 1]) > 0.05                       # not a constant: the graph acts
    assert result.max_diff <= 1e-5 and {"Tanh", "Clip"} <= _ops(result.onnx_path)


def test_td3_actor_output_on_flattened_grid_observations(tmp_path):
    """TD3's deterministic action: the actor's tanh output on [H, W] observations (flattened),
    rescaled onto the bounds; no observation normalisation, at opset 11."""
    env = _env("Pendulum-v1", [2, 3], 1, continuous=True, low=[-2.0], high=[2.0])
    section = {"network": {"actor_hidden": [16], "activation": "tanh"}}
    policy, result = _export(tmp_path, "td3", section, env, opset=11)
    observations = parity.sampled_observations(policy.spec, 63, seed=6)
    got = _session(result.onnx_path).run(["actions"], {"obs": observations})[0]
    np.testing.assert_allclose(got, _policy_actions(policy, observations), atol=1e-5, rtol=0)
    assert np.all(np.abs(got) <= 2.0) and got.shape == (63, 1) and result.max_diff <= 1e-5


def test_crossq_batch_renorm_in_eval_mode_by_the_running_statistics(tmp_path):
    """CrossQ's deterministic action: SAC's head after batch renormalisation before the first
    and after each hidden layer, in eval mode: by the running statistics (drawn at random
    here, as the layers' scales and biases, so a mean or variance mapped to the wrong layer
    shows), on normalised observations; and without the actor's renormalisation, SAC's MLP
    under flax's ``params`` at opset 11."""
    env = _env("brax:toy", [5], 2, continuous=True, low=[-1.0, 0.0], high=[2.0, 0.5])
    section = {"normalize_observations": True,
               "network": {"actor_hidden": [16, 16], "critic_hidden": [8]}}
    policy, record = make_policy("crossq", section, env)
    # scales near 1 (not the draw's ~N(0, 0.1)), so three layers do not flatten the action
    params = jax.tree_util.tree_map_with_path(
        lambda path, x: x + 1.0 if "scale" in jax.tree_util.keystr(path) else x, policy.params)
    policy = dataclasses.replace(policy, params=params)
    result = export_policy(policy, record, tmp_path / "policy.onnx", opset=17)
    assert set(params["actor"]["batch_stats"]) == {f"BatchRenorm_{i}" for i in range(3)}
    observations = parity.sampled_observations(policy.spec, 126, seed=7) * 10
    got = _session(result.onnx_path).run(["actions"], {"obs": observations})[0]
    np.testing.assert_allclose(got, _policy_actions(policy, observations), atol=1e-5, rtol=0)
    assert np.all(got >= [-1.0, 0.0]) and np.all(got <= [2.0, 0.5]) and got.shape == (126, 2)
    assert np.ptp(got[:, 1]) > 0.05 and result.max_diff <= 1e-5
    assert {"Tanh", "Clip", "Reciprocal"} <= _ops(result.onnx_path)
    plain = {"network": {"actor_hidden": [16], "critic_hidden": [8], "batch_norm_actor": False}}
    policy, result = _export(tmp_path, "crossq", plain, env, opset=11, name="plain.onnx")
    assert policy.params["actor"]["batch_stats"] == {} and result.max_diff <= 1e-5


def test_every_activation_the_configs_allow(tmp_path):
    """gelu (tanh approximation), silu, elu through continuous outputs (1e-5), at opset 11."""
    env = _env("Pendulum-v1", [3], 2, continuous=True, low=[-50.0] * 2, high=[50.0] * 2)
    for activation in ("gelu", "silu", "elu"):
        section = {"network": {"actor_hidden": [16, 16], "activation": activation}}
        _, result = _export(tmp_path, "ppo", section, env, opset=11, name=f"{activation}.onnx")
        assert result.max_diff <= 1e-5
    _, result = _export(tmp_path, "dqn", {"network": {"hidden": [16], "activation": "swish"}},
                        _env("CartPole-v1", [4], 2), name="swish.onnx")
    assert "Sigmoid" in _ops(result.onnx_path)


def test_masked_logits_never_choose_an_illegal_action(tmp_path):
    """A task with legal-action masks (Jumanji's, a [H, W]-shaped observation through the MLP
    torso): ``mask`` is a second input, and the argmax is over the legal actions."""
    env = _env("jumanji:Snake-v1", [6, 5], 4, masked=True)
    policy, result = _export(tmp_path, "ppo", {"network": {"torso": "mlp",
                                                           "actor_hidden": [16]}}, env)
    session = _session(result.onnx_path)
    assert [i.name for i in session.get_inputs()] == ["obs", "mask"]
    observations = parity.sampled_observations(policy.spec, 252, seed=8)
    mask = parity.sampled_masks(policy.spec, 252, seed=8)
    got = session.run(["actions"], {"obs": observations, "mask": mask})[0]
    np.testing.assert_array_equal(got, _policy_actions(policy, observations, mask))
    assert mask[np.arange(252), got].all()
    unmasked = session.run(["actions"], {"obs": observations,
                                         "mask": np.ones_like(mask)})[0]
    assert (unmasked != got).any()   # the masks mattered


@pytest.mark.parametrize("kind", ["minatar", "atari"])
def test_cnn_torsos(kind, tmp_path):
    """MinAtar's 3x3 SAME convolution (PPO) and Nature DQN's 8/4/3 strided VALID ones over
    uint8 frames (DQN, dueling): ONNX Conv in NCHW, flattened in flax's HWC order."""
    if kind == "minatar":
        env = _env("Breakout-MinAtar", [10, 10, 4], 3)
        policy, result = _export(tmp_path, "ppo", {"network": {"actor_hidden": [32],
                                                               "cnn_channels": [8, 8]}}, env)
    else:
        env = _env("ale:Pong", [84, 84, 4], 6, obs_dtype="uint8")
        network = {"hidden": [32], "cnn_channels": [32, 64, 64], "cnn_kernels": [8, 4, 3],
                   "cnn_strides": [4, 2, 1], "dueling": True}
        policy, result = _export(tmp_path, "dqn", {"network": network}, env)
    assert "Conv" in _ops(result.onnx_path) and "Slice" not in _ops(result.onnx_path)
    observations = parity.sampled_observations(policy.spec, 35, seed=9)
    got = _session(result.onnx_path).run(["actions"], {"obs": observations})[0]
    np.testing.assert_array_equal(got, _policy_actions(policy, observations))
    assert len(set(got.tolist())) > 1


@pytest.mark.parametrize("opset", [11, 17])
def test_layer_norm_q_networks(opset, tmp_path):
    """PQN's MinAtar CNN with LayerNorm after the convolution and every dense layer, and a
    DQN MLP with LayerNorm and a dueling head: opset 17 writes LayerNormalization, 11 the same
    statistics in primitive ops."""
    pqn_section = {"network": {"hidden": [32], "layer_norm": True, "cnn_channels": [8]}}
    policy, result = _export(tmp_path, "pqn", pqn_section, _env("Asterix-MinAtar", [10, 10, 4], 5),
                             opset=opset)
    observations = parity.sampled_observations(policy.spec, 63, seed=10)
    got = _session(result.onnx_path).run(["actions"], {"obs": observations})[0]
    np.testing.assert_array_equal(got, _policy_actions(policy, observations))
    assert ("LayerNormalization" in _ops(result.onnx_path)) == (opset >= 17)
    dqn_section = {"network": {"hidden": [16, 16], "layer_norm": True, "dueling": True}}
    _, result = _export(tmp_path, "dqn", dqn_section, _env("CartPole-v1", [4], 2), opset=opset,
                        name="dqn.onnx")
    assert onnx.load(str(result.onnx_path)).opset_import[0].version == opset


def test_parameters_the_graph_does_not_use_are_refused():
    """A tree with more than the feed-forward network (a recurrent core, a plug-in's) is an
    error, not a graph that silently ignores part of it."""
    policy, record = make_policy("dqn", {"network": {"hidden": [8]}}, _env("CartPole-v1", [4], 2))
    params = {**policy.params, "GRUCell_0": {"kernel": np.zeros((8, 8), np.float32)}}
    with pytest.raises(ExportError, match="does not map .GRUCell_0/kernel"):
        graph.build_model(record, params, 17)


# ------------------------------------------------------------------- recurrent PPO (GRU, LSTM)

def _recurrent(cell, **network):
    return {"normalize_observations": True,
            "network": {"actor_hidden": [16], "cell": cell, "cell_size": 8, **network}}


def _step_both(policy, path, steps=12, batch=7, seed=11, masked=False):
    """``steps`` steps of ``batch`` environments through onnxruntime (its carry outputs fed
    back) and ``Policy.act``, rows 1 and 4 reset at step 5 (ONNX: zeros, as the metadata
    says); the ONNX actions, and the largest |difference| of carries and actions."""
    session = _session(path)
    names = [i.name for i in session.get_inputs() if i.name.endswith("_in")]
    carry = policy.initial_carry(batch)
    state = {i.name: np.zeros((batch, i.shape[1]), np.float32) for i in session.get_inputs()
             if i.name in names}
    obs, mask = parity.sampled_sequences(policy.spec, steps, batch, seed)
    worst, actions = 0.0, []
    for t in range(steps):
        if t == 5:
            done = np.isin(np.arange(batch), [1, 4])
            carry = policy.reset_carry(carry, done)
            state = {n: np.where(done[:, None], 0.0, c).astype(np.float32)
                     for n, c in state.items()}
        m = None if mask is None else mask[t]
        expected, carry = policy.act(obs[t], carry, m)
        got, *out = session.run(["actions", *(n[:-3] + "_out" for n in names)],
                                {"obs": obs[t], **({"mask": m} if masked else {}), **state})
        state = dict(zip(names, out))
        for mine, theirs in zip(out, jax.tree.leaves(carry)):
            worst = max(worst, float(np.abs(mine - theirs).max()))
        worst = max(worst, float(np.abs(got.astype(np.float64) - expected).max()))
        actions.append(got)
    return np.stack(actions), worst


def test_gru_discrete_steps_its_carry(tmp_path):
    """A GRU policy is one step ``obs, h_in -> actions, h_out``: stepped by hand through
    onnxruntime with resets it acts as ``Policy.act``; the metadata names the carry; the
    StableHLO file is the step ``(obs, carry) -> (actions, carry)``."""
    env = _env("CartPole-v1", [4], 3)
    policy, result = _export(tmp_path, "ppo", _recurrent("gru"), env)
    assert policy.recurrent and result.sequence_length == parity.SEQUENCE_LENGTH
    session = _session(result.onnx_path)
    assert [i.name for i in session.get_inputs()] == ["obs", "h_in"]
    assert [o.name for o in session.get_outputs()] == ["actions", "h_out"]
    assert session.get_inputs()[1].shape == ["batch", 8]
    props = session.get_modelmeta().custom_metadata_map
    assert json.loads(props["carry"]) == [{"name": "h", "input": "h_in", "output": "h_out",
                                           "shape": [8], "dtype": "float32",
                                           "initial": "zeros"}]
    assert {"MatMul", "Sigmoid", "Tanh", "Sub"} <= _ops(result.onnx_path)
    assert not {"GRU", "LSTM"} & _ops(result.onnx_path)
    actions, worst = _step_both(policy, result.onnx_path)
    assert worst <= 1e-5
    assert len(set(actions.ravel().tolist())) > 1

    exported = jax.export.deserialize(result.stablehlo_path.read_bytes())
    obs = parity.sampled_observations(policy.spec, 7, seed=12)
    h = np.random.default_rng(0).normal(size=(7, 8)).astype(np.float32)
    got_actions, got_h = exported.call(obs, h)
    expected_actions, expected_h = policy.act(obs, h)
    np.testing.assert_array_equal(np.asarray(got_actions), expected_actions)
    np.testing.assert_allclose(np.asarray(got_h), expected_h, atol=1e-5, rtol=0)


def test_lstm_continuous_tanh_at_opset_11(tmp_path):
    """An LSTM's carry (c, h) is two inputs and two outputs, in the Policy's order."""
    env = _env("Pendulum-v1", [3], 2, continuous=True, low=[-2.0, 0.0], high=[2.0, 1.0])
    policy, result = _export(tmp_path, "ppo", _recurrent("lstm", bounded_actions="tanh"), env,
                             opset=11)
    session = _session(result.onnx_path)
    assert [i.name for i in session.get_inputs()] == ["obs", "c_in", "h_in"]
    assert [o.name for o in session.get_outputs()] == ["actions", "c_out", "h_out"]
    assert onnx.load(str(result.onnx_path)).opset_import[0].version == 11
    actions, worst = _step_both(policy, result.onnx_path)
    assert worst <= 1e-5 and result.max_diff <= 1e-5
    assert np.all(actions >= [-2.0, 0.0]) and np.all(actions <= [2.0, 1.0])


def test_gru_with_action_masks(tmp_path):
    """A shared cell with a layer after it (``head_hidden``, JaxMARL's SMAX network) too."""
    env = _env("jumanji:Snake-v1", [6, 5], 4, masked=True)
    policy, result = _export(tmp_path, "ppo", _recurrent("gru", torso="mlp", shared=True,
                                                         head_hidden=[8, 6]), env)
    assert [i.name for i in _session(result.onnx_path).get_inputs()] == ["obs", "mask", "h_in"]
    actions, worst = _step_both(policy, result.onnx_path, masked=True)
    assert worst <= 1e-5
    _, mask = parity.sampled_sequences(policy.spec, 12, 7, 11)
    assert np.take_along_axis(mask, actions[..., None], -1).all()


def test_a_wrong_recurrent_weight_fails_and_writes_nothing(tmp_path, monkeypatch):
    """W_hz 1% off: the first step (h = 0) agrees, the carry after it does not."""
    policy, record = make_policy("ppo", _recurrent("gru"), _env("CartPole-v1", [4], 2))
    take = graph.Graph.param

    def off(self, path):
        value = take(self, path)
        return value * 1.01 if path == "actor/rnn/hz/kernel" else value
    monkeypatch.setattr(graph.Graph, "param", off)
    with pytest.raises(parity.ParityError) as info:
        export_policy(policy, record, tmp_path / "bad.onnx")
    message = str(info.value)
    assert info.value.exit_code == 1 and "\n" not in message
    assert "on sampled observations differs from the trained policy at batch 1, step 1 of 6: "\
        "largest |difference|" in message and message.endswith("nothing written")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------- a plug-in algorithm, through its record

@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """REINFORCE (tests/toy_learner.py), registered from outside the package by
    ``JAXRL_DIST_PLUGINS``, trained briefly through the trainer."""
    from jaxrl_dist.trainer import train

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(agents.PLUGINS_VAR, "toy_learner")
        config = config_lib.from_dict(dict(
            algo="reinforce", env="CartPole-v1", seed=1, num_envs=4, total_timesteps=4 * 16 * 4,
            updates_per_call=4, checkpoint_every=4, checkpoint_minutes=0, eval_episodes=4,
            compile_cache=None, reinforce=dict(num_steps=16, learning_rate=0.05)))
        run_dir = tmp_path_factory.mktemp("toy") / "run"
        summary = train(config, run_dir, devices=jax.devices()[:1], progress=False)
    assert summary["status"] == "completed"
    return run_dir


def test_a_plugin_algorithm_exports_through_its_emitter(toy_run, monkeypatch, capsys):
    """The toy learner's record names ``export="toy_learner:emitter"``, written with the
    builder's public API: the command line writes it after parity on sampled and real
    observations, and onnxruntime acts as ``policy.load`` does."""
    monkeypatch.setenv(agents.PLUGINS_VAR, "toy_learner")
    assert cli.main([str(toy_run)]) == 0
    assert "parity with the trained policy at batch 1, 2, 7 on sampled and real " \
        "observations" in capsys.readouterr().out
    session = _session(toy_run / "policy.onnx")
    assert session.get_modelmeta().custom_metadata_map["algorithm"] == "reinforce"
    loaded = policy_lib.load(toy_run)
    observations = parity.sampled_observations(loaded.spec, 63, seed=13)
    got = session.run(["actions"], {"obs": observations})[0]
    np.testing.assert_array_equal(got, _policy_actions(loaded, observations))
    assert len(set(got.tolist())) > 1


def test_an_algorithm_without_an_emitter_is_one_line(toy_run, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(agents.PLUGINS_VAR, "toy_learner")
    toy = agents.get("reinforce")
    monkeypatch.setitem(agents._REGISTRY, "reinforce", toy._replace(export=""))
    assert cli.main([str(toy_run), "-o", str(tmp_path / "toy.onnx")]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: algorithm 'reinforce' has no ONNX emitter: give its Algorithm record "
        "export='module:function' (see agents/ppo/export.py)")
    assert list(tmp_path.iterdir()) == []
