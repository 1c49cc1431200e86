"""The proof an exported policy acts as the learner's: the same observations through both.

Observations are sampled from the recorded observation space (standard normals x 3, or uint8
frames), and, for a gymnax or Gymnasium task whose library is installed, also real ones: a few
random-action steps of the environment. Tasks with action masks get random masks with at least
one legal action. :func:`check_parity` compares at batch 1, 2 and 7: discrete actions must be
equal, continuous ones within 1e-5 (absolute). It is the one comparison every exported form
goes through (ONNX; StableHLO at batch 7 alone, each batch size being a compile of its own; a
recurrent policy would add its carry here).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.export.graph import ExportError

BATCHES = (1, 2, 7)
CONTINUOUS_ATOL = 1e-5
NUM_OBS = max(BATCHES)


class ParityError(ExportError):
    """The exported policy acts unlike the learner's: a bug, nothing written."""

    exit_code = 1


def sampled_observations(spec: EnvSpec, n: int = NUM_OBS, seed: int = 0) -> np.ndarray:
    """[n, *obs_shape] drawn from the recorded space (its bounds are not recorded: wide normals
    reach the clipping of observation normalisation)."""
    rng = np.random.default_rng(seed)
    if spec.obs_dtype == "uint8":
        return rng.integers(0, 256, (n, *spec.obs_shape), dtype=np.uint8)
    return (rng.normal(size=(n, *spec.obs_shape)) * 3).astype(np.float32)


def sampled_masks(spec: EnvSpec, n: int = NUM_OBS, seed: int = 0) -> np.ndarray | None:
    """[n, A] bool legal-action masks, each with at least one legal action; None unmasked."""
    if not spec.masked:
        return None
    rng = np.random.default_rng(seed + 1)
    mask = rng.random((n, spec.action_dim)) < 0.5
    mask[np.arange(n), rng.integers(0, spec.action_dim, n)] = True
    return mask


def _random_actions(spec: EnvSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    if not spec.continuous:
        return rng.integers(0, spec.action_dim, n).astype(np.int32)
    low, high = (np.broadcast_to(np.asarray(b, np.float32), (spec.action_dim,))
                 for b in (spec.action_low, spec.action_high))
    return rng.uniform(np.maximum(low, -1e3), np.minimum(high, 1e3),
                       (n, spec.action_dim)).astype(np.float32)


def _gymnax_observations(env_id: str, config: dict[str, Any], spec: EnvSpec, n: int,
                         seed: int) -> np.ndarray:
    """Environment i after i random steps (the trainer's own adapter: its observations)."""
    import jax

    from jaxrl_dist.envs import registry

    env = registry.make_env(env_id, episode_length=config.get("episode_length"),
                            env_kwargs=config.get("env_kwargs"))
    rng = np.random.default_rng(seed)
    keys = jax.random.split(jax.random.PRNGKey(seed), n)
    state, obs = jax.vmap(env.adapter.reset)(keys)
    step = jax.jit(jax.vmap(env.adapter.step))
    found = [np.asarray(obs)]
    for t in range(n - 1):
        out = step(jax.random.split(jax.random.PRNGKey(seed + 1 + t), n), state,
                   _random_actions(spec, rng, n))
        state = out.state
        found.append(np.asarray(out.obs))
    return np.stack([found[i][i] for i in range(n)])


def _gymnasium_observations(name: str, config: dict[str, Any], spec: EnvSpec, n: int,
                            seed: int) -> np.ndarray:
    import gymnasium

    from jaxrl_dist import plugins

    plugins.load()
    kwargs = {k: v for k, v in (config.get("env_kwargs") or {}).items()
              if k not in ("vectorization", "step_timeout")}
    env = gymnasium.make(name, **kwargs)
    rng = np.random.default_rng(seed)
    found = []
    try:
        for i in range(n):
            obs, _ = env.reset(seed=seed + i)
            for _ in range(i):
                action = _random_actions(spec, rng, 1)[0]
                obs, _, terminated, truncated, _ = env.step(action if spec.continuous
                                                            else int(action))
                if terminated or truncated:
                    break
            found.append(np.asarray(obs).reshape(spec.obs_shape))
    finally:
        env.close()
    return np.stack(found)


def real_observations(config: dict[str, Any] | None, spec: EnvSpec, n: int = NUM_OBS,
                      seed: int = 0) -> np.ndarray | None:
    """[n, *obs_shape] from the run's environment when it is a gymnax or Gymnasium one that
    can be built here; None otherwise (then sampled ones alone prove parity)."""
    env_id = (config or {}).get("env")
    if not isinstance(env_id, str):
        return None
    from jaxrl_dist.envs import registry

    try:
        suite, name = registry.parse(env_id)
        if suite == "gymnax":
            obs = _gymnax_observations(env_id, config, spec, n, seed)
        elif suite == "gymnasium":
            obs = _gymnasium_observations(name, config, spec, n, seed)
        else:
            return None
    except Exception:   # noqa: BLE001 - a missing library or plug-in: sampled ones suffice
        return None
    return obs.astype(np.uint8 if spec.obs_dtype == "uint8" else np.float32)


def check_parity(candidate: Callable[[np.ndarray, np.ndarray | None], np.ndarray],
                 reference: Callable[[np.ndarray, np.ndarray | None], np.ndarray],
                 spec: EnvSpec, obs: np.ndarray, mask: np.ndarray | None, what: str,
                 batches: tuple[int, ...] = BATCHES) -> float:
    """The largest |difference| between ``candidate``'s and ``reference``'s actions on the
    first 1, 2 and 7 observations (and masks); raises :class:`ParityError` naming it when
    discrete actions differ or continuous ones by more than 1e-5."""
    worst = 0.0
    for b in batches:
        m = None if mask is None else mask[:b]
        expected = np.asarray(reference(obs[:b], m))
        got = np.asarray(candidate(obs[:b], m))
        if got.shape != expected.shape:
            raise ParityError(f"{what}: actions of shape {got.shape} at batch {b}, the "
                              f"policy's are {expected.shape}")
        diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
        diff = np.where(np.isnan(diff), np.inf, diff)
        worst = max(worst, float(diff.max(initial=0.0)))
        bad = diff > CONTINUOUS_ATOL if spec.continuous else diff > 0
        if bad.any():
            rule = (f"more than {CONTINUOUS_ATOL:g}" if spec.continuous else
                    f"in {int(bad.sum())} of {bad.size} discrete actions")
            raise ParityError(f"{what} differs from the trained policy at batch {b}: largest "
                              f"|difference| {float(diff.max()):.3g} ({rule}); nothing written")
    return worst
