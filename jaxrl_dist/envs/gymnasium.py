"""``gymnasium:<id>``: any registered Gymnasium environment (its classics, MuJoCo's v5 tasks, a
user's own registered by a ``JAXRL_DIST_PLUGINS`` module), or an environment given to the
Python API, as a host environment (:mod:`.host`): each process steps its share in a Gymnasium
vector env on its own CPUs.

``env_kwargs``: ``vectorization`` (``sync``, the default: every environment in the training
process, no copies between processes; ``async``: one subprocess per environment, started with
``forkserver`` because forking a process that runs JAX deadlocks; ``vector``: the id's own
batched implementation, its ``vector_entry_point``, stepping the whole batch in one call),
``step_timeout`` (seconds an async step may take, default 60), anything else goes to
``gymnasium.make``.
"""

from __future__ import annotations

import multiprocessing
from typing import Any, Callable

import numpy as np

from jaxrl_dist import plugins
from jaxrl_dist.envs.base import EnvSpec
from jaxrl_dist.envs.host import VectorEnvs, require_same_step
from jaxrl_dist.errors import EnvError, unknown_env

VECTORIZATION = ("sync", "async", "vector")
DEFAULT_STEP_TIMEOUT = 60.0
DEFAULT_MAX_STEPS = 1000   # evaluation's bound for an environment with no time limit


def _gym():
    import gymnasium
    return gymnasium


def _spaces(name: str, observation_space: Any, action_space: Any) -> dict[str, Any]:
    """The spec's fields from Gymnasium spaces; a space the networks cannot take is named."""
    spaces = _gym().spaces
    if not isinstance(observation_space, spaces.Box):
        raise EnvError(
            f"{name}: observation space {observation_space} is not supported (Box only: "
            f"vectors or images); flatten it with gymnasium.wrappers.FlattenObservation in a "
            f"JAXRL_DIST_PLUGINS module that registers the wrapped environment")
    image = observation_space.dtype == np.uint8
    fields = {"obs_shape": tuple(observation_space.shape),
              "obs_dtype": "uint8" if image else "float32"}
    if isinstance(action_space, spaces.Discrete):
        if int(action_space.start) != 0:
            raise EnvError(f"{name}: action space {action_space} starts at "
                           f"{action_space.start}; only Discrete(n) starting at 0 is supported")
        return {**fields, "action_dim": int(action_space.n), "continuous": False}
    if isinstance(action_space, spaces.Box) and len(action_space.shape) == 1 and \
            np.issubdtype(action_space.dtype, np.floating):
        low = np.asarray(action_space.low, np.float32)
        high = np.asarray(action_space.high, np.float32)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise EnvError(f"{name}: action space {action_space} has infinite bounds; "
                           f"continuous actions need finite low/high (the policy's output "
                           f"is clipped to them)")
        return {**fields, "action_dim": int(action_space.shape[0]), "continuous": True,
                "action_low": low, "action_high": high}
    raise EnvError(f"{name}: action space {action_space} is not supported (Discrete(n) or a "
                   f"1-D float Box)")


def _settings(name: str, kwargs: dict[str, Any]) -> tuple[str, float, dict[str, Any]]:
    kwargs = dict(kwargs)
    mode = kwargs.pop("vectorization", "sync")
    if mode not in VECTORIZATION:
        raise EnvError(f"{name}: env_kwargs.vectorization must be one of {VECTORIZATION}, "
                       f"got {mode!r}")
    timeout = kwargs.pop("step_timeout", DEFAULT_STEP_TIMEOUT)
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise EnvError(f"{name}: env_kwargs.step_timeout must be a number of seconds > 0")
    return mode, float(timeout), kwargs


def _probe(name: str, make_one: Callable[[], Any]) -> Any:
    """One environment, built to read its spaces and time limit, then closed."""
    try:
        env = make_one()
    except _gym().error.DependencyNotInstalled as e:
        extra = "mujoco" if "mujoco" in str(e).lower() else None
        hint = (f"pip install -e '.[{extra}]'" if extra else "install what it names")
        raise EnvError(f"gymnasium:{name} needs a package that is not installed: "
                       f"{str(e).splitlines()[0]} ({hint})") from None
    return env


def _vector_kwargs(mode: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"autoreset_mode": _gym().vector.AutoresetMode.SAME_STEP}
    if mode == "async":
        preload = plugins.names()   # a child process must know the user's registrations
        context = multiprocessing.get_context("forkserver")
        if preload:
            context.set_forkserver_preload(preload)
        kwargs["context"] = "forkserver"
    return kwargs


def make(name: str, episode_length: int | None = None, **kwargs: Any) -> EnvSpec:
    """``gymnasium:<name>``: a registered id (after importing ``JAXRL_DIST_PLUGINS``)."""
    gym = _gym()
    plugins.load()
    mode, timeout, make_kwargs = _settings(f"gymnasium:{name}", kwargs)
    if name not in gym.registry:
        raise unknown_env("gymnasium", name, gym.registry.keys(), prefix="gymnasium:")
    if episode_length is not None:
        make_kwargs["max_episode_steps"] = episode_length
    try:
        env = _probe(name, lambda: gym.make(name, **make_kwargs))
    except TypeError as e:
        raise EnvError(f"gymnasium:{name}: bad env_kwargs {sorted(make_kwargs)}: {e}") from None
    try:
        fields = _spaces(f"gymnasium:{name}", env.observation_space, env.action_space)
        limit = env.spec.max_episode_steps if env.spec is not None else None
    finally:
        env.close()

    def open_vector(num_envs: int, evaluation: bool) -> Any:
        if mode == "vector":   # the id's batched simulator, as it is (it must be SAME_STEP)
            return gym.make_vec(name, num_envs=num_envs,
                                vectorization_mode="vector_entry_point", **make_kwargs)
        return gym.make_vec(name, num_envs=num_envs, vectorization_mode=mode,
                            vector_kwargs=_vector_kwargs(mode), **make_kwargs)

    return _host_spec(f"gymnasium:{name}", fields, limit, timeout, open_vector)


