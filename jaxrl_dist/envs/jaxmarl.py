"""``jaxmarl:<name>``: JaxMARL's multi-agent environments (``MPE_simple_spread_v3``, ``SMAX``,
``overcooked``, ...), stepped inside the program, each agent a row of the batch
(``envs.team``).

JaxMARL folds the time limit into ``done`` and auto-resets in ``step``; the adapter steps
``step_env`` (no reset: the lazy reset of ``envs.base`` restarts finished environments and
keeps the final observation) and tells the two ends apart: an end is a TRUNCATION when the
state's step counter has reached the environment's ``max_steps`` (bootstrapped, as for one
agent), else a TERMINATION (SMAX's battle won or lost). An end at exactly ``max_steps`` that
was also won or lost counts as the time limit. JaxMARL's episode lengths are kept as they are
(MPE: 26 steps for ``max_steps`` 25, PettingZoo's mpe2: 25). An episode ends for every agent
at once (``done["__all__"]``); an agent that is out before (a dead SMAX unit) acts on until
then, with the actions its mask leaves (SMAX: only ``stop``), as JaxMARL's baselines do.

``jaxmarl:SMAX`` is ``HeuristicEnemySMAX`` (the allies learn, the enemies follow JaxMARL's
heuristic: its baselines' setting) and takes ``env_kwargs: {scenario: 3m}`` (a map name);
``jaxmarl:overcooked`` takes ``layout: cramped_room`` (a layout name). Agents whose spaces
differ (e.g. MPE's predators and prey) are refused in one line that names them.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from typing import Any, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_dist.envs.base import EnvError, EnvSpec, Step
from jaxrl_dist.envs.spaces import obs_shape
from jaxrl_dist.envs.team import agent_inputs
from jaxrl_dist.errors import unknown_env
from jaxrl_dist.quiet import muted

SMAX_NAMES = ("SMAX", "HeuristicEnemySMAX")
MABRAX = ("ant_4x2", "halfcheetah_6x1", "hopper_3x1", "humanoid_9|8", "walker2d_2x3")
_MABRAX_MODULE = "jaxmarl.environments.mabrax"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """jaxmarl's import, silenced and undone: it sets ``sys.stdout``/``sys.stderr`` to
    ``sys.__stdout__``/``sys.__stderr__`` (its MABrax module), undoing any redirection of the
    caller's (pytest's capture, a notebook's), then prints two lines; so standard output is
    silenced at the file descriptor and both streams are put back as they were."""
    streams = sys.stdout, sys.stderr
    try:
        with muted(1):
            yield
    finally:
        sys.stdout, sys.stderr = streams


def _import_jaxmarl() -> Any:
    """jaxmarl, imported without its MABrax module (which :func:`make` refuses). Its package
    imports every environment family, and MABrax's (Brax, MuJoCo MJX, Warp) was half of that
    import's time (9.8 s -> 5.4 s on the 2-core VM under load): jaxmarl skips MABrax when
    importing it fails (its ``MABRAX_AVAILABLE``), and ``None`` in ``sys.modules`` makes it
    fail. Taken out again after, so the module itself can still be imported; but jaxmarl,
    once imported this way, has no MABrax in its registry: a program that needs
    ``jaxmarl.make("ant_4x2")`` beside jaxrl_dist imports jaxmarl itself first."""
    if "jaxmarl" in sys.modules:
        return sys.modules["jaxmarl"]
    block = _MABRAX_MODULE not in sys.modules
    if block:
        sys.modules[_MABRAX_MODULE] = None   # type: ignore[assignment]
    try:
        with _quiet():   # jaxmarl prints at import (two lines on stdout)
            import jaxmarl
    finally:
        if block and sys.modules.get(_MABRAX_MODULE, 0) is None:
            del sys.modules[_MABRAX_MODULE]
    return jaxmarl


def _steps_taken(state: Any) -> jax.Array:
    """The environment's step counter (a wrapper's inner state's, e.g. HeuristicEnemySMAX)."""
    while not hasattr(state, "step"):
        state = state.state
    return state.step


