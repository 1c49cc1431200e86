"""``replicate_learn``: each update's trajectory gathered to every device in ONE all-gather,
then every device learns from the whole batch (its replay held whole), with no collective
inside learning. What it must keep: the one-device program's results for every learner on
environments inside the program (the host path: tests/test_host_envs.py), a checkpoint that
resumes on another topology, and one collective per update."""

import re

import jax
import numpy as np
import pytest

from helpers import CLI_RUN, CROSSQ, DQN, PQN, SAC, TD3, TINY, max_rel_diff, params_of, \
    train_in_process, write_config
from jaxrl_dist import config as config_lib
from jaxrl_dist import sharding
from jaxrl_dist import sizes as sizes_lib
from jaxrl_dist.envs import from_config
from jaxrl_dist.programs import (make_learner, pack_envs, pack_envs_host, packed_width,
                                 unpack_envs)
from jaxrl_dist.types import Trajectory, Transition


CASES = {"ppo": TINY, "dqn": DQN, "pqn": PQN, "sac": SAC, "td3": TD3, "crossq": CROSSQ}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("algo", ["dqn", pytest.param("sac", marks=pytest.mark.slow),
                                  pytest.param("ppo", marks=pytest.mark.slow),
                                  pytest.param("pqn", marks=pytest.mark.slow),
                                  pytest.param("td3", marks=pytest.mark.slow),
                                  pytest.param("crossq", marks=pytest.mark.slow)])
def test_two_devices_learning_the_whole_batch_equal_one_device(algo):
    """2 devices with replicate_learn act on their own environments and each learns the
    gathered whole batch: the parameters and metrics of 1 device (the same arithmetic; XLA
    fuses the two programs apart, so the last bits may differ: DQN's are equal with XLA's
    optimised code, not with the suite's -O0, helpers.TEST_XLA_FLAGS)."""
    config = config_lib.from_dict({**CASES[algo], "replicate_learn": True})
    (one, rows1), (two, rows2) = [train_in_process(config, n) for n in (1, 2)]
    assert max_rel_diff(sharding.to_host(two.train.params),
                        sharding.to_host(one.train.params)) <= 1e-4
    for r1, r2 in zip(rows1, rows2):
        for name in r1:
            np.testing.assert_allclose(r2[name], r1[name], rtol=2e-4, atol=1e-5, err_msg=name)
    for x in jax.tree.leaves(two.data):   # the replay (or carries) held whole on each device
        assert x.sharding.is_fully_replicated


def _collectives(replicate_act):
    config = config_lib.from_dict({**DQN, "replicate_learn": True,
                                   "replicate_act": replicate_act})
    mesh = sharding.make_mesh(jax.devices()[:2])
    learner = make_learner(config, sizes_lib.derive_sizes(config, 2), from_config(config), mesh)
    assert learner.replicated and learner.acts_whole is (replicate_act is not False)
    text = learner.update.lower(learner.abstract_state(), 2).compile().as_text()
    gathers = re.findall(r"all-gather(?:-start)?\(", text)
    crossing = [line for line in text.splitlines()
                if re.search(r"(all-reduce|collective-permute|all-to-all|reduce-scatter)"
                             r"(?:-start)?\(", line) and "replica_groups={{0},{1}}" not in line]
    return len(gathers), crossing


@pytest.mark.timeout(120)
def test_one_all_gather_per_update_and_no_other_cross_device_collective():
    gathers, crossing = _collectives(replicate_act=False)
    assert gathers == 1 and not crossing, crossing


@pytest.mark.timeout(120)
def test_acting_whole_an_update_has_no_cross_device_collective_at_all():
    """replicate_act (auto with replicate_learn inside the program): each device steps every
    environment, so nothing is gathered either."""
    gathers, crossing = _collectives(replicate_act=None)
    assert gathers == 0 and not crossing, crossing


