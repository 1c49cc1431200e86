"""``pettingzoo:<id>``: a PettingZoo parallel-API environment of several agents, as a host
environment (:mod:`.host`): each process steps its share on its own CPUs, one environment
object per environment, and the learner sees each agent as a row (:mod:`.team`).

Ids: mpe2's particle environments by their module names (``pettingzoo:simple_spread_v3``), and
whatever a ``JAXRL_DIST_PLUGINS`` module registers with :func:`register` (a user's simulator:
``register("my_sim_v0", my_module.parallel_env)``); a config names an id, never code.
``env_kwargs`` go to the id's factory (mpe2: ``N``, ``local_ratio``, ``max_cycles``,
``continuous_actions``, ...).

What a team needs of the environment, checked here once: one observation space and one action
space shared by its agents (else one line naming who differs); an episode that ends for all its
agents at once (every agent terminated: terminated; otherwise a time limit: truncated); the
global state from ``state()`` where the environment has a ``state_space`` (mpe2's), else every
agent's observation concatenated, for a central critic (``team.critic: central``).
Environments are seeded once from their global index (as Gymnasium's are); a finished one
starts its next episode in the same step (``reset()`` continuing its own random stream) and
the observation it ended at is kept.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from typing import Any, Callable

import numpy as np

from jaxrl_dist import plugins
from jaxrl_dist.envs.base import EnvSpec
from jaxrl_dist.envs.gymnasium import DEFAULT_MAX_STEPS, _spaces
from jaxrl_dist.envs.host import HostStep
from jaxrl_dist.envs.team import agent_inputs
from jaxrl_dist.errors import EnvError, unknown_env

TEAMS = True   # make takes the run's team: section (envs.registry)
_REGISTERED: dict[str, Callable[..., Any]] = {}


def register(name: str, factory: Callable[..., Any]) -> None:
    """Make ``pettingzoo:<name>`` build environments with ``factory(**env_kwargs)``, which
    returns a new PettingZoo ``ParallelEnv`` (call it from a ``JAXRL_DIST_PLUGINS`` module)."""
    _REGISTERED[name] = factory


def _mpe2_ids() -> list[str]:
    if importlib.util.find_spec("mpe2") is None:
        return []
    import mpe2
    return [m.name for m in pkgutil.iter_modules(mpe2.__path__)
            if not m.name.startswith("_") and m.name[-3:-1] == "_v"]


def _factory(name: str) -> Callable[..., Any]:
    plugins.load()
    if name in _REGISTERED:
        return _REGISTERED[name]
    mpe2 = _mpe2_ids()
    if name in mpe2:
        return importlib.import_module(f"mpe2.{name}").parallel_env
    known = [*_REGISTERED, *mpe2]
    if not known:
        raise EnvError(f"pettingzoo:{name} is not registered and mpe2 (the particle "
                       f"environments) is not installed: pip install -e '.[pettingzoo]', or "
                       f"register the environment in a JAXRL_DIST_PLUGINS module "
                       f"(jaxrl_dist.envs.pettingzoo.register)")
    raise unknown_env("PettingZoo", name, known, prefix="pettingzoo:")


def _space_key(space: Any) -> tuple:
    """What must agree between agents' spaces."""
    key = (type(space).__name__, tuple(getattr(space, "shape", ()) or ()),
           str(getattr(space, "dtype", "")), int(getattr(space, "n", 0) or 0))
    if hasattr(space, "low"):
        key += (np.asarray(space.low).tobytes(), np.asarray(space.high).tobytes())
    return key


