"""OpenSSF model-signing interop, both ways, with the real ``model_signing`` package and ECDSA keys:
sealtrace's bundle verified by model_signing, model_signing's bundle verified by sealtrace, and a
tampered directory refused by both (sealtrace naming the tensor)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import time
from pathlib import Path

import model_signing
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import save_file

from sealtrace.cli import main
from sealtrace.signing import KeyFileError, load_public_key, load_verifying_key


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "Traceback" not in "\n".join(err), err
    return err[-1]


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    assert main(["keygen", "--algorithm", "ecdsa-p256", "-o", str(tmp_path / "ec.pem")]) == 0
    return tmp_path / "ec.pem", tmp_path / "ec.pub"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    (d / "sub").mkdir(parents=True)
    save_file({"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(5, np.float32)}, d / "model.safetensors")
    np.savez(d / "sub" / "opt.npz", m=np.zeros(4), v=np.arange(3))
    (d / "config.json").write_text('{"hidden": 4}\n')
    (d / "a.b").write_text("x")  # "a.b" sorts after "a/..." by path parts, before it as a string
    (d / "a").mkdir()
    (d / "a" / "c.txt").write_text("c")
    (d / ".gitignore").write_text("*.tmp\n")  # model-signing leaves git files out
    return d


def _ms_verify(directory: Path, signature: Path, public: Path) -> None:
    model_signing.verifying.Config().use_elliptic_key_verifier(public_key=public).verify(directory, signature)


def _statement(signature: Path) -> dict:
    bundle = json.loads(signature.read_text())
    return json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))


def _flip_tensor_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40  # inside the last tensor's bytes (safetensors: "w", the larger offset)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("shard_size", [None, 64])
def test_sealtrace_bundle_is_verified_by_model_signing(
    model: Path, keys: tuple[Path, Path], shard_size: int | None, capsys: pytest.CaptureFixture[str]
) -> None:
    private, public = keys
    signature = model / "model.sig"  # inside the directory: listed in ignore_paths, as model_signing does
    shard = ["--shard-size", str(shard_size)] if shard_size else []
    assert main(["manifest", "sign", str(model), "--key", str(private), "-o", str(signature), *shard]) == 0
    _ms_verify(model, signature, public)
    statement = _statement(signature)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://model_signing/signature/v1.0"
    predicate = statement["predicate"]
    assert "model.sig" in predicate["serialization"]["ignore_paths"]
    names = [r["name"] for r in predicate["resources"]]
    assert ".gitignore" not in names and not any(n.startswith("model.sig") for n in names)
    if shard_size:
        assert predicate["serialization"]["method"] == "shards"
        assert len([n for n in names if n.startswith("model.safetensors:")]) > 1
    else:
        assert names == ["a/c.txt", "a.b", "config.json", "model.safetensors", "sub/opt.npz"]
    tensors = {f["name"]: [t["name"] for t in f["tensors"]] for f in predicate["sealtrace"]["files"]}
    assert tensors == {"model.safetensors": ["b", "w"], "sub/opt.npz": ["m", "v"]}
    assert main(["manifest", "verify", str(model), str(signature), "--trust", str(public)]) == 0
    assert "OK" in capsys.readouterr().out


def test_model_signing_bundle_is_verified_by_sealtrace(model: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    private, public = keys
    signature = model.parent / "ms.sig"
    model_signing.signing.Config().use_elliptic_key_signer(private_key=private).sign(model, signature)
    assert main(["manifest", "verify", str(model), str(signature), "--trust", str(public)]) == 0
    assert "OK, 5 file(s)" in capsys.readouterr().out
    sharded = model.parent / "ms-shards.sig"
    config = model_signing.hashing.Config().use_shard_serialization(shard_size=100)
    model_signing.signing.Config().use_elliptic_key_signer(private_key=private).set_hashing_config(config).sign(model, sharded)
    assert main(["manifest", "verify", str(model), str(sharded), "--trust", str(public), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["signatures"] == [{"key_id": report["signatures"][0]["key_id"], "valid": True, "trusted": True}]


def test_tampered_directory_is_refused_by_both(model: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    private, public = keys
    ours, theirs = model.parent / "ours.sig", model.parent / "theirs.sig"
    assert main(["manifest", "sign", str(model), "--key", str(private), "-o", str(ours)]) == 0
    model_signing.signing.Config().use_elliptic_key_signer(private_key=private).sign(model, theirs)
    _flip_tensor_byte(model / "model.safetensors")
    for signature in (ours, theirs):
        with pytest.raises(ValueError, match=r"model\.safetensors"):
            _ms_verify(model, signature, public)
    capsys.readouterr()
    assert main(["manifest", "verify", str(model), str(ours), "--trust", str(public)]) == 1
    err = capsys.readouterr().err
    assert "MISMATCH file 'model.safetensors'" in err and "MISMATCH tensor 'model.safetensors:w'" in err
    assert "model.safetensors:b" not in err
    # model_signing's own bundle has no tensor digests: the file is named.
    assert main(["manifest", "verify", str(model), str(theirs), "--trust", str(public)]) == 1
    assert "model.safetensors" in _error_line(capsys)


def test_a_changed_npz_array_and_an_extra_file_are_named(model: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    private, public = keys
    signature = model.parent / "ours.sig"
    assert main(["manifest", "sign", str(model), "--key", str(private), "-o", str(signature)]) == 0
    np.savez(model / "sub" / "opt.npz", m=np.zeros(4), v=np.arange(3) + 1)
    (model / "extra.bin").write_bytes(b"\0")
    assert main(["manifest", "verify", str(model), str(signature), "--trust", str(public)]) == 1
    err = capsys.readouterr().err
    assert "MISMATCH tensor 'sub/opt.npz:v'" in err and "sub/opt.npz:m" not in err
    assert "MISMATCH file 'extra.bin'" in err


def test_another_key_and_a_forged_payload_fail(model: Path, keys: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    private, public = keys
    signature = tmp_path / "ours.sig"
    assert main(["manifest", "sign", str(model), "--key", str(private), "-o", str(signature)]) == 0
    assert main(["keygen", "--algorithm", "ecdsa-p384", "-o", str(tmp_path / "other.pem")]) == 0
    assert main(["manifest", "verify", str(model), str(signature), "--trust", str(tmp_path / "other.pub")]) == 1
    assert "not by a trusted one" in _error_line(capsys)
    bundle = json.loads(signature.read_text())
    statement = _statement(signature)
    statement["predicate"]["resources"][0]["digest"] = "0" * 64
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    signature.write_text(json.dumps(bundle))
    assert main(["manifest", "verify", str(model), str(signature), "--trust", str(public)]) == 1
    assert "signature is not valid" in _error_line(capsys)


def test_bad_keys_are_bad_input(model: Path, keys: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    private, public = keys
    assert main(["keygen", "-o", str(tmp_path / "ed.pem")]) == 0
    assert main(["manifest", "sign", str(model), "--key", str(tmp_path / "ed.pem"), "-o", str(tmp_path / "x.sig")]) == 2
    assert "ECDSA keys only" in _error_line(capsys)
    assert main(["manifest", "sign", str(model), "--key", str(private), "-o", str(tmp_path / "x.sig"), "--shard-size", "0"]) == 2
    assert "--shard-size" in _error_line(capsys)
    assert not (tmp_path / "x.sig").exists()
    # One loader reads both kinds; sealtrace's own Ed25519 signatures refuse an ECDSA key by name.
    assert load_verifying_key(public).curve.name == "secp256r1"  # type: ignore[union-attr]
    with pytest.raises(KeyFileError, match="an ECDSA key"):
        load_public_key(public)


def test_onnx_external_data_tensors_are_named(tmp_path: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    private, public = keys
    d = tmp_path / "onnx"
    d.mkdir()
    weights = [numpy_helper.from_array(np.full((4,), i, np.float32), name) for i, name in enumerate(("W", "B"))]
    graph = helper.make_graph(
        [helper.make_node("Add", ["W", "B"], ["y"])], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        initializer=weights,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, d / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True, location="m.data", size_threshold=0)
    signature = tmp_path / "m.sig"
    assert main(["manifest", "sign", str(d), "--key", str(private), "-o", str(signature)]) == 0
    _ms_verify(d, signature, public)
    data = bytearray((d / "m.data").read_bytes())
    data[-1] ^= 0x01  # the last tensor stored: "B"
    (d / "m.data").write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["manifest", "verify", str(d), str(signature), "--trust", str(public)]) == 1
    err = capsys.readouterr().err
    assert "MISMATCH tensor 'm.data:B'" in err and "m.data:W" not in err
    with pytest.raises(ValueError, match=r"m\.data"):
        _ms_verify(d, signature, public)
    assert main(["manifest", "verify", str(d), str(signature), "--trust", str(public), "--exact-files"]) == 2
    assert "sealtrace manifests only" in _error_line(capsys)


def test_an_orbax_checkpoint_names_the_changed_array(tmp_path: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tensorstore")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    ocp = pytest.importorskip("orbax.checkpoint")
    private, public = keys
    checkpointer = ocp.PyTreeCheckpointer()
    checkpointer.save(tmp_path / "good", {"w": np.arange(12, dtype=np.float32).reshape(4, 3), "b": np.arange(5)})
    checkpointer.save(tmp_path / "forged", {"w": np.full((4, 3), 999.0, np.float32), "b": np.arange(5)})
    good, signature = tmp_path / "good", tmp_path / "ckpt.sig"
    assert main(["manifest", "sign", str(good), "--key", str(private), "-o", str(signature)]) == 0
    _ms_verify(good, signature, public)
    assert [a["name"] for s in _statement(signature)["predicate"]["sealtrace"]["arrays"] for a in s["arrays"]] == ["b", "w"]
    for name in ("d", "manifest.ocdbt", "ocdbt.process_0"):  # the OCDBT data of another save, _METADATA kept
        shutil.rmtree(good / name) if (good / name).is_dir() else (good / name).unlink()
        source = tmp_path / "forged" / name
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, good / name)
    capsys.readouterr()
    assert main(["manifest", "verify", str(good), str(signature), "--trust", str(public)]) == 1
    err = capsys.readouterr().err
    assert "MISMATCH array 'w'" in err and "array 'b'" not in err
    with pytest.raises(ValueError, match="Signature mismatch"):
        _ms_verify(good, signature, public)


def test_a_fifo_as_the_signature_is_refused_unopened(model: Path, keys: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "model.sig"
    os.mkfifo(fifo)  # opening it to tell a bundle from a manifest would wait for a writer forever
    assert main(["manifest", "verify", str(model), str(fifo), "--trust", str(keys[1])]) == 2
    _error_line(capsys)


def test_a_link_planted_in_the_directory_fails_the_check(model: Path, keys: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    private, public = keys
    signature = tmp_path / "ours.sig"
    assert main(["manifest", "sign", str(model), "--key", str(private), "-o", str(signature)]) == 0
    (model / "link").symlink_to(model / "config.json")
    assert main(["manifest", "verify", str(model), str(signature), "--trust", str(public)]) == 1
    assert "'link'" in _error_line(capsys)
    # Signing refuses it (model-signing too, without allow_symlinks): bad input.
    assert main(["manifest", "sign", str(model), "--key", str(private), "-o", str(tmp_path / "x.sig")]) == 2
    assert "symbolic link" in _error_line(capsys)


def test_only_checks_a_subset_and_says_the_check_is_partial(model: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    private, public = keys
    signature = model.parent / "ours.sig"
    assert main(["manifest", "sign", str(model), "--key", str(private), "-o", str(signature)]) == 0
    (model / "sub" / "opt.npz").unlink()  # a subset downloaded: what is not there is not checked
    (model / "a.b").write_text("changed, but not checked")
    capsys.readouterr()
    args = ["manifest", "verify", str(model), str(signature), "--trust", str(public), "--only", "model.*", "--only", "config.json"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "PARTIAL OK, 2 of 5 signed file(s)" in out and "not checked: sub/opt.npz" in out and "not checked: a.b" in out
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["partial"] and report["unchecked"] == ["a.b", "a/c.txt", "sub/opt.npz"]
    _flip_tensor_byte(model / "model.safetensors")
    assert main(args) == 1
    assert "MISMATCH tensor 'model.safetensors:w'" in capsys.readouterr().err
    # A pattern that matches no signed file is a typo, not a check of nothing.
    assert main(["manifest", "verify", str(model), str(signature), "--trust", str(public), "--only", "model-*"]) == 2
    assert "matches no file" in _error_line(capsys)


def test_only_still_checks_the_whole_signed_statement(model: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    private, public = keys
    signature = model.parent / "ours.sig"
    assert main(["manifest", "sign", str(model), "--key", str(private), "-o", str(signature)]) == 0
    bundle = json.loads(signature.read_text())
    statement = _statement(signature)
    statement["predicate"]["resources"][0]["digest"] = "0" * 64  # a file --only leaves out
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    signature.write_text(json.dumps(bundle))
    assert main(["manifest", "verify", str(model), str(signature), "--trust", str(public), "--only", "config.json"]) == 1
    assert "signature is not valid" in _error_line(capsys)


def test_ignore_unsigned_files_matches_model_signing(model: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    private, public = keys
    signature = model.parent / "theirs.sig"
    model_signing.signing.Config().use_elliptic_key_signer(private_key=private).sign(model, signature)
    (model / "README.md").write_text("added after signing")
    verifier = model_signing.verifying.Config().use_elliptic_key_verifier(public_key=public)
    verifier.set_ignore_unsigned_files(True).verify(model, signature)
    capsys.readouterr()
    assert main(["manifest", "verify", str(model), str(signature), "--trust", str(public), "--ignore_unsigned_files"]) == 0
    assert "ignored, not signed: README.md" in capsys.readouterr().out
    assert main(["manifest", "verify", str(model), str(signature), "--trust", str(public)]) == 1
    (model / "config.json").unlink()  # a signed file missing still fails, as with model-signing
    with pytest.raises(ValueError):
        verifier.verify(model, signature)
    assert main(["manifest", "verify", str(model), str(signature), "--trust", str(public), "--ignore-unsigned-files"]) == 1
    assert "config.json" in _error_line(capsys)


@pytest.fixture
def quick_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files made by a test are cached once they are 50 ms old, not 2 s (the racy window)."""
    monkeypatch.setattr("sealtrace.provenance.hashcache.RACY_NS", 50_000_000)
    time.sleep(0.1)


