"""A run directory's policy -> ``policy.onnx`` (and ``policy.stablehlo``), written only once
both act exactly as :func:`jaxrl_dist.policy.load` does on the same observations (a recurrent
policy: on the same sequences, carries included)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
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
    max_diff: float          # largest |action (or carry) difference| the parity checks saw
    observations: str        # what they ran on: "sampled", or "sampled and real"
    opset: int
    sequence_length: int = 0   # a recurrent policy's parity sequences (0: feed-forward)


def config_hash(config: dict[str, Any]) -> str:
    """The run's config, canonical JSON, sha256 (first 16 hex digits): which run this is."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def observation_indices(config: dict[str, Any]) -> list[int] | None:
    """Which entries of the environment's full observation the policy sees, when the run's
    ``env_kwargs`` dropped some (gymnax ``hide_velocities``); None when it sees them all."""
    env_id = config.get("env")
    if not isinstance(env_id, str) or not (config.get("env_kwargs") or {}).get("hide_velocities"):
        return None
    from jaxrl_dist.envs import registry
    from jaxrl_dist.envs.gymnax import WITHOUT_VELOCITIES

    suite, name = registry.parse(env_id)
    return list(WITHOUT_VELOCITIES[name]) if (suite == "gymnax"
                                             and name in WITHOUT_VELOCITIES) else None


def metadata(policy: policy_lib.Policy, meta: dict[str, Any], member: int | None
             ) -> dict[str, str]:
    """What the ONNX file's metadata_props record (strings; the spaces and a recurrent
    policy's ``carry`` as JSON)."""
    config = meta.get("config") or {}
    props = {"env_id": str(config.get("env", policy.spec.name)), "algorithm": policy.algo,
             "config_hash": config_hash(config or meta["policy"]),
             "jaxrl_dist_version": jaxrl_dist.__version__,
             "checkpoint_step": str(policy.step), **graph.spaces(policy.spec),
             **graph.carry_metadata(graph.carry_layout(meta["policy"]),
                                    jax.tree.leaves(policy.init_carry()))}
    indices = observation_indices(config)
    if indices is not None:
        props["observation_indices"] = json.dumps(indices)
    if member is not None:
        props["member"] = str(member)
    return props


