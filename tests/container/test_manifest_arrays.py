"""Format 3 manifests: each checkpoint array by name, dtype, shape and value digest, so a tamper
names the array (the orbax gap: OCDBT data replaced under an unchanged _METADATA) and a re-save of
identical values (other files, other names) is a re-layout, not a failure."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from sealtrace.cli import main
from sealtrace.container.manifest import create_manifest, verify_manifest
from sealtrace.container.manifest_arrays import ArraySetError
from sealtrace.jsonschemas import load_schema, validator
from sealtrace.limits import BudgetExceededError, memory_budget_of

ORIGINAL = {"w": np.arange(12, dtype=np.float32).reshape(4, 3), "b": {"bias": np.arange(5, dtype=np.int32)}}


def _needed(module: str, extra: str) -> None:
    """Skip where ``module`` is not installed; in CI (which installs the dev extra) fail instead."""
    try:
        __import__(module)
    except ImportError:
        reason = f"{module} is not installed (pip install 'sealtrace[{extra}]')"
        if os.environ.get("CI"):
            pytest.fail(f"needed in CI: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def orbax_saves(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Orbax OCDBT checkpoints: 'good', a re-save of the same values, 'forged' (w = 999), and two
    CheckpointManager saves of the same values at step 1 ('managed', 'managed-again')."""
    _needed("tensorstore", "checkpoints")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    _needed("orbax.checkpoint", "dev")
    import orbax.checkpoint as ocp

    root = tmp_path_factory.mktemp("orbax")
    forged = {"w": np.full((4, 3), 999.0, np.float32), "b": ORIGINAL["b"]}
    saves = {"good": ORIGINAL, "resaved": ORIGINAL, "forged": forged}
    checkpointer = ocp.PyTreeCheckpointer()
    for name, tree in saves.items():
        checkpointer.save(root / name, tree)
    for name in ("managed", "managed-again"):
        with ocp.CheckpointManager(root / name) as manager:
            manager.save(1, args=ocp.args.StandardSave(ORIGINAL))
            manager.wait_until_finished()
    return {name: root / name for name in [*saves, "managed", "managed-again"]}


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def test_orbax_tamper_under_unchanged_metadata_names_the_array(
    orbax_saves: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = _copy(orbax_saves["good"], tmp_path / "good")
    manifest = tmp_path / "good.manifest.json"
    create_manifest(good, manifest)
    metadata = (good / "_METADATA").read_bytes()
    for name in ("d", "manifest.ocdbt", "ocdbt.process_0"):  # the OCDBT data of the forged save
        shutil.rmtree(good / name) if (good / name).is_dir() else (good / name).unlink()
        source = orbax_saves["forged"] / name
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, good / name)
    assert (good / "_METADATA").read_bytes() == metadata

    report = verify_manifest(good, manifest, raise_on_failure=False)
    assert not report.ok
    first = report.mismatches[0]
    assert (first.kind, first.name) == ("array", "w")
    assert first.expected.startswith("float32 [4, 3] digest ")
    assert [m.name for m in report.mismatches if m.kind == "array"] == ["w"]  # b.bias is unchanged
    assert main(["manifest", "verify", str(good), str(manifest)]) == 1
    assert "MISMATCH array 'w'" in capsys.readouterr().err