@dataclass(frozen=True, eq=False)
class JaxMARLAdapter:
    """ONE JaxMARL environment: observations ``[A, d]`` in ``agents`` order (each agent's
    flattened; with ``agent_ids`` its one-hot index appended), rewards ``[A]``, actions
    ``[A, ...]``; the legal actions ``[A, n]`` where the environment has them.

    With ``central`` (``team.critic: central``, MAPPO) each agent's row is its observation
    followed by the environment's global state (JaxMARL's ``world_state`` where it has one,
    SMAX's; else every agent's observation concatenated, as JaxMARL's MPE world-state wrapper
    and mpe2's ``state()`` make it), the agent's one-hot index after each with
    ``agent_ids``: the policy reads the first part (``EnvSpec.policy_features``), the critic
    the rest."""

    env: Any
    agents: tuple[str, ...]
    masked: bool
    agent_ids: bool = False
    central: bool = False

    def _obs(self, obs: dict[str, Any]) -> jax.Array:
        own = jnp.stack([jnp.asarray(obs[a], jnp.float32).reshape(-1) for a in self.agents])
        world = None
        if self.central:
            world = (jnp.asarray(obs["world_state"], jnp.float32).reshape(-1)
                     if "world_state" in obs else own.reshape(-1))
        return agent_inputs(own, world, self.agent_ids)

    def reset(self, key: jax.Array) -> tuple[Any, jax.Array]:
        obs, state = self.env.reset(key)
        return state, self._obs(obs)

    def step(self, key: jax.Array, state: Any, action: jax.Array) -> Step:
        actions = {a: action[i] for i, a in enumerate(self.agents)}
        obs, new_state, rewards, dones, _ = self.env.step_env(key, state, actions)
        done = jnp.asarray(dones["__all__"], bool)
        time_up = _steps_taken(new_state) >= self.env.max_steps
        reward = jnp.stack([jnp.asarray(rewards[a], jnp.float32) for a in self.agents])
        return Step(new_state, self._obs(obs), reward, done & ~time_up, done & time_up)

    def action_mask(self, state: Any) -> jax.Array:
        avail = self.env.get_avail_actions(state)
        return jnp.stack([jnp.asarray(avail[a], bool) for a in self.agents])


@dataclass(frozen=True, eq=False)
class SMAXAdapter(JaxMARLAdapter):
    """SMAX's: an episode is WON when every enemy unit is dead (the evaluation's win rate,
    ``evaluate``; JaxMARL's SMAX log counts the won-battle bonus the same way)."""

    def won(self, state: Any) -> jax.Array:
        alive = state.state.unit_alive   # HeuristicEnemySMAX's inner SMAX state
        return ~jnp.any(alive[self.env.num_allies:])


def _construct(name: str, kwargs: dict[str, Any]) -> Any:
    """The environment, with a map or layout named by a string as the baselines name them."""
    jaxmarl = _import_jaxmarl()
    if name in SMAX_NAMES:
        from jaxmarl.environments.smax import HeuristicEnemySMAX, map_name_to_scenario
        scenario = kwargs.pop("scenario", "3m")
        if isinstance(scenario, str):
            try:
                scenario = map_name_to_scenario(scenario)
            except Exception:
                raise EnvError(f"jaxmarl:{name}: unknown scenario {scenario!r}; e.g. 3m, 2s3z, "
                               f"3s5z, 5m_vs_6m (JaxMARL's SMAX maps)") from None
        return HeuristicEnemySMAX(scenario=scenario, **kwargs)
    if name not in jaxmarl.registered_envs:
        raise unknown_env("JaxMARL", name, [n for n in jaxmarl.registered_envs
                                            if n not in MABRAX], "jaxmarl:")
    if name == "overcooked" and isinstance(kwargs.get("layout"), str):
        from jaxmarl.environments.overcooked import overcooked_layouts
        layout = kwargs["layout"]
        if layout not in overcooked_layouts:
            raise EnvError(f"jaxmarl:overcooked: unknown layout {layout!r}; one of: "
                           f"{', '.join(sorted(overcooked_layouts))}")
        kwargs["layout"] = overcooked_layouts[layout]
    return jaxmarl.make(name, **kwargs)


