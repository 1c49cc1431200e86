"""PPO's section of a run's config (``ppo:``, its network included), its checks, its scalar
hyperparameters and its registry record (:mod:`jaxrl_dist.agents` registers it). jax-free: the
CLI reads and checks a config before jax is imported."""

from __future__ import annotations

import math

from dataclasses import dataclass, field

from jaxrl_dist.agents.algorithm import Algorithm, sweep_keys
from jaxrl_dist.agents.choices import ACTIVATIONS, GRAD_CLIPS
from jaxrl_dist.agents.torso import check_torso
from jaxrl_dist.errors import require
from jaxrl_dist.typed import doc as _doc

BOUNDED_ACTIONS = ("clip", "tanh")
INITS = ("orthogonal", "lecun")
CELLS = ("none", "gru", "lstm")


@dataclass(frozen=True, kw_only=True)
class NetworkConfig:
    actor_hidden: tuple[int, ...] = _doc("actor MLP hidden sizes", default=(64, 64))
    critic_hidden: tuple[int, ...] = _doc("critic MLP hidden sizes", default=(64, 64))
    activation: str = _doc(f"hidden activation, one of {', '.join(ACTIVATIONS)}", default="tanh")
    torso: str = _doc("observation encoder: cnn (3x3 convolutions, for [H, W, C] grids and "
                      "images), mlp (flattens), auto = cnn for [H, W, C] observations",
                      default="auto")
    cnn_channels: tuple[int, ...] = _doc("channels of the CNN torso's conv layers (ReLU; 3x3, "
                                         "stride 1 unless cnn_kernels says otherwise), before "
                                         "the hidden layers", default=(16,))
    cnn_kernels: tuple[int, ...] = _doc("square kernel size of each conv layer; empty = 3x3, "
                                        "stride 1, padded (small grids); given = unpadded, "
                                        "with cnn_strides (Atari: [8, 4, 3])", default=())
    cnn_strides: tuple[int, ...] = _doc("stride of each conv layer when cnn_kernels is given "
                                        "(Atari: [4, 2, 1]); empty = 1", default=())
    init: str = _doc("weight init: orthogonal (sqrt 2; policy head 0.01, value head 1, as "
                     "PureJaxRL and CleanRL) or lecun (flax's default, every layer; rejax)",
                     default="orthogonal")
    bounded_actions: str = _doc("continuous actions with bounds: clip (a Gaussian, clipped by the "
                                "environment) or tanh (a Gaussian squashed into the bounds)",
                                default="clip")
    cell: str = _doc("recurrent cell after each network's torso and hidden layers, before its "
                     "head: none (feed-forward), gru (flax GRUCell) or lstm (flax "
                     "OptimizedLSTMCell); actor and critic each have their own unless "
                     "shared", default="none")
    shared: bool = _doc("with a cell: the critic is an output layer on the actor's torso, "
                        "hidden layers and cell (one cell, as PureJaxRL's ppo_rnn; "
                        "critic_hidden unused), not a network of its own", default=False)
    cell_size: int = _doc("features of the recurrent cell's state (with cell gru or lstm)",
                          default=128)
    head_hidden: tuple[int, ...] = _doc("with a cell: hidden layers between the cell and each "
                                        "output layer, the actor's and the critic's own "
                                        "(JaxMARL's ActorCriticRNN: [128]); empty = none",
                                        default=())
    head_gain: float = _doc("the orthogonal initialisation's gain of the head_hidden layers "
                            "(sqrt 2, as every hidden layer's; JaxMARL's recurrent "
                            "baselines: 2); unused with init: lecun or no head_hidden",
                            default=2 ** 0.5)


