"""DQN and PQN: the replay buffer's n-step sampling, Q(lambda) targets, the global-mean
gradient, topology invariance with the buffer sharded over a FIXED shard count, exact resume
with the buffer in the checkpoint (and a refill without it), populations, and bad input."""

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import DQN, PQN, max_rel_diff, train_in_process
from jaxrl_dist import config as config_lib
from jaxrl_dist import population, sharding
from jaxrl_dist import sizes as sizes_lib
from jaxrl_dist.agents.replay import buffer as replay_lib
from jaxrl_dist.agents.pqn.learner import q_lambda_targets
from jaxrl_dist.agents.qnet import networks as qnet
from jaxrl_dist.checkpoint import read_checkpoint
from jaxrl_dist.config import ConfigError
from jaxrl_dist.envs import EnvError, make_env
from jaxrl_dist.gradients import global_mean_grad
from jaxrl_dist.programs import make_learner
from jaxrl_dist.sharding import DATA_AXIS, REPLICATED, SHARDED
from jaxrl_dist.trainer import train
from jaxrl_dist.types import Transition


def _config(base, **section):
    algo = base["algo"]
    return config_lib.from_dict({**base, algo: {**base[algo], **section}})


# ------------------------------------------------------------------------------ replay, targets

def _brute_force_nstep(reward, term, trunc, t, col, n, gamma, L, final_obs_stored):
    """The n-step target's parts for one sample, step by step (the definition)."""
    ret, discount = 0.0, gamma ** n
    boot_row, boot_final = (t + n) % L, False
    for j in range(n):
        row = (t + j) % L
        ret += gamma ** j * reward[row, col]
        if term[row, col]:
            return ret, 0.0, None, False
        if trunc[row, col]:
            if not final_obs_stored:
                return ret, 0.0, None, False
            return ret, gamma ** (j + 1), row, True
    return ret, discount, boot_row, boot_final


def test_a_resume_of_host_envs_ends_each_columns_newest_row_by_a_time_limit():
    """Host environments start new episodes on a resume: the row written last before it ends
    its episode by a time limit, so no n-step window sums rewards across the two episodes and
    it bootstraps from the observation it really reached (its final observation)."""
    from jaxrl_dist.types import Transition

    def rollout(first, reward):   # 4 steps of 2 environments, no end; obs = first + t
        t = jnp.arange(4, dtype=jnp.float32)[:, None] * jnp.ones((1, 2))
        obs = (first + t)[..., None]
        return Transition(obs=obs, action=jnp.zeros((4, 2), jnp.int32),
                          reward=jnp.full((4, 2), reward, jnp.float32),
                          terminated=jnp.zeros((4, 2), bool), truncated=jnp.zeros((4, 2), bool),
                          finished_return=None, finished_length=None, extras={},
                          final_obs=obs + 1)

    def windows(replay):   # every sample from row 2: (n-step return, discount, next obs)
        out = replay_lib.sample(replay, jax.random.PRNGKey(0), jnp.arange(1), 256, 3, 0.9)
        at = np.asarray(out.obs[:, 0]) == 2
        assert at.any()
        return {(round(float(r), 4), round(float(d), 4), float(o)) for r, d, o in zip(
            out.reward[at], out.discount[at], out.next_obs[at, 0])}

    replay = replay_lib.add(replay_lib.init(1, 8, 2, (1,), jnp.float32, True), rollout(0, 1.0))
    resumed = replay_lib.cut(replay, 3)
    assert np.asarray(resumed.truncated)[0, :4].tolist() == [[False] * 2] * 3 + [[True] * 2]
    spliced = replay_lib.add(replay, rollout(100, 10.0))   # a new episode after the resume
    assert windows(spliced) == {(10.0, 0.729, 101.0)}   # 1 + 0.9 + 0.81 x 10: across, wrong
    cut = replay_lib.add(resumed, rollout(100, 10.0))
    assert windows(cut) == {(1.9, 0.81, 4.0)}   # rows 2-3, bootstrapped from row 3's final obs


