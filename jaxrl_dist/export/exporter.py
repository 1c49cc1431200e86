"""A run directory's policy -> ``policy.onnx`` (and ``policy.stablehlo``), written only once
both act exactly as :func:`jaxrl_dist.policy.load` does on the same observations."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import jaxrl_dist
from jaxrl_dist import policy as policy_lib
from jaxrl_dist.checkpoint import read_checkpoint
from jaxrl_dist.export import graph, parity
from jaxrl_dist.export.graph import ExportError

DEFAULT_OPSET = 17


@dataclass(frozen=True)
class Exported:
    onnx_path: Path
    stablehlo_path: Path
    max_diff: float          # largest |action difference| seen by the parity checks
    observations: str        # what they ran on: "sampled", or "sampled and real"
    opset: int


def config_hash(config: dict[str, Any]) -> str:
    """The run's config, canonical JSON, sha256 (first 16 hex digits): which run this is."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def metadata(policy: policy_lib.Policy, meta: dict[str, Any], member: int | None
             ) -> dict[str, str]:
    """What the ONNX file's metadata_props record (strings; the spaces as JSON)."""
    config = meta.get("config") or {}
    props = {"env_id": str(config.get("env", policy.spec.name)), "algorithm": policy.algo,
             "config_hash": config_hash(config or meta["policy"]),
             "jaxrl_dist_version": jaxrl_dist.__version__,
             "checkpoint_step": str(policy.step), **graph.spaces(policy.spec)}
    if member is not None:
        props["member"] = str(member)
    return props


def _onnx_runner(model_bytes: bytes, masked: bool):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3   # no optimizer chatter
    session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])

    def run(obs: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        feeds = {"obs": obs, **({"mask": mask} if masked else {})}
        return session.run(["actions"], feeds)[0]
    return run


def stablehlo(policy: policy_lib.Policy):
    """``jax.export`` of the same function with the parameters inside and a symbolic batch
    dimension, for the platform jax runs on here: ``(obs[, mask]) -> actions``."""
    import jax
    from jax import export

    spec = policy.spec
    batch, = export.symbolic_shape("batch")
    args = [jax.ShapeDtypeStruct((batch, *spec.obs_shape), np.dtype(spec.obs_dtype))]
    if spec.masked:
        args.append(jax.ShapeDtypeStruct((batch, spec.action_dim), np.bool_))

    def act(obs, mask=None):
        return policy.fn(policy.params, obs, mask)
    return export.export(jax.jit(act))(*args)


def _write(path: Path, data: bytes) -> None:
    """Atomically: a reader never sees half a file, a failure leaves none."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as e:
        raise ExportError(f"writing {path} failed: {e}") from None
    finally:
        tmp.unlink(missing_ok=True)


def export_policy(policy: policy_lib.Policy, record: dict[str, Any], out: str | Path, *,
                  opset: int = DEFAULT_OPSET, meta: dict[str, Any] | None = None,
                  member: int | None = None) -> Exported:
    """Write ``policy`` (with its checkpoint's ``record``, ``meta["policy"]``) as ONNX at
    ``out`` and StableHLO beside it, after the parity checks pass; raises
    :class:`~jaxrl_dist.export.parity.ParityError` (writing nothing) if they do not."""
    out = Path(out)
    meta = meta if meta is not None else {"policy": record}
    spec = policy.spec
    model = graph.build_model(record, policy.params, opset, metadata(policy, meta, member))
    onnx_bytes = model.SerializeToString()
    exported = stablehlo(policy)

    obs_sets = [("sampled", parity.sampled_observations(spec))]
    real = parity.real_observations(meta.get("config"), spec)
    if real is not None:
        obs_sets.append(("real", real))
    mask = parity.sampled_masks(spec)
    candidates = [  # (what, run, batches): StableHLO at one (a compile per batch size)
        (f"the ONNX graph (opset {opset})", _onnx_runner(onnx_bytes, spec.masked),
         parity.BATCHES),
        ("the StableHLO export", lambda o, m: exported.call(o, *([] if m is None else [m])),
         parity.BATCHES[-1:]),
    ]
    worst = 0.0
    for name, run, batches in candidates:
        for kind, obs in obs_sets:
            worst = max(worst, parity.check_parity(run, policy, spec, obs, mask,
                                                   f"{name} on {kind} observations", batches))
    _write(out, onnx_bytes)
    hlo_path = out.with_suffix(".stablehlo")
    _write(hlo_path, exported.serialize())
    return Exported(out, hlo_path, worst, " and ".join(k for k, _ in obs_sets), opset)


def default_output(run_dir: str | Path, member: int | None) -> Path:
    name = "policy.onnx" if member is None else f"policy-member{member}.onnx"
    return Path(run_dir) / name


def export_run(run_dir: str | Path, out: str | Path | None = None, *,
               opset: int = DEFAULT_OPSET, member: int | None = None,
               step: int | None = None) -> Exported:
    """The run's latest (or ``step``'s) checkpoint, one member of a population, exported.
    Without ``out`` it goes to RUN_DIR/policy.onnx, which must not exist yet; a given ``out``
    is replaced."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ExportError(f"no run directory {run_dir}")
    if out is None:
        out = default_output(run_dir, member)
        for path in (out, out.with_suffix(".stablehlo")):
            if path.exists():
                raise ExportError(f"{path} exists; pass -o {out} to replace it, or another "
                                  f"path")
    _, meta = read_checkpoint(run_dir / "checkpoints", step, item="policy")
    record, members = meta.get("policy"), meta.get("members")
    if record is None:
        raise ExportError(f"the checkpoint in {run_dir} records no policy (written by an "
                          f"older version: train with this one)")
    if members and (member is None or not 0 <= member < members):
        raise ExportError(f"{run_dir} holds a population of {members} members: pass --member "
                          f"0..{members - 1}")
    if not members and member is not None:
        raise ExportError(f"{run_dir} is a single run, not a population: drop --member")
    policy = policy_lib.load(run_dir, step=int(meta["updates"]), member=member)
    return export_policy(policy, record, out, opset=opset, meta=meta, member=member)
