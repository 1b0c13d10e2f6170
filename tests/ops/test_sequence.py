"""Sequence and optional operators against onnxruntime: positions, splits, stacking, SequenceMap."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import sealtrace
from tests.conftest import make_model

F = TensorProto.FLOAT
I64 = TensorProto.INT64
SEQ_F = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None))


def _tensor(name: str, elem: int, shape: Any = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _seq(name: str) -> onnx.ValueInfoProto:
    return helper.make_value_info(name, SEQ_F)


def _same(want: Any, got: Any) -> None:
    if want is None:
        assert got is None
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for w, g in zip(want, got, strict=True):
            _same(w, g)
    else:
        assert isinstance(got, np.ndarray)
        assert got.dtype == want.dtype and got.shape == want.shape, (
            got.dtype,
            got.shape,
            want.dtype,
            want.shape,
        )
        np.testing.assert_array_equal(got, want)


def _check(model: onnx.ModelProto, feeds: dict[str, Any]) -> list[Any]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    got = sealtrace.Session(model).run(None, feeds)
    assert len(got) == len(want)
    for w, g in zip(want, got, strict=True):
        _same(w, g)
    return got


A = np.arange(6, dtype=np.float32).reshape(2, 3)
BB = np.arange(6, 12, dtype=np.float32).reshape(2, 3)
C = np.arange(12, 18, dtype=np.float32).reshape(2, 3)


def _positions_model(position: int | None, op: str) -> onnx.ModelProto:
    nodes = [helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"])]
    inputs = [_tensor("a", F, [2, 3]), _tensor("b", F, [2, 3]), _tensor("c", F, [2, 3])]
    pos = []
    if position is not None:
        nodes.append(
            helper.make_node("Constant", [], ["p"], value=helper.make_tensor("p", I64, [], [position]))
        )
        pos = ["p"]
    if op == "SequenceAt":
        nodes.append(helper.make_node("SequenceAt", ["s", *pos], ["out"]))
        outputs = [_tensor("out", F, None)]
    elif op == "SequenceInsert":
        nodes.append(helper.make_node("SequenceInsert", ["s", "a", *pos], ["out"]))
        outputs = [_seq("out")]
    else:
        nodes.append(helper.make_node("SequenceErase", ["s", *pos], ["out"]))
        outputs = [_seq("out")]
    nodes.append(helper.make_node("SequenceLength", ["out" if op != "SequenceAt" else "s"], ["n"]))
    return make_model(nodes, inputs, [*outputs, _tensor("n", I64, None)])


@pytest.mark.parametrize(
    ("op", "position"),
    [
        ("SequenceAt", 0),
        ("SequenceAt", 2),
        ("SequenceAt", -1),
        ("SequenceAt", -3),
        ("SequenceInsert", None),
        ("SequenceInsert", 0),
        ("SequenceInsert", 3),
        ("SequenceInsert", -1),
        ("SequenceInsert", -3),
        ("SequenceErase", None),
        ("SequenceErase", 0),
        ("SequenceErase", -2),
    ],
)
def test_positions(op: str, position: int | None) -> None:
    _check(_positions_model(position, op), {"a": A, "b": BB, "c": C})


def test_position_out_of_range_fails() -> None:
    with pytest.raises(sealtrace.errors.SealtraceError):
        sealtrace.Session(_positions_model(3, "SequenceAt")).run(None, {"a": A, "b": BB, "c": C})


def test_insert_does_not_mutate_its_input() -> None:
    # The same sequence feeds two inserts; each must see the original.
    nodes = [
        helper.make_node("SequenceConstruct", ["a"], ["s"]),
        helper.make_node("SequenceInsert", ["s", "b"], ["s1"]),
        helper.make_node("SequenceInsert", ["s", "c"], ["s2"]),
    ]
    model = make_model(
        nodes,
        [_tensor("a", F, [2, 3]), _tensor("b", F, [2, 3]), _tensor("c", F, [2, 3])],
        [_seq("s1"), _seq("s2")],
    )
    s1, s2 = _check(model, {"a": A, "b": BB, "c": C})
    assert len(s1) == len(s2) == 2


def test_split_to_sequence_ignores_keepdims_with_split() -> None:
    # The spec ignores keepdims once split is given; onnxruntime 1.31 fails on this case.
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    nodes = [
        helper.make_node("Constant", [], ["split"], value=helper.make_tensor("sp", I64, [], [3])),
        helper.make_node("SplitToSequence", ["x", "split"], ["s"], axis=1, keepdims=0),
    ]
    model = make_model(nodes, [_tensor("x", F, [2, 5])], [_seq("s")])
    (got,) = sealtrace.Session(model).run(None, {"x": x})
    _same([x[:, :3], x[:, 3:]], got)


@pytest.mark.parametrize(
    ("split", "axis", "keepdims"),
    [
        (None, 0, 1),
        (None, 1, 0),
        (None, -1, 1),
        (2, 1, 1),  # scalar split with a short last chunk
        ([1, 4], 1, 1),
        ([0, 5], -1, 1),
        ([2], 0, 1),
    ],
)
def test_split_to_sequence(split: int | list[int] | None, axis: int, keepdims: int) -> None:
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    nodes = []
    inputs = ["x"]
    if split is not None:
        dims = [] if isinstance(split, int) else [len(split)]
        vals = [split] if isinstance(split, int) else split
        nodes.append(
            helper.make_node("Constant", [], ["split"], value=helper.make_tensor("sp", I64, dims, vals))
        )
        inputs.append("split")
    nodes.append(helper.make_node("SplitToSequence", inputs, ["s"], axis=axis, keepdims=keepdims))
    model = make_model(nodes, [_tensor("x", F, [2, 5])], [_seq("s")])
    _check(model, {"x": x})


@pytest.mark.parametrize(("axis", "new_axis"), [(0, 0), (1, 0), (-1, 0), (0, 1), (2, 1), (-1, 1), (-3, 1)])
def test_concat_from_sequence(axis: int, new_axis: int) -> None:
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"]),
        helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=axis, new_axis=new_axis),
    ]
    model = make_model(
        nodes,
        [_tensor("a", F, [2, 3]), _tensor("b", F, [2, 3]), _tensor("c", F, [2, 3])],
        [_tensor("y", F, None)],
    )
    _check(model, {"a": A, "b": BB, "c": C})


def test_sequence_empty_then_insert_and_concat() -> None:
    nodes = [
        helper.make_node("SequenceEmpty", [], ["e"], dtype=TensorProto.INT32),
        helper.make_node("SequenceLength", ["e"], ["n0"]),
        helper.make_node("SequenceInsert", ["e", "x"], ["s1"]),
        helper.make_node("SequenceInsert", ["s1", "x", "zero"], ["s2"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["y"], axis=0),
    ]
    nodes.insert(0, helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", I64, [], [0])))
    model = make_model(
        nodes,
        [_tensor("x", TensorProto.INT32, [2])],
        [_tensor("n0", I64, None), _tensor("y", TensorProto.INT32, None)],
    )
    n0, y = _check(model, {"x": np.array([4, 5], dtype=np.int32)})
    assert n0.shape == () and n0 == 0 and y.dtype == np.int32


def test_sequence_graph_input_and_map() -> None:
    # SequenceMap over a fed sequence, with one zipped sequence and one shared tensor.
    body = helper.make_graph(
        [
            helper.make_node("Add", ["x", "y"], ["xy"]),
            helper.make_node("Mul", ["xy", "k"], ["out"]),
            helper.make_node("Shape", ["x"], ["shape"]),
        ],
        "body",
        [_tensor("x", F, None), _tensor("y", F, None), _tensor("k", F, None)],
        [_tensor("out", F, None), _tensor("shape", I64, None)],
    )
    node = helper.make_node("SequenceMap", ["xs", "ys", "k"], ["outs", "shapes"], body=body)
    seq_i64 = helper.make_sequence_type_proto(helper.make_tensor_type_proto(I64, None))
    model = make_model(
        [node],
        [_seq("xs"), _seq("ys"), _tensor("k", F, [])],
        [_seq("outs"), helper.make_value_info("shapes", seq_i64)],
    )
    xs = [np.ones((2, 2), dtype=np.float32), np.arange(3, dtype=np.float32)]
    ys = [np.full((2, 2), 2, dtype=np.float32), np.ones(3, dtype=np.float32)]
    _check(model, {"xs": xs, "ys": ys, "k": np.array(3.0, dtype=np.float32)})


def test_sequence_map_empty_sequence() -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["out"])],
        "body",
        [_tensor("x", F, None)],
        [_tensor("out", F, None)],
    )
    model = make_model(
        [helper.make_node("SequenceMap", ["xs"], ["outs"], body=body)], [_seq("xs")], [_seq("outs")]
    )
    assert sealtrace.Session(model).run(None, {"xs": []}) == [[]]


OPT_F = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, None))
OPT_SEQ = helper.make_optional_type_proto(SEQ_F)


@pytest.mark.parametrize("opset", [15, 18])
@pytest.mark.parametrize("present", [True, False])
def test_optional_tensor(present: bool, opset: int) -> None:
    nodes = [
        helper.make_node(
            "Optional",
            ["x"] if present else [],
            ["o"],
            **({} if present else {"type": helper.make_tensor_type_proto(F, None)}),
        ),
        helper.make_node("OptionalHasElement", ["o"], ["has"]),
    ]
    outputs = [_tensor("has", TensorProto.BOOL, None)]
    if present:
        nodes.append(helper.make_node("OptionalGetElement", ["o"], ["v"]))
        outputs.append(_tensor("v", F, None))
    model = make_model(nodes, [_tensor("x", F, [2])], outputs, opset=opset)
    got = _check(model, {"x": np.array([1.0, 2.0], dtype=np.float32)})
    assert got[0].shape == () and bool(got[0]) is present


def test_optional_sequence_and_plain_inputs_at_18() -> None:
    # From version 18 OptionalHasElement/OptionalGetElement also take plain tensors and sequences.
    nodes = [
        helper.make_node("SequenceConstruct", ["x", "x"], ["s"]),
        helper.make_node("Optional", ["s"], ["os"]),
        helper.make_node("OptionalGetElement", ["os"], ["s_back"]),
        helper.make_node("OptionalHasElement", ["x"], ["has_x"]),
        helper.make_node("OptionalGetElement", ["x"], ["x_back"]),
        helper.make_node("OptionalHasElement", [], ["has_nothing"]),
    ]
    model = make_model(
        nodes,
        [_tensor("x", F, [2])],
        [
            _seq("s_back"),
            _tensor("has_x", TensorProto.BOOL, None),
            _tensor("x_back", F, None),
            _tensor("has_nothing", TensorProto.BOOL, None),
        ],
        opset=18,
    )
    s_back, has_x, _x_back, has_nothing = _check(model, {"x": np.array([1.0, 2.0], dtype=np.float32)})
    assert len(s_back) == 2 and bool(has_x) and not bool(has_nothing)


def test_optional_get_element_of_empty_fails() -> None:
    nodes = [
        helper.make_node("Optional", [], ["o"], type=helper.make_tensor_type_proto(F, None)),
        helper.make_node("OptionalGetElement", ["o"], ["v"]),
    ]
    model = make_model(nodes, [], [_tensor("v", F, None)], opset=18)
    with pytest.raises(sealtrace.errors.SealtraceError):
        sealtrace.Session(model).run(None, {})
