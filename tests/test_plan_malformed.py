"""Malformed graphs are bad input for the plan builder (a typed error, exit 2), never an internal
error or an unbounded allocation. The explicit cases below are inputs the fuzz test at the end (and
a longer run of it) found; each failed before its fix."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from sealtrace.cli import main
from sealtrace.errors import InvalidModelError, SealtraceError
from sealtrace.limits import BudgetExceededError, memory_budget_of
from sealtrace.plan import build_plan
from tests.conftest import make_model, mlp_model
from tests.test_local_functions import _helper_model


def _with_bytes(model: onnx.ModelProto, text: bytes, replacement: bytes) -> bytes:
    """The serialized model with one name's bytes replaced (protobuf will not set invalid UTF-8)."""
    data = model.SerializeToString()
    assert data.count(text) == 1 and len(text) == len(replacement)
    return data.replace(text, replacement)


@pytest.mark.parametrize(
    ("text", "replacement"),
    [(b"matmul", b"ma\xe5mul"), (b"MatMul", b"M\xe5tMul"), (b"relu", b"re\xa4u")],
    ids=["node-name", "op-type", "node-name-2"],
)
def test_names_that_are_not_utf8_are_refused(text: bytes, replacement: bytes) -> None:
    # protobuf hands such a string back as bytes: sorting names crashed, get_schema raised TypeError
    with pytest.raises(InvalidModelError, match="is not valid UTF-8 text"):
        build_plan(_with_bytes(mlp_model(), text, replacement))


def test_a_value_name_that_is_not_utf8_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = mlp_model()
    model.graph.node[2].output.append("exXra")  # a second output only this node names
    path = tmp_path / "bad.onnx"
    path.write_bytes(_with_bytes(model, b"exXra", b"ex\xa4ra"))
    assert main(["run", str(path), "--random-inputs"]) == 2  # was exit 3: '<' between bytes and str
    err = capsys.readouterr().err
    assert "is not valid UTF-8 text (b'ex\\xa4ra')" in err and err.count("\n") == 1


@pytest.mark.parametrize("version", [-1, 2**31, 2**40])
def test_opset_versions_out_of_range_are_refused(version: int) -> None:
    model = mlp_model()
    model.opset_import[0].version = version
    with pytest.raises(InvalidModelError, match=f"version {version} is out of range"):  # was TypeError
        build_plan(model)


def test_a_local_function_body_that_fails_inference_is_bad_input() -> None:
    model = _helper_model()  # one function needs version conversion, which runs shape inference
    model.graph.node[0].domain = "com.microsoft"  # ... of a graph that now calls an unimported domain
    with pytest.raises(InvalidModelError, match="cannot expand model-local functions"):
        build_plan(model)  # was InferenceError, exit 3


def _constant_of_shape(shape: list[int], dtype: type = np.float32) -> onnx.ModelProto:
    value = numpy_helper.from_array(np.array([1], dtype))
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["y"], name="fill", value=value)]
    return make_model(
        nodes, [], [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), None)],
        [numpy_helper.from_array(np.array(shape, np.int64), "shape")],
    )


def test_a_huge_constant_of_shape_is_checked_against_the_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 8 bytes of shape ask for 4 TB: refused before the run instead of an allocation at run time.
    with pytest.raises(BudgetExceededError, match=r"node 'fill' \(ConstantOfShape of shape \[1000000, 1000000\]\)"):
        build_plan(_constant_of_shape([10**6, 10**6]))
    with memory_budget_of(1 << 20), pytest.raises(BudgetExceededError, match="2 MiB"):
        build_plan(_constant_of_shape([512, 512], np.float64))
    assert build_plan(_constant_of_shape([512, 512], np.float64)).steps[0].op_type == "ConstantOfShape"
    with pytest.raises(InvalidModelError, match="negative dimension"):
        build_plan(_constant_of_shape([2, -3]))
    path = tmp_path / "fill.onnx"
    onnx.save(_constant_of_shape([10**6, 10**6]), path)
    assert main(["run", str(path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_huge_declared_dims_do_not_reach_onnx_data_propagation(monkeypatch: pytest.MonkeyPatch) -> None:
    # An IR-3 model (initializers listed as inputs) with an input declared [10^8]: onnx's data
    # propagation allocated an entry per element (std::bad_alloc; without a limit, the OOM killer).
    model = mlp_model()
    model.ir_version = 3
    model.graph.input.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [10**8]))
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3]))
    calls: list[bool] = []
    real = onnx.shape_inference.infer_shapes

    def spy(proto: onnx.ModelProto, check_type: bool = False, strict_mode: bool = False, data_prop: bool = False) -> onnx.ModelProto:
        calls.append(data_prop)
        return real(proto, check_type, strict_mode, data_prop=data_prop) if not data_prop else proto

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", spy)
    build_plan(model)
    assert calls == [False]
    calls.clear()
    build_plan(mlp_model())
    assert calls == [True]  # ordinary models keep data propagation


