"""The observation torso of every network here: which convolution layers (if any) a network
section's keys (``torso``, ``cnn_channels``, ``cnn_kernels``, ``cnn_strides``) give, and their
checks. jax-free (the config checks run before jax is imported).

Without kernel sizes a torso is the small-grid one (3x3, stride 1, SAME: MinAtar, Jumanji,
XLand-MiniGrid); with them it is the Atari one, e.g. Nature DQN's channels (32, 64, 64),
kernels (8, 4, 3), strides (4, 2, 1), unpadded (Mnih et al. 2015)."""

from __future__ import annotations

from typing import Any, Sequence

from jaxrl_dist.errors import EnvError, require

TORSOS = ("auto", "mlp", "cnn")   # the network sections' ``torso`` values


def conv_layers(channels: Sequence[int], kernels: Sequence[int] = (),
                strides: Sequence[int] = ()) -> list[dict[str, Any]]:
    """``nn.Conv`` keyword arguments, one dict per layer."""
    if not kernels:
        return [dict(features=c, kernel_size=(3, 3), padding="SAME") for c in channels]
    return [dict(features=c, kernel_size=(k, k), strides=(s, s), padding="VALID")
            for c, k, s in zip(channels, kernels, strides or (1,) * len(kernels))]


def conv_torso(n: Any, obs_shape: Sequence[int]) -> tuple[dict[str, Any], ...]:
    """The conv layers (:func:`conv_layers`) a network section ``n`` puts before its dense
    layers for observations of ``obs_shape``: ``torso: cnn``, or ``auto`` with [H, W, C]
    observations; none (``mlp``: observations are flattened) otherwise."""
    if n.torso == "cnn" and len(obs_shape) != 3:
        raise EnvError(f"network.torso=cnn needs [H, W, C] observations, got shape "
                       f"{list(obs_shape)}; use torso: mlp (or auto)")
    if n.torso == "cnn" or (n.torso == "auto" and len(obs_shape) == 3):
        return tuple(conv_layers(n.cnn_channels, n.cnn_kernels, n.cnn_strides))
    return ()


def input_scale(obs_dtype: str) -> float:
    """What observations are multiplied by first: uint8 frames become [0, 1]."""
    return 1.0 / 255.0 if obs_dtype == "uint8" else 1.0


def check_torso(n: Any, prefix: str) -> None:
    """The torso's keys (torso, cnn_channels, cnn_kernels, cnn_strides), any network section."""
    require(n.torso in TORSOS, f"{prefix}.network.torso must be one of {', '.join(TORSOS)}, "
            f"got {n.torso!r}")
    for name in ("cnn_channels", "cnn_kernels", "cnn_strides"):
        sizes = getattr(n, name)
        require(all(isinstance(s, int) and s >= 1 for s in sizes),
                f"{prefix}.network.{name} must be integers >= 1, got {list(sizes)}")
    for name in ("cnn_kernels", "cnn_strides"):
        sizes = getattr(n, name)
        require(not sizes or len(sizes) == len(n.cnn_channels),
                f"{prefix}.network.{name} needs one entry per conv layer "
                f"({len(n.cnn_channels)} in cnn_channels), got {list(sizes)}")
    require(not n.cnn_strides or n.cnn_kernels,
            f"{prefix}.network.cnn_strides needs cnn_kernels (without them convs are 3x3, "
            f"stride 1)")
