"""The optimizer every learner here builds: gradient clipping, then Adam, on a learning-rate
schedule; from a config section's keys (``learning_rate``, ``anneal_lr``, ``adam_eps``,
``max_grad_norm``, ``grad_clip``, ``optimizer``) and the update's hyperparameters.

A population's swept values arrive as traced arrays (``TrainState.hparams``), so learners build
the optimizer INSIDE the program from ``hp``
(:func:`~jaxrl_dist.agents.algorithm.hyperparameters`); a single run's holds Python constants.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import optax


def make_schedule(c: Any, hp: dict[str, Any], sgd_steps: int) -> Callable[[jax.Array], Any]:
    """The learning rate over SGD steps: ``hp["learning_rate"]`` decayed linearly to 0 over
    ``sgd_steps`` (the whole run's) if the section anneals it, else constant."""
    if c.anneal_lr:
        return optax.linear_schedule(hp["learning_rate"], 0.0, transition_steps=sgd_steps)
    return optax.constant_schedule(hp["learning_rate"])


def make_optimizer(c: Any, hp: dict[str, Any], learning_rate: Any = None,
                   b1: float | None = None) -> optax.GradientTransformation:
    """Gradient clipping (``grad_clip``: global norm, or per element; none if
    ``max_grad_norm`` is null and not swept), then Adam (RAdam if the section has
    ``optimizer: radam``) at ``learning_rate`` (a schedule; default ``hp["learning_rate"]``),
    with beta1 ``b1`` (None: optax's 0.9; CrossQ's 0.5)."""
    make = optax.radam if getattr(c, "optimizer", "adam") == "radam" else optax.adam
    betas = {} if b1 is None else {"b1": b1}
    adam = make(hp["learning_rate"] if learning_rate is None else learning_rate, eps=c.adam_eps,
                **betas)
    if hp["max_grad_norm"] is None:
        return adam
    clip = optax.clip_by_global_norm if c.grad_clip == "global_norm" else optax.clip
    return optax.chain(clip(hp["max_grad_norm"]), adam)
