"""Register ale-py 0.12's Atari ids (PongNoFrameskip-v4, ALE/Pong-v5, ...) in gym 0.25.1.

ale-py >= 0.9 registers its envs with gymnasium only; DI-engine 0.5.3's dizoo/atari calls
gym.make('PongNoFrameskip-v4') and uses the old gym API (env.seed(s), reset() -> obs,
step() -> 4-tuple). Import this module before DI-engine creates envs (run_config.py does);
forked env subprocesses inherit the registration.
"""
import gym
import gymnasium
import ale_py
from ale_py.env import AtariEnv
from gym.utils import seeding

gymnasium.register_envs(ale_py)


def _space(s):
    if isinstance(s, gymnasium.spaces.Discrete):
        return gym.spaces.Discrete(int(s.n))
    if isinstance(s, gymnasium.spaces.Box):
        return gym.spaces.Box(low=s.low, high=s.high, shape=s.shape, dtype=s.dtype)
    raise TypeError(f"unsupported space {s!r}")


class ALEGymEnv(gym.Env):
    """ale_py.env.AtariEnv (gymnasium API) seen through the gym 0.25 (old) API."""
    metadata = {"render_modes": ["rgb_array"], "render_fps": 60}

    def __init__(self, **kwargs):
        self._ale_env = AtariEnv(**kwargs)
        self.observation_space = _space(self._ale_env.observation_space)
        self.action_space = _space(self._ale_env.action_space)
        self._pending_seed = None

    def seed(self, seed=None):
        # Old API: the seed takes effect at the next reset (ALE reseeds its RNG on reset(seed=)).
        self._pending_seed = seed
        self._np_random, seed = seeding.np_random(seed)
        return [seed]

    def reset(self, *, seed=None, return_info=False, options=None):
        if seed is not None:
            self.seed(seed)
        obs, info = self._ale_env.reset(seed=self._pending_seed, options=options)
        self._pending_seed = None
        return (obs, info) if return_info else obs

    def step(self, action):
        obs, reward, terminated, truncated, info = self._ale_env.step(action)
        if truncated and not terminated:
            info["TimeLimit.truncated"] = True
        return obs, reward, bool(terminated or truncated), info

    def render(self, mode="rgb_array"):
        return self._ale_env.render()

    def close(self):
        self._ale_env.close()

    @property
    def ale(self):
        return self._ale_env.ale

    def get_action_meanings(self):
        return self._ale_env.get_action_meanings()


def register_all():
    """Register every ale-py id that gym's registry lacks; returns how many were added."""
    n = 0
    for env_id, spec in gymnasium.registry.items():
        if spec.entry_point != "ale_py.env:AtariEnv" or env_id in gym.envs.registry:
            continue
        gym.register(
            id=env_id,
            entry_point="ale_gym_register:ALEGymEnv",
            max_episode_steps=spec.max_episode_steps,
            nondeterministic=spec.nondeterministic,
            kwargs=dict(spec.kwargs),
        )
        n += 1
    return n


register_all()
