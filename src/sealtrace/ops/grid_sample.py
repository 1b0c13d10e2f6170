"""Spatial sampling: GridSample (nearest / linear / cubic sampling of an input at grid
coordinates, with zeros, border or reflection padding) and AffineGrid (the grid of affine maps).

GridSample's coordinates, weights and blends are IEEE operations in a fixed order in the working
precision (float64 when the input or grid is, else float32), its cubic weights Keys' kernel as
Resize computes them; AffineGrid's products are numerics' correctly rounded sums.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sealtrace.ops import numerics
from sealtrace.ops.registry import register
from sealtrace.ops.resize import cubic_kernel


def _grid_reflect(x: np.ndarray, low: float, high: float) -> np.ndarray:
    """Reflect coordinates into [low, high] by the nearer border until they land inside."""
    span = high - low
    if span <= 0:
        return np.full_like(x, low)
    below = x < low
    above = x > high
    dx = np.where(below, low - x, np.where(above, x - high, 0))
    n = np.trunc(dx / x.dtype.type(span))
    r = dx - n * x.dtype.type(span)
    even = np.remainder(n, 2) == 0
    from_low = np.where(even, low + r, high - r)
    from_high = np.where(even, high - r, low + r)
    return np.where(below, from_low, np.where(above, from_high, x)).astype(x.dtype)


def _padded_index(
    index: np.ndarray, length: int, padding_mode: str, low: float, high: float, work: np.dtype[Any]
) -> tuple[np.ndarray, np.ndarray | None]:
    """An integer sampling index made safe for the axis: (clamped index, validity mask or None)."""
    if padding_mode == "zeros":
        return np.clip(index, 0, length - 1), (index >= 0) & (index < length)
    if padding_mode == "reflection":
        index = np.trunc(_grid_reflect(index.astype(work), low, high)).astype(np.int64)
    return np.clip(index, 0, length - 1), None


def _grid_sample(
    x: np.ndarray, grid: np.ndarray, mode: str, padding_mode: str, align_corners: int
) -> np.ndarray:
    spatial = x.shape[2:]
    rank = len(spatial)
    if grid.shape[-1] != rank or grid.shape[0] != x.shape[0]:
        raise ValueError(f"grid of shape {grid.shape} does not fit an input of shape {x.shape}")
    out_shape = (*x.shape[:2], *grid.shape[1:-1])
    if math.prod(out_shape) == 0:  # (a [2**40, C, 0, W] batch: no sample to take)
        return np.zeros(out_shape, x.dtype)
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    work = np.dtype(np.float64) if np.float64 in (x.dtype, grid.dtype) else np.dtype(np.float32)
    g: np.ndarray = grid.astype(work, copy=False)
    one: np.ndarray = np.asarray(1, dtype=work)
    two: np.ndarray = np.asarray(2, dtype=work)
    coords: list[np.ndarray] = []
    bounds: list[tuple[float, float]] = []
    for d, length in enumerate(spatial):
        # The grid's last axis lists coordinates innermost first (x, y, z ...).
        n: np.ndarray = g[..., rank - 1 - d]
        if align_corners:
            c = (n + one) / two * np.asarray(length - 1, dtype=work)
            low, high = 0.0, float(length - 1)
        else:
            c = ((n + one) * np.asarray(length, dtype=work) - one) / two
            low, high = -0.5, length - 0.5
        if mode == "nearest":
            c = np.rint(c)  # half to even, as PyTorch and ONNX Runtime round
        outside = (c < low) | (c > high)
        if padding_mode == "border" and mode != "cubic":
            # Cubic taps are clamped one by one instead (ONNX Runtime and PyTorch do the same).
            c = np.where(outside, np.clip(c, 0, length - 1), c)
        elif padding_mode == "reflection":
            c = np.where(outside, _grid_reflect(c, low, high), c)
        coords.append(c.astype(work, copy=False))
        bounds.append((low, high))
    # Channels last so one advanced index gathers every channel of a sampling point.
    data = np.moveaxis(x, 1, -1)
    batch = np.arange(x.shape[0]).reshape((-1,) + (1,) * (grid.ndim - 2))
    if mode == "nearest":
        index: list[np.ndarray] = [batch]
        valid = np.ones(grid.shape[:-1], dtype=bool)
        for d, c in enumerate(coords):
            i, mask = _padded_index(np.trunc(c).astype(np.int64), spatial[d], padding_mode, *bounds[d], work)
            index.append(i)
            if mask is not None:
                valid &= mask
        out = data[tuple(index)]
        if padding_mode == "zeros":
            out = np.where(valid[..., None], out, np.zeros((), dtype=x.dtype))
        return np.ascontiguousarray(np.moveaxis(out, -1, 1))
    if mode not in ("linear", "cubic"):
        raise ValueError(f"unknown GridSample mode {mode!r}")
    offsets = range(2) if mode == "linear" else range(-1, 3)
    per_dim: list[list[tuple[np.ndarray, np.ndarray | None, np.ndarray]]] = []
    for d, c in enumerate(coords):
        t = c - np.floor(c)
        if mode == "linear":
            weights = [one - t, t]
        else:
            weights = [cubic_kernel(t - o, -0.75).astype(work) for o in offsets]
        base = np.floor(c).astype(np.int64)
        taps = [_padded_index(base + o, spatial[d], padding_mode, *bounds[d], work) for o in offsets]
        per_dim.append([(i, m, w) for (i, m), w in zip(taps, weights, strict=True)])
    values = data.astype(work, copy=False)
    acc = np.zeros((*grid.shape[:-1], x.shape[1]), dtype=work)
    for combo in np.ndindex(*(len(taps) for taps in per_dim)):
        index = [batch]
        weight = np.ones(grid.shape[:-1], dtype=work)
        for d, k in enumerate(combo):
            i, mask, w = per_dim[d][k]
            index.append(i)
            weight = weight * (w if mask is None else np.where(mask, w, 0))
        acc += values[tuple(index)] * weight[..., None]
    out = acc if numerics.is_float(x.dtype) else np.trunc(acc)
    return np.ascontiguousarray(np.moveaxis(out.astype(x.dtype), -1, 1))


@register("GridSample", 16, 20, 22)
def grid_sample(
    x: np.ndarray, grid: np.ndarray, *, align_corners: int, mode: str, padding_mode: str
) -> np.ndarray:
    """GridSample-16 (4-D, bilinear/bicubic names), -20, -22 (N-D): nearest / linear / cubic sampling."""
    return _grid_sample(x, grid, mode, padding_mode, align_corners)


@register("AffineGrid", 20)
def affine_grid(theta: np.ndarray, size: np.ndarray, *, align_corners: int) -> np.ndarray:
    """AffineGrid-20: sampling grid (N, *spatial, r) of the affine maps theta (N, r, r+1).

    In theta's type T: each spatial axis of length L has base coordinates 2i / (L - 1) - 1
    (align_corners) or (2i + 1) / L - 1, IEEE operations in T; each grid value is
    RN(sum_k theta[r, k] * base_k + theta[r, last]), one rounding (MatMul's)."""
    dims = [int(s) for s in size.reshape(-1)[2:]]
    work = theta.dtype if numerics.format_of(theta.dtype) is not None else np.dtype(np.float32)
    one, two = np.asarray(1, dtype=work), np.asarray(2, dtype=work)
    axes = []
    for length in dims:
        i: np.ndarray = np.arange(length).astype(work)
        if align_corners:
            axes.append(i * two / np.asarray(max(length - 1, 1), dtype=work) - one)
        else:
            axes.append((i * two + one) / np.asarray(length, dtype=work) - one)
    # Homogeneous base coordinates, innermost spatial axis first (x, y, z ...), then 1.
    mesh = np.meshgrid(*axes, indexing="ij")
    base = np.stack([*mesh[::-1], np.ones(dims, dtype=work)], axis=-1).reshape(-1, len(dims) + 1)
    # base [P, r+1] @ theta^T [N, r+1, r]: numerics.einsum("pk,nrk->npr") by definition, through
    # numerics.matmul (the same correctly rounded sums; its float64 path is much faster)
    grid = numerics.matmul(base, np.swapaxes(theta.astype(work, copy=False), 1, 2))
    return grid.reshape((theta.shape[0], *dims, len(dims))).astype(theta.dtype, copy=False)
