"""Models with model-local functions (FunctionProto): expanded into the Plan, run like any model.

Exporters emit them: onnxscript keeps every @script function a model calls as a local function, and
torch's dynamo exporter turns each torch.cond branch into one. The reference backend must run them
and agree with ONNX Runtime; malformed functions are bad input (exit 2), never an internal error.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from sealtrace.cli import main
from sealtrace.errors import InvalidModelError
from sealtrace.plan import build_plan
from sealtrace.session import Session

LOCAL = "sealtrace.local"


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)  # type: ignore[return-value]


def _agree_with_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    ours = Session(model).run(None, feeds)
    theirs = _ort(model, feeds)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    return ours


def _leaky_affine() -> onnx.FunctionProto:
    """local::LeakyAffine(x, w, b; alpha) = LeakyRelu(x @ w + b, alpha): an attribute reference."""
    leaky = helper.make_node("LeakyRelu", ["h"], ["y"])
    leaky.attribute.append(AttributeProto(name="alpha", ref_attr_name="alpha", type=AttributeProto.FLOAT))
    return helper.make_function(
        LOCAL, "LeakyAffine", ["x", "w", "b"], ["y"],
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["h"]), leaky],
        [helper.make_opsetid("", 17)], attributes=["alpha"],
    )  # fmt: skip


def _two_blocks() -> onnx.FunctionProto:
    """local::TwoBlocks calls local::LeakyAffine twice (a function calling a function)."""
    return helper.make_function(
        LOCAL, "TwoBlocks", ["x", "w", "b"], ["y"],
        [
            helper.make_node("LeakyAffine", ["x", "w", "b"], ["h"], domain=LOCAL, alpha=0.5),
            helper.make_node("LeakyAffine", ["h", "w", "b"], ["y"], domain=LOCAL, alpha=0.01),
        ],
        [helper.make_opsetid("", 17), helper.make_opsetid(LOCAL, 1)],
    )  # fmt: skip


def _helper_model() -> onnx.ModelProto:
    """x -> TwoBlocks -> If(sum > 0: LeakyAffine(alpha 0.3), else: Neg) -> Negate13 -> y, the last
    a function written against opset 13 (converted to the model's 17 when it is expanded)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    then_graph = helper.make_graph(
        [helper.make_node("LeakyAffine", ["t", "w", "b"], ["then_y"], domain=LOCAL, alpha=0.3)],
        "then", [], [helper.make_tensor_value_info("then_y", TensorProto.FLOAT, [2, 4])],
    )  # fmt: skip
    else_graph = helper.make_graph(
        [helper.make_node("Neg", ["t"], ["else_y"])],
        "else", [], [helper.make_tensor_value_info("else_y", TensorProto.FLOAT, [2, 4])],
    )  # fmt: skip
    negate13 = helper.make_function(
        LOCAL, "Negate13", ["a"], ["b"], [helper.make_node("Neg", ["a"], ["b"])], [helper.make_opsetid("", 13)]
    )
    nodes = [
        helper.make_node("TwoBlocks", ["x", "w", "b"], ["t"], domain=LOCAL),
        helper.make_node("ReduceSum", ["t"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["positive"]),
        helper.make_node("If", ["positive"], ["branch"], then_branch=then_graph, else_branch=else_graph),
        helper.make_node("Negate13", ["branch"], ["y"], domain=LOCAL),
    ]
    zero = numpy_helper.from_array(np.array(0, dtype=np.float32), "zero")
    graph = helper.make_graph(
        nodes, "local_functions",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializer=[w, b, zero],
    )  # fmt: skip
    model = helper.make_model(
        graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(LOCAL, 1)],
        functions=[_leaky_affine(), _two_blocks(), negate13],
    )  # fmt: skip
    onnx.checker.check_model(model, full_check=True)
    return model


