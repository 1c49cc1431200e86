"""agents.conv: the CPU convolution as im2col equals lax's convolution, values and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxrl_dist.agents import conv

DN = ("NHWC", "HWIO", "NHWC")


@pytest.mark.parametrize("shape,kernel,stride,padding", [
    ((3, 84, 84, 4), (8, 8, 4, 5), 4, "VALID"),     # Nature DQN's first layer
    ((3, 20, 20, 5), (4, 4, 5, 6), 2, "VALID"),     # its second
    ((2, 11, 11, 6), (3, 3, 6, 4), 2, "SAME"),      # SAME with a stride, a remainder row
    ((2, 10, 10, 4), (3, 3, 4, 7), 1, "SAME"),      # MinAtar's torso
    ((2, 9, 7, 3), (3, 2, 3, 4), 2, ((1, 2), (0, 1))),   # uneven explicit pads, strides
])
def test_im2col_equals_lax_convolution_and_its_gradients(shape, kernel, stride, padding):
    kx, kw, kg = jax.random.split(jax.random.PRNGKey(0), 3)
    x, w = jax.random.normal(kx, shape), jax.random.normal(kw, kernel)

    def ours(x, w):
        return conv.conv_general_dilated(x, w, (stride, stride), padding, dimension_numbers=DN)

    def reference(x, w):
        return lax.conv_general_dilated(x, w, (stride, stride), padding, dimension_numbers=DN,
                                        precision=lax.Precision.HIGHEST)

    got, want = jax.jit(ours)(x, w), jax.jit(reference)(x, w)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    g = jax.random.normal(kg, want.shape)
    loss = lambda f: lambda x, w: jnp.sum(f(x, w) * g)   # noqa: E731
    for a, b, name in zip(jax.jit(jax.grad(loss(ours), (0, 1)))(x, w),
                          jax.jit(jax.grad(loss(reference), (0, 1)))(x, w), ("dx", "dw")):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-3, err_msg=name)
    # inside a scan too (the training programs' case)
    scanned = jax.jit(lambda x, w: lax.scan(lambda c, _: (c, ours(x, w)), 0, None, length=2)[1])
    np.testing.assert_allclose(scanned(x, w)[1], got, rtol=1e-6, atol=1e-6)


def test_other_convolutions_go_to_lax():
    """Dilated kernels have no im2col form here: lax's convolution, the same result."""
    x, w = jnp.ones((1, 8, 8, 2)), jnp.ones((3, 3, 2, 2))
    got = conv.conv_general_dilated(x, w, (1, 1), "VALID", rhs_dilation=(2, 2),
                                    dimension_numbers=DN)
    want = lax.conv_general_dilated(x, w, (1, 1), "VALID", rhs_dilation=(2, 2),
                                    dimension_numbers=DN)
    np.testing.assert_array_equal(got, want)
