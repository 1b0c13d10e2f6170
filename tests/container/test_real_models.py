"""Real models (../shared/MODELS.md) sealed: outputs bit-identical to the original ONNX file,
unsealed files byte-identical to it, and a tampered copy refused naming the tensor."""

from __future__ import annotations

from pathlib import Path

import pytest

from sealtrace import Session, zoo
from sealtrace.container import IntegrityError, describe_container, open_container, seal_model, unseal
from tests.conftest import require_material


@pytest.mark.slow
@pytest.mark.parametrize("key", [m.key for m in zoo.MODELS])
def test_sealed_real_model_runs_bit_identical(key: str, tmp_path: Path) -> None:
    real = zoo.model(key)
    path = require_material(lambda: real.path)
    feeds = require_material(real.inputs)
    sealed = tmp_path / f"{key}.seal"
    info = seal_model(path, sealed)
    assert info.tensors > 0
    ours = Session(str(sealed)).run(None, feeds)
    theirs = Session(str(path)).run(None, feeds)
    for mine, original in zip(ours, theirs, strict=True):
        assert mine.dtype == original.dtype and mine.shape == original.shape
        assert mine.tobytes() == original.tobytes()
    result = unseal(sealed, tmp_path / f"{key}.onnx")
    assert result.same_as_source and (tmp_path / f"{key}.onnx").read_bytes() == Path(path).read_bytes()


@pytest.mark.slow
def test_ppocr_constant_node_weights_are_sealed(tmp_path: Path) -> None:
    """PP-OCR keeps every weight in a Constant node: they are sealed, and a change is named."""
    path = require_material(lambda: zoo.model("ppocr-cls").path)
    sealed = tmp_path / "cls.seal"
    seal_model(path, sealed)
    info = describe_container(sealed)
    assert info["tensor_bytes"] > 0.9 * Path(path).stat().st_size
    with open_container(sealed) as c:
        victim = max(c.tensors, key=lambda e: e.length)
        where = c.data_start + victim.offset + victim.length // 2
    data = bytearray(sealed.read_bytes())
    data[where] ^= 0x10
    (tmp_path / "bad.seal").write_bytes(bytes(data))
    with pytest.raises(IntegrityError) as exc:
        Session(str(tmp_path / "bad.seal"))
    assert [m.name for m in exc.value.mismatches] == [victim.name]
