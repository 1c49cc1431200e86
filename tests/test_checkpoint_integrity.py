"""Checkpoints that prove themselves: every checkpoint records a digest of its arrays (computed
on the devices, the same on any mesh) and a restore checks it. A resume over damaged
checkpoints (values changed silently, or files the reader refuses: truncated, deleted, flipped)
names each one, sets it aside untouched and ends exactly where the uninterrupted run ended;
with none intact it is one line, exit 2, and nothing on disk changes.

The damage is done where orbax keeps an array: its OCDBT database maps each chunk's key to a
byte range of a data file, a zstd frame. Rewriting that frame as another VALID frame of the
same length changes the values and still reads (zstd frames here carry no checksum): only the
digest can tell."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

from helpers import _env, train_cli
from jaxrl_dist import config as config_lib
from jaxrl_dist import digest
from jaxrl_dist import policy as policy_lib
from jaxrl_dist.checkpoint import DamagedCheckpoint, read_checkpoint
from jaxrl_dist.launch.plan import without_resume_from
from jaxrl_dist.trainer import train

# 20 updates of 8 envs x 4 steps, a checkpoint every 5 (10, 15 and 20 kept); the buffer (256
# transitions) is full, so its chunks are large enough to live in data files, not inline.
DQN = dict(algo="dqn", env="CartPole-v1", seed=2, num_envs=8, total_timesteps=8 * 4 * 20,
           updates_per_call=5, checkpoint_every=5, checkpoint_minutes=0, eval_episodes=4,
           dqn=dict(num_steps=4, gradient_steps=2, batch_size=16, buffer_size=256,
                    buffer_shards=4, learning_starts=24, n_step=3, target_update_period=3,
                    epsilon_decay_steps=100, learning_rate=3e-3))
ZSTD = bytes.fromhex("28b52ffd")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run, in this process on 2 devices."""
    run = tmp_path_factory.mktemp("ref") / "run"
    summary = train(config_lib.from_dict(DQN), run, devices=jax.devices()[:2], progress=False)
    return run, summary


