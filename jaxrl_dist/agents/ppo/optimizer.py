"""The optimizer and the update's scalar hyperparameters, for a single run or one member.

A population's swept values arrive as traced arrays (``TrainState.hparams``), so the optimizer is
built INSIDE the program from them; a single run passes none and gets Python constants.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import optax

from jaxrl_dist.agents.ppo.config import PPOConfig
from jaxrl_dist.sizes import Sizes


def hyperparameters(p: PPOConfig, swept: dict[str, jax.Array] | None = None) -> dict[str, Any]:
    """The update's scalar hyperparameters: the config's values (Python floats, constants of
    the program), overridden by a population's swept values (arrays in the train state)."""
    values = {name: getattr(p, name) for name in ("learning_rate", "ent_coef", "clip_eps", "gamma",
                                                  "gae_lambda", "vf_coef", "max_grad_norm")}
    return {**values, **(swept or {})}


def make_optimizer(p: PPOConfig, sizes: Sizes, hp: dict[str, Any] | None = None
                   ) -> tuple[optax.GradientTransformation, Callable[[jax.Array], jax.Array]]:
    """Adam after gradient clipping (``ppo.grad_clip``: each network's global norm, or each
    element); returns (optimizer, lr schedule over SGD steps).
    Built inside the program when ``hp`` holds a member's swept (traced) values."""
    hp = hyperparameters(p, hp)
    if p.anneal_lr:
        schedule = optax.linear_schedule(
            hp["learning_rate"], 0.0,
            transition_steps=sizes.num_updates * p.update_epochs * p.num_minibatches)
    else:
        schedule = optax.constant_schedule(hp["learning_rate"])
    # Actor and critic each get their own clip + Adam. With ONE global norm over both, the
    # critic's gradient (value targets ~1/(1-gamma)) dominates the norm, clipping shrinks the
    # actor's gradient below Adam's eps and the policy stops learning (seen on CartPole).
    def network(tree):
        return {name: name for name in tree}

    clip = (optax.clip_by_global_norm if p.grad_clip == "global_norm" else optax.clip)
    per_network = optax.flatten(optax.chain(clip(hp["max_grad_norm"]),
                                            optax.adam(schedule, eps=p.adam_eps)))
    optimizer = optax.multi_transform({"actor": per_network, "critic": per_network}, network)
    return optimizer, schedule
