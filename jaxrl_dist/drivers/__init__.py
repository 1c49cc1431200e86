"""How a run's updates reach its environments: one driver per kind, one learner for all.

* :mod:`.fused`: the whole update (rollout and ``learn``) is ONE compiled program; the
  environments step inside it (JAX suites) or through XLA calls (pools).
* :mod:`.host`: the environments step on every process's CPUs outside JAX (Gymnasium, MuJoCo, a
  user's simulator); the host actors' batches become global arrays for the learner's ``learn``
  on the mesh.

Both give the trainer the same things (:class:`.base.Driver`): compiled calls of ``n`` updates,
an evaluation, a start-line description, when a metrics row's interval ends and ``close``. The
trainer drives one without asking which; a learner never asks where its environment runs.
:func:`make` is the one place that does.
"""

from __future__ import annotations

from typing import Any, Sequence

from jaxrl_dist.config import Config, ConfigError
from jaxrl_dist.drivers.base import Driver, Ready
from jaxrl_dist.envs import EnvSpec


def make(config: Config, spec: EnvSpec, devices: Sequence[Any] | None) -> Driver:
    """The driver for ``spec``'s kind, with the devices its learner's mesh spans (``devices``,
    or all, less an overlapped actor's own device)."""
    if spec.on_host:
        if config.overlap_actors and config.pbt.enabled:
            raise ConfigError("overlap_actors with pbt: a round's copies would learn from a "
                              "batch their old parameters acted on; remove one of them")
        from jaxrl_dist.drivers.host import HostDriver
        return HostDriver(spec, config.overlap_actors, devices)
    if config.overlap_actors:
        raise ConfigError(f"overlap_actors applies to host environments (gymnasium:), not to "
                          f"{spec.name}, which is stepped inside the program")
    from jaxrl_dist.drivers.fused import FusedDriver
    return FusedDriver(spec, devices)


__all__ = ["Driver", "Ready", "make"]
