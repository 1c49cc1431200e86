"""Recurrent PPO (``ppo.network.cell: gru | lstm``): the replay of every minibatch reproduces the
rollout (the PPO ratio is 1 at every step of an update's first minibatch, episode boundaries
included: the carry reset one step off, a known bug class of JAX implementations, shows up
there first), on 1 and 2 devices, with chunks, continuous actions and masks, and right after a
resume, and through the launcher on 2 processes, a rank killed and the job restarted; the same
parameters on 1 and 2 devices and 2 processes; a population member is its single run; a run
resumes exactly; one cell shared by actor and critic replays as exactly; the policy and
evaluation carry the state; config errors are one line.

The whole file (the memory task aside) takes ~55 s on 2 cores, mostly compiling; the tests
over ~5 s each are marked slow (tests/conftest.py's developer tier)."""

import json
import re
import shutil
from dataclasses import dataclass, replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import max_rel_diff, train_in_process
from jaxrl_dist import config as config_lib
from jaxrl_dist import sharding
from jaxrl_dist import sizes as sizes_lib
from jaxrl_dist.agents.ppo import update as ppo_update
from jaxrl_dist.checkpoint import read_checkpoint
from jaxrl_dist.config import ConfigError
from jaxrl_dist.envs import EnvError, make_env
from jaxrl_dist.programs import make_learner
from jaxrl_dist.trainer import train

# 4 updates of 4 envs x 16 steps; a 20-step time limit, so rollouts hold truncations as well as
# CartPole's terminations (and the truncation bootstrap runs).
RNN = dict(env="CartPole-v1", episode_length=20, seed=3, num_envs=4, total_timesteps=4 * 16 * 4,
           updates_per_call=2, eval_episodes=4, checkpoint_minutes=0,
           ppo=dict(num_steps=16, update_epochs=2, num_minibatches=2,
                    network=dict(actor_hidden=[16], critic_hidden=[16], cell="gru",
                                 cell_size=8)))
TOLERANCE = 1e-5   # |ratio - 1| of a faithful replay: float rounding (seen: <= 3e-7)


def _config(**overrides):
    data = json.loads(json.dumps(RNN))
    for key, value in overrides.items():
        node = data
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return config_lib.from_dict(data)