@pytest.mark.parametrize("final_obs_stored", [True, False])
def test_nstep_samples_match_the_definition(final_obs_stored):
    rng = np.random.default_rng(0)
    L, K, n, gamma, T = 12, 3, 3, 0.9, 4
    replay = replay_lib.init(2, L, K, (2,), jnp.float32, final_obs_stored)
    # 5 rollouts of T steps for 2 shards x 3 envs: the 12-row ring wraps (20 rows written)
    for step in range(5):
        obs = rng.normal(size=(T, 6, 2)).astype(np.float32)
        term = rng.random((T, 6)) < 0.15
        trunc = ~term & (rng.random((T, 6)) < 0.15)
        steps = Transition(obs=obs, action=rng.integers(0, 2, (T, 6)).astype(np.int32),
                           reward=rng.normal(size=(T, 6)).astype(np.float32), terminated=term,
                           truncated=trunc, finished_return=None, finished_length=None,
                           extras={}, final_obs=obs + 100.0)
        replay = replay_lib.add(replay, steps)
    assert int(replay.position[0]) == 20 % L and int(replay.rows[0]) == L
    batch = replay_lib.sample(replay, jax.random.PRNGKey(1), jnp.arange(2), 64, n, gamma)
    host = jax.tree.map(np.asarray, replay)
    rows_seen = set()
    for i in range(128):
        s = i // 64
        # find the sampled (row, col) from its stored observation (unique random floats)
        match = np.argwhere(np.all(host.obs[s] == np.asarray(batch.obs[i]), axis=-1))
        (t, col), = match
        assert (t - int(host.position[s])) % L < L - n   # only complete windows are sampled
        rows_seen.add(int(t))
        ret, discount, boot_row, from_final = _brute_force_nstep(
            host.reward[s], host.terminated[s], host.truncated[s], t, col, n, gamma, L,
            final_obs_stored)
        np.testing.assert_allclose(float(batch.reward[i]), ret, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(float(batch.discount[i]), discount, rtol=1e-6)
        if boot_row is not None:
            source = host.final_obs[s] if from_final else host.obs[s]
            np.testing.assert_array_equal(np.asarray(batch.next_obs[i]), source[boot_row, col])
        assert int(batch.action[i]) == host.action[s, t, col]
    assert len(rows_seen) >= 6   # spread over the ring, not one row


@pytest.mark.parametrize("final_obs_stored", [True, False])
def test_a_dropped_row_is_never_sampled_and_ends_the_window_before_it(final_obs_stored):
    """``env_nonfinite: reset`` marks a dropped step terminated AND truncated: a sample at it
    weighs 0; a window from the rows before it ends on the row before it, bootstrapped from
    the dropped row's observation (where that row arrived), never summing its reward."""
    T = 6   # one environment: obs t at row t; rewards 1; row 3 dropped (reward 0 stored)
    obs = np.arange(T, dtype=np.float32)[:, None, None]
    term = np.zeros((T, 1), bool)
    term[3] = True
    steps = Transition(obs=obs, action=np.zeros((T, 1), np.int32),
                       reward=np.where(term, 0.0, 1.0).astype(np.float32), terminated=term,
                       truncated=term.copy(), finished_return=None, finished_length=None,
                       extras={}, final_obs=obs + 1, valid=~term)
    replay = replay_lib.add(replay_lib.init(1, T, 1, (1,), jnp.float32, final_obs_stored),
                            steps)
    out = replay_lib.sample(replay, jax.random.PRNGKey(0), jnp.arange(1), 256, 2, 0.9, True)
    seen = {}
    for o, r, d, nxt, w in zip(*(np.asarray(x).reshape(256, -1)[:, 0] for x in (
            out.obs, out.reward, out.discount, out.next_obs, out.weight))):
        seen[float(o)] = (round(float(r), 4), round(float(d), 4), float(nxt), float(w))
    assert seen[0.0] == (1.9, 0.81, 2.0, 1.0)    # rows 0-1, from obs 2
    assert seen[1.0] == (1.9, 0.81, 3.0, 1.0)    # rows 1-2 end before the dropped row 3
    assert seen[2.0] == (1.0, 0.9, 3.0, 1.0)     # row 2 ends there: from row 3's obs
    assert seen[3.0][3] == 0.0                   # the dropped row itself weighs nothing
    plain = replay_lib.sample(replay, jax.random.PRNGKey(0), jnp.arange(1), 256, 2, 0.9)
    assert plain.weight is None   # without the mark's meaning: the replay as it always was


def test_uint8_storage_rounds_and_restores_grid_observations():
    replay = replay_lib.init(1, 8, 1, (3,), jnp.uint8, False)
    obs = np.array([[[0.0, 1.0, 255.0]]] * 8, np.float32)
    steps = Transition(obs=obs, action=np.zeros((8, 1), np.int32), reward=np.ones((8, 1)),
                       terminated=np.zeros((8, 1), bool), truncated=np.zeros((8, 1), bool),
                       finished_return=None, finished_length=None, extras={})
    replay = replay_lib.add(replay, steps)
    assert replay.obs.dtype == jnp.uint8 and replay.obs.nbytes == 8 * 3   # a byte each
    batch = replay_lib.sample(replay, jax.random.PRNGKey(0), jnp.arange(1), 4, 1, 0.99)
    np.testing.assert_array_equal(np.asarray(batch.obs), np.tile([0.0, 1.0, 255.0], (4, 1)))


def test_q_lambda_targets_match_the_recursion():
    rng = np.random.default_rng(2)
    T, E, gamma, lam = 7, 3, 0.95, 0.8
    reward, next_q = rng.normal(size=(T, E)), rng.normal(size=(T, E))
    term = rng.random((T, E)) < 0.2
    trunc = ~term & (rng.random((T, E)) < 0.2)
    done = term | trunc
    expected = np.zeros((T, E))
    for e in range(E):
        for t in reversed(range(T)):
            boot = next_q[t, e]
            if t < T - 1 and not done[t, e]:
                boot = (1 - lam) * next_q[t, e] + lam * expected[t + 1, e]
            expected[t, e] = reward[t, e] + (0.0 if term[t, e] else gamma * boot)
    got = q_lambda_targets(jnp.asarray(reward, jnp.float32), jnp.asarray(next_q, jnp.float32),
                           term, done, gamma, lam)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-5)
    # lambda = 0: one-step Q-learning targets
    one_step = q_lambda_targets(jnp.asarray(reward, jnp.float32),
                                jnp.asarray(next_q, jnp.float32), term, done, gamma, 0.0)
    np.testing.assert_allclose(np.asarray(one_step), reward + gamma * ~term * next_q, rtol=1e-5,
                               atol=1e-5)


