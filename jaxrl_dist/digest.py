"""A checkpoint's digest: one 32-bit checksum per array, computed where the arrays are.

Each element's bits (as uint32 words) are added to its position in the GLOBAL array times an
odd constant, scrambled by MurmurHash3's finaliser (a bijection of 32-bit words) and summed
modulo 2**32. An integer sum is exact in any order, so the value does not depend on how the
array is sharded: XLA sums each device's shard and all-reduces one word per array, and a
checkpoint saved on one mesh verifies when restored on another. Only those words come back to
the host, never a second copy of a large buffer. Because the finaliser is a bijection, a change
to any ONE element always changes the sum; other damage escapes with probability 2**-32.

Hashed one by one, XLA compiles one small kernel per array (about 30-70 ms each on a 2-core VM,
whatever the array's size): small unsharded arrays (parameters, optimiser moments) are hashed
together instead (SAC on Pendulum's 75 arrays: 0.78 -> 0.44 s on one core), and
:func:`prepare` compiles the program from the state's shapes while the run's own programs
compile, so the first save does not wait for it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from concurrent.futures import Future
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

ALGORITHM = "fmix32-sum-v1"   # recorded with the digests: a later change is not a mismatch
_GOLDEN = 0x9E3779B9          # odd: position -> a distinct offset modulo 2**32


def _words(x: jax.Array) -> jax.Array:
    """The bits of ``x`` as uint32 words: ``x.shape`` (8-byte types: ``+ (2,)``)."""
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint32)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        x = jnp.stack([x.real, x.imag], axis=-1)
    size = x.dtype.itemsize
    if size >= 4:
        return lax.bitcast_convert_type(x, jnp.uint32)
    narrow = {1: jnp.uint8, 2: jnp.uint16}[size]
    return lax.bitcast_convert_type(x, narrow).astype(jnp.uint32)


def _position(shape: tuple[int, ...], full: tuple[int, ...] | None = None,
              axis: int | None = None, start: Any = 0) -> jax.Array:
    """Each element's row-major index in the global array of shape ``full`` (mod 2**32), for
    the slab of ``shape`` starting at ``start`` along ``axis`` (the whole array by default),
    built from iotas so a sharded array stays sharded (a reshape to one dimension would
    gather it)."""
    full = shape if full is None else full
    index = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for a in reversed(range(len(full))):
        iota = lax.broadcasted_iota(jnp.uint32, shape, a)
        if a == axis:
            iota = iota + jnp.asarray(start, jnp.uint32)
        index = index + iota * jnp.uint32(stride % 2**32)
        stride *= full[a]
    return index


def _fmix32(h: jax.Array) -> jax.Array:
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


# Elements hashed at a time in a large array: XLA:CPU materialises the uint32 words and their
# positions (~8 bytes per element), so a 5.6 GB uint8 replay hashed whole took 4x its size.
_CHUNK = 1 << 22


def _checksum(x: jax.Array, axis: int | None) -> jax.Array:
    """The array's checksum; with ``axis``, hashed a slab of that (unsharded) axis at a time,
    the same sum in a bounded memory."""
    full = jax.eval_shape(_words, x).shape
    if axis is None:
        words = _words(x)
        return jnp.sum(_fmix32(words + _position(full) * jnp.uint32(_GOLDEN)), dtype=jnp.uint32)
    n = x.shape[axis]
    rows = max(1, _CHUNK * n // max(1, int(np.prod(full))))
    steps, rest = divmod(n, rows)

    def slab(start, size):
        words = _words(lax.dynamic_slice_in_dim(x, start, size, axis))
        position = _position(words.shape, full, axis, start)
        return jnp.sum(_fmix32(words + position * jnp.uint32(_GOLDEN)), dtype=jnp.uint32)
    total = lax.fori_loop(0, steps, lambda i, acc: acc + slab(i * rows, rows), jnp.uint32(0))
    return total + slab(steps * rows, rest) if rest else total


def _slab_axis(x: Any) -> int | None:
    """The largest axis a big array is not sharded along (None: small, or none)."""
    if int(np.prod(x.shape)) <= _CHUNK:
        return None
    spec = getattr(getattr(x, "sharding", None), "spec", ())
    sharded = {i for i, part in enumerate(spec) if part is not None}
    free = [i for i, n in enumerate(x.shape) if i not in sharded and n > 1]
    return max(free, key=lambda i: x.shape[i]) if free else None


def _packable(x: Any) -> bool:
    """A small array every device holds whole: hashed together with the others like it."""
    sharding = getattr(x, "sharding", None)
    return (int(np.prod(x.shape)) <= _CHUNK
            and (sharding is None or sharding.is_fully_replicated))


_BLOCK = 512   # elements per row of the packed arrays


def _packed(leaves: list[jax.Array]) -> jax.Array:
    """The checksums of small unsharded arrays, the same words as :func:`_checksum`'s: each
    array's words flattened (row-major: an element's position is its flat index) and padded
    to whole rows of ``_BLOCK``, all rows stacked, each element's position found from its
    row's first element's, the padding masked out, and the scrambled words summed per row, then
    per array (small per-row constants say which): far fewer kernels than one per array."""
    rows, first, valid, owner = [], [], [], []
    for i, x in enumerate(leaves):
        words = _words(x).reshape(-1)
        n = words.shape[0]
        count = -(-n // _BLOCK)
        rows.append(jnp.pad(words, (0, count * _BLOCK - n)))
        first += [r * _BLOCK for r in range(count)]
        valid += [min(_BLOCK, n - r * _BLOCK) for r in range(count)]
        owner += [i] * count
    if not owner:
        return jnp.zeros(len(leaves), jnp.uint32)
    words = jnp.concatenate(rows).reshape(-1, _BLOCK)
    column = lax.broadcasted_iota(jnp.uint32, words.shape, 1)
    position = jnp.asarray(np.asarray(first, np.uint32))[:, None] + column
    hashed = _fmix32(words + position * jnp.uint32(_GOLDEN))
    hashed = jnp.where(column < jnp.asarray(np.asarray(valid, np.uint32))[:, None], hashed, 0)
    return jax.ops.segment_sum(jnp.sum(hashed, axis=1, dtype=jnp.uint32),
                               np.asarray(owner, np.int32), num_segments=len(leaves),
                               indices_are_sorted=True)


def _sums(leaves: list[jax.Array], axes: tuple[int | None, ...],
          packed: tuple[bool, ...]) -> jax.Array:
    """One checksum per array, stacked: [len(leaves)] uint32 (the ``packed`` ones hashed
    together by :func:`_packed`, in groups of at most ``_CHUNK`` elements)."""
    groups, size = [], 0   # at most _CHUNK elements a group: a bounded copy of them
    for i in (i for i, p in enumerate(packed) if p):
        n = int(np.prod(leaves[i].shape))
        if not groups or size + n > _CHUNK:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += n
    where = {}
    for group in groups:
        sums = _packed([leaves[i] for i in group])
        where.update({i: sums[k] for k, i in enumerate(group)})
    return jnp.stack([where[i] if i in where else _checksum(x, axis)
                      for i, (x, axis) in enumerate(zip(leaves, axes))])


_compiled: dict[tuple, Future] = {}   # signature of the arrays -> compiled checksum
_lock = threading.Lock()


def _signature(leaves: list[Any], placement: Any) -> tuple:
    return placement, tuple((x.shape, x.dtype, x.weak_type, x.sharding) for x in leaves)


def _program(leaves: list[Any], placement: Any):
    """The checksum compiled for ``leaves`` (arrays or ShapeDtypeStructs with shardings), its
    result replicated on their mesh (every process holds the same words) or on their one
    device; compiled once per signature, by whichever thread asks first."""
    key = _signature(leaves, placement)
    with _lock:
        pending, mine = _compiled.get(key), False
        if pending is None:
            pending = _compiled[key] = Future()
            mine = True
    if mine:
        try:
            axes = tuple(_slab_axis(x) for x in leaves)
            packed = tuple(_packable(x) for x in leaves)
            pending.set_result(jax.jit(_sums, static_argnames=("axes", "packed"),
                                       out_shardings=placement)
                               .lower(leaves, axes=axes, packed=packed).compile())
        except BaseException as e:
            with _lock:
                del _compiled[key]
            pending.set_exception(e)
    return pending.result()


@functools.lru_cache(maxsize=64)
def _names(treedef: Any, paths: tuple) -> tuple[str, ...]:
    return tuple(_name(path) for path in paths)


def _name(path: tuple) -> str:
    """``train/params/dense/kernel``: one spelling for NamedTuple fields, dict keys and
    sequence indices, whichever container a restore hands back."""
    parts = []
    for key in path:
        for attr in ("key", "name", "idx"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
        else:
            parts.append(str(key))
    return "/".join(parts)


@functools.lru_cache(maxsize=64)
def _placement(sharding: Any) -> Any:
    if isinstance(sharding, jax.sharding.NamedSharding):
        return jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
    return None


def digests(items: dict[str, Any]) -> dict[str, dict[str, str]]:
    """``{item: {array path: 8 hex digits}}`` for trees of arrays (None leaves: nothing
    saved). A collective where the arrays span processes: every process calls it, and every
    process gets the same words. One program per mesh the arrays live on (normally one)."""
    named, groups = _grouped(items)
    words = [0] * len(named)
    pending = []
    for (_, placement), indices in groups.items():
        leaves = [named[i][2] for i in indices]
        pending.append((indices, _program(leaves, placement)(leaves)))
    for indices, sums in pending:   # every program dispatched before the host waits
        for i, value in zip(indices, np.asarray(sums)):
            words[i] = int(value)
    out: dict[str, dict[str, str]] = {item: {} for item in items}
    for (item, path, _), value in zip(named, words):
        out[item][path] = f"{value:08x}"
    return out


def _grouped(items: dict[str, Any]) -> tuple[list[tuple[str, str, Any]], dict]:
    """Every leaf as (item, path, array) and the leaves' indices by (item, placement): one
    program per item (so the state's program can be compiled before the policy's shapes are
    known) and per mesh."""
    named = []
    for item, tree in items.items():
        with_paths, treedef = jax.tree_util.tree_flatten_with_path(tree)
        names = _names(treedef, tuple(path for path, _ in with_paths))
        for name, (_, leaf) in zip(names, with_paths):
            if not isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct)):
                leaf = jnp.asarray(leaf)
            named.append((item, name, leaf))
    groups: dict[tuple, list[int]] = {}
    for i, (item, _, leaf) in enumerate(named):
        groups.setdefault((item, _placement(leaf.sharding)), []).append(i)
    return named, groups


def prepare(items: Callable[[], dict[str, Any]]) -> threading.Thread:
    """Compile, on a thread, the checksums of the trees of ShapeDtypeStructs (with shardings)
    that ``items()`` returns, for :func:`digests` of arrays of those shapes later. A failure
    here only means that call compiles (and reports) it itself."""
    def compile_all() -> None:
        try:
            named, groups = _grouped(items())
            for (_, placement), indices in groups.items():
                _program([named[i][2] for i in indices], placement)
        except Exception:   # noqa: BLE001 - see the docstring
            pass

    thread = threading.Thread(target=compile_all, name="digest-compile", daemon=True)
    thread.start()
    return thread


def meta_digest(meta: dict[str, Any]) -> str:
    """A digest of the JSON record itself (its ``digest`` entry aside)."""
    text = json.dumps({k: v for k, v in meta.items() if k != "digest"}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def mismatches(saved: dict[str, str], restored: dict[str, str]) -> list[str]:
    """The array paths whose digest differs, or that only one side has."""
    return sorted(path for path in set(saved) | set(restored)
                  if saved.get(path) != restored.get(path))
