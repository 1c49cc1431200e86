"""2-D convolutions that XLA on CPUs runs fast inside training loops: as one matrix
multiplication (im2col), or, for large kernels over few channels, as a convolution whose weight
gradient is a forward convolution.

jaxlib 0.10.2's CPU backend runs ``lax.conv_general_dilated`` through Eigen's spatial
convolution, and inside a ``while`` body (every training program here: updates and gradient
steps are scans) its weight gradient through a generic loop emitter (600 ms for a Nature-DQN
gradient step at batch 64 in a scan, 50 ms outside one). Written as im2col, the kernel windows
gathered by strided slices into one ``[N*OH*OW, KH*KW*C]`` matrix times the ``[KH*KW*C, O]``
kernel, every convolution and both of its gradients are dots, which XLA:CPU hands to its fast
matrix-multiplication library, in loops or not. Gathering the windows costs one slice per
kernel position and a patch matrix kh x kw / strides times the input, so kernels of more than
16 positions (Nature DQN's 8x8 first layer over 4 frames: 64 slices of 4 channels) stay a
convolution, with its weight gradient written as a forward convolution (the
channels as batch, the batch as features, the output gradient as the kernel, the stride as
kernel dilation), which stays on XLA's fast path. Measured on this 2-core AMD EPYC (a scan of
double-DQN gradient steps, forward+backward, one core / both): Nature DQN at batch 32, 42 -> 36
ms on one core; at batch 64 on both, 71 -> 53 ms; DI-engine's Pong network (128/128/512
channels) at batch 32, 425 -> 270 ms on one core (docs/benchmarks_history.md). Same sums in another
order: results move by float rounding.

Passed to ``flax.linen.Conv`` as its ``conv_general_dilated``; other convolutions (dilated,
grouped, other layouts, empty outputs) and every other backend (GPUs and TPUs have their own
convolution kernels) go to lax unchanged.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

_DN = ("NHWC", "HWIO", "NHWC")


def _conv(x, w, strides, pads):
    return lax.conv_general_dilated(x, w, strides, pads, dimension_numbers=_DN)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _plain(x, w, strides, pads):
    return _conv(x, w, strides, pads)


def _forward(x, w, strides, pads):
    return _conv(x, w, strides, pads), (x, w)


def _backward(strides, pads, residuals, g):
    x, w = residuals
    _, input_vjp = jax.vjp(lambda x: _conv(x, w, strides, pads), x)
    dx, = input_vjp(g)
    # dW[kh, kw, c, o] = sum over n, i, j of x_padded[n, i s + kh, j s + kw, c] g[n, i, j, o]
    dw = lax.conv_general_dilated(jnp.transpose(x, (3, 1, 2, 0)),   # [C, H, W, N]
                                  jnp.transpose(g, (1, 2, 0, 3)),   # [OH, OW, N, O]
                                  (1, 1), pads, rhs_dilation=strides, dimension_numbers=_DN)
    kh, kw = w.shape[:2]   # a stride that does not divide the input leaves extra rows
    return dx, jnp.transpose(dw[:, :kh, :kw, :], (1, 2, 0, 3))


_plain.defvjp(_forward, _backward)


def im2col_conv(x, w, strides, pads):
    """NHWC ``x`` (any float dtype) with an HWIO kernel ``w``, explicit ``(lo, hi)`` pads."""
    (kh, kw, c, o), (sh, sw) = w.shape, strides
    x = jnp.pad(x, ((0, 0), *pads, (0, 0)))
    n, h, width, _ = x.shape
    oh, ow = (h - kh) // sh + 1, (width - kw) // sw + 1
    windows = [x[:, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw, :]
               for i in range(kh) for j in range(kw)]            # (kh, kw, c) order, as w
    patches = jnp.concatenate(windows, axis=-1).reshape(n * oh * ow, kh * kw * c)
    return (patches @ w.reshape(kh * kw * c, o)).reshape(n, oh, ow, o)


def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None,
                         rhs_dilation=None, dimension_numbers=None, feature_group_count=1,
                         precision=None, **kwargs):
    """``lax.conv_general_dilated``'s signature (what flax calls); NHWC inputs, HWIO kernels."""
    plain = (lhs.ndim == 4 and feature_group_count == 1 and precision is None and not kwargs
             and all(d == 1 for d in (lhs_dilation or ()) + (rhs_dilation or ()))
             and dimension_numbers in (_DN, lax.ConvDimensionNumbers(
                 lhs_spec=(0, 3, 1, 2), rhs_spec=(3, 2, 0, 1), out_spec=(0, 3, 1, 2)))
             and jax.default_backend() == "cpu")
    if plain:
        strides = tuple(window_strides)
        if isinstance(padding, str):
            padding = lax.padtype_to_pads(lhs.shape[1:3], rhs.shape[:2], strides, padding)
        padding = tuple(tuple(p) for p in padding)
        plain = all(size + lo + hi >= k and lo >= 0 and hi >= 0 for size, (lo, hi), k in
                    zip(lhs.shape[1:3], padding, rhs.shape[:2]))   # a non-empty output
    if not plain:
        return lax.conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation,
                                        rhs_dilation, dimension_numbers, feature_group_count,
                                        precision=precision, **kwargs)
    kh, kw = rhs.shape[:2]
    if kh * kw > 16:   # many windows (Nature's 8x8 over 4 frames), a large patch matrix: direct
        return _plain(lhs, rhs, strides, padding)
    return im2col_conv(lhs, rhs, strides, padding)