# ------------------------------------------------------------------ the gradient, the topology

@pytest.mark.parametrize("num_devices", [1, 4])
def test_gradient_is_the_global_batch_mean(num_devices):
    """DQN's and PQN's gradient (global_mean_grad of their loss, under shard_map) equals the
    single-device gradient of the full batch's mean loss; raw gradients are compared, since
    Adam's first step would hide a scale error."""
    spec = make_env("CartPole-v1")
    net = qnet.make_q_network(config_lib.from_dict(DQN).dqn.network, spec)
    params = net.init(jax.random.PRNGKey(0))
    rng = np.random.default_rng(0)
    obs = jnp.asarray(rng.normal(size=(64, 4)), jnp.float32)
    action = jnp.asarray(rng.integers(0, 2, 64), jnp.int32)
    target = jnp.asarray(rng.normal(size=64), jnp.float32)

    def loss_fn(p, obs, action, target):
        q = jnp.take_along_axis(net.apply(p, obs), action[:, None], 1)[:, 0]
        loss = jnp.mean(jnp.square(q - target))
        return loss, loss

    expected = jax.grad(lambda p: loss_fn(p, obs, action, target)[0])(params)
    mesh = sharding.make_mesh(jax.devices()[:num_devices])
    fn = jax.jit(jax.shard_map(
        lambda p, o, a, t: global_mean_grad(loss_fn, p, DATA_AXIS, o, a, t)[:2],
        mesh=mesh, in_specs=(REPLICATED, SHARDED, SHARDED, SHARDED),
        out_specs=(REPLICATED, REPLICATED)))
    grads, loss = fn(params, obs, action, target)
    assert max_rel_diff(grads, expected) < 1e-5
    np.testing.assert_allclose(float(loss), float(loss_fn(params, obs, action, target)[0]),
                               rtol=1e-6)