@dataclass(frozen=True, kw_only=True)
class PPOConfig:
    num_steps: int = _doc("rollout length per environment per update", default=128)
    gamma: float = _doc("discount factor", default=0.99)
    gae_lambda: float = _doc("GAE(lambda) bias/variance trade-off", default=0.95)
    clip_eps: float = _doc("PPO ratio clip range", default=0.2)
    vf_clip_eps: float | None = _doc("value-loss clip range around the old value; null = off",
                                     default=None)
    ent_coef: float = _doc("entropy bonus coefficient", default=0.01)
    vf_coef: float = _doc("value-loss coefficient", default=0.5)
    max_grad_norm: float = _doc("gradient clipping threshold (see ppo.grad_clip)", default=0.5)
    grad_clip: str = _doc("global_norm: each network's gradient rescaled to norm <= max_grad_norm;"
                          " element: every gradient element clipped to +-max_grad_norm (rejax)",
                          default="global_norm")
    learning_rate: float = _doc("Adam learning rate (initial, if annealed)", default=2.5e-4)
    anneal_lr: bool = _doc("linearly anneal the learning rate to 0 over training", default=True)
    adam_eps: float = _doc("Adam epsilon", default=1e-5)
    update_epochs: int = _doc("passes over each rollout", default=4)
    num_minibatches: int = _doc("global minibatches per epoch (must divide num_steps)", default=4)
    normalize_advantages: bool = _doc("normalise advantages over the global minibatch",
                                      default=True)
    normalize_observations: bool = _doc("running observation normalisation (global moments)",
                                        default=False)
    bootstrap_truncation: bool = _doc("bootstrap V(final obs) at time-limit truncations",
                                      default=True)
    normalize_values: bool = _doc("critic learns value targets normalised by their running "
                                  "global mean/std (without it, CartPole's late collapse: "
                                  "docs/learning.md)", default=True)
    target_kl: float | None = _doc("skip an update's remaining SGD steps once a minibatch's "
                                   "global approx KL exceeds 1.5 x target_kl; null = off",
                                   default=None)
    anneal_clip_eps: bool = _doc("linearly anneal clip_eps to 0 over training", default=False)
    sequence_length: int | None = _doc(
        "recurrent networks (network.cell gru|lstm): minibatches hold sequences of this many "
        "steps, in time order, each from its carry at the rollout; must divide num_steps; "
        "null = whole rollouts (num_steps). num_minibatches then splits the sequences "
        "(num_envs x num_steps / sequence_length)", default=None)
    network: NetworkConfig = field(default_factory=NetworkConfig)


# The update's scalar hyperparameters, the keys a population may sweep (``ppo.<name>``): each
# is a scalar of the update's math, so members differ only in array values and ONE compiled
# program serves the whole sweep. Anything else (sizes, network, flags) changes shapes or the
# program itself. The update reads them through ``algorithm.hyperparameters``.
HPARAMS = ("learning_rate", "ent_coef", "clip_eps", "gamma", "gae_lambda", "vf_coef",
           "max_grad_norm")


def recurrent(p: PPOConfig) -> bool:
    """Whether the networks carry a recurrent state (``ppo.network.cell`` not none)."""
    return p.network.cell != "none"


def sequences_per_env(p: PPOConfig) -> int:
    """How many sequences (minibatch units) a recurrent update cuts each rollout into."""
    return p.num_steps // (p.sequence_length or p.num_steps)


