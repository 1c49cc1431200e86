"""Environments outside JAX that each process steps on its own CPUs: host environments.

A host environment is a batch of environments behind one Python object (a Gymnasium vector
env, a user's numpy or torch simulator) that resets finished episodes in the SAME step and
reports the observation each one ended at (Gymnasium 1.x's ``AutoresetMode.SAME_STEP``). The
protocol is :class:`HostEnvs`; :class:`VectorEnvs` maps a Gymnasium vector env onto it without
a Python loop per environment. The trainer's host actors (:mod:`jaxrl_dist.actors`) step one
per process, act with the learner's ``act`` on a local device and hand the batches to the same
``learn`` program the on-device rollout feeds.

Seeds come from the caller, one per environment, made from the GLOBAL environment index, so an
environment sees the same episodes whichever process steps it.
"""

from __future__ import annotations

import multiprocessing
from typing import Any, Callable, NamedTuple, Protocol

import numpy as np

from jaxrl_dist.errors import EnvError


class HostStep(NamedTuple):
    """One step of a process's batch [N] (finished environments already reset)."""

    obs: np.ndarray          # [N, *obs] the next observation (a reset one where an episode ended)
    reward: np.ndarray       # [N] float32
    terminated: np.ndarray   # [N] bool
    truncated: np.ndarray    # [N] bool
    final_obs: np.ndarray    # [N, *obs] the observation each step reached (== obs unless ended)


class HostEnvs(Protocol):
    """``num_envs`` environments stepped together on this process's CPUs."""

    num_envs: int

    def reset(self, seeds: list[int]) -> np.ndarray:
        """Seed every environment and start its first episode; returns obs [N, *obs]."""

    def step(self, actions: np.ndarray) -> HostStep: ...

    def close(self) -> None: ...

    # Optional, for ``env_nonfinite: reset``: start a new episode in the environments of
    # ``mask`` [N] (seeds [N], used where ``mask``) and return every observation [N, *obs].
    # def reset_some(self, seeds: list[int], mask: np.ndarray) -> np.ndarray: ...


# Opens this process's environments of a spec: (num_envs, evaluation) -> HostEnvs; called once
# for training's and once for evaluation's (``evaluation=True``), which must be apart.
HostFactory = Callable[[int, bool], HostEnvs]


def require_same_step(vector_env: Any, name: str) -> None:
    """A one-line error unless a Gymnasium vector env declares SAME_STEP auto-reset in its
    metadata (as Gymnasium >= 1.1's vector envs do); a mode not declared cannot be trusted."""
    from gymnasium.vector import AutoresetMode
    mode = getattr(vector_env, "metadata", {}).get("autoreset_mode")
    if mode not in (AutoresetMode.SAME_STEP, AutoresetMode.SAME_STEP.value):
        raise EnvError(
            f"{name}: the vector env's auto-reset mode is {mode!r}; jaxrl_dist needs "
            f"SAME_STEP (the real final observation of every episode): create it with "
            f"autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP")


class VectorEnvs:
    """A Gymnasium vector env in SAME_STEP mode as :class:`HostEnvs`.

    ``step_timeout``: seconds an async vector env may take for one step before the run fails
    with a one-line error naming the environment (a hung simulator); sync envs run in this
    process, where the trainer's hang watchdog bounds them."""

    def __init__(self, env: Any, name: str, obs_dtype: np.dtype, step_timeout: float | None,
                 discrete: bool):
        require_same_step(env, name)
        self.env, self.name, self.num_envs = env, name, int(env.num_envs)
        self.obs_dtype, self.discrete = np.dtype(obs_dtype), discrete
        self.step_timeout = step_timeout
        self.hung = False
        self.is_async = hasattr(env, "step_async") and hasattr(env, "step_wait") and \
            type(env).__name__ == "AsyncVectorEnv"

    def _obs(self, obs: Any) -> np.ndarray:
        return np.asarray(obs, self.obs_dtype)

    def reset(self, seeds: list[int]) -> np.ndarray:
        obs, _ = self.env.reset(seed=[int(s) for s in seeds])
        return self._obs(obs)

    def reset_some(self, seeds: list[int], mask: np.ndarray) -> np.ndarray:
        """Gymnasium's ``reset_mask``: only the environments of ``mask`` start anew."""
        obs, _ = self.env.reset(seed=[int(s) for s in seeds],
                                options={"reset_mask": np.asarray(mask, np.bool_)})
        return self._obs(obs)

    def step(self, actions: np.ndarray) -> HostStep:
        actions = np.asarray(actions)
        if self.discrete:
            actions = actions.astype(np.int64)
        if self.is_async:
            self.env.step_async(actions)
            try:
                obs, reward, terminated, truncated, info = self.env.step_wait(
                    timeout=self.step_timeout)
            except multiprocessing.TimeoutError:
                self.hung = True   # close() must not wait for that step
                raise EnvError(f"{self.name}: a step took longer than {self.step_timeout:g} s "
                               f"(env_kwargs.step_timeout); the environment is hung or too "
                               f"slow") from None
        else:
            obs, reward, terminated, truncated, info = self.env.step(actions)
        obs = self._obs(obs)
        terminated = np.asarray(terminated, bool)
        truncated = np.asarray(truncated, bool) & ~terminated
        final_obs = obs
        ended = info.get("_final_obs") if isinstance(info, dict) else None
        if ended is not None and np.any(ended):
            final_obs = obs.copy()
            finals = info["final_obs"]
            for i in np.flatnonzero(ended):
                final_obs[i] = np.asarray(finals[i], self.obs_dtype)
        return HostStep(obs, np.asarray(reward, np.float32), terminated, truncated, final_obs)

    def close(self) -> None:
        if self.hung:   # terminate the workers instead of waiting for the hung step
            self.env.close(terminate=True)
        else:
            self.env.close()
