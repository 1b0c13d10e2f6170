"""If, Loop and Scan against onnxruntime: outer-scope capture, sequences, empty loops, axes, directions."""

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
B = TensorProto.BOOL


def _tensor(name: str, elem: int, shape: Any = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _run_both(model: onnx.ModelProto, feeds: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds), sealtrace.Session(model).run(None, feeds)


def _same(want: Any, got: Any) -> None:
    if want is None:
        assert got is None
        return
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for w, g in zip(want, got, strict=True):
            _same(w, g)
        return
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _check(model: onnx.ModelProto, feeds: dict[str, Any]) -> list[Any]:
    want, got = _run_both(model, feeds)
    assert len(want) == len(got)
    for w, g in zip(want, got, strict=True):
        _same(w, g)
    return got


# ---------------------------------------------------------------- If


def _if_model(opset: int = 16) -> onnx.ModelProto:
    # then: x * outer_scale (reads outer scope); else: a different shape, via a nested If.
    then_graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["t_out"])], "then", [], [_tensor("t_out", F, None)]
    )
    inner_then = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["it_out"], keepdims=0)],
        "inner_then",
        [],
        [_tensor("it_out", F, None)],
    )
    inner_else = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["ie_out"])], "inner_else", [], [_tensor("ie_out", F, None)]
    )
    else_graph = helper.make_graph(
        [
            helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
            helper.make_node("Greater", ["m", "zero"], ["c2"]),
            helper.make_node("If", ["c2"], ["e_out"], then_branch=inner_then, else_branch=inner_else),
        ],
        "else",
        [],
        [_tensor("e_out", F, None)],
    )
    nodes = [
        helper.make_node("Constant", [], ["scale"], value=helper.make_tensor("s", F, [], [3.0])),
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", F, [], [0.0])),
        helper.make_node("If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph),
    ]
    return make_model(
        nodes, [_tensor("cond", B, [1]), _tensor("x", F, [2, 3])], [_tensor("y", F, None)], opset=opset
    )


@pytest.mark.parametrize("cond", [True, False])
@pytest.mark.parametrize("positive", [True, False])
def test_if_nested_with_outer_scope(cond: bool, positive: bool) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - (0 if positive else 10)
    _check(_if_model(), {"cond": np.array([cond]), "x": x})


@pytest.mark.parametrize("opset", [11, 13])
def test_if_older_opsets(opset: int) -> None:
    x = np.ones((2, 3), dtype=np.float32)
    _check(_if_model(opset), {"cond": np.array([True]), "x": x})


@pytest.mark.parametrize("cond", [True, False])
def test_if_1(cond: bool) -> None:
    # If-1 wants both branches to agree on the output shape.
    then_graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["t"])], "then", [], [_tensor("t", F, [2])]
    )
    else_graph = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["e"])], "else", [], [_tensor("e", F, [2])]
    )
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph)
    model = make_model(
        [node], [_tensor("cond", B, []), _tensor("x", F, [2])], [_tensor("y", F, [2])], opset=9
    )
    _check(model, {"cond": np.array(cond), "x": np.array([-1.5, 2.0], dtype=np.float32)})


def test_if_returns_sequence_and_optional() -> None:
    seq_type = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None))
    opt_type = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, None))
    then_graph = helper.make_graph(
        [
            helper.make_node("SequenceConstruct", ["x", "x"], ["t_seq"]),
            helper.make_node("Optional", ["x"], ["t_opt"]),
        ],
        "then",
        [],
        [helper.make_value_info("t_seq", seq_type), helper.make_value_info("t_opt", opt_type)],
    )
    else_graph = helper.make_graph(
        [
            helper.make_node("SequenceConstruct", ["x"], ["e_seq"]),
            helper.make_node("Optional", [], ["e_opt"], type=helper.make_tensor_type_proto(F, None)),
        ],
        "else",
        [],
        [helper.make_value_info("e_seq", seq_type), helper.make_value_info("e_opt", opt_type)],
    )
    node = helper.make_node("If", ["cond"], ["seq", "opt"], then_branch=then_graph, else_branch=else_graph)
    model = make_model(
        [node],
        [_tensor("cond", B, []), _tensor("x", F, [2])],
        [helper.make_value_info("seq", seq_type), helper.make_value_info("opt", opt_type)],
        opset=16,
    )
    x = np.array([1.0, 2.0], dtype=np.float32)
    seq, opt = _check(model, {"cond": np.array(True), "x": x})
    assert len(seq) == 2 and opt is not None
    seq, opt = _check(model, {"cond": np.array(False), "x": x})
    assert len(seq) == 1 and opt is None


