"""The real models (sealtrace.zoo) as TVM engines: those TVM's frontend imports compile, run and agree with
the reference backend; those it cannot import fail as docs/tvm.md says, naming the operator.
The stamp's engine is the model with its shape computations folded for the real inputs' sizes
(sealtrace.engines.shapes): without that, TVM's frontend refuses six of these models.

Each importable model is sealed, compiled (its dynamic axes fixed to its real inputs' sizes) and
loaded through its binding, as `sealtrace compile --backend tvm` and `sealtrace run --container` do.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from sealtrace import Session, zoo
from sealtrace.container import seal_model
from tests.conftest import require_material

try:
    import tvm  # noqa: F401
except ImportError:
    if os.environ.get("CI"):  # CI installs the tvm extra (make test): a missing TVM is a failure there
        raise
    pytest.skip("Apache TVM is not installed (pip install 'sealtrace[tvm]')", allow_module_level=True)

from sealtrace.engines.tvm import EngineImportError, compile_tvm
from sealtrace.parity import check_parity

# Compiled here, run and compared with the reference: the models that compile in seconds. The
# others TVM takes (yolov8n, mobilenetv3-orientation, ppocr-det, ppocr-rec, ppocr-cls: 10-45 s each
# on 2 cores) are compiled and compared by benchmarks/bench_tvm.py, which fails on a disagreement.
COMPILED = ("silero-vad-ifless", "magika", "minilm-int8", "acasxu")
COMPILED_IN_BENCHMARK = ("yolov8n", "mobilenetv3-orientation", "ppocr-det", "ppocr-rec", "ppocr-cls")
# What TVM 0.27's Relax ONNX frontend cannot take, as docs/tvm.md lists it: (error type, what it says).
NOT_COMPILED = {
    # A reflect Pad inside an If branch, its pads computed there (shape folding stays out of subgraphs).
    "silero-vad": (EngineImportError, "cannot import operator Pad"),
    "silero-vad-sequence": (EngineImportError, "no converter for operator(s) LSTM"),
}


def _material(key: str) -> tuple[Path, dict[str, np.ndarray]]:
    if key == "acasxu":
        return zoo.acasxu_networks()[0], zoo.acasxu_inputs(1, 1)[0]
    real = zoo.model(key)
    return real.path, real.inputs()


def _sealed(key: str, folder: Path) -> tuple[Path, dict[str, np.ndarray], dict[str, int]]:
    """The model sealed into ``folder``, its real inputs, and --dim sizes fixing every dynamic axis."""
    path, feeds = require_material(lambda: _material(key))
    seal = folder / f"{key}.seal"
    seal_model(path, seal)
    plan = Session(seal, backend="onnxruntime").plan
    dims = {
        f"{name}:{axis}": size
        for name, value in feeds.items()
        for axis, (size, declared) in enumerate(zip(np.shape(value), plan.inputs_by_name[name].shape or (), strict=False))
        if not (isinstance(declared, int) and declared > 0)
    }
    return seal, feeds, dims


def test_every_real_model_is_accounted_for() -> None:
    assert set(COMPILED) | set(COMPILED_IN_BENCHMARK) | set(NOT_COMPILED) == set(zoo.BENCHMARK_KEYS)


@pytest.mark.slow
@pytest.mark.parametrize("key", COMPILED)
def test_real_model_engine_agrees_with_the_reference(key: str, tmp_path: Path) -> None:
    seal, feeds, dims = _sealed(key, tmp_path)
    library = tmp_path / f"{key}.so"
    compile_tvm(seal, library, dims=dims)
    session = Session(library, container=seal, backend="tvm")
    report = check_parity(session.plan, feeds, ["reference", session.backend])
    assert report.backend_settings["tvm"]["mode"] == "compiled library"
    worst = max(d.max_abs for d in report.graph_outputs)
    assert report.passed, f"{key}: graph outputs differ from the reference by up to {worst:g}"


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(NOT_COMPILED))
def test_real_model_tvm_cannot_take_fails_as_documented(key: str, tmp_path: Path) -> None:
    seal, _feeds, dims = _sealed(key, tmp_path)
    error, message = NOT_COMPILED[key]
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        compile_tvm(seal, tmp_path / f"{key}.so", dims=dims)
    assert not (tmp_path / f"{key}.so").exists()
