"""The sections of the off-policy actor-critics (``sac:``, ``td3:``, ``crossq:``), their checks,
their scalar hyperparameters and their registry records (:mod:`jaxrl_dist.agents` registers
them). jax-free.

All three share every key of :class:`OffPolicyConfig` (the replay, the critic ensemble, the
learning rates, the networks); SAC and TD3 add the Polyak targets (:class:`TargetConfig`), SAC
and CrossQ the entropy coefficient (:class:`EntropyConfig`), CrossQ its batch renormalisation
and Adam's beta1; each its actor's own."""

from __future__ import annotations

from dataclasses import dataclass, field

from jaxrl_dist.agents.algorithm import Algorithm, sweep_keys
from jaxrl_dist.agents.choices import ACTIVATIONS, GRAD_CLIPS
from jaxrl_dist.agents.replay import config as replay_config
from jaxrl_dist.errors import require
from jaxrl_dist.typed import doc as _doc


@dataclass(frozen=True, kw_only=True)
class NetworkConfig:
    actor_hidden: tuple[int, ...] = _doc("actor MLP hidden sizes", default=(256, 256))
    critic_hidden: tuple[int, ...] = _doc("each critic's MLP hidden sizes (input: the "
                                          "observation and the action)", default=(256, 256))
    activation: str = _doc(f"hidden activation, one of {', '.join(ACTIVATIONS)}", default="relu")
    num_critics: int = _doc("critics in the ensemble (one vmapped network); targets take the "
                            "minimum over all of them (2: the twin critics of SAC and TD3)",
                            default=2)


@dataclass(frozen=True, kw_only=True)
class OffPolicyConfig:
    num_steps: int = _doc("env steps per environment collected per update (the global batch "
                          "of env steps is num_envs x num_steps)", default=1)
    utd: int = _doc("gradient steps per update, i.e. per global batch of num_envs x num_steps "
                    "env steps (SB3's gradient_steps with train_freq = num_steps); run as one "
                    "scan inside the update", default=1)
    batch_size: int = _doc("GLOBAL transitions sampled per gradient step (batch_size / "
                           "buffer_shards from each shard)", default=256)
    buffer_size: int = _doc("GLOBAL replay capacity in transitions (a multiple of num_envs x "
                            "num_steps); the oldest are overwritten", default=1_000_000)
    buffer_shards: int = _doc("the replay buffer's shard count, FIXED by the config so results "
                              "do not depend on the device count: each shard holds num_envs / "
                              "buffer_shards environments' transitions and serves batch_size / "
                              "buffer_shards of each batch; a multiple of the device count",
                              default=1)
    learning_starts: int = _doc("global env steps of uniformly random actions (in the action "
                                "bounds) before the first gradient step", default=5_000)
    gamma: float = _doc("discount factor", default=0.99)
    n_step: int = _doc("n-step returns: the critics' targets sum up to n discounted rewards "
                       "from the replay (stopping at an episode's end), then bootstrap with "
                       "gamma^n; 1 = the one-step targets of SAC, TD3 and CrossQ", default=1)
    reward_scale: float = _doc("rewards multiplied by this in the critics' targets (Brax's "
                               "reward_scaling; with autotune it sets the entropy's weight "
                               "against the reward); 1 = off", default=1.0)
    policy_delay: int = _doc("gradient steps per actor step: the critics take every one, the "
                             "actor (and, for td3, the targets) every policy_delay-th",
                             default=1)
    actor_lr: float = _doc("Adam learning rate of the actor", default=3e-4)
    critic_lr: float = _doc("Adam learning rate of the critics", default=3e-4)
    adam_eps: float = _doc("Adam epsilon", default=1e-8)
    max_grad_norm: float | None = _doc("gradient clipping threshold of each network (see "
                                       "grad_clip); null = off", default=None)
    grad_clip: str = _doc("global_norm: a gradient rescaled to norm <= max_grad_norm; element: "
                          "every element clipped to +-max_grad_norm", default="global_norm")
    bootstrap_truncation: bool = _doc("bootstrap from the real final observation at a time "
                                      "limit (the buffer then stores each step's final "
                                      "observation: 2x observation memory); false = a time "
                                      "limit ends the return like a terminal state",
                                      default=True)
    normalize_observations: bool = _doc("running observation normalisation (moments over "
                                        "every process's rollouts; stored observations stay "
                                        "raw and are normalised when sampled)", default=False)
    checkpoint_buffer: bool = _doc("checkpoints hold the replay buffer (exact resume); false = "
                                   "smaller checkpoints, a resumed run refills the buffer to "
                                   "learning_starts before learning again", default=True)
    network: NetworkConfig = field(default_factory=NetworkConfig)


