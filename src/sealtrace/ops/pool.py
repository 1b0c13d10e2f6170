"""Pooling kernels: MaxPool, AveragePool, LpPool, their Global* forms, MaxUnpool, MaxRoiPool, RoiAlign.

Window reductions run axis by axis (a box window is separable): along each spatial axis, one
strided slice per kernel tap is folded in with ``np.maximum`` / ``np.add``, so a k x k window
costs 2k vectorized passes instead of k*k. MaxPool's Indices output needs the winning position,
so that path scans the whole window tap by tap, keeping the first maximum as ONNX Runtime does.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

import numpy as np

from sealtrace.ops import numerics
from sealtrace.ops._windows import Array, Window, pad_spatial, resolve_window, tap_view
from sealtrace.ops.reduce import reduce_max
from sealtrace.ops.registry import KernelContext, register


def _lowest(dtype: np.dtype[Any]) -> Any:
    return -np.inf if numerics.is_float(dtype) else np.iinfo(dtype).min


def _reduce_separable(xp: Array, window: Window, fold: Any) -> Array:
    """Fold every window of padded ``xp`` with the binary ufunc ``fold``, one axis at a time."""
    y = xp
    for a, (k, s, d, o) in enumerate(zip(window.kernel, window.strides, window.dilations, window.out_shape, strict=True)):
        axis = 2 + a
        index: list[slice] = [slice(None)] * y.ndim
        acc: Array | None = None
        for t in range(k):
            index[axis] = slice(t * d, t * d + (o - 1) * s + 1, s)
            view = y[tuple(index)]
            if acc is None:
                acc = view.copy()
            else:
                fold(acc, view, out=acc)
        assert acc is not None
        y = acc
    return y


def _padded(x: Array, window: Window, value: Any) -> Array:
    """``x`` padded with ``value`` so that every output window (ceil_mode ones too) fits."""
    end = window.needed_end_pads(x.shape[2:])
    return pad_spatial(x, window.pads_begin, end, value)


def _window_of(
    x: Array,
    kernel_shape: Sequence[int],
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
    pads: Sequence[int] | None,
    auto_pad: str,
    ceil_mode: int,
) -> Window:
    return resolve_window(
        x.shape[2:], kernel_shape, strides, dilations, pads, auto_pad, bool(ceil_mode), clamp_same=False
    )


@register("MaxPool", 1, 8, 10, 11, 12, 22, context=True)
def max_pool(
    ctx: KernelContext,
    x: Array,
    *,
    auto_pad: str,
    kernel_shape: Sequence[int],
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
    ceil_mode: int = 0,
    dilations: Sequence[int] | None = None,
    storage_order: int = 0,
) -> Array | tuple[Array, Array]:
    """ONNX MaxPool (versions 1, 8, 10, 11, 12, 22), with the optional Indices output."""
    window = _window_of(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    xp = _padded(x, window, _lowest(x.dtype))
    if ctx.n_outputs < 2:
        return _reduce_separable(xp, window, np.maximum)
    return _max_pool_with_indices(x, xp, window, storage_order)


def _max_pool_with_indices(x: Array, xp: Array, window: Window, storage_order: int) -> tuple[Array, Array]:
    """MaxPool values and flat indices into ``x`` (row- or column-major over the spatial axes)."""
    spatial = x.shape[2:]
    rank = len(spatial)
    # Flat-index weight of each spatial axis: row-major, or column-major when storage_order is 1.
    order = range(rank) if storage_order == 0 else range(rank - 1, -1, -1)
    weights = [0] * rank
    step = 1
    for a in reversed(list(order)):
        weights[a] = step
        step *= spatial[a]
    best: Array | None = None
    best_index: Array | None = None
    for tap in window.taps:
        view = tap_view(xp, tap, window)
        position = np.zeros(window.out_shape, dtype=np.int64)
        for a, (t, s, d, pb, o) in enumerate(
            zip(tap, window.strides, window.dilations, window.pads_begin, window.out_shape, strict=True)
        ):
            coord = np.arange(o, dtype=np.int64) * s + t * d - pb
            position = position + (coord * weights[a]).reshape((o,) + (1,) * (rank - 1 - a))
        if best is None or best_index is None:
            best = view.copy()
            best_index = np.broadcast_to(position, view.shape).copy()
        else:
            # Strictly greater: the first maximum in scan order wins.
            better = view > best
            np.copyto(best, view, where=better)
            np.copyto(best_index, np.broadcast_to(position, view.shape), where=better)
    assert best is not None and best_index is not None
    n, c = x.shape[:2]
    plane = np.arange(n * c, dtype=np.int64).reshape((n, c) + (1,) * rank) * prod(spatial)
    return best, best_index + plane


def _avg_counts(x: Array, window: Window, include_pad: bool) -> Array:
    """How many elements each output window averages over, as a broadcastable array."""
    spatial = x.shape[2:]
    counts: Array = np.ones((), dtype=np.int64)
    for size, k, s, d, pb, pe, o in zip(
        spatial, window.kernel, window.strides, window.dilations, window.pads_begin, window.pads_end,
        window.out_shape, strict=True,
    ):
        pos = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d - pb
        lo, hi = (-pb, size + pe) if include_pad else (0, size)
        axis_count = ((pos >= lo) & (pos < hi)).sum(axis=1)
        counts = np.multiply.outer(counts, axis_count)
    return counts


@register("AveragePool", 1, 7, 10, 11, 19, 22)
def average_pool(
    x: Array,
    *,
    auto_pad: str,
    kernel_shape: Sequence[int],
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
    ceil_mode: int = 0,
    count_include_pad: int = 0,
    dilations: Sequence[int] | None = None,
) -> Array:
    """ONNX AveragePool (versions 1, 7, 10, 11, 19, 22)."""
    window = _window_of(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    total = _reduce_separable(_padded(x, window, 0), window, np.add)
    counts = _avg_counts(x, window, bool(count_include_pad))
    return (total / counts.astype(x.dtype)).astype(x.dtype, copy=False)


def _powers(x: Array, p: float) -> Array:
    """|x| ** p in x's type: x * x for p = 2, else the correctly rounded power."""
    return np.asarray(x * x) if p == 2 else numerics.power(np.abs(x), np.asarray(p, dtype=x.dtype))


