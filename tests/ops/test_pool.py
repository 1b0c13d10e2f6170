"""Pooling kernels against onnxruntime: MaxPool (Indices, storage_order, int8/uint8, ceil_mode,
dilations), AveragePool, LpPool, the Global* pools at every rank, MaxUnpool, MaxRoiPool, RoiAlign."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.ops.test_conv import build, normal, run_ours, run_theirs, same

RNG = np.random.default_rng(11)

MAX_CASES: list[tuple[tuple[int, ...], dict[str, Any]]] = [
    ((1, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 2, 9, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 10, 10), {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}),  # YOLO SPPF
    ((1, 2, 7, 8), {"kernel_shape": [3, 2], "strides": [2, 3], "ceil_mode": 1}),
    ((1, 2, 9, 9), {"kernel_shape": [3, 3], "dilations": [2, 2], "strides": [1, 2]}),
    ((1, 2, 8, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 8, 9), {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 8, 9), {"kernel_shape": [1, 1], "strides": [3, 3], "auto_pad": "SAME_UPPER"}),  # negative SAME pad
    ((2, 3, 11), {"kernel_shape": [3], "strides": [2], "pads": [1, 0]}),  # 1-D
    ((1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 2], "strides": [1, 2, 2], "pads": [0, 1, 1, 1, 0, 0]}),  # 3-D
]


@pytest.mark.parametrize(("shape", "attrs"), MAX_CASES)
def test_max_pool_with_indices(shape: tuple[int, ...], attrs: dict[str, Any]) -> None:
    feeds = {"x": normal(*shape)}
    for order in (0, 1):
        same(build("MaxPool", feeds, 12, n_outputs=2, storage_order=order, **attrs), feeds, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.float16, np.float64])
def test_max_pool_dtypes(dtype: Any) -> None:
    if np.dtype(dtype).kind == "f":
        x = normal(1, 3, 7, 7, dtype=dtype)
    else:
        info = np.iinfo(dtype)
        x = RNG.integers(info.min, info.max + 1, (1, 3, 7, 7)).astype(dtype)
    feeds = {"x": x}
    model = build("MaxPool", feeds, 12, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    got = run_ours(model, feeds)[0]
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, run_theirs(model, feeds)[0])


@pytest.mark.parametrize("opset", [7, 8, 10, 11, 12, 22])
def test_max_pool_versions(opset: int) -> None:
    feeds = {"x": normal(1, 2, 6, 6)}
    same(build("MaxPool", feeds, opset, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 0]), feeds, rtol=0, atol=0)


def test_max_pool_first_maximum_wins() -> None:
    feeds = {"x": np.ones((1, 1, 4, 4), np.float32)}
    same(build("MaxPool", feeds, 12, n_outputs=2, kernel_shape=[2, 2], strides=[1, 1]), feeds, rtol=0, atol=0)


AVG_CASES: list[tuple[tuple[int, ...], dict[str, Any]]] = [
    ((1, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 2, 9, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 0, 1, 1], "ceil_mode": 1}),
    ((1, 2, 9, 9), {"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [2, 1, 1, 2]}),
    ((1, 2, 8, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 8, 9), {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((2, 3, 11), {"kernel_shape": [4], "strides": [3], "pads": [2, 1], "ceil_mode": 1}),
    ((1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 2], "strides": [1, 2, 2], "pads": [0, 1, 1, 1, 0, 0]}),
]


@pytest.mark.parametrize(("shape", "attrs"), AVG_CASES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool(shape: tuple[int, ...], attrs: dict[str, Any], count_include_pad: int) -> None:
    feeds = {"x": normal(*shape)}
    same(build("AveragePool", feeds, 19, count_include_pad=count_include_pad, **attrs), feeds, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("opset", [7, 10, 11, 19, 22])
def test_average_pool_versions(opset: int) -> None:
    feeds = {"x": normal(1, 2, 7, 7)}
    model = build("AveragePool", feeds, opset, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)
    same(model, feeds, rtol=1e-6, atol=1e-6)


def test_average_pool_float16_stays_float16() -> None:
    feeds = {"x": normal(1, 2, 6, 6, dtype=np.float16)}
    model = build("AveragePool", feeds, 11, kernel_shape=[2, 2], strides=[2, 2])
    got = run_ours(model, feeds)[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, run_theirs(model, feeds)[0], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("opset", [2, 11, 18])
def test_lp_pool(p: int, opset: int) -> None:
    feeds = {"x": normal(1, 2, 7, 6)}
    attrs: dict[str, Any] = {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1], "p": p}
    if opset >= 18:
        attrs |= {"ceil_mode": 1, "dilations": [1, 2]}
    same(build("LpPool", feeds, opset, **attrs), feeds, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 7), (2, 3, 5, 4), (1, 2, 3, 4, 5)])
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
def test_global_pools_any_rank(shape: tuple[int, ...], op: str) -> None:
    feeds = {"x": normal(*shape)}
    model = build(op, feeds, 17)
    got = run_ours(model, feeds)[0]
    # A [N, C, L] input keeps its rank: [N, C, 1] (every spatial axis becomes 1).
    assert got.shape == shape[:2] + (1,) * (len(shape) - 2)
    assert got.dtype == np.float32
    if len(shape) > 2:  # onnxruntime rejects rank-2 inputs
        same(model, feeds, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_global_average_pool_dtypes(dtype: Any) -> None:
    x = normal(2, 200, 2, 96, dtype=dtype)
    got = run_ours(build("GlobalAveragePool", {"x": x}, 22), {"x": x})[0]
    want = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    assert got.dtype == dtype and got.shape == (2, 200, 1, 1)
    tolerance = {np.float16: 1e-3, np.float32: 1e-6, np.float64: 1e-13}[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("opset", [1, 2, 22])
def test_global_lp_pool_versions(opset: int) -> None:
    feeds = {"x": normal(1, 3, 4, 4)}
    got = run_ours(build("GlobalLpPool", feeds, opset, p=3 if opset > 1 else 3.0), feeds)[0]
    want = (np.abs(feeds["x"].astype(np.float64)) ** 3).sum(axis=(2, 3), keepdims=True) ** (1 / 3)
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("with_shape", [False, True])
def test_max_unpool_inverts_max_pool(with_shape: bool) -> None:
    x = normal(2, 3, 6, 8)
    pooled, indices = run_ours(build("MaxPool", {"x": x}, 12, n_outputs=2, kernel_shape=[2, 2], strides=[2, 2]), {"x": x})
    feeds = {"x": pooled, "i": indices}
    weights = {"shape": np.array(x.shape, np.int64)} if with_shape else None
    model = build("MaxUnpool", feeds, 11, weights, kernel_shape=[2, 2], strides=[2, 2])
    same(model, feeds, rtol=0, atol=0)
    got = run_ours(model, feeds)[0]
    np.testing.assert_array_equal(np.where(got != 0, x, 0), got)


def test_max_unpool_output_shape_pads_the_inferred_result() -> None:
    # ONNX's own test data: indices address the inferred 4x4 shape, placed in a 5x5 output.
    feeds = {"x": np.array([[[[5, 6], [7, 8]]]], np.float32), "i": np.array([[[[5, 7], [13, 15]]]], np.int64)}
    model = build("MaxUnpool", feeds, 11, {"shape": np.array([1, 1, 5, 5], np.int64)}, kernel_shape=[2, 2], strides=[2, 2])
    want = np.zeros((1, 1, 5, 5), np.float32)
    want[0, 0, 1, 1], want[0, 0, 1, 3], want[0, 0, 3, 1], want[0, 0, 3, 3] = 5, 6, 7, 8
    np.testing.assert_array_equal(run_ours(model, feeds)[0], want)


def test_max_roi_pool() -> None:
    x = normal(2, 3, 12, 10)
    rois = np.array([[0, 1, 1, 6, 8], [1, 0.4, 2.5, 9.6, 11], [0, 3, 3, 3, 3], [1, -2, -2, 4, 4]], np.float32)
    for scale in (1.0, 0.5):
        feeds = {"x": x, "rois": rois}
        same(build("MaxRoiPool", feeds, 17, pooled_shape=[3, 2], spatial_scale=scale), feeds, rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_roi_align(mode: str, transform: str, sampling_ratio: int) -> None:
    x = normal(2, 3, 10, 12)
    rois = np.array([[0.5, 1.0, 7.5, 8.0], [2.2, 0.0, 11.9, 9.9], [-3.0, -2.0, 4.0, 20.0], [5, 5, 5.2, 5.1]], np.float32)
    feeds = {"x": x, "rois": rois, "batch": np.array([0, 1, 1, 0], np.int64)}
    attrs = {"mode": mode, "output_height": 3, "output_width": 4, "sampling_ratio": sampling_ratio, "spatial_scale": 0.8}
    same(build("RoiAlign", feeds, 16, coordinate_transformation_mode=transform, **attrs), feeds, rtol=1e-5, atol=1e-5)
    if transform == "output_half_pixel":
        same(build("RoiAlign", feeds, 10, **attrs), feeds, rtol=1e-5, atol=1e-5)
