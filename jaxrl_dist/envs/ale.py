"""Atari 2600 games through the Arcade Learning Environment (``ale:Pong``, ``ale:Breakout``, any
ROM ale-py ships), stepped inside the compiled program through ale-py's XLA interface.

ale-py's vector environment does the standard preprocessing in C++ (frame skip with max-pooling,
84x84 grayscale, frame stack, no-op starts, sticky actions, fire on reset, the 108k-frame
limit); its ``xla()`` functions step a pool of them as FFI calls on a handle (see
:mod:`jaxrl_dist.envs.pool`). Scores are always the game's own: reward clipping and episodic
life apply to what the learner sees (:class:`~jaxrl_dist.envs.pool.PoolOptions`), so metrics,
evaluations and the summary report real game scores.

Every option below is an ``env_kwargs`` key; the defaults are the usual ones (Machado et al.
2018's v5 protocol with the DQN preprocessing).
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_dist.envs.base import EnvError, EnvSpec
from jaxrl_dist.envs.pool import PoolOptions, PoolStep

DEFAULTS = dict(
    frame_skip=4,                     # emulator frames per agent step (rewards summed)
    max_pool=True,                    # observation = max of the last two frames (flicker)
    frame_stack=4,                    # observation = the last 4 frames, [84, 84, 4]
    image_size=84,                    # frames resized to image_size x image_size grayscale
    noop_max=30,                      # up to 30 random no-ops after each reset
    repeat_action_probability=0.25,   # sticky actions (v5); 0 = deterministic emulator
    full_action_space=False,          # 18 actions, else the game's minimal set
    fire_reset=True,                  # press FIRE at each reset in games that need it
    clip_rewards=True,                # learn from sign(reward); scores unclipped
    episodic_life=False,              # a lost life ends the episode for learning only
    max_frames=108_000,               # time limit (emulator frames): a truncation
    num_threads=None,                 # emulator threads per pool; None = the cores a pool
                                      #   gets when every local device and process has one
)


def rom_id(name: str) -> str:
    """``Pong`` / ``MsPacman`` / ``ms_pacman`` -> ale-py's ROM id (snake case)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower().replace("-", "_")


def _default_threads() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    processes = int(os.environ.get("JAXRL_LOCAL_WORLD_SIZE", "1"))
    return max(1, (cores or 1) // max(1, jax.local_device_count() * processes))


@dataclass(eq=False)
class AlePool:
    """ale-py's ``AtariVectorEnv`` pools of one game, opened per device (see ``pool.Pool``)."""

    game: str
    settings: dict[str, Any]
    options: PoolOptions
    num_actions: int
    _opened: list = field(default_factory=list)      # keeps every pool (and its handle) alive
    _calls: dict = field(default_factory=dict)        # pool size -> its (reset, step) calls

    def _vector_env(self, num_envs: int) -> Any:
        from ale_py.vector_env import AtariVectorEnv
        s = self.settings
        return AtariVectorEnv(
            self.game, num_envs, num_threads=min(num_envs, s["num_threads"]),
            max_num_frames_per_episode=s["max_frames"],
            repeat_action_probability=s["repeat_action_probability"],
            full_action_space=s["full_action_space"], img_height=s["image_size"],
            img_width=s["image_size"], grayscale=True, stack_num=s["frame_stack"],
            frameskip=s["frame_skip"], maxpool=s["max_pool"], noop_max=s["noop_max"],
            episodic_life=False, reward_clipping=False, use_fire_reset=s["fire_reset"])

    def open(self, num_envs: int) -> np.ndarray:
        env = self._vector_env(num_envs)
        handle, xla_reset, xla_step = env.xla()
        self._opened.append(env)
        self._calls.setdefault(num_envs, (xla_reset, xla_step))
        return np.asarray(handle, np.uint8)

    def _call(self, num_envs: int):
        if num_envs not in self._calls:   # traced before any pool of this size was opened
            self.open(num_envs)
        return self._calls[num_envs]

    @staticmethod
    def _frames_last(obs: jax.Array) -> jax.Array:
        return jnp.moveaxis(obs, 1, -1)   # [E, stack, H, W] -> [E, H, W, stack]

    def reset(self, handle, seeds):
        xla_reset, _ = self._call(seeds.shape[0])
        handle, (obs, info) = xla_reset(handle, seeds)
        return handle, self._frames_last(obs), info["lives"]

    def step(self, handle, action):
        _, xla_step = self._call(action.shape[0])
        handle, (obs, reward, terminated, truncated, info) = xla_step(handle, action)
        return handle, PoolStep(self._frames_last(obs), reward.astype(jnp.float32), terminated,
                                truncated, info["lives"])


def make(name: str, episode_length: int | None = None, **kwargs: Any) -> EnvSpec:
    if episode_length is not None:
        raise EnvError("episode_length does not apply to ale: environments; set the time limit "
                       "in emulator frames with env_kwargs: {max_frames: N} (default 108000)")
    unknown = sorted(set(kwargs) - set(DEFAULTS))
    if unknown:
        raise EnvError(f"ale:{name}: unknown env_kwargs {unknown}; known: "
                       f"{', '.join(DEFAULTS)}")
    settings = {**DEFAULTS, **kwargs}
    settings["num_threads"] = settings["num_threads"] or _default_threads()
    for key in ("frame_skip", "frame_stack", "image_size", "max_frames", "num_threads"):
        if not isinstance(settings[key], int) or settings[key] < 1:
            raise EnvError(f"ale:{name}: env_kwargs.{key} must be an integer >= 1, got "
                           f"{settings[key]!r}")
    if not isinstance(settings["noop_max"], int) or settings["noop_max"] < 0:
        raise EnvError(f"ale:{name}: env_kwargs.noop_max must be an integer >= 0")
    if not 0.0 <= float(settings["repeat_action_probability"]) <= 1.0:
        raise EnvError(f"ale:{name}: env_kwargs.repeat_action_probability must be in [0, 1]")

    from ale_py import roms
    game = rom_id(name)
    known = roms.get_all_rom_ids()
    if game not in known:
        close = difflib.get_close_matches(game, known, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise EnvError(f"ale:{name} is not a ROM ale-py ships (looked for '{game}'){hint} "
                       f"All {len(known)}: python -c \"from ale_py import roms; "
                       f"print(roms.get_all_rom_ids())\"")
    from ale_py import ALEInterface, LoggerMode
    ALEInterface.setLoggerMode(LoggerMode.Error)   # not its banner per pool and process
    ale = ALEInterface()
    ale.loadROM(roms.get_rom_path(game))
    actions = (ale.getLegalActionSet() if settings["full_action_space"]
               else ale.getMinimalActionSet())
    pool = AlePool(game, settings, PoolOptions(bool(settings["clip_rewards"]),
                                               bool(settings["episodic_life"])), len(actions))
    size, stack = settings["image_size"], settings["frame_stack"]
    return EnvSpec(adapter=None, pool=pool, autoreset="next_step", name=f"ale:{name}",
                   obs_shape=(size, size, stack),
                   action_dim=len(actions), continuous=False, obs_dtype="uint8",
                   # agent steps, +1 for the pool's own reset step after an end
                   max_episode_steps=-(-settings["max_frames"] // settings["frame_skip"]) + 1)
