"""Typed, frozen run configuration: YAML + ``--set`` overrides, validated in one place.

Every size in the config is GLOBAL (all devices of all processes). Per-device sizes are derived
in :mod:`jaxrl_dist.sizes` once the device count is known, so the same file describes a run on
one CPU or on a pod; typed parsing of the YAML lives in :mod:`jaxrl_dist.typed`. Nothing here
imports jax: the CLI must read a config before jax is imported.
"""

from __future__ import annotations

from jaxrl_dist import agents, typed
from jaxrl_dist.typed import doc as _doc
from jaxrl_dist.errors import ConfigError, require

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True, kw_only=True)
class PopulationConfig:
    seeds: tuple[int, ...] = _doc("train one member per seed in ONE program; [] = a single run "
                                  "with `seed`", default=())
    sweep: dict[str, tuple[float, ...]] = _doc(
        "dotted key -> values; members = seeds x every combination. Sweepable: the "
        "algorithm's scalar hyperparameters (a key that is not one is an error that lists "
        "them)", default_factory=dict)
    member_devices: int | None = _doc("devices along the member axis (the rest split each "
                                      "member's envs); null = as many as divide the members",
                                      default=None)

    @property
    def enabled(self) -> bool:
        return bool(self.seeds or self.sweep)


# What a PBT round ranks members by, and the priors a mutation resamples from.
PBT_FITNESS = ("episode_return", "eval")
PBT_PRIORS = ("log", "uniform")


@dataclass(frozen=True, kw_only=True)
class MutationConfig:
    low: float = _doc("lower bound: mutated values are clipped into [low, high]")
    high: float = _doc("upper bound")
    factors: tuple[float, ...] = _doc("explore by multiplying the parent's value by one of "
                                      "these, drawn uniformly; [] = always resample",
                                      default=(0.8, 1.25))
    prior: str = _doc("resample from a log-uniform (log) or uniform prior over [low, high]",
                      default="log")


@dataclass(frozen=True, kw_only=True)
class PbtConfig:
    enabled: bool = _doc("population-based training: every interval_updates the bottom "
                         "quantile of members takes the weights, optimizer state, normaliser "
                         "statistics and hyperparameters of a random top-quantile member, "
                         "then mutates the hyperparameters of pbt.mutations", default=False)
    interval_updates: int = _doc("updates between rounds (updates_per_call is lowered to a "
                                 "divisor of it: rounds run between compiled calls)",
                                 default=10)
    warmup_updates: int = _doc("no round before this many updates", default=0)
    quantile: float = _doc("truncation selection: the top and bottom fraction of the eligible "
                           "members, in (0, 0.5]", default=0.25)
    resample_prob: float = _doc("chance that a copied member's mutated key is resampled from "
                                "its prior instead of perturbed", default=0.25)
    fitness: str = _doc("what ranks members: episode_return (mean return of the training "
                        "episodes finished since the last round) or eval (the deterministic "
                        "evaluation, eval_episodes per member, run at each round)",
                        default="episode_return")
    min_episodes: int | None = _doc("a member is eligible (parent or victim) once it has "
                                    "finished this many training episodes since the last "
                                    "round; null = num_envs (about one per environment)",
                                    default=None)
    mutations: dict[str, MutationConfig] = _doc(
        "dotted key -> {low, high, factors: [0.8, 1.25], prior: log|uniform}: the "
        "hyperparameters explored; any of the algorithm's sweepable keys (they live in the "
        "train state as arrays); keys that change shapes or the program are refused",
        default_factory=dict)


# W&B's run modes offered; "disabled" never imports wandb.
WANDB_MODES = ("disabled", "offline", "online")


