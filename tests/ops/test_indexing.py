"""Indexing kernels (sealtrace.ops.indexing): old versions, negative indices, ties, dtypes, views.

Most cases are checked bit-for-bit against onnxruntime; where onnxruntime has no kernel or
deviates from the ONNX spec, the expected values are written out from the spec.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sealtrace.errors import KernelError
from sealtrace.ops import lookup
from tests.ops.exactop import assert_identical, check, run

F32, I64, I32 = np.float32, np.int64, np.int32
INT64_MAX, INT64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


X = np.arange(60, dtype=F32).reshape(3, 4, 5)
D = np.arange(12, dtype=F32).reshape(3, 4)
TIES = np.array([[3, 1, 3, 2, 1, 3], [0, 0, 0, 0, 0, 0]], F32)
U = np.array([[2, 1, 1], [3, 4, 3], [2, 1, 1]], F32)
CACHE = np.zeros((2, 3, 6, 2), F32)
UPDATE = np.arange(24, dtype=F32).reshape(2, 3, 2, 2) + 1
RANDOM = np.concatenate([np.random.default_rng(0).standard_normal((40, 100)).astype(F32)] * 2, axis=1)
UNIQUE_OUT = {"y": F32, "i": I64, "v": I64, "c": I64}

SLICE_CASES = [
    ([0], [INT64_MAX], [1], [1]),
    ([-1], [INT64_MIN], [1], [-1]),
    ([INT64_MAX], [INT64_MIN], [2], [-2]),
    ([-100], [100], [0], [1]),
    ([3], [0], [2], [-1]),
    ([10], [-10], [2], [-3]),
    ([0, 1], [-1, 1000], [0, 2], [1, 2]),
    ([-1], [-1], [1], [-1]),
    ([4], [-6], [2], [-1]),
]

ORT_CASES: list[tuple[str, dict[str, Any], dict[str, Any], int, dict[str, Any]]] = [
    *(
        (
            "Slice",
            {
                "x": X,
                "s": np.array(s, I64),
                "e": np.array(e, I64),
                "a": np.array(a, I64),
                "t": np.array(t, I64),
            },
            {"y": F32},
            13,
            {},
        )
        for s, e, a, t in SLICE_CASES
    ),
    ("Slice", {"x": X, "s": np.array([1], I32), "e": np.array([-1], I32)}, {"y": F32}, 10, {}),
    ("Slice", {"x": X}, {"y": F32}, 7, {"starts": [1, -3], "ends": [1000, -1], "axes": [1, 2]}),
    ("Slice", {"x": X}, {"y": F32}, 7, {"starts": [1], "ends": [2]}),
    ("Gather", {"x": X, "i": np.array([[-1, 0], [2, -3]], I64)}, {"y": F32}, 13, {"axis": 0}),
    ("Gather", {"x": X, "i": np.array(-2, I32)}, {"y": F32}, 11, {"axis": -1}),
    ("Gather", {"x": X, "i": np.array([1], I64)}, {"y": F32}, 7, {"axis": 1}),
    (
        "Gather",
        {"x": np.array(["a", "b", "c"], dtype=object), "i": np.array([2, -3], I64)},
        {"y": object},
        13,
        {},
    ),
    ("GatherElements", {"x": X, "i": np.array([[[-1, 0]], [[2, 1]]], I64)}, {"y": F32}, 13, {"axis": 1}),
    ("GatherElements", {"x": D, "i": np.array([[2, -1, 0]], I32)}, {"y": F32}, 11, {"axis": 0}),
    ("GatherND", {"x": X, "i": np.array([[[1, -1], [0, 2]], [[2, 3], [1, 0]]], I64)}, {"y": F32}, 13, {}),
    ("GatherND", {"x": X, "i": np.array([[1], [0], [3]], I64)}, {"y": F32}, 13, {"batch_dims": 1}),
    (
        "GatherND",
        {"x": X, "i": np.array([[[1, 2]], [[0, 0]], [[3, 4]]], I64)},
        {"y": F32},
        13,
        {"batch_dims": 1},
    ),
    ("GatherND", {"x": X, "i": np.array([[1, 2], [0, 1]], I64)}, {"y": F32}, 11, {}),
    *(
        (
            "ScatterElements",
            {"d": D, "i": np.array([[1, -1], [1, 0]], I64), "u": np.array([[10, 20], [30, 40]], F32)},
            {"y": F32},
            18,
            {"axis": 1, "reduction": r},
        )
        for r in ("none", "add", "mul", "max", "min")
    ),
    *(
        (
            "ScatterND",
            {"d": D, "i": np.array([[1], [-1], [1]], I64), "u": np.arange(12, dtype=F32).reshape(3, 4)},
            {"y": F32},
            18,
            {"reduction": r},
        )
        for r in ("none", "add", "mul", "max", "min")
    ),
    (
        "ScatterElements",
        {"d": D, "i": np.array([[2, 0, 1]], I32), "u": np.array([[7, 8, 9]], F32)},
        {"y": F32},
        11,
        {"axis": 0},
    ),
    (
        "ScatterElements",
        {"d": D.astype(I32), "i": np.array([[2, 2]], I64), "u": np.array([[7, 8]], I32)},
        {"y": I32},
        16,
        {"axis": 0, "reduction": "add"},
    ),
    (
        "Scatter",
        {"d": D, "i": np.array([[2, 0, 1]], I64), "u": np.array([[7, 8, 9]], F32)},
        {"y": F32},
        9,
        {"axis": 0},
    ),
    (
        "ScatterND",
        {"d": D, "i": np.array([[1, 2], [0, 0]], I64), "u": np.array([5, 6], F32)},
        {"y": F32},
        11,
        {},
    ),
    (
        "TensorScatter",
        {"c": CACHE, "u": UPDATE, "w": np.array([1, 4], I64)},
        {"y": F32},
        24,
        {"mode": "linear"},
    ),
    (
        "TensorScatter",
        {"c": CACHE, "u": UPDATE, "w": np.array([5, 3], I64)},
        {"y": F32},
        24,
        {"mode": "circular"},
    ),
    ("TensorScatter", {"c": CACHE, "u": UPDATE}, {"y": F32}, 24, {}),
    (
        "TensorScatter",
        {"c": np.zeros((2, 5, 3), F32), "u": np.ones((2, 2, 3), F32), "w": np.array([0, 3], I64)},
        {"y": F32},
        24,
        {"axis": 1},
    ),
    *(
        (
            "OneHot",
            {"i": np.array([[0, -1], [5, 2]], I64), "n": np.array(3, I64), "v": np.array([0, 1], F32)},
            {"y": F32},
            11,
            {"axis": axis},
        )
        for axis in (-1, 0, 1, -3)
    ),
    ("NonZero", {"x": np.array([[0, 1, 0], [2, 0, 3]], F32)}, {"y": I64}, 13, {}),
    ("NonZero", {"x": np.array(3, F32)}, {"y": I64}, 13, {}),
    ("NonZero", {"x": np.array(0, F32)}, {"y": I64}, 9, {}),
    ("NonZero", {"x": np.zeros((2, 0), np.bool_)}, {"y": I64}, 13, {}),
    *(("Unique", {"x": U}, UNIQUE_OUT, 11, {"sorted": s}) for s in (0, 1)),
    *(("Unique", {"x": U}, UNIQUE_OUT, 11, {"sorted": s, "axis": a}) for s in (0, 1) for a in (0, 1, -1)),
    ("Compress", {"x": X, "c": np.array([True, False, True])}, {"y": F32}, 11, {"axis": 0}),
    ("Compress", {"x": X, "c": np.array([False, True])}, {"y": F32}, 11, {"axis": -1}),
    ("Compress", {"x": X, "c": np.array([True, False, True, True])}, {"y": F32}, 9, {}),
    (
        "ReverseSequence",
        {"x": X, "l": np.array([1, 4, 0], I64)},
        {"y": F32},
        10,
        {"batch_axis": 0, "time_axis": 1},
    ),
    (
        "ReverseSequence",
        {"x": X.transpose(1, 0, 2).copy(), "l": np.array([1, 4, 2], I64)},
        {"y": F32},
        10,
        {},
    ),
    *(
        ("TopK", {"x": TIES, "k": np.array([k], I64)}, {"v": F32, "i": I64}, 11, {"largest": lg, "axis": 1})
        for lg in (0, 1)
        for k in (0, 2, 6)
    ),
    ("TopK", {"x": TIES}, {"v": F32, "i": I64}, 7, {"k": 3}),
    # Long axes with small k take the partition path; RANDOM also has ties away from the top.
    *(
        (
            "TopK",
            {"x": RANDOM, "k": np.array([7], I64)},
            {"v": F32, "i": I64},
            11,
            {"largest": lg, "axis": ax},
        )
        for lg in (0, 1)
        for ax in (0, 1)
    ),
    ("TopK", {"x": np.round(RANDOM * 2), "k": np.array([5], I64)}, {"v": F32, "i": I64}, 11, {}),
    ("TopK", {"x": TIES, "k": np.array([1], I64)}, {"v": F32, "i": I64}, 10, {"axis": 0}),
    ("TopK", {"x": TIES.astype(I32), "k": np.array([4], I64)}, {"v": I32, "i": I64}, 11, {"largest": 0}),
    ("TopK", {"x": TIES.astype(np.uint8), "k": np.array([4], I64)}, {"v": np.uint8, "i": I64}, 11, {}),
    *(
        (op, {"x": x, "a": axis}, {"y": x.dtype}, opset, {"exclusive": ex, "reverse": rv})
        for op, opset, x in (
            ("CumSum", 14, np.arange(1, 13, dtype=I32).reshape(3, 4)),
            ("CumSum", 11, np.arange(1, 13, dtype=F32).reshape(3, 4) / 7),
            ("CumProd", 26, np.arange(1, 13, dtype=F32).reshape(3, 4) / 7),
            ("CumProd", 26, np.arange(1, 13, dtype=I64).reshape(3, 4)),
        )
        for ex in (0, 1)
        for rv in (0, 1)
        for axis in (np.array(1, I32), np.array([-2], I64))
    ),
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


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(0, 5), min_size=1, max_size=3),
    data=st.data(),
)
def test_slice_matches_onnxruntime(shape: list[int], data: st.DataObject) -> None:
    x = np.arange(int(np.prod(shape)), dtype=F32).reshape(shape)
    axes = data.draw(
        st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1, unique_by=lambda a: a % len(shape))
    )
    bound = st.one_of(st.integers(-8, 8), st.sampled_from([INT64_MAX, INT64_MIN, INT64_MIN + 1]))
    starts = [data.draw(bound) for _ in axes]
    ends = [data.draw(bound) for _ in axes]
    steps = [data.draw(st.sampled_from([-3, -2, -1, 1, 2, 3])) for _ in axes]
    # onnxruntime reads end=INT64_MAX with a negative step as 'to the front'; the spec clamps it
    # to dim-1 (see test_slice_backward_from_int_max_end_follows_the_spec).
    ends = [e if not (e == INT64_MAX and t < 0) else -8 for e, t in zip(ends, steps, strict=True)]
    inputs = {
        "x": x,
        "s": np.array(starts, I64),
        "e": np.array(ends, I64),
        "a": np.array(axes, I64),
        "t": np.array(steps, I64),
    }
    check("Slice", inputs, {"y": F32}, 13)


# --- spec-derived expectations --------------------------------------------------------------


def test_slice_backward_from_int_max_end_follows_the_spec() -> None:
    # Slice-13: 'end' is clamped into [-1, dim-1] for negative steps, so INT64_MAX acts as dim-1
    # (the slice stops before the last element), as in ONNX's reference and NumPy.
    inputs = {"x": np.arange(5, dtype=F32), "s": np.array([4], I64), "e": np.array([INT64_MAX], I64)}
    inputs |= {"a": np.array([0], I64), "t": np.array([-1], I64)}
    (y,) = run("Slice", inputs, {"y": F32}, 13)
    assert y.shape == (0,)
    inputs["s"] = np.array([3], I64)
    (y,) = run("Slice", inputs, {"y": F32}, 13)
    assert y.shape == (0,)
    inputs["e"] = np.array([1], I64)
    (y,) = run("Slice", inputs, {"y": F32}, 13)
    assert y.tolist() == [3, 2]


def test_one_hot_v9_negative_indices_are_off() -> None:
    # OneHot-9 says indices outside [0, depth) give all-off rows (onnxruntime wraps them anyway).
    inputs = {"i": np.array([0, -1, 2], I64), "n": np.array(3, I64), "v": np.array([0, 1], F32)}
    (y,) = run("OneHot", inputs, {"y": F32}, 9)
    assert_identical([y], [np.array([[1, 0, 0], [0, 0, 0], [0, 0, 1]], F32)])


def test_one_hot_float_indices_and_depth() -> None:
    inputs = {"i": np.array([0.0, -1.7, 2.9], F32), "n": np.array(3.0, F32), "v": np.array([2, 5], I32)}
    (y,) = run("OneHot", inputs, {"y": I32}, 11)
    assert_identical([y], [np.array([[5, 2, 2], [2, 2, 5], [2, 2, 5]], I32)])


def test_top_k_v1_attribute_and_stable_ties() -> None:
    x = np.array([1, 5, 5, 2, 5, 1], F32)
    values, indices = run("TopK", {"x": x}, {"v": F32, "i": I64}, 1, k=4)
    assert_identical([values, indices], [np.array([5, 5, 5, 2], F32), np.array([1, 2, 4, 3], I64)])
    values, indices = run("TopK", {"x": x, "k": np.array([3], I64)}, {"v": F32, "i": I64}, 24, largest=0)
    assert_identical([values, indices], [np.array([1, 1, 2], F32), np.array([0, 5, 3], I64)])


def test_top_k_nan_counts_as_largest() -> None:
    x = np.array([1, np.nan, 3, np.nan, 2], F32)
    values, indices = run("TopK", {"x": x, "k": np.array([3], I64)}, {"v": F32, "i": I64}, 11)
    assert indices.tolist() == [1, 3, 2]
    assert np.isnan(values[:2]).all() and values[2] == 3


def test_unique_unsorted_keeps_first_occurrence_order() -> None:
    x = np.array([2, 1, 1, 3, 4, 3], F32)
    y, first, inverse, counts = run("Unique", {"x": x}, UNIQUE_OUT, 11, sorted=0)
    assert_identical(
        [y, first, inverse, counts],
        [
            np.array([2, 1, 3, 4], F32),
            np.array([0, 1, 3, 4], I64),
            np.array([0, 1, 1, 2, 3, 2], I64),
            np.array([1, 2, 2, 1], I64),
        ],
    )


def test_unique_strings() -> None:
    x = np.array(["b", "a", "b"], dtype=object)
    y, first, inverse, counts = run("Unique", {"x": x}, {"y": object, "i": I64, "v": I64, "c": I64}, 28)
    assert y.tolist() == ["a", "b"] and first.tolist() == [1, 0] and inverse.tolist() == [1, 0, 1]
    assert counts.tolist() == [1, 2]


def test_gather_elements_and_scatter_keep_dtype() -> None:
    data = np.arange(6, dtype=np.float16).reshape(2, 3)
    (y,) = run("GatherElements", {"x": data, "i": np.array([[1], [0]], I64)}, {"y": np.float16}, 13, axis=1)
    assert_identical([y], [np.array([[1], [3]], np.float16)])
    (y,) = run(
        "ScatterND",
        {"d": data, "i": np.array([[0, 0], [0, 0]], I64), "u": np.array([2, 3], np.float16)},
        {"y": np.float16},
        16,
        reduction="mul",
    )
    assert y.dtype == np.float16 and y[0, 0] == 0  # 0 * 2 * 3


def test_cum_sum_small_int_and_exclusive_reverse() -> None:
    x = np.array([1, 2, 3], np.int8)
    (y,) = run("CumSum", {"x": x, "a": np.array(0, I64)}, {"y": np.int8}, 14, exclusive=1, reverse=1)
    assert_identical([y], [np.array([5, 3, 0], np.int8)])
    (y,) = run(
        "CumProd",
        {"x": np.array([1, 2, 3], np.uint32), "a": np.array(0, I32)},
        {"y": np.uint32},
        26,
        exclusive=1,
    )
    assert_identical([y], [np.array([1, 1, 2], np.uint32)])


def test_tensor_scatter_linear_overflow_is_an_error() -> None:
    with pytest.raises(KernelError):
        run("TensorScatter", {"c": CACHE, "u": UPDATE, "w": np.array([5, 0], I64)}, {"y": F32}, 24)


def test_slice_is_a_view() -> None:
    kernel = lookup("", "Slice", 13)
    assert kernel is not None
    out = kernel.fn(
        X, np.array([1], I64), np.array([INT64_MIN], I64), np.array([2], I64), np.array([-2], I64)
    )
    assert np.shares_memory(out, X)
    assert_identical([out], [X[:, :, 1::-2]])


def test_scatters_never_write_into_inputs() -> None:
    data = D.copy()
    run("ScatterElements", {"d": data, "i": np.array([[0]], I64), "u": np.array([[9]], F32)}, {"y": F32}, 18)
    run("ScatterND", {"d": data, "i": np.array([[0]], I64), "u": np.ones((1, 4), F32)}, {"y": F32}, 18)
    assert_identical([data], [D])


def _top_k_by_definition(x: np.ndarray, k: int, largest: int) -> np.ndarray:
    """Indices along the last axis, ordered by value (ties: lower index first), written plainly."""
    rows = x.reshape(-1, x.shape[-1])
    sign = -1 if largest else 1
    picked = [sorted(range(len(row)), key=lambda i, r=row: (sign * r[i], i))[:k] for row in rows.tolist()]
    return np.array(picked, dtype=np.int64).reshape((*x.shape[:-1], k))


@settings(max_examples=80, deadline=None)
@given(
    rows=st.integers(1, 4),
    n=st.integers(1, 60),
    data=st.data(),
)
def test_top_k_selection_matches_definition(rows: int, n: int, data: st.DataObject) -> None:
    # Few distinct values: many ties, exercising both the partition and the full-sort paths.
    values = data.draw(st.lists(st.integers(-3, 3), min_size=rows * n, max_size=rows * n))
    dtype = data.draw(st.sampled_from([F32, I32, np.uint8]))
    x = (np.array(values) % 7 if dtype is np.uint8 else np.array(values)).astype(dtype).reshape(rows, n)
    k = data.draw(st.integers(0, n))
    largest = data.draw(st.sampled_from([0, 1]))
    kernel = lookup("", "TopK", 11)
    assert kernel is not None
    got_values, got_indices = kernel.fn(x.T, np.array([k], I64), axis=0, largest=largest, sorted=1)
    want = _top_k_by_definition(x, k, largest)
    assert_identical([got_indices.T], [want])
    assert_identical([got_values.T], [np.take_along_axis(x, want, axis=-1)])


def test_element_indices_larger_than_data_are_rejected() -> None:
    # NumPy would broadcast data's size-1 axis against the indices; ONNX calls this invalid.
    inputs = {"x": np.zeros((1, 3), F32), "i": np.zeros((2, 3), I64)}
    with pytest.raises(KernelError):
        run("GatherElements", inputs, {"y": F32}, 13, axis=1)
    with pytest.raises(KernelError):
        run(
            "ScatterElements",
            {"d": inputs["x"], "i": inputs["i"], "u": np.zeros((2, 3), F32)},
            {"y": F32},
            13,
            axis=1,
        )
