"""PQN's section of a run's config (``pqn:``), its checks, its scalar hyperparameters and its
registry record (:mod:`jaxrl_dist.agents` registers it). jax-free.

PQN (Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning"): many environments
collect a short rollout with epsilon-greedy actions, Q(lambda) targets are computed over it,
and the Q-network (LayerNorm in every hidden layer) trains on it for epochs x minibatches like
PPO, with no replay buffer and no target network."""

from __future__ import annotations

from dataclasses import dataclass, field

from jaxrl_dist.agents.algorithm import Algorithm, sweep_keys
from jaxrl_dist.agents.qnet.config import (LOSSES, QNetworkConfig, check_exploration,
                                           check_network, check_optimizer)
from jaxrl_dist.errors import require
from jaxrl_dist.typed import doc as _doc


def _network() -> QNetworkConfig:
    return QNetworkConfig(hidden=(64, 64), activation="relu", layer_norm=True)


@dataclass(frozen=True, kw_only=True)
class PQNConfig:
    num_steps: int = _doc("rollout length per environment per update", default=128)
    update_epochs: int = _doc("passes over each rollout", default=4)
    num_minibatches: int = _doc("global minibatches per epoch (must divide num_steps)",
                                default=16)
    gamma: float = _doc("discount factor", default=0.99)
    q_lambda: float = _doc("lambda of the Q(lambda) targets (rejax's td_lambda)", default=0.9)
    learning_rate: float = _doc("Adam learning rate (initial, if annealed)", default=3e-4)
    anneal_lr: bool = _doc("linearly anneal the learning rate to 0 over training",
                           default=False)
    optimizer: str = _doc("adam, or radam (purejaxql's)", default="adam")
    adam_eps: float = _doc("Adam epsilon", default=1e-8)
    max_grad_norm: float | None = _doc("gradient clipping threshold (see grad_clip); null = "
                                       "off", default=10.0)
    grad_clip: str = _doc("global_norm (purejaxql) or element (rejax)",
                          default="global_norm")
    loss: str = _doc(f"TD loss, one of {', '.join(LOSSES)}", default="mse")
    huber_delta: float = _doc("Huber loss threshold (loss: huber)", default=1.0)
    reward_scale: float = _doc("rewards are multiplied by this in the targets (purejaxql: 0.1 "
                               "on CartPole); returns are reported unscaled", default=1.0)
    epsilon_start: float = _doc("exploration rate at step 0", default=1.0)
    epsilon_end: float = _doc("final exploration rate", default=0.05)
    epsilon_decay_steps: int = _doc("global env steps of the decay (linear: its length; "
                                    "exponential: its time constant)", default=250_000)
    epsilon_schedule: str = _doc("linear or exponential", default="linear")
    bootstrap_truncation: bool = _doc("bootstrap from the real final observation at a time "
                                      "limit; false = treat it as terminal (rejax)",
                                      default=True)
    mixer: str = _doc("with a team of agents (each a row): none (each agent learns its own "
                      "Q(lambda) on its own reward, independent Q-learning) or vdn (the team's Q "
                      "is the sum of its agents' Q-values, learned from the team's reward: "
                      "Sunehag et al. 2018, JaxMARL's pqn_vdn)", default="none")
    network: QNetworkConfig = field(default_factory=_network)


MIXERS = ("none", "vdn")

# The update's scalar hyperparameters, the keys a population may sweep (``pqn.<name>``):
# members of a sweep differ in array values only.
HPARAMS = ("learning_rate", "gamma", "q_lambda", "epsilon_start", "epsilon_end",
           "epsilon_decay_steps", "max_grad_norm", "reward_scale", "huber_delta")


def check(p: PQNConfig) -> None:
    for name in ("num_steps", "update_epochs", "num_minibatches"):
        require(getattr(p, name) >= 1, f"pqn.{name} must be >= 1, got {getattr(p, name)}")
    require(p.num_steps % p.num_minibatches == 0,
            f"pqn.num_steps ({p.num_steps}) must be divisible by pqn.num_minibatches "
            f"({p.num_minibatches}): each minibatch takes num_steps/num_minibatches steps of "
            f"every environment")
    require(0.0 <= p.q_lambda <= 1.0, f"pqn.q_lambda must be in [0, 1], got {p.q_lambda}")
    require(p.loss in LOSSES, f"pqn.loss must be one of {', '.join(LOSSES)}, got {p.loss!r}")
    require(p.huber_delta > 0, f"pqn.huber_delta must be > 0, got {p.huber_delta}")
    require(p.reward_scale > 0, f"pqn.reward_scale must be > 0, got {p.reward_scale}")
    require(p.mixer in MIXERS,
            f"pqn.mixer must be one of {', '.join(MIXERS)}, got {p.mixer!r}")
    require(p.optimizer in ("adam", "radam"),
            f"pqn.optimizer must be adam or radam, got {p.optimizer!r}")
    check_optimizer(p, "pqn")
    check_exploration(p, "pqn")
    check_network(p.network, "pqn")


ALGORITHM = Algorithm(
    name="pqn", section=PQNConfig, check=check, sweepable=sweep_keys("pqn", HPARAMS),
    steps_per_env=lambda p: p.num_steps, make="jaxrl_dist.agents.pqn.learner:make_agent",
    policy="jaxrl_dist.agents.qnet.networks:make_policy",
    export="jaxrl_dist.agents.qnet.export:emitter", teams=True,
    doc="PQN: Q(lambda) over vectorised rollouts, LayerNorm, no replay, no target network")