@dataclass(frozen=True, kw_only=True)
class WandbConfig:
    mode: str = _doc("Weights & Biases logging from process 0 (pip install -e '.[wandb]'): "
                     "disabled (wandb is never imported), offline (files under "
                     "RUN_DIR/wandb/, uploaded later by `wandb sync`) or online",
                     default="disabled")
    project: str | None = _doc("W&B project; null = W&B's own ($WANDB_PROJECT, else "
                               "uncategorized)", default=None)
    entity: str | None = _doc("W&B user or team; null = the login's default", default=None)
    group: str | None = _doc("W&B run group (runs of one experiment side by side)", default=None)
    name: str | None = _doc("W&B run name; null = the run directory's name", default=None)
    tags: tuple[str, ...] = _doc("W&B run tags", default=())


TEAM_CRITICS = ("local", "central")
TEAM_PARAMETERS = ("shared", "per_agent")


@dataclass(frozen=True, kw_only=True)
class TeamConfig:
    critic: str = _doc("on environments of several agents (jaxmarl:, pettingzoo:): local = "
                       "IPPO (the critic "
                       "reads each agent's own observation), central = MAPPO (the critic reads "
                       "the environment's global state: its world_state, else every agent's "
                       "observation concatenated; the policy still reads its own)",
                       default="local")
    agent_ids: bool = _doc("append each agent's one-hot index to what the policy and a central "
                           "critic read (JaxMARL's OBS_WITH_AGENT_ID)", default=False)
    parameters: str = _doc("shared = one policy and critic for every agent; per_agent = each "
                           "agent its own (needs agent_ids: true, whose index picks them)",
                           default="shared")