class ParallelEnvs:
    """``num_envs`` PettingZoo parallel environments as :class:`.host.HostEnvs` of a team:
    observations ``[N, A, *obs]`` (each agent's row, :func:`.team.agent_inputs`), rewards
    ``[N, A]``, the environment's end ``[N]``."""

    def __init__(self, make_one: Callable[[], Any], num_envs: int, name: str,
                 agents: tuple[str, ...], discrete: bool, central: bool, agent_ids: bool,
                 uses_state: bool, time_limit: int | None, obs_dtype: str):
        self.name, self.agents, self.discrete = name, agents, discrete
        self.obs_dtype = np.dtype(obs_dtype)
        self.central, self.agent_ids, self.uses_state = central, agent_ids, uses_state
        self.time_limit = time_limit
        self.envs: list[Any] = []
        try:
            for _ in range(num_envs):
                self.envs.append(make_one())
        except BaseException:
            self.close()
            raise
        self.num_envs = num_envs
        self.steps = np.zeros(num_envs, np.int64)   # of the running episodes (time_limit)

    def _rows(self, env: Any, obs: dict[str, Any]) -> np.ndarray:
        missing = [a for a in self.agents if a not in obs]
        if missing:
            raise EnvError(f"{self.name}: agent(s) {', '.join(missing)} gave no observation "
                           f"while the episode went on; jaxrl_dist trains teams whose "
                           f"agents stay until their episode ends")
        own = np.stack([np.asarray(obs[a], np.float32).reshape(-1) for a in self.agents])
        world = None
        if self.central:
            world = (np.asarray(env.state(), np.float32).reshape(-1) if self.uses_state
                     else own.reshape(-1))
        if world is None and not self.agent_ids:   # nothing appended: keep its shape
            return np.stack([np.asarray(obs[a]) for a in self.agents]).astype(self.obs_dtype)
        return agent_inputs(own, world, self.agent_ids, np)

    def _reset_one(self, i: int, seed: int | None) -> np.ndarray:
        env = self.envs[i]
        obs, _ = env.reset(seed=seed)
        self.steps[i] = 0
        return self._rows(env, obs)

    def reset(self, seeds: list[int]) -> np.ndarray:
        self._last = [self._reset_one(i, int(s)) for i, s in enumerate(seeds)]
        return np.stack(self._last)

    def reset_some(self, seeds: list[int], mask: np.ndarray) -> np.ndarray:
        """Seed and restart the environments of ``mask``; every one's observation [N, A, ...]
        (the others' current ones, from their last step)."""
        for i in np.flatnonzero(mask):
            self._last[i] = self._reset_one(int(i), int(seeds[i]))
        return np.stack(self._last)

    def step(self, actions: np.ndarray) -> HostStep:
        actions = np.asarray(actions)
        obs, final, reward = [], [], np.zeros((self.num_envs, len(self.agents)), np.float32)
        terminated, truncated = np.zeros(self.num_envs, bool), np.zeros(self.num_envs, bool)
        for i, env in enumerate(self.envs):
            act = {a: (int(actions[i, j]) if self.discrete else actions[i, j])
                   for j, a in enumerate(self.agents)}
            o, r, term, trunc, _ = env.step(act)
            self.steps[i] += 1
            reward[i] = [r.get(a, 0.0) for a in self.agents]
            ended = [bool(term.get(a, False) or trunc.get(a, False)) for a in self.agents]
            timed_out = self.time_limit is not None and self.steps[i] >= self.time_limit
            if any(ended) and not all(ended):
                done = [a for a, e in zip(self.agents, ended) if e]
                raise EnvError(f"{self.name}: agent(s) {', '.join(done)} ended their episode "
                               f"at its step {self.steps[i]} while the others went on; "
                               f"jaxrl_dist trains teams whose episode ends for every agent "
                               f"at once")
            terminated[i] = all(ended) and all(bool(term.get(a)) for a in self.agents)
            truncated[i] = (all(ended) or timed_out) and not terminated[i]
            reached = self._rows(env, o)
            final.append(reached)
            obs.append(self._reset_one(i, None) if terminated[i] or truncated[i] else reached)
        self._last = obs
        return HostStep(np.stack(obs), reward, terminated, truncated, np.stack(final))

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs = []


def make(name: str, episode_length: int | None = None, team: Any = None,
         **kwargs: Any) -> EnvSpec:
    """``pettingzoo:<name>``: an mpe2 id or one a plugin registered."""
    from pettingzoo.utils.env import AECEnv, ParallelEnv

    full = f"pettingzoo:{name}"
    factory = _factory(name)
    central = team is not None and team.critic == "central"
    agent_ids = team is not None and team.agent_ids
    try:
        probe = factory(**kwargs)
    except TypeError as e:
        raise EnvError(f"{full}: bad env_kwargs {sorted(kwargs)}: {e}") from None
    try:
        if isinstance(probe, AECEnv) or not isinstance(probe, ParallelEnv):
            kind = "PettingZoo's AEC API" if isinstance(probe, AECEnv) else type(probe).__name__
            raise EnvError(f"{full}: the factory made a {kind} environment, not a PettingZoo "
                           f"ParallelEnv; register the parallel API's constructor (e.g. the "
                           f"module's parallel_env, or pettingzoo.utils.conversions."
                           f"aec_to_parallel)")
        agents = tuple(probe.possible_agents)
        for what, space in (("observation", probe.observation_space),
                            ("action", probe.action_space)):
            kinds = {a: _space_key(space(a)) for a in agents}
            if len(set(kinds.values())) > 1:
                groups = "; ".join(
                    f"{', '.join(a for a in agents if kinds[a] == k)}: {space(a0)}"
                    for k, a0 in {kinds[a]: a for a in agents}.items())
                raise EnvError(f"{full}: its agents' {what} spaces differ ({groups}); "
                               f"jaxrl_dist trains teams whose agents share one {what} space")
        fields = _spaces(full, probe.observation_space(agents[0]), probe.action_space(agents[0]))
        state_space = getattr(probe, "state_space", None) if central else None
        uses_state = state_space is not None
        limit = episode_length or getattr(getattr(probe, "unwrapped", probe), "max_cycles",
                                          None)
    finally:
        probe.close()
    own_shape = fields["obs_shape"]
    own = int(np.prod(own_shape))
    A = len(agents)
    if central or agent_ids:
        if fields["obs_dtype"] != "float32" or len(own_shape) != 1:
            raise EnvError(f"{full}: a central critic or agent ids need flat float "
                           f"observations; its agents observe {own_shape} {fields['obs_dtype']}")
        world = (int(np.prod(state_space.shape)) if uses_state else own * A) if central else 0
        fields = {**fields, "obs_shape": (own + A * agent_ids + (world + A * agent_ids
                                                                 if central else 0),),
                  "obs_dtype": "float32"}
    discrete = not fields["continuous"]

    def open_envs(num_envs: int, evaluation: bool) -> ParallelEnvs:
        return ParallelEnvs(lambda: factory(**kwargs), num_envs, full, agents, discrete,
                            central, agent_ids, uses_state, episode_length,
                            fields["obs_dtype"])

    return EnvSpec(adapter=None, autoreset="host", name=full, host=open_envs,
                   max_episode_steps=int(limit or DEFAULT_MAX_STEPS), num_agents=A,
                   policy_features=own + A * agent_ids if central else None,
                   agent_networks=A * (team is not None and team.parameters == "per_agent"),
                   **fields)


__all__ = ["make", "register"]