def test_orbax_resave_of_identical_values_is_a_relayout(
    orbax_saves: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "good.manifest.json"
    create_manifest(orbax_saves["good"], manifest)
    resaved = orbax_saves["resaved"]
    report = verify_manifest(resaved, manifest)
    assert report.ok and report.arrays == 2
    changed = {m.name for m in report.relaid_out}
    assert "manifest.ocdbt" in changed and any(n.startswith("ocdbt.process_0/d/") for n in changed)
    assert main(["manifest", "verify", str(resaved), str(manifest)]) == 0
    assert "files re-laid out, every array's values unchanged" in capsys.readouterr().out
    assert main(["manifest", "verify", str(resaved), str(manifest), "--exact-files"]) == 1


def test_checkpoint_manager_resave_is_a_relayout(orbax_saves: dict[str, Path], tmp_path: Path) -> None:
    """A step directory (1/default/ the item, 1/_CHECKPOINT_METADATA with the save's timestamps)."""
    manifest = tmp_path / "managed.manifest.json"
    create_manifest(orbax_saves["managed"], manifest)
    document = json.loads(manifest.read_text())
    assert [(s["path"], s["kind"]) for s in document["manifest"]["arrays"]] == [("1/default", "orbax-ocdbt")]
    report = verify_manifest(orbax_saves["managed-again"], manifest)
    assert report.ok and "1/_CHECKPOINT_METADATA" in {m.name for m in report.relaid_out}


def test_orbax_array_read_in_slabs_has_the_documented_digest(
    orbax_saves: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read 8 bytes at a time, w's digest is still the sha256 of its values' bytes in C order."""
    from sealtrace.container import manifest_arrays

    monkeypatch.setattr(manifest_arrays, "_SLAB", 8)
    create_manifest(orbax_saves["good"], tmp_path / "m.json")
    (arrays,) = [s["arrays"] for s in json.loads((tmp_path / "m.json").read_text())["manifest"]["arrays"]]
    assert {a["name"]: a["digest"] for a in arrays} == {
        "w": hashlib.sha256(ORIGINAL["w"].tobytes()).hexdigest(),
        "b.bias": hashlib.sha256(ORIGINAL["b"]["bias"].tobytes()).hexdigest(),
    }


def test_without_tensorstore(orbax_saves: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Creating needs it (exit 2 naming the extra); an unchanged checkpoint verifies without it."""
    manifest = tmp_path / "m.json"
    create_manifest(orbax_saves["good"], manifest)
    monkeypatch.setitem(sys.modules, "tensorstore", None)  # import tensorstore raises ImportError
    assert verify_manifest(orbax_saves["good"], manifest).ok
    assert main(["manifest", "create", str(orbax_saves["good"]), "-o", str(tmp_path / "again.json")]) == 2
    with pytest.raises(ArraySetError, match=r"sealtrace\[checkpoints\]"):
        verify_manifest(orbax_saves["resaved"], manifest)


def test_orbax_metadata_change_is_not_a_relayout(orbax_saves: dict[str, Path], tmp_path: Path) -> None:
    """_METADATA is the tree orbax restores: a change to it is a change, whatever the arrays."""
    good = _copy(orbax_saves["good"], tmp_path / "good")
    manifest = tmp_path / "good.manifest.json"
    create_manifest(good, manifest)
    metadata = json.loads((good / "_METADATA").read_text())
    metadata["tree_metadata"]["('w',)"]["value_metadata"]["skip_deserialize"] = True
    (good / "_METADATA").write_text(json.dumps(metadata))
    report = verify_manifest(good, manifest, raise_on_failure=False)
    assert [(m.kind, m.name) for m in report.mismatches] == [("file", "_METADATA")]


def test_orbax_array_over_the_memory_budget_is_refused(orbax_saves: dict[str, Path], tmp_path: Path) -> None:
    with memory_budget_of(16), pytest.raises(BudgetExceededError, match=r"array 'b\.bias'"):
        create_manifest(orbax_saves["good"], tmp_path / "m.json")


def _save_shards(directory: Path, shards: list[list[str]], tensors: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    directory.mkdir()
    weight_map = {}
    for i, names in enumerate(shards, 1):
        shard = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file({n: tensors[n] for n in names}, directory / shard)
        weight_map.update(dict.fromkeys(names, shard))
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors.values())}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))


TENSORS = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(4, np.float32), "e": np.zeros((2, 2), np.float16)}


def test_sharded_safetensors_reshard_and_tamper(tmp_path: Path) -> None:
    _needed("safetensors", "dev")
    _save_shards(tmp_path / "two", [["w", "b"], ["e"]], TENSORS)
    manifest = tmp_path / "m.json"
    create_manifest(tmp_path / "two", manifest)

    _save_shards(tmp_path / "three", [["w"], ["b"], ["e"]], TENSORS)
    report = verify_manifest(tmp_path / "three", manifest)
    assert report.ok and report.arrays == 3
    assert {m.name for m in report.relaid_out} >= {"model-00001-of-00002.safetensors", "model.safetensors.index.json"}

    forged = dict(TENSORS, w=TENSORS["w"] + 1)
    _save_shards(tmp_path / "forged", [["w"], ["b", "e"]], forged)
    report = verify_manifest(tmp_path / "forged", manifest, raise_on_failure=False)
    assert [m.name for m in report.mismatches if m.kind == "array"] == ["w"]
    assert report.relaid_out == []


def test_npz_resave_and_tamper(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    directory.mkdir()
    np.savez(directory / "weights.npz", **TENSORS)
    manifest = tmp_path / "m.json"
    create_manifest(directory, manifest)

    np.savez_compressed(directory / "weights.npz", **TENSORS)  # other bytes, the same arrays
    report = verify_manifest(directory, manifest)
    assert report.ok and [m.name for m in report.relaid_out] == ["weights.npz"]

    np.savez(directory / "weights.npz", **dict(TENSORS, e=np.ones((2, 2), np.float16)))
    report = verify_manifest(directory, manifest, raise_on_failure=False)
    assert (report.mismatches[0].kind, report.mismatches[0].name) == ("array", "weights.npz:e")


def test_plain_file_change_still_fails_beside_a_relayout(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    directory.mkdir()
    np.savez(directory / "weights.npz", **TENSORS)
    (directory / "config.json").write_text("{}")
    manifest = tmp_path / "m.json"
    create_manifest(directory, manifest)
    np.savez_compressed(directory / "weights.npz", **TENSORS)
    (directory / "config.json").write_text('{"layers": 2}')
    report = verify_manifest(directory, manifest, raise_on_failure=False)
    assert [m.name for m in report.mismatches] == ["config.json"]
    assert [m.name for m in report.relaid_out] == ["weights.npz"]


def test_format_3_schema_and_older_formats_still_verify(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    directory.mkdir()
    np.savez(directory / "weights.npz", **TENSORS)
    for version in (1, 2, 3):
        manifest = tmp_path / f"v{version}.json"
        create_manifest(directory, manifest, format_version=version)
        validator(load_schema("container-manifest.schema.json")).validate(json.loads(manifest.read_text()))
        assert verify_manifest(directory, manifest).ok
    document = json.loads((tmp_path / "v3.json").read_text())
    assert document["manifest"]["arrays"][0]["arrays"][0] == {
        "name": "b", "dtype": "<f4", "shape": [4], "digest": hashlib.sha256(TENSORS["b"].tobytes()).hexdigest()
    }  # fmt: skip