@pytest.mark.timeout(300)
@pytest.mark.parametrize("algo", ["dqn", pytest.param("ppo", marks=pytest.mark.slow)])
def test_acting_whole_gives_one_devices_bits_and_acting_apart_matches_it(algo):
    """2 devices each stepping every environment run the one-device program (its parameters
    bit for bit with XLA's optimised code, measured; the suite's -O0 moves last bits, as
    above); acting apart (the all-gather) learns from the same data."""
    one, _ = train_in_process(config_lib.from_dict(CASES[algo]), 1)
    for act, tolerance in ((True, 1e-5), (False, 1e-4)):
        config = config_lib.from_dict({**CASES[algo], "replicate_learn": True,
                                       "replicate_act": act})
        two, _ = train_in_process(config, 2)
        assert max_rel_diff(sharding.to_host(two.train.params),
                            sharding.to_host(one.train.params)) <= tolerance, act


def test_replicate_act_without_replicate_learn_or_for_host_envs_is_one_line():
    from jaxrl_dist.errors import ConfigError

    mesh = sharding.make_mesh(jax.devices()[:2])
    for extra, words in (({"replicate_learn": False, "replicate_act": True},
                          "replicate_act=true needs replicate_learn"),
                         ({"replicate_act": True, "env": "gymnasium:CartPole-v1"},
                          "stepped on the host")):
        config = config_lib.from_dict({**DQN, **extra})
        with pytest.raises(ConfigError, match=words) as err:
            make_learner(config, sizes_lib.derive_sizes(config, 2), from_config(config), mesh)
        assert "\n" not in str(err.value)


def test_packing_a_trajectory_is_lossless():
    rng = np.random.default_rng(0)
    T, E = 3, 4
    steps = Transition(
        obs=rng.integers(0, 255, (T, E, 2, 2)).astype(np.uint8),
        action=rng.normal(size=(T, E, 2)).astype(np.float32),
        reward=rng.normal(size=(T, E)).astype(np.float32),
        terminated=rng.random((T, E)) < 0.5, truncated=rng.random((T, E)) < 0.5,
        finished_return=np.full((T, E), np.nan, np.float32),
        finished_length=rng.integers(-5, 5, (T, E)).astype(np.int32),
        extras={"log_prob": rng.normal(size=(T, E)).astype(jax.numpy.bfloat16)},
        final_obs=None)
    trajectory = Trajectory(steps, rng.integers(0, 9, (E, 2, 2)).astype(np.uint8),
                            np.zeros((E, 0), np.float32))
    packed = pack_envs(trajectory)
    assert packed.shape[0] == E and packed.dtype == np.uint8
    # host actors pack in numpy, byte for byte as the program does
    np.testing.assert_array_equal(pack_envs_host(trajectory), np.asarray(packed))
    assert packed.shape[1] == packed_width(jax.eval_shape(lambda t: t, trajectory))
    back = unpack_envs(packed, jax.eval_shape(lambda t: t, trajectory))
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(trajectory)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_killed_on_two_devices_learning_whole_resumes_on_one_device_exactly(tmp_path):
    """SAC killed after update 25 with replicate_learn on 2 devices (the replay saved whole),
    resumed on 1 device: it ends where the 1-device run ends (the same arrays, laid out anew;
    to float tolerance, as any change of topology)."""
    from helpers import train_cli

    cfg = write_config(tmp_path, CLI_RUN)
    proc, reference = train_cli(tmp_path / "ref", devices=1, args=[], config=cfg)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "run"
    whole = ["--set", "replicate_learn=true"]
    proc, _ = train_cli(run, devices=2, args=whole, config=cfg, JAXRL_FAULT="kill@0:25")
    assert proc.returncode == -9, proc.stderr[-3000:]
    proc, resumed = train_cli(run, "--resume", devices=1, args=[], config=cfg)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"resuming at (10|20)\b", proc.stderr)
    assert resumed["env_steps"] == reference["env_steps"]
    assert max_rel_diff(params_of(run)[0], params_of(tmp_path / "ref")[0]) <= 1e-4