def _space(space: Any) -> tuple:
    """What must agree between agents: (kind, size, bounds)."""
    if hasattr(space, "n") and not hasattr(space, "nvec"):
        return ("discrete", int(space.n))
    shape = tuple(getattr(space, "shape", ()) or ())
    if len(shape) == 1 and jnp.issubdtype(getattr(space, "dtype", jnp.float32), jnp.floating):
        low = np.broadcast_to(np.asarray(space.low, np.float32), shape)
        high = np.broadcast_to(np.asarray(space.high, np.float32), shape)
        return ("box", shape[0], tuple(low.tolist()), tuple(high.tolist()))
    return ("unsupported", type(space).__name__, shape)


def _has_masks(env: Any) -> bool:
    state = jax.eval_shape(lambda k: env.reset(k)[1], jax.random.PRNGKey(0))
    try:
        jax.eval_shape(env.get_avail_actions, state)
    except NotImplementedError:
        return False
    return True


TEAMS = True   # make takes the run's team: section (envs.registry)


def make(name: str, episode_length: int | None = None, team: Any = None,
         **kwargs: Any) -> EnvSpec:
    full = f"jaxmarl:{name}"
    if name in MABRAX:   # Brax states, their own time limit and resets: not this adapter's
        raise EnvError(f"{full}: JaxMARL's MABrax environments ({', '.join(MABRAX)}) are not "
                       f"supported; its MPE, SMAX, Overcooked and other grid environments are")
    central = team is not None and team.critic == "central"
    agent_ids = team is not None and team.agent_ids
    if episode_length is not None:
        kwargs["max_steps"] = int(episode_length)
    env = _construct(name, dict(kwargs))
    agents = tuple(env.agents)
    obs_shapes = {a: tuple(env.observation_space(a).shape) for a in agents}
    actions = {a: _space(env.action_space(a)) for a in agents}
    for what, per_agent in (("observation", obs_shapes), ("action", actions)):
        kinds = sorted(set(per_agent.values()), key=str)
        if len(kinds) > 1:
            groups = "; ".join(f"{', '.join(a for a in agents if per_agent[a] == k)}: {k}"
                               for k in kinds)
            raise EnvError(f"{full}: its agents' {what} spaces differ ({groups}); jaxrl_dist "
                           f"trains teams whose agents share one {what} space")
    action = actions[agents[0]]
    if action[0] == "unsupported":
        raise EnvError(f"{full}: its action space ({action[1]} {action[2]}) is not one discrete "
                       f"choice or a flat continuous vector; the networks handle those")
    masked = action[0] == "discrete" and _has_masks(env)
    adapter = (SMAXAdapter if name in SMAX_NAMES else JaxMARLAdapter)(
        env, agents, masked, agent_ids, central)
    per_agent_obs = obs_shape(adapter)[1:]
    own = int(np.prod(obs_shapes[agents[0]])) + len(agents) * agent_ids
    limit = int(env.max_steps) + 1   # MPE ends at the step after max_steps
    common = dict(max_episode_steps=limit, num_agents=len(agents),
                  policy_features=own if central else None,
                  agent_networks=len(agents) * (team is not None and
                                                team.parameters == "per_agent"),
                  # SMAX's cond mixes device-varying and constant values (EnvSpec)
                  shard_map_safe=name not in SMAX_NAMES)
    if action[0] == "discrete":
        return EnvSpec(adapter, full, per_agent_obs, action[1], False, masked=masked, **common)
    return EnvSpec(adapter, full, per_agent_obs, action[1], True,
                   np.asarray(action[2], np.float32), np.asarray(action[3], np.float32),
                   **common)