@dataclass(frozen=True, kw_only=True)
class TargetConfig(OffPolicyConfig):
    """The Polyak-averaged target networks of SAC and TD3 (CrossQ has none)."""

    tau: float = _doc("Polyak step of the target networks: target <- tau x online + (1 - tau) "
                      "x target", default=0.005)


@dataclass(frozen=True, kw_only=True)
class EntropyConfig:
    """The entropy coefficient of the squashed-Gaussian actors (SAC, CrossQ)."""

    alpha_lr: float = _doc("Adam learning rate of log(alpha), the entropy coefficient's "
                           "(autotune)", default=3e-4)
    alpha: float = _doc("the entropy coefficient: its initial value with autotune, else "
                        "fixed", default=1.0)
    autotune: bool = _doc("tune alpha so the policy's entropy tracks target_entropy",
                          default=True)
    target_entropy: float | None = _doc("the entropy autotune aims for, in nats of the [-1, 1] "
                                        "action; null = -(action size)", default=None)


@dataclass(frozen=True, kw_only=True)
class SACConfig(EntropyConfig, TargetConfig):
    pass


@dataclass(frozen=True, kw_only=True)
class CrossQNetworkConfig(NetworkConfig):
    critic_hidden: tuple[int, ...] = _doc(
        "each critic's MLP hidden sizes (input: the observation and the action); the paper's "
        "2048 x 2048 (sbx: 1024 x 1024, for speed)", default=(2048, 2048))
    batch_norm_momentum: float = _doc("batch renormalisation's running statistics: running "
                                      "<- momentum x running + (1 - momentum) x batch",
                                      default=0.99)
    batch_norm_actor: bool = _doc("batch renormalisation in the actor too (before its first "
                                  "and after each hidden layer, as in the critics); false = "
                                  "SAC's plain MLP actor", default=True)


@dataclass(frozen=True, kw_only=True)
class CrossQConfig(EntropyConfig, OffPolicyConfig):
    """CrossQ (Bhatt et al., ICLR 2024): SAC without target networks, batch renormalisation in
    the critics over the joint (s, a) / (s', a') batch."""

    policy_delay: int = _doc("gradient steps per actor step: the critics take every one, the "
                             "actor every policy_delay-th", default=3)
    actor_lr: float = _doc("Adam learning rate of the actor", default=1e-3)
    critic_lr: float = _doc("Adam learning rate of the critics", default=1e-3)
    alpha_lr: float = _doc("Adam learning rate of log(alpha), the entropy coefficient's "
                           "(autotune; its Adam keeps beta1 0.9, as sbx's)", default=1e-3)
    adam_b1: float = _doc("Adam's beta1 of the actor and the critics (CrossQ's 0.5; 0.9 is "
                          "Adam's usual)", default=0.5)
    renorm_warmup_steps: int = _doc("global env steps after learning_starts during which batch "
                                    "renormalisation is plain batch normalisation (the batch's "
                                    "statistics); afterwards it renormalises towards the "
                                    "running statistics (r_max 3, d_max 5); one clock for actor "
                                    "and critics (sbx counts each network's own gradient "
                                    "steps)", default=100_000)
    network: CrossQNetworkConfig = field(default_factory=CrossQNetworkConfig)


@dataclass(frozen=True, kw_only=True)
class TD3Config(TargetConfig):
    learning_starts: int = _doc("global env steps of uniformly random actions (in the action "
                                "bounds) before the first gradient step", default=25_000)
    policy_delay: int = _doc("gradient steps per actor step: the critics take every one, the "
                             "actor and the targets every policy_delay-th", default=2)
    exploration_noise: float = _doc("std of the Gaussian noise added to the actor's action "
                                    "when acting, in [-1, 1] units (then clipped)", default=0.1)
    policy_noise: float = _doc("target policy smoothing: std of the noise added to the target "
                               "actor's action, in [-1, 1] units", default=0.2)
    noise_clip: float = _doc("target policy smoothing: that noise clipped to +-noise_clip",
                             default=0.5)


# The update's scalar hyperparameters, the keys a population may sweep: members of a sweep
# differ in array values only.
COMMON_HPARAMS = ("actor_lr", "critic_lr", "gamma", "tau", "max_grad_norm")
SAC_HPARAMS = (*COMMON_HPARAMS, "alpha_lr")
TD3_HPARAMS = (*COMMON_HPARAMS, "exploration_noise", "policy_noise", "noise_clip")
CROSSQ_HPARAMS = ("actor_lr", "critic_lr", "gamma", "max_grad_norm", "alpha_lr")
HPARAMS = {"sac": SAC_HPARAMS, "td3": TD3_HPARAMS, "crossq": CROSSQ_HPARAMS}


