"""Resize and Upsample: torch translations.

The per-axis sampling maps (source indices and weights) come from the NumPy reference
(:func:`sealtrace.ops.resize._axis_map`), computed from the input's shape at run time; torch then
gathers and blends, so results match the reference's neighbours exactly and stay differentiable
with respect to X.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sealtrace.ops.resize import _F32, _axis_map, _output_from_scales, _round_half_up
from sealtrace.torchops.registry import floats, ints, register


def _geometry(shape: tuple[int, ...], roi: Any, scales: Any, sizes: Any, axes: tuple[int, ...] | None,
              policy: str) -> tuple[list[int], list[np.float32], list[tuple[float, float]]]:
    rank = len(shape)
    chosen = [a + rank if a < 0 else a for a in axes] if axes else list(range(rank))
    roi_full = [(0.0, 1.0)] * rank
    roi_values = floats(roi) if roi is not None else []
    if roi_values:
        n = len(chosen)
        for i, axis in enumerate(chosen):
            roi_full[axis] = (roi_values[i], roi_values[n + i])
    scale_values = floats(scales) if scales is not None else []
    size_values = ints(sizes) if sizes is not None else []
    if scale_values:
        full = np.ones(rank, dtype=_F32)
        full[chosen] = np.asarray(scale_values, dtype=_F32)
        out_shape, factors = _output_from_scales(shape, full)
        return out_shape, factors, roi_full
    if not size_values:
        raise ValueError("Resize needs either 'scales' or 'sizes'")
    out = list(shape)
    factors = [_F32(1)] * rank
    if policy == "stretch":
        for axis, size in zip(chosen, size_values, strict=True):
            out[axis] = size
            factors[axis] = _F32(size) / _F32(shape[axis])
        return out, factors, roi_full
    ratios = [_F32(size) / _F32(shape[axis]) for axis, size in zip(chosen, size_values, strict=True)]
    common = min(ratios) if policy == "not_larger" else max(ratios)
    for axis in chosen:
        out[axis] = _round_half_up(_F32(common * _F32(shape[axis])))
        factors[axis] = common
    return out, factors, roi_full


def _resize(x: torch.Tensor, roi: Any, scales: Any, sizes: Any, *, mode: str, transform: str, nearest_mode: str,
            cubic_coeff_a: float = -0.75, exclude_outside: int = 0, extrapolation_value: float = 0.0,
            antialias: int = 0, axes: tuple[int, ...] | None = None, policy: str = "stretch") -> torch.Tensor:
    shape = tuple(int(d) for d in x.shape)
    out_shape, factors, roi_full = _geometry(shape, roi, scales, sizes, axes, policy)
    work = x if x.is_floating_point() else x.to(torch.float32)
    y = work
    outside: list[tuple[int, np.ndarray]] = []
    for axis in reversed(range(len(shape))):
        in_len, out_len = shape[axis], out_shape[axis]
        identity = in_len == out_len and factors[axis] == 1 and (
            transform != "tf_crop_and_resize" or roi_full[axis] == (0.0, 1.0))
        if identity:
            continue
        if out_len == 0 or in_len == 0:
            return torch.zeros(out_shape, dtype=x.dtype, device=x.device)
        m = _axis_map(in_len=in_len, out_len=out_len, scale=factors[axis], roi=roi_full[axis], mode=mode,
                      transform=transform, nearest_mode=nearest_mode, cubic_coeff_a=cubic_coeff_a,
                      exclude_outside=bool(exclude_outside), antialias=bool(antialias))
        indices = torch.as_tensor(m.indices, dtype=torch.int64, device=x.device)
        if m.weights is None:
            y = y.index_select(axis, indices[:, 0])
        else:
            view = [1] * y.dim()
            view[axis] = out_len
            weights = torch.as_tensor(m.weights, dtype=work.dtype, device=x.device)
            acc = y.index_select(axis, indices[:, 0]) * weights[:, 0].reshape(view)
            for tap in range(1, indices.shape[1]):
                acc = acc + y.index_select(axis, indices[:, tap]) * weights[:, tap].reshape(view)
            y = acc
        if m.outside is not None:
            outside.append((axis, m.outside))
    if outside:
        mask = torch.zeros(out_shape, dtype=torch.bool, device=x.device)
        for axis, flags in outside:
            view = [1] * len(out_shape)
            view[axis] = flags.shape[0]
            mask = mask | torch.as_tensor(flags, device=x.device).reshape(view)
        y = torch.where(mask, torch.full_like(y, extrapolation_value), y)
    if not x.is_floating_point():
        info = torch.iinfo(x.dtype)
        y = torch.clamp(torch.trunc(y), info.min, info.max)
    return y.to(x.dtype) if y is not x else x.clone()


@register("Resize", 10, static=(1,))
def resize_10(x: torch.Tensor, scales: Any, *, mode: str) -> torch.Tensor:
    """Resize-10: asymmetric coordinates, 'simple' nearest rounding."""
    return _resize(x, None, scales, None, mode="linear" if mode == "bilinear" else mode, transform="asymmetric",
                   nearest_mode="simple")


@register("Resize", 11, 13, 18, 19, static=(1, 2, 3))
def resize(x: torch.Tensor, roi: Any = None, scales: Any = None, sizes: Any = None, *,
           coordinate_transformation_mode: str = "half_pixel", cubic_coeff_a: float = -0.75,
           exclude_outside: int = 0, extrapolation_value: float = 0.0, mode: str = "nearest",
           nearest_mode: str = "round_prefer_floor", antialias: int = 0, axes: tuple[int, ...] | None = None,
           keep_aspect_ratio_policy: str = "stretch") -> torch.Tensor:
    """Resize-11+: nearest / linear / cubic with every coordinate transformation mode."""
    return _resize(x, roi, scales, sizes, mode=mode, transform=coordinate_transformation_mode,
                   nearest_mode=nearest_mode, cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside,
                   extrapolation_value=extrapolation_value, antialias=antialias, axes=axes,
                   policy=keep_aspect_ratio_policy)


@register("Upsample", 1)
def upsample_1(x: torch.Tensor, *, height_scale: float | None = None, mode: str = "nearest",
               width_scale: float | None = None) -> torch.Tensor:
    """Upsample-1 (experimental): NCHW input, height_scale / width_scale attributes."""
    if x.dim() != 4 or height_scale is None or width_scale is None:
        raise ValueError("Upsample-1 takes an NCHW input and both height_scale and width_scale")
    scales = [float(v) for v in np.array([1, 1, height_scale, width_scale], dtype=np.float32)]
    return resize_10(x, scales, mode=mode)


@register("Upsample", 7)
def upsample_7(x: torch.Tensor, *, mode: str = "nearest", scales: tuple[float, ...]) -> torch.Tensor:
    """Upsample-7: scales as an attribute."""
    return resize_10(x, list(scales), mode=mode)


@register("Upsample", 9, 10, static=(1,))
def upsample_9(x: torch.Tensor, scales: Any, *, mode: str = "nearest") -> torch.Tensor:
    """Upsample-9/10: scales as an input."""
    return resize_10(x, scales, mode=mode)
