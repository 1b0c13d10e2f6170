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
