"""``suite:name`` -> an :class:`EnvSpec`. Unprefixed names are gymnax, so existing configs keep
working; each other suite is an optional extra, imported only when a config names it."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from typing import Any, Iterator

import jax

from jaxrl_dist.envs.base import EnvError, EnvSpec
from jaxrl_dist.errors import nearest

# suite -> (adapter module, the library's import name, the pip extra that installs it)
SUITES: dict[str, tuple[str, str, str]] = {
    "gymnax": ("jaxrl_dist.envs.gymnax", "gymnax", ""),
    "brax": ("jaxrl_dist.envs.brax", "brax", "brax"),
    "playground": ("jaxrl_dist.envs.playground", "mujoco_playground", "playground"),
    "jumanji": ("jaxrl_dist.envs.jumanji", "jumanji", "jumanji"),
    "xminigrid": ("jaxrl_dist.envs.xminigrid", "xminigrid", "xminigrid"),
    "craftax": ("jaxrl_dist.envs.craftax", "craftax", "craftax"),
    "ale": ("jaxrl_dist.envs.ale", "ale_py", "ale"),
    "gymnasium": ("jaxrl_dist.envs.gymnasium", "gymnasium", "gymnasium"),
    "jaxmarl": ("jaxrl_dist.envs.jaxmarl", "jaxmarl", "jaxmarl"),
    "pettingzoo": ("jaxrl_dist.envs.pettingzoo", "pettingzoo", "pettingzoo"),
}


def parse(env_id: str) -> tuple[str, str]:
    """``"brax:ant"`` -> ``("brax", "ant")``; ``"CartPole-v1"`` -> ``("gymnax", ...)``."""
    suite, sep, name = env_id.partition(":")
    if not sep:
        return "gymnax", env_id
    if suite not in SUITES:
        close = nearest(suite, SUITES, 1)
        hint = f"did you mean {close[0]}:{name}? " if close else ""
        raise EnvError(f"unknown environment suite {suite!r} in {env_id!r}; {hint}known suites: "
                       f"{', '.join(SUITES)} (an unprefixed name is a gymnax id)")
    if not name:
        raise EnvError(f"{env_id!r} names no environment: write {suite}:<name>")
    return suite, name


def available(suite: str) -> bool:
    """Whether the suite's library is installed (without importing it)."""
    return importlib.util.find_spec(SUITES[suite][1]) is not None


def require(suite: str) -> None:
    """A one-line error naming the extra to install when a suite's library is missing."""
    _, library, extra = SUITES[suite]
    if not available(suite):
        raise EnvError(f"{suite} environments need the '{library}' package: "
                       f"pip install -e '.[{extra}]' (or '.[envs]' for every suite)")


def make_env(env: Any, env_params: Any = None, *, episode_length: int | None = None,
             env_kwargs: dict[str, Any] | None = None, team: Any = None) -> EnvSpec:
    """An :class:`EnvSpec` from ``suite:name``, a gymnax id, or a gymnax-style object.

    Args:
      episode_length: the time limit: for suites without one of their own (Brax, Playground)
        and in place of gymnax's, Craftax's and XLand-MiniGrid's; None = the suite's default.
        Jumanji and ale: refuse it (their limits are their own settings).
      env_kwargs: passed to the suite's constructor (e.g. ``backend`` for Brax).
      team: a run config's ``team:`` section (``config.TeamConfig``), for the suites of
        several agents (their ``make`` takes it: ``TEAMS``); None = its defaults.
    """
    kwargs = dict(env_kwargs or {})
    if not isinstance(env, str):
        from jaxrl_dist.envs import gymnasium
        if gymnasium.is_gymnasium_object(env):
            return gymnasium.from_object(env, episode_length, **kwargs)
        from jaxrl_dist.envs import gymnax
        return gymnax.from_object(env, env_params)
    suite, name = parse(env)
    require(suite)
    module = importlib.import_module(SUITES[suite][0])
    if suite == "gymnax":
        return module.make(name, env_params, episode_length=episode_length, **kwargs)
    if getattr(module, "TEAMS", False):
        kwargs["team"] = team
    try:
        with _process_local_devices():
            spec = module.make(name, episode_length=episode_length, **kwargs)
    except TypeError as e:   # a constructor argument the library does not take
        raise EnvError(f"{env}: bad env_kwargs {sorted(k for k in kwargs if k != 'team')}: "
                       f"{e}") from None
    return spec


@contextlib.contextmanager
def _process_local_devices() -> Iterator[None]:
    """While an environment is built, ``jax.devices()`` answers this process's own devices.

    ``mujoco.mjx.put_model`` (behind Brax's MJCF loader and every Playground env) puts the model
    on ``jax.devices()[0]``, which in a multi-process job is process 0's device: every other
    process would hold model arrays it cannot read, and its programs could not be compiled."""
    if jax.process_count() == 1:
        yield
        return
    devices = jax.devices
    jax.devices = lambda backend=None: jax.local_devices(backend=backend)
    try:
        yield
    finally:
        jax.devices = devices


def from_config(config: Any, env: Any = None, env_params: Any = None) -> EnvSpec:
    """The run's environment: ``config.env`` (with its ``episode_length``, ``env_kwargs`` and
    ``team:`` section), or ``env`` (a name or a gymnax-style object) given to the API in its
    place."""
    team = config.team
    spec = make_env(config.env if env is None else env, env_params,
                    episode_length=config.episode_length, env_kwargs=config.env_kwargs,
                    team=team)
    if spec.num_agents == 1 and team != type(team)():
        raise EnvError(f"the team: section applies to environments of several agents "
                       f"(jaxmarl:, pettingzoo:), and {spec.name} has one: remove it")
    return spec