def _updates(config, devices, spec=None):
    """Every update's metrics ({name: [updates]}) and the final state, on ``devices``."""
    if spec is None:
        state, rows = train_in_process(config, devices)
    else:
        sizes = sizes_lib.derive_sizes(config, devices)
        learner = make_learner(config, sizes, spec, sharding.make_layout(jax.devices()[:devices]))
        state, rows = learner.init(jax.random.PRNGKey(config.seed)), []
        for _ in range(sizes.num_updates // config.updates_per_call):
            state, metrics = learner.update(state, config.updates_per_call)
            rows.append(sharding.to_host(metrics))
    metrics = {k: np.concatenate([np.atleast_1d(r[k]) for r in rows]) for k in rows[0]}
    return metrics, state


@dataclass(frozen=True)
class _MaskedCartPole:
    """CartPole with a third action (pushing left, like action 0) that is legal on even steps
    only: the replay must apply each step's own mask."""

    inner: Any

    def reset(self, key):
        return self.inner.reset(key)

    def step(self, key, state, action):
        return self.inner.step(key, state, jnp.minimum(action, 1))

    def action_mask(self, state):
        return jnp.array([True, True, state.time % 2 == 0])


@pytest.fixture(scope="module")
def one_and_two():
    config = _config()
    return {n: _updates(config, n) for n in (1, 2)}


@pytest.mark.parametrize("devices", [1, 2])
def test_first_minibatch_replays_the_rollout(one_and_two, devices):
    metrics, _ = one_and_two[devices]
    assert np.all(metrics["episodes"] > 0)   # episodes ended inside the rollouts
    assert np.max(metrics["first_ratio_deviation"]) <= TOLERANCE, metrics["first_ratio_deviation"]


def test_same_parameters_on_1_and_2_devices(one_and_two):
    (m1, s1), (m2, s2) = one_and_two[1], one_and_two[2]
    p1, p2 = sharding.to_host(s1.train.params), sharding.to_host(s2.train.params)
    assert max_rel_diff(p2, p1) <= 1e-4
    np.testing.assert_allclose(m2["episode_return_sum"], m1["episode_return_sum"], rtol=1e-5)
    # the critic's carries (the data slot) are per environment, sharded like them
    assert {s.data.shape[0] for s in s2.data.addressable_shards} == {2}
    np.testing.assert_allclose(np.asarray(s2.data), np.asarray(s1.data), atol=1e-4)
    init = make_learner(_config(), sizes_lib.derive_sizes(_config(), 1),
                        make_env("CartPole-v1", episode_length=20),
                        sharding.make_layout(jax.devices()[:1])).agent.init_params(
        jax.random.split(jax.random.PRNGKey(3), 3)[0])
    assert max_rel_diff(p1, init) > 1e-3   # training moved them: the comparison is not vacuous


@pytest.mark.parametrize("case", ["lstm-continuous-chunks",
                                  pytest.param("gru-masked-chunks-2dev", marks=pytest.mark.slow)])
def test_replay_with_chunks_continuous_actions_and_masks(case):
    if case.startswith("lstm"):
        config = _config(env="Pendulum-v1", episode_length=6,   # ends inside chunks too
                         **{"ppo.network.cell": "lstm", "ppo.sequence_length": 4})
        metrics, _ = _updates(config, 1)
    else:
        base = make_env("CartPole-v1", episode_length=20)
        spec = replace(base, adapter=_MaskedCartPole(base.adapter), action_dim=3, masked=True,
                       name="masked-cartpole")
        config = _config(**{"ppo.sequence_length": 8, "ppo.num_minibatches": 4})
        metrics, _ = _updates(config, 2, spec)
    assert np.all(metrics["episodes"] > 0)
    assert np.max(metrics["first_ratio_deviation"]) <= TOLERANCE, metrics["first_ratio_deviation"]


@pytest.mark.parametrize("shared", [True, False])
def test_layers_after_the_cell_replay_the_rollout(shared):
    """``network.head_hidden`` (JaxMARL's Dense + relu after the GRU): layers of their own in
    the actor's head and in the critic's (the shared cell's, or its own cell's), in order,
    replayed as acted."""
    config = _config(**{"ppo.network.shared": shared, "ppo.network.head_hidden": [8, 6]})
    metrics, state = _updates(config, 1)
    assert np.all(metrics["episodes"] > 0)
    assert np.max(metrics["first_ratio_deviation"]) <= TOLERANCE
    params = sharding.to_host(state.train.params)
    H = config.ppo.network.cell_size
    for name in ("actor", "critic"):
        assert params[name]["post_0"]["kernel"].shape == (H, 8)
        assert params[name]["post_1"]["kernel"].shape == (8, 6)
    assert params["critic"]["out"]["kernel"].shape == (6, 1)
    assert (set(params["critic"]) == {"post_0", "post_1", "out"}) == shared
    init = make_learner(config, sizes_lib.derive_sizes(config, 1),
                        make_env("CartPole-v1", episode_length=20),
                        sharding.make_layout(jax.devices()[:1])).agent.init_params(
        jax.random.split(jax.random.PRNGKey(3), 3)[0])
    for name in ("actor", "critic"):   # the value and policy losses reach those layers
        assert max_rel_diff(params[name]["post_1"], init[name]["post_1"]) > 1e-3
    init = make_learner(config, sizes_lib.derive_sizes(config, 1),
                        make_env("CartPole-v1", episode_length=20),
                        sharding.make_layout(jax.devices()[:1])).agent.init_params(
        jax.random.split(jax.random.PRNGKey(3), 3)[0])
    assert max_rel_diff(params["critic"]["post_0"], init["critic"]["post_0"]) > 1e-3


@pytest.mark.parametrize("shared", [True, False])
def test_the_layers_after_the_cell_start_orthogonal_at_their_gain(shared):
    """``network.head_gain``: JaxMARL's recurrent baselines start the layer after the GRU at
    orthogonal(2), every other hidden layer at sqrt 2 (the default here too)."""
    def singular_values(**overrides):
        config = _config(**{"ppo.network.shared": shared, "ppo.network.cell_size": 8,
                            "ppo.network.head_hidden": [8], **overrides})
        params = make_learner(config, sizes_lib.derive_sizes(config, 1),
                              make_env("CartPole-v1", episode_length=20),
                              sharding.make_layout(jax.devices()[:1])).agent.init_params(
            jax.random.PRNGKey(3))
        return {name: np.linalg.svd(np.asarray(params[name]["post_0"]["kernel"]))[1]
                for name in ("actor", "critic")}
    for name, values in singular_values().items():
        np.testing.assert_allclose(values, np.sqrt(2), rtol=1e-5, err_msg=name)
    for name, values in singular_values(**{"ppo.network.head_gain": 2.0}).items():
        np.testing.assert_allclose(values, 2.0, rtol=1e-5, err_msg=name)


@pytest.mark.slow
def test_a_shared_cell_replays_the_rollout_on_1_and_2_devices():
    """``network.shared``: the critic is an output layer on the actor's cell, read from the
    rollout's carries (no critic carry kept between updates), in chunks too; the replay is
    exact and the result topology-invariant, and the value loss trains the shared cell."""
    shared = {"ppo.network.shared": True, "ppo.sequence_length": 8, "ppo.num_minibatches": 4}
    (m1, s1), (m2, s2) = (_updates(_config(**shared), n) for n in (1, 2))
    for metrics in (m1, m2):
        assert np.all(metrics["episodes"] > 0)
        assert np.max(metrics["first_ratio_deviation"]) <= TOLERANCE
    p1, p2 = sharding.to_host(s1.train.params), sharding.to_host(s2.train.params)
    assert max_rel_diff(p2, p1) <= 1e-4
    assert s1.data == () and set(p1["critic"]) == {"out"} and "rnn" in p1["actor"]
    # without the critic's loss the shared cell ends elsewhere: the value loss reaches it
    m0, s0 = _updates(_config(**shared, **{"ppo.vf_coef": 0.0}), 1)
    rnn = lambda s: sharding.to_host(s.train.params)["actor"]["rnn"]  # noqa: E731
    assert max_rel_diff(rnn(s0), rnn(s1)) > 1e-3


@pytest.mark.slow
def test_a_carry_reset_one_step_off_is_caught(monkeypatch):
    """The check is not vacuous: resetting at the CURRENT step's done (the bug) breaks it."""
    def off_by_one(steps):
        return jnp.logical_or(steps.terminated, steps.truncated)
    monkeypatch.setattr(ppo_update, "episode_starts", off_by_one)
    metrics, _ = _updates(_config(**{"updates_per_call": 4}), 1)
    assert np.min(metrics["first_ratio_deviation"]) > 1e-3, metrics["first_ratio_deviation"]


@pytest.fixture(scope="module")
def recurrent_run(tmp_path_factory):
    """The 1-device config trained by the trainer, a checkpoint every 2 updates."""
    run_dir = tmp_path_factory.mktemp("rnn") / "run"
    config = _config(checkpoint_every=2)
    return config, run_dir, train(config, run_dir, devices=jax.devices()[:1], progress=False)


@pytest.mark.slow
def test_resume_is_exact_and_replays_right_after(recurrent_run, tmp_path):
    config, run_dir, summary = recurrent_run
    resumed = tmp_path / "resumed"
    shutil.copytree(run_dir, resumed)
    shutil.rmtree(resumed / "checkpoints" / "4")          # as if killed after update 2's save
    state, _ = read_checkpoint(resumed / "checkpoints")
    assert state["actors"]["carry"].shape == (4, 8) and state["data"].shape == (4, 8)
    assert np.any(state["actors"]["carry"] != 0)          # a carry in flight was saved
    again = train(config, resumed, resume=True, devices=jax.devices()[:1], progress=False)
    assert again["param_fingerprint"] == summary["param_fingerprint"]
    rows = [json.loads(x) for x in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert [r["updates"] for r in rows] == [2, 4]
    assert rows[-1]["first_ratio_deviation"] <= TOLERANCE   # the updates after the resume


def test_loaded_policy_and_evaluation_carry_the_state(recurrent_run):
    """``Policy.act`` steps the carry; evaluation equals playing the loaded policy by hand,
    carry and all, from the evaluation's own keys."""
    from jaxrl_dist import envs as envs_lib
    from jaxrl_dist import policy as policy_lib
    from jaxrl_dist import rollout
    from jaxrl_dist.errors import UserError
    from jaxrl_dist.evaluate import EVAL_STREAM

    config, run_dir, summary = recurrent_run
    policy = policy_lib.load(run_dir)
    assert policy.recurrent and policy.fn is None
    with pytest.raises(UserError, match="recurrent"):
        policy(np.zeros((2, 4)))
    with pytest.raises(UserError, match="recurrent"):
        policy_lib.make_policy_fn(read_checkpoint(run_dir / "checkpoints")[1]["policy"])
    carry = policy.initial_carry(config.eval_episodes)
    assert carry.shape == (4, 8) and not carry.any()

    spec = make_env("CartPole-v1", episode_length=20)
    key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(config.seed), EVAL_STREAM),
                             4)   # the update count of the final evaluation
    key_reset, key_steps = jax.random.split(key)
    ids = jnp.arange(config.eval_episodes)
    slots = jax.vmap(lambda k: envs_lib.reset(spec, k))(rollout.env_keys(key_reset, ids))
    ret, done, changed = np.zeros(4), np.zeros(4, bool), False
    for t in range(spec.max_episode_steps):
        keys = rollout.env_keys(jax.random.fold_in(key_steps, t), ids)
        action, next_carry = policy.act(slots.obs, carry)
        changed |= bool(np.any(next_carry != carry))
        slots, out = envs_lib.step(spec, envs_lib.step_keys(keys), slots, action, autoreset=False)
        ret += np.where(done, 0.0, np.asarray(out.reward))
        done |= np.asarray(out.terminated | out.truncated)
        carry = next_carry
    assert changed and done.all()
    assert summary["eval_return"] == pytest.approx(ret.mean(), rel=1e-6)
    fresh = policy.reset_carry(carry, np.array([True, False, True, False]))
    assert not fresh[0].any() and np.array_equal(fresh[1], carry[1])


