"""Checks of the replay keys every off-policy section has under the same names
(``batch_size``, ``buffer_size``, ``buffer_shards``, ``learning_starts``, ``num_steps``), each
error naming the section's key. jax-free."""

from __future__ import annotations

from typing import Any

from jaxrl_dist.errors import require


def check(c: Any, prefix: str) -> None:
    """The keys alone, before the run's sizes are known."""
    for name in ("batch_size", "buffer_size", "buffer_shards"):
        require(getattr(c, name) >= 1, f"{prefix}.{name} must be >= 1, got {getattr(c, name)}")
    require(c.learning_starts >= 0,
            f"{prefix}.learning_starts must be >= 0, got {c.learning_starts}")
    require(c.batch_size % c.buffer_shards == 0,
            f"{prefix}.batch_size ({c.batch_size}) must be divisible by {prefix}.buffer_shards "
            f"({c.buffer_shards}): every shard serves an equal part of each batch")


def check_run(c: Any, config: Any, prefix: str, n_step: int | None = None) -> None:
    """With the run's sizes (``num_envs``, ``total_timesteps``): whole environments per shard,
    whole updates in the buffer, a sample window (``n_step`` steps, then the step it
    bootstraps from; None: one step, a section without an ``n_step`` key) that fits, a warm-up
    the buffer can hold and the run outlasts."""
    keyed, n_step = n_step is not None, n_step or 1
    envs, per_update = config.num_envs, config.num_envs * c.num_steps
    require(envs % c.buffer_shards == 0,
            f"num_envs ({envs}) must be divisible by {prefix}.buffer_shards ({c.buffer_shards}): "
            f"each shard stores whole environments' transitions")
    require(c.buffer_size % per_update == 0,
            f"{prefix}.buffer_size ({c.buffer_size}) must be a multiple of num_envs x "
            f"{prefix}.num_steps ({per_update}): the buffer stores whole updates; e.g. "
            f"{max(1, c.buffer_size // per_update) * per_update}")
    least = -(-(n_step + 1) * envs // per_update) * per_update
    require(c.buffer_size // envs > n_step,
            f"{prefix}.buffer_size ({c.buffer_size}) is too small for {prefix}.n_step "
            f"({n_step}): each environment needs more than n_step stored steps; raise it to at "
            f"least {least}" if keyed else
            f"{prefix}.buffer_size ({c.buffer_size}) is too small: each environment needs more "
            f"than one stored step; raise it to at least {least}")
    require(c.buffer_size >= c.batch_size,
            f"{prefix}.buffer_size ({c.buffer_size}) is smaller than one batch "
            f"({prefix}.batch_size {c.batch_size})")
    require(c.learning_starts <= c.buffer_size,
            f"{prefix}.learning_starts ({c.learning_starts}) exceeds {prefix}.buffer_size "
            f"({c.buffer_size}): the buffer could never hold the warm-up")
    updates = config.total_timesteps // per_update
    require(max(c.learning_starts, (n_step + 1) * envs) <= updates * per_update,
            f"{prefix}.learning_starts ({c.learning_starts}) or {prefix}.n_step ({n_step}) is "
            f"not shorter than the run ({updates * per_update} env steps): it would never "
            f"learn; lower it or raise total_timesteps" if keyed else
            f"{prefix}.learning_starts ({c.learning_starts}) is not shorter than the run "
            f"({updates * per_update} env steps): it would never learn; lower it or raise "
            f"total_timesteps")