# ---------------------------------------------------------------- Loop


def _loop_model(m: bool, cond: bool, opset: int = 13, stop_at: int = 3) -> onnx.ModelProto:
    """Loop carrying a running sum, with one scan output; the body says stop once i >= stop_at."""
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["i_f"], to=F),
            helper.make_node("Add", ["acc_in", "i_f"], ["acc_mid"]),
            helper.make_node("Mul", ["acc_mid", "outer"], ["acc_out"]),
            helper.make_node("Constant", [], ["limit"], value=helper.make_tensor("l", I64, [], [stop_at])),
            helper.make_node("Less", ["i", "limit"], ["cond_out"]),
            helper.make_node("Identity", ["acc_out"], ["scan_out"]),
        ],
        "body",
        [_tensor("i", I64, []), _tensor("cond_in", B, []), _tensor("acc_in", F, [2])],
        [_tensor("cond_out", B, []), _tensor("acc_out", F, [2]), _tensor("scan_out", F, [2])],
    )
    node = helper.make_node(
        "Loop", ["M" if m else "", "cond" if cond else "", "acc0"], ["acc", "scans"], body=body
    )
    inputs = [_tensor("acc0", F, [2]), _tensor("outer", F, [])]
    if m:
        inputs.append(_tensor("M", I64, []))
    if cond:
        inputs.append(_tensor("cond", B, []))
    return make_model([node], inputs, [_tensor("acc", F, None), _tensor("scans", F, None)], opset=opset)


@pytest.mark.parametrize(
    ("m", "cond", "trips", "start"),
    [
        (True, False, 2, True),  # for loop that ends before the body's condition does
        (True, False, 6, True),  # for loop cut short by the body's condition
        (False, True, None, True),  # while loop
        (True, True, 5, True),
        (True, True, 5, False),  # condition false from the start: zero iterations
        (True, False, 0, True),  # zero trips
    ],
)
@pytest.mark.parametrize("opset", [9, 11, 13, 16])
def test_loop_termination(m: bool, cond: bool, trips: int | None, start: bool, opset: int) -> None:
    feeds: dict[str, Any] = {
        "acc0": np.array([1.0, -2.0], dtype=np.float32),
        "outer": np.array(0.5, dtype=np.float32),
    }
    if m:
        feeds["M"] = np.array(trips, dtype=np.int64)
    if cond:
        feeds["cond"] = np.array(start)
    acc, scans = _check(_loop_model(m, cond, opset), feeds)
    if trips == 0 or not start:
        assert scans.shape == (0, 2)
        np.testing.assert_array_equal(acc, feeds["acc0"])


def test_loop_carries_a_sequence() -> None:
    seq_type = helper.make_sequence_type_proto(helper.make_tensor_type_proto(I64, None))
    body = helper.make_graph(
        [
            helper.make_node("Range", ["zero", "i", "one_s"], ["r"]),
            helper.make_node("SequenceInsert", ["seq_in", "r"], ["seq_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [_tensor("i", I64, []), _tensor("cond_in", B, []), helper.make_value_info("seq_in", seq_type)],
        [_tensor("cond_out", B, []), helper.make_value_info("seq_out", seq_type)],
    )
    nodes = [
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", I64, [], [0])),
        helper.make_node("Constant", [], ["one_s"], value=helper.make_tensor("os", I64, [], [1])),
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=I64),
        helper.make_node("Loop", ["M", "", "empty"], ["seq"], body=body),
    ]
    model = make_model(nodes, [_tensor("M", I64, [])], [helper.make_value_info("seq", seq_type)])
    seq = _check(model, {"M": np.array(4, dtype=np.int64)})[0]
    assert [len(s) for s in seq] == [0, 1, 2, 3]


# ---------------------------------------------------------------- Scan


def _sum_body(elem_shape: list[int]) -> onnx.GraphProto:
    """state += x; emit (state, x * 2)."""
    return helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "x"], ["s_out"]),
            helper.make_node("Add", ["x", "x"], ["y"]),
        ],
        "body",
        [_tensor("s_in", F, elem_shape), _tensor("x", F, elem_shape)],
        [_tensor("s_out", F, elem_shape), _tensor("y", F, elem_shape)],
    )


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"scan_input_directions": [1]},
        {"scan_output_directions": [1]},
        {"scan_input_axes": [1], "scan_output_axes": [1]},
        {"scan_input_axes": [-1], "scan_output_axes": [-1], "scan_input_directions": [1]},
        {"scan_input_axes": [2], "scan_output_axes": [2], "scan_output_directions": [1]},
    ],
    ids=str,
)
@pytest.mark.parametrize("opset", [9, 11, 16])
def test_scan_axes_and_directions(attrs: dict[str, Any], opset: int) -> None:
    if opset == 9 and any(v < 0 for k, vs in attrs.items() if "axes" in k for v in vs):
        pytest.skip("negative axes arrive with Scan-11")
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) * 0.5
    axis = attrs.get("scan_input_axes", [0])[0] % 3
    elem = [d for i, d in enumerate(x.shape) if i != axis]
    node = helper.make_node(
        "Scan", ["s0", "x"], ["s", "ys"], body=_sum_body(elem), num_scan_inputs=1, **attrs
    )
    model = make_model(
        [node],
        [_tensor("s0", F, elem), _tensor("x", F, list(x.shape))],
        [_tensor("s", F, None), _tensor("ys", F, None)],
        opset=opset,
    )
    _check(model, {"s0": np.zeros(elem, dtype=np.float32), "x": x})


