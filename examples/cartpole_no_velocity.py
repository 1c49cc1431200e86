"""A partially observed Gymnasium task, registered the way a user registers their own simulator:
``JAXRL_DIST_PLUGINS=examples.cartpole_no_velocity`` (from the repository root) makes
``gymnasium:jaxrl_examples/CartPoleNoVelocity-v1`` available to configs.

Gymnasium's CartPole-v1 with its velocities hidden by an observation wrapper: the policy sees
``[x, theta]`` only and must infer the velocities from what it saw before, so a feed-forward
policy cannot balance it and a recurrent one (``ppo.network.cell: gru``) can
(configs/gymnasium_cartpole_pomdp_gru.yaml).
"""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control import CartPoleEnv

ID = "jaxrl_examples/CartPoleNoVelocity-v1"
SEEN = np.array([0, 2])   # cart position and pole angle; velocities (1, 3) are hidden


def make(**kwargs) -> gymnasium.Env:
    env = CartPoleEnv(**kwargs)
    full = env.observation_space
    seen = spaces.Box(full.low[SEEN], full.high[SEEN], dtype=np.float32)
    return gymnasium.wrappers.TransformObservation(env, lambda obs: obs[SEEN], seen)


if ID not in gymnasium.registry:
    gymnasium.register(ID, entry_point=make, max_episode_steps=500, reward_threshold=475.0)
