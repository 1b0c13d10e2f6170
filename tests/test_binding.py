"""Bound artifacts: compile, bind, check, and refuse every mismatch at load."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from sealtrace import Session
from sealtrace.audit import audited_run
from sealtrace.binding import (
    BindingCheckError,
    BindingError,
    check_binding,
    read_binding,
)
from sealtrace.binding import bind as bind_artifact
from sealtrace.cli import main
from sealtrace.container import seal_model
from sealtrace.engines.onnxruntime import compile_onnxruntime
from sealtrace.errors import InputError
from sealtrace.signing import generate_keypair
from tests.parity.test_parity import FEEDS, conv_net


@pytest.fixture
def sealed(tmp_path: Path) -> dict[str, Path]:
    model = conv_net()
    other = onnx.ModelProto()
    other.CopyFrom(model)
    other.graph.node[-1].name = "renamed"  # any change makes it another container
    paths = {"seal": tmp_path / "net.seal", "other": tmp_path / "other.seal"}
    seal_model(model, paths["seal"])
    seal_model(other, paths["other"])
    paths["key"], paths["pub"] = generate_keypair(tmp_path / "signer.pem")
    paths["stranger"], paths["stranger_pub"] = generate_keypair(tmp_path / "stranger.pem")
    paths["artifact"] = tmp_path / "net.ort.onnx"
    compile_onnxruntime(paths["seal"], paths["artifact"], level="basic", sign_with=paths["key"])
    return paths


def test_compile_then_load_gives_the_sealed_models_outputs(sealed: dict[str, Path]) -> None:
    record = check_binding(sealed["artifact"], sealed["seal"], trust=[sealed["pub"]]).record
    assert record.transformation == "onnxruntime-graph-optimization" and record.backend == "onnxruntime"
    bound = Session(sealed["artifact"], backend="onnxruntime", container=sealed["seal"], trust=[sealed["pub"]])
    assert bound.origin.kind == "artifact" and bound.origin.container_digest == record.container_digest
    original = Session(sealed["seal"], backend="onnxruntime")
    np.testing.assert_array_equal(bound.run(None, FEEDS)[0], original.run(None, FEEDS)[0])
    # The reference backend runs the ORT-optimized (basic level: standard ops) artifact too.
    np.testing.assert_allclose(
        Session(sealed["artifact"], container=sealed["seal"]).run(None, FEEDS)[0],
        original.run(None, FEEDS)[0], atol=1e-5,
    )


def test_modified_artifact_is_refused(sealed: dict[str, Path]) -> None:
    model = onnx.load(sealed["artifact"])
    weight = model.graph.initializer[0]
    array = onnx.numpy_helper.to_array(weight).copy()
    array.flat[0] += 1
    weight.CopyFrom(onnx.numpy_helper.from_array(array, weight.name))
    onnx.save(model, sealed["artifact"])
    with pytest.raises(BindingCheckError, match="artifact modified"):
        Session(sealed["artifact"], container=sealed["seal"])


def test_artifact_with_another_container_is_refused(sealed: dict[str, Path]) -> None:
    with pytest.raises(BindingCheckError, match="bound to another container"):
        check_binding(sealed["artifact"], sealed["other"])


def test_edited_record_breaks_its_signature(sealed: dict[str, Path]) -> None:
    sidecar = Path(str(sealed["artifact"]) + ".binding.json")
    data = json.loads(sidecar.read_text())
    from sealtrace.container import verify_container

    # An attacker swaps in the other container's digest.
    data["container_digest"] = verify_container(sealed["other"]).digest
    sidecar.write_text(json.dumps(data))
    with pytest.raises(BindingCheckError) as info:
        check_binding(sealed["artifact"], sealed["other"], trust=[sealed["pub"]])
    assert info.value.failures == ["signature untrusted or invalid: no signature verifies with a trusted key"]


def test_untrusted_or_missing_signature(sealed: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(BindingCheckError, match="untrusted"):
        check_binding(sealed["artifact"], sealed["seal"], trust=[sealed["stranger_pub"]])
    unsigned = tmp_path / "unsigned.onnx"
    compile_onnxruntime(sealed["seal"], unsigned, level="basic")
    with pytest.raises(BindingCheckError, match="signature missing"):
        check_binding(unsigned, sealed["seal"], require_signature=True, trust=[sealed["pub"]])


def test_any_file_binds_through_a_sidecar(sealed: dict[str, Path], tmp_path: Path) -> None:
    engine = tmp_path / "model.engine"
    engine.write_bytes(b"\x00compiled bytes\x01" * 100)
    bind_artifact(engine, sealed["seal"], transformation="tensorrt-build", backend="tensorrt", backend_version="10")
    assert read_binding(engine).artifact_digest_scope == "file"
    assert check_binding(engine, sealed["seal"]).ok
    engine.write_bytes(engine.read_bytes() + b"!")
    with pytest.raises(BindingCheckError, match="artifact modified"):
        check_binding(engine, sealed["seal"])
    Path(str(engine) + ".binding.json").unlink()
    with pytest.raises(BindingError, match="no binding record"):
        check_binding(engine, sealed["seal"])


def test_backend_version_differs_warns_or_refuses(sealed: dict[str, Path]) -> None:
    check = check_binding(sealed["artifact"], sealed["seal"], current_backend_version="0.0.1")
    assert check.ok and "backend version differs" in check.warnings[0]
    with pytest.raises(BindingCheckError, match="backend version differs"):
        check_binding(sealed["artifact"], sealed["seal"], current_backend_version="0.0.1", strict=True)


def test_cli(sealed: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli.ort.onnx"
    assert main(["compile", str(sealed["seal"]), "-o", str(out), "--level", "extended"]) == 0
    assert main(["check-binding", str(out), "--container", str(sealed["seal"])]) == 0
    assert main(["check-binding", str(out), "--container", str(sealed["other"])]) == 1
    assert "bound to another container" in capsys.readouterr().err
    assert main(["compile", str(sealed["seal"]), "-o", str(out)]) == 2  # exists, no --force
    engine = tmp_path / "blob.bin"
    engine.write_bytes(b"blob")
    assert main(["bind", str(engine), "--to", str(sealed["seal"])]) == 0
    assert main(["check-binding", str(engine), "--container", str(sealed["seal"])]) == 0
    assert main(["check-binding", str(tmp_path / "missing.bin"), "--container", str(sealed["seal"])]) == 2


def test_audit_header_names_both_digests(sealed: dict[str, Path], tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    session = Session(sealed["artifact"], backend="onnxruntime", container=sealed["seal"])
    audited_run(session, FEEDS, audit=log)
    header = json.loads(log.read_text().splitlines()[0])
    model = header["model"]
    assert model["container_digest"] == session.origin.container_digest
    assert model["sha256"] == session.origin.sha256
    assert model["kind"] == "artifact"


def test_ort_only_artifact_runs_on_ort_and_is_refused_by_the_reference(sealed: dict[str, Path], tmp_path: Path) -> None:
    from sealtrace import build_plan
    from sealtrace.errors import UnsupportedError

    fused = tmp_path / "net.all.onnx"
    compile_onnxruntime(sealed["seal"], fused, level="all")
    if not build_plan(fused, require_kernels=False).unsupported:
        pytest.skip("ORT wrote no ORT-only operators for this model")
    bound = Session(fused, backend="onnxruntime", container=sealed["seal"])
    np.testing.assert_allclose(bound.run(None, FEEDS)[0], Session(sealed["seal"]).run(None, FEEDS)[0], atol=1e-5)
    with pytest.raises(UnsupportedError):
        Session(fused, container=sealed["seal"])


# --- issue 14: what a binding covers, what it reads, how it fails ---------------------------------


def _external_artifact(tmp_path: Path) -> tuple[Path, Path]:
    """An ONNX artifact whose weights live in an external data file beside it."""
    from tests.parity.test_parity import conv_net

    artifact = tmp_path / "ext.onnx"
    onnx.save(conv_net(), artifact, save_as_external_data=True, location="ext.onnx.data", size_threshold=0)
    return artifact, tmp_path / "ext.onnx.data"


def _edit_first_weight(data: Path) -> None:
    raw = bytearray(data.read_bytes())
    raw[0] ^= 0x40
    data.write_bytes(bytes(raw))


def test_signed_binding_covers_external_data(sealed: dict[str, Path], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    artifact, data = _external_artifact(tmp_path)
    trust = ["--trust", str(sealed["pub"]), "--require-signature"]
    assert main(["bind", str(artifact), "--to", str(sealed["seal"]), "--sign", str(sealed["key"])]) == 0
    assert read_binding(artifact).artifact_digest_scope == "file+external-data"
    assert main(["check-binding", str(artifact), "--container", str(sealed["seal"]), *trust]) == 0
    before = Session(artifact, container=sealed["seal"], trust=[sealed["pub"]]).run(None, FEEDS)[0]
    _edit_first_weight(data)
    capsys.readouterr()
    # Was "ok: unmodified" and the edited weights ran.
    assert main(["check-binding", str(artifact), "--container", str(sealed["seal"]), *trust]) == 1
    assert "artifact modified" in capsys.readouterr().err
    with pytest.raises(BindingCheckError, match="artifact modified"):
        Session(artifact, container=sealed["seal"], trust=[sealed["pub"]])
    assert main(["run", str(artifact), "--container", str(sealed["seal"]), "--random-inputs"]) == 1
    np.testing.assert_array_equal(before, Session(sealed["seal"]).run(None, FEEDS)[0])  # it ran before the edit


def test_record_that_does_not_cover_external_data_fails(sealed: dict[str, Path], tmp_path: Path) -> None:
    """A record of scope 'file' (what older sealtrace wrote for such artifacts) covers the .onnx only:
    it no longer passes for an artifact with external data."""
    artifact, _ = _external_artifact(tmp_path)
    record = bind_artifact(artifact, sealed["seal"], embed=False)
    old = {**record.to_json(), "artifact": {**record.to_json()["artifact"], "digest_scope": "file",
                                            "sha256": hashlib.sha256(artifact.read_bytes()).hexdigest()}}  # fmt: skip
    Path(f"{artifact}.binding.json").write_text(json.dumps(old))
    with pytest.raises(BindingCheckError, match="does not cover"):
        check_binding(artifact, sealed["seal"])


def test_records_of_artifacts_without_external_data_still_verify(sealed: dict[str, Path], tmp_path: Path) -> None:
    """The digest of an artifact without external data is what it always was."""
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"engine bytes")
    record = bind_artifact(engine, sealed["seal"], embed=False)
    assert record.artifact_digest_scope == "file"
    assert record.artifact_sha256 == hashlib.sha256(b"engine bytes").hexdigest()
    compiled = read_binding(sealed["artifact"])
    assert compiled.artifact_digest_scope == "onnx-without-binding"
    stripped = onnx.load(sealed["artifact"])
    del stripped.metadata_props[:]
    assert compiled.artifact_sha256 == hashlib.sha256(stripped.SerializeToString(deterministic=True)).hexdigest()
    assert check_binding(sealed["artifact"], sealed["seal"], trust=[sealed["pub"]]).ok


def test_bound_artifact_is_built_from_the_bytes_that_were_checked(sealed: dict[str, Path], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The artifact is swapped for another model after its digest was taken: what runs is still
    the checked model (it was read once), never the swapped one."""
    import sealtrace.binding as binding
    from sealtrace import build_plan

    checked_plan = build_plan(sealed["artifact"]).digest
    impostor = onnx.load(sealed["artifact"])
    weight = impostor.graph.initializer[0]
    weight.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(weight) * 2, weight.name))
    real_digest = binding._container_digest

    def swap_then_digest(container: str | Path) -> str:
        onnx.save(impostor, sealed["artifact"])  # between the check's read and any later read
        return real_digest(container)

    monkeypatch.setattr(binding, "_container_digest", swap_then_digest)
    session = Session(sealed["artifact"], container=sealed["seal"])
    assert session.plan.digest == checked_plan


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.update(options=None),
        lambda d: d.update(options=[1, 2]),
        lambda d: d.update(transformation=None),
        lambda d: d.update(created=12),
        lambda d: d.update(backend=["onnxruntime", "1"]),
        lambda d: d.update(backend={"name": None, "version": "1"}),
        lambda d: d["artifact"].update(name=7),
        lambda d: d.update(artifact="x"),
        lambda d: d.update(signatures={"a": 1}),
        lambda d: d.update(signatures=[{"algorithm": "ed25519", "key_id": 5, "signature": "00"}]),
        lambda d: d.update(signatures=[None]),
        lambda d: d.update(sealtrace_version=0.1),
        lambda d: d["options"].update(level=float("nan")),
    ],
)
def test_sidecar_fields_of_the_wrong_type_are_refused(sealed: dict[str, Path], edit: object,
                                                      capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    sidecar = Path(f"{sealed['artifact']}.binding.json")
    data = json.loads(sidecar.read_text())
    edit(data)  # type: ignore[operator]
    sidecar.write_text(json.dumps(data))
    with pytest.raises(BindingError):
        read_binding(sealed["artifact"])
    assert main(["check-binding", str(sealed["artifact"]), "--container", str(sealed["seal"])]) == 2
    assert capsys.readouterr().err.startswith("sealtrace: error:")


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"format": NaN}', '{"a": Infinity}', "\xff"])
def test_unparseable_sidecars_are_refused(sealed: dict[str, Path], text: str, capsys: pytest.CaptureFixture[str]) -> None:
    Path(f"{sealed['artifact']}.binding.json").write_text(text, encoding="latin-1")
    with pytest.raises(BindingError):
        read_binding(sealed["artifact"])
    assert main(["check-binding", str(sealed["artifact"]), "--container", str(sealed["seal"])]) == 2
    assert capsys.readouterr().err.startswith("sealtrace: error:")