@pytest.mark.slow
def test_population_member_is_its_single_run(one_and_two):
    config = _config(population=dict(seeds=[5, 3]))
    sizes = sizes_lib.derive_sizes(config, 1)
    layout = sharding.make_layout(jax.devices()[:1], members=2)
    learner = make_learner(config, sizes, make_env("CartPole-v1", episode_length=20), layout)
    keys = np.stack([np.asarray(jax.random.PRNGKey(seed)) for seed in (5, 3)])
    state = learner.init(layout.put(keys, layout.train))
    for _ in range(sizes.num_updates // config.updates_per_call):
        state, _ = learner.update(state, config.updates_per_call)
    member = jax.tree.map(lambda x: x[1], sharding.to_host(state.train.params))
    single = sharding.to_host(one_and_two[1][1].train.params)   # seed 3 on 1 device
    assert max_rel_diff(member, single) <= 1e-5


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_fused_cell_is_flax_cell(cell):
    """The replay's cell (gates side by side, inputs projected before the scan) computes what
    flax's cell computes with the same parameters, biases non-zero."""
    import flax.linen as nn

    from jaxrl_dist.agents.ppo.networks import cell_step, fuse_cell

    module = nn.GRUCell(8) if cell == "gru" else nn.OptimizedLSTMCell(8)
    x = jax.random.normal(jax.random.PRNGKey(1), (5, 3))
    h = jax.random.normal(jax.random.PRNGKey(2), (5, 8))
    carry = h if cell == "gru" else (0.5 * h, h)
    params = module.init(jax.random.PRNGKey(0), carry, x)["params"]
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(3), len(leaves))
    params = jax.tree.unflatten(tree, [p + 0.3 * jax.random.normal(k, p.shape)
                                       for p, k in zip(leaves, keys)])
    want = module.apply({"params": params}, carry, x)
    w = fuse_cell(cell, params)
    got = cell_step(cell, w, carry, x @ w.w_in + w.b_in)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_hidden_velocities_observe_x_and_theta():
    from jaxrl_dist import envs as envs_lib

    full, part = make_env("CartPole-v1"), make_env("CartPole-v1",
                                                  env_kwargs={"hide_velocities": True})
    assert part.obs_shape == (2,) and part.describe()["obs_shape"] == [2]
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    a, b = (jax.vmap(lambda k, s=s: envs_lib.reset(s, k))(keys) for s in (full, part))
    step_a, step_b = (jax.jit(lambda k, slots, act, s=s: envs_lib.step(s, k, slots, act))
                      for s in (full, part))
    for t in range(30):
        step_keys = envs_lib.step_keys(jax.random.split(jax.random.PRNGKey(t), 3))
        action = jnp.array([t % 2, 1, 0])
        a, out_a = step_a(step_keys, a, action)
        b, out_b = step_b(step_keys, b, action)
        np.testing.assert_array_equal(np.asarray(b.obs), np.asarray(a.obs)[:, [0, 2]])
        np.testing.assert_array_equal(np.asarray(out_b.final_obs),
                                      np.asarray(out_a.final_obs)[:, [0, 2]])
    with pytest.raises(EnvError, match="hide_velocities"):
        make_env("Breakout-MinAtar", env_kwargs={"hide_velocities": True})


