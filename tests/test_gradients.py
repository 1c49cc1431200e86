"""The global-mean gradient rule (jaxrl_dist.gradients), on its own: under shard_map with
replicated parameters, every learner's gradient is the mean over ALL samples of ALL devices."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_dist import sharding
from jaxrl_dist.gradients import global_mean_grad
from jaxrl_dist.sharding import DATA_AXIS, REPLICATED, SHARDED


def _loss(params, x, y):
    """Mean squared error of a linear model over the samples it is given, and that loss again
    as the aux value."""
    loss = jnp.mean(jnp.square(x @ params["w"] + params["b"] - y))
    return loss, loss


def _data():
    rng = np.random.default_rng(0)
    params = {"w": jnp.asarray(rng.normal(size=(3,)), jnp.float32), "b": jnp.float32(0.5)}
    x = jnp.asarray(rng.normal(size=(8, 3)), jnp.float32)
    # The second device's half has other targets: the two shards' gradients differ.
    y = jnp.asarray(np.concatenate([rng.normal(size=4), 5.0 + rng.normal(size=4)]), jnp.float32)
    return params, x, y


def _sharded(body):
    mesh = sharding.make_mesh(jax.devices()[:2])
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(REPLICATED, SHARDED, SHARDED),
                                 out_specs=REPLICATED))


def test_gradient_is_the_mean_over_every_sample_of_every_device():
    params, x, y = _data()
    grads, loss, norm = _sharded(
        lambda p, x, y: global_mean_grad(_loss, p, DATA_AXIS, x, y))(params, x, y)

    # The shards really differ: a per-device gradient is not the answer.
    first, second = (jax.grad(lambda p: _loss(p, x[s], y[s])[0])(params)
                     for s in (slice(0, 4), slice(4, 8)))
    assert abs(float(first["b"]) - float(second["b"])) > 1.0

    # One device, the whole batch: grad of the mean over all 8 samples ...
    expected = jax.grad(lambda p: _loss(p, x, y)[0])(params)
    for name in ("w", "b"):
        np.testing.assert_allclose(grads[name], expected[name], rtol=1e-6, atol=1e-6)
        # ... = the mean of the equal-sized shards' gradients, not their sum.
        np.testing.assert_allclose(grads[name], (first[name] + second[name]) / 2, rtol=1e-6,
                                   atol=1e-6)
    np.testing.assert_allclose(loss, _loss(params, x, y)[0], rtol=1e-6)   # aux: the mean too
    flat = np.concatenate([np.ravel(expected["b"]), np.ravel(expected["w"])])
    np.testing.assert_allclose(norm, np.linalg.norm(flat), rtol=1e-6)


def test_the_pmap_idiom_is_wrong_under_shard_map():
    """Why the rule exists: ``pmean(grad(local loss))`` of REPLICATED parameters is the device
    count times too large, because grad already sums over the devices (jax 0.10.2)."""
    params, x, y = _data()

    def pmap_idiom(p, x, y):
        return jax.lax.pmean(jax.grad(lambda p: _loss(p, x, y)[0])(p), DATA_AXIS)

    wrong = _sharded(pmap_idiom)(params, x, y)
    expected = jax.grad(lambda p: _loss(p, x, y)[0])(params)
    np.testing.assert_allclose(wrong["w"], 2 * expected["w"], rtol=1e-6, atol=1e-6)
