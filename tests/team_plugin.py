"""PettingZoo environments a user would register in a ``JAXRL_DIST_PLUGINS`` module; the host
team tests load this one (``JAXRL_DIST_PLUGINS=team_plugin``, tests/ on PYTHONPATH).

* ``jaxrl_test_spread_nan_v0``: mpe2's simple_spread_v3 whose agent_1 gets a NaN reward at the
  5th step of every episode (a fault of the environment's own episode, on every topology).
* ``jaxrl_test_leaving_v0``: two agents; agent_1 terminates at the 3rd step while agent_0 goes
  on (agents leaving mid-episode: refused in one line).
* ``jaxrl_test_spread_aec_v0``: simple_spread_v3's AEC API, not the parallel one (refused).
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv

from jaxrl_dist.envs.pettingzoo import register


class SpreadNaN(ParallelEnv):
    """simple_spread_v3 with agent_1's reward NaN at each episode's 5th step."""

    def __init__(self, **kwargs):
        from mpe2 import simple_spread_v3
        self.env = simple_spread_v3.parallel_env(**kwargs)
        self.possible_agents = self.env.possible_agents
        self.metadata = self.env.metadata
        self.t = 0

    @property
    def agents(self):
        return self.env.agents

    def observation_space(self, agent):
        return self.env.observation_space(agent)

    def action_space(self, agent):
        return self.env.action_space(agent)

    def reset(self, seed=None, options=None):
        self.t = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, actions):
        self.t += 1
        obs, rewards, terms, truncs, infos = self.env.step(actions)
        if self.t == 5:
            rewards = {**rewards, "agent_1": float("nan")}
        return obs, rewards, terms, truncs, infos

    def close(self):
        self.env.close()


class Leaving(ParallelEnv):
    """agent_1 leaves (terminated) at the 3rd step; agent_0 stays until the 10th."""

    metadata = {"name": "leaving_v0"}

    def __init__(self):
        self.possible_agents = ["agent_0", "agent_1"]
        self.agents = []
        self.t = 0

    def observation_space(self, agent):
        return spaces.Box(-1.0, 1.0, (2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def _obs(self):
        return {a: np.full(2, self.t / 10, np.float32) for a in self.agents}

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        obs = self._obs()
        terms = {a: (a == "agent_1" and self.t >= 3) or self.t >= 10 for a in self.agents}
        rewards = {a: 0.0 for a in self.agents}
        truncs = {a: False for a in self.agents}
        self.agents = [a for a in self.agents if not terms[a]]
        return obs, rewards, terms, truncs, {a: {} for a in obs}


def _aec(**kwargs):
    from mpe2 import simple_spread_v3
    return simple_spread_v3.env(**kwargs)


register("jaxrl_test_spread_nan_v0", SpreadNaN)
register("jaxrl_test_leaving_v0", Leaving)
register("jaxrl_test_spread_aec_v0", _aec)
