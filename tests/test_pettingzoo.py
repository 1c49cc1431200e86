"""Teams on the host (``pettingzoo:``, ``envs.pettingzoo``): PettingZoo parallel environments
stepped by each process on its CPUs, each agent a row of the learner's batch as inside the
program; the environment's end every agent's, mpe2's time limit a truncation, the global state
for MAPPO's critic; the same parameters on 1 and 2 devices and 2 processes; kill -9 then resume
deterministic; a NaN from one agent dropped once per environment or named; bad input one line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from jaxrl_dist import envs
from jaxrl_dist.envs import registry
from helpers import (bad_input_exits_2, max_rel_diff, params_of, run_launcher, summaries,
                     train_cli)

SPREAD = "pettingzoo:simple_spread_v3"
TESTS = str(Path(__file__).resolve().parent)
PLUGIN = {"JAXRL_DIST_PLUGINS": "team_plugin",
          "PYTHONPATH": os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")]))}
CFG = "configs/pettingzoo_spread_mappo.yaml"
# 4 environments x 3 agents x 16 steps, 12 updates, a checkpoint every 3: seconds a run.
ARGS = ["--set", "num_envs=4", "--set", "ppo.num_steps=16", "--set", "total_timesteps=768",
        "--set", "updates_per_call=3", "--set", "ppo.num_minibatches=2",
        "--set", "ppo.update_epochs=2", "--set", "checkpoint_every=3",
        "--set", "eval_episodes=4", "--set", "ppo.network.actor_hidden=[16]",
        "--set", "ppo.network.critic_hidden=[16]"]
GRU = ["--set", "ppo.network.cell=gru", "--set", "ppo.network.cell_size=16"]


@pytest.fixture(autouse=True)
def _pettingzoo():
    if not registry.available("pettingzoo"):
        pytest.skip("optional extra 'pettingzoo' is not installed "
                    "(pip install -c constraints.txt -e '.[pettingzoo]')")


@pytest.fixture
def plugin(monkeypatch):
    monkeypatch.syspath_prepend(TESTS)
    monkeypatch.setenv("JAXRL_DIST_PLUGINS", "team_plugin")
    import team_plugin  # noqa: F401 (registers jaxrl_test_*)


def _team(critic="local", agent_ids=False):
    from jaxrl_dist import config as config_lib
    return config_lib.from_dict({"env": SPREAD, "team": {"critic": critic,
                                                         "agent_ids": agent_ids}}).team


def test_rows_ends_and_final_observations_match_the_library():
    """Two environments stepped as mpe2's own parallel env steps them (seeded alike): each
    agent's observation and reward on its row, the 25-step limit a truncation on its 25th
    step (never terminated), the observation it ended at kept and the next episode begun."""
    from mpe2 import simple_spread_v3
    spec = envs.make_env(SPREAD)
    assert (spec.num_agents, spec.obs_shape, spec.action_dim, spec.on_host) == (3, (18,), 5, True)
    assert spec.max_episode_steps == 25
    batch = spec.host(2, False)
    mine = [simple_spread_v3.parallel_env() for _ in range(2)]
    obs = batch.reset([7, 8])
    assert obs.shape == (2, 3, 18)
    for env, seed, got in zip(mine, (7, 8), obs):
        want, _ = env.reset(seed=seed)
        np.testing.assert_array_equal(got, np.stack([want[a] for a in env.possible_agents]))
    rng = np.random.default_rng(0)
    for t in range(1, 26):
        actions = rng.integers(0, 5, (2, 3))
        out = batch.step(actions)
        assert out.reward.shape == (2, 3) and out.obs.shape == (2, 3, 18)
        for i, env in enumerate(mine):
            want, reward, _, trunc, _ = env.step({a: int(actions[i, j])
                                                  for j, a in enumerate(env.possible_agents)})
            np.testing.assert_array_equal(out.final_obs[i], np.stack(
                [want[a] for a in env.possible_agents]))
            np.testing.assert_array_equal(out.reward[i], np.float32(
                [reward[a] for a in env.possible_agents]))
            assert not out.terminated[i] and bool(out.truncated[i]) == (t == 25) == all(
                trunc.values())
        if t < 25:
            np.testing.assert_array_equal(out.obs, out.final_obs)
    assert not np.array_equal(out.obs, out.final_obs)   # reset after the limit
    batch.close()


@pytest.mark.parametrize("agent_ids", [False, True])
def test_a_central_critic_reads_mpe2s_state(agent_ids):
    """MAPPO's rows on the host are the program's (``envs.team.agent_inputs``): each agent's
    observation (its id after it), then mpe2's ``state()`` (its id after it)."""
    spec = envs.make_env(SPREAD, team=_team("central", agent_ids))
    ids = 3 if agent_ids else 0
    assert spec.obs_shape == (18 + ids + 54 + ids,) and spec.policy_features == 18 + ids
    batch = spec.host(1, False)
    [rows] = batch.reset([3])
    own = rows[:, :18]
    np.testing.assert_array_equal(rows[:, 18 + ids:18 + ids + 54],
                                  np.broadcast_to(own.reshape(-1), (3, 54)))
    if agent_ids:
        np.testing.assert_array_equal(rows[:, 18:21], np.eye(3))
    np.testing.assert_array_equal(batch.envs[0].state(), own.reshape(-1))
    batch.close()


