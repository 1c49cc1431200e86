"""An update's metrics as ONE array: the fused update loop writes one vector per update, not
one per metric, so its scan stacks one array (one in-place write, not one per metric) and the
metrics' scalar arithmetic fuses into the one concatenate that builds it. Host code reads it as
the dict it was: :class:`Packed` is a read-only mapping by name, and a pytree whose only leaf is
the array, so ``jax.tree.map`` and ``device_get`` move it as one array."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator

import jax
import jax.numpy as jnp
import numpy as np

# each field: (name, dtype name, shape); an integer or boolean metric travels bit for bit as
# an int32/uint32 bitcast to float32, a float one as float32 (x64 is off: exact)
Field = tuple[str, str, tuple[int, ...]]


def pack(metrics: dict[str, Any]) -> Packed:
    """``metrics`` (one update's, inside a traced program) as one float32 vector."""
    parts, fields = [], []
    for name, value in metrics.items():
        value = jnp.asarray(value)
        fields.append((name, value.dtype.name, value.shape))
        parts.append(_to_f32(value).ravel())
    return Packed(jnp.concatenate(parts) if parts else jnp.zeros((0,), jnp.float32),
                  tuple(fields))


@jax.tree_util.register_pytree_node_class
class Packed(Mapping):
    """Metrics packed on the last axis of ``values`` (any leading axes: updates, members), read
    by name with those leading axes kept."""

    def __init__(self, values: Any, fields: tuple[Field, ...]):
        self.values, self.fields = values, fields

    def tree_flatten(self) -> tuple[tuple[Any], tuple[Field, ...]]:
        return (self.values,), self.fields

    @classmethod
    def tree_unflatten(cls, fields: tuple[Field, ...], children: Any) -> Packed:
        return cls(children[0], fields)

    def __getitem__(self, name: str) -> Any:
        start = 0
        for field, dtype, shape in self.fields:
            size = int(np.prod(shape, dtype=np.int64))
            if field == name:
                part = self.values[..., start:start + size]
                part = part.reshape(*part.shape[:-1], *shape)
                return _from_f32(part, np.dtype(dtype))
            start += size
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (name for name, _, _ in self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def __repr__(self) -> str:
        return f"Packed({dict(self)!r})"


def _to_f32(value: jax.Array) -> jax.Array:
    if jnp.issubdtype(value.dtype, jnp.floating):
        return value.astype(jnp.float32)
    wide = jnp.uint32 if jnp.issubdtype(value.dtype, jnp.unsignedinteger) else jnp.int32
    return jax.lax.bitcast_convert_type(value.astype(wide), jnp.float32)


def _from_f32(part: Any, dtype: np.dtype) -> Any:
    if np.issubdtype(dtype, np.floating):
        return part.astype(dtype)
    wide = np.uint32 if np.issubdtype(dtype, np.unsignedinteger) else np.int32
    if isinstance(part, np.ndarray):
        return part.view(wide).astype(dtype)
    return jax.lax.bitcast_convert_type(part, wide).astype(dtype)
