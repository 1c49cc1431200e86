"""DQN's section of a run's config (``dqn:``), its checks, its scalar hyperparameters and its
registry record (:mod:`jaxrl_dist.agents` registers it). jax-free."""

from __future__ import annotations

from dataclasses import dataclass, field

from jaxrl_dist.agents.algorithm import Algorithm, sweep_keys
from jaxrl_dist.agents.replay import config as replay_config
from jaxrl_dist.agents.qnet.config import (LOSSES, QNetworkConfig, check_exploration,
                                           check_network, check_optimizer)
from jaxrl_dist.errors import require
from jaxrl_dist.typed import doc as _doc

OBS_STORAGE = ("float32", "uint8")


@dataclass(frozen=True, kw_only=True)
class DQNConfig:
    num_steps: int = _doc("env steps per environment collected per update (DI-engine's "
                          "n_sample = num_envs x num_steps)", default=1)
    gradient_steps: int = _doc("gradient steps per update (DI-engine's update_per_collect, "
                               "rejax's num_epochs); each transition is replayed gradient_steps "
                               "x batch_size / (num_envs x num_steps) times on average",
                               default=1)
    batch_size: int = _doc("GLOBAL transitions sampled per gradient step (batch_size / "
                           "buffer_shards from each shard)", default=32)
    buffer_size: int = _doc("GLOBAL replay capacity in transitions (a multiple of num_envs x "
                            "num_steps); the oldest are overwritten", default=100_000)
    buffer_shards: int = _doc("the replay buffer's shard count, FIXED by the config so results "
                              "do not depend on the device count: each shard holds num_envs / "
                              "buffer_shards environments' transitions and serves batch_size / "
                              "buffer_shards of each batch; it must be a multiple of the device "
                              "count", default=1)
    learning_starts: int = _doc("global env steps of uniformly random actions before the "
                                "first gradient step (the buffer's warm-up)", default=1_000)
    gamma: float = _doc("discount factor", default=0.99)
    n_step: int = _doc("n-step returns: targets sum n discounted rewards, then bootstrap",
                       default=1)
    double: bool = _doc("double DQN: the online network picks the bootstrap action, the "
                        "target network values it", default=True)
    loss: str = _doc(f"TD loss, one of {', '.join(LOSSES)}", default="huber")
    huber_delta: float = _doc("Huber loss threshold (loss: huber)", default=1.0)
    learning_rate: float = _doc("Adam learning rate", default=1e-4)
    adam_eps: float = _doc("Adam epsilon", default=1e-8)
    max_grad_norm: float | None = _doc("gradient clipping threshold (see grad_clip); null = "
                                       "off", default=10.0)
    grad_clip: str = _doc("global_norm: the gradient rescaled to norm <= max_grad_norm; "
                          "element: every element clipped to +-max_grad_norm (rejax)",
                          default="global_norm")
    target_update_period: int = _doc("gradient steps between target-network updates (DI-engine's"
                                     " target_update_freq)", default=500)
    target_tau: float = _doc("target update: target <- tau x online + (1 - tau) x target; 1 = a "
                             "hard copy (rejax's polyak p is tau = 1 - p)", default=1.0)
    epsilon_start: float = _doc("exploration rate at step 0", default=1.0)
    epsilon_end: float = _doc("final exploration rate", default=0.05)
    epsilon_decay_steps: int = _doc("global env steps of the decay (linear: its length; "
                                    "exponential: its time constant)", default=250_000)
    epsilon_schedule: str = _doc("linear or exponential (DI-engine's exp decay)",
                                 default="linear")
    bootstrap_truncation: bool = _doc("bootstrap from the real final observation at a time limit "
                                      "(the buffer then stores each step's final observation: 2x "
                                      "observation memory); false = a time limit ends the return "
                                      "like a terminal state (rejax, DI-engine)", default=True)
    obs_storage: str = _doc("dtype observations are stored in: float32, or uint8 for image and "
                            "grid observations with integer values 0-255 (4x less memory)",
                            default="float32")
    checkpoint_buffer: bool = _doc("checkpoints hold the replay buffer (exact resume); false = "
                                   "smaller checkpoints, a resumed run refills the buffer to "
                                   "learning_starts before learning again", default=True)
    network: QNetworkConfig = field(default_factory=QNetworkConfig)


# The update's scalar hyperparameters, the keys a population may sweep (``dqn.<name>``):
# members of a sweep differ in array values only.
HPARAMS = ("learning_rate", "gamma", "epsilon_start", "epsilon_end", "epsilon_decay_steps",
           "target_update_period", "target_tau", "max_grad_norm", "huber_delta")


def check(d: DQNConfig) -> None:
    for name in ("num_steps", "gradient_steps", "n_step", "target_update_period"):
        require(getattr(d, name) >= 1, f"dqn.{name} must be >= 1, got {getattr(d, name)}")
    replay_config.check(d, "dqn")
    require(0.0 < d.target_tau <= 1.0, f"dqn.target_tau must be in (0, 1], got {d.target_tau}")
    require(d.loss in LOSSES, f"dqn.loss must be one of {', '.join(LOSSES)}, got {d.loss!r}")
    require(d.huber_delta > 0, f"dqn.huber_delta must be > 0, got {d.huber_delta}")
    require(d.obs_storage in OBS_STORAGE, f"dqn.obs_storage must be one of "
            f"{', '.join(OBS_STORAGE)}, got {d.obs_storage!r}")
    check_optimizer(d, "dqn")
    check_exploration(d, "dqn")
    check_network(d.network, "dqn")


def check_run(d: DQNConfig, config) -> None:
    """Checks that need the run's sizes (num_envs, total_timesteps): the replay's."""
    replay_config.check_run(d, config, "dqn", d.n_step)


ALGORITHM = Algorithm(
    name="dqn", section=DQNConfig, check=check, check_run=check_run,
    sweepable=sweep_keys("dqn", HPARAMS), steps_per_env=lambda d: d.num_steps,
    make="jaxrl_dist.agents.dqn.learner:make_agent",
    policy="jaxrl_dist.agents.qnet.networks:make_policy",
    export="jaxrl_dist.agents.qnet.export:emitter",
    doc="double DQN with n-step returns and a replay buffer in fixed shards")
