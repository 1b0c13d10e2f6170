"""Shape kernels (sealtrace.ops.shape): old opset versions, dtypes, views and edge cases.

ONNX's node conformance cases cover mostly the newest versions; these tests pin the older
(attribute-driven) versions and compare against onnxruntime wherever it implements the case.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

import sealtrace
from sealtrace.errors import UnsupportedError
from sealtrace.ops import lookup
from tests.ops.exactop import assert_identical, check, node_model, run

F32, I64, I32 = np.float32, np.int64, np.int32


X = np.arange(24, dtype=F32).reshape(2, 3, 4)
STRINGS = np.array([["a", "b"], ["c", "d"]], dtype=object)


# --- agreement with onnxruntime, old and new versions --------------------------------------

ORT_CASES: list[tuple[str, dict[str, Any], dict[str, Any], int, dict[str, Any]]] = [
    ("Reshape", {"x": X, "s": np.array([4, 0, -1], I64)}, {"y": F32}, 7, {}),
    ("Reshape", {"x": X, "s": np.array([0, -1], I64)}, {"y": F32}, 13, {}),
    ("Reshape", {"x": np.zeros((0, 3), F32), "s": np.array([3, 0], I64)}, {"y": F32}, 14, {"allowzero": 1}),
    ("Reshape", {"x": np.zeros((2, 0, 3), F32), "s": np.array([0, -1], I64)}, {"y": F32}, 13, {}),
    ("Transpose", {"x": X}, {"y": F32}, 7, {"perm": [1, 2, 0]}),
    ("Transpose", {"x": STRINGS}, {"y": object}, 13, {}),
    ("Squeeze", {"x": X.reshape(2, 1, 3, 4)}, {"y": F32}, 11, {"axes": [-3]}),
    ("Squeeze", {"x": np.zeros((1, 3, 1, 1), F32)}, {"y": F32}, 13, {}),
    ("Squeeze", {"x": np.zeros((1, 3, 1, 1), F32), "a": np.array([-1, 0], I64)}, {"y": F32}, 13, {}),
    ("Unsqueeze", {"x": X}, {"y": F32}, 11, {"axes": [-1, 0]}),
    ("Unsqueeze", {"x": X, "a": np.array([4, 0], I64)}, {"y": F32}, 13, {}),
    ("Flatten", {"x": X}, {"y": F32}, 13, {"axis": -1}),
    ("Flatten", {"x": X}, {"y": F32}, 9, {"axis": 0}),
    ("Flatten", {"x": np.zeros((0, 3, 2), F32)}, {"y": F32}, 13, {"axis": 2}),
    ("Shape", {"x": X}, {"y": I64}, 15, {"start": -2}),
    ("Shape", {"x": X}, {"y": I64}, 15, {"start": 5}),
    ("Shape", {"x": X}, {"y": I64}, 15, {"start": 1, "end": -5}),
    ("Shape", {"x": np.array(3.0, F32)}, {"y": I64}, 13, {}),
    ("Size", {"x": np.zeros((0, 4), F32)}, {"y": I64}, 13, {}),
    ("Concat", {"a": X, "b": np.zeros((2, 0, 4), F32)}, {"y": F32}, 13, {"axis": -2}),
    ("Concat", {"a": X, "b": X}, {"y": F32}, 7, {"axis": 1}),
    ("Concat", {"a": STRINGS, "b": STRINGS}, {"y": object}, 13, {"axis": 0}),
    ("Split", {"x": X}, {"a": F32, "b": F32}, 11, {"axis": 2, "split": [1, 3]}),
    ("Split", {"x": X}, {"a": F32, "b": F32}, 7, {"axis": 2}),
    ("Split", {"x": np.arange(7, dtype=F32)}, {"a": F32, "b": F32, "c": F32}, 18, {"num_outputs": 3}),
    ("Split", {"x": np.arange(6, dtype=F32)}, {"a": F32, "b": F32, "c": F32}, 13, {}),
    (
        "Split",
        {"x": np.arange(5, dtype=F32), "s": np.array([2, 0, 3], I64)},
        {"a": F32, "b": F32, "c": F32},
        13,
        {},
    ),
    ("Pad", {"x": X}, {"y": F32}, 7, {"pads": [0, 1, 2, 0, 2, 1], "mode": "reflect"}),
    ("Pad", {"x": X}, {"y": F32}, 7, {"pads": [0, 1, 2, 0, 2, 1], "mode": "constant", "value": 2.5}),
    ("Pad", {"x": X, "p": np.array([0, -1, 2, 0, 2, -1], I64)}, {"y": F32}, 11, {"mode": "edge"}),
    ("Pad", {"x": X, "p": np.array([0, -1, 2, 0, 2, -1], I64), "c": np.array(7, F32)}, {"y": F32}, 13, {}),
    (
        "Pad",
        {"x": X, "p": np.array([1, 2, 2, 1], I64), "c": None, "a": np.array([-1, 1], I64)},
        {"y": F32},
        18,
        {"mode": "reflect"},
    ),
    (
        "Pad",
        {"x": X, "p": np.array([1, 5, 2, 3], I64), "c": None, "a": np.array([-1, 1], I64)},
        {"y": F32},
        19,
        {"mode": "wrap"},
    ),
    (
        "Pad",
        {"x": X, "p": np.array([1, -1, 2, 3], I64), "c": None, "a": np.array([-1, 1], I64)},
        {"y": F32},
        19,
        {"mode": "wrap"},
    ),
    (
        "Pad",
        {
            "x": np.arange(6, dtype=np.uint8).reshape(2, 3),
            "p": np.array([1, 2, 1, 2], I64),
            "c": np.array(9, np.uint8),
        },
        {"y": np.uint8},
        18,
        {},
    ),
    ("Pad", {"x": np.array([True, False]), "p": np.array([1, 2], I64)}, {"y": np.bool_}, 18, {}),
    ("Pad", {"x": np.zeros((0, 3), F32), "p": np.array([1, 1, 1, 1], I64)}, {"y": F32}, 13, {}),
    ("Tile", {"x": X, "r": np.array([2, 1, 3], I64)}, {"y": F32}, 13, {}),
    ("Tile", {"x": STRINGS, "r": np.array([1, 2], I64)}, {"y": object}, 13, {}),
    (
        "Expand",
        {"x": np.arange(3, dtype=F32).reshape(3, 1), "s": np.array([2, 1, 6], I64)},
        {"y": F32},
        13,
        {},
    ),
    ("Expand", {"x": X, "s": np.array([3, 1, 1, 1], I64)}, {"y": F32}, 8, {}),
    ("Range", {"s": np.array(10, I32), "l": np.array(-3, I32), "d": np.array(-4, I32)}, {"y": I32}, 11, {}),
    (
        "Range",
        {"s": np.array(0, np.int16), "l": np.array(10, np.int16), "d": np.array(3, np.int16)},
        {"y": np.int16},
        11,
        {},
    ),
    ("Range", {"s": np.array(5, I64), "l": np.array(1, I64), "d": np.array(1, I64)}, {"y": I64}, 11, {}),
    (
        "Range",
        {"s": np.array(0.5, F32), "l": np.array(2.2, F32), "d": np.array(0.3, F32)},
        {"y": F32},
        11,
        {},
    ),
    ("ConstantOfShape", {"x": np.array([2, 0], I64)}, {"y": F32}, 9, {}),
    (
        "ConstantOfShape",
        {"x": np.array([2, 3], I64)},
        {"y": I32},
        9,
        {"value": numpy_helper.from_array(np.array([4], I32))},
    ),
    (
        "ConstantOfShape",
        {"x": np.array([], I64)},
        {"y": np.bool_},
        20,
        {"value": numpy_helper.from_array(np.array([True]))},
    ),
    ("Constant", {}, {"y": F32}, 13, {"value_float": 2.5}),
    ("Constant", {}, {"y": F32}, 13, {"value_floats": [2.5, 1.0]}),
    ("Constant", {}, {"y": I64}, 13, {"value_int": 7}),
    ("Constant", {}, {"y": I64}, 13, {"value_ints": [7, 8]}),
    ("Constant", {}, {"y": object}, 13, {"value_string": "hi"}),
    ("Constant", {}, {"y": object}, 13, {"value_strings": ["hi", "yo"]}),
    ("Constant", {}, {"y": I32}, 9, {"value": numpy_helper.from_array(np.array([[1, 2]], I32))}),
    ("Identity", {"x": STRINGS}, {"y": object}, 13, {}),
    ("DepthToSpace", {"x": np.arange(96, dtype=F32).reshape(2, 8, 2, 3)}, {"y": F32}, 7, {"blocksize": 2}),
    (
        "DepthToSpace",
        {"x": np.arange(96, dtype=F32).reshape(2, 8, 2, 3)},
        {"y": F32},
        13,
        {"blocksize": 2, "mode": "CRD"},
    ),
    ("SpaceToDepth", {"x": np.arange(96, dtype=F32).reshape(2, 2, 4, 6)}, {"y": F32}, 13, {"blocksize": 2}),
    ("EyeLike", {"x": np.zeros((3, 4), F32)}, {"y": F32}, 9, {"k": -1}),
    ("EyeLike", {"x": np.zeros((3, 4), F32)}, {"y": I32}, 9, {"k": 2, "dtype": onnx.TensorProto.INT32}),
    (
        "EyeLike",
        {"x": np.zeros((3, 4), F32)},
        {"y": np.float64},
        9,
        {"k": 5, "dtype": onnx.TensorProto.DOUBLE},
    ),
    ("Trilu", {"x": X + 1, "k": np.array(-1, I64)}, {"y": F32}, 14, {"upper": 0}),
    ("Trilu", {"x": X + 1, "k": np.array(9, I64)}, {"y": F32}, 14, {"upper": 1}),
    ("Trilu", {"x": np.arange(6, dtype=I64).reshape(2, 3)}, {"y": I64}, 14, {"upper": 1}),
    ("CenterCropPad", {"x": X, "s": np.array([1, 7], I64)}, {"y": F32}, 18, {"axes": [-2, -1]}),
    ("CenterCropPad", {"x": X, "s": np.array([1, 4, 3], I64)}, {"y": F32}, 18, {}),
    ("Dropout", {"x": X, "r": np.array(0.3, F32)}, {"y": F32, "m": np.bool_}, 13, {}),
    ("Dropout", {"x": X, "r": np.array(0.3, F32), "t": np.array(False)}, {"y": F32, "m": np.bool_}, 13, {}),
    ("Dropout", {"x": X.astype(np.float16)}, {"y": np.float16}, 12, {}),
]


@pytest.mark.parametrize(
    ("op", "inputs", "outputs", "opset", "attrs"),
    ORT_CASES,
    ids=[f"{c[0]}-{c[3]}-{i}" for i, c in enumerate(ORT_CASES)],
)
def test_matches_onnxruntime(
    op: str, inputs: dict[str, Any], outputs: dict[str, Any], opset: int, attrs: dict[str, Any]
) -> None:
    check(op, inputs, outputs, opset, **attrs)


# --- versions onnxruntime no longer loads (opset < 7) ----------------------------------------


def test_reshape_v1_shape_attribute() -> None:
    (y,) = run("Reshape", {"x": X}, {"y": F32}, 1, shape=[0, -1])
    assert_identical([y], [X.reshape(2, 12)])


def test_squeeze_unsqueeze_v1_attributes() -> None:
    (y,) = run("Squeeze", {"x": X.reshape(1, 2, 3, 1, 4)}, {"y": F32}, 1, axes=[0, 3])
    assert_identical([y], [X])
    (y,) = run("Unsqueeze", {"x": X}, {"y": F32}, 1, axes=[0, 4])
    assert y.shape == (1, 2, 3, 4, 1)


def test_split_v1_sizes_from_input_or_attribute() -> None:
    sizes = np.array([1, 3], F32)  # Split-1 types its sizes input like the data
    a, b = run("Split", {"x": X, "s": sizes}, {"a": F32, "b": F32}, 1, axis=2)
    assert_identical([a, b], [X[..., :1], X[..., 1:]])
    a, b = run("Split", {"x": X}, {"a": F32, "b": F32}, 1, axis=2, split=[3, 1])
    assert_identical([a, b], [X[..., :3], X[..., 3:]])
    a, b = run("Split", {"x": X}, {"a": F32, "b": F32}, 2, axis=1, split=[2, 1])
    assert_identical([a, b], [X[:, :2], X[:, 2:]])


def test_split_18_uneven_num_outputs() -> None:
    parts = run(
        "Split", {"x": np.arange(10, dtype=F32)}, {"a": F32, "b": F32, "c": F32, "d": F32}, 18, num_outputs=4
    )
    assert [p.tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


def test_pad_v1_paddings_attribute() -> None:
    (y,) = run("Pad", {"x": X[0]}, {"y": F32}, 1, paddings=[0, 2, 0, 1], mode="edge")
    assert_identical([y], [np.pad(X[0], ((0, 0), (2, 1)), mode="edge")])
    (y,) = run("Pad", {"x": X[0]}, {"y": F32}, 2, pads=[1, 0, 0, 0], value=-1.0)
    assert y[0].tolist() == [-1.0] * 4


def test_pad_strings_default_to_empty() -> None:
    (y,) = run(
        "Pad", {"x": np.array(["a", "b"], dtype=object), "p": np.array([1, 1], I64)}, {"y": object}, 13
    )
    assert y.tolist() == ["", "a", "b", ""]


def test_concat_v1_defaults_to_axis_1() -> None:
    (y,) = run("Concat", {"a": X, "b": X}, {"y": F32}, 1)
    assert y.shape == (2, 6, 4)


def test_tile_v1_one_axis() -> None:
    (y,) = run("Tile", {"x": X, "t": np.array([3], I64), "a": np.array([1], I64)}, {"y": F32}, 1)
    assert_identical([y], [np.tile(X, (1, 3, 1))])


def test_transpose_flatten_depth_to_space_v1() -> None:
    (y,) = run("Transpose", {"x": X}, {"y": F32}, 1)
    assert_identical([y], [X.T])
    (y,) = run("Flatten", {"x": X}, {"y": F32}, 1, axis=2)
    assert y.shape == (6, 4)
    x = np.arange(32, dtype=F32).reshape(1, 8, 2, 2)
    (d2s,) = run("DepthToSpace", {"x": x}, {"y": F32}, 1, blocksize=2)
    (s2d,) = run("SpaceToDepth", {"x": d2s}, {"y": F32}, 1, blocksize=2)
    assert_identical([s2d], [x])


def test_space_to_depth_28_crd_inverts_depth_to_space_crd() -> None:
    x = np.arange(96, dtype=F32).reshape(2, 8, 2, 3)
    (d2s,) = run("DepthToSpace", {"x": x}, {"y": F32}, 28, blocksize=2, mode="CRD")
    (s2d,) = run("SpaceToDepth", {"x": d2s}, {"y": F32}, 28, blocksize=2, mode="CRD")
    assert_identical([s2d], [x])


def test_constant_v1_and_sparse() -> None:
    (y,) = run("Constant", {}, {"y": I32}, 1, value=numpy_helper.from_array(np.array([3, 4], I32)))
    assert_identical([y], [np.array([3, 4], I32)])
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([5, 6], F32)), numpy_helper.from_array(np.array([1, 4], I64)), [2, 3]
    )
    (y,) = run("Constant", {}, {"y": F32}, 11, sparse_value=sparse)
    assert_identical([y], [np.array([[0, 5, 0], [0, 6, 0]], F32)])


def test_dropout_old_versions() -> None:
    (y, m) = run("Dropout", {"x": X}, {"y": F32, "m": F32}, 6, is_test=1)
    assert_identical([y, m], [X, np.ones_like(X)])
    (y, m) = run("Dropout", {"x": X}, {"y": F32, "m": np.bool_}, 10, ratio=0.9)
    assert_identical([y, m], [X, np.ones(X.shape, bool)])
    # Training mode (is_test=0) drops at random, but from a fixed seed: runs are bit-identical.
    first = run("Dropout", {"x": X + 1}, {"y": F32, "m": F32}, 6, ratio=0.5)
    second = run("Dropout", {"x": X + 1}, {"y": F32, "m": F32}, 6, ratio=0.5)
    assert_identical(first, second)
    assert set(np.unique(first[1])) <= {0.0, 1.0}
    np.testing.assert_array_equal(first[0], (X + 1) * first[1] * 2)


def test_dropout_training_is_seeded_and_scaled() -> None:
    x = np.ones((50, 40), F32)
    inputs = {"x": x, "r": np.array(0.25, F32), "t": np.array(True)}
    y, mask = run("Dropout", inputs, {"y": F32, "m": np.bool_}, 13, seed=3)
    expected_mask = np.random.RandomState(3).uniform(0, 1.0, x.shape) >= 0.25
    assert_identical([mask], [expected_mask])
    np.testing.assert_allclose(y, np.where(expected_mask, F32(1 / 0.75), 0))
    assert y.dtype == F32


def test_range_27_float16_uses_stash_type() -> None:
    inputs = {"s": np.array(0, np.float16), "l": np.array(3000, np.float16), "d": np.array(1, np.float16)}
    (y,) = run("Range", inputs, {"y": np.float16}, 27)
    assert y.dtype == np.float16 and y.shape == (3000,)
    np.testing.assert_array_equal(y, np.arange(3000, dtype=np.float32).astype(np.float16))


def test_identity_passes_sequences_through() -> None:
    seq_in = helper.make_tensor_sequence_value_info("s", onnx.TensorProto.FLOAT, None)
    seq_out = helper.make_tensor_sequence_value_info("t", onnx.TensorProto.FLOAT, None)
    graph = helper.make_graph(
        [
            helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
            helper.make_node("Identity", ["s"], ["t"]),
        ],
        "seq",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in "ab"],
        [seq_out],
        value_info=[seq_in],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])
    try:
        (out,) = sealtrace.Session(model).run(None, {"a": X, "b": X[0]})
    except UnsupportedError:
        pytest.skip("SequenceConstruct kernel not available")
    assert isinstance(out, list) and len(out) == 2
    assert_identical(out, [X, X[0]])


# --- views: metadata-only kernels share memory with their input ------------------------------


def test_metadata_kernels_return_views() -> None:
    x = np.arange(24, dtype=F32).reshape(1, 2, 3, 4)
    cases = [
        lookup("", "Reshape", 14).fn(x, np.array([6, 4], I64), allowzero=0),  # type: ignore[union-attr]
        lookup("", "Transpose", 13).fn(x, perm=(0, 3, 1, 2)),  # type: ignore[union-attr]
        lookup("", "Squeeze", 13).fn(x, np.array([0], I64)),  # type: ignore[union-attr]
        lookup("", "Unsqueeze", 13).fn(x, np.array([0], I64)),  # type: ignore[union-attr]
        lookup("", "Flatten", 13).fn(x, axis=2),  # type: ignore[union-attr]
        lookup("", "Expand", 13).fn(x, np.array([3, 1, 1, 1], I64)),  # type: ignore[union-attr]
    ]
    for out in cases:
        assert np.shares_memory(out, x)
    assert x.flags.writeable  # views never make the input read-only


def test_kernels_never_write_into_inputs() -> None:
    x = np.arange(24, dtype=F32).reshape(2, 3, 4)
    before = x.copy()
    run("Pad", {"x": x, "p": np.array([1, 1, 1, 1, 1, 1], I64)}, {"y": F32}, 13, mode="reflect")
    run("Trilu", {"x": x}, {"y": F32}, 14)
    run("Dropout", {"x": x, "r": np.array(0.5, F32), "t": np.array(True)}, {"y": F32}, 13)
    assert_identical([x], [before])


def test_constant_output_cannot_corrupt_the_plan() -> None:
    model = node_model("Constant", {}, {"y": I64}, 13, value=numpy_helper.from_array(np.array([1, 2], I64)))
    session = sealtrace.Session(model)
    (first,) = session.run(None, {})
    first[0] = 99  # the caller's copy: the Plan's attribute is untouched
    (second,) = session.run(None, {})
    assert second.tolist() == [1, 2]


def test_center_crop_pad_strings_pad_with_empty() -> None:
    (y,) = run(
        "CenterCropPad", {"x": np.array(["a"], dtype=object), "s": np.array([3], I64)}, {"y": object}, 18
    )
    assert y.tolist() == ["", "a", ""]


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    mode=st.sampled_from(["reflect", "edge", "wrap"]),
)
def test_pad_modes_agree_with_numpy_pad(data: st.DataObject, shape: list[int], mode: str) -> None:
    """reflect/edge/wrap by slice copies (and np.pad past one reflection) against np.pad itself."""
    from sealtrace.ops.pad import pad_v18

    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    limit = {"reflect": lambda d: max(d - 1, 0), "wrap": lambda d: d, "edge": lambda d: 2 * d}[mode]
    width = [(data.draw(st.integers(0, limit(d) + 1)), data.draw(st.integers(0, limit(d) + 1))) for d in shape]
    if mode == "reflect" and any(d == 1 and (b or e) for d, (b, e) in zip(shape, width, strict=True)):
        return  # a single element has nothing to mirror (np.pad repeats it; ONNX leaves it undefined)
    pads = np.array([b for b, _ in width] + [e for _, e in width], dtype=np.int64)
    got = pad_v18(x, pads, None, None, mode=mode)
    assert_identical([got], [np.pad(x, width, mode=mode)])  # type: ignore[call-overload]