def test_scan_zero_length() -> None:
    node = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], body=_sum_body([3]), num_scan_inputs=1)
    model = make_model(
        [node],
        [_tensor("s0", F, [3]), _tensor("x", F, [None, 3])],
        [_tensor("s", F, None), _tensor("ys", F, None)],
        opset=16,
    )
    s0 = np.ones(3, dtype=np.float32)
    s, ys = sealtrace.Session(model).run(None, {"s0": s0, "x": np.zeros((0, 3), dtype=np.float32)})
    np.testing.assert_array_equal(s, s0)
    assert ys.shape == (0, 3) and ys.dtype == np.float32


@pytest.mark.parametrize("lengths", [None, [3, 1], [2, 3]])
@pytest.mark.parametrize("directions", [[0, 0], [1, 0], [1, 1]])
def test_scan_8_batches_and_lengths(lengths: list[int] | None, directions: list[int]) -> None:
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "a"], ["s_mid"]),
            helper.make_node("Mul", ["s_mid", "b"], ["s_out"]),
            helper.make_node("Sub", ["a", "b"], ["y"]),
        ],
        "body",
        [_tensor("s_in", F, [2]), _tensor("a", F, [2]), _tensor("b", F, [2])],
        [_tensor("s_out", F, [2]), _tensor("y", F, [2])],
    )
    node = helper.make_node(
        "Scan",
        ["lens" if lengths else "", "s0", "a", "b"],
        ["s", "ys"],
        body=body,
        num_scan_inputs=2,
        directions=directions,
    )
    inputs = [_tensor("s0", F, [2, 2]), _tensor("a", F, [2, 3, 2]), _tensor("b", F, [2, 3, 2])]
    rng = np.random.default_rng(1)
    feeds: dict[str, Any] = {
        "s0": rng.standard_normal((2, 2)).astype(np.float32),
        "a": rng.standard_normal((2, 3, 2)).astype(np.float32),
        "b": rng.standard_normal((2, 3, 2)).astype(np.float32),
    }
    if lengths:
        inputs.append(_tensor("lens", I64, [2]))
        feeds["lens"] = np.array(lengths, dtype=np.int64)
    model = make_model([node], inputs, [_tensor("s", F, None), _tensor("ys", F, None)], opset=8)
    _check(model, feeds)


def test_scan_body_reads_outer_scope() -> None:
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "w"], ["xw"]),
            helper.make_node("Add", ["s_in", "xw"], ["s_out"]),
            helper.make_node("Identity", ["s_out"], ["y"]),
        ],
        "body",
        [_tensor("s_in", F, [2]), _tensor("x", F, [2])],
        [_tensor("s_out", F, [2]), _tensor("y", F, [2])],
    )
    node = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1)
    model = make_model(
        [node],
        [_tensor("s0", F, [2]), _tensor("x", F, [4, 2]), _tensor("w", F, [2])],
        [_tensor("s", F, None), _tensor("ys", F, None)],
        opset=16,
    )
    feeds = {
        "s0": np.zeros(2, dtype=np.float32),
        "x": np.arange(8, dtype=np.float32).reshape(4, 2),
        "w": np.array([2.0, -1.0], dtype=np.float32),
    }
    _check(model, feeds)
