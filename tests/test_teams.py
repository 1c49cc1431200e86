"""Teams of agents (``envs.team``, ``jaxmarl:``): each agent a row of the batch, the
environment's end and episode statistics its own, JaxMARL's time limit a truncation, the same
parameters on 1 and 2 devices, and bad input refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys

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
from helpers import acting_agent, max_rel_diff, params_of

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
    assert not bool(adapter.won(state))   # lost: the evaluation's win rate counts it 0
    assert bool(adapter.won(jax.tree.map(lambda x: x, state).replace(state=state.state.replace(
        unit_alive=state.state.unit_alive.at[3:].set(False)))))


@pytest.mark.slow   # ~15 s: Overcooked's step compiles slowly
def test_overcooked_steps_as_the_library_and_its_400_steps_are_a_truncation():
    """``jaxmarl:overcooked`` with a layout name: two agents, each one's 4 x 5 x 26 grid
    observation flattened, the library's per-agent rewards, and its 400-step limit a
    truncation at the 400th step (never a termination: the kitchen has no other end)."""
    import jaxmarl
    from jaxmarl.environments.overcooked import overcooked_layouts

    spec = envs.make_env("jaxmarl:overcooked", env_kwargs={"layout": "cramped_room"})
    assert (spec.num_agents, spec.obs_shape, spec.action_dim) == (2, (520,), 6)
    assert not spec.masked
    lib = jaxmarl.make("overcooked", layout=overcooked_layouts["cramped_room"])
    adapter = spec.adapter
    state, _ = adapter.reset(jax.random.PRNGKey(0))

    def both(states, x):   # the adapter and the library, one step each from the same state
        key, action = x
        out = adapter.step(key, states[0], action)
        obs, lib_state, rewards, dones, _ = lib.step_env(
            key, states[1], {a: action[i] for i, a in enumerate(lib.agents)})
        lib_obs = jnp.stack([obs[a].astype(jnp.float32).reshape(-1) for a in lib.agents])
        lib_reward = jnp.stack([rewards[a] for a in lib.agents])
        return (out.state, lib_state), (out.obs, out.reward, out.terminated, out.truncated,
                                        lib_obs, lib_reward, dones["__all__"])

    keys = jax.random.split(jax.random.PRNGKey(1), 400)
    actions = jax.random.randint(jax.random.PRNGKey(2), (400, 2), 0, 6)
    _, (obs, reward, terminated, truncated, lib_obs, lib_reward, lib_done) = jax.jit(
        lambda s: jax.lax.scan(both, (s, s), (keys, actions)))(state)
    np.testing.assert_array_equal(obs, lib_obs)
    np.testing.assert_array_equal(reward, lib_reward)
    assert not np.asarray(terminated).any()
    np.testing.assert_array_equal(truncated, np.arange(1, 401) == 400)
    np.testing.assert_array_equal(lib_done, truncated)


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


def test_an_outcome_is_counted_once_per_environment_in_the_training_rows():
    """An environment with an outcome (an adapter's ``won``, as SMAX's battles): each episode
    that ends won is counted once, on its environment's first row, in the rollout and in the
    learner's metrics, and a row reports ``win_rate`` = episodes won / episodes."""
    import dataclasses

    from jaxrl_dist import programs, reporting
    from helpers import train_in_process

    inner = envs.make_env(SPREAD).adapter

    class Outcome:   # MPE where an episode is won when agent 0 ends right of the centre
        def reset(self, key):
            return inner.reset(key)

        def step(self, key, state, action):
            return inner.step(key, state, action)

        def won(self, state):
            return state.p_pos[0, 0] > 0

    spec = dataclasses.replace(envs.make_env(SPREAD), adapter=Outcome())
    agent = acting_agent(spec, lambda obs, mask: Categorical(jnp.zeros((*obs.shape[:-1], 5))))
    E = 8
    env_ids = jnp.arange(E)
    actors = rollout.reset_actors(spec, agent, rollout.env_keys(jax.random.PRNGKey(1), env_ids))
    _, steps = jax.jit(lambda a: rollout.collect(spec, agent, None, a, env_ids,
                                                 jax.random.PRNGKey(2), 26))(actors)
    won = np.asarray(steps.finished_won[25]).reshape(E, 3)
    np.testing.assert_array_equal(won[:, 1:], 0)   # counted on the first row only
    assert not np.asarray(steps.finished_won[:25]).any()
    # read on the state each episode ended in: agent 0's final observation holds its position
    final_x = np.asarray(steps.final_obs[25]).reshape(E, 3, 18)[:, 0, 2]
    np.testing.assert_array_equal(won[:, 0], final_x > 0)
    assert 0 < won.sum() < E   # a mixed outcome
    config = _ippo(total_timesteps=4 * 26 * 2, ppo={"num_steps": 26, "update_epochs": 1,
                                                    "num_minibatches": 2})
    _, rows = train_in_process(config, 2, spec=spec)
    assert all(0 <= float(np.sum(r["episodes_won"])) <= float(np.sum(r["episodes"]))
               for r in rows)
    [row] = reporting.member_rows({}, {k: np.atleast_1d(np.sum(v)) for k, v in rows[0].items()},
                                  None, None, {**{k: "sum" for k in rows[0]}})
    assert row["win_rate"] == float(np.sum(rows[0]["episodes_won"])) / float(
        np.sum(rows[0]["episodes"]))
    assert programs.OUTCOMES.keys() <= rows[0].keys()