@dataclass(frozen=True, kw_only=True)
class Config:
    algo: str = _doc("the learning algorithm; its settings are the config section of the same "
                     "name (ppo:)", default="ppo")
    env: str = _doc("environment: a gymnax id (CartPole-v1) or suite:name with suite one of "
                    "brax, playground, jumanji, xminigrid, craftax, ale, jaxmarl (teams of agents) "
                    "(optional extras, stepped inside the program) or gymnasium (any registered Gymnasium id, "
                    "a plugin's too, stepped on each process's CPUs)",
                    default="CartPole-v1")
    env_kwargs: dict[str, bool | int | float | str] = _doc(
        "passed to the suite's constructor (e.g. {backend: positional} for brax:, config "
        "overrides for playground:; gymnasium: vectorization sync|async|vector, "
        "step_timeout, and gymnasium.make's keywords)", default_factory=dict)
    episode_length: int | None = _doc("time limit (truncated, bootstrapped) for suites whose "
                                      "environments have none (brax:, playground:; gymnax, "
                                      "xminigrid: and craftax: replace theirs: CartPole-v1 at "
                                      "200 is CartPole-v0); null = the suite's default",
                                      default=None)
    seed: int = _doc("PRNG seed; same seed + config = same result on any topology", default=0)
    total_timesteps: int = _doc("global environment steps to train for", default=500_000)
    num_envs: int = _doc("GLOBAL number of parallel environments (split over devices)",
                         default=4)
    updates_per_call: int = _doc("updates fused into one compiled call (= logging interval); "
                                 "moved to a divisor of the run's updates within half or twice "
                                 "it, so one program runs them all",
                                 default=10)
    checkpoint_every: int = _doc("updates between checkpoints; 0 = off (checkpoints are also "
                                 "saved at start, end and on preemption)", default=0)
    checkpoint_minutes: float = _doc("wall-clock minutes between checkpoints (turned into an "
                                     "update period from the measured speed); 0 = off",
                                     default=10.0)
    keep_checkpoints: int = _doc("how many recent checkpoints to keep", default=3)
    eval_every: int = _doc("updates between deterministic evaluations; 0 = only the final one "
                           "(a run always evaluates its final policy)", default=0)
    eval_episodes: int = _doc("global number of evaluation episodes (one per eval env)",
                              default=16)
    eval_deterministic: bool = _doc("evaluate the policy's mode (argmax / Gaussian mean); false "
                                    "= sample actions as in training (a greedy policy can loop "
                                    "in a deterministic world, e.g. Jumanji's Snake)",
                                    default=True)
    target_return: float | None = _doc("stop early once eval return reaches this; null = off",
                                       default=None)
    solved_return: float | None = _doc("final eval return at which the task counts as solved; "
                                       "only reported, never stops the run. Not set: the "
                                       "env's known one (CartPole-v1 475, Acrobot-v1 -100, "
                                       "Pendulum-v1 -300, MountainCarContinuous-v0 90) "
                                       "with its own time limit, else none; null = none",
                                       default=None)
    check_replicas_every: int = _doc("updates between parameter fingerprint comparisons "
                                     "across devices and processes (always at the end); 0 = off",
                                     default=0)
    check_replicas_minutes: float = _doc("wall-clock minutes between replica checks; 0 = off",
                                         default=5.0)
    max_nonfinite_skips: int = _doc(
        "an update whose loss, gradient or new parameters are not finite is skipped (its "
        "changes dropped, counted as nonfinite_skipped); this many in a row stop the run with "
        "an error (exit 65) naming them and the last checkpoint", default=10)
    env_nonfinite: str = _doc(
        "what a non-finite reward or observation from an environment does (host environments "
        "and environments inside the program alike): 'error' = stop the run with one line "
        "naming the environment, nothing of that update saved (exit 2); 'reset' = drop that "
        "step (never learned from, stored only as a row no sample or window uses), reset that "
        "environment and go on, counting env_nonfinite_resets. May change on --resume",
        default="error")
    overlap_actors: bool = _doc(
        "host environments (gymnasium:): step the next batch while the learner updates, "
        "acting with the parameters of one update before (one update of policy lag, as "
        "Cleanba); needs an actor device apart from the learner's: the host CPU beside "
        "accelerators, or a CPU process's last device (--cpu-devices N: N-1 learn, 1 acts). "
        "Reproducible run to run, but not equal to the synchronous default", default=False)
    replicate_learn: bool | None = _doc(
        "each update's batch is gathered to every device once (one all-gather) and each device "
        "learns from all of it, holding a replay whole, so learning needs no collective at "
        "all: faster where collectives are slow and networks small (CPU processes over "
        "gloo, each all-reduce a round trip: a PPO update has hundreds, DQN and SAC one per "
        "gradient step); every learner and environment kind, single runs only; the same "
        "parameters on any topology, bitwise those of 1 device where the batch is not split. "
        "null = auto: on where the learner's CPU devices span several processes, else off. "
        "The summary's replicate_learn says what ran (false on one data device, where there "
        "is nothing to gather)",
        default=None)
    replicate_act: bool | None = _doc(
        "with replicate_learn on and environments inside the program: every device also steps "
        "EVERY environment, so each device runs the one-device program and an update needs no "
        "collective at all (not even replicate_learn's all-gather); pays where stepping is "
        "cheap next to a cross-process round trip (gloo: ~0.3-3 ms), costs each device the "
        "whole batch's stepping where it is not. null = auto: on wherever replicate_learn is "
        "on, for environments whose state lives in JAX; true with host environments (each "
        "process steps its own on the host) or without replicate_learn is a one-line error. "
        "The same parameters as 1 device (its program). The summary's replicate_act says what ran",
        default=None)
    matmul_precision: str = _doc(
        "float32 matmuls and convolutions: 'default' = the backend's (TF32 on Ampere/Hopper "
        "GPUs, full float32 on CPUs), 'float32' (full, to compare a GPU with a CPU), "
        "'tensorfloat32' or 'bfloat16'; recorded in the summary", default="default")
    gpu_command_buffers: str = _doc(
        "on GPUs, how the update's kernels are launched: 'auto' = XLA's command buffers (CUDA "
        "graphs) with its loops and conditionals inside them too, so a whole update of small "
        "kernels is one graph launch, not one launch per kernel (XLA drops the loop commands "
        "itself where the CUDA driver cannot run them); 'xla' = XLA's own defaults (straight-"
        "line runs of kernels graphed, every loop trip launched from the host); 'disabled' = "
        "no command buffers. Nothing changes on CPUs or TPUs; the summary's xla_options says what "
        "the update compiled with", default="auto")
    compile_cache: str | None = _doc("persistent XLA compilation cache shared by every run and "
                                     "process on this machine; 'auto' = $JAXRL_DIST_CACHE, else "
                                     "$XDG_CACHE_HOME/jaxrl_dist/xla, else "
                                     "~/.cache/jaxrl_dist/xla; null = off", default="auto")
    # The algorithm's section (``ppo:`` for PPO), typed by the algorithm's registry record;
    # read it as ``config.agent`` or by its name (``config.ppo``).
    agent: Any = field(default=None, metadata={"internal": True})
    population: PopulationConfig = field(default_factory=lambda: PopulationConfig())
    team: TeamConfig = field(default_factory=lambda: TeamConfig())
    pbt: PbtConfig = field(default_factory=lambda: PbtConfig())
    wandb: WandbConfig = field(default_factory=lambda: WandbConfig())

    def __getattr__(self, name: str) -> Any:
        if name != "algo" and name == self.__dict__.get("algo"):
            return self.agent
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    @property
    def algorithm(self) -> agents.Algorithm:
        return agents.get(self.algo)