def _train_params(config, num_devices):
    state, rows = train_in_process(config, num_devices)
    return sharding.to_host(state.train.params), rows, state


@pytest.mark.parametrize("base", [DQN, PQN], ids=["dqn", "pqn"])
def test_same_parameters_on_1_2_4_devices(base):
    """Same config + seed -> same parameters on 1, 2 and 4 devices: for DQN the buffer's 4
    shards are spread 4, 2 and 1 per device and serve the same batches."""
    config = config_lib.from_dict(base)
    results = {n: _train_params(config, n) for n in (1, 2, 4)}
    ref_params, ref_rows, ref_state = results[1]
    for n in (2, 4):
        params, rows, state = results[n]
        assert max_rel_diff(params, ref_params) <= 1e-4, n
        for row, ref in zip(rows, ref_rows):
            np.testing.assert_allclose(row["episodes"], ref["episodes"])
            np.testing.assert_allclose(row["loss"], ref["loss"], rtol=2e-4, atol=1e-6)
        if base is DQN:   # the buffer really is spread: each device holds 4 / n shards
            assert {s.data.shape[0] for s in state.data.obs.addressable_shards} == {4 // n}
    last = ref_rows[-1]
    assert np.all(last["loss"] > 0) and np.all(np.isfinite(last["loss"]))
    if base is DQN:
        assert last["learning"][-1] == 1.0 and ref_rows[0]["learning"][0] == 0.0  # warm-up
        assert last["replay_transitions"][-1] == 64                               # full
        assert np.sum([r["target_updates"] for r in ref_rows]) == 36 // 3   # 18 updates x 2


# ------------------------------------------------------------------ checkpoints, populations

@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory):
    """The tiny DQN trained in this process on 2 devices, a checkpoint every 5 updates."""
    run_dir = tmp_path_factory.mktemp("dqn") / "run"
    summary = train(config_lib.from_dict(DQN), run_dir, devices=jax.devices()[:2],
                    progress=False)
    return run_dir, summary


def test_checkpoint_holds_the_buffer_and_resumes_exactly(dqn_run, tmp_path):
    run_dir, summary = dqn_run
    assert summary["status"] == "completed" and summary["algo"] == "dqn"
    assert summary["checkpointed"] == ["train", "actors", "data"]
    assert summary["rebuilt_on_resume"] == []
    state, meta = read_checkpoint(run_dir / "checkpoints")
    assert state["data"]["obs"].shape == (4, 16, 1, 4)       # shards x rows x envs x obs
    assert np.all(state["data"]["rows"] == 16)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["updates"] for r in rows] == [5, 10, 15, 20]
    resumed = tmp_path / "resumed"
    shutil.copytree(run_dir, resumed)
    for late in ("15", "20"):                        # as if killed after update 10's save
        shutil.rmtree(resumed / "checkpoints" / late)
    again = train(config_lib.from_dict(DQN), resumed, resume=True, devices=jax.devices()[:2],
                  progress=False)
    assert again["param_fingerprint"] == summary["param_fingerprint"]