def from_object(env: Any, episode_length: int | None = None,
                **kwargs: Any) -> EnvSpec:
    """An environment given to the Python API:

    * a ``gymnasium.Env`` subclass or a function returning a new ``gymnasium.Env``: each process
      makes its own copies in a sync (or ``vectorization: async``) vector env;
    * a ``gymnasium.vector.VectorEnv`` subclass taking ``num_envs`` (a batched simulator:
      numpy, torch, Isaac-style): built once for this process's training environments and once
      for its evaluation ones, stepped as it is, without a loop per environment;
    * a ``gymnasium.vector.VectorEnv`` instance holding exactly this process's training
      environments (evaluation uses copies of its first ``env_fns`` entry).

    Vector envs must declare SAME_STEP auto-reset in their metadata."""
    gym = _gym()
    mode, timeout, make_kwargs = _settings("environment object", kwargs)
    if make_kwargs:
        raise EnvError(f"env_kwargs {sorted(make_kwargs)} do not apply to an environment "
                       f"object; configure it before passing it")
    if isinstance(env, gym.vector.VectorEnv):
        name = _name(env)
        require_same_step(env, name)
        fields = _spaces(name, env.single_observation_space, env.single_action_space)

        def given(num_envs: int, evaluation: bool) -> Any:
            if evaluation:   # copies of its first environment, apart from training's
                fns = getattr(env, "env_fns", None)
                if not fns:
                    raise EnvError(f"{name}: evaluation needs environments apart from the "
                                   f"training ones and this vector env cannot make more (no "
                                   f"env_fns); pass an environment factory instead")
                return gym.vector.SyncVectorEnv([fns[0]] * num_envs, **_vector_kwargs("sync"))
            if num_envs != env.num_envs:
                raise EnvError(f"{name}: the vector env holds {env.num_envs} environments but "
                               f"this process steps {num_envs} (num_envs / processes); build "
                               f"it with {num_envs}")
            return env
        return _host_spec(name, fields, episode_length, timeout, given)
    if isinstance(env, type) and issubclass(env, gym.vector.VectorEnv):
        # a batched simulator's class: built with num_envs, for training and for evaluation
        probe = env(num_envs=1)
        name = _name(probe)
        try:
            fields = _spaces(name, probe.single_observation_space, probe.single_action_space)
            require_same_step(probe, name)
        finally:
            probe.close()
        return _host_spec(name, fields, episode_length, timeout,
                          lambda num_envs, evaluation: env(num_envs=num_envs))
    if not callable(env):
        raise EnvError(f"environment object {type(env).__name__} is not a gymnasium.Env "
                       f"class or factory, a gymnasium VectorEnv, or a gymnax environment")

    def make_one() -> Any:
        one = env()
        if episode_length is not None:
            one = gym.wrappers.TimeLimit(one, max_episode_steps=episode_length)
        return one

    probe = _probe(getattr(env, "__name__", "environment"), make_one)
    if not isinstance(probe, gym.Env):
        raise EnvError(f"{getattr(env, '__name__', env)!r} returned a "
                       f"{type(probe).__name__}, not a gymnasium.Env")
    name = _name(probe)
    try:
        fields = _spaces(name, probe.observation_space, probe.action_space)
        limit = episode_length or (probe.spec.max_episode_steps if probe.spec else None)
    finally:
        probe.close()

    def open_vector(num_envs: int, evaluation: bool) -> Any:
        cls = gym.vector.AsyncVectorEnv if mode == "async" else gym.vector.SyncVectorEnv
        return cls([make_one] * num_envs, **_vector_kwargs(mode))

    return _host_spec(name, fields, limit, timeout, open_vector)


def _host_spec(name: str, fields: dict[str, Any], limit: int | None, timeout: float,
               open_vector: Callable[[int, bool], Any]) -> EnvSpec:
    """The spec of a host environment whose vector envs ``open_vector(num_envs, evaluation)``
    builds; ``limit`` bounds evaluation episodes (the default when the env has none)."""
    obs_dtype, discrete = np.dtype(fields["obs_dtype"]), not fields["continuous"]

    def open_envs(num_envs: int, evaluation: bool) -> VectorEnvs:
        return VectorEnvs(open_vector(num_envs, evaluation), name, obs_dtype, timeout, discrete)

    return EnvSpec(adapter=None, autoreset="host", name=name, host=open_envs,
                   max_episode_steps=int(limit or DEFAULT_MAX_STEPS), **fields)


def _name(env: Any) -> str:
    spec = getattr(env, "spec", None)
    return getattr(spec, "id", None) or type(getattr(env, "unwrapped", env)).__name__


def is_gymnasium_object(env: Any) -> bool:
    """A Gymnasium env class, vector env, or a plain function (a factory): not gymnax's."""
    gym = _gym()
    if isinstance(env, gym.vector.VectorEnv):
        return True
    if isinstance(env, type):
        return issubclass(env, (gym.Env, gym.vector.VectorEnv))
    return callable(env) and not hasattr(env, "default_params")


__all__ = ["make", "from_object", "is_gymnasium_object"]