def test_helper_built_local_functions_run_and_agree_with_onnxruntime() -> None:
    model = _helper_model()
    plan = build_plan(model)
    assert not any(step.domain == LOCAL for step in plan.steps)
    assert [s.op_type for s in plan.steps][:3] == ["MatMul", "Add", "LeakyRelu"]
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def two_blocks(x: np.ndarray) -> np.ndarray:  # the functions' meaning, in NumPy
        def leaky(v: np.ndarray, alpha: float) -> np.ndarray:
            return np.where(v < 0, alpha * v, v)

        h = leaky(x @ weights["w"] + weights["b"], 0.5)
        return leaky(h @ weights["w"] + weights["b"], 0.01)

    rng = np.random.default_rng(1)
    branches = set()
    for _ in range(8):
        x = (rng.standard_normal((2, 4)) * 3).astype(np.float32)
        _agree_with_ort(model, {"x": x})
        branches.add(bool(two_blocks(x).sum() > 0))
    assert branches == {True, False}  # both branches of the If ran


def test_local_functions_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "functions.onnx"
    onnx.save(_helper_model(), path)
    np.save(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    out = tmp_path / "y.npz"
    assert main(["run", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--out", str(out)]) == 0
    expected = _ort(_helper_model(), {"x": np.ones((2, 4), np.float32)})[0]
    with np.load(out) as saved:
        np.testing.assert_allclose(saved["y"], expected, rtol=1e-5, atol=1e-6)


def _recursive() -> onnx.ModelProto:
    loop = helper.make_function(
        LOCAL, "Again", ["a"], ["b"], [helper.make_node("Again", ["a"], ["b"], domain=LOCAL)],
        [helper.make_opsetid("", 17), helper.make_opsetid(LOCAL, 1)],
    )  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("Again", ["x"], ["y"], domain=LOCAL)], "recursive",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )  # fmt: skip
    return helper.make_model(
        graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(LOCAL, 1)],
        functions=[loop],
    )  # fmt: skip


def test_a_recursive_local_function_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InvalidModelError, match="Again"):
        build_plan(_recursive())
    path = tmp_path / "recursive.onnx"
    onnx.save(_recursive(), path)
    assert main(["run", str(path), "--random-inputs"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sealtrace: error: cannot expand model-local functions") and err.count("\n") == 1


def test_a_function_that_cannot_be_converted_to_the_models_opset_is_bad_input() -> None:
    model = _helper_model()
    gelu20 = helper.make_function(  # Gelu exists from opset 20 only: no conversion down to 17
        LOCAL, "Negate13", ["a"], ["b"], [helper.make_node("Gelu", ["a"], ["b"])], [helper.make_opsetid("", 20)]
    )
    model.functions[2].CopyFrom(gelu20)
    with pytest.raises(InvalidModelError, match="Gelu"):
        build_plan(model)


@pytest.mark.torch
def test_onnxscript_functions_run_and_agree_with_onnxruntime() -> None:
    pytest.importorskip("onnxscript")
    from tests.local_function_models import onnxscript_two_blocks

    model = onnxscript_two_blocks()
    assert {f.name for f in model.functions} == {"Block", "ScaledLeaky"}
    rng = np.random.default_rng(2)
    feeds = {
        "x": rng.standard_normal((2, 4)).astype(np.float32),
        "w": rng.standard_normal((4, 4)).astype(np.float32),
        "b": rng.standard_normal(4).astype(np.float32),
    }
    _agree_with_ort(model, feeds)


@pytest.mark.torch
def test_torch_dynamo_cond_branches_as_local_functions_run_and_agree_with_onnxruntime() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    from tests.local_function_models import torch_cond_export

    model = torch_cond_export()
    assert {f.domain for f in model.functions} == {"pkg.torch.__subgraph__"}
    rng = np.random.default_rng(3)
    for sign in (1.0, -1.0):
        x = (np.abs(rng.standard_normal((2, 4))) * sign).astype(np.float32)
        _agree_with_ort(model, {model.graph.input[0].name: x})
