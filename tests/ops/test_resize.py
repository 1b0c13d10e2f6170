"""Resize, Upsample, GridSample and AffineGrid against onnxruntime: every opset version, modes,
coordinate transformations, nearest rounding, antialias, axes and aspect-ratio policies, integer
inputs; plus the integer-factor nearest fast path."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from sealtrace.ops.resize import resize_18
from tests.ops.oneop import assert_same, both

RNG = np.random.default_rng(0)
SHAPES = [((5, 7), (11, 3)), ((6, 9), (4, 5)), ((3, 5), (1, 1))]
TRANSFORMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"]


def _resize_feeds(x: np.ndarray, out_hw: tuple[int, int], by: str, opset: int, crop: bool) -> dict[str, Any]:
    h, w = x.shape[2:]
    roi = np.array([0, 0, 0.1, 0.2, 1, 1, 0.9, 1.1], np.float32) if crop else None
    if by == "scales":
        scales = np.array([1, 1, out_hw[0] / h, out_hw[1] / w], np.float32)
        return {"x": x, "roi": roi if roi is not None else np.zeros(0, np.float32), "scales": scales}
    sizes = np.array([*x.shape[:2], *out_hw], np.int64)
    empty = np.zeros(0, np.float32)
    if opset == 11:  # Resize-11 requires the scales input, empty when sizes are given
        return {"x": x, "roi": roi if roi is not None else empty, "scales": empty, "sizes": sizes}
    return {"x": x, "roi": roi, "scales": None, "sizes": sizes}


@pytest.mark.parametrize("opset", [11, 13, 19])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("by", ["scales", "sizes"])
def test_resize_matches_onnxruntime(opset: int, mode: str, transform: str, by: str) -> None:
    nearest_modes = (
        ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"] if mode == "nearest" else ["floor"]
    )
    shapes = SHAPES if opset == 19 else SHAPES[:1]  # older versions share the code path
    for (in_hw, out_hw), nearest_mode in itertools.product(shapes, nearest_modes):
        x = RNG.standard_normal((2, 3, *in_hw)).astype(np.float32)
        feeds = _resize_feeds(x, out_hw, by, opset, transform == "tf_crop_and_resize")
        attrs = dict(
            mode=mode,
            coordinate_transformation_mode=transform,
            nearest_mode=nearest_mode,
            extrapolation_value=2.5,
            exclude_outside=int(mode == "cubic"),
        )
        got, want = both("Resize", feeds, opset, **attrs)
        assert_same(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("out_hw", [(2, 3), (3, 5), (9, 4)])
def test_resize_antialias_matches_onnxruntime(mode: str, out_hw: tuple[int, int]) -> None:
    x = RNG.standard_normal((1, 2, 7, 9)).astype(np.float32)
    feeds = {"x": x, "roi": None, "scales": None, "sizes": np.array([1, 2, *out_hw], np.int64)}
    got, want = both("Resize", feeds, 18, mode=mode, antialias=1)
    assert_same(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize(("axes", "sizes"), [((2, 3), (4, 11)), ((3, 2), (11, 4)), ((2,), (9,))])
def test_resize_axes_and_aspect_ratio_policy(
    policy: str, axes: tuple[int, ...], sizes: tuple[int, ...]
) -> None:
    x = RNG.standard_normal((1, 2, 5, 7)).astype(np.float32)
    feeds = {"x": x, "roi": None, "scales": None, "sizes": np.array(sizes, np.int64)}
    got, want = both("Resize", feeds, 19, mode="linear", axes=list(axes), keep_aspect_ratio_policy=policy)
    assert_same(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32, np.float16])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_keeps_the_input_dtype(dtype: type, mode: str) -> None:
    x = (RNG.standard_normal((1, 2, 5, 7)) * 50 + (100 if dtype == np.uint8 else 0)).astype(dtype)
    feeds = {"x": x, "roi": None, "scales": np.array([1, 1, 1.7, 0.6], np.float32)}
    got, want = both("Resize", feeds, 19, mode=mode)
    # Integer outputs truncate toward zero like onnxruntime's C cast; float16 rounds once more.
    assert_same(got, want, atol=1e-2 if dtype == np.float16 else 0)


@pytest.mark.parametrize(("op", "opset"), [("Resize", 10), ("Upsample", 9)])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [(1, 1, 2, 3), (1, 1, 2.5, 1), (1, 1, 0.6, 1.7)])
def test_legacy_resize_and_upsample(op: str, opset: int, mode: str, scales: tuple[float, ...]) -> None:
    if op == "Upsample" and min(scales) < 1:
        pytest.skip("Upsample only enlarges")
    x = RNG.standard_normal((1, 2, 5, 7)).astype(np.float32)
    got, want = both(op, {"x": x, "scales": np.array(scales, np.float32)}, opset, mode=mode)
    assert_same(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_7_scales_attribute(mode: str) -> None:
    x = RNG.standard_normal((1, 2, 5, 7)).astype(np.float32)
    got, want = both("Upsample", {"x": x}, 7, mode=mode, scales=[1.0, 1.0, 2.0, 3.5])
    assert_same(got, want, rtol=1e-5, atol=1e-6)


def test_integer_factor_nearest_is_a_repeat() -> None:
    x = RNG.integers(0, 255, (1, 8, 6, 5)).astype(np.uint8)
    y = resize_18(
        x,
        None,
        np.array([1, 1, 2, 3], np.float32),
        None,
        antialias=0,
        axes=None,
        coordinate_transformation_mode="asymmetric",
        cubic_coeff_a=-0.75,
        exclude_outside=0,
        extrapolation_value=0.0,
        keep_aspect_ratio_policy="stretch",
        mode="nearest",
        nearest_mode="floor",
    )
    np.testing.assert_array_equal(y, np.repeat(np.repeat(x, 2, axis=2), 3, axis=3))
    assert y.dtype == np.uint8 and y.flags.c_contiguous


@pytest.mark.parametrize(
    ("opset", "modes"), [(16, ("bilinear", "nearest", "bicubic")), (20, ("linear", "nearest", "cubic"))]
)
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_matches_onnxruntime(
    opset: int, modes: tuple[str, ...], padding_mode: str, align_corners: int
) -> None:
    x = RNG.standard_normal((2, 3, 5, 7)).astype(np.float32)
    grid = (RNG.random((2, 4, 6, 2)) * 3 - 1.5).astype(np.float32)
    grid[0, 0, :2] = [[-1, -1], [1, 1]]
    for mode in modes:
        got, want = both(
            "GridSample",
            {"x": x, "grid": grid},
            opset,
            mode=mode,
            padding_mode=padding_mode,
            align_corners=align_corners,
        )
        assert_same(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_grid_sample_volumetric(mode: str, padding_mode: str) -> None:
    x = RNG.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    grid = (RNG.random((1, 2, 3, 4, 3)) * 3 - 1.5).astype(np.float32)
    got, want = both("GridSample", {"x": x, "grid": grid}, 22, mode=mode, padding_mode=padding_mode)
    assert_same(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("size", [(2, 3, 5, 7), (2, 3, 4, 5, 6)])
def test_affine_grid_matches_onnxruntime(align_corners: int, size: tuple[int, ...]) -> None:
    rank = len(size) - 2
    theta = RNG.standard_normal((2, rank, rank + 1)).astype(np.float32)
    got, want = both(
        "AffineGrid", {"theta": theta, "size": np.array(size, np.int64)}, 20, align_corners=align_corners
    )
    assert_same(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("old_mode", "new_mode"), [("nearest", "nearest"), ("bilinear", "linear")])
def test_upsample_1_equals_upsample_7(old_mode: str, new_mode: str) -> None:
    from sealtrace.ops.resize import upsample_1, upsample_7

    x = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
    old = upsample_1(x, height_scale=2.0, mode=old_mode, width_scale=1.5)
    np.testing.assert_array_equal(old, upsample_7(x, mode=new_mode, scales=(1.0, 1.0, 2.0, 1.5)))
