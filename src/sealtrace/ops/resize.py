"""Resizing: Resize, Upsample (GridSample and AffineGrid are in grid_sample.py).

Resize is separable: every resized axis maps each output index to a few source indices and
weights (computed once per axis, vectorized), and the data is gathered and blended one axis at a
time; integer-factor nearest upsampling is a plain repeat. Coordinates are computed in float32 with
the formulas ONNX Runtime uses, so nearest neighbours and interpolation weights agree with it where
the spec leaves rounding open, and 2-D bilinear sums its four corners in ONNX Runtime's order so
that the outputs are bit-identical to it.

Numerics are portable: coordinates, filter weights (Keys' cubic, the antialiasing triangle, their
normalization by a sum taken tap by tap) and the blends are IEEE operations in a fixed order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sealtrace.ops.registry import register

_F32 = np.float32

CONFORMANCE_EXCLUSIONS: dict[str, str] = {
    name: (
        "expected data uses the fractional output width (input * scale) as length_resized for "
        "align_corners; the spec defines length_resized as the output length, as ONNX Runtime does "
        "(it fails this case too)"
    )
    for name in (
        "test_resize_downsample_scales_cubic_align_corners",
        "test_resize_downsample_scales_linear_align_corners",
    )
}


@dataclass(frozen=True)
class _AxisMap:
    """How one resized axis samples its input: taps (out, n) of indices and optional weights."""

    indices: np.ndarray
    weights: np.ndarray | None
    outside: np.ndarray | None  # tf_crop_and_resize: output positions that take the extrapolation value


def _source_coordinates(
    mode: str, out_len: int, in_len: int, scale: np.float32, roi_start: float, roi_end: float
) -> np.ndarray:
    """x_original for every output index, in float32 (ONNX Runtime's formulas)."""
    y = np.arange(out_len).astype(_F32)
    half = _F32(0.5)
    if mode == "asymmetric":
        return y / scale
    if mode == "half_pixel":
        return (y + half) / scale - half
    if mode == "pytorch_half_pixel":
        return (y + half) / scale - half if out_len > 1 else np.zeros(out_len, _F32)
    if mode == "tf_half_pixel_for_nn":
        return (y + half) / scale
    if mode == "align_corners":
        if out_len == 1:
            return np.zeros(out_len, _F32)
        return y * _F32(in_len - 1) / _F32(out_len - 1)
    if mode == "half_pixel_symmetric":
        output_width = scale * _F32(in_len)
        adjustment = _F32(out_len) / output_width
        center = _F32(in_len) / _F32(2)
        offset = center * (_F32(1) - adjustment)
        return offset + (y + half) / scale - half
    if mode == "tf_crop_and_resize":
        start, end = _F32(roi_start), _F32(roi_end)
        if out_len == 1:
            return np.full(out_len, 0.5 * (float(start) + float(end)) * (in_len - 1), dtype=_F32)
        return start * _F32(in_len - 1) + (y * (end - start) * _F32(in_len - 1)) / _F32(out_len - 1)
    raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")


def _nearest_indices(x: np.ndarray, nearest_mode: str, downsampling: bool) -> np.ndarray:
    floor = np.floor(x)
    frac = x - floor  # exact in float32, so ties are detected exactly
    if nearest_mode == "round_prefer_floor":
        picked = floor + (frac > 0.5)
    elif nearest_mode == "round_prefer_ceil":
        picked = floor + (frac >= 0.5)
    elif nearest_mode == "floor":
        picked = floor
    elif nearest_mode == "ceil":
        picked = np.ceil(x)
    elif nearest_mode == "simple":
        # Opset <= 10 (Resize-10, Upsample): ceil when downsampling, truncation otherwise.
        picked = np.ceil(x) if downsampling else np.trunc(x)
    else:
        raise ValueError(f"unknown nearest_mode {nearest_mode!r}")
    return picked.astype(np.int64)


def cubic_kernel(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with coefficient ``a``, evaluated at distances ``d``."""
    d = np.abs(d)
    d2, d3 = d * d, d * d * d
    near = (a + 2) * d3 - (a + 3) * d2 + 1
    far = a * d3 - 5 * a * d2 + 8 * a * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _axis_map(
    *,
    in_len: int,
    out_len: int,
    scale: np.float32,
    roi: tuple[float, float],
    mode: str,
    transform: str,
    nearest_mode: str,
    cubic_coeff_a: float,
    exclude_outside: bool,
    antialias: bool,
) -> _AxisMap:
    x = _source_coordinates(transform, out_len, in_len, scale, roi[0], roi[1])
    outside = None
    if transform == "tf_crop_and_resize":
        outside = (x < 0) | (x > in_len - 1)
        if not outside.any():
            outside = None
    if mode == "nearest":
        idx = _nearest_indices(x, nearest_mode, bool(scale < 1))
        return _AxisMap(np.clip(idx, 0, in_len - 1)[:, None], None, outside)
    xd = x.astype(np.float64)
    if mode == "linear" and not antialias:
        # Clamp first, then blend the two neighbours (edge replication, as ONNX Runtime does).
        xc = np.clip(xd, 0, in_len - 1)
        i0 = np.floor(xc).astype(np.int64)
        i1 = np.minimum(i0 + 1, in_len - 1)
        w1 = xc - i0
        w0 = 1 - w1
        # At the last index both taps are the same pixel; ONNX Runtime weighs them 0.5 each.
        edge = i0 == i1
        w0, w1 = np.where(edge, 0.5, w0), np.where(edge, 0.5, w1)
        return _AxisMap(np.stack([i0, i1], 1), np.stack([w0, w1], 1), outside)
    if mode not in ("linear", "cubic"):
        raise ValueError(f"unknown Resize mode {mode!r}")
    support = 1.0 if mode == "linear" else 2.0
    # Antialiasing stretches the filter by 1/scale when downsampling.
    stretch = min(float(scale), 1.0) if antialias else 1.0
    start = int(np.floor(-support / stretch)) + 1
    taps = 2 - 2 * start
    # The window is anchored at ceil(x) - 1 so that an integral x keeps its left neighbourhood.
    base = np.ceil(xd).astype(np.int64) - 1
    idx = base[:, None] + np.arange(start, start + taps)[None, :]
    dist = (idx - xd[:, None]) * stretch
    weights = np.clip(1 - np.abs(dist), 0, 1) if mode == "linear" else cubic_kernel(dist, cubic_coeff_a)
    if exclude_outside:
        weights = np.where((idx < 0) | (idx >= in_len), 0.0, weights)
    if antialias or exclude_outside:
        # The taps' sum left to right (a fixed order, not NumPy's pairwise one), then each weight over it.
        total = weights[:, :1].copy()
        for tap in range(1, taps):
            total += weights[:, tap : tap + 1]
        weights = weights / np.where(total == 0, 1.0, total)
    return _AxisMap(np.clip(idx, 0, in_len - 1), weights, outside)


def _repeat_factor(indices: np.ndarray, in_len: int) -> int:
    """k when this nearest map is plain integer upsampling (index i -> i // k), else 0."""
    out_len = indices.shape[0]
    if in_len == 0 or out_len % in_len:
        return 0
    k = out_len // in_len
    return k if np.array_equal(indices[:, 0], np.arange(out_len) // k) else 0


def _apply_nearest(x: np.ndarray, maps: dict[int, _AxisMap]) -> np.ndarray:
    for axis, m in maps.items():
        # Integer-factor upsampling (index i -> i // k) is a plain repeat, much cheaper than a gather.
        k = _repeat_factor(m.indices, x.shape[axis])
        x = np.repeat(x, k, axis=axis) if k else np.take(x, m.indices[:, 0], axis=axis)
    return x


def _apply_weighted(x: np.ndarray, maps: dict[int, _AxisMap], work: np.dtype[Any]) -> np.ndarray:
    y = x.astype(work, copy=False)
    # Innermost axis first: its element-wise gathers are the slow ones, do them on the smaller array
    # when upsampling (the other axes gather whole rows).
    for axis, m in sorted(maps.items(), reverse=True):
        assert m.weights is not None
        shape = [1] * y.ndim
        shape[axis] = m.indices.shape[0]
        weights = m.weights.astype(work)
        acc = np.take(y, m.indices[:, 0], axis=axis)
        acc *= weights[:, 0].reshape(shape)
        for tap in range(1, m.indices.shape[1]):
            term = np.take(y, m.indices[:, tap], axis=axis)
            term *= weights[:, tap].reshape(shape)
            acc += term
        y = acc
    return y


def _identity_linear_map(length: int) -> _AxisMap:
    return _axis_map(
        in_len=length,
        out_len=length,
        scale=_F32(1),
        roi=(0.0, 1.0),
        mode="linear",
        transform="asymmetric",
        nearest_mode="floor",
        cubic_coeff_a=-0.75,
        exclude_outside=False,
        antialias=False,
    )


def _apply_bilinear(x: np.ndarray, rows: _AxisMap, cols: _AxisMap, work: np.dtype[Any]) -> np.ndarray:
    """Bilinear over the last two axes, summed in ONNX Runtime's order so the floats agree exactly."""
    assert rows.weights is not None and cols.weights is not None
    wy = rows.weights.astype(work)
    wx = cols.weights.astype(work)
    y = x.astype(work, copy=False)
    # Column gathers (the slow, element-wise ones) run on the input rows, row gathers copy whole rows.
    left = np.take(y, cols.indices[:, 0], axis=-1)
    right = np.take(y, cols.indices[:, 1], axis=-1)
    y0, y1 = rows.indices[:, 0], rows.indices[:, 1]
    out = np.take(left, y0, axis=-2)
    out *= np.outer(wy[:, 0], wx[:, 0])
    for side, ys, wrow, wcol in ((right, y0, 0, 1), (left, y1, 1, 0), (right, y1, 1, 1)):
        term = np.take(side, ys, axis=-2)
        term *= np.outer(wy[:, wrow], wx[:, wcol])
        out += term
    return out


def _resize(
    x: np.ndarray,
    out_shape: list[int],
    scales: list[np.float32],
    roi: list[tuple[float, float]],
    *,
    mode: str,
    transform: str,
    nearest_mode: str,
    cubic_coeff_a: float = -0.75,
    exclude_outside: bool = False,
    extrapolation_value: float = 0.0,
    antialias: bool = False,
) -> np.ndarray:
    maps: dict[int, _AxisMap] = {}
    for axis, (in_len, out_len) in enumerate(zip(x.shape, out_shape, strict=True)):
        identity = (
            in_len == out_len
            and scales[axis] == 1
            and (transform != "tf_crop_and_resize" or roi[axis] == (0.0, 1.0))
        )
        if identity:
            continue
        if out_len == 0 or in_len == 0:
            return np.zeros(out_shape, dtype=x.dtype)
        maps[axis] = _axis_map(
            in_len=in_len,
            out_len=out_len,
            scale=scales[axis],
            roi=roi[axis],
            mode=mode,
            transform=transform,
            nearest_mode=nearest_mode,
            cubic_coeff_a=cubic_coeff_a,
            exclude_outside=exclude_outside,
            antialias=antialias,
        )
    if not maps:
        return x.copy()
    if mode == "nearest":
        y = _apply_nearest(x, maps)
    else:
        work = np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)
        rows, cols = x.ndim - 2, x.ndim - 1
        if mode == "linear" and not antialias and x.ndim in (2, 4) and set(maps) <= {rows, cols}:
            # ONNX Runtime's 2-D kernel also blends over an axis left as it is.
            for axis in (rows, cols):
                if axis not in maps:
                    maps[axis] = _identity_linear_map(x.shape[axis])
            y = _apply_bilinear(x, maps[rows], maps[cols], work)
        else:
            y = _apply_weighted(x, maps, work)
        if x.dtype.kind in "iu":
            # The spec leaves integer rounding open; ONNX Runtime truncates toward zero (a C cast).
            info = np.iinfo(x.dtype)
            y = np.clip(np.trunc(y), info.min, info.max)
        y = y.astype(x.dtype, copy=False)
    outside = [(axis, m.outside) for axis, m in maps.items() if m.outside is not None]
    if outside:
        mask = np.zeros(y.shape, dtype=bool)
        for axis, flags in outside:
            shape = [1] * y.ndim
            shape[axis] = flags.shape[0]
            mask = mask | flags.reshape(shape)
        y = np.where(mask, np.asarray(extrapolation_value).astype(y.dtype), y)
    return np.ascontiguousarray(y)


def _round_half_up(v: np.float32) -> int:
    floor = np.floor(v)
    return int(floor) + int(v - floor >= 0.5)


def _output_from_scales(shape: tuple[int, ...], scales: np.ndarray) -> tuple[list[int], list[np.float32]]:
    factors = [_F32(s) for s in scales.astype(_F32).reshape(-1)]
    if len(factors) != len(shape):
        raise ValueError(f"{len(factors)} scales for an input of rank {len(shape)}")
    # floor(input * scale) in float32, as ONNX Runtime computes it.
    return [int(np.floor(_F32(n) * s)) for n, s in zip(shape, factors, strict=True)], factors


def _resize_general(
    x: np.ndarray,
    roi: np.ndarray | None,
    scales: np.ndarray | None,
    sizes: np.ndarray | None,
    *,
    mode: str,
    transform: str,
    nearest_mode: str,
    cubic_coeff_a: float,
    exclude_outside: int,
    extrapolation_value: float,
    antialias: int = 0,
    axes: tuple[int, ...] | None = None,
    keep_aspect_ratio_policy: str = "stretch",
) -> np.ndarray:
    rank = x.ndim
    chosen = [a + rank if a < 0 else a for a in axes] if axes else list(range(rank))
    roi_full = [(0.0, 1.0)] * rank
    if roi is not None and roi.size:
        flat = roi.astype(np.float64).reshape(-1)
        n = len(chosen)
        for i, axis in enumerate(chosen):
            roi_full[axis] = (float(flat[i]), float(flat[n + i]))
    if scales is not None and scales.size:
        full = np.ones(rank, dtype=_F32)
        full[chosen] = scales.astype(_F32).reshape(-1)
        out_shape, factors = _output_from_scales(x.shape, full)
    elif sizes is not None and sizes.size:
        requested = [int(s) for s in sizes.reshape(-1)]
        out_shape = list(x.shape)
        factors = [_F32(1)] * rank
        if keep_aspect_ratio_policy == "stretch":
            for axis, size in zip(chosen, requested, strict=True):
                out_shape[axis] = size
                factors[axis] = _F32(size) / _F32(x.shape[axis])
        else:
            ratios = [_F32(size) / _F32(x.shape[axis]) for axis, size in zip(chosen, requested, strict=True)]
            if keep_aspect_ratio_policy == "not_larger":
                common = min(ratios)
            elif keep_aspect_ratio_policy == "not_smaller":
                common = max(ratios)
            else:
                raise ValueError(f"unknown keep_aspect_ratio_policy {keep_aspect_ratio_policy!r}")
            for axis in chosen:
                out_shape[axis] = _round_half_up(_F32(common * _F32(x.shape[axis])))
                factors[axis] = common
    else:
        raise ValueError("Resize needs either 'scales' or 'sizes'")
    return _resize(
        x,
        out_shape,
        factors,
        roi_full,
        mode=mode,
        transform=transform,
        nearest_mode=nearest_mode,
        cubic_coeff_a=cubic_coeff_a,
        exclude_outside=bool(exclude_outside),
        extrapolation_value=extrapolation_value,
        antialias=bool(antialias),
    )


def _legacy_resize(x: np.ndarray, scales: np.ndarray, mode: str) -> np.ndarray:
    """Resize-10 / Upsample: asymmetric coordinates, 'simple' nearest rounding."""
    if mode == "bilinear":
        mode = "linear"
    out_shape, factors = _output_from_scales(x.shape, scales)
    return _resize(
        x,
        out_shape,
        factors,
        [(0.0, 1.0)] * x.ndim,
        mode=mode,
        transform="asymmetric",
        nearest_mode="simple",
    )


@register("Resize", 10)
def resize_10(x: np.ndarray, scales: np.ndarray, *, mode: str) -> np.ndarray:
    """Resize-10: nearest / linear with asymmetric coordinates."""
    return _legacy_resize(x, scales, mode)


@register("Resize", 11, 13)
def resize_11(
    x: np.ndarray,
    roi: np.ndarray | None = None,
    scales: np.ndarray | None = None,
    sizes: np.ndarray | None = None,
    *,
    coordinate_transformation_mode: str,
    cubic_coeff_a: float,
    exclude_outside: int,
    extrapolation_value: float,
    mode: str,
    nearest_mode: str,
) -> np.ndarray:
    """Resize-11, -13: nearest / linear / cubic with the coordinate transformation modes."""
    return _resize_general(
        x,
        roi,
        scales,
        sizes,
        mode=mode,
        transform=coordinate_transformation_mode,
        nearest_mode=nearest_mode,
        cubic_coeff_a=cubic_coeff_a,
        exclude_outside=exclude_outside,
        extrapolation_value=extrapolation_value,
    )


@register("Resize", 18, 19)
def resize_18(
    x: np.ndarray,
    roi: np.ndarray | None = None,
    scales: np.ndarray | None = None,
    sizes: np.ndarray | None = None,
    *,
    antialias: int,
    axes: tuple[int, ...] | None,
    coordinate_transformation_mode: str,
    cubic_coeff_a: float,
    exclude_outside: int,
    extrapolation_value: float,
    keep_aspect_ratio_policy: str,
    mode: str,
    nearest_mode: str,
) -> np.ndarray:
    """Resize-18, -19: adds axes, antialias, keep_aspect_ratio_policy (and half_pixel_symmetric)."""
    return _resize_general(
        x,
        roi,
        scales,
        sizes,
        mode=mode,
        transform=coordinate_transformation_mode,
        nearest_mode=nearest_mode,
        cubic_coeff_a=cubic_coeff_a,
        exclude_outside=exclude_outside,
        extrapolation_value=extrapolation_value,
        antialias=antialias,
        axes=axes,
        keep_aspect_ratio_policy=keep_aspect_ratio_policy,
    )


@register("Upsample", 1)
def upsample_1(
    x: np.ndarray, *, height_scale: float | None, mode: str, width_scale: float | None
) -> np.ndarray:
    """Upsample-1 (experimental): NCHW input, height_scale / width_scale attributes."""
    if x.ndim != 4 or height_scale is None or width_scale is None:
        raise ValueError("Upsample-1 takes an NCHW input and both height_scale and width_scale")
    return _legacy_resize(x, np.array([1, 1, height_scale, width_scale], dtype=_F32), mode)


@register("Upsample", 7)
def upsample_7(x: np.ndarray, *, mode: str, scales: tuple[float, ...]) -> np.ndarray:
    """Upsample-7: scales as an attribute."""
    return _legacy_resize(x, np.asarray(scales, dtype=_F32), mode)


@register("Upsample", 9, 10)
def upsample_9(x: np.ndarray, scales: np.ndarray, *, mode: str) -> np.ndarray:
    """Upsample-9, -10: scales as an input."""
    return _legacy_resize(x, scales, mode)