def test_without_the_buffer_a_resume_refills_it_first(dqn_run, tmp_path):
    config = _config(DQN, checkpoint_buffer=False)
    run_dir = tmp_path / "run"
    full = train(config, run_dir, devices=jax.devices()[:2], progress=False)
    assert full["checkpointed"] == ["train", "actors"]
    assert full["param_fingerprint"] == dqn_run[1]["param_fingerprint"]  # same training
    state, _ = read_checkpoint(run_dir / "checkpoints")
    assert "data" not in state or not state["data"]
    for late in ("15", "20"):
        shutil.rmtree(run_dir / "checkpoints" / late)
    resumed = train(config, run_dir, resume=True, devices=jax.devices()[:2], progress=False)
    assert resumed["updates"] == 20 and resumed["rebuilt_on_resume"] == ["data"]
    assert resumed["param_fingerprint"] != full["param_fingerprint"]   # refilled, not exact
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    after = [r for r in rows if r["updates"] > 10]
    # the refill: the 3rd update after the resume holds 24 transitions and learns again
    assert after[0]["learning"] == pytest.approx(3 / 5) and after[1]["learning"] == 1.0


def test_population_member_is_its_single_run(tmp_path):
    """2 seeds x 2 target periods x 2 learning rates in ONE program == each member's run.
    (Squared loss: early on, every TD error exceeds Huber's threshold, so its gradient would
    not depend on the targets, nor on the target period.)"""
    config = config_lib.from_dict({**DQN, "dqn": {**DQN["dqn"], "loss": "mse"}, "population": dict(
        seeds=[5, 6], sweep={"dqn.target_update_period": [2, 5],
                             "dqn.learning_rate": [1e-3, 3e-3]})})
    summary = train(config, tmp_path / "pop", devices=jax.devices()[:2], progress=False)
    assert summary["population"]["size"] == 8
    k = 6   # seed 5, target period 5, learning rate 3e-3 (seed varies fastest)
    member = summary["members"][k]
    assert (member["seed"], member["dqn.target_update_period"],
            member["dqn.learning_rate"]) == (5, 5, 3e-3)
    train(population.member_config(config, k), tmp_path / "single",
          devices=jax.devices()[:2], progress=False)
    pop, _ = read_checkpoint(tmp_path / "pop" / "checkpoints")
    one, _ = read_checkpoint(tmp_path / "single" / "checkpoints")
    assert max_rel_diff(jax.tree.map(lambda x: x[k], pop["train"]["params"]),
                        one["train"]["params"]) <= 1e-5
    assert len({m["param_fingerprint"] for m in summary["members"]}) == 8


# -------------------------------------------------------------------------------- bad input

BAD_CONFIG = [
    (dict(batch_size=128), ["dqn.buffer_size (64)", "smaller than one batch"]),
    (dict(learning_starts=1000, buffer_size=2000), ["learning_starts (1000)", "shorter than the run"]),
    (dict(n_step=40, learning_starts=0, buffer_size=168), ["n_step (40)", "never learn"]),
    (dict(learning_starts=100), ["learning_starts (100)", "exceeds dqn.buffer_size"]),
    (dict(n_step=20), ["too small for dqn.n_step (20)", "at least 88"]),
    (dict(buffer_shards=3, batch_size=15), ["num_envs (4)", "dqn.buffer_shards (3)"]),
    (dict(batch_size=18), ["dqn.batch_size (18)", "dqn.buffer_shards (4)"]),
    (dict(buffer_size=60), ["multiple of num_envs x dqn.num_steps (8)"]),
    (dict(target_tau=0.0), ["dqn.target_tau"]),
    (dict(epsilon_schedule="cosine"), ["dqn.epsilon_schedule", "linear, exponential"]),
    (dict(network=dict(activation="sigmoid")), ["dqn.network.activation"]),
]


@pytest.mark.parametrize("section,words", BAD_CONFIG, ids=[str(s) for s, _ in BAD_CONFIG])
def test_bad_dqn_config_is_one_line(section, words):
    with pytest.raises(ConfigError) as info:
        _config(DQN, **section)
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)


def test_bad_pqn_config_and_shape_changing_sweeps():
    with pytest.raises(ConfigError, match="pqn.num_steps .16. must be divisible"):
        _config(PQN, num_minibatches=3)
    with pytest.raises(ConfigError, match="'dqn.n_step' changes array shapes"):
        config_lib.from_dict({**DQN, "population": dict(sweep={"dqn.n_step": [1, 3]})})
    with pytest.raises(ConfigError, match="'pqn.num_steps' changes array shapes"):
        config_lib.from_dict({**PQN, "population": dict(sweep={"pqn.num_steps": [8, 16]})})


