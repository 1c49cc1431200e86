"""The proof an exported policy acts as the learner's: the same observations through both.

Observations are sampled from the recorded observation space (standard normals x 3, or uint8
frames), and, for a gymnax or Gymnasium task whose library is installed, also real ones: a few
random-action steps of the environment. Tasks with action masks get random masks with at least
one legal action. :func:`check_parity` compares at batch 1, 2 and 7: discrete actions must be
equal, continuous ones within 1e-5 (absolute). It is the one comparison every exported form
goes through (ONNX; StableHLO at batch 7 alone, each batch size being a compile of its own).

A recurrent policy is compared over SEQUENCES (:func:`check_recurrent_parity`): 6 steps at batch
1, 2 and 7, each side fed its own carry from its own initial one, the even rows reset to the
initial carry before step 3 (as at an episode's start); actions as above, and every carry
within 1e-5 after every step. Its observations are sampled ``[6, 7, *obs]`` and, for a gymnax
task, 7 environments stepped 6 times with random actions.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.export.graph import ExportError

BATCHES = (1, 2, 7)
CONTINUOUS_ATOL = 1e-5
NUM_OBS = max(BATCHES)
SEQUENCE_LENGTH = 6      # steps of a recurrent policy's parity sequences
RESET_AT = 3             # the step before which the even rows start afresh
CARRY_ATOL = 1e-5


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


def _gymnax_steps(env_id: str, config: dict[str, Any], spec: EnvSpec, n: int, steps: int,
                  seed: int) -> np.ndarray:
    """[steps, n, *obs]: ``n`` environments (the trainer's own adapter: its observations) from
    reset through ``steps - 1`` random-action steps."""
    import jax

    from jaxrl_dist.envs import registry

    env = registry.make_env(env_id, episode_length=config.get("episode_length"),
                            env_kwargs=config.get("env_kwargs"))
    rng = np.random.default_rng(seed)
    keys = jax.random.split(jax.random.PRNGKey(seed), n)
    state, obs = jax.vmap(env.adapter.reset)(keys)
    step = jax.jit(jax.vmap(env.adapter.step))
    found = [np.asarray(obs)]
    for t in range(steps - 1):
        out = step(jax.random.split(jax.random.PRNGKey(seed + 1 + t), n), state,
                   _random_actions(spec, rng, n))
        state = out.state
        found.append(np.asarray(out.obs))
    return np.stack(found)


def _gymnax_observations(env_id: str, config: dict[str, Any], spec: EnvSpec, n: int,
                         seed: int) -> np.ndarray:
    """Environment i after i random steps."""
    found = _gymnax_steps(env_id, config, spec, n, n, seed)
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


def sampled_sequences(spec: EnvSpec, length: int = SEQUENCE_LENGTH, n: int = NUM_OBS,
                      seed: int = 0) -> tuple[np.ndarray, np.ndarray | None]:
    """Observations [length, n, *obs_shape] and masks [length, n, A] (None unmasked), drawn
    as :func:`sampled_observations` and :func:`sampled_masks` draw them."""
    obs = sampled_observations(spec, length * n, seed)
    mask = sampled_masks(spec, length * n, seed)
    return (obs.reshape(length, n, *spec.obs_shape),
            None if mask is None else mask.reshape(length, n, spec.action_dim))


def real_sequences(config: dict[str, Any] | None, spec: EnvSpec, length: int = SEQUENCE_LENGTH,
                   n: int = NUM_OBS, seed: int = 0) -> np.ndarray | None:
    """[length, n, *obs_shape]: ``n`` environments of the run's task stepped with random
    actions, when it is a gymnax one that can be built here (recurrent policies train on
    environments stepped inside the program; Gymnasium's are not among them); None
    otherwise."""
    env_id = (config or {}).get("env")
    if not isinstance(env_id, str):
        return None
    from jaxrl_dist.envs import registry

    try:
        if registry.parse(env_id)[0] != "gymnax":
            return None
        obs = _gymnax_steps(env_id, config, spec, n, length, seed)
    except Exception:   # noqa: BLE001 - a missing library: sampled ones suffice
        return None
    return obs.astype(np.uint8 if spec.obs_dtype == "uint8" else np.float32)


def _compare(got: np.ndarray, expected: np.ndarray, atol: float | None, what: str,
             where: str, noun: str) -> float:
    """The largest |difference| of two arrays; :class:`ParityError` over ``atol`` (None:
    any difference, for discrete actions)."""
    if got.shape != expected.shape:
        raise ParityError(f"{what}: {noun} of shape {got.shape} {where}, the policy's are "
                          f"{expected.shape}")
    diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    diff = np.where(np.isnan(diff), np.inf, diff)
    bad = diff > atol if atol is not None else diff > 0
    if bad.any():
        rule = (f"{noun}: more than {atol:g}" if atol is not None else
                f"in {int(bad.sum())} of {bad.size} discrete {noun}")
        raise ParityError(f"{what} differs from the trained policy {where}: largest "
                          f"|difference| {float(diff.max()):.3g} ({rule}); nothing written")
    return float(diff.max(initial=0.0))


class Stepper(NamedTuple):
    """One side of a recurrent comparison; a carry is the LIST of its arrays [B, size]
    (the Policy's carry flattened by ``jax.tree.leaves``)."""

    initial: Callable[[int], list[np.ndarray]]   # batch -> the carry at episode starts
    step: Callable[..., tuple[np.ndarray, list[np.ndarray]]]
    #   (obs [B, *obs], carry, mask [B, A] | None) -> (actions, next carry)
    reset: Callable[[list[np.ndarray], np.ndarray], list[np.ndarray]]
    #   (carry, done [B]) -> the carry with the done rows initial


def check_recurrent_parity(candidate: Stepper, reference: Stepper, spec: EnvSpec,
                           obs: np.ndarray, mask: np.ndarray | None, what: str,
                           batches: tuple[int, ...] = BATCHES) -> float:
    """Both sides stepped through ``obs`` [L, N, *obs] (and ``mask`` [L, N, A]) at each batch
    size, each from its own initial carry and fed its own carry, the even rows reset before
    step :data:`RESET_AT`; the largest |difference| of actions and carries. Raises
    :class:`ParityError` when discrete actions differ, continuous ones by more than 1e-5, or a
    carry by more than 1e-5."""
    worst = 0.0
    for b in batches:
        carries = [candidate.initial(b), reference.initial(b)]
        for t in range(obs.shape[0]):
            where = f"at batch {b}, step {t} of {obs.shape[0]}"
            if t == RESET_AT:
                done = np.arange(b) % 2 == 0
                carries = [candidate.reset(carries[0], done), reference.reset(carries[1], done)]
            m = None if mask is None else mask[t, :b]
            expected, carries[1] = reference.step(obs[t, :b], carries[1], m)
            got, carries[0] = candidate.step(obs[t, :b], carries[0], m)
            worst = max(worst, _compare(np.asarray(got), np.asarray(expected),
                                        CONTINUOUS_ATOL if spec.continuous else None, what,
                                        where, "actions"))
            if len(carries[0]) != len(carries[1]):
                raise ParityError(f"{what}: a carry of {len(carries[0])} arrays, the "
                                  f"policy's has {len(carries[1])}")
            for c_got, c_expected in zip(*carries):
                worst = max(worst, _compare(np.asarray(c_got), np.asarray(c_expected),
                                            CARRY_ATOL, what, where, "carry"))
    return worst


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