# What a non-finite value from an environment does (``env_nonfinite``).
ENV_NONFINITE = ("error", "reset")

# gpu_command_buffers values offered (compile_cache.speed_options)
GPU_COMMAND_BUFFERS = ("auto", "xla", "disabled")

# jax_default_matmul_precision values offered ("default" leaves JAX's own choice).
MATMUL_PRECISIONS = ("default", "float32", "tensorfloat32", "bfloat16")

# env id -> final eval return at which it counts as solved, for a config that sets no
# ``solved_return``: Gym's reward thresholds and the ones docs/learning.md reports against.
# Any other environment gets no verdict unless its config sets one.
KNOWN_SOLVED_RETURNS = {"CartPole-v1": 475.0, "Acrobot-v1": -100.0, "Pendulum-v1": -300.0,
                        "MountainCarContinuous-v0": 90.0}

# Keys of the PPO section that older configs wrote at the top level; still read, and mapped.
LEGACY_PPO_KEYS = ("num_steps", "network")


# --------------------------------------------------------------------------------------------
# Loading and overriding


def to_dict(config: Config) -> dict[str, Any]:
    """Plain-data view (tuples as lists) suitable for YAML/JSON."""

    def convert(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: convert(v) for k, v in x.items()}
        if isinstance(x, tuple):
            return [convert(v) for v in x]
        return x

    data = convert(dataclasses.asdict(config))
    return {(config.algo if k == "agent" else k): v for k, v in data.items()}


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``KEY=VALUE`` strings (dotted keys, YAML-parsed values) to a nested dict."""
    data = yaml.safe_load(yaml.safe_dump(data))  # deep copy of plain data
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE (e.g. --set num_envs=8), got {item!r}")
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        if key.split(".")[0] in LEGACY_PPO_KEYS and data.get("algo", "ppo") == "ppo":
            key = f"ppo.{key}"
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {key}: '{part}' is not a config section")
            node = child
        node[parts[-1]] = value
    return data


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a config file with ``yaml.safe_load`` (no tags, no code)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path} (pass a YAML file such as "
                          f"configs/cartpole.yaml)")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}: "
                          f"{getattr(e, 'problem', None) or e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must contain a mapping of keys, got "
                          f"{type(data).__name__}")
    return data


def _migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Older configs' top-level PPO keys (``num_steps``, ``network``) moved into ``ppo:``."""
    legacy = [k for k in LEGACY_PPO_KEYS if k in data]
    if not legacy:
        return data
    algo = data.get("algo", "ppo")
    if algo != "ppo":
        raise ConfigError(f"config key '{legacy[0]}' belongs to the ppo: section, but algo is "
                          f"{algo!r}; move it into the '{algo}:' section if it has one")
    data = dict(data)
    section = dict(data.get("ppo") or {})
    for key in legacy:
        if key in section:
            raise ConfigError(f"config key '{key}' is given both at the top level and as "
                              f"'ppo.{key}'; keep only 'ppo.{key}'")
        section[key] = data.pop(key)
    data["ppo"] = section
    return data


