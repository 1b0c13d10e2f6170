"""A log is linked to its model (container digest or ONNX sha256), its inputs and its signer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from sealtrace.audit import verify_log
from sealtrace.audit.linkage import identify_model
from sealtrace.container import seal_model
from sealtrace.signing import generate_keypair
from tests.audit.conftest import MLP_INPUT, mlp_model


def problems(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(p) for p in result.problems]


def test_log_from_onnx_file_links_to_that_file_and_input(mlp_path: Path, mlp_log: Path, tmp_path: Path) -> None:
    assert verify_log(mlp_log, model=mlp_path, inputs=MLP_INPUT).ok
    other = tmp_path / "other.onnx"
    onnx.save(mlp_model(scale=2.0), other)
    result = verify_log(mlp_log, model=other)
    assert problems(result) == [
        f"line 1: recorded from ONNX file sha256 {identify_model(mlp_path).digest}, "
        f"but {other} has ONNX file sha256 {identify_model(other).digest}"
    ]


def test_wrong_input_fails(mlp_log: Path) -> None:
    wrong = {"x": MLP_INPUT["x"] + np.float32(1e-6)}
    result = verify_log(mlp_log, inputs=wrong)
    assert len(result.problems) == 1
    assert result.problems[0].line == 1 and "input 'x'" in result.problems[0].message
    unknown = verify_log(mlp_log, inputs={"nope": MLP_INPUT["x"]})
    assert "not an input of the logged run" in problems(unknown)[0]
    # Same values, other dtype: another tensor.
    assert not verify_log(mlp_log, inputs={"x": MLP_INPUT["x"].astype(np.float64)}).ok


def test_log_from_container_links_to_the_container(
    mlp_path: Path, record_log: Callable[..., Path], tmp_path: Path
) -> None:
    sealed = tmp_path / "mlp.seal"
    info = seal_model(mlp_path, sealed)
    log = record_log(sealed)
    result = verify_log(log, model=sealed, inputs=MLP_INPUT)
    assert result.ok, problems(result)
    assert result.header is not None and result.header["model"]["container_digest"] == info.digest
    # Another container, and the ONNX file the container was sealed from, are not this model.
    onnx.save(mlp_model(scale=2.0), tmp_path / "other.onnx")
    other = tmp_path / "other.seal"
    seal_model(tmp_path / "other.onnx", other)
    for wrong in (other, mlp_path):
        result = verify_log(log, model=wrong)
        assert len(result.problems) == 1 and result.problems[0].line == 1
        assert f"recorded from container digest {info.digest}" in result.problems[0].message


def test_signature(mlp_path: Path, record_log: Callable[..., Path], tmp_path: Path) -> None:
    private, public = generate_keypair(tmp_path / "signer.pem")
    _, stranger = generate_keypair(tmp_path / "stranger.pem")
    signed = record_log(mlp_path, sign_key=private)
    good = verify_log(signed, trust=public)
    assert good.ok and good.signature_valid and good.signed_by
    unchecked = verify_log(signed)
    assert unchecked.ok and unchecked.signature_valid is None and "not checked" in unchecked.notes[0]
    bad = verify_log(signed, trust=stranger)
    assert not bad.ok and "not valid for the trusted key" in problems(bad)[0]
    unsigned = record_log(mlp_path)
    assert "not signed" in problems(verify_log(unsigned, trust=public))[0]


def test_missing_log_is_bad_input(tmp_path: Path) -> None:
    from sealtrace.errors import InputError

    with pytest.raises(InputError, match="no such file"):
        verify_log(tmp_path / "absent.jsonl")


def test_log_links_to_the_external_data_of_an_onnx_model(record_log: Callable[..., Path], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """The identity of an ONNX model covers its external data: edit the .data file after an audited
    run and the log is no longer linked to it (it was, as only the .onnx was hashed)."""
    import hashlib

    from sealtrace.cli import main

    model = tmp_path / "ext.onnx"
    onnx.save(mlp_model(), model, save_as_external_data=True, location="ext.onnx.data", size_threshold=0)
    log = record_log(model)
    assert verify_log(log, model=model).ok
    assert identify_model(model).digest != hashlib.sha256(model.read_bytes()).hexdigest()
    data = tmp_path / "ext.onnx.data"
    raw = bytearray(data.read_bytes())
    raw[0] ^= 0x40
    data.write_bytes(bytes(raw))
    result = verify_log(log, model=model)
    assert len(result.problems) == 1 and "recorded from" in problems(result)[0]
    assert main(["audit", "verify", str(log), "--container", str(model)]) == 1


def test_old_logs_of_models_without_external_data_still_link(mlp_path: Path, mlp_log: Path) -> None:
    """Without external data the identity is the file's sha256, as logs have always named it."""
    import hashlib
    import json

    header = json.loads(mlp_log.read_text().splitlines()[0])
    assert header["model"]["sha256"] == hashlib.sha256(mlp_path.read_bytes()).hexdigest()
    assert verify_log(mlp_log, model=mlp_path).ok


def test_log_of_a_bound_artifact_verifies_and_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """model.kind = "artifact" is in the schema: verify and replay of such logs used to exit 1."""
    from sealtrace.cli import main
    from sealtrace.engines.onnxruntime import compile_onnxruntime
    from tests.audit.conftest import mlp_model as make

    source = tmp_path / "mlp.onnx"
    onnx.save(make(), source)
    container = tmp_path / "mlp.seal"
    seal_model(source, container)
    artifact = tmp_path / "mlp.ort.onnx"
    compile_onnxruntime(container, artifact, level="basic")
    np.save(tmp_path / "x.npy", MLP_INPUT["x"])
    log = tmp_path / "artifact.jsonl"
    assert main(["run", str(artifact), "--container", str(container), "--input", f"x={tmp_path / 'x.npy'}",
                 "--audit", str(log)]) == 0  # fmt: skip
    assert main(["audit", "verify", str(log)]) == 0
    # Linked to the artifact that ran, and to the container it is bound to; not to another model.
    assert main(["audit", "verify", str(log), "--container", str(artifact)]) == 0
    assert main(["audit", "verify", str(log), "--container", str(container)]) == 0
    other = tmp_path / "other.onnx"
    onnx.save(make(scale=2.0), other)
    assert main(["audit", "verify", str(log), "--container", str(other)]) == 1
    capsys.readouterr()
    assert main(["replay", str(log), "--container", str(artifact)]) == 0
    assert "bit-identical" in capsys.readouterr().out
