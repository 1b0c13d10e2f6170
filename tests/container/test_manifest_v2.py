"""Manifest format 2: each byte hashed once, large files split into chunks hashed on every core;
format 1 manifests still verify. The digest definitions are checked against an independent
implementation written from docs/container-format.md."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealtrace.cli import main
from sealtrace.container import ContainerFormatError, IntegrityError
from sealtrace.container import manifest as manifests
from sealtrace.container.manifest import create_manifest, verify_manifest
from sealtrace.digest import canonical_json

SMALL_CHUNK = 4096  # tests patch CHUNK_SIZE down so that small files span many chunks


def _chunked(data: bytes, chunk: int) -> str:
    """The documented chunked digest, written anew."""
    if len(data) <= chunk:
        return hashlib.sha256(data).hexdigest()
    parts = [hashlib.sha256(data[i : i + chunk]).digest() for i in range(0, len(data), chunk)]
    return hashlib.sha256(b"sealtrace.chunked-sha256\0" + struct.pack("<QQ", chunk, len(data)) + b"".join(parts)).hexdigest()


def _file(data: bytes, ranges: list[tuple[int, int]], chunk: int) -> str:
    """The documented file digest: segments are the (sorted) ranges and the bytes between them."""
    cuts, position = [], 0
    for start, end in sorted(ranges):
        if start > position:
            cuts.append((position, start))
        cuts.append((start, end))
        position = end
    if position < len(data) or not cuts:
        cuts.append((position, len(data)))
    if len(cuts) == 1:
        return _chunked(data, chunk)
    digest = hashlib.sha256(b"sealtrace.file-segments\0" + struct.pack("<QQ", len(data), len(cuts)))
    for start, end in cuts:
        digest.update(struct.pack("<Q", end - start) + bytes.fromhex(_chunked(data[start:end], chunk)))
    return digest.hexdigest()


def _records(path: Path) -> dict[str, dict[str, Any]]:
    return {f["path"]: f for f in json.loads(path.read_text())["manifest"]["files"]}


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifests, "CHUNK_SIZE", SMALL_CHUNK)


@pytest.fixture
def shards(tmp_path: Path) -> Path:
    from safetensors.numpy import save_file

    root = tmp_path / "shards"
    root.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        save_file(
            {"big": rng.standard_normal(5000).astype(np.float32), "small": np.arange(7, dtype=np.int64),
             "empty": np.zeros((0, 3), np.float32)},
            root / f"model-{i}.safetensors",
        )  # fmt: skip
    (root / "blob.bin").write_bytes(rng.integers(0, 256, 3 * SMALL_CHUNK + 5, dtype=np.uint8).tobytes())
    (root / "config.json").write_text('{"layers": 2}')
    return root


class _CountingSha256:
    """hashlib's sha256 that adds every byte it is fed to a shared count."""

    total = 0

    def __init__(self, data: bytes = b"") -> None:
        self._inner = hashlib.sha256()
        self.update(data)

    def update(self, data: Any) -> None:
        _CountingSha256.total += memoryview(data).nbytes
        self._inner.update(data)

    def digest(self) -> bytes:
        return self._inner.digest()

    def hexdigest(self) -> str:
        return self._inner.hexdigest()