@pytest.mark.parametrize("overrides,words", [
    ({"ppo.network.cell": "rnn"}, ["ppo.network.cell must be one of none, gru, lstm"]),
    ({"ppo.network.cell_size": 0}, ["ppo.network.cell_size"]),
    ({"ppo.sequence_length": 5}, ["ppo.sequence_length (5) must divide ppo.num_steps (16)"]),
    ({"ppo.network.cell": "none", "ppo.sequence_length": 8}, ["recurrent networks only"]),
    ({"ppo.num_minibatches": 3}, ["ppo.num_minibatches (3) must divide", "= 4"]),
    ({"ppo.network.cell": "none", "ppo.network.head_hidden": [8]},
     ["ppo.network.head_hidden are layers after a recurrent cell", "actor_hidden"]),
    ({"ppo.network.head_gain": 0.0}, ["ppo.network.head_gain must be a finite number > 0"]),
    ({"ppo.network.head_gain": float("inf")}, ["ppo.network.head_gain must be", "got inf"]),
    ({"ppo.network.cell": "none", "ppo.network.shared": True},
     ["ppo.network.shared shares the actor's recurrent cell", "cell to gru or lstm"]),
])
def test_bad_recurrent_config_is_one_line(overrides, words):
    with pytest.raises(ConfigError) as info:
        _config(**overrides)
    assert "\n" not in str(info.value)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_unsupported_combinations_are_one_line():
    with pytest.raises(ConfigError, match="unknown config key 'dqn.network.cell'"):
        config_lib.from_dict({"algo": "dqn", "env": "CartPole-v1",
                              "dqn": {"network": {"cell": "gru"}}})
    config = _config()
    layout = sharding.make_layout(jax.devices()[:1])
    sizes = sizes_lib.derive_sizes(config, 1)
    pool = replace(make_env("CartPole-v1"), adapter=None, pool=object(), autoreset="next_step")
    with pytest.raises(EnvError, match="cell=gru does not run on environments that reset a step"):
        make_learner(config, sizes, pool, layout)   # host environments train (test_host_envs)
    # each device must hold whole minibatch groups: 4 sequences over 4 devices, 2 minibatches
    with pytest.raises(ConfigError, match=r"must divide each device's sequences"):
        make_learner(config, sizes_lib.derive_sizes(config, 4),
                     make_env("CartPole-v1", episode_length=20),
                     sharding.make_layout(jax.devices()[:4]))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_memory_task_gru_learns_where_the_mlp_cannot(tmp_path):
    """CartPole observing [x, theta] only: configs/cartpole_pomdp_gru.yaml (one GRU shared by
    actor and critic), cut to 154k steps (seed 0 evaluates ~356 there; 16 seeds of the full
    config: docs/learning.md), and its MLP baseline."""
    results = {}
    for cell in ("gru", "none"):
        config = config_lib.load("configs/cartpole_pomdp_gru.yaml", [
            f"ppo.network.cell={cell}", f"ppo.network.shared={cell != 'none'}",
            "total_timesteps=153600"])
        results[cell] = train(config, tmp_path / cell, devices=jax.devices()[:1],
                              progress=False)["eval_return"]
    assert results["gru"] >= 200 and results["none"] <= 100, results


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_processes_replay_the_rollout_and_learn_what_two_devices_learn(one_and_two, tmp_path):
    """Through the launcher, 2 processes x 1 device, a checkpoint every update, rank 1 killed
    (SIGKILL) after its last update and the job restarted from update 2's or 3's checkpoint
    (carries included; saves are asynchronous, and each waits for the one before, so update
    2's is complete once update 3's starts): every update's first
    minibatch replays the rollout (ratio 1 at every step), those after the restart too, and the
    parameters are those of 1 process x 2 devices, uninterrupted."""
    from helpers import run_launcher, summaries
    net = RNN["ppo"]["network"]
    sets = [f"env={RNN['env']}", f"episode_length={RNN['episode_length']}", f"seed={RNN['seed']}",
            f"num_envs={RNN['num_envs']}", f"total_timesteps={RNN['total_timesteps']}",
            "updates_per_call=1", "checkpoint_minutes=0", "checkpoint_every=1",
            f"eval_episodes={RNN['eval_episodes']}",
            *(f"ppo.{k}={v}" for k, v in RNN["ppo"].items() if k != "network"),
            *(f"ppo.network.{k}={json.dumps(v)}" for k, v in net.items())]
    run = tmp_path / "run"
    proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "1",
                         "--max-restarts", "1", "configs/cartpole.yaml", "--run-dir", str(run),
                         "--no-progress", "--set", *sets], timeout=240,
                        JAXRL_FAULT="kill@1:4", JAXRL_FAULT_ONCE=str(tmp_path / "fired"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "restarting all local workers" in proc.stderr
    assert re.search(r"resuming at [23] ", (run / "logs" / "rank0.log").read_text())
    ranks = summaries(run / "logs")
    assert ranks[0]["param_fingerprint"] == ranks[1]["param_fingerprint"]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["updates"] for r in rows][-2:] == [3, 4], rows   # 3 and 4 ran after the restart
    assert max(r["first_ratio_deviation"] for r in rows) <= TOLERANCE, rows
    state, _ = read_checkpoint(run / "checkpoints")
    two_devices = sharding.to_host(one_and_two[2][1].train.params)
    assert max_rel_diff(state["train"]["params"], two_devices) <= 1e-5