def test_compile_refuses_an_existing_sidecar(sealed: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "fresh.onnx"
    sidecar = Path(f"{out}.binding.json")
    sidecar.write_text("mine")
    assert main(["compile", str(sealed["seal"]), "-o", str(out), "--level", "basic"]) == 2
    assert sidecar.read_text() == "mine" and not out.exists()  # nothing written, nothing replaced
    assert main(["compile", str(sealed["seal"]), "-o", str(out), "--level", "basic", "--force"]) == 0
    assert check_binding(out, sealed["seal"]).ok
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"blob")
    Path(f"{blob}.binding.json").write_text("mine too")
    assert main(["bind", str(blob), "--to", str(sealed["seal"])]) == 2
    assert Path(f"{blob}.binding.json").read_text() == "mine too"


def test_check_binding_failure_ends_with_the_error_line(sealed: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-binding", str(sealed["artifact"]), "--container", str(sealed["other"]),
                 "--trust", str(sealed["stranger_pub"])]) == 1  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert [line.split(":")[0] for line in err[:-1]] == ["FAILED", "FAILED"]  # the details stay
    assert err[-1].startswith("sealtrace: error:") and "binding check failed" in err[-1]


def test_trust_without_require_signature_refuses_an_untrusted_binding(sealed: dict[str, Path]) -> None:
    assert main(["run", str(sealed["artifact"]), "--container", str(sealed["seal"]), "--random-inputs",
                 "--trust", str(sealed["stranger_pub"])]) == 1  # fmt: skip
    assert main(["run", str(sealed["artifact"]), "--container", str(sealed["seal"]), "--random-inputs",
                 "--trust", str(sealed["pub"])]) == 0  # fmt: skip


