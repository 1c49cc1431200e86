"""Checks that every process runs the same job and every copy of a member's parameters is the
same, and the fingerprints that let a person compare runs. Each says what layout it expects:
``params`` is laid out as ``Layout.train`` (replicated, or one slice per member)."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import jax
import numpy as np

import jaxrl_dist
from jaxrl_dist import config as config_lib
from jaxrl_dist import distributed
from jaxrl_dist.config import Config
from jaxrl_dist.errors import RunError
from jaxrl_dist.sharding import Layout


def param_stats(host_params: Any) -> tuple[float, str]:
    """(L2 norm in float64, sha256 of every leaf's bytes) of ONE member's host parameters."""
    leaves = [np.asarray(x) for x in jax.tree.leaves(host_params)]
    norm = float(np.sqrt(sum(np.sum(np.square(x.astype(np.float64))) for x in leaves)))
    digest = hashlib.sha256()
    for leaf in leaves:
        digest.update(np.ascontiguousarray(leaf).tobytes())
    return norm, digest.hexdigest()


def member_stats(params: Any, layout: Layout) -> list[tuple[float, str]]:
    """:func:`param_stats` of every member (one entry for a single run); a collective."""
    host = layout.to_host(params)
    if not layout.members:
        return [param_stats(host)]
    return [param_stats(jax.tree.map(lambda x, i=i: x[i], host)) for i in range(layout.members)]


def _digest_int(data: bytes | str) -> int:
    data = data.encode() if isinstance(data, str) else data
    return int(hashlib.sha256(data).hexdigest()[:7], 16)


def _allgather_compare(values: list[int], names: list[str], what: str) -> None:
    """Stop every process if any differs from another in one of ``values`` (-1 = not held)."""
    everyone = distributed.allgather(np.array(values, np.int32))
    for column, name in enumerate(names):
        held = [r for r in range(len(everyone)) if everyone[r, column] != -1]
        differ = [r for r in held if everyone[r, column] != everyone[held[0], column]]
        if differ:
            raise RunError(f"processes disagree on the {name}: rank(s) {differ} differ from "
                           f"rank {held[0]}; {what}")


# Test hook: "RANK:KIND" makes process RANK report devices of KIND (a CPU machine has one kind).
FAKE_KIND_VAR = "JAXRL_FAKE_DEVICE_KIND"


def local_device_kind() -> str:
    """This process's device kind ("cpu", "NVIDIA H100 80GB HBM3", "TPU v5 lite", ...)."""
    kinds = sorted({d.device_kind for d in jax.local_devices()})
    rank, _, fake = os.environ.get(FAKE_KIND_VAR, "").partition(":")
    if fake and rank == str(distributed.process_index()):
        kinds = [fake]
    if len(kinds) > 1:
        raise RunError(f"process {distributed.process_index()} sees devices of different "
                       f"kinds ({', '.join(kinds)}); XLA runs one program on one kind: make it "
                       f"see one kind (CUDA_VISIBLE_DEVICES)")
    return kinds[0]


def _exchange_and_group(name: str, value: str) -> tuple[str, str | None]:
    """Every process's ``value`` through the coordination service (no device program runs):
    (rank 0's value, None if every process agrees, else "rank(s) 0, 2: A; rank(s) 1: B")."""
    values = distributed.exchange_text(name, value)
    groups: dict[str, list[int]] = {}
    for rank, v in enumerate(values):
        groups.setdefault(v, []).append(rank)
    if len(groups) == 1:
        return values[0], None
    return values[0], "; ".join(f"rank(s) {', '.join(map(str, ranks))}: {v or 'unknown'}"
                                for v, ranks in groups.items())


def check_device_kinds() -> str:
    """Every process must have the same kind of device (XLA compiles one program for the
    job; different GPU models cannot share it). Compared through the coordination service,
    before any collective runs on the devices. Returns the kind."""
    kind, described = _exchange_and_group("device_kind", local_device_kind())
    if described:
        raise RunError(f"processes have different device kinds ({described}); one program "
                       f"cannot span different accelerators: run each kind as its own job")
    return kind


# The SIMD extensions that change floating-point results: XLA:CPU's kernels, numpy's and a
# simulator's (MuJoCo) take other code paths with and without them (AVX-512 above all).
VECTOR_EXTENSIONS = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq",
                     "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile", "asimd",
                     "sve", "sve2")
FAKE_CPU_VAR = "JAXRL_FAKE_CPU_FLAGS"   # test hook: "RANK:flag flag ..."


def local_vector_extensions() -> str:
    """This machine's SIMD extensions among :data:`VECTOR_EXTENSIONS` ("" if unknown)."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    rank, _, fake = os.environ.get(FAKE_CPU_VAR, "").partition(":")
    if fake and rank == str(distributed.process_index()):
        flags = set(fake.split())
    return " ".join(x for x in VECTOR_EXTENSIONS if x in flags)


def check_vector_extensions() -> None:
    """Every process's CPU must have the same vector extensions when CPUs compute what must
    agree across processes (CPU devices, or environments stepped on the host): the same
    program gives other bits with and without AVX-512, so processes would drift apart."""
    if distributed.process_count() == 1:
        return
    _, described = _exchange_and_group("vector_extensions", local_vector_extensions())
    if described:
        raise RunError(f"processes run on CPUs with different vector extensions ({described}); "
                       f"their results would differ in the last bits and drift apart: run the "
                       f"job on one CPU kind")


def check_processes_agree(config: Config) -> None:
    """Config, package and JAX versions must match on every process (a collective)."""
    if distributed.process_count() == 1:
        return
    import yaml

    config_digest = _digest_int(yaml.safe_dump(config_lib.to_dict(config)))
    _allgather_compare(
        [config_digest, _digest_int(jaxrl_dist.__version__), _digest_int(jax.__version__)],
        ["config", "jaxrl_dist version", "jax version"],
        "start every process with the same config and install")


def check_replicas(params: Any, layout: Layout) -> None:
    """Every copy of a member's parameters, on every device of every process, must be
    bit-identical (a collective). Copies are shards with the same index."""
    members = layout.members or 1
    digests = [hashlib.sha256() for _ in range(members)]
    held: set[int] = set()
    for leaf in jax.tree.leaves(params):
        copies: dict[tuple, np.ndarray] = {}
        for shard in leaf.addressable_shards:
            index = tuple((s.start, s.stop) for s in shard.index)
            data = np.asarray(shard.data)
            if index in copies and not np.array_equal(copies[index], data):
                raise RunError(f"parameter replicas differ between the local devices of process "
                               f"{distributed.process_index()}")
            copies.setdefault(index, data)
        # a 0-d leaf (SAC's log alpha) has the empty index ()
        for index, data in sorted(copies.items(), key=lambda kv: (kv[0] or ((0, 0),))[0][0] or 0):
            if not layout.members:
                digests[0].update(data.tobytes())
                held.add(0)
                continue
            start = index[0][0] or 0
            for j in range(data.shape[0]):
                digests[start + j].update(data[j].tobytes())
                held.add(start + j)
    if distributed.process_count() > 1:
        local = [_digest_int(d.digest()) if m in held else -1 for m, d in enumerate(digests)]
        names = [f"parameter fingerprint of member {m}" if layout.members else
                 "parameter fingerprint" for m in range(members)]
        _allgather_compare(local, names,
                           "replicas have diverged (non-deterministic ops or a bad device)")