def from_dict(data: dict[str, Any], population: bool = True) -> Config:
    """A checked Config; the algorithm's section is typed by its registry record."""
    if not isinstance(data, dict):
        raise ConfigError(f"a config must be a mapping of keys, got {type(data).__name__}")
    data = _migrate(data)
    algo = data.get("algo", "ppo")
    if not isinstance(algo, str):
        raise ConfigError(f"config key 'algo': expected a string, got {algo!r}")
    algorithm = agents.get(algo)
    others = sorted(set(data) & set(agents.algorithms()) - {algo})
    if others:
        raise ConfigError(f"config section '{others[0]}:' is for algo {others[0]}, but algo is "
                          f"{algo!r}; remove the section or set algo: {others[0]}")
    rest = {k: v for k, v in data.items() if k != algo}
    if "solved_return" not in rest:
        rest["solved_return"] = known_solved_return(rest.get("env", Config.env),
                                                    rest.get("episode_length"))
    section = typed.build(algorithm.section, data.get(algo) or {}, f"{algo}.")
    also = (algo, *(f"{algo}.{key}" for key in typed.keys(algorithm.section)))
    config = dataclasses.replace(typed.build(Config, rest, also=also), agent=section)
    if population:
        check(config)
    return config


def known_solved_return(env: Any, episode_length: Any = None) -> float | None:
    """The threshold the project reports ``env`` against when a config sets none: only with
    the environment's own time limit (another one changes what a return means)."""
    if episode_length is not None or not isinstance(env, str):
        return None
    suite, _, name = env.partition(":")
    if suite == "gymnasium":   # the same task as gymnax's where both have it, else Gymnasium's
        if name in KNOWN_SOLVED_RETURNS:   # registered reward_threshold (MuJoCo's v5 tasks)
            return KNOWN_SOLVED_RETURNS[name]
        import gymnasium
        spec = gymnasium.registry.get(name)
        threshold = getattr(spec, "reward_threshold", None)
        return None if threshold is None else float(threshold)
    return KNOWN_SOLVED_RETURNS.get(env)


