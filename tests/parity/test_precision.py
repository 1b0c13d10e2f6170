"""`parity --precision`: both backends on the model in fp16 / bf16 / int8-dynamic, and each step's
precision_loss against the float32 model, apart from the drift between the backends."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

from sealtrace import build_plan
from sealtrace.backends.reference import ReferenceBackend
from sealtrace.cli import main
from sealtrace.parity import Tolerance, ToleranceTable, check_parity
from sealtrace.parity.precision import lower_feeds, lower_precision
from sealtrace.parity.report import report_json, report_markdown
from tests.conftest import make_model
from tests.parity.test_parity import FEEDS, conv_net

LOOSE = ToleranceTable(Tolerance(1e-2, 1e-2))


def test_fp16_reports_precision_loss_apart_from_backend_drift() -> None:
    import jsonschema

    report = check_parity(conv_net(), FEEDS, tolerance=LOOSE, precision="fp16")
    names = [s.name for s in report.steps]
    assert names == ["conv1", "relu1", "conv2", "relu2", "conv3", "sigmoid"]
    assert all(d.dtype == "float16" for s in report.steps for d in s.outputs)  # both backends ran in fp16
    assert report.passed
    assert report.precision == "fp16" and sorted(report.precision_loss) == sorted(names)
    # float16 keeps 11 bits: every step moved from float32, by about its magnitude times 2**-11.
    assert all(0 < d.max_abs < 1e-2 for diffs in report.precision_loss.values() for d in diffs)
    data = json.loads(report_json(report))
    assert data["precision"] == "fp16" and set(data["precision_loss"]) == set(names)
    schema = json.loads((Path(__file__).resolve().parents[2] / "src/sealtrace/schemas/parity-report.schema.json").read_text())
    jsonschema.validate(data, schema)
    assert "- precision: fp16; largest precision_loss: `" in report_markdown(report)


def test_int8_dynamic_quantizes_with_onnxruntime() -> None:
    report = check_parity(conv_net(), FEEDS, tolerance=LOOSE, precision="int8-dynamic")
    ops = {s.op_type for s in report.steps}
    assert {"DynamicQuantizeLinear", "ConvInteger"} <= ops
    assert report.passed
    # Values the quantized model shares with the float32 one are compared; int8 moves them far more than fp16.
    assert {"relu1", "relu2", "sigmoid"} <= set(report.precision_loss)
    assert max(d.max_abs for diffs in report.precision_loss.values() for d in diffs) > 1e-2


def test_bf16_lowering_of_constants_and_casts() -> None:
    nodes = [
        helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
        helper.make_node("Constant", [], ["two"], value_float=2.0),
        helper.make_node("Mul", ["xf", "two"], ["y"]),
    ]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    low = lower_precision(model, "bf16")
    x = np.array([1.0, 1 / 3, 1e-3], dtype=np.float32)
    y = ReferenceBackend().run(build_plan(low), lower_feeds({"x": x}, "bf16"))["y"]
    assert y.dtype == ml_dtypes.bfloat16
    assert np.array_equal(y.astype(np.float32), (x.astype(ml_dtypes.bfloat16).astype(np.float32) * 2))
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT  # the original is unchanged


def test_cli_parity_precision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import onnx

    model = tmp_path / "net.onnx"
    onnx.save(conv_net(), model)
    out = tmp_path / "r.json"
    code = main(["parity", str(model), "--random-inputs", "--precision", "fp16", "--atol", "0.01", "--rtol", "0.01",
                 "--report", str(out)])
    text = capsys.readouterr()
    assert code == 0, text
    assert "precision_loss (fp16 vs float32): largest at " in text.out
    assert json.loads(out.read_text())["precision"] == "fp16"
