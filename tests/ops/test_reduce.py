"""Reduce* and ArgMax/ArgMin against onnxruntime: both axes forms, keepdims, empty sets, dtypes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ops.test_matmul import assert_same, run_both, run_ours

RNG = np.random.default_rng(1)

ALL_REDUCE = [
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
]


def _axes_moved_to_input(op: str) -> int:
    return 13 if op == "ReduceSum" else 18


def _positive(op: str, x: np.ndarray) -> np.ndarray:
    # ReduceLogSum needs a positive sum to stay real.
    return np.abs(x) + 0.1 if op == "ReduceLogSum" else x


@pytest.mark.parametrize("op", ALL_REDUCE)
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", [None, (1,), (0, 2), (-1,)])
def test_reduce_axes_attribute_opset11(op: str, keepdims: int, axes: tuple[int, ...] | None) -> None:
    x = _positive(op, RNG.standard_normal((3, 4, 5)).astype(np.float32))
    attrs = {"keepdims": keepdims} | ({"axes": list(axes)} if axes is not None else {})
    assert_same(*run_both(op, {"data": x}, 11, **attrs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ALL_REDUCE)
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", [None, (), (1,), (0, 2), (-1,)])
def test_reduce_axes_input(op: str, keepdims: int, axes: tuple[int, ...] | None) -> None:
    x = _positive(op, RNG.standard_normal((3, 4, 5)).astype(np.float32))
    axes_feed = None if axes is None else np.array(axes, np.int64)
    ours, theirs = run_both(op, {"data": x, "axes": axes_feed}, _axes_moved_to_input(op), keepdims=keepdims)
    assert_same(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ALL_REDUCE)
def test_reduce_noop_with_empty_axes(op: str) -> None:
    x = _positive(op, RNG.standard_normal((2, 3)).astype(np.float32))
    feeds = {"data": x, "axes": np.array([], np.int64)}
    ours, theirs = run_both(op, feeds, _axes_moved_to_input(op), noop_with_empty_axes=1)
    assert ours[0].shape == x.shape
    assert_same(ours, theirs, rtol=1e-5, atol=1e-6)


IDENTITY = {
    "ReduceSum": 0.0,
    "ReduceProd": 1.0,
    "ReduceMax": -np.inf,
    "ReduceMin": np.inf,
    "ReduceL1": 0.0,
    "ReduceL2": 0.0,
    "ReduceSumSquare": 0.0,
    "ReduceLogSum": -np.inf,
    "ReduceLogSumExp": -np.inf,
}


@pytest.mark.parametrize("op", sorted(IDENTITY))
def test_reduce_empty_set_gives_identity(op: str) -> None:
    x = np.zeros((2, 0, 4), np.float32)
    (y,) = run_ours(op, {"data": x, "axes": np.array([1], np.int64)}, 18, keepdims=1)
    assert y.shape == (2, 1, 4) and y.dtype == np.float32
    np.testing.assert_array_equal(y, np.full((2, 1, 4), IDENTITY[op], np.float32))


def test_reduce_mean_of_empty_set_is_nan() -> None:
    (y,) = run_ours("ReduceMean", {"data": np.zeros((0, 3), np.float32)}, 13, axes=[0], keepdims=0)
    assert y.shape == (3,) and np.isnan(y).all()


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64])
def test_reduce_max_min_empty_integer_uses_dtype_limits(dtype: type) -> None:
    x = np.zeros((0, 2), dtype)
    (hi,) = run_ours("ReduceMax", {"data": x, "axes": np.array([0], np.int64)}, 18)
    (lo,) = run_ours("ReduceMin", {"data": x, "axes": np.array([0], np.int64)}, 18)
    assert hi.dtype == lo.dtype == np.dtype(dtype)
    assert (hi == np.iinfo(dtype).min).all() and (lo == np.iinfo(dtype).max).all()


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"])
def test_reduce_integer_dtype_preserved(op: str, dtype: type) -> None:
    x = RNG.integers(-7, 8, (3, 5)).astype(dtype)
    ours, theirs = run_both(op, {"data": x}, 13, axes=[1], keepdims=0) if op != "ReduceSum" else run_both(
        op, {"data": x, "axes": np.array([1], np.int64)}, 13, keepdims=0
    )
    assert ours[0].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(ours[0], theirs[0])


def test_reduce_mean_integer_truncates_toward_zero() -> None:
    x = np.array([[-3, -4], [3, 4], [-1, 0]], np.int32)
    (y,) = run_ours("ReduceMean", {"data": x}, 13, axes=[1], keepdims=0)
    np.testing.assert_array_equal(y, np.array([-3, 3, 0], np.int32))


def test_reduce_max_bool_opset20() -> None:
    x = np.array([[True, False], [False, False]])
    (y,) = run_ours("ReduceMax", {"data": x, "axes": np.array([1], np.int64)}, 20, keepdims=0)
    np.testing.assert_array_equal(y, [True, False])


def test_reduce_float16_accumulates_in_float32() -> None:
    x = np.full((4096,), 1.0, np.float16)
    (y,) = run_ours("ReduceSum", {"data": x}, 11, keepdims=0)
    assert y.dtype == np.float16 and float(y) == 4096.0


def test_reduce_log_sum_exp_is_stable() -> None:
    x = np.array([[1000.0, 1000.0], [-np.inf, -np.inf]], np.float32)
    (y,) = run_ours("ReduceLogSumExp", {"data": x}, 13, axes=[1], keepdims=0)
    np.testing.assert_allclose(y, [1000.0 + np.log(2.0), -np.inf], rtol=1e-6)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("opset", [11, 12, 13])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_arg_extremes(op: str, opset: int, keepdims: int, axis: int) -> None:
    x = RNG.integers(0, 3, (4, 5)).astype(np.float32)  # many ties
    attrs = {"axis": axis, "keepdims": keepdims}
    assert_same(*run_both(op, {"data": x}, opset, **attrs))
    if opset >= 12:
        ours, theirs = run_both(op, {"data": x}, opset, select_last_index=1, **attrs)
        assert ours[0].dtype == np.int64
        assert_same(ours, theirs)


@settings(max_examples=25, deadline=None)
@given(
    op=st.sampled_from(ALL_REDUCE),
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    data=st.data(),
    keepdims=st.integers(0, 1),
)
def test_reduce_random_axes_match_onnxruntime(op: str, shape: list[int], data: st.DataObject, keepdims: int) -> None:
    rank = len(shape)
    axes = data.draw(st.lists(st.integers(-rank, rank - 1), max_size=rank, unique_by=lambda a: a % rank))
    x = _positive(op, RNG.standard_normal(shape).astype(np.float32))
    feeds = {"data": x, "axes": np.array(axes, np.int64) if axes else None}
    ours, theirs = run_both(op, feeds, _axes_moved_to_input(op), keepdims=keepdims)
    assert_same(ours, theirs, rtol=1e-5, atol=1e-5)
