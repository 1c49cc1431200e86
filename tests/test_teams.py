"""Teams of agents (``envs.team``, ``jaxmarl:``): each agent a row of the batch, the
environment's end and episode statistics its own, JaxMARL's time limit a truncation, the same
parameters on 1 and 2 devices, and bad input refused in one line."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_dist import config as config_lib
from jaxrl_dist import envs, rollout, sharding
from jaxrl_dist import sizes as sizes_lib
from jaxrl_dist.distributions import Categorical
from jaxrl_dist.envs import registry, team
from jaxrl_dist.programs import make_learner
from helpers import acting_agent

SPREAD = "jaxmarl:MPE_simple_spread_v3"


@pytest.fixture(autouse=True)
def _jaxmarl():
    if not registry.available("jaxmarl"):
        pytest.skip("optional extra 'jaxmarl' is not installed "
                    "(pip install -c constraints.txt -e '.[jaxmarl]')")


def _library_spread():
    import jaxmarl
    return jaxmarl.make("MPE_simple_spread_v3")


def test_team_rows_are_environment_major():
    spec = envs.make_env(SPREAD)
    assert (spec.num_agents, spec.obs_shape, spec.action_dim) == (3, (18,), 5)
    x = jnp.arange(2 * 3).reshape(2, 3)
    np.testing.assert_array_equal(team.rows(spec, x), [0, 1, 2, 3, 4, 5])
    np.testing.assert_array_equal(team.per_env(spec, team.rows(spec, x)), x)
    np.testing.assert_array_equal(team.row_ids(spec, jnp.array([4, 5])), [12, 13, 14, 15, 16, 17])
    np.testing.assert_array_equal(team.repeat(spec, jnp.array([7, 8])), [7, 7, 7, 8, 8, 8])
    np.testing.assert_array_equal(team.first_row(spec, jnp.array([7., 8.])), [7, 0, 0, 8, 0, 0])


def test_mpe_time_limit_is_a_truncation_at_jaxmarls_length():
    """JaxMARL's MPE ends at its 26th step (max_steps 25 counts the steps before): a time
    limit, so truncated (bootstrapped), never terminated; the observation reached is kept."""
    spec = envs.make_env(SPREAD)
    adapter = spec.adapter
    state, obs = adapter.reset(jax.random.PRNGKey(0))
    assert obs.shape == (3, 18)
    step = jax.jit(adapter.step)
    for t in range(1, 27):
        out = step(jax.random.PRNGKey(t), state, jnp.array([1, 2, 3]))
        state = out.state
        assert not bool(out.terminated)
        assert bool(out.truncated) == (t == 26), t
        assert out.reward.shape == (3,)
    assert spec.max_episode_steps >= 26


def test_smax_defeat_is_a_termination_and_masks_are_stacked():
    """SMAX's allies standing still are shot down by the heuristic enemies before the time
    limit: a natural end (terminated). Each agent's legal actions are its row of the mask."""
    spec = envs.make_env("jaxmarl:SMAX", env_kwargs={"scenario": "3m"})
    assert spec.masked and spec.num_agents == 3 and spec.action_dim == 8
    adapter = spec.adapter
    state, _ = adapter.reset(jax.random.PRNGKey(0))
    assert adapter.action_mask(state).shape == (3, 8)
    step = jax.jit(adapter.step)
    stop = jnp.full((3,), 4)   # SMAX's "stop", always legal
    for t in range(1, 101):
        out = step(jax.random.PRNGKey(t), state, stop)
        state = out.state
        if bool(out.terminated) or bool(out.truncated):
            break
    assert bool(out.terminated) and not bool(out.truncated) and t < 100, t


