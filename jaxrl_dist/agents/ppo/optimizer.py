"""PPO's optimizer: the shared clip + Adam (:mod:`jaxrl_dist.agents.optimizer`), once per
network, for a single run or one member.

A population's swept values arrive as traced arrays (``TrainState.hparams``), so the optimizer is
built INSIDE the program from them; a single run passes none and gets Python constants.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import optax

from jaxrl_dist.agents.algorithm import hyperparameters
from jaxrl_dist.agents.optimizer import make_optimizer as make_clipped_adam
from jaxrl_dist.agents.optimizer import make_schedule
from jaxrl_dist.agents.ppo.config import HPARAMS, PPOConfig
from jaxrl_dist.sizes import Sizes


def make_optimizer(p: PPOConfig, sizes: Sizes, swept: dict[str, jax.Array] | None = None
                   ) -> tuple[optax.GradientTransformation, Callable[[jax.Array], jax.Array]]:
    """Adam after gradient clipping (``ppo.grad_clip``: each network's global norm, or each
    element); returns (optimizer, lr schedule over SGD steps).
    Built inside the program when ``swept`` holds a member's swept (traced) values."""
    hp = hyperparameters(p, HPARAMS, swept)
    schedule = make_schedule(p, hp, sizes.num_updates * p.update_epochs * p.num_minibatches)

    # Actor and critic each get their own clip + Adam. With ONE global norm over both, the
    # critic's gradient (value targets ~1/(1-gamma)) dominates the norm, clipping shrinks the
    # actor's gradient below Adam's eps and the policy stops learning (seen on CartPole).
    def network(tree: Any) -> dict[str, str]:
        return {name: name for name in tree}

    per_network = optax.flatten(make_clipped_adam(p, hp, schedule))
    optimizer = optax.multi_transform({"actor": per_network, "critic": per_network}, network)
    return optimizer, schedule
