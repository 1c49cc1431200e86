"""Config pieces shared by the value-based learners (``dqn:``, ``pqn:``): the Q-network and the
epsilon-greedy schedule, with their checks. jax-free (the CLI checks a config before jax)."""

from __future__ import annotations

from dataclasses import dataclass

from jaxrl_dist.agents.choices import ACTIVATIONS, GRAD_CLIPS
from jaxrl_dist.agents.torso import check_torso
from jaxrl_dist.errors import require
from jaxrl_dist.typed import doc as _doc

SCHEDULES = ("linear", "exponential")
LOSSES = ("huber", "mse")


@dataclass(frozen=True, kw_only=True)
class QNetworkConfig:
    hidden: tuple[int, ...] = _doc("hidden layer sizes of the Q-network", default=(64, 64))
    activation: str = _doc(f"hidden activation, one of {', '.join(ACTIVATIONS)}", default="relu")
    layer_norm: bool = _doc("LayerNorm before every hidden activation (PQN's stabiliser)",
                            default=False)
    dueling: bool = _doc("dueling head: Q = V + A - mean(A) (Wang et al. 2016)", default=False)
    torso: str = _doc("observation encoder: cnn (3x3 convolutions, for [H, W, C] grids), mlp "
                      "(flattens), auto = cnn for [H, W, C] observations", default="auto")
    cnn_channels: tuple[int, ...] = _doc("channels of the CNN torso's conv layers (ReLU; 3x3, "
                                         "stride 1 unless cnn_kernels says otherwise)",
                                         default=(16,))
    cnn_kernels: tuple[int, ...] = _doc("square kernel size of each conv layer; empty = 3x3, "
                                        "stride 1, padded (small grids); given = unpadded, "
                                        "with cnn_strides (Atari: [8, 4, 3])", default=())
    cnn_strides: tuple[int, ...] = _doc("stride of each conv layer when cnn_kernels is given "
                                        "(Atari: [4, 2, 1]); empty = 1", default=())


def check_network(n: QNetworkConfig, prefix: str) -> None:
    require(n.activation in ACTIVATIONS, f"{prefix}.network.activation must be one of "
            f"{', '.join(ACTIVATIONS)}, got {n.activation!r}")
    check_torso(n, prefix)
    require(all(s >= 1 for s in n.hidden),
            f"{prefix}.network.hidden sizes must be >= 1, got {list(n.hidden)}")



def check_exploration(c, prefix: str) -> None:
    """The epsilon keys every value-based section has (same names in each)."""
    for name in ("epsilon_start", "epsilon_end"):
        value = getattr(c, name)
        require(0.0 <= value <= 1.0, f"{prefix}.{name} must be in [0, 1], got {value}")
    require(c.epsilon_decay_steps >= 1,
            f"{prefix}.epsilon_decay_steps must be >= 1, got {c.epsilon_decay_steps}")
    require(c.epsilon_schedule in SCHEDULES, f"{prefix}.epsilon_schedule must be one of "
            f"{', '.join(SCHEDULES)}, got {c.epsilon_schedule!r}")


def check_optimizer(c, prefix: str) -> None:
    require(c.learning_rate > 0, f"{prefix}.learning_rate must be > 0, got {c.learning_rate}")
    require(c.adam_eps > 0, f"{prefix}.adam_eps must be > 0, got {c.adam_eps}")
    require(c.max_grad_norm is None or c.max_grad_norm > 0,
            f"{prefix}.max_grad_norm must be > 0 or null (no clipping), got {c.max_grad_norm}")
    require(c.grad_clip in GRAD_CLIPS, f"{prefix}.grad_clip must be one of "
            f"{', '.join(GRAD_CLIPS)}, got {c.grad_clip!r}")
    require(0.0 <= c.gamma <= 1.0, f"{prefix}.gamma must be in [0, 1], got {c.gamma}")