def with_defaults(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved run's config (a checkpoint's) with the keys added since it was written at their
    defaults, so a checkpoint of an older version resumes when nothing it trained with
    changed. A config this version cannot read stays as saved (the comparison names the key)."""
    try:
        return to_dict(from_dict(saved, population=False))
    except ConfigError:
        return saved


def load(path: str | Path | None, overrides: list[str] = ()) -> Config:
    """Config from an optional YAML file plus ``KEY=VALUE`` overrides."""
    data = apply_overrides(load_yaml(path) if path is not None else {}, list(overrides))
    if "env" not in data:  # an empty or half-written file must not silently train CartPole
        raise ConfigError(f"config {path if path is not None else '(none)'} names no "
                          f"environment: add a line such as 'env: CartPole-v1' (or pass "
                          f"--set env=CartPole-v1)")
    return from_dict(data)


# --------------------------------------------------------------------------------------------
# Validation


def check(config: Config) -> None:
    """Checks that need no device count."""
    c = config
    require(c.seed >= 0, f"seed must be >= 0, got {c.seed}")
    for name in ("num_envs", "total_timesteps", "updates_per_call",
                 "keep_checkpoints", "eval_episodes", "max_nonfinite_skips"):
        require(getattr(c, name) >= 1, f"{name} must be >= 1, got {getattr(c, name)}")
    for name in ("checkpoint_every", "eval_every", "check_replicas_every", "checkpoint_minutes",
                 "check_replicas_minutes"):
        require(getattr(c, name) >= 0, f"{name} must be >= 0 (0 = off), got {getattr(c, name)}")
    require(c.team.critic in TEAM_CRITICS,
            f"team.critic must be one of {', '.join(TEAM_CRITICS)}, got {c.team.critic!r}")
    require(c.team.parameters in TEAM_PARAMETERS,
            f"team.parameters must be one of {', '.join(TEAM_PARAMETERS)}, got "
            f"{c.team.parameters!r}")
    require(c.team.parameters == "shared" or c.team.agent_ids,
            "team.parameters=per_agent needs team.agent_ids: true (each agent's one-hot index "
            "picks its parameters)")
    require(c.env_nonfinite in ENV_NONFINITE,
            f"env_nonfinite must be one of {', '.join(ENV_NONFINITE)}, got {c.env_nonfinite!r}")
    require(c.matmul_precision in MATMUL_PRECISIONS,
            f"matmul_precision must be one of {', '.join(MATMUL_PRECISIONS)}, got "
            f"{c.matmul_precision!r}")
    require(c.gpu_command_buffers in GPU_COMMAND_BUFFERS,
            f"gpu_command_buffers must be one of {', '.join(GPU_COMMAND_BUFFERS)}, got "
            f"{c.gpu_command_buffers!r}")
    algorithm = c.algorithm
    steps = algorithm.steps_per_env(c.agent)
    require(c.total_timesteps >= c.num_envs * steps,
            f"total_timesteps ({c.total_timesteps}) must be at least one update: num_envs x "
            f"{c.algo}'s steps per environment = {c.num_envs} x {steps} = {c.num_envs * steps}")
    algorithm.check(c.agent)
    if algorithm.check_run is not None:
        algorithm.check_run(c.agent, c)
    require(c.episode_length is None or c.episode_length >= 1,
            f"episode_length must be >= 1 or null, got {c.episode_length}")
    require(c.wandb.mode in WANDB_MODES,
            f"wandb.mode must be one of {', '.join(WANDB_MODES)}, got {c.wandb.mode!r}")
    _check_population(config)
    _check_pbt(config)


def _check_population(config: Config) -> None:
    """Seeds unique, sweep keys sweepable, and every swept value valid for its key."""
    pop = config.population
    require(len(set(pop.seeds)) == len(pop.seeds) and all(s >= 0 for s in pop.seeds),
            f"population.seeds must be distinct integers >= 0, got {list(pop.seeds)}")
    require(pop.member_devices is None or pop.member_devices >= 1,
            f"population.member_devices must be >= 1 or null, got {pop.member_devices}")
    base = _without_members(config)
    for key, values in pop.sweep.items():
        _require_held_as_array(config, key, "population.sweep", "members could not share one "
                               "program", "sweepable")
        require(len(values) >= 1, f"population.sweep.{key}: give at least one value")
        for value in values:
            _check_value(base, key, value, f"population.sweep.{key}={value}")


def _check_pbt(config: Config) -> None:
    """Ranges, a population to select in, and mutations of keys the state holds as arrays,
    with bounds that are valid values and hold every member's starting value."""
    pbt = config.pbt
    require(pbt.interval_updates >= 1,
            f"pbt.interval_updates must be >= 1, got {pbt.interval_updates}")
    require(pbt.warmup_updates >= 0, f"pbt.warmup_updates must be >= 0, got {pbt.warmup_updates}")
    require(0 < pbt.quantile <= 0.5, f"pbt.quantile must be in (0, 0.5], got {pbt.quantile}")
    require(0 <= pbt.resample_prob <= 1,
            f"pbt.resample_prob must be in [0, 1], got {pbt.resample_prob}")
    require(pbt.fitness in PBT_FITNESS,
            f"pbt.fitness must be one of {', '.join(PBT_FITNESS)}, got {pbt.fitness!r}")
    require(pbt.min_episodes is None or pbt.min_episodes >= 1,
            f"pbt.min_episodes must be >= 1 or null, got {pbt.min_episodes}")
    base = _without_members(config)
    for key, m in pbt.mutations.items():
        _require_held_as_array(config, key, "pbt.mutations", "it cannot change during a run",
                               "mutable")
        where = f"pbt.mutations.{key}"
        require(m.prior in PBT_PRIORS,
                f"{where}.prior must be one of {', '.join(PBT_PRIORS)}, got {m.prior!r}")
        require(m.low < m.high, f"{where}: low ({m.low}) must be below high ({m.high})")
        require(m.prior != "log" or m.low > 0,
                f"{where}: a log prior needs low > 0, got {m.low}")
        require(all(f > 0 for f in m.factors),
                f"{where}.factors must be > 0, got {list(m.factors)}")
        for value in (m.low, m.high):
            _check_value(base, key, value, f"{where}: bound {value}")
    if not pbt.enabled:
        return
    pop = config.population
    size = len(pop.seeds or [config.seed])
    for values in pop.sweep.values():
        size *= len(values)
    require(size >= 2, f"pbt.enabled needs a population of at least 2 members "
                       f"(population.seeds or population.sweep), got {size}")
    require(math.floor(size * pbt.quantile + 1e-4) >= 1,
            f"pbt.quantile={pbt.quantile:g} of {size} members is less than one member, so no "
            f"round would copy anyone; set pbt.quantile >= {1 / size:.3g} (at most 0.5) or "
            f"add members")
    for key, m in pbt.mutations.items():
        for value in pop.sweep.get(key, [_value_of(base, key)]):
            require(m.low <= value <= m.high,
                    f"pbt.mutations.{key}: a member starts at {value}, outside [low, high] = "
                    f"[{m.low}, {m.high}]")