def _ippo(**extra):
    return config_lib.from_dict({"env": SPREAD, "num_envs": 4, "seed": 1, "eval_episodes": 4,
                                 "total_timesteps": 4 * 8 * 2, "updates_per_call": 2,
                                 "ppo": {"num_steps": 8, "update_epochs": 1,
                                         "num_minibatches": 2,
                                         "network": {"actor_hidden": [16],
                                                     "critic_hidden": [16]}},
                                 **extra})


def _two_updates(config, spec, n):
    """Two updates of ``config`` on ``n`` devices: (parameters, metrics, an evaluation of
    them), on the host."""
    layout = sharding.make_layout(jax.devices()[:n])
    programs = make_learner(config, sizes_lib.derive_sizes(config, n), spec, layout)
    state, metrics = programs.update(programs.init(jax.random.PRNGKey(config.seed)), 2)
    evaluation = programs.evaluate(state.train, jax.random.PRNGKey(0))
    return (sharding.to_host(state.train.params), sharding.to_host(metrics),
            sharding.to_host(evaluation))


@pytest.mark.parametrize("cell,critic,env", [
    ("none", "local", SPREAD), ("gru", "local", SPREAD), ("none", "central", SPREAD),
    ("gru", "central", SPREAD), ("none", "central", "jaxmarl:SMAX")])