def _session(model_bytes: bytes):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3   # no optimizer chatter
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def _onnx_runner(model_bytes: bytes, masked: bool):
    session = _session(model_bytes)

    def run(obs: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        feeds = {"obs": obs, **({"mask": mask} if masked else {})}
        return session.run(["actions"], feeds)[0]
    return run


def _initial_from_metadata(carry: list[dict[str, Any]]):
    """batch -> the carry at episode starts, as the metadata's ``carry`` entries say: what a
    deployment following docs/export.md feeds."""
    def initial(b: int) -> list[np.ndarray]:
        return [np.zeros((b, *e["shape"]), np.float32) if e["initial"] == "zeros" else
                np.broadcast_to(np.asarray(e["initial"], np.float32), (b, *e["shape"])).copy()
                for e in carry]
    return initial


def _reset_to(initial):
    def reset(carry: list[np.ndarray], done: np.ndarray) -> list[np.ndarray]:
        return [np.where(done[:, None], c0, c) for c0, c in zip(initial(len(done)), carry)]
    return reset


def _onnx_stepper(model_bytes: bytes, masked: bool, carry: list[dict[str, Any]]
                  ) -> parity.Stepper:
    """The ONNX graph stepped as a deployment would: its carry outputs fed back as inputs,
    reset to the metadata's initial carry."""
    session = _session(model_bytes)
    outputs = ["actions", *(e["output"] for e in carry)]

    def step(obs, state, mask):
        feeds = {"obs": obs, **({"mask": mask} if masked else {}),
                 **{e["input"]: c for e, c in zip(carry, state)}}
        actions, *state = session.run(outputs, feeds)
        return actions, state
    initial = _initial_from_metadata(carry)
    return parity.Stepper(initial, step, _reset_to(initial))


def _policy_stepper(policy: policy_lib.Policy) -> parity.Stepper:
    """The reference: ``Policy.act``, reset by ``Policy.reset_carry``."""
    treedef = jax.tree.structure(policy.init_carry())

    def step(obs, state, mask):
        actions, carry = policy.act(obs, jax.tree.unflatten(treedef, state), mask)
        return actions, jax.tree.leaves(carry)

    def reset(state, done):
        return jax.tree.leaves(policy.reset_carry(jax.tree.unflatten(treedef, state), done))
    return parity.Stepper(lambda b: jax.tree.leaves(policy.initial_carry(b)), step, reset)


def stablehlo(policy: policy_lib.Policy):
    """``jax.export`` of the same function with the parameters inside and a symbolic batch
    dimension, for the platform jax runs on here: ``(obs[, mask]) -> actions``, or for a
    recurrent policy one step ``(obs, carry[, mask]) -> (actions, carry)`` (``carry`` as
    ``Policy.initial_carry`` builds it: h [batch, H] for a GRU, (c, h) for an LSTM)."""
    from jax import export

    spec = policy.spec
    batch, = export.symbolic_shape("batch")
    args = [jax.ShapeDtypeStruct((batch, *spec.obs_shape), np.dtype(spec.obs_dtype))]
    if policy.recurrent:
        args.append(jax.tree.map(lambda x: jax.ShapeDtypeStruct((batch, *x.shape), x.dtype),
                                 policy.init_carry()))
    if spec.masked:
        args.append(jax.ShapeDtypeStruct((batch, spec.action_dim), np.bool_))

    if policy.recurrent:
        def act(obs, carry, mask=None):
            return policy.step_fn(policy.params, carry, obs, mask)
    else:
        def act(obs, mask=None):
            return policy.fn(policy.params, obs, mask)
    return export.export(jax.jit(act))(*args)


def _stablehlo_stepper(exported, policy: policy_lib.Policy, initial) -> parity.Stepper:
    treedef = jax.tree.structure(policy.init_carry())

    def step(obs, state, mask):
        actions, carry = exported.call(obs, jax.tree.unflatten(treedef, state),
                                       *([] if mask is None else [mask]))
        return np.asarray(actions), [np.asarray(c) for c in jax.tree.leaves(carry)]
    return parity.Stepper(initial, step, _reset_to(initial))


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
    meta = {**meta, "policy": record}
    props = metadata(policy, meta, member)
    model = graph.build_model(record, policy.params, opset, props)
    onnx_bytes = model.SerializeToString()
    exported = stablehlo(policy)
    onnx_name = f"the ONNX graph (opset {opset})"
    if "carry" in props:
        worst, kinds, length = _recurrent_parity(policy, meta, props, onnx_bytes, exported,
                                                 onnx_name)
    else:
        worst, kinds, length = _feed_forward_parity(policy, meta, onnx_bytes, exported,
                                                    onnx_name)
    _write(out, onnx_bytes)
    hlo_path = out.with_suffix(".stablehlo")
    _write(hlo_path, exported.serialize())
    return Exported(out, hlo_path, worst, kinds, opset, length)


def _feed_forward_parity(policy, meta, onnx_bytes, exported, onnx_name):
    spec = policy.spec
    obs_sets = [("sampled", parity.sampled_observations(spec))]
    real = parity.real_observations(meta.get("config"), spec)
    if real is not None:
        obs_sets.append(("real", real))
    mask = parity.sampled_masks(spec)
    candidates = [  # (what, run, batches): StableHLO at one (a compile per batch size)
        (onnx_name, _onnx_runner(onnx_bytes, spec.masked), parity.BATCHES),
        ("the StableHLO export", lambda o, m: exported.call(o, *([] if m is None else [m])),
         parity.BATCHES[-1:]),
    ]
    worst = 0.0
    for name, run, batches in candidates:
        for kind, obs in obs_sets:
            worst = max(worst, parity.check_parity(run, policy, spec, obs, mask,
                                                   f"{name} on {kind} observations", batches))
    return worst, " and ".join(k for k, _ in obs_sets), 0


def _recurrent_parity(policy, meta, props, onnx_bytes, exported, onnx_name):
    """Sequences with a carry reset through the ONNX graph (batch 1, 2, 7) and the StableHLO
    step (batch 7), each stepping its own carry, against ``Policy.act``."""
    spec = policy.spec
    carry = json.loads(props["carry"])
    obs, mask = parity.sampled_sequences(spec)
    obs_sets = [("sampled", obs)]
    real = parity.real_sequences(meta.get("config"), spec)
    if real is not None:
        obs_sets.append(("real", real))
    onnx_stepper = _onnx_stepper(onnx_bytes, spec.masked, carry)
    candidates = [(onnx_name, onnx_stepper, parity.BATCHES),
                  ("the StableHLO export", _stablehlo_stepper(exported, policy,
                                                              onnx_stepper.initial),
                   parity.BATCHES[-1:])]
    reference, worst = _policy_stepper(policy), 0.0
    for name, stepper, batches in candidates:
        for kind, seq in obs_sets:
            worst = max(worst, parity.check_recurrent_parity(
                stepper, reference, spec, seq, mask, f"{name} on {kind} observations",
                batches))
    return worst, " and ".join(k for k, _ in obs_sets), int(obs.shape[0])


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
