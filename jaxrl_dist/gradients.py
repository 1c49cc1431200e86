"""The one rule every learner's gradient follows: the mean over the GLOBAL batch.

A learner's ``learn`` runs inside a ``jax.shard_map`` over the data axis with the parameters
replicated. There, ``jax.grad`` of a device's LOCAL loss with respect to the replicated
parameters already returns the SUM of every device's gradient (the implicit replicated-to-varying
cast transposes to a ``psum``), so the ``pmap``-era idiom ``pmean(grad(local_loss))`` silently
scales every update by the number of devices (measured: exactly 4x on 2 processes x 2 CPU
devices, jax 0.10.2).
:func:`global_mean_grad` differentiates the local loss of a device-VARYING copy of the
parameters (no implicit ``psum``), then averages over the axis once: the gradient of the mean
loss over every sample of every device of every process. docs/architecture.md has the rule and
tests/test_gradients.py proves it; tests/test_update.py and tests/test_qlearning.py compare each
learner's sharded update with the single-device one. Imports nothing of the package.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree


def global_mean_grad(loss_fn: Callable[..., tuple[jax.Array, Any]], params: Any, axis: str,
                     *args: Any) -> tuple[Any, Any, jax.Array]:
    """Gradient of the GLOBAL batch's mean loss; call inside a ``shard_map`` over ``axis``.

    ``loss_fn(params, *args) -> (local mean loss, aux)`` sees this device's shard of the batch;
    ``params`` are replicated over ``axis``. Shards of a global array are equal-sized, so the
    mean of the local means is the global mean. Gradients and ``aux`` travel in ONE ``pmean``
    of a flat vector: small collectives are latency bound (gloo on CPUs, NCCL across hosts),
    so fusing them keeps multi-process runs fast.

    Returns (grads, aux averaged over ``axis``, global norm of grads), all replicated.
    """
    local = jax.lax.pcast(params, axis, to="varying")
    grads, aux = jax.grad(loss_fn, has_aux=True)(local, *args)
    flat, unravel = ravel_pytree((grads, aux))
    flat = jax.lax.pmean(flat, axis)
    # The norm of the flat gradient (its leaves come first): one reduction, not one per leaf.
    grad_size = sum(x.size for x in jax.tree.leaves(grads))
    grad_norm = jnp.sqrt(jnp.sum(jnp.square(flat[:grad_size])))
    grads, aux = unravel(flat)
    return grads, aux, grad_norm