def _check_common(c: OffPolicyConfig, prefix: str) -> None:
    for name in ("num_steps", "utd", "policy_delay", "n_step"):
        require(getattr(c, name) >= 1, f"{prefix}.{name} must be >= 1, got {getattr(c, name)}")
    replay_config.check(c, prefix)
    require(0.0 <= c.gamma <= 1.0, f"{prefix}.gamma must be in [0, 1], got {c.gamma}")
    require(c.reward_scale > 0, f"{prefix}.reward_scale must be > 0, got {c.reward_scale}")
    if isinstance(c, TargetConfig):
        require(0.0 < c.tau <= 1.0, f"{prefix}.tau must be in (0, 1], got {c.tau}")
    for name in ("actor_lr", "critic_lr", "adam_eps"):
        require(getattr(c, name) > 0, f"{prefix}.{name} must be > 0, got {getattr(c, name)}")
    require(c.max_grad_norm is None or c.max_grad_norm > 0,
            f"{prefix}.max_grad_norm must be > 0 or null (no clipping), got {c.max_grad_norm}")
    require(c.grad_clip in GRAD_CLIPS, f"{prefix}.grad_clip must be one of "
            f"{', '.join(GRAD_CLIPS)}, got {c.grad_clip!r}")
    n = c.network
    require(n.activation in ACTIVATIONS, f"{prefix}.network.activation must be one of "
            f"{', '.join(ACTIVATIONS)}, got {n.activation!r}")
    for name in ("actor_hidden", "critic_hidden"):
        sizes = getattr(n, name)
        require(all(s >= 1 for s in sizes),
                f"{prefix}.network.{name} sizes must be >= 1, got {list(sizes)}")
    require(n.num_critics >= 1, f"{prefix}.network.num_critics must be >= 1, got "
            f"{n.num_critics}")


def _check_entropy(c: EntropyConfig, prefix: str) -> None:
    require(c.alpha_lr > 0, f"{prefix}.alpha_lr must be > 0, got {c.alpha_lr}")
    require(c.alpha > 0, f"{prefix}.alpha must be > 0 (it is learned as log(alpha)), got "
            f"{c.alpha}")


def check_sac(c: SACConfig) -> None:
    _check_common(c, "sac")
    _check_entropy(c, "sac")


def check_crossq(c: CrossQConfig) -> None:
    _check_common(c, "crossq")
    _check_entropy(c, "crossq")
    require(0.0 <= c.adam_b1 < 1.0, f"crossq.adam_b1 must be in [0, 1), got {c.adam_b1}")
    require(c.renorm_warmup_steps >= 0,
            f"crossq.renorm_warmup_steps must be >= 0, got {c.renorm_warmup_steps}")
    momentum = c.network.batch_norm_momentum
    require(0.0 <= momentum < 1.0,
            f"crossq.network.batch_norm_momentum must be in [0, 1), got {momentum}")


def check_td3(c: TD3Config) -> None:
    _check_common(c, "td3")
    for name in ("exploration_noise", "policy_noise", "noise_clip"):
        require(getattr(c, name) >= 0, f"td3.{name} must be >= 0, got {getattr(c, name)}")


SAC = Algorithm(
    name="sac", section=SACConfig, check=check_sac,
    check_run=lambda c, config: replay_config.check_run(c, config, "sac", c.n_step),
    sweepable=sweep_keys("sac", SAC_HPARAMS), steps_per_env=lambda c: c.num_steps,
    make="jaxrl_dist.agents.offpolicy.sac:make_sac",
    policy="jaxrl_dist.agents.offpolicy.networks:sac_policy",
    export="jaxrl_dist.agents.offpolicy.export:sac_emitter",
    doc="soft actor-critic: twin critics, a tanh-squashed Gaussian actor, entropy autotuning")

TD3 = Algorithm(
    name="td3", section=TD3Config, check=check_td3,
    check_run=lambda c, config: replay_config.check_run(c, config, "td3", c.n_step),
    sweepable=sweep_keys("td3", TD3_HPARAMS), steps_per_env=lambda c: c.num_steps,
    make="jaxrl_dist.agents.offpolicy.td3:make_td3",
    policy="jaxrl_dist.agents.offpolicy.networks:td3_policy",
    export="jaxrl_dist.agents.offpolicy.export:td3_emitter",
    doc="TD3: twin critics, a deterministic actor, target smoothing, delayed updates")

CROSSQ = Algorithm(
    name="crossq", section=CrossQConfig, check=check_crossq,
    check_run=lambda c, config: replay_config.check_run(c, config, "crossq", c.n_step),
    sweepable=sweep_keys("crossq", CROSSQ_HPARAMS), steps_per_env=lambda c: c.num_steps,
    make="jaxrl_dist.agents.offpolicy.crossq:make_crossq",
    policy="jaxrl_dist.agents.offpolicy.networks:crossq_policy",
    export="jaxrl_dist.agents.offpolicy.export:crossq_emitter",
    doc="CrossQ: SAC without target networks, batch renormalisation over the joint (s, a) / "
        "(s', a') batch (global), wide critics, Adam beta1 0.5")