def test_ok_lines_say_who_signed_the_binding(sealed: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    key_id = read_binding(sealed["artifact"]).signatures[0].key_id
    assert main(["check-binding", str(sealed["artifact"]), "--container", str(sealed["seal"])]) == 0
    assert f"signed by key {key_id} (signer not checked" in capsys.readouterr().out
    assert main(["run", str(sealed["artifact"]), "--container", str(sealed["seal"]), "--random-inputs",
                 "--trust", str(sealed["pub"])]) == 0  # fmt: skip
    assert f"binding signed by trusted key {key_id}" in capsys.readouterr().out


def test_a_fifo_or_device_artifact_is_refused_not_read_forever(sealed: dict[str, Path], tmp_path: Path) -> None:
    import os

    artifact = tmp_path / "zero.onnx"
    artifact.symlink_to("/dev/zero")
    Path(f"{artifact}.binding.json").write_text(Path(f"{sealed['artifact']}.binding.json").read_text())
    with pytest.raises(InputError, match="not a regular file"):
        check_binding(artifact, sealed["seal"])
    pipe = tmp_path / "pipe.bin"
    os.mkfifo(pipe)
    Path(f"{pipe}.binding.json").write_text(Path(f"{sealed['artifact']}.binding.json").read_text())
    with pytest.raises(InputError, match="not a regular file"):
        Session(pipe, container=sealed["seal"])
    Path(f"{sealed['artifact']}.binding.json").unlink()
    Path(f"{sealed['artifact']}.binding.json").symlink_to("/dev/zero")
    with pytest.raises(BindingError, match="not a regular file"):
        read_binding(sealed["artifact"])


def _nest(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("name", "text"),
    [
        # A key given twice: two readers could take different values (docs/binding.md).
        ("duplicate key", lambda d: json.dumps(d).replace('"format": ', '"format": "x", "format": ', 1).encode()),
        ("byte order mark", lambda d: b"\xef\xbb\xbf" + json.dumps(d).encode()),
        ("UTF-16", lambda d: json.dumps(d).encode("utf-16")),
        # 65 levels: the record (level 1), options (2), 63 lists holding the number.
        ("nested 65 deep", lambda d: json.dumps(dict(d, options={"a": _nest(63)})).encode()),
    ],
)
def test_sidecars_two_readers_could_read_differently_are_refused(sealed: dict[str, Path], name: str, text: object,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    sidecar = Path(f"{sealed['artifact']}.binding.json")
    sidecar.write_bytes(text(json.loads(sidecar.read_text())))  # type: ignore[operator]
    with pytest.raises(BindingError):
        read_binding(sealed["artifact"])
    assert main(["check-binding", str(sealed["artifact"]), "--container", str(sealed["seal"])]) == 2
    assert capsys.readouterr().err.startswith("sealtrace: error:")


def test_sidecar_nested_64_deep_is_read(sealed: dict[str, Path]) -> None:
    sidecar = Path(f"{sealed['artifact']}.binding.json")
    sidecar.write_text(json.dumps(dict(json.loads(sidecar.read_text()), options={"a": _nest(62)})))
    assert read_binding(sealed["artifact"]).options == {"a": _nest(62)}


def test_onnx_without_binding_covers_the_artifacts_bytes_not_its_parse(sealed: dict[str, Path]) -> None:
    """The digest is of the file's bytes with the binding entry cut out: moving a field (the same
    model once parsed and re-serialized) is a modified artifact. The record's own bytes inside the file
    are not covered (the sidecar is read first), so changing them is not."""
    data = sealed["artifact"].read_bytes()
    assert check_binding(sealed["artifact"], sealed["seal"]).ok
    # ir_version (field 1, the first record: tag 0x08 and a one-byte value) moved to the end.
    assert data[0] == 0x08 and data[1] < 0x80
    sealed["artifact"].write_bytes(data[2:] + data[:2])
    assert onnx.load_model_from_string(data[2:] + data[:2]) == onnx.load_model_from_string(data)
    result = check_binding(sealed["artifact"], sealed["seal"], raise_on_failure=False)
    assert [f.split(":")[0] for f in result.failures] == ["artifact modified"]
    embedded = data.index(b'"container_digest"')  # inside the embedded record's value
    sealed["artifact"].write_bytes(data[:embedded] + b"X" + data[embedded + 1:])
    assert check_binding(sealed["artifact"], sealed["seal"]).ok


def test_bytes_protobuf_takes_but_the_record_reader_refuses_are_bad_input(
    sealed: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The binding entry is cut out along protowire's strict records; should they ever refuse bytes
    # protobuf parsed, that is a typed error (exit 2), not an internal one.
    import sealtrace.binding
    from sealtrace.protowire import WireError

    def refuse(data: bytes) -> None:
        raise WireError("group ends with another field's end tag")

    monkeypatch.setattr(sealtrace.binding, "records", refuse)
    capsys.readouterr()
    assert main(["check-binding", str(sealed["artifact"]), "--container", str(sealed["seal"])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a well-formed protobuf message" in err, err