# The fuzz test: structured protobuf-level mutations of small models; only typed errors may come out.

_ATTRIBUTE_TYPES = list(AttributeProto.AttributeType.values())


def _seeds() -> list[onnx.ModelProto]:
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "x"], ["acc_out"]), helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2])],
    )  # fmt: skip
    loop = make_model(
        [helper.make_node("Loop", ["trip", "t", "x"], ["y"], body=body)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array(3, np.int64), "trip"), numpy_helper.from_array(np.array(True), "t")],
    )
    return [mlp_model(), loop, _constant_of_shape([2, 3]), _helper_model()]


_SEEDS = [m.SerializeToString() for m in _seeds()]


def _mutate(data: bytes, draw: st.DrawFn) -> bytes:
    model = onnx.ModelProto.FromString(data)
    graphs = [model.graph] + [a.g for n in model.graph.node for a in n.attribute if a.type == AttributeProto.GRAPH]
    for _ in range(draw(st.integers(1, 3))):
        graph = draw(st.sampled_from(graphs))
        nodes = list(graph.node)
        kind = draw(st.integers(0, 10))
        if kind == 0 and nodes:
            node = draw(st.sampled_from(nodes))
            attr = node.attribute.add()
            attr.name = draw(st.sampled_from(["axis", "value", "body", "to", "alpha", "keepdims"]))
            attr.type = draw(st.sampled_from(_ATTRIBUTE_TYPES))
            attr.i = draw(st.sampled_from([-(10**18), 0, 5, 10**18]))
        elif kind == 1 and nodes:
            node = draw(st.sampled_from(nodes))
            if node.attribute:
                draw(st.sampled_from(list(node.attribute))).type = draw(st.sampled_from(_ATTRIBUTE_TYPES))
        elif kind == 2 and len(nodes) > 1:
            a, b = draw(st.permutations(nodes))[:2]
            if a.output and b.output:
                b.output[0] = a.output[0]
        elif kind == 3 and graph.input:
            graph.input[draw(st.integers(0, len(graph.input) - 1))].ClearField("type")
        elif kind == 4 and nodes:
            node = draw(st.sampled_from(nodes))
            if node.input:
                node.input[draw(st.integers(0, len(node.input) - 1))] = draw(st.sampled_from(["", "nope", "x", "y"]))
        elif kind == 5 and graph.initializer:
            tensor = draw(st.sampled_from(list(graph.initializer)))
            if tensor.dims:
                tensor.dims[draw(st.integers(0, len(tensor.dims) - 1))] = draw(st.sampled_from([0, -1, 7, 10**12]))
        elif kind == 6 and graph.initializer:
            draw(st.sampled_from(list(graph.initializer))).data_type = draw(st.integers(0, 30))
        elif kind == 7 and nodes:
            draw(st.sampled_from(nodes)).op_type = draw(st.sampled_from(["", "Foo", "Add", "If", "Loop", "Cast"]))
        elif kind == 8 and nodes:
            draw(st.sampled_from(nodes)).domain = draw(st.sampled_from(["", "ai.onnx.ml", "zzz", "sealtrace.local"]))
        elif kind == 9:
            model.ir_version = draw(st.sampled_from([0, 1, 3, 99]))
        elif kind == 10 and graph.output:
            graph.output[draw(st.integers(0, len(graph.output) - 1))].name = draw(st.sampled_from(["", "x", "zz"]))
    out = bytearray(model.SerializeToString())
    for _ in range(draw(st.integers(0, 2))):  # and a few raw byte flips
        out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
    return bytes(out)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_build_plan_raises_only_typed_errors(data: st.DataObject) -> None:
    seed = data.draw(st.sampled_from(_SEEDS))
    mutated = _mutate(seed, data.draw)
    with contextlib.suppress(SealtraceError):  # anything else fails the test
        build_plan(mutated)
