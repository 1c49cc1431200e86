"""A trained policy from a run directory alone: no environment library, no config file.

Every checkpoint records the algorithm, its config section and the observation and action
specs (``meta["policy"]``) and holds the arrays the policy needs (the ``policy`` item), so::

    policy = jaxrl_dist.policy.load("runs/CartPole-v1-seed0-...")
    action = policy(obs)            # obs [B, *obs_shape] -> environment actions [B, ...]

runs the learner's own ``policy`` function (deterministic; observation normalisation and
clipping/squashing to the action bounds included): what evaluation ran, and what an exporter
serialises (``policy.fn`` is pure: ``fn(policy.params, obs, mask)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np

from jaxrl_dist import agents, sharding, typed
from jaxrl_dist.checkpoint import CheckpointError, read_checkpoint
from jaxrl_dist.envs import EnvSpec
from jaxrl_dist.sizes import Sizes


@dataclass(frozen=True)
class Policy:
    fn: Callable[..., jax.Array]   # pure: (params, obs [B, *obs], mask [B, A] | None) -> action
    params: Any
    spec: EnvSpec
    algo: str
    step: int                      # the checkpoint's update count

    def __call__(self, obs: Any, mask: Any = None) -> np.ndarray:
        return np.asarray(self.fn(self.params, np.asarray(obs, np.float32), mask))


def record(algo: str, section: dict[str, Any], spec: EnvSpec) -> dict[str, Any]:
    """What a checkpoint's meta records under ``policy`` (plain JSON)."""
    return {"algo": algo, "section": section, "env": spec.describe()}


def make_policy_fn(policy_record: dict[str, Any]) -> tuple[Callable[..., jax.Array], EnvSpec]:
    """The learner's pure ``policy`` function, rebuilt from a checkpoint's record."""
    algorithm = agents.get(policy_record["algo"])
    section = typed.build(algorithm.section, policy_record["section"], f"{algorithm.name}.")
    spec = EnvSpec.from_description(policy_record["env"])
    layout = sharding.make_layout(jax.local_devices()[:1])
    steps = algorithm.steps_per_env(section)   # sizes only shape the learning programs
    sizes = Sizes(num_devices=1, local_envs=1, steps_per_env=steps, batch_size=steps,
                  num_updates=1, updates_per_call=1)
    agent = algorithm.agent_factory()(section, sizes, spec, layout)
    return jax.jit(agent.policy), spec


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
    fn, spec = make_policy_fn(policy_record)
    return Policy(fn, params, spec, policy_record["algo"], int(meta["updates"]))