def _rewrite_same_size_and_mtime(path: Path) -> None:
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # only ctime tells the change
    assert path.stat().st_mtime_ns == before.st_mtime_ns and path.stat().st_size == before.st_size


def test_signing_with_a_cache_rereads_only_changed_files(
    model: Path, keys: tuple[Path, Path], tmp_path: Path, quick_cache: None, capsys: pytest.CaptureFixture[str]
) -> None:
    private, public = keys
    cache = tmp_path / "hash.cache"
    sign = ["manifest", "sign", str(model), "--key", str(private), "--cache", str(cache), "--shard-size", "64", "-o"]
    assert main([*sign, str(tmp_path / "first.sig")]) == 0
    assert "5 file(s), 0 from the hash cache" in capsys.readouterr().out
    assert cache.stat().st_mode & 0o777 == 0o600
    _rewrite_same_size_and_mtime(model / "model.safetensors")
    assert main([*sign, str(tmp_path / "second.sig")]) == 0
    assert "5 file(s), 4 from the hash cache" in capsys.readouterr().out
    _ms_verify(model, tmp_path / "second.sig", public)  # the reused digests and the fresh one are right
    with pytest.raises(ValueError, match=r"model\.safetensors"):
        _ms_verify(model, tmp_path / "first.sig", public)
    # The same bundle as a signing without the cache (ECDSA signatures differ; the statements do not).
    assert main(["manifest", "sign", str(model), "--key", str(private), "--shard-size", "64", "-o", str(tmp_path / "full.sig")]) == 0
    assert _statement(tmp_path / "second.sig") == _statement(tmp_path / "full.sig")