def test_rollout_rows_match_the_library_and_count_each_episode_once():
    """A rollout of 2 environments x 3 agents: rows e x 3 + a hold agent a of environment e
    (its observation, action, own reward as JaxMARL's step_env gives them), every row of an
    environment ends with it, and the team's return (the sum over its agents) is counted once,
    on its first row."""
    spec = envs.make_env(SPREAD)
    agent = acting_agent(spec, lambda obs, mask: Categorical(jnp.zeros((*obs.shape[:-1], 5))))
    E, T = 2, 30
    env_ids = jnp.arange(E)
    actors = rollout.reset_actors(spec, agent, rollout.env_keys(jax.random.PRNGKey(1), env_ids))
    first_obs = actors.env.obs
    _, steps = jax.jit(lambda a: rollout.collect(spec, agent, None, a, env_ids,
                                                 jax.random.PRNGKey(2), T))(actors)
    assert steps.obs.shape == (T, E * 3, 18) and steps.reward.shape == (T, E * 3)
    np.testing.assert_array_equal(steps.obs[0], first_obs.reshape(E * 3, 18))
    # replay environment 1 in the library with the rollout's actions
    lib = _library_spread()
    state = actors.env.env_state
    state1 = jax.tree.map(lambda x: x[1], state)
    team_return = 0.0
    for t in range(26):
        acts = {a: steps.action[t, 3 + i] for i, a in enumerate(lib.agents)}
        obs, state1, rewards, dones, _ = lib.step_env(jax.random.PRNGKey(0), state1, acts)
        reward = np.array([rewards[a] for a in lib.agents])
        np.testing.assert_allclose(steps.reward[t, 3:6], reward, rtol=1e-6)
        team_return += reward.sum()
        if t < 25:
            np.testing.assert_allclose(steps.obs[t + 1, 3:6],
                                       np.stack([obs[a] for a in lib.agents]), rtol=1e-6)
    np.testing.assert_array_equal(steps.truncated[25], [True] * 6)
    assert not np.asarray(steps.truncated[:25]).any()
    np.testing.assert_allclose(steps.finished_return[25, 3], team_return, rtol=1e-5)
    np.testing.assert_array_equal(steps.finished_return[25, [4, 5]], [0, 0])
    np.testing.assert_array_equal(steps.finished_length[25], [26, 0, 0, 26, 0, 0])
    assert float(rollout.episode_sums(steps)["episodes"]) == E
    # the agents of one environment draw their own actions
    assert len({tuple(np.asarray(steps.action[:, r])) for r in range(6)}) == 6


def _ippo(**extra):
    return config_lib.from_dict({"env": SPREAD, "num_envs": 4, "seed": 1,
                                 "total_timesteps": 4 * 8 * 2, "updates_per_call": 2,
                                 "ppo": {"num_steps": 8, "update_epochs": 1,
                                         "num_minibatches": 2,
                                         "network": {"actor_hidden": [16],
                                                     "critic_hidden": [16]}},
                                 **extra})


@pytest.mark.parametrize("cell", ["none", "gru"])
def test_ippo_same_parameters_on_1_and_2_devices(cell):
    """The learner's batch is environments x agents; split over 2 devices it is the same
    global batch, the same random streams (keyed by environment and agent), the same
    parameters."""
    config = _ippo(ppo={"num_steps": 8, "update_epochs": 1, "num_minibatches": 2,
                        "network": {"actor_hidden": [16], "critic_hidden": [16],
                                    "cell": cell}})
    spec = envs.from_config(config)
    results = []
    for n in (1, 2):
        layout = sharding.make_layout(jax.devices()[:n])
        programs = make_learner(config, sizes_lib.derive_sizes(config, n), spec, layout)
        state, metrics = programs.update(programs.init(jax.random.PRNGKey(config.seed)), 2)
        results.append((sharding.to_host(state.train.params), sharding.to_host(metrics)))
        evaluation = sharding.to_host(programs.evaluate(state.train, jax.random.PRNGKey(0)))
        assert np.isfinite(evaluation["return_mean"]) and evaluation["length_mean"] == 26
    for a, b in zip(jax.tree.leaves(results[0][0]), jax.tree.leaves(results[1][0])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert float(np.sum(results[0][1]["episodes"])) == 0   # 16 steps: no episode ended yet


@pytest.mark.parametrize("config,sets,words", [
    ("configs/cartpole_dqn.yaml", [f"env={SPREAD}", "num_envs=4"],
     ["algo dqn trains one agent per environment", "has 3", "algo: ppo"]),
    ("configs/mpe_spread_ippo.yaml", ["env=jaxmarl:MPE_simple_tag_v3"],
     ["observation spaces differ", "adversary_0"]),
    ("configs/mpe_spread_ippo.yaml", ["env=jaxmarl:SMAX", "env_kwargs={scenario: 3q}"],
     ["unknown scenario '3q'"]),
])
def test_bad_team_input_is_one_line_exit_2(config, sets, words, tmp_path, capsys):
    from jaxrl_dist.train import main
    args = [config, "--set", "total_timesteps=20480", "--run-dir", str(tmp_path / "run")]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    assert not (tmp_path / "run").exists()
