"""The convolution layers of the image torsos, shared by every network here.

Without kernel sizes a torso is the small-grid one (3x3, stride 1, SAME: MinAtar, Jumanji,
XLand-MiniGrid); with them it is the Atari one, e.g. Nature DQN's channels (32, 64, 64),
kernels (8, 4, 3), strides (4, 2, 1), unpadded (Mnih et al. 2015)."""

from __future__ import annotations

from typing import Any, Sequence

from jaxrl_dist.errors import ConfigError


def conv_layers(channels: Sequence[int], kernels: Sequence[int] = (),
                strides: Sequence[int] = ()) -> list[dict[str, Any]]:
    """``nn.Conv`` keyword arguments, one dict per layer."""
    if not kernels:
        return [dict(features=c, kernel_size=(3, 3), padding="SAME") for c in channels]
    return [dict(features=c, kernel_size=(k, k), strides=(s, s), padding="VALID")
            for c, k, s in zip(channels, kernels, strides or (1,) * len(kernels))]


def input_scale(obs_dtype: str) -> float:
    """What observations are multiplied by first: uint8 frames become [0, 1]."""
    return 1.0 / 255.0 if obs_dtype == "uint8" else 1.0


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def check_conv(n, prefix: str) -> None:
    """The conv torso's keys (cnn_channels, cnn_kernels, cnn_strides), any network section."""
    for name in ("cnn_channels", "cnn_kernels", "cnn_strides"):
        sizes = getattr(n, name)
        _require(all(isinstance(s, int) and s >= 1 for s in sizes),
                 f"{prefix}.network.{name} must be integers >= 1, got {list(sizes)}")
    for name in ("cnn_kernels", "cnn_strides"):
        sizes = getattr(n, name)
        _require(not sizes or len(sizes) == len(n.cnn_channels),
                 f"{prefix}.network.{name} needs one entry per conv layer "
                f"({len(n.cnn_channels)} in cnn_channels), got {list(sizes)}")
    _require(not n.cnn_strides or n.cnn_kernels,
             f"{prefix}.network.cnn_strides needs cnn_kernels (without them convs are 3x3, "
             f"stride 1)")