def _root(total: Array, p: float) -> Array:
    """total ** (1 / p) in total's type: sqrt for p = 2, else the correctly rounded power of 1/p
    rounded to the type."""
    if p == 2:
        return np.asarray(np.sqrt(total))
    return numerics.power(total, np.asarray(1.0 / p, dtype=total.dtype))


def _lp_pool(x: Array, window: Window, p: float) -> Array:
    # the window's powers added tap by tap, axis by axis (the order of _reduce_separable)
    total = _reduce_separable(_padded(_powers(x, p), window, 0), window, np.add)
    return _root(total, p).astype(x.dtype, copy=False)


@register("LpPool", 1, 2, 11, 18, 22)
def lp_pool(
    x: Array,
    *,
    auto_pad: str,
    kernel_shape: Sequence[int],
    p: float,
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
    ceil_mode: int = 0,
    dilations: Sequence[int] | None = None,
) -> Array:
    """ONNX LpPool (versions 1, 2, 11, 18, 22): the p-norm of every window."""
    window = _window_of(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    return _lp_pool(x, window, p)


def _spatial_axes(x: Array) -> tuple[int, ...]:
    return tuple(range(2, x.ndim))


@register("GlobalAveragePool", 1, 22)
def global_average_pool(x: Array) -> Array:
    """ONNX GlobalAveragePool (versions 1, 22): RN(mean over all spatial axes), kept as size 1."""
    return numerics.reduce_mean(x, _spatial_axes(x))


@register("GlobalMaxPool", 1, 22)
def global_max_pool(x: Array) -> Array:
    """ONNX GlobalMaxPool (versions 1, 22): max over all spatial axes, kept as size 1 (any rank), with
    ReduceMax's order of zeros (docs/numerics.md)."""
    return reduce_max(x, _spatial_axes(x))


@register("GlobalLpPool", 1, 2, 22)
def global_lp_pool(x: Array, *, p: float) -> Array:
    """ONNX GlobalLpPool (versions 1, 2, 22): p-norm over all spatial axes, kept as size 1."""
    axes = _spatial_axes(x)
    if p == 2:
        return numerics.reduce_l2(x, axes)  # one rounding of the exact norm
    return _root(numerics.reduce_sum(_powers(x, p), axes), p)


@register("MaxUnpool", 9, 11, 22)
def max_unpool(
    x: Array,
    indices: Array,
    output_shape: Array | None = None,
    *,
    kernel_shape: Sequence[int],
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
) -> Array:
    """ONNX MaxUnpool (versions 9, 11, 22): scatter values back to their pre-pooling positions.

    Indices address the shape MaxUnpool infers from its attributes; an explicit ``output_shape``
    then places that result in its top-left corner (as ONNX's own test data defines it).
    """
    rank = len(kernel_shape)
    strides_t = tuple(strides) if strides else (1,) * rank
    pads_t = tuple(pads) if pads else (0,) * (2 * rank)
    inferred = x.shape[:2] + tuple(
        (x.shape[2 + a] - 1) * strides_t[a] - (pads_t[a] + pads_t[rank + a]) + kernel_shape[a] for a in range(rank)
    )
    y = np.zeros(prod(inferred), dtype=x.dtype)
    y[indices.reshape(-1)] = x.reshape(-1)
    y = y.reshape(inferred)
    if output_shape is None:
        return y
    shape = tuple(int(v) for v in output_shape)
    if shape == inferred:
        return y
    out = np.zeros(shape, dtype=x.dtype)
    out[tuple(slice(0, min(i, s)) for i, s in zip(inferred, shape, strict=True))] = y[
        tuple(slice(0, min(i, s)) for i, s in zip(inferred, shape, strict=True))
    ]
    return out


def _round_half_away(v: Any) -> int:
    """C's round(): halves go away from zero (ONNX Runtime rounds RoI corners this way)."""
    return int(np.sign(v) * np.floor(np.abs(v) + 0.5))


@register("MaxRoiPool", 1, 22)
def max_roi_pool(x: Array, rois: Array, *, pooled_shape: Sequence[int], spatial_scale: float) -> Array:
    """ONNX MaxRoiPool (versions 1, 22): max over quantized bins of each region of interest."""
    _, c, h, w = x.shape
    ph_n, pw_n = pooled_shape
    scale = np.float32(spatial_scale)
    out = np.zeros((rois.shape[0], c, ph_n, pw_n), dtype=x.dtype)
    for r, roi in enumerate(rois.astype(np.float32)):
        batch = int(roi[0])
        start_w, start_h, end_w, end_h = (_round_half_away(v * scale) for v in roi[1:5])
        bin_h = np.float32(max(end_h - start_h + 1, 1)) / np.float32(ph_n)
        bin_w = np.float32(max(end_w - start_w + 1, 1)) / np.float32(pw_n)
        for ph in range(ph_n):
            hs = min(max(int(np.floor(np.float32(ph) * bin_h)) + start_h, 0), h)
            he = min(max(int(np.ceil(np.float32(ph + 1) * bin_h)) + start_h, 0), h)
            for pw in range(pw_n):
                ws = min(max(int(np.floor(np.float32(pw) * bin_w)) + start_w, 0), w)
                we = min(max(int(np.ceil(np.float32(pw + 1) * bin_w)) + start_w, 0), w)
                if he > hs and we > ws:
                    out[r, :, ph, pw] = x[batch, :, hs:he, ws:we].max(axis=(1, 2))
    return out


def _bilinear_axis(
    start: Any, bin_size: Any, pooled: int, grid: int, size: int, dtype: np.dtype[Any]
) -> tuple[Array, Array, Array, Array, Array]:
    """Sample positions along one axis: (low index, high index, low weight, high weight, valid)."""
    t = dtype.type
    p = np.arange(pooled, dtype=dtype)[:, None]
    i = np.arange(grid, dtype=dtype)[None, :]
    pos = (t(start) + p * t(bin_size) + (i + t(0.5)) * t(bin_size) / t(grid)).reshape(-1)
    valid = (pos >= -1.0) & (pos <= size)
    pos = np.maximum(pos, 0)
    low = pos.astype(np.int64)
    at_edge = low >= size - 1
    low = np.where(at_edge, size - 1, low)
    high = np.where(at_edge, size - 1, low + 1)
    pos = np.where(at_edge, low.astype(dtype), pos)
    frac = (pos - low).astype(dtype)
    return low, high, (t(1) - frac).astype(dtype), frac, valid


def _roi_align(
    x: Array,
    rois: Array,
    batch_indices: Array,
    mode: str,
    output_height: int,
    output_width: int,
    sampling_ratio: int,
    spatial_scale: float,
    half_pixel: bool,
) -> Array:
    """RoiAlign as ONNX Runtime computes it (incl. max mode's max over weighted corners)."""
    _, c, h, w = x.shape
    dtype = x.dtype if x.dtype in (np.float32, np.float64) else np.dtype(np.float32)
    t = dtype.type
    out = np.zeros((rois.shape[0], c, output_height, output_width), dtype=dtype)
    offset = t(0.5) if half_pixel else t(0)
    for r, roi in enumerate(rois.astype(dtype)):
        start_w, start_h, end_w, end_h = (v * t(spatial_scale) - offset for v in roi[:4])
        roi_w = end_w - start_w
        roi_h = end_h - start_h
        if not half_pixel:
            # Malformed RoIs are forced to 1x1 in the legacy mode.
            roi_w = max(roi_w, t(1))
            roi_h = max(roi_h, t(1))
        bin_h = roi_h / t(output_height)
        bin_w = roi_w / t(output_width)
        grid_h = sampling_ratio if sampling_ratio > 0 else int(np.ceil(roi_h / t(output_height)))
        grid_w = sampling_ratio if sampling_ratio > 0 else int(np.ceil(roi_w / t(output_width)))
        if grid_h <= 0 or grid_w <= 0:
            continue
        y_lo, y_hi, hy, ly, y_ok = _bilinear_axis(start_h, bin_h, output_height, grid_h, h, dtype)
        x_lo, x_hi, hx, lx, x_ok = _bilinear_axis(start_w, bin_w, output_width, grid_w, w, dtype)
        ok = (y_ok[:, None] & x_ok[None, :]).astype(dtype)
        plane = x[int(batch_indices[r])].astype(dtype, copy=False)
        yl, yh, xl, xh = y_lo[:, None], y_hi[:, None], x_lo[None, :], x_hi[None, :]
        terms = (
            (hy[:, None] * hx[None, :] * ok) * plane[:, yl, xl],
            (hy[:, None] * lx[None, :] * ok) * plane[:, yl, xh],
            (ly[:, None] * hx[None, :] * ok) * plane[:, yh, xl],
            (ly[:, None] * lx[None, :] * ok) * plane[:, yh, xh],
        )
        shape = (c, output_height, grid_h, output_width, grid_w)
        if mode == "avg":
            samples = ((terms[0] + terms[1]) + terms[2]) + terms[3]
            out[r] = samples.reshape(shape).sum(axis=(2, 4)) / t(max(grid_h * grid_w, 1))
        else:
            samples = np.maximum(np.maximum(terms[0], terms[1]), np.maximum(terms[2], terms[3]))
            out[r] = samples.reshape(shape).max(axis=(2, 4))
    return out.astype(x.dtype, copy=False)


@register("RoiAlign", 10)
def roi_align_10(
    x: Array,
    rois: Array,
    batch_indices: Array,
    *,
    mode: str,
    output_height: int,
    output_width: int,
    sampling_ratio: int,
    spatial_scale: float,
) -> Array:
    """ONNX RoiAlign (version 10): pixel corners without the half-pixel shift."""
    return _roi_align(
        x, rois, batch_indices, mode, output_height, output_width, sampling_ratio, spatial_scale, False
    )


@register("RoiAlign", 16, 22)
def roi_align(
    x: Array,
    rois: Array,
    batch_indices: Array,
    *,
    coordinate_transformation_mode: str,
    mode: str,
    output_height: int,
    output_width: int,
    sampling_ratio: int,
    spatial_scale: float,
) -> Array:
    """ONNX RoiAlign (versions 16, 22), coordinate_transformation_mode half_pixel/output_half_pixel."""
    return _roi_align(
        x,
        rois,
        batch_indices,
        mode,
        output_height,
        output_width,
        sampling_ratio,
        spatial_scale,
        coordinate_transformation_mode == "half_pixel",
    )
