"""Bound artifacts: compile, bind, check, and refuse every mismatch at load."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from sealtrace import Session
from sealtrace.binding import (
    BindingCheckError,
    BindingError,
    check_binding,
    compile_onnxruntime,
    read_binding,
)
from sealtrace.binding import bind as bind_artifact
from sealtrace.cli import main
from sealtrace.container import seal_model
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
    session.run(None, FEEDS, audit=log)
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