def test_masked_environments_are_refused_until_targets_honour_masks():
    from jaxrl_dist.envs import EnvSpec
    spec = EnvSpec(adapter=None, name="masked", obs_shape=(4,), action_dim=3, continuous=False,
                   masked=True)
    with pytest.raises(EnvError, match="algo pqn does not support legal-action masks"):
        qnet.require_discrete("pqn", spec)


@pytest.mark.parametrize("base", [DQN, PQN], ids=["dqn", "pqn"])
def test_continuous_actions_and_shards_that_do_not_fit_the_devices(base):
    config = config_lib.from_dict({**base, "env": "Pendulum-v1"})
    with pytest.raises(EnvError, match=f"algo {base['algo']} needs a discrete action space"):
        make_learner(config, sizes_lib.derive_sizes(config, 1), make_env("Pendulum-v1"),
                     sharding.make_layout(jax.devices()[:1]))
    if base is DQN:
        config = _config(DQN, buffer_shards=2, batch_size=16)
        with pytest.raises(ConfigError, match=r"buffer_shards \(2\) must be a multiple of the "
                                              r"number of devices .* \(4\)"):
            make_learner(config, sizes_lib.derive_sizes(config, 4), make_env("CartPole-v1"),
                         sharding.make_layout(jax.devices()[:4]))


# ------------------------------------------------------------------------------ the launcher

@pytest.mark.timeout(400)
@pytest.mark.slow
def test_two_processes_killed_restarted_equal_one_process(tmp_path):
    """2 processes x 2 devices through the launcher, rank 1 killed (SIGKILL) after update 12
    and the job restarted from its last checkpoint (buffer included), end with the parameters
    of one uninterrupted process on 4 devices."""
    from helpers import run_launcher, summaries

    reference = train(config_lib.from_dict(DQN), tmp_path / "ref", devices=jax.devices()[:4],
                      progress=False)
    cfg = tmp_path / "dqn.yaml"
    cfg.write_text(json.dumps(DQN))   # JSON is YAML
    run = tmp_path / "run"
    proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "2",
                         "--max-restarts", "1", str(cfg), "--run-dir", str(run)],
                        timeout=300, JAXRL_FAULT="kill@1:12",
                        JAXRL_FAULT_ONCE=str(tmp_path / "fired"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "restarting all local workers" in proc.stderr
    ranks = summaries(run / "logs")
    assert ranks[0]["param_fingerprint"] == ranks[1]["param_fingerprint"]
    saved = json.loads((run / "summary.json").read_text())
    assert saved["updates"] == 20 and saved["rebuilt_on_resume"] == []   # buffer restored
    assert saved["num_processes"] == 2 and reference["num_devices"] == 4
    two, _ = read_checkpoint(run / "checkpoints")
    one, _ = read_checkpoint(tmp_path / "ref" / "checkpoints")
    assert max_rel_diff(two["train"]["params"], one["train"]["params"]) <= 1e-5


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_sigterm_saves_the_buffer_and_the_resumed_run_ends_as_uninterrupted(tmp_path):
    """Preemption: SIGTERM mid-run saves the whole state (buffer included) at an agreed update
    and exits 75; the resumed run ends with the uninterrupted run's parameters, bit for bit
    (every part runs as the same command line, so with the same thread setup)."""
    from helpers import sigterm_and_resume

    cfg = tmp_path / "dqn.yaml"
    cfg.write_text(json.dumps({**DQN, "total_timesteps": 8 * 3000, "checkpoint_every": 0}))
    (state, meta), err, resumed, reference = sigterm_and_resume(tmp_path, cfg)
    assert 0 < meta["updates"] < 3000 and np.all(state["data"]["rows"] == 16)   # buffer saved
    assert f"resuming at {meta['updates']}" in err
    assert resumed["param_fingerprint"] == reference["param_fingerprint"]
