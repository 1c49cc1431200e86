"""``playground:<name>``: MuJoCo Playground with its pure-JAX physics (``impl='jax'``; the
package's default backend is MuJoCo Warp). dm_control-suite tasks (CartpoleBalance, ...) run
offline; locomotion and manipulation tasks download model assets when loaded."""

from __future__ import annotations

from typing import Any

from jaxrl_dist.envs.base import EnvError, EnvSpec
from jaxrl_dist.envs.brax import time_limited
from jaxrl_dist.errors import unknown_env


def make(name: str, episode_length: int | None = None, **overrides: Any) -> EnvSpec:
    """A Playground registry name; ``overrides`` are its config overrides (``impl`` defaults to
    ``'jax'``). The episode length defaults to the task's own config (1000 for the suite)."""
    from mujoco_playground import registry

    if name not in registry.ALL_ENVS:
        raise unknown_env("Playground", name, registry.ALL_ENVS, "playground:", listed=8)
    overrides = {"impl": "jax", **overrides}
    try:
        config = registry.get_default_config(name)
        env = registry.load(name, config_overrides=overrides)
    except (OSError, ConnectionError, ValueError, KeyError, AttributeError) as e:
        raise EnvError(f"playground:{name} could not be loaded ({type(e).__name__}: "
                       f"{str(e).splitlines()[0][:160] if str(e) else ''}); locomotion and "
                       f"manipulation tasks download model assets at load time and need a "
                       f"network; dm_control-suite tasks run offline") from None
    if episode_length is None:
        episode_length = int(getattr(config, "episode_length", 1000))
    return time_limited(env, f"playground:{name}", episode_length, int(env.action_size))
