"""A trained policy from a run directory alone: no environment library, no config file.

Every checkpoint records the algorithm, its config section and the observation and action
specs (``meta["policy"]``) and holds the arrays the policy needs (the ``policy`` item), so::

    policy = jaxrl_dist.policy.load("runs/CartPole-v1-seed0-...")
    action = policy(obs)            # obs [B, *obs_shape] -> environment actions [B, ...]

runs the learner's own ``policy`` function (deterministic; observation normalisation and
clipping/squashing to the action bounds included): what evaluation ran, and what an exporter
serialises (``policy.fn`` is pure: ``fn(policy.params, obs, mask)``).

A recurrent policy (``ppo.network.cell: gru``) keeps a state per environment; step it::

    carry = policy.initial_carry(B)
    action, carry = policy.act(obs, carry)           # and again with the next observations
    carry = policy.reset_carry(carry, done)          # rows whose episode ended start afresh

(``act`` works for feed-forward policies too, with the carry ``()``; ``policy(obs)`` and
``policy.fn`` are for feed-forward ones only; ``policy.step_fn`` is ``act``'s pure function.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np

from jaxrl_dist import agents, typed
from jaxrl_dist.checkpoint import CheckpointError, read_checkpoint
from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.errors import UserError


@dataclass(frozen=True)
class Policy:
    fn: Callable[..., jax.Array] | None   # pure: (params, obs [B, *obs], mask [B, A] | None)
                                          #   -> action; None for a recurrent policy
    params: Any
    spec: EnvSpec
    algo: str
    step: int                      # the checkpoint's update count
    step_fn: Callable[..., tuple[jax.Array, Any]] | None = None
    #   pure: (params, carry [B], obs [B, *obs], mask | None) -> (action, carry)
    init_carry: Callable[[], Any] = tuple   # ONE environment's initial carry; () feed-forward

    @property
    def recurrent(self) -> bool:
        return bool(jax.tree.leaves(self.init_carry()))

    def __call__(self, obs: Any, mask: Any = None) -> np.ndarray:
        if self.fn is None:
            raise UserError("this policy is recurrent (it keeps a state per environment): "
                              "use action, carry = policy.act(obs, carry) from "
                              "carry = policy.initial_carry(batch)")
        return np.asarray(self.fn(self.params, np.asarray(obs, np.float32), mask))

    def initial_carry(self, batch: int) -> Any:
        """The carry of ``batch`` environments at an episode's start (``()`` feed-forward)."""
        return jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (batch, *x.shape)).copy(),
                            self.init_carry())

    def reset_carry(self, carry: Any, done: Any) -> Any:
        """``carry`` with the rows of environments whose episode ended (``done`` [B]) fresh."""
        done = np.asarray(done, bool)
        return jax.tree.map(
            lambda c0, c: np.where(done.reshape(-1, *(1,) * (np.ndim(c) - 1)), c0, c),
            self.initial_carry(len(done)), carry)

    def act(self, obs: Any, carry: Any, mask: Any = None) -> tuple[np.ndarray, Any]:
        """(environment actions [B, ...], next carry) for observations [B, *obs] and the
        carry of the step before (deterministic, as ``__call__``)."""
        action, carry = self.step_fn(self.params, carry, np.asarray(obs, np.float32), mask)
        return np.asarray(action), jax.tree.map(np.asarray, carry)


def record(algo: str, section: dict[str, Any], spec: EnvSpec) -> dict[str, Any]:
    """What a checkpoint's meta records under ``policy`` (plain JSON)."""
    return {"algo": algo, "section": section, "env": spec.describe()}


def make_deployment(policy_record: dict[str, Any]) -> tuple[Any, EnvSpec]:
    """The learner's ``policy`` and ``init_carry``
    (:class:`~jaxrl_dist.agents.base.Deployment`), rebuilt from a checkpoint's record by the
    algorithm's own ``policy`` factory: what its agent deploys, without a run's sizes or mesh."""
    algorithm = agents.get(policy_record["algo"])
    section = typed.build(algorithm.section, policy_record["section"], f"{algorithm.name}.")
    spec = EnvSpec.from_description(policy_record["env"])
    return algorithm.policy_factory()(section, spec), spec


def feed_forward(deployed: Any) -> Callable[..., jax.Array] | None:
    """``deployed.policy`` (a Deployment's or an Agent's) without a carry, jitted:
    ``(params, obs, mask) -> action``; None for a recurrent policy (whose actions depend on a
    state it must be given)."""
    if jax.tree.leaves(deployed.init_carry()):
        return None
    return jax.jit(lambda params, obs, mask=None: deployed.policy(params, (), obs, mask)[0])


def make_policy_fn(policy_record: dict[str, Any]) -> tuple[Callable[..., jax.Array], EnvSpec]:
    """The learner's pure feed-forward ``policy`` function ``(params, obs, mask) -> action``,
    rebuilt from a checkpoint's record (a recurrent policy has none: :func:`load` it and
    step it with ``Policy.act``)."""
    deployed, spec = make_deployment(policy_record)
    fn = feed_forward(deployed)
    if fn is None:
        raise UserError(f"the {policy_record['algo']} policy of this record is recurrent: it has "
                        f"no feed-forward function; load it and use Policy.act(obs, carry)")
    return fn, spec


def load(run_dir: str | Path, step: int | None = None, member: int | None = None) -> Policy:
    """The policy of a run directory's latest (or ``step``'s) checkpoint; ``member`` picks one
    member of a population (required for one)."""
    params, meta = read_checkpoint(Path(run_dir) / "checkpoints", step, item="policy")
    policy_record = meta.get("policy")
    if policy_record is None:
        raise CheckpointError(f"the checkpoint in {run_dir} records no policy (written by an "
                              f"older version: train with this one)")
    members = meta.get("members")
    if members:
        if member is None or not 0 <= member < members:
            raise CheckpointError(f"{run_dir} holds a population of {members} members: pass "
                                  f"member=0..{members - 1}")
        params = jax.tree.map(lambda x: x[member], params)
    deployed, spec = make_deployment(policy_record)
    return Policy(feed_forward(deployed), params, spec, policy_record["algo"],
                  int(meta["updates"]), jax.jit(deployed.policy), deployed.init_carry)
