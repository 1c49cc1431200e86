"""The global mesh and how global arrays are read back on a host.

All devices of all processes form one 1-D mesh along ``DATA_AXIS``. Devices are ordered by
(process, local id), so environment ``i`` lives on the same device position whether the mesh
spans one process or many.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

DATA_AXIS = "data"

REPLICATED = P()
SHARDED = P(DATA_AXIS)


def make_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    devices = list(jax.devices() if devices is None else devices)
    devices.sort(key=lambda d: (d.process_index, d.id))
    return Mesh(np.array(devices), (DATA_AXIS,))


def to_host(tree: Any) -> Any:
    """Numpy copy of a tree of REPLICATED global arrays, readable on every process.

    A replicated array is not fully addressable in a multi-process job, but each process holds
    a complete copy on its local devices: read that one.
    """
    return jax.device_get(jax.tree.map(lambda x: x.addressable_data(0), tree))