@pytest.mark.parametrize("critic", ["local", "central"])
def test_ippo_and_mappo_same_parameters_on_1_and_2_devices(critic, tmp_path):
    """The host rollout's rows (environments x agents) split over 2 devices: the same global
    batch, the same action noise (keyed by environment and agent), the same evaluation, the
    parameters to float tolerance (the gradient's sum order differs)."""
    args = [*ARGS, "--set", f"team.critic={critic}", "--set", "replicate_learn=false",
            "--set", "total_timesteps=384"]
    runs = {}
    for devices in (1, 2):
        proc, runs[devices] = train_cli(tmp_path / f"d{devices}", devices=devices, args=args,
                                        config=CFG)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert runs[1]["eval_return"] == runs[2]["eval_return"]
    assert runs[1]["final_return"] == runs[2]["final_return"]
    assert max_rel_diff(params_of(tmp_path / "d1")[0], params_of(tmp_path / "d2")[0]) <= 1e-4


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("critic,cell", [("central", "none"), ("local", "gru")])
def test_2_processes_give_2_devices_parameters(critic, cell, tmp_path):
    """2 processes through the launcher, each stepping its own environments, learning the
    whole batch on each device (replicate_learn's default across CPU processes): bit for bit
    the parameters of 1 process x 2 devices doing the same, for MAPPO and recurrent IPPO."""
    args = [*ARGS, "--set", f"team.critic={critic}", "--set", f"ppo.network.cell={cell}",
            "--set", "ppo.network.cell_size=16", "--set", "replicate_learn=true"]
    proc, one = train_cli(tmp_path / "r2", devices=2, args=args, config=CFG)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "1", CFG, *args,
                         "--run-dir", str(tmp_path / "p2")], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = summaries(tmp_path / "p2" / "logs")
    assert ranks[0]["param_fingerprint"] == ranks[1]["param_fingerprint"] == \
        one["param_fingerprint"]
    # the same episodes; their returns summed per process first: the last bits may differ
    assert ranks[0]["eval_return"] == pytest.approx(one["eval_return"], rel=1e-6)