def check(p: PPOConfig) -> None:
    """Each value in range, and minibatches that split a rollout evenly."""
    n, num_steps = p.network, p.num_steps
    require(num_steps >= 1, f"ppo.num_steps must be >= 1, got {num_steps}")
    require(p.update_epochs >= 1, f"ppo.update_epochs must be >= 1, got {p.update_epochs}")
    require(p.num_minibatches >= 1, f"ppo.num_minibatches must be >= 1, got {p.num_minibatches}")
    require(n.cell in CELLS,
            f"ppo.network.cell must be one of {', '.join(CELLS)}, got {n.cell!r}")
    require(n.cell_size >= 1, f"ppo.network.cell_size must be >= 1, got {n.cell_size}")
    if recurrent(p):
        require(p.sequence_length is None or (
            p.sequence_length >= 1 and num_steps % p.sequence_length == 0),
            f"ppo.sequence_length ({p.sequence_length}) must divide ppo.num_steps "
            f"({num_steps}), or be null (whole rollouts)")
    else:
        require(p.sequence_length is None,
                "ppo.sequence_length applies to recurrent networks only; set "
                "ppo.network.cell to gru or lstm, or drop it")
        require(num_steps % p.num_minibatches == 0,
                f"ppo.num_steps ({num_steps}) must be divisible by ppo.num_minibatches "
                f"({p.num_minibatches}): each minibatch takes num_steps/num_minibatches steps "
                f"of every environment")
    require(0.0 <= p.gamma <= 1.0, f"ppo.gamma must be in [0, 1], got {p.gamma}")
    require(0.0 <= p.gae_lambda <= 1.0, f"ppo.gae_lambda must be in [0, 1], got {p.gae_lambda}")
    require(p.clip_eps > 0, f"ppo.clip_eps must be > 0, got {p.clip_eps}")
    require(p.vf_clip_eps is None or p.vf_clip_eps > 0,
            f"ppo.vf_clip_eps must be > 0 or null, got {p.vf_clip_eps}")
    require(p.target_kl is None or p.target_kl > 0,
            f"ppo.target_kl must be > 0 or null, got {p.target_kl}")
    require(p.learning_rate > 0, f"ppo.learning_rate must be > 0, got {p.learning_rate}")
    require(p.max_grad_norm > 0, f"ppo.max_grad_norm must be > 0, got {p.max_grad_norm}")
    for name in ("ent_coef", "vf_coef"):
        require(getattr(p, name) >= 0, f"ppo.{name} must be >= 0, got {getattr(p, name)}")
    require(p.grad_clip in GRAD_CLIPS,
            f"ppo.grad_clip must be one of {', '.join(GRAD_CLIPS)}, got {p.grad_clip!r}")
    require(n.init in INITS,
            f"ppo.network.init must be one of {', '.join(INITS)}, got {n.init!r}")
    require(n.activation in ACTIVATIONS,
            f"ppo.network.activation must be one of {', '.join(ACTIVATIONS)}, "
            f"got {n.activation!r}")
    require(n.bounded_actions in BOUNDED_ACTIONS,
            f"ppo.network.bounded_actions must be one of {', '.join(BOUNDED_ACTIONS)}, "
            f"got {n.bounded_actions!r}")
    check_torso(n, "ppo")
    require(not n.shared or n.cell != "none",
            "ppo.network.shared shares the actor's recurrent cell: set ppo.network.cell to "
            "gru or lstm, or shared: false")
    require(not n.head_hidden or n.cell != "none",
            "ppo.network.head_hidden are layers after a recurrent cell: set ppo.network.cell "
            "to gru or lstm, or put the layers in actor_hidden / critic_hidden")
    require(math.isfinite(n.head_gain) and n.head_gain > 0,
            f"ppo.network.head_gain must be a finite number > 0, got {n.head_gain}")
    for name in ("actor_hidden", "critic_hidden", "head_hidden"):
        sizes = getattr(n, name)
        require(all(s >= 1 for s in sizes),
                f"ppo.network.{name} sizes must be >= 1, got {list(sizes)}")


def check_run(p: PPOConfig, config) -> None:
    """A recurrent update's minibatches take whole sequences: they must split them evenly."""
    if not recurrent(p):
        return
    sequences = config.num_envs * sequences_per_env(p)
    require(sequences % p.num_minibatches == 0,
            f"ppo.num_minibatches ({p.num_minibatches}) must divide the rollout's sequences "
            f"(num_envs x num_steps / sequence_length = {sequences}): a recurrent "
            f"minibatch takes whole sequences")


ALGORITHM = Algorithm(
    name="ppo", section=PPOConfig, check=check, check_run=check_run,
    sweepable=sweep_keys("ppo", HPARAMS),
    steps_per_env=lambda p: p.num_steps, make="jaxrl_dist.agents.ppo.learner:make_agent",
    policy="jaxrl_dist.agents.ppo.learner:make_policy",
    export="jaxrl_dist.agents.ppo.export:emitter", teams=True,
    doc="clipped PPO with GAE, a separate actor and critic (IPPO on environments of several "
        "agents: one policy shared by all)")
