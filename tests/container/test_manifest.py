"""Directory manifests: per-file and per-tensor digests, missing/extra files, links, and the
orbax gap (tensor data replaced while _METADATA stays the same)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sealtrace.cli import main
from sealtrace.container import ContainerFormatError, IntegrityError
from sealtrace.container.manifest import ManifestPathError, create_manifest, verify_manifest
from sealtrace.digest import canonical_json
from tests.container.conftest import tiny_model


def _names(exc: IntegrityError) -> list[tuple[str, str]]:
    return [(m.kind, m.name) for m in exc.mismatches]


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    from safetensors.numpy import save_file

    root = tmp_path / "ckpt"
    (root / "shards").mkdir(parents=True)
    save_file({"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(4, np.float32)}, root / "shards" / "model.safetensors")
    np.save(root / "stats.npy", np.linspace(0, 1, 5))
    np.savez(root / "opt.npz", m=np.zeros(3), v=np.full(3, 2.0))
    (root / "config.json").write_text('{"layers": 2}')
    return root


def test_manifest_round_trip_and_schema(checkpoint: Path, tmp_path: Path, keys: dict[str, Path]) -> None:
    out = tmp_path / "ckpt.manifest.json"
    info = create_manifest(checkpoint, out, sign_with=[keys["alice"]])
    assert info.files == 4 and info.tensors == 2 + 1 + 2
    report = verify_manifest(checkpoint, out, trust=[keys["alice.pub"]], require_signature=True)
    assert report.ok and report.files == 4
    document = json.loads(out.read_text())
    assert out.read_bytes() == canonical_json(document)
    formats = {f["path"]: f["format"] for f in document["manifest"]["files"]}
    assert formats == {"config.json": None, "opt.npz": "npz", "shards/model.safetensors": "safetensors", "stats.npy": "npy"}
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(__file__).resolve().parents[2] / "src/sealtrace/schemas/container-manifest.schema.json").read_text())
    jsonschema.validate(document, schema)


def test_changed_safetensors_tensor_is_named(checkpoint: Path, tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    out = tmp_path / "m.json"
    create_manifest(checkpoint, out)
    shard = checkpoint / "shards" / "model.safetensors"
    data = bytearray(shard.read_bytes())
    # Overwrite the values of 'w' in place: same size, same header, a loader sees nothing wrong.
    header_len = int.from_bytes(data[:8], "little")
    start, end = json.loads(data[8 : 8 + header_len])["w"]["data_offsets"]
    base = 8 + header_len
    data[base + start : base + end] = np.full(12, 7.0, np.float32).tobytes()
    shard.write_bytes(bytes(data))
    assert load_file(shard)["w"][0, 0] == 7.0  # safetensors loads the new values without a word
    with pytest.raises(IntegrityError) as info:
        verify_manifest(checkpoint, out)
    assert _names(info.value) == [
        ("array", "shards:w"),  # format 3: the array of the shards' directory, then the file and its tensor
        ("file", "shards/model.safetensors"),
        ("tensor", "shards/model.safetensors:w"),
    ]


def test_changed_npz_member_and_missing_and_extra_files(checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    create_manifest(checkpoint, out)
    np.savez(checkpoint / "opt.npz", m=np.zeros(3), v=np.full(3, 3.0))
    (checkpoint / "stats.npy").unlink()
    (checkpoint / "new.bin").write_bytes(b"x")
    report = verify_manifest(checkpoint, out, raise_on_failure=False)
    assert [(m.kind, m.name) for m in report.mismatches] == [
        ("array", "opt.npz:v"),
        ("file", "new.bin"),
        ("file", "opt.npz"),
        ("tensor", "opt.npz:v"),
        ("file", "stats.npy"),
    ]
    assert report.mismatches[1].actual.startswith("extra file") and report.mismatches[4].actual == "missing"


def test_onnx_external_data_tensors_are_named(tmp_path: Path) -> None:
    root = tmp_path / "model"
    root.mkdir()
    model = tiny_model()
    onnx.save(model, root / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    out = tmp_path / "m.json"
    create_manifest(root, out)
    files = {f["path"]: f for f in json.loads(out.read_text())["manifest"]["files"]}
    assert files["weights.bin"]["format"] == "onnx-external-data"
    assert [t["name"] for t in files["weights.bin"]["tensors"]] == ["W"]  # onnx externalizes initializers
    data = bytearray((root / "weights.bin").read_bytes())
    data[0] ^= 1
    (root / "weights.bin").write_bytes(bytes(data))
    with pytest.raises(IntegrityError) as info:
        verify_manifest(root, out)
    assert _names(info.value) == [("file", "weights.bin"), ("tensor", "weights.bin:W")]


def test_symlinks_are_refused_unless_asked(checkpoint: Path, tmp_path: Path) -> None:
    os.symlink(checkpoint / "config.json", checkpoint / "link.json")
    with pytest.raises(ManifestPathError, match="symbolic link"):
        create_manifest(checkpoint, tmp_path / "m.json")
    info = create_manifest(checkpoint, tmp_path / "m.json", follow_symlinks=True)
    assert info.files == 5
    outside = tmp_path / "secret.txt"
    outside.write_text("x")
    os.symlink(outside, checkpoint / "escape.txt")
    with pytest.raises(ManifestPathError, match="outside"):
        create_manifest(checkpoint, tmp_path / "m2.json", follow_symlinks=True)
    # At verify time a link where a file was is a mismatch, not a silent follow. Each link is named,
    # and the other files are still compared (this asserted one 'directory' mismatch before, which
    # came with every other file reported missing).
    report = verify_manifest(checkpoint, tmp_path / "m.json", raise_on_failure=False)
    assert [(m.kind, m.name) for m in report.mismatches] == [("file", "escape.txt"), ("file", "link.json")]
    assert all("symbolic link" in m.actual for m in report.mismatches) and report.files == 4


def test_manifest_inside_the_directory_is_not_listed(checkpoint: Path) -> None:
    out = checkpoint / "MANIFEST.json"
    create_manifest(checkpoint, out)
    assert "MANIFEST.json" not in {f["path"] for f in json.loads(out.read_text())["manifest"]["files"]}
    assert verify_manifest(checkpoint, out).ok


@pytest.mark.parametrize("bad", ["../etc/passwd", "/abs", "a/./b", "a//b", "C:\\x", "a\\b"])
def test_escaping_manifest_paths_are_refused(checkpoint: Path, tmp_path: Path, bad: str) -> None:
    out = tmp_path / "m.json"
    create_manifest(checkpoint, out)
    document = json.loads(out.read_text())
    document["manifest"]["files"][0]["path"] = bad
    out.write_bytes(canonical_json(document))
    with pytest.raises(ContainerFormatError):
        verify_manifest(checkpoint, out)


def test_manifest_cli(checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "m.json")
    assert main(["manifest", "create", str(checkpoint), "-o", out]) == 0
    assert main(["manifest", "create", str(checkpoint), "-o", out]) == 2  # exists, kept
    assert main(["manifest", "verify", str(checkpoint), out]) == 0
    (checkpoint / "config.json").write_text('{"layers": 3}')
    capsys.readouterr()
    assert main(["manifest", "verify", str(checkpoint), out]) == 1
    assert "config.json" in capsys.readouterr().err
    assert main(["manifest", "verify", str(checkpoint), out, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["mismatches"][0]["name"] == "config.json"


def test_orbax_data_replaced_behind_unchanged_metadata(tmp_path: Path) -> None:
    """The seed scenario: orbax cannot tell, restore() returns the new values, the manifest can."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    ocp = pytest.importorskip("orbax.checkpoint")
    original = {"w": np.arange(64, dtype=np.float32), "b": np.ones(4, np.float32)}
    forged = {"w": np.full(64, 13.0, np.float32), "b": np.ones(4, np.float32)}
    checkpointer = ocp.StandardCheckpointer()
    good, other = tmp_path / "good", tmp_path / "other"
    checkpointer.save(good, original)
    checkpointer.save(other, forged)
    checkpointer.wait_until_finished()
    manifest = tmp_path / "good.manifest.json"
    create_manifest(good, manifest)
    metadata_before = (good / "_METADATA").read_bytes()
    tree_before = checkpointer.metadata(good).item_metadata.tree

    # Replace the OCDBT data (manifest and data files) with the other checkpoint's; keep _METADATA.
    for entry in good.iterdir():
        if entry.name.startswith(("ocdbt.", "manifest.ocdbt", "d")) and entry.name not in ("_METADATA",):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    for entry in other.iterdir():
        if entry.name.startswith(("ocdbt.", "manifest.ocdbt", "d")):
            (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, good / entry.name)

    assert (good / "_METADATA").read_bytes() == metadata_before
    assert repr(checkpointer.metadata(good).item_metadata.tree) == repr(tree_before)  # orbax cannot tell
    restored = checkpointer.restore(good)
    np.testing.assert_array_equal(restored["w"], forged["w"])  # and loads the new values

    with pytest.raises(IntegrityError) as info:
        verify_manifest(good, manifest)
    named = {m.name for m in info.value.mismatches}
    assert "manifest.ocdbt" in named
    assert any(n.startswith(("d/", "ocdbt.process_0/d/")) for n in named)
    assert "_METADATA" not in named


@settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_manifest_reader(checkpoint: Path, tmp_path: Path, data: st.DataObject) -> None:
    """Mutated manifests give a format or integrity error, never another exception."""
    out = tmp_path / "fuzz.json"
    if not out.exists():
        create_manifest(checkpoint, out)
    raw = bytearray(out.read_bytes())
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    mutated = tmp_path / "mutated.json"
    mutated.write_bytes(bytes(raw))
    with contextlib.suppress(ContainerFormatError, IntegrityError):
        verify_manifest(checkpoint, mutated)


def test_one_symlink_is_one_mismatch_not_every_file_missing(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "m.json"
    create_manifest(checkpoint, out)
    os.symlink("config.json", checkpoint / "alias.json")
    report = verify_manifest(checkpoint, out, raise_on_failure=False)
    assert [(m.kind, m.name) for m in report.mismatches] == [("file", "alias.json")]
    assert report.files == 4
    assert main(["manifest", "verify", str(checkpoint), str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'alias.json'" in err and "symbolic link (not followed" in err
    assert verify_manifest(checkpoint, out, follow_symlinks=True, raise_on_failure=False).mismatches[0].name == "alias.json"


@pytest.mark.parametrize(
    "name", ["back\\slash.bin", "ctl\x01name.bin", "new\nline.bin", os.fsdecode(b"\xffnot-utf8.bin")],
    ids=["backslash", "control", "newline", "not-utf8"],
)
def test_a_file_whose_name_a_manifest_cannot_hold_is_a_mismatch(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    out = tmp_path / "m.json"
    create_manifest(checkpoint, out)
    (checkpoint / "shards" / name).write_bytes(b"added")
    report = verify_manifest(checkpoint, out, raise_on_failure=False)
    assert [(m.kind, m.name) for m in report.mismatches] == [("file", f"shards/{name}")]
    assert report.files == 4  # the other files were compared, and match
    # Was exit 2 ("manifest path ... is absolute or not '/'-separated"): an added file is a failed check.
    assert main(["manifest", "verify", str(checkpoint), str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and repr(f"shards/{name}") in err  # named safely: no raw control bytes
    assert main(["manifest", "verify", str(checkpoint), str(out), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["mismatches"][0]["name"] == f"shards/{name}"
    # Creating a manifest of such a directory is refused by name: the format cannot record it.
    with pytest.raises(ManifestPathError, match=re.escape(repr(f"shards/{name}"))):
        create_manifest(checkpoint, tmp_path / "m2.json")


@pytest.mark.parametrize("what", ["missing", "a file", "dev-zero manifest", "directory manifest"])
def test_verify_bad_input_is_exit_2(checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str) -> None:
    out = tmp_path / "m.json"
    create_manifest(checkpoint, out)
    directory, manifest = str(checkpoint), str(out)
    if what == "missing":
        directory = str(tmp_path / "nowhere")  # was exit 1, every file "missing"
    elif what == "a file":
        directory = str(checkpoint / "config.json")
    elif what == "dev-zero manifest":
        manifest = "/dev/zero"  # was 256 MiB read before the size check
    else:
        manifest = str(tmp_path)
    assert main(["manifest", "verify", directory, manifest]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sealtrace: error: ") and err.count("\n") == 1


def _old_tensor_digest(array: np.ndarray | bytes) -> str:
    """The per-tensor digest as manifests were written before streaming: np.load, C-order bytes.
    (A member np.load returns as bytes made that code fail with exit 3; its bytes are hashed now.)"""
    if isinstance(array, bytes):
        return hashlib.sha256(array).hexdigest()
    return hashlib.sha256(np.ascontiguousarray(array).tobytes() if array.size else b"").hexdigest()


@pytest.mark.parametrize("version", [1, 2])
def test_streamed_tensor_digests_keep_the_definition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    from sealtrace.container import manifest as manifests

    monkeypatch.setattr(manifests, "_BLOCK", 64)  # many small blocks and parts
    rng = np.random.default_rng(0)
    arrays = {
        "c": rng.standard_normal((5, 7, 3)).astype(np.float32),
        "fortran": np.asfortranarray(rng.standard_normal((5, 7, 3))),
        "fortran_be": np.asfortranarray(rng.integers(0, 9, (40, 3)).astype(">i4")),
        "column": np.asfortranarray(np.arange(10.0).reshape(10, 1)),
        "strings": np.asfortranarray(np.array([["ab", "cde"], ["f", "gh"]])),
        "scalar": np.array(3.5),
        "empty": np.zeros((0, 4)),
        "bool": np.asfortranarray(rng.integers(0, 2, (9, 9)).astype(bool)),
        "half": np.asfortranarray(rng.standard_normal((3, 30)).astype(np.float16)),
    }
    root = tmp_path / "arrays"
    root.mkdir()
    for name, array in arrays.items():
        np.save(root / f"{name}.npy", array)
    np.savez(root / "all.npz", **arrays)
    with zipfile.ZipFile(root / "all.npz", "a") as archive:  # members np.load returns as bytes
        archive.writestr("notes.txt", b"hello")
        archive.writestr("empty.bin", b"")
    out = tmp_path / "m.json"
    create_manifest(root, out, format_version=version)
    key = manifests.digest_key(version)  # format 2: the same digest for tensors of at most CHUNK_SIZE
    files = {f["path"]: f for f in json.loads(out.read_text())["manifest"]["files"]}
    for name in arrays:
        (tensor,) = files[f"{name}.npy"]["tensors"]
        assert tensor[key] == _old_tensor_digest(np.load(root / f"{name}.npy")), name
    with np.load(root / "all.npz") as archive:
        expected = [{"name": n, key: _old_tensor_digest(archive[n])} for n in sorted(archive.files)]
    tensors = [{"name": t["name"], key: t[key]} for t in files["all.npz"]["tensors"]]
    assert files["all.npz"]["format"] == "npz" and tensors == expected


def _forged_npy(path: Path, shape: tuple[int, ...]) -> None:
    header = {"descr": "<f4", "fortran_order": False, "shape": shape}
    with path.open("wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(b"\0" * 16)


@pytest.mark.parametrize("version", [1, 2])
def test_tensor_digests_stream_forged_and_bomb_files(tmp_path: Path, version: int) -> None:
    from sealtrace.container.manifest import digest_key

    root = tmp_path / "ckpt"
    root.mkdir()
    _forged_npy(root / "forged.npy", (10**6, 10**6))  # 10^12 elements in 144 bytes
    np.save(root / "big.npy", np.zeros(16 << 20, np.float32))  # 64 MiB, C order
    np.savez_compressed(root / "bomb.npz", z=np.zeros(64 << 20, np.uint8))  # 64 MiB from ~64 KiB
    assert (root / "bomb.npz").stat().st_size < 1 << 20
    out = tmp_path / "m.json"
    tracemalloc.start()
    try:
        create_manifest(root, out, format_version=version)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20  # blocks of 4 MiB per worker; np.load made a 64 MiB copy of each before
    files = {f["path"]: f for f in json.loads(out.read_text())["manifest"]["files"]}
    assert files["forged.npy"]["format"] is None and files["forged.npy"]["tensors"] == []
    key = digest_key(version)  # 64 MiB is one chunk of format 2: its digest is the plain sha256
    assert files["big.npy"]["tensors"][0][key] == hashlib.sha256(bytes(64 << 20)).hexdigest()
    assert [(t["name"], t[key]) for t in files["bomb.npz"]["tensors"]] == [("z", hashlib.sha256(bytes(64 << 20)).hexdigest())]


def test_a_fortran_array_over_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sealtrace.limits

    monkeypatch.setattr(sealtrace.limits, "_override", None)  # --memory-budget below outlives main()
    root = tmp_path / "ckpt"
    root.mkdir()
    np.save(root / "w.npy", np.asfortranarray(np.ones((512, 512), np.float32)))  # 1 MiB, read whole
    out = tmp_path / "m.json"
    assert main(["manifest", "create", str(root), "-o", str(out), "--memory-budget", "512KiB"]) == 2
    assert "Fortran-order array" in capsys.readouterr().err and not out.exists()
    sealtrace.limits.set_memory_budget(None)
    create_manifest(root, out)
    np.save(root / "w.npy", np.asfortranarray(np.full((512, 512), 2, np.float32)))
    # Verifying: the changed file is still a failed check (exit 1), listed without its tensors.
    assert main(["manifest", "verify", str(root), str(out), "--memory-budget", "512KiB"]) == 1
    err = capsys.readouterr().err
    assert "file 'w.npy'" in err and "its tensors are not listed" in err
    assert main(["manifest", "verify", str(root), str(out)]) == 1
    assert "tensor 'w.npy:w.npy'" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["create", "keygen", "seal", "unseal"])
def test_outputs_are_checked_before_any_work(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    option: str,
) -> None:
    from sealtrace.container import manifest as manifests

    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), model)
    sealed = tmp_path / "tiny.seal"
    assert main(["seal", str(model), "-o", str(sealed)]) == 0
    capsys.readouterr()

    def no_scan(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the directory was hashed before the output was checked")

    monkeypatch.setattr(manifests, "_scan", no_scan)
    missing = tmp_path / "nowhere" / "out.file"
    args = {
        "create": ["manifest", "create", str(checkpoint), "-o"],
        "keygen": ["keygen", "-o"],
        "seal": ["seal", str(model), "-o"],
        "unseal": ["unseal", str(sealed), "-o"],
    }[option]
    assert main([*args, str(missing)]) == 2
    assert capsys.readouterr().err == f"sealtrace: error: -o {missing}: directory {missing.parent} does not exist\n"
    assert main([*args, str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"sealtrace: error: -o {tmp_path}: is a directory\n"


def test_onnx_files_are_parsed_within_the_budget(checkpoint: Path, tmp_path: Path) -> None:
    from sealtrace.limits import BudgetExceededError, memory_budget_of

    onnx.save(tiny_model(), checkpoint / "model.onnx")
    size = (checkpoint / "model.onnx").stat().st_size
    out = tmp_path / "m.json"
    with memory_budget_of(size - 1), pytest.raises(BudgetExceededError, match=r"model\.onnx: ONNX file"):
        create_manifest(checkpoint, out)  # was read whole whatever its size
    create_manifest(checkpoint, out)
    (checkpoint / "config.json").write_text('{"layers": 3}')
    with memory_budget_of(size - 1):
        report = verify_manifest(checkpoint, out, raise_on_failure=False)
    assert [(m.kind, m.name) for m in report.mismatches] == [("file", "config.json")]