# 2 seeds of recurrent MAPPO as one population, each member's 8 environments split over
# every device (population.member_devices=1): 4 updates of 8 envs x 3 agents x 16 steps.
POP_ARGS = [*ARGS, *GRU, "--set", "team.critic=central", "--set", "num_envs=8",
            "--set", "total_timesteps=512", "--set", "updates_per_call=2",
            "--set", "checkpoint_every=2", "--set", "population.seeds=[3,11]",
            "--set", "population.member_devices=1"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_team_population_on_the_host_is_its_single_runs_on_any_topology(tmp_path):
    """Recurrent MAPPO, 2 seeds as one population on host environments: member k ends where
    the single run with its seed ends (to float tolerance: another layout, members vmapped)
    on 2 devices, and 2 processes x 2 devices (each process stepping half of every member's
    environments, the gradient all-reduced across them) evaluate as 1 process x 4 devices and
    end on its parameters to float tolerance."""
    import jax

    singles = {}
    for k, seed in enumerate((3, 11)):
        proc, summary = train_cli(tmp_path / f"s{seed}", devices=1, config=CFG,
                                  args=[*POP_ARGS, "--set", "population.seeds=[]",
                                        "--set", f"seed={seed}"])
        assert proc.returncode == 0, proc.stderr[-3000:]
        singles[k] = params_of(tmp_path / f"s{seed}")[0], summary["eval_return"]
    runs = {}
    for name, devices in (("d2", 2), ("d4", 4)):
        proc, _ = train_cli(tmp_path / name, devices=devices, args=POP_ARGS, config=CFG)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = json.loads((tmp_path / name / "summary.json").read_text())["members"]
    params = params_of(tmp_path / "d2")[0]
    for k, (single, eval_return) in singles.items():
        assert max_rel_diff(jax.tree.map(lambda x, k=k: x[k], params), single) <= 1e-4, k
        assert runs["d2"][k]["eval_return"] == pytest.approx(eval_return, abs=1e-2), k
    proc = run_launcher(["--nproc-per-node", "2", "--cpu-devices-per-proc", "2", CFG,
                         *POP_ARGS, "--run-dir", str(tmp_path / "p2")], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = json.loads((tmp_path / "p2" / "summary.json").read_text())["members"]
    # the same episodes; their returns summed per process first: the last bits may differ
    assert [m["eval_return"] for m in two] == pytest.approx(
        [m["eval_return"] for m in runs["d4"]], rel=1e-6)
    assert max_rel_diff(params_of(tmp_path / "p2")[0], params_of(tmp_path / "d4")[0]) <= 1e-5


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kill_9_then_resume_reseeds_fresh_episodes_deterministically(tmp_path):
    """A recurrent MAPPO run killed with kill -9 resumes from its last checkpoint twice (from
    copies) to the same parameters: its environments re-seeded from (seed, update), fresh
    episodes, fresh carries."""
    args = [*ARGS, *GRU, "--set", "team.critic=central"]
    run = tmp_path / "run"
    proc, _ = train_cli(run, devices=1, args=args, config=CFG, JAXRL_FAULT="kill@0:6")
    assert proc.returncode == -9, proc.stderr[-3000:]
    shutil.copytree(run, tmp_path / "copy")
    finished = []
    for path in (run, tmp_path / "copy"):
        proc, summary = train_cli(path, "--resume", devices=1, args=args, config=CFG)
        assert proc.returncode == 0, proc.stderr[-3000:]
        said = proc.stdout + proc.stderr
        assert re.search(r"resuming at [36]\b", said), said[-2000:]
        assert "started afresh: actors" in said
        assert summary["env_steps"] == 768
        finished.append(summary["param_fingerprint"])
    assert finished[0] == finished[1]


def test_a_nan_from_one_agent_drops_its_environments_step_once(tmp_path):
    """agent_1's reward is NaN at each episode's 5th step: with ``env_nonfinite: reset`` that
    environment's step is dropped for all its agents, counted once per environment, and
    nothing non-finite is learned; by default the run stops naming the environment."""
    env = "pettingzoo:jaxrl_test_spread_nan_v0"
    args = [*ARGS, "--set", f"env={env}", "--set", "total_timesteps=192",
            "--set", "updates_per_call=3", "--set", "checkpoint_every=0"]
    proc, summary = train_cli(tmp_path / "reset", devices=2, config=CFG, **PLUGIN,
                              args=[*args, "--set", "env_nonfinite=reset"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    # 4 environments x 48 steps: each drops its 5th step, then its fresh episode's 5th, ...
    assert summary["env_nonfinite_resets"] == 4 * 9, summary
    assert summary["nonfinite_skipped"] == 0
    import jax
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(params_of(tmp_path / "reset")[0]))
    proc, _ = train_cli(tmp_path / "error", devices=2, config=CFG, args=args, **PLUGIN)
    assert proc.returncode != 0
    err = proc.stderr.strip().splitlines()[-1]
    assert "environment 0" in err and "non-finite reward" in err and "step 5" in err, err


@pytest.mark.parametrize("config,env,sets,words", [
    (CFG, "pettingzoo:simple_tag_v3", [], ["observation spaces differ", "adversary_0"]),
    (CFG, "pettingzoo:simple_sprad_v3", [], ["unknown PettingZoo environment",
                                             "pettingzoo:simple_spread_v3"]),
    (CFG, "pettingzoo:jaxrl_test_spread_aec_v0", [], ["AEC API", "ParallelEnv"]),
    (CFG, SPREAD, ["env_kwargs={N: 3, colour: red}"], ["bad env_kwargs"]),
    ("configs/cartpole_dqn.yaml", SPREAD, ["num_envs=4"], ["algo dqn trains one agent"]),
    ("configs/gymnasium_cartpole.yaml", "gymnasium:CartPole-v1", ["team.critic=central"],
     ["team: section applies to environments of several agents", "pettingzoo:"]),
])
def test_bad_pettingzoo_input_is_one_line_exit_2(config, env, sets, words, tmp_path, capsys,
                                                 plugin):
    args = [config, "--set", f"env={env}"]
    for s in sets:
        args += ["--set", s]
    bad_input_exits_2(args, words, tmp_path / "run", capsys)


def test_agents_leaving_before_the_episode_ends_are_one_line(tmp_path):
    """An agent that ends its episode while the others go on stops the run with one line
    naming it (jaxrl_dist's teams end together), and nothing is left running."""
    proc, _ = train_cli(tmp_path / "run", devices=1, config=CFG, **PLUGIN,
                        args=[*ARGS, "--set", "env=pettingzoo:jaxrl_test_leaving_v0",
                              "--set", "team.critic=local"])
    assert proc.returncode != 0
    err = proc.stderr.strip().splitlines()[-1]
    assert "agent_1 ended their episode" in err and "every agent at once" in err, err