def test_ippo_and_mappo_same_parameters_on_1_and_2_devices(cell, critic, env):
    """The learner's batch is environments x agents; split over 2 devices it is the same
    global batch, the same random streams (keyed by environment and agent), the same
    parameters: IPPO and MAPPO, feed-forward and recurrent, and SMAX with its action masks
    and its world state."""
    config = _ippo(ppo={"num_steps": 8, "update_epochs": 1, "num_minibatches": 2,
                        "network": {"actor_hidden": [16], "critic_hidden": [16],
                                    "cell": cell}},
                   team={"critic": critic}, env=env)
    spec = envs.from_config(config)
    results = []
    for n in (1, 2):
        params, metrics, evaluation = _two_updates(config, spec, n)
        results.append((params, metrics))
        assert np.isfinite(evaluation["return_mean"])
        assert evaluation["length_mean"] == 26 or env != SPREAD
        assert ("win_rate" in evaluation) == (env != SPREAD)   # SMAX's battles won
        assert 0 <= evaluation.get("win_rate", 0) <= 1
    # to float tolerance: the gradient's mean over 2 devices sums in another order. On a
    # Zen 5 EPYC SMAX's MAPPO moved one small weight of 1,152 by 2.6e-7 (4e-5 of it) in two
    # updates, over atol 1e-7; a wrong stream or row order changes them wholesale
    for a, b in zip(jax.tree.leaves(results[0][0]), jax.tree.leaves(results[1][0])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert float(np.sum(results[0][1]["episodes"])) == 0   # 16 steps: no episode ended yet


def _vdn(mixer="vdn", **pqn):
    return config_lib.from_dict({"algo": "pqn", "env": SPREAD, "num_envs": 4, "seed": 1,
                                 "eval_episodes": 4, "total_timesteps": 4 * 8 * 2,
                                 "updates_per_call": 2, "team": {"agent_ids": True},
                                 "pqn": {"mixer": mixer, "num_steps": 8, "update_epochs": 2,
                                         "num_minibatches": 2, "network": {"hidden": [16]},
                                         **pqn}})


@pytest.mark.parametrize("mixer", ["vdn", pytest.param("none", marks=pytest.mark.slow)])
def test_pqn_teams_same_parameters_on_1_and_2_devices(mixer):
    """VDN (an environment's agents one sample, minibatched together) and independent PQN
    (each agent a sample): the same global minibatches on 1 and 2 devices, the same
    parameters; VDN and independent learning differ."""
    config = _vdn(mixer)
    spec = envs.from_config(config)
    results = []
    for n in (1, 2):
        params, _, evaluation = _two_updates(config, spec, n)
        results.append(params)
        assert np.isfinite(evaluation["return_mean"]) and evaluation["length_mean"] == 26
    for a, b in zip(jax.tree.leaves(results[0]), jax.tree.leaves(results[1])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    other, _, _ = _two_updates(_vdn("none" if mixer == "vdn" else "vdn"), spec, 1)
    assert max_rel_diff(other, results[0]) > 1e-3


def test_vdn_samples_are_environments_and_their_q_the_agents_sum():
    """VDN's sample: an environment (its agents' rows together), the team's reward and greedy
    next Q summed over its agents, the flags its own; its Q in the loss the sum of its agents'
    Q-values of the actions they took."""
    from jaxrl_dist.agents.pqn.learner import team_samples
    from jaxrl_dist.agents.qnet import networks as qnet
    T, E, A, F = 3, 2, 3, 4
    rng = np.random.default_rng(0)
    reward, next_q = rng.normal(size=(T, E * A)), rng.normal(size=(T, E * A))
    done, end = (np.repeat(rng.random((T, E)) < 0.5, A, axis=1) for _ in range(2))
    weight = np.repeat(rng.random((T, E)), A, axis=1)
    obs, action = rng.normal(size=(T, E * A, F)), rng.integers(0, 5, (T, E * A))
    r, q, term, ends, w, o, a = team_samples(A, reward, next_q, done, end, weight, obs, action)
    np.testing.assert_allclose(r, reward.reshape(T, E, A).sum(-1), rtol=1e-6)
    np.testing.assert_allclose(q, next_q.reshape(T, E, A).sum(-1), rtol=1e-6)
    np.testing.assert_array_equal(term, done[:, ::A])
    np.testing.assert_array_equal(ends, end[:, ::A])
    np.testing.assert_array_equal(w, weight[:, ::A])
    assert team_samples(A, reward, next_q, done, end, None, obs, action)[4] is None
    assert o.shape == (T, E, A, F) and a.shape == (T, E, A)
    np.testing.assert_array_equal(o[1, 1, 2], obs[1, 1 * A + 2])

    spec = envs.from_config(_vdn())
    net = qnet.make_q_network(_vdn().agent.network, spec)
    params = net.init(jax.random.PRNGKey(0))
    obs = rng.normal(size=(5, A, *spec.obs_shape)).astype(np.float32)
    action = rng.integers(0, spec.action_dim, (5, A))
    target = rng.normal(size=(5,)).astype(np.float32)
    loss, stats = qnet.make_td_loss(net, "mse", A)(params, obs, action, target, 1.0)
    q_rows = np.asarray(net.apply(params, obs.reshape(5 * A, -1)))
    team_q = np.take_along_axis(q_rows, action.reshape(-1, 1), 1).reshape(5, A).sum(-1)
    np.testing.assert_allclose(loss, np.mean(0.5 * (team_q - target) ** 2), rtol=1e-5)
    np.testing.assert_allclose(stats[1], team_q.mean(), rtol=1e-5)


@pytest.mark.parametrize("agent_ids", [False, True])
def test_central_critic_reads_the_global_state_and_the_policy_its_own(agent_ids):
    """MAPPO's rows: each agent's observation (its id after it), then the global state (every
    agent's observation, its id after it); the policy reads the first part, the critic the
    second; the policy a checkpoint records, and so the deployed one, takes the first part
    alone."""
    from jaxrl_dist.agents.ppo.learner import make_policy
    from jaxrl_dist.agents.ppo.networks import make_networks
    config = _ippo(team={"critic": "central", "agent_ids": agent_ids})
    spec = envs.from_config(config)
    ids = 3 if agent_ids else 0
    assert spec.obs_shape == (18 + ids + 54 + ids,) and spec.policy_features == 18 + ids
    _, obs = spec.adapter.reset(jax.random.PRNGKey(0))
    own = np.asarray(obs[:, :18])
    np.testing.assert_array_equal(obs[:, 18 + ids:18 + ids + 54],
                                  np.broadcast_to(own.reshape(-1), (3, 54)))
    if agent_ids:
        np.testing.assert_array_equal(obs[:, 18:21], np.eye(3))
        np.testing.assert_array_equal(obs[:, -3:], np.eye(3))
    nets = make_networks(config.ppo.network, spec)
    params = nets.init(jax.random.PRNGKey(1))
    k = spec.policy_features
    world = obs.at[:, k:].add(1.0)
    mine = obs.at[:, :k].add(1.0)
    np.testing.assert_array_equal(nets.policy(params, world).logits, nets.policy(params, obs).logits)
    assert not np.allclose(nets.value(params, world), nets.value(params, obs))
    np.testing.assert_array_equal(nets.value(params, mine), nets.value(params, obs))
    # the deployed policy (rebuilt from the checkpoint's record) takes the agent's own part
    record = envs.EnvSpec.from_description(spec.describe())
    assert record.obs_shape == (k,) and record.policy_features is None
    deployed = make_policy(config.ppo, record)
    policy_params = {"actor": params["actor"],
                     "obs_moments": {"mean": np.zeros(k, np.float32),
                                     "var": np.ones(k, np.float32)}}
    action, _ = deployed.policy(policy_params, (), obs[:, :k])
    np.testing.assert_array_equal(action, nets.policy(params, obs).mode())


@pytest.mark.parametrize("critic", ["local", "central"])
def test_per_agent_parameters_answer_each_row_with_its_agents_network(critic):
    """``team.parameters: per_agent``: the policy's and the critic's parameters carry a
    leading agent axis, each row is answered by its own agent's copy (picked by its one-hot
    index, normalised or not), and training gives the same parameters on 1 and 2 devices."""
    from jaxrl_dist.agents.ppo.networks import MLP, make_networks
    config = _ippo(team={"critic": critic, "agent_ids": True, "parameters": "per_agent"},
                   ppo={"num_steps": 8, "update_epochs": 1, "num_minibatches": 2,
                        "normalize_observations": True,
                        "network": {"actor_hidden": [16], "critic_hidden": [16]}})
    spec = envs.from_config(config)
    assert spec.agent_networks == 3
    nets = make_networks(config.ppo.network, spec)
    params = nets.init(jax.random.PRNGKey(0))
    assert params["actor"]["MLP_0"]["Dense_0"]["kernel"].shape[0] == 3
    _, obs = spec.adapter.reset(jax.random.PRNGKey(1))
    k = spec.policy_features or spec.obs_shape[0]
    logits = nets.policy(params, obs).logits
    for a in range(3):
        mine = jax.tree.map(lambda x: x[a], params["actor"]["MLP_0"])
        alone = MLP([16], 5, "tanh", 0.01).apply({"params": mine}, obs[a:a + 1, :k])
        np.testing.assert_allclose(alone[0], logits[a], rtol=1e-5, atol=1e-7)
    from jaxrl_dist.agents.ppo.networks import _agent_of
    normalised = (obs[:, :k] - 1 / 3) / np.sqrt(2 / 9)   # the index columns' own moments
    np.testing.assert_array_equal(_agent_of(normalised, 3), np.eye(3))
    results = []
    for n in (1, 2):
        layout = sharding.make_layout(jax.devices()[:n])
        programs = make_learner(config, sizes_lib.derive_sizes(config, n), spec, layout)
        state, _ = programs.update(programs.init(jax.random.PRNGKey(config.seed)), 2)
        results.append(sharding.to_host(state.train.params))
    for a, b in zip(jax.tree.leaves(results[0]), jax.tree.leaves(results[1])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    # each agent's copy learned from its own rows: the three moved apart
    moved = [results[0]["actor"]["MLP_0"]["Dense_0"]["kernel"][a]
             - params["actor"]["MLP_0"]["Dense_0"]["kernel"][a] for a in range(3)]
    assert all(np.abs(m).max() > 0 for m in moved)


@pytest.mark.parametrize("config,sets,words", [
    ("configs/cartpole_dqn.yaml", [f"env={SPREAD}", "num_envs=4"],
     ["algo dqn trains one agent per environment", "has 3", "algo: ppo"]),
    ("configs/mpe_spread_ippo.yaml", ["env=jaxmarl:MPE_simple_tag_v3"],
     ["observation spaces differ", "adversary_0"]),
    ("configs/mpe_spread_ippo.yaml", ["env=jaxmarl:SMAX", "env_kwargs={scenario: 3q}"],
     ["unknown scenario '3q'"]),
    ("configs/cartpole.yaml", ["team.critic=central"],
     ["team: section applies to environments of several agents", "CartPole-v1 has one"]),
    ("configs/mpe_spread_mappo.yaml", ["team.critic=centre"],
     ["team.critic must be one of local, central"]),
    ("configs/mpe_spread_mappo.yaml", ["ppo.network.cell=gru", "ppo.network.shared=true"],
     ["team.critic=central needs the critic's own cell"]),
    ("configs/mpe_spread_ippo.yaml", ["team.parameters=per_agent"],
     ["team.parameters=per_agent needs team.agent_ids: true"]),
    ("configs/mpe_spread_ippo.yaml", ["team.parameters=own", "team.agent_ids=true"],
     ["team.parameters must be one of shared, per_agent"]),
    ("configs/smax_ippo_rnn.yaml", ["team.parameters=per_agent", "team.agent_ids=true"],
     ["team.parameters=per_agent runs feed-forward networks", "cell=gru"]),
    ("configs/mpe_spread_vdn.yaml", ["team.critic=central"],
     ["team.critic=central is MAPPO's critic; PQN has no critic"]),
    ("configs/mpe_spread_vdn.yaml", ["team.parameters=per_agent"],
     ["team.parameters=per_agent is PPO's"]),
    ("configs/cartpole_pqn.yaml", ["pqn.mixer=vdn"],
     ["pqn.mixer=vdn sums the Q-values of a team's agents", "has one agent"]),
    ("configs/mpe_spread_vdn.yaml", ["pqn.mixer=qmix"], ["pqn.mixer must be one of none, vdn"]),
    ("configs/mpe_spread_ippo.yaml", ["env=jaxmarl:ant_4x2"],
     ["jaxmarl:ant_4x2: JaxMARL's MABrax environments", "are not supported"]),
])
def test_bad_team_input_is_one_line_exit_2(config, sets, words, tmp_path, capsys):
    from helpers import bad_input_exits_2
    args = [config, "--set", "total_timesteps=20480"]
    for s in sets:
        args += ["--set", s]
    bad_input_exits_2(args, words, tmp_path / "run", capsys)


@pytest.mark.timeout(180)
def test_jaxmarl_is_imported_without_its_mabrax_environments():
    """jaxmarl's package imports every family; MABrax's (Brax, MJX, Warp) was half the time
    of a run's start-up, for environments the adapter refuses."""
    pytest.importorskip("brax")   # without Brax jaxmarl skips MABrax anyway
    code = ("import sys; from jaxrl_dist.envs import registry; "
            "registry.make_env('jaxmarl:MPE_simple_spread_v3'); "
            "print(sorted(m for m in ('brax', 'jaxmarl.environments.mabrax') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=150, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


# 2 seeds of a recurrent IPPO as one population program on 2 devices: 20 updates of 4
# environments x 3 agents x 8 steps, a checkpoint every 5.
TEAM_ARGS = ["--set", "num_envs=4", "--set", "ppo.num_steps=8", "--set", "updates_per_call=5",
             "--set", "total_timesteps=640", "--set", "ppo.num_minibatches=2",
             "--set", "checkpoint_every=5", "--set", "eval_episodes=4",
             "--set", "ppo.network.actor_hidden=[16]", "--set", "ppo.network.critic_hidden=[16]",
             "--set", "ppo.network.cell=gru", "--set", "population.seeds=[3,11]"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_team_population_resumes_exactly_after_kill_9(tmp_path):
    """A population of IPPO runs (each member's rows, carries and critic carries in the
    checkpoint) killed with kill -9 mid-run resumes to the uninterrupted run's parameters, and
    each member is the single run of its seed."""
    import json
    from helpers import train_cli
    config = "configs/mpe_spread_ippo.yaml"
    ref, _ = train_cli(tmp_path / "ref", args=TEAM_ARGS, config=config)
    assert ref.returncode == 0, ref.stderr[-3000:]
    killed, _ = train_cli(tmp_path / "run", args=TEAM_ARGS, config=config,
                          JAXRL_FAULT="kill@0:12")
    assert killed.returncode == -9
    resumed, _ = train_cli(tmp_path / "run", "--resume", args=TEAM_ARGS, config=config)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    def prints(run):
        summary = json.loads((tmp_path / run / "summary.json").read_text())
        return [m["param_fingerprint"] for m in summary["members"]]
    assert prints("run") == prints("ref")
    single, _ = train_cli(tmp_path / "one", args=[*TEAM_ARGS, "--set", "seed=11",
                                                  "--set", "population.seeds=[]"],
                          config=config)
    assert single.returncode == 0, single.stderr[-3000:]
    member = jax.tree.map(lambda x: x[1], params_of(tmp_path / "ref")[0])
    assert max_rel_diff(member, params_of(tmp_path / "one")[0]) <= 1e-5


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_mappo_policy_exports_on_the_agents_own_observation(tmp_path):
    """A MAPPO run (observations normalised, whose moments span the global state too) exports
    a policy that takes one agent's own observation, in parity with the trained policy; the
    loaded policy acts as training's policy does on the same agent's row."""
    import onnx
    from helpers import train_cli
    from jaxrl_dist import policy as policy_lib
    from jaxrl_dist.export import __main__ as export_cli
    run = tmp_path / "run"
    proc, _ = train_cli(run, args=[*TEAM_ARGS[:-4], "--set", "team.critic=central",
                                   "--set", "ppo.normalize_observations=true",
                                   "--set", "total_timesteps=320"],
                        config="configs/mpe_spread_mappo.yaml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert export_cli.main([str(run)]) == 0
    [obs] = onnx.load(str(run / "policy.onnx")).graph.input
    assert obs.type.tensor_type.shape.dim[1].dim_value == 18
    loaded = policy_lib.load(run)
    assert loaded.spec.obs_shape == (18,)
    spec = envs.make_env(SPREAD, team=config_lib.from_dict(
        {"env": SPREAD, "team": {"critic": "central"}}).team)
    _, rows = spec.adapter.reset(jax.random.PRNGKey(3))
    from jaxrl_dist.agents.ppo.learner import make_policy
    from jaxrl_dist.checkpoint import read_checkpoint
    state, meta = read_checkpoint(run / "checkpoints")
    config = config_lib.from_dict(meta["config"])
    trained = make_policy(config.ppo, spec)   # the training spec: rows with the global state
    train = state["train"]
    moments = train["obs_moments"]
    full = {"actor": train["params"]["actor"],
            "obs_moments": {"mean": moments["mean"][:18], "var": moments["var"][:18]}}
    action, _ = trained.policy(full, (), rows)
    np.testing.assert_array_equal(loaded(np.asarray(rows[:, :18])), action)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_per_agent_policies_export_with_parity(tmp_path):
    """Per-agent MAPPO exports one ONNX policy holding every agent's copy, each row answered
    by the copy its index names, in parity with the trained policy (the exporter checks it)
    and with the policy ``jaxrl_dist.policy.load`` rebuilds."""
    import onnxruntime
    from helpers import train_cli
    from jaxrl_dist import policy as policy_lib
    from jaxrl_dist.export import __main__ as export_cli
    run = tmp_path / "run"
    proc, _ = train_cli(run, args=[*TEAM_ARGS[:-4], "--set", "team.critic=central",
                                   "--set", "team.agent_ids=true",
                                   "--set", "team.parameters=per_agent",
                                   "--set", "total_timesteps=320"],
                        config="configs/mpe_spread_mappo.yaml")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert export_cli.main([str(run)]) == 0
    loaded = policy_lib.load(run)
    assert loaded.spec.obs_shape == (21,) and loaded.spec.agent_networks == 3
    spec = envs.make_env(SPREAD, team=config_lib.from_dict(
        {"env": SPREAD, "team": {"critic": "central", "agent_ids": True,
                                 "parameters": "per_agent"}}).team)
    rows = np.concatenate([np.asarray(spec.adapter.reset(jax.random.PRNGKey(s))[1][:, :21])
                           for s in range(8)])
    session = onnxruntime.InferenceSession(str(run / "policy.onnx"))
    [name] = [i.name for i in session.get_inputs()]
    np.testing.assert_array_equal(session.run(None, {name: rows})[0], loaded(rows))


def test_a_team_member_nan_reward_drops_the_environment_step_once():
    """``env_nonfinite: reset`` on a team: agent 1's reward is NaN at the 5th step of every
    episode; that environment's step is dropped for all its agents and counted once per
    environment (not per agent), the same on 1 and 2 devices, and nothing non-finite is
    learned. The default stops the run naming the environment (its global index)."""
    import dataclasses

    from jaxrl_dist import programs
    from jaxrl_dist.envs.jaxmarl import _steps_taken
    from helpers import train_in_process

    inner = envs.make_env(SPREAD).adapter

    class NaNReward:
        def reset(self, key):
            return inner.reset(key)

        def step(self, key, state, action):
            out = inner.step(key, state, action)
            bad = _steps_taken(out.state) == 5
            return out._replace(reward=out.reward.at[1].set(
                jnp.where(bad, jnp.nan, out.reward[1])))

    spec = dataclasses.replace(envs.make_env(SPREAD), adapter=NaNReward())
    config = _ippo(env_nonfinite="reset")   # 2 updates of 8 steps: drops at steps 5, 10, 15
    counts = []
    for n in (1, 2):
        state, rows = train_in_process(config, n, spec=spec)
        counts.append(sum(float(np.sum(r[programs.ENV_NONFINITE_RESETS])) for r in rows))
        assert all(np.isfinite(x).all() for x in jax.tree.leaves(sharding.to_host(state.train)))
    assert counts == [4 * 3, 4 * 3], counts
    _, rows = train_in_process(_ippo(), 2, spec=spec)
    at = int(np.asarray(rows[0][programs.ENV_NONFINITE_AT])[0])
    env, what = divmod(at, 4)[0] // 8, at % 4
    assert float(np.asarray(rows[0][programs.ENV_NONFINITE])[0]) == 1 and env == 0 and what == 1


# 4 IPPO members swept over the learning rate, PBT rounds after updates 3, 6 and 9 of 12 (4
# environments x 3 agents x 16 steps: every environment ends an episode between rounds).
TEAM_PBT_ARGS = [*TEAM_ARGS[:-4], "--set", "total_timesteps=768", "--set", "ppo.num_steps=16",
                 "--set", "updates_per_call=3", "--set", "checkpoint_every=3",
                 "--set", "population.sweep.ppo.learning_rate=[1e-4,3e-4,1e-3,3e-3]",
                 "--set", "pbt.enabled=true", "--set", "pbt.interval_updates=3",
                 "--set", "pbt.min_episodes=1",
                 "--set", "pbt.mutations.ppo.learning_rate.low=1e-5",
                 "--set", "pbt.mutations.ppo.learning_rate.high=1e-2"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_team_pbt_ranks_team_returns_and_resumes_exactly(tmp_path):
    """PBT over IPPO members on MPE: fitness is each member's mean TEAM return (an
    environment's episode counted once, not once per agent), the same lineage on 1 and 2
    devices, and a run killed with kill -9 between rounds resumes to the uninterrupted run's
    rounds, copies and parameters."""
    import json
    from helpers import train_cli
    config = "configs/mpe_spread_ippo.yaml"

    def summary(run):
        return json.loads((tmp_path / run / "summary.json").read_text())
    for name, devices in (("ref", 2), ("one", 1)):
        proc, _ = train_cli(tmp_path / name, devices=devices, args=TEAM_PBT_ARGS, config=config)
        assert proc.returncode == 0, proc.stderr[-3000:]
    ref = summary("ref")
    assert ref["pbt"]["rounds"] == 3 and ref["pbt"]["copies"]
    assert summary("one")["pbt"]["copies"] == ref["pbt"]["copies"]
    rows = [json.loads(x) for x in (tmp_path / "ref" / "metrics.jsonl").read_text().splitlines()]
    returns = [r["episode_return"] for r in rows if "episode_return" in r]
    assert returns and all(-200 < np.min(r) and np.max(r) < 0 for r in returns)   # a team's
    fitness = np.asarray(ref["pbt"]["fitness"])
    assert np.all(np.isfinite(fitness)) and np.all((-200 < fitness) & (fitness < 0)), fitness
    proc, _ = train_cli(tmp_path / "run", args=TEAM_PBT_ARGS, config=config,
                        JAXRL_FAULT="kill@0:2")
    assert proc.returncode == -9
    proc, _ = train_cli(tmp_path / "run", "--resume", args=TEAM_PBT_ARGS, config=config)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary("run")["pbt"] == ref["pbt"]
    assert [m["param_fingerprint"] for m in summary("run")["members"]] == \
        [m["param_fingerprint"] for m in ref["members"]]
