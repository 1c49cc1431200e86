"""Per-device sizes of a run, derived once the device count is known.

The config holds GLOBAL sizes only, so one file describes a run on a CPU or on a pod; this is
where they meet the mesh. A resumed run plans its remaining calls from these sizes and the
restored update count, so it may change ``updates_per_call``.
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxrl_dist.config import Config
from jaxrl_dist.errors import ConfigError


@dataclass(frozen=True)
class Sizes:
    """Sizes derived from the config and the device count (global unless named ``local_``)."""

    num_devices: int
    local_envs: int            # environments per device
    steps_per_env: int         # env steps of each environment per update (the algorithm's)
    batch_size: int            # env steps per update, global
    num_updates: int
    updates_per_call: int      # what one compiled call runs (see choose_updates_per_call)


def derive_sizes(config: Config, num_devices: int) -> Sizes:
    """Per-device sizes; errors name the key and the values that would work."""
    c = config
    if c.num_envs % num_devices:
        ok = [k * num_devices for k in range(1, 4)]
        raise ConfigError(f"num_envs ({c.num_envs}) must be divisible by the number of devices "
                          f"({num_devices}); e.g. num_envs={ok[0]}, {ok[1]} or {ok[2]}")
    if c.eval_episodes % num_devices:
        raise ConfigError(f"eval_episodes ({c.eval_episodes}) must be divisible by the number of "
                          f"devices ({num_devices}): the final evaluation spreads them evenly")
    steps = c.algorithm.steps_per_env(c.agent)
    batch = c.num_envs * steps
    num_updates = c.total_timesteps // batch
    return Sizes(
        num_devices=num_devices,
        local_envs=c.num_envs // num_devices,
        steps_per_env=steps,
        batch_size=batch,
        num_updates=num_updates,
        updates_per_call=(pbt_updates_per_call(c.pbt.interval_updates, c.updates_per_call)
                          if c.pbt.enabled else
                          choose_updates_per_call(num_updates, c.updates_per_call)),
    )


def pbt_updates_per_call(interval: int, wanted: int) -> int:
    """PBT's rounds run between compiled calls: the largest divisor of the round interval
    not above ``wanted``, so every round falls on a call's end."""
    return max(k for k in range(1, min(wanted, interval) + 1) if interval % k == 0)


def choose_updates_per_call(num_updates: int, wanted: int) -> int:
    """A divisor of ``num_updates`` near ``wanted``, so ONE compiled program runs the whole run
    (a remainder call costs a second compile of the update: 5 s of MPE's 15): the largest in
    [wanted/2, wanted], else the smallest in (wanted, 2 x wanted] (244 updates asked 50 a call
    run 61), else ``wanted``. A function of the whole run only, so a resumed run groups updates
    the same way."""
    wanted = min(wanted, num_updates)
    below = range(wanted, (wanted + 1) // 2 - 1, -1)
    above = range(wanted + 1, min(2 * wanted, num_updates) + 1)
    return next((k for k in (*below, *above) if num_updates % k == 0), wanted)


def calls(sizes: Sizes, updates_done: int = 0) -> list[int]:
    """Updates per compiled call for the rest of a run that has done ``updates_done``. Calls
    end on multiples of ``updates_per_call``: a run resumed off that grid (a checkpoint of
    another ``updates_per_call``) first runs up to it, so PBT's rounds, multiples of a
    ``updates_per_call`` that divides their interval, still each end a call."""
    k, remaining = sizes.updates_per_call, sizes.num_updates - updates_done
    first = min(-updates_done % k, remaining)
    remaining -= first
    return ([first] if first else []) + [k] * (remaining // k) + (
        [remaining % k] if remaining % k else [])
