"""Gymnasium environments a user would register in a ``JAXRL_DIST_PLUGINS`` module; the host
environment tests load this one (``JAXRL_DIST_PLUGINS=host_plugin``, tests/ on PYTHONPATH).

* ``jaxrl_test/Corridor-v0``: deterministic given its seed (the start cell), discrete actions,
  a terminal goal and a time limit: what topology-invariance and resume tests need.
* ``jaxrl_test/Faulty-v0``: the corridor, but on the rank named by ``JAXRL_TEST_FAULTY_RANK``
  its step raises after ``JAXRL_TEST_FAULTY_STEPS`` steps: a user's simulator failing.
* ``jaxrl_test/Hangs-v0``: the same trigger, but the step never returns.
* ``jaxrl_test/Glitch-v0``: the same trigger, but one step returns a NaN observation (a sensor
  glitch), and the corridor goes on.
* ``jaxrl_test/Sensor-v0``: the corridor whose sensor fails at the 5th step of every episode
  started in cell 0 (a NaN observation), on every process alike: a fault that depends on the
  environment's own episode, not on the topology.
* ``jaxrl_test/MultiDiscrete-v0``: an action space the networks cannot take.
* ``jaxrl_test/NeedsMujoco-v0``: its constructor reports a missing optional dependency.
"""

from __future__ import annotations

import os

import gymnasium
import numpy as np
from gymnasium import spaces


class Corridor(gymnasium.Env):
    """Walk right from a random start cell in [0, 3) to cell 6 (+1, terminal); -0.01 a step."""

    LENGTH = 6

    def __init__(self):
        self.observation_space = spaces.Box(-1.0, 2.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.x = 0
        self.steps = 0

    def _obs(self):
        return np.array([self.x / self.LENGTH, self.steps / 50.0], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = int(self.np_random.integers(0, 3))
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        self.steps += 1
        self.x = max(0, self.x + (1 if int(action) == 1 else -1))
        done = self.x >= self.LENGTH
        return self._obs(), (1.0 if done else -0.01), done, False, {}


class Faulty(Corridor):
    def __init__(self):
        super().__init__()
        self.total = 0
        rank = os.environ.get("JAXRL_TEST_FAULTY_RANK")
        self.armed = rank is not None and rank == os.environ.get("JAXRL_PROCESS_ID", "0")
        self.after = int(os.environ.get("JAXRL_TEST_FAULTY_STEPS", "50"))

    def step(self, action):
        self.total += 1
        if self.armed and self.total > self.after:
            raise RuntimeError(f"simulator fault: joint 3 exploded at step {self.total}")
        return super().step(action)


class Hangs(Faulty):
    """Faulty's trigger, but the step never returns (a hung simulator)."""

    def step(self, action):
        self.total += 1
        if self.armed and self.total > self.after:
            import time
            while True:
                time.sleep(1)
        return Corridor.step(self, action)


class Glitch(Faulty):
    """Faulty's trigger, but the step after ``after`` returns a NaN observation, once."""

    def step(self, action):
        self.total += 1
        obs, reward, terminated, truncated, info = Corridor.step(self, action)
        if self.armed and self.total == self.after + 1:
            obs = np.full_like(obs, np.nan)
        return obs, reward, terminated, truncated, info


class Sensor(Corridor):
    """The corridor; an episode started in cell 0 reads NaN at its 5th step."""

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        self.start = self.x
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if self.start == 0 and self.steps == 5:
            obs = np.full_like(obs, np.nan)
        return obs, reward, terminated, truncated, info


class MultiAction(Corridor):
    def __init__(self):
        super().__init__()
        self.action_space = spaces.MultiDiscrete([2, 3])


class NeedsMujoco(Corridor):
    def __init__(self):
        raise gymnasium.error.DependencyNotInstalled(
            "No module named 'mujoco'. (HINT: you need to install mujoco)")


for _name, _cls, _limit in [("Corridor-v0", Corridor, 40), ("Faulty-v0", Faulty, 40),
                            ("Hangs-v0", Hangs, 40), ("Glitch-v0", Glitch, 40),
                            ("Sensor-v0", Sensor, 40),
                            ("MultiDiscrete-v0", MultiAction, 40),
                            ("NeedsMujoco-v0", NeedsMujoco, 40)]:
    if f"jaxrl_test/{_name}" not in gymnasium.registry:
        gymnasium.register(f"jaxrl_test/{_name}", entry_point=_cls, max_episode_steps=_limit)