def test_each_byte_is_hashed_once(shards: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Was twice for a safetensors file (the whole file, then each tensor's range)."""

    class CountingHashlib:
        sha256 = _CountingSha256

    monkeypatch.setattr(manifests, "hashlib", CountingHashlib)
    total = sum(p.stat().st_size for p in shards.iterdir())
    out = tmp_path / "m.json"
    for run in (lambda: create_manifest(shards, out), lambda: verify_manifest(shards, out)):
        _CountingSha256.total = 0
        run()
        # Composing digests from digests adds tens of bytes per segment, never a second pass.
        assert total <= _CountingSha256.total < total + 2048


def test_digests_follow_the_documented_definition(shards: Path, tmp_path: Path, small_chunks: None) -> None:
    out = tmp_path / "m.json"
    info = create_manifest(shards, out)
    document = json.loads(out.read_text())
    assert document["manifest"]["format_version"] == 3  # format 3 keeps format 2's file records
    records = _records(out)
    for rel, record in records.items():
        data = (shards / rel).read_bytes()
        ranges = [tuple(t["range"]) for t in record["tensors"] if t["range"] is not None]
        assert record["digest"] == _file(data, ranges, SMALL_CHUNK), rel  # type: ignore[arg-type]
        for tensor in record["tensors"]:
            start, end = tensor["range"]
            assert tensor["digest"] == _chunked(data[start:end], SMALL_CHUNK), (rel, tensor["name"])
    assert records["config.json"]["digest"] == hashlib.sha256(b'{"layers": 2}').hexdigest()  # as sha256sum prints
    assert records["blob.bin"]["tensors"] == [] and records["blob.bin"]["format"] is None
    assert [t["name"] for t in records["model-0.safetensors"]["tensors"]] == ["big", "empty", "small"]
    assert info.tensors == 6
    assert verify_manifest(shards, out).ok


def test_large_files_are_split_into_jobs(shards: Path, tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of several chunks is hashed as several jobs (one per chunk), which the pool spreads over its threads."""
    jobs: list[Any] = []
    original = manifests._hash_job

    def counting(job: Any) -> list[bytes]:
        jobs.append(job)
        return original(job)

    monkeypatch.setattr(manifests, "_hash_job", counting)
    create_manifest(shards, tmp_path / "m.json")
    blob = [job for job in jobs if job.rel == "blob.bin"]
    assert len(blob) == 4 and all(len(job.chunks) == 1 for job in blob)  # 3 chunks of 4096 bytes and 5 bytes
    big = [job for job in jobs if job.rel == "model-0.safetensors"]
    assert len(big) >= 5  # the 20000-byte tensor alone is 5 chunks


def test_changed_tensor_is_named_and_moved_ones_are_not(shards: Path, tmp_path: Path, small_chunks: None) -> None:
    """Tensor digests do not depend on where a tensor lies: adding a tensor (all offsets move)
    names the added one and a changed one, not those that only moved."""
    from safetensors.numpy import load_file, save_file

    out = tmp_path / "m.json"
    create_manifest(shards, out)
    tensors = load_file(shards / "model-1.safetensors")
    tensors["big"] = tensors["big"].copy()
    tensors["big"][4999] += 1
    tensors["added"] = np.ones(3, np.float32)
    save_file(tensors, shards / "model-1.safetensors")
    with pytest.raises(IntegrityError) as info:
        verify_manifest(shards, out)
    assert [(m.kind, m.name) for m in info.value.mismatches] == [
        ("file", "model-1.safetensors"),
        ("tensor", "model-1.safetensors:added"),
        ("tensor", "model-1.safetensors:big"),
    ]
    assert info.value.mismatches[0].expected.startswith("digest ")


def test_same_size_change_in_a_gap_names_the_file(shards: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    create_manifest(shards, out)
    path = shards / "model-0.safetensors"
    data = bytearray(path.read_bytes())
    header = int.from_bytes(data[:8], "little")
    data[8 + header - 1] = ord(" ") if data[8 + header - 1] != ord(" ") else ord("\t")  # header padding
    path.write_bytes(bytes(data))
    report = verify_manifest(shards, out, raise_on_failure=False)
    assert [(m.kind, m.name) for m in report.mismatches] == [("file", "model-0.safetensors")]


def test_overlapping_external_data_ranges(tmp_path: Path, small_chunks: None) -> None:
    """Two initializers that share bytes: one is a segment, the other hashed apart; both named when changed."""
    root = tmp_path / "model"
    root.mkdir()
    weights = np.arange(3000, dtype=np.float32)
    (root / "weights.bin").write_bytes(weights.tobytes())
    inits = []
    for name, offset, count in (("A", 0, 3000), ("B", 4000, 1000)):  # B is bytes 4000..8000, inside A
        tensor = numpy_helper.from_array(weights[:count], name)
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", "weights.bin"), ("offset", str(offset)), ("length", str(count * 4))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        inits.append(tensor)
    graph = helper.make_graph(
        [helper.make_node("Add", ["A", "A"], ["y"])], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3000])], inits
    )
    onnx.save(helper.make_model(graph), root / "m.onnx")
    out = tmp_path / "m.json"
    create_manifest(root, out)
    record = _records(out)["weights.bin"]
    data = (root / "weights.bin").read_bytes()
    assert record["format"] == "onnx-external-data"
    assert {t["name"]: t["range"] for t in record["tensors"]} == {"A": [0, 12000], "B": None}
    assert {t["name"]: t["digest"] for t in record["tensors"]} == {
        "A": _chunked(data, SMALL_CHUNK), "B": _chunked(data[4000:8000], SMALL_CHUNK)
    }
    assert verify_manifest(root, out).ok
    changed = bytearray(data)
    changed[5000] ^= 1
    (root / "weights.bin").write_bytes(bytes(changed))
    with pytest.raises(IntegrityError) as info:
        verify_manifest(root, out)
    assert [(m.kind, m.name) for m in info.value.mismatches] == [
        ("file", "weights.bin"), ("tensor", "weights.bin:A"), ("tensor", "weights.bin:B")
    ]


@pytest.mark.parametrize("version", [1, 2])
def test_both_format_versions_verify_sign_and_name_tensors(
    shards: Path, tmp_path: Path, keys: dict[str, Path], capsys: pytest.CaptureFixture[str], version: int
) -> None:
    """Manifests written before format 2 (format_version 1) still verify, signatures and --trust included."""
    out = tmp_path / "m.json"
    create_manifest(shards, out, sign_with=[keys["alice"]], format_version=version)
    records = _records(out)
    key = "sha256" if version == 1 else "digest"
    if version == 1:
        assert records["blob.bin"]["sha256"] == hashlib.sha256((shards / "blob.bin").read_bytes()).hexdigest()
    assert verify_manifest(shards, out, trust=[keys["alice.pub"]], require_signature=True).ok
    from sealtrace.jsonschemas import load_schema, validator

    validator(load_schema("container-manifest.schema.json")).validate(json.loads(out.read_text()))
    assert main(["manifest", "verify", str(shards), str(out), "--trust", str(keys["mallory.pub"])]) == 1
    assert "signature" in capsys.readouterr().err
    path = shards / "model-0.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # the last byte of the last tensor in file order
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError) as info:
        verify_manifest(shards, out, trust=[keys["alice.pub"]])
    names = [(m.kind, m.name) for m in info.value.mismatches]
    assert names[0] == ("file", "model-0.safetensors") and len(names) == 2 and names[1][0] == "tensor"
    assert info.value.mismatches[1].expected.startswith(f"{key} ")


@pytest.mark.parametrize(
    "edit",
    [
        lambda m, f: f["tensors"][0].update(range=[0, 10**12]),  # past the file's end
        lambda m, f: f["tensors"][0].update(range=[5, 3]),
        lambda m, f: f["tensors"][0].update(range=[0, True]),
        lambda m, f: f["tensors"][0].update(range="0-4"),
        lambda m, f: f["tensors"][1].update(range=f["tensors"][2]["range"]),  # two tensors on the same bytes
        lambda m, f: f["tensors"][0].pop("range"),
        lambda m, f: f.update(sha256=f.pop("digest")),  # format 1's key in format 2
        lambda m, f: m.update(format_version=4),
    ],
    ids=["past-end", "reversed", "bool", "string", "overlap", "no-range", "v1-key", "version-4"],
)
def test_malformed_format_2_manifests_are_refused(shards: Path, tmp_path: Path, edit: Any, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.json"
    create_manifest(shards, out)
    document = json.loads(out.read_text())
    (record,) = [f for f in document["manifest"]["files"] if f["path"] == "model-0.safetensors"]
    edit(document["manifest"], record)
    out.write_bytes(canonical_json(document))
    with pytest.raises(ContainerFormatError):
        verify_manifest(shards, out)
    assert main(["manifest", "verify", str(shards), str(out)]) == 2
    assert capsys.readouterr().err.startswith("sealtrace: error: ")


def test_a_file_changed_while_hashed_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 100)
    with pytest.raises(manifests.ManifestPathError, match="changed while it was read"):
        manifests._hash_job(manifests._ChunkJob("f.bin", path, 200, [(0, 200)]))  # planned at 200 bytes, holds 100


def test_chunked_sha256_streams_to_the_same_digest(small_chunks: None) -> None:
    data = bytes(range(256)) * 50  # 12800 bytes: 4 chunks of 4096
    for length in (0, 1, SMALL_CHUNK, SMALL_CHUNK + 1, len(data)):
        hasher = manifests.ChunkedSha256()
        for i in range(0, length, 1000):
            hasher.update(data[i : min(i + 1000, length)])
        assert hasher.hexdigest() == _chunked(data[:length], SMALL_CHUNK), length