def _without_members(config: Config) -> dict[str, Any]:
    """The config as a dict without its population and pbt sections: one member's."""
    base = to_dict(config)
    base.pop("population")
    base.pop("pbt")
    return base


def _require_held_as_array(config: Config, key: str, where: str, so: str, kind: str) -> None:
    """``key`` is one the train state holds as an array (the algorithm's sweepable keys: what
    members may differ in and PBT may change), else one line saying why not."""
    held = config.algorithm.sweepable
    if key in held:
        return
    known = {k for k, _, _ in describe()}
    why = (f"changes array shapes or the compiled program, so {so}" if key in known
           else "is not a config key")
    raise ConfigError(f"{where}: '{key}' {why}; {kind} keys of algo {config.algo}: "
                      f"{', '.join(held)}")


def _check_value(base: dict[str, Any], key: str, value: Any, where: str) -> None:
    """``value`` is valid for ``key`` in the config ``base`` (a dict without its population
    and pbt sections), else one line starting with ``where``."""
    try:
        check(from_dict(apply_overrides(base, [f"{key}={value}"]), population=False))
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def _value_of(data: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        data = data[part]
    return data


def describe() -> list[tuple[str, str, str]]:
    """(dotted key, default, help) for every field; used by ``--help-config``."""
    rows = []

    def walk(cls: type, prefix: str) -> None:
        for f in dataclasses.fields(cls):
            if f.metadata.get("internal"):
                continue
            if dataclasses.is_dataclass(typing.get_type_hints(cls)[f.name]):  # a section
                walk(typing.get_type_hints(cls)[f.name], f"{prefix}{f.name}.")
            elif f.default_factory is not dataclasses.MISSING:
                rows.append((prefix + f.name, repr(f.default_factory()),
                             f.metadata.get("help", "")))
            else:
                rows.append((prefix + f.name, repr(f.default), f.metadata.get("help", "")))

    walk(Config, "")
    for name, algorithm in sorted(agents.algorithms().items()):
        walk(algorithm.section, f"{name}.")
    return rows
