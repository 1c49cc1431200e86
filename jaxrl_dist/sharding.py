"""The global mesh, where each part of the state lives on it, and how a host reads it back.

A single run uses a 1-D mesh along ``DATA_AXIS``: parameters replicated, environments sharded.
A population adds a ``MEMBER_AXIS`` in front: every array of the state gets a leading member
dimension sharded over it, and a member's environments are further split over ``DATA_AXIS``.
Collectives name ``DATA_AXIS`` only, so they never mix members. Devices are ordered by
(process, local id), so environment ``i`` of member ``m`` lives on the same device position
whether the mesh spans one process or many.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jaxrl_dist.errors import ConfigError

DATA_AXIS = "data"
MEMBER_AXIS = "member"
# ``replicate_learn``: every device holds the whole batch (a data axis of size 1 under it)
REPLICA_AXIS = "replica"
# The vmap axis over the members held by one device (inside the mesh's member shard).
LOCAL_MEMBER_AXIS = "local_members"

REPLICATED = P()
SHARDED = P(DATA_AXIS)


def _sorted(devices: Sequence[jax.Device] | None) -> list[jax.Device]:
    return sorted(jax.devices() if devices is None else devices,
                  key=lambda d: (d.process_index, d.id))


def make_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """The 1-D data mesh of a single run."""
    return Mesh(np.array(_sorted(devices)), (DATA_AXIS,))


@dataclass(frozen=True)
class Layout:
    """The mesh plus the partition specs of each kind of array; ``members`` is None for a
    single run (no member dimension anywhere)."""

    mesh: Mesh
    members: int | None = None

    @property
    def data_axis(self) -> str:
        """The mesh axis environments and batches are split over; collectives name it."""
        return DATA_AXIS

    @property
    def member_vmap_axis(self) -> str:
        """The vmap axis over the members one device holds (a population's programs)."""
        return LOCAL_MEMBER_AXIS

    @property
    def data_size(self) -> int:
        return self.mesh.shape[DATA_AXIS]

    @property
    def member_size(self) -> int:
        return self.mesh.shape.get(MEMBER_AXIS, 1)

    @property
    def axes(self) -> tuple[str, ...]:
        """The mesh axes a per-device value varies over (never the replica axis: every
        replica computes the same values)."""
        return tuple(a for a in self.mesh.axis_names if a != REPLICA_AXIS)

    @property
    def train(self) -> P:
        """Parameters, optimizer state, statistics: one copy per member."""
        return P(MEMBER_AXIS) if self.members else REPLICATED

    @property
    def envs(self) -> P:
        """Per-environment state and learner data: split along the data axis."""
        return P(MEMBER_AXIS, DATA_AXIS) if self.members else SHARDED

    def sharding(self, spec: P) -> NamedSharding:
        return NamedSharding(self.mesh, spec)

    def put(self, tree: Any, spec: P) -> Any:
        """Global arrays from host arrays that every process holds in full."""
        sharding = self.sharding(spec)
        return jax.tree.map(lambda x: jax.make_array_from_callback(
            np.shape(x), sharding, lambda index, x=x: np.asarray(x)[index]), tree)

    def to_host(self, tree: Any) -> Any:
        """Numpy copy of a tree laid out as ``train`` (replicated, or member-sharded: then
        gathered from every process), identical on every process."""
        if not self.members:
            return jax.device_get(jax.tree.map(lambda x: x.addressable_data(0), tree))
        if jax.process_count() == 1:
            return jax.device_get(tree)
        return jax.tree.map(np.asarray, multihost_utils.process_allgather(tree, tiled=True))

    def describe(self) -> str:
        if not self.members:
            return f"{self.data_size} device(s)"
        return (f"{self.members} members on {self.member_size} x {self.data_size} devices "
                f"(member x data)")


def make_layout(devices: Sequence[jax.Device] | None = None, members: int | None = None,
                member_devices: int | None = None) -> Layout:
    """A single run's layout (``members`` None), or a population's. By default the member axis
    takes as many devices as divide the member count: members never communicate, so that
    layout needs no collectives between devices at all."""
    devices = _sorted(devices)
    if not members:
        return Layout(Mesh(np.array(devices), (DATA_AXIS,)))
    n = len(devices)
    m = member_devices or math.gcd(n, members)
    if n % m or members % m:
        raise ConfigError(f"population.member_devices ({m}) must divide both the number of "
                          f"devices ({n}) and of members ({members}); e.g. "
                          f"{math.gcd(n, members)}")
    return Layout(Mesh(np.array(devices).reshape(m, n // m), (MEMBER_AXIS, DATA_AXIS)), members)


def replicated_layout(layout: Layout) -> Layout:
    """``layout``'s devices with the batch NOT split (``replicate_learn``): a data axis of size
    1 under a replica axis that no collective names, so every device runs the one-device
    program on the whole batch and the data axis's all-reduces are no-ops."""
    devices = layout.mesh.devices.reshape(-1, 1)
    return Layout(Mesh(devices, (REPLICA_AXIS, DATA_AXIS)))


def to_host(tree: Any) -> Any:
    """Numpy copy of a tree of REPLICATED global arrays, readable on every process.

    A replicated array is not fully addressable in a multi-process job, but each process holds
    a complete copy on its local devices: read that one.
    """
    return jax.device_get(jax.tree.map(lambda x: x.addressable_data(0), tree))