def test_verifying_with_a_cache_names_a_change_only_ctime_shows(
    model: Path, keys: tuple[Path, Path], tmp_path: Path, quick_cache: None, capsys: pytest.CaptureFixture[str]
) -> None:
    private, public = keys
    signature, cache = tmp_path / "ours.sig", tmp_path / "hash.cache"
    assert main(["manifest", "sign", str(model), "--key", str(private), "-o", str(signature)]) == 0
    verify = ["manifest", "verify", str(model), str(signature), "--trust", str(public), "--cache", str(cache)]
    assert main(verify) == 0 and main(verify) == 0
    assert "OK, 5 file(s) (5 from the hash cache)" in capsys.readouterr().out.splitlines()[-1]
    _rewrite_same_size_and_mtime(model / "model.safetensors")
    assert main(verify) == 1
    assert "MISMATCH tensor 'model.safetensors:w'" in capsys.readouterr().err


def test_a_cache_others_can_write_is_refused(model: Path, keys: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    private, _ = keys
    cache = tmp_path / "hash.cache"
    assert main(["manifest", "sign", str(model), "--key", str(private), "--cache", str(cache), "-o", str(tmp_path / "a.sig")]) == 0
    cache.chmod(0o666)
    assert main(["manifest", "sign", str(model), "--key", str(private), "--cache", str(cache), "-o", str(tmp_path / "b.sig")]) == 2
    assert "no one else can write" in _error_line(capsys)
    cache.chmod(0o600)
    other = tmp_path / "other"
    other.mkdir()
    assert main(["manifest", "sign", str(other), "--key", str(private), "--cache", str(cache), "-o", str(tmp_path / "c.sig")]) == 2
    assert "one cache per directory" in _error_line(capsys)


def _sharded_set(d: Path, shards: dict[str, dict[str, np.ndarray]], weight_map: dict[str, str] | None = None) -> None:
    d.mkdir(exist_ok=True)
    for name, tensors in shards.items():
        save_file(tensors, d / name)
    weight_map = weight_map or {t: name for name, tensors in shards.items() for t in tensors}
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def test_sharded_safetensors_name_the_tensor_across_the_set(tmp_path: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    private, public = keys
    first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    a, b, c = np.ones(4, np.float32), np.arange(4, dtype=np.float32), np.full(3, 7.0, np.float32)
    d, signature = tmp_path / "sharded", tmp_path / "sharded.sig"
    _sharded_set(d, {first: {"a": a, "b": b}, second: {"c": c}})
    assert main(["manifest", "sign", str(d), "--key", str(private), "-o", str(signature)]) == 0
    _ms_verify(d, signature, public)
    assert _statement(signature)["predicate"]["sealtrace"]["safetensors_sets"] == [
        {"index": "model.safetensors.index.json", "weight_map": {"a": first, "b": first, "c": second}}
    ]
    verify = ["manifest", "verify", str(d), str(signature), "--trust", str(public)]
    # A tensor moved to the other shard, the index updated to match: named once, as moved.
    _sharded_set(d, {first: {"a": a}, second: {"b": b, "c": c}})
    capsys.readouterr()
    assert main(verify) == 1
    err = capsys.readouterr().err
    assert f"MISMATCH tensor '{first}:b'" in err and f"moved to {second}" in err and "(values unchanged)" in err
    assert "MISMATCH weight_map 'model.safetensors.index.json:b'" in err and f"{second}:b" not in err
    # The files as signed, the index edited: the entry that changed, and that the files disagree.
    _sharded_set(d, {first: {"a": a, "b": b}, second: {"c": c}}, {"a": second, "b": first, "c": second})
    assert main(verify) == 1
    err = capsys.readouterr().err
    assert f"MISMATCH weight_map 'model.safetensors.index.json:a': expected in {first}, found in {second}" in err
    assert f"held by {first}" in err and "tensor '" not in err
    # A changed value in the second shard: the tensor with its file.
    _sharded_set(d, {first: {"a": a, "b": b}, second: {"c": c + 1}})
    assert main(verify) == 1
    err = capsys.readouterr().err
    assert f"MISMATCH tensor '{second}:c'" in err and "weight_map" not in err


def test_a_damaged_cache_entry_is_read_again_not_signed(
    model: Path, keys: tuple[Path, Path], tmp_path: Path, quick_cache: None, capsys: pytest.CaptureFixture[str]
) -> None:
    private, public = keys
    cache = tmp_path / "hash.cache"
    sign = ["manifest", "sign", str(model), "--key", str(private), "--cache", str(cache), "-o"]
    assert main([*sign, str(tmp_path / "first.sig")]) == 0
    document = json.loads(cache.read_text())
    first, second = sorted(document["entries"])[:2]
    document["entries"][first]["sha256"] = 5
    document["entries"][second]["size"] += 1
    cache.write_text(json.dumps(document))
    capsys.readouterr()
    assert main([*sign, str(tmp_path / "second.sig")]) == 0
    assert "5 file(s), 3 from the hash cache" in capsys.readouterr().out
    _ms_verify(model, tmp_path / "second.sig", public)