def _copy(reference, tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(reference[0], run)
    return run


def _resume(run, **kw):
    return train(config_lib.from_dict(DQN), run, resume=True, devices=jax.devices()[:2],
                 progress=False, **kw)


def _snapshot(path):
    return {p: p.read_bytes() for p in sorted(Path(path).rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------- damage helpers

def _chunk(item: Path, name: str, writer: str = "") -> tuple[Path, int, int]:
    """(data file, offset, length) of the first chunk stored in a data file (not inline in
    the B-tree) of the array whose key contains ``name`` (written by the process whose
    directory contains ``writer``), read from the OCDBT B-tree."""
    import tensorstore as ts

    kv = ts.KvStore.open({"driver": "file", "path": f"{item}/"}).result()
    root = ts.ocdbt.dump(kv).result()["versions"][-1]["root"]["location"]
    pending, found = [("", root)], []
    while pending:
        prefix, location = pending.pop()
        for entry in ts.ocdbt.dump(kv, node=location).result()["entries"]:
            if "location" in entry:
                pending.append((prefix + (entry.get("subtree_common_prefix") or b"").decode(),
                                entry["location"]))
                continue
            key = prefix + entry["key"].decode()
            value = entry.get("indirect_value")
            if name in key and value and writer in value:
                # value:ocdbt.process_0/:d/FILE:OFFSET:LENGTH
                where, rest = value.split(":", 1)[1].split(":", 1)
                file, offset, length = rest.rsplit(":", 2)
                found.append((key, item / where / file, int(offset), int(length)))
    assert found, f"no chunk of {name} in a data file of {item} by {writer or 'any'}"
    _, path, offset, length = sorted(found)[0]
    return path, offset, length


def _decoded_size(frame: bytes) -> int:
    """A zstd frame's content size, from its header."""
    assert frame[:4] == ZSTD, frame[:8].hex()
    descriptor = frame[4]
    single = descriptor >> 5 & 1
    size = [1 if single else 0, 2, 4, 8][descriptor >> 6]
    start = 5 + (0 if single else 1)
    assert size, "frame without a content size"
    return int.from_bytes(frame[start:start + size], "little") + (256 if size == 2 else 0)


def _same_length_frame(decoded: int, length: int) -> bytes:
    """A valid zstd frame of exactly ``length`` bytes that decodes to ``decoded`` bytes of
    other values: a raw block of 0-3 bytes, then run-length blocks of 4 bytes each."""
    head = ZSTD + (bytes([0x60]) + (decoded - 256).to_bytes(2, "little") if decoded >= 256
                   else bytes([0x20, decoded]))
    room = length - len(head)
    raw = (room - 3) % 4
    runs = (room - 3 - raw) // 4
    assert runs >= 1 and decoded - raw >= runs and decoded < 65792
    body = (raw << 3).to_bytes(3, "little") + b"\x3f" * raw
    sizes = [1] * (runs - 1) + [decoded - raw - (runs - 1)]
    for i, size in enumerate(sizes):
        body += (size << 3 | 1 << 1 | (i == runs - 1)).to_bytes(3, "little") + bytes([0x3f + i % 2])
    return head + body


def change_values(item: Path, name: str) -> None:
    """Bytes in the middle of a data file rewritten: the file reads, the values differ."""
    path, offset, length = _chunk(item, name)
    data = bytearray(path.read_bytes())
    data[offset:offset + length] = _same_length_frame(
        _decoded_size(bytes(data[offset:offset + length])), length)
    path.write_bytes(bytes(data))


def truncate(item: Path, name: str) -> None:
    path, offset, length = _chunk(item, name)
    path.write_bytes(path.read_bytes()[:offset + length // 2])


def zero(item: Path, name: str, writer: str) -> None:
    """One chunk's bytes zeroed, and nothing else: only a reader of that chunk notices."""
    path, offset, length = _chunk(item, name, writer)
    data = bytearray(path.read_bytes())
    data[offset:offset + length] = bytes(length)
    path.write_bytes(bytes(data))


def delete(item: Path, name: str) -> None:
    path, _, _ = _chunk(item, name)
    path.unlink()


def flip_index(item: Path) -> None:
    """A byte flipped in the middle of the B-tree node that indexes the arrays: the reader
    notices (the node's own checks fail)."""
    node = max((p for p in (item / "d").iterdir()), key=lambda p: p.stat().st_size)
    data = bytearray(node.read_bytes())
    data[len(data) // 2] ^= 0xFF
    node.write_bytes(bytes(data))


# ---------------------------------------------------------------------------------- the digest

def test_the_digest_is_the_same_on_any_mesh_and_sees_any_one_element():
    from jax.sharding import NamedSharding, PartitionSpec

    tree = {"w": jax.random.normal(jax.random.PRNGKey(0), (8, 33)), "n": jnp.arange(12),
            "b": jnp.array([True, False]), "h": jnp.ones((4, 3), jnp.bfloat16),
            "k": jax.random.PRNGKey(1)}
    one = digest.digests({"state": tree})["state"]
    mesh = jax.make_mesh((4,), ("data",), devices=jax.devices()[:4])
    sharded = {k: jax.device_put(v, NamedSharding(mesh, PartitionSpec(
        "data" if v.ndim and v.shape[0] % 4 == 0 else None))) for k, v in tree.items()}
    assert digest.digests({"state": sharded})["state"] == one
    assert sorted(one) == ["b", "h", "k", "n", "w"]
    changed = {**tree, "w": tree["w"].at[5, 17].set(np.nextafter(tree["w"][5, 17], 9.0))}
    assert digest.mismatches(one, digest.digests({"state": changed})["state"]) == ["w"]
    swapped = {**tree, "n": tree["n"][::-1]}   # the same elements elsewhere
    assert digest.mismatches(one, digest.digests({"state": swapped})["state"]) == ["n"]


def _reference_digest(x) -> str:
    """fmix32-sum-v1 in numpy, element by element: what every checkpoint since it records."""
    x = np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
                   else x)
    if x.dtype == np.bool_:
        words = x.astype(np.uint32)
    elif x.dtype.itemsize >= 4:
        words = x.view(np.uint32)   # 8-byte elements: two words each, the low one first
    else:
        words = x.view({1: np.uint8, 2: np.uint16}[x.dtype.itemsize]).astype(np.uint32)
    h = words.reshape(-1).astype(np.uint64)
    h = (h + np.arange(h.size, dtype=np.uint64) * 0x9E3779B9) % 2**32
    h ^= h >> 16
    h = h * 0x85EBCA6B % 2**32
    h ^= h >> 13
    h = h * 0xC2B2AE35 % 2**32
    h ^= h >> 16
    return f"{int(h.sum() % 2**32):08x}"


def test_the_digest_words_are_the_recorded_algorithms_however_the_arrays_are_grouped(
        monkeypatch):
    """Small unsharded arrays are hashed together (one kernel for many instead of one each),
    large ones a slab at a time, sharded ones each on its own: every word is still the one
    fmix32-sum-v1 defines, so checkpoints saved before the grouping verify after it."""
    from jax.sharding import NamedSharding, PartitionSpec

    key = jax.random.PRNGKey(5)
    tree = {"w": jax.random.normal(key, (7, 130)), "n": jnp.arange(1500, dtype=jnp.int32),
            "s": jnp.float32(2.5), "empty": jnp.zeros((0, 3)), "b": jnp.array([True, False]),
            "h": jnp.ones((3, 5), jnp.bfloat16), "u": jnp.arange(9, dtype=jnp.uint8),
            "k": jax.random.PRNGKey(1), "big": jax.random.normal(key, (4, 300)),
            "v": jnp.linspace(0.0, 1.0, 200)}
    expected = {name: _reference_digest(x) for name, x in tree.items()}
    monkeypatch.setattr(digest, "_compiled", {})
    assert digest._packable(tree["w"]) and digest.digests({"s": tree})["s"] == expected
    monkeypatch.setattr(digest, "_CHUNK", 1024)   # "big" and "n" in slabs, the rest in 2 groups
    monkeypatch.setattr(digest, "_compiled", {})
    assert not digest._packable(tree["big"])
    assert digest.digests({"s": tree})["s"] == expected
    mesh = jax.make_mesh((2,), ("data",), devices=jax.devices()[:2])
    def put(x, *spec):
        return jax.device_put(x, NamedSharding(mesh, PartitionSpec(*spec)))
    sharded = {**tree, "w": put(tree["w"]), "b": put(tree["b"], "data"),
               "big": put(tree["big"], "data")}
    assert digest._packable(sharded["w"]) and not digest._packable(sharded["b"])
    assert digest.digests({"s": sharded})["s"] == expected


def test_a_large_array_is_hashed_a_slab_at_a_time_to_the_same_digest(monkeypatch):
    """Arrays over ``digest._CHUNK`` elements are hashed one slab of an unsharded axis at a
    time (a replay of Atari frames hashed whole took 4x its size): the same words, sharded or
    not, with a slab count that leaves a remainder, for every width of element."""
    from jax.sharding import NamedSharding, PartitionSpec

    key = jax.random.PRNGKey(3)
    tree = {"frames": jax.random.randint(key, (4, 37, 5, 6), 0, 255).astype(jnp.uint8),
            "x": jax.random.normal(key, (4, 37, 3)), "flags": jax.random.bernoulli(key,
                                                                                shape=(4, 37)),
            "h": jax.random.normal(key, (4, 11, 7)).astype(jnp.bfloat16)}
    whole = digest.digests({"data": tree})["data"]
    monkeypatch.setattr(digest, "_CHUNK", 64)
    monkeypatch.setattr(digest, "_compiled", {})
    assert all(digest._slab_axis(x) == 1 for x in tree.values())
    assert digest.digests({"data": tree})["data"] == whole
    mesh = jax.make_mesh((2,), ("data",), devices=jax.devices()[:2])
    sharded = {k: jax.device_put(v, NamedSharding(mesh, PartitionSpec("data")))
               for k, v in tree.items()}
    assert digest.digests({"data": sharded})["data"] == whole
    changed = {**tree, "frames": tree["frames"].at[3, 36, 4, 5].add(1)}   # the last slab
    assert digest.mismatches(whole, digest.digests({"data": changed})["data"]) == ["frames"]


def test_every_checkpoint_records_its_digest(reference):
    run, _ = reference
    state, meta = read_checkpoint(run / "checkpoints")   # checked on the way
    record = meta["digest"]
    assert record["algorithm"] == digest.ALGORITHM and record["meta"]
    assert {"data/obs", "train/params/Dense_1/kernel", "actors/env/obs"} <= set(record["state"])
    assert "Dense_1/kernel" in record["policy"]


# ---------------------------------------------------------------------------------- resumes

def test_values_changed_in_the_state_are_skipped_for_the_newest_intact(reference, tmp_path,
                                                                      capsys):
    run = _copy(reference, tmp_path)
    change_values(run / "checkpoints" / "20" / "state", "train.params.Dense_1.kernel")
    damaged = _snapshot(run / "checkpoints" / "20")
    summary = _resume(run)
    assert summary["param_fingerprint"] == reference[1]["param_fingerprint"]
    said = [x for x in capsys.readouterr().err.splitlines() if "checkpoint 20" in x]
    assert len(said) == 1, said
    assert "train/params/Dense_1/kernel" in said[0] and "digest" in said[0]
    assert "resuming from checkpoint 15" in said[0]
    aside = run / "checkpoints_set_aside" / "20"
    assert {p.relative_to(aside): b for p, b in _snapshot(aside).items()} == {
        p.relative_to(run / "checkpoints" / "20"): b for p, b in damaged.items()}  # as found
    assert read_checkpoint(run / "checkpoints")[1]["updates"] == 20   # saved again, intact


def test_a_changed_replay_buffer_is_named(reference, tmp_path, capsys):
    run = _copy(reference, tmp_path)
    change_values(run / "checkpoints" / "20" / "state", "data.obs")
    summary = _resume(run)
    assert summary["param_fingerprint"] == reference[1]["param_fingerprint"]
    said = [x for x in capsys.readouterr().err.splitlines() if "checkpoint 20" in x]
    assert len(said) == 1 and "data/obs" in said[0], said


def _installed(name: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(name) is not None


def test_a_damaged_policy_item_is_one_error_for_load_and_export_and_skipped_by_resume(
        reference, tmp_path, capsys):
    from jaxrl_dist.export.__main__ import main as export_main

    run = _copy(reference, tmp_path)
    change_values(run / "checkpoints" / "20" / "policy", "Dense_1.kernel")
    with pytest.raises(DamagedCheckpoint, match=r"checkpoint 20 .* its policy arrays "
                       r"Dense_1/kernel do not match .*; intact: 10, 15"):
        policy_lib.load(run)
    assert policy_lib.load(run, step=15).step == 15
    capsys.readouterr()
    if _installed("onnx") and _installed("onnxruntime"):
        assert export_main([str(run)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "checkpoint 20" in err and "intact: 10, 15" in err
        assert not (run / "policy.onnx").exists()
    summary = _resume(run)
    assert summary["param_fingerprint"] == reference[1]["param_fingerprint"]
    assert "its policy arrays" in capsys.readouterr().err
    assert policy_lib.load(run).step == 20


def test_files_the_reader_refuses_are_skipped_each_named(reference, tmp_path, capsys):
    """20: a data file truncated; 15: one deleted -> resumes from 10, naming both."""
    run = _copy(reference, tmp_path)
    truncate(run / "checkpoints" / "20" / "state", "train.params.Dense_1.kernel")
    delete(run / "checkpoints" / "15" / "state", "data.obs")
    summary = _resume(run)
    assert summary["param_fingerprint"] == reference[1]["param_fingerprint"]
    said = [x for x in capsys.readouterr().err.splitlines() if "is damaged" in x]
    assert [x.split()[2] for x in said] == ["15", "20"], said
    assert all("unreadable" in x and "resuming from checkpoint 10" in x for x in said)
    assert sorted(p.name for p in (run / "checkpoints_set_aside").iterdir()) == ["15", "20"]


def test_resume_from_a_step_sets_the_newer_ones_aside(reference, tmp_path, capsys):
    run = _copy(reference, tmp_path)
    summary = _resume(run, resume_from=10)
    assert summary["param_fingerprint"] == reference[1]["param_fingerprint"]
    err = capsys.readouterr().err
    assert "checkpoint 15" in err and "newer than checkpoint 10" in err
    assert sorted(p.name for p in (run / "checkpoints_set_aside").iterdir()) == ["15", "20"]


def test_resume_from_a_damaged_step_is_refused_and_nothing_changes(reference, tmp_path):
    run = _copy(reference, tmp_path)
    change_values(run / "checkpoints" / "15" / "state", "data.obs")
    before = _snapshot(run)
    with pytest.raises(DamagedCheckpoint, match=r"checkpoint 15 .* data/obs .* nothing was "
                       r"changed \(its checkpoints: 10, 15, 20\)"):
        _resume(run, resume_from=15)
    assert _snapshot(run) == before


# ---------------------------------------------------------------------------- the command line

def _config_file(tmp_path) -> str:
    path = tmp_path / "dqn.yaml"
    path.write_text(yaml.safe_dump(DQN))
    return str(path)


def _one_line(proc, *words):
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)


@pytest.mark.slow   # ~11 s: a process that starts, and 3 reads that fail (1 s grace each)
def test_no_intact_checkpoint_is_one_line_exit_2_and_nothing_changes(reference, tmp_path):
    run = _copy(reference, tmp_path)
    truncate(run / "checkpoints" / "20" / "state", "train.params.Dense_1.kernel")
    delete(run / "checkpoints" / "15" / "policy", "Dense_1.kernel")
    flip_index(run / "checkpoints" / "10" / "state")
    before = _snapshot(run)
    proc, _ = train_cli(run, "--resume", args=[], config=_config_file(tmp_path), timeout=300)
    _one_line(proc, "no intact checkpoint", "20 unreadable", "15 unreadable", "10 unreadable",
              "nothing was changed", "Start the run anew without --resume")
    assert _snapshot(run) == before


def test_resume_from_a_missing_step_lists_those_there(reference, tmp_path):
    run = _copy(reference, tmp_path)
    before = _snapshot(run)
    proc, _ = train_cli(run, "--resume-from", "12", args=[], config=_config_file(tmp_path),
                        timeout=300)
    _one_line(proc, "--resume-from 12", "no checkpoint 12", "10, 15, 20")
    assert _snapshot(run) == before


def test_a_restart_by_the_launcher_forgets_resume_from():
    assert without_resume_from(["--resume-from", "10", "--no-progress", "--resume-from=5",
                                "--resume"]) == ["--no-progress", "--resume"]


# ---------------------------------------------------------------------------- two processes

def _summaries(logs: Path) -> list[dict]:
    """Each rank's summary line of its last run."""
    rows = []
    for log in sorted(logs.glob("rank*.log")):
        lines = [x for x in log.read_text().splitlines() if x.startswith('{"rank"')]
        rows.append(json.loads(lines[-1]))
    return rows


@pytest.mark.slow
def test_two_processes_agree_when_only_one_of_them_cannot_read(reference, tmp_path):
    """Saved by 2 processes x 1 device with the batch split (each process writes its half
    of the buffer; replicate_learn, auto across processes, would hold it whole); process 1's
    half in checkpoint 20 is zeroed, so only process 1's read fails: both skip 20 together
    (no process waits in a collective the other left) and end as the uninterrupted run did."""
    run = tmp_path / "run"
    launch = [sys.executable, "-m", "jaxrl_dist.launch", "--nproc-per-node", "2",
              _config_file(tmp_path), "--run-dir", str(run), "--no-progress",
              "--set", "replicate_learn=false"]
    first = subprocess.run(launch, env=_env(), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    zero(run / "checkpoints" / "20" / "state", "data.obs", writer="process_1")
    again = subprocess.run([*launch, "--resume"], env=_env(), capture_output=True,
                           text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    said = (run / "logs" / "rank0.log").read_text()
    assert "checkpoint 20" in said and "unreadable on process(es) 1" in said, said[-2000:]
    assert [r["param_fingerprint"] for r in _summaries(run / "logs")] == \
        [reference[1]["param_fingerprint"]] * 2


# ---------------------------------------------------- what restores unverified, what is pruned

def _edit_meta(run: Path, step: int, edit) -> None:
    path = run / "checkpoints" / str(step) / "meta" / "metadata"
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))


def test_a_record_of_this_format_without_its_digest_is_damaged(reference, tmp_path, capsys):
    """Only a checkpoint from before digests (no format recorded) restores unverified: one of
    this format whose digest record was removed, or names an algorithm this version does not
    compute, is skipped as damaged."""
    run = _copy(reference, tmp_path)
    _edit_meta(run, 20, lambda meta: meta.pop("digest"))
    _edit_meta(run, 15, lambda meta: meta["digest"].update(algorithm="fmix64-v9"))
    with pytest.raises(DamagedCheckpoint, match=r"checkpoint 20 .* has no digest; intact: 10"):
        read_checkpoint(run / "checkpoints")
    summary = _resume(run)
    assert summary["param_fingerprint"] == reference[1]["param_fingerprint"]
    said = [x for x in capsys.readouterr().err.splitlines() if "is damaged" in x]
    assert "checkpoint 15" in said[0] and "'fmix64-v9'" in said[0], said
    assert "checkpoint 20" in said[1] and "has no digest" in said[1], said


def test_a_checkpoint_from_before_digests_restores_unverified(reference, tmp_path):
    run = _copy(reference, tmp_path)
    _edit_meta(run, 20, lambda meta: (meta.pop("digest"), meta.pop("format")))
    _, meta = read_checkpoint(run / "checkpoints")
    assert meta["updates"] == 20 and "digest" not in meta


def test_set_aside_copies_are_pruned_to_keep_checkpoints(reference, tmp_path):
    """Each resume from an older step sets the newer ones aside; only the newest
    keep_checkpoints copies stay there (each may hold a whole replay)."""
    run = _copy(reference, tmp_path)
    aside = run / "checkpoints_set_aside"
    assert config_lib.from_dict(DQN).keep_checkpoints == 3
    _resume(run, resume_from=10)                  # 15 and 20 aside
    assert sorted(p.name for p in aside.iterdir()) == ["15", "20"]
    _resume(run, resume_from=10)                  # again: 4 copies, the oldest one pruned
    assert len(list(aside.iterdir())) == 3
    assert {"15.2", "20.2"} <= {p.name for p in aside.iterdir()}
