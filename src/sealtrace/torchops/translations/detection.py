"""Detection ops: NonMaxSuppression, RoiAlign, MaxRoiPool, DeformConv: torch translations.

They follow the NumPy kernels (:mod:`sealtrace.ops.detection`, :mod:`sealtrace.ops.pool`,
:mod:`sealtrace.ops.conv`), which compute as ONNX Runtime does: the same float32 box arithmetic,
the same sampling positions and weights. NonMaxSuppression's output is indices (no gradient); its
greedy selection is sequential, one Python step per kept box, as in the reference. RoiAlign and
DeformConv are differentiable in X (and DeformConv in its weights, offsets and mask).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from sealtrace.torchops.registry import reference_versions, register


def _corners(boxes: torch.Tensor, center_point_box: int) -> tuple[torch.Tensor, ...]:
    if center_point_box:
        half_w, half_h = boxes[:, 2] / 2, boxes[:, 3] / 2
        return boxes[:, 0] - half_w, boxes[:, 1] - half_h, boxes[:, 0] + half_w, boxes[:, 1] + half_h
    return (torch.minimum(boxes[:, 1], boxes[:, 3]), torch.minimum(boxes[:, 0], boxes[:, 2]),
            torch.maximum(boxes[:, 1], boxes[:, 3]), torch.maximum(boxes[:, 0], boxes[:, 2]))


def _suppressed(corners: Sequence[torch.Tensor], best: int, rest: torch.Tensor, threshold: torch.Tensor
                ) -> torch.Tensor:
    x0, y0, x1, y1 = corners
    ix0, iy0 = torch.maximum(x0[best], x0[rest]), torch.maximum(y0[best], y0[rest])
    ix1, iy1 = torch.minimum(x1[best], x1[rest]), torch.minimum(y1[best], y1[rest])
    inter = (ix1 - ix0) * (iy1 - iy0)
    area_best = (x1[best] - x0[best]) * (y1[best] - y0[best])
    area_rest = (x1[rest] - x0[rest]) * (y1[rest] - y0[rest])
    union = area_best + area_rest - inter
    overlapping = (ix1 > ix0) & (iy1 > iy0) & (inter > 0) & (area_best > 0) & (area_rest > 0) & (union > 0)
    iou = inter / torch.where(overlapping, union, torch.ones_like(union))
    return overlapping & (iou > threshold)


def _first(value: torch.Tensor | None) -> torch.Tensor | None:
    return None if value is None or value.numel() == 0 else value.reshape(-1)[0]


@register("NonMaxSuppression", *reference_versions("NonMaxSuppression"))
def non_max_suppression(boxes: torch.Tensor, scores: torch.Tensor,
                        max_output_boxes_per_class: torch.Tensor | None = None,
                        iou_threshold: torch.Tensor | None = None, score_threshold: torch.Tensor | None = None, *,
                        center_point_box: int = 0) -> torch.Tensor:
    """NonMaxSuppression: greedy per-class suppression; rows (batch, class, box) in selection order."""
    limit_value = _first(max_output_boxes_per_class)
    limit = int(limit_value) if limit_value is not None else 0
    empty = torch.zeros((0, 3), dtype=torch.int64, device=boxes.device)
    if limit <= 0:
        return empty
    iou_value = _first(iou_threshold)
    iou_max = iou_value.to(torch.float32) if iou_value is not None else torch.zeros((), dtype=torch.float32)
    score_value = _first(score_threshold)
    boxes = boxes.to(torch.float32)
    scores = scores.to(torch.float32)
    selected: list[tuple[int, int, int]] = []
    for batch in range(boxes.shape[0]):
        corners = _corners(boxes[batch], center_point_box)
        for cls in range(scores.shape[1]):
            class_scores = scores[batch, cls]
            if score_value is not None:
                candidates = torch.nonzero(class_scores > score_value.to(torch.float32)).reshape(-1)
            else:
                candidates = torch.arange(class_scores.numel(), device=boxes.device)
            # Highest score first; equal scores keep the lower box index first (a stable sort).
            order = candidates[torch.sort(-class_scores[candidates], stable=True).indices]
            kept = 0
            while order.numel() and kept < limit:
                best, order = int(order[0]), order[1:]
                selected.append((batch, cls, best))
                kept += 1
                if order.numel():
                    order = order[~_suppressed(corners, best, order, iou_max)]
    if not selected:
        return empty
    return torch.tensor(selected, dtype=torch.int64, device=boxes.device)


def _bilinear_axis(start: torch.Tensor, bin_size: torch.Tensor, pooled: int, grid: int, size: int,
                   dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Sample positions along one axis: (low index, high index, low weight, high weight, valid)."""
    device = start.device
    p = torch.arange(pooled, dtype=dtype, device=device)[:, None]
    i = torch.arange(grid, dtype=dtype, device=device)[None, :]
    pos = (start + p * bin_size + (i + 0.5) * bin_size / torch.tensor(grid, dtype=dtype)).reshape(-1)
    valid = (pos >= -1.0) & (pos <= size)
    pos = torch.clamp(pos, min=0)
    low = pos.to(torch.int64)
    at_edge = low >= size - 1
    low = torch.where(at_edge, size - 1, low)
    high = torch.where(at_edge, size - 1, low + 1)
    pos = torch.where(at_edge, low.to(dtype), pos)
    frac = pos - low.to(dtype)
    return low, high, 1 - frac, frac, valid


def _roi_align(x: torch.Tensor, rois: torch.Tensor, batch_indices: torch.Tensor, mode: str, output_height: int,
               output_width: int, sampling_ratio: int, spatial_scale: float, half_pixel: bool) -> torch.Tensor:
    """RoiAlign as ONNX Runtime computes it (max mode: the max over weighted corners)."""
    c, h, w = x.shape[1:]
    dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    scale = torch.tensor(spatial_scale, dtype=torch.float64).to(dtype)
    offset = torch.tensor(0.5 if half_pixel else 0.0, dtype=dtype)
    one = torch.ones((), dtype=dtype)
    indices = batch_indices.reshape(-1).tolist()
    results = []
    for r, roi in enumerate(rois.to(dtype).cpu()):
        start_w, start_h, end_w, end_h = (v * scale - offset for v in roi[:4])
        roi_w, roi_h = end_w - start_w, end_h - start_h
        if not half_pixel:  # malformed RoIs are forced to 1x1 in the legacy mode
            roi_w, roi_h = torch.maximum(roi_w, one), torch.maximum(roi_h, one)
        bin_h, bin_w = roi_h / output_height, roi_w / output_width
        grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(float(roi_h / output_height))
        grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(float(roi_w / output_width))
        if grid_h <= 0 or grid_w <= 0:
            results.append(torch.zeros((c, output_height, output_width), dtype=dtype, device=x.device))
            continue
        y_lo, y_hi, hy, ly, y_ok = (v.to(x.device) for v in _bilinear_axis(start_h, bin_h, output_height, grid_h,
                                                                               h, dtype))
        x_lo, x_hi, hx, lx, x_ok = (v.to(x.device) for v in _bilinear_axis(start_w, bin_w, output_width, grid_w,
                                                                               w, dtype))
        ok = (y_ok[:, None] & x_ok[None, :]).to(dtype)
        plane = x[int(indices[r])].to(dtype)
        yl, yh, xl, xh = y_lo[:, None], y_hi[:, None], x_lo[None, :], x_hi[None, :]
        terms = ((hy[:, None] * hx[None, :] * ok) * plane[:, yl, xl], (hy[:, None] * lx[None, :] * ok) * plane[:, yl, xh],
                 (ly[:, None] * hx[None, :] * ok) * plane[:, yh, xl], (ly[:, None] * lx[None, :] * ok) * plane[:, yh, xh])
        shape = (c, output_height, grid_h, output_width, grid_w)
        if mode == "avg":
            samples = ((terms[0] + terms[1]) + terms[2]) + terms[3]
            results.append(samples.reshape(shape).sum(dim=(2, 4)) / max(grid_h * grid_w, 1))
        else:
            samples = torch.maximum(torch.maximum(terms[0], terms[1]), torch.maximum(terms[2], terms[3]))
            results.append(samples.reshape(shape).amax(dim=(2, 4)))
    if not results:
        return torch.zeros((0, c, output_height, output_width), dtype=x.dtype, device=x.device)
    return torch.stack(results).to(x.dtype)


@register("RoiAlign", 10)
def roi_align_10(x: torch.Tensor, rois: torch.Tensor, batch_indices: torch.Tensor, *, mode: str = "avg",
                 output_height: int = 1, output_width: int = 1, sampling_ratio: int = 0, spatial_scale: float = 1.0
                 ) -> torch.Tensor:
    """RoiAlign-10: pixel corners without the half-pixel shift."""
    return _roi_align(x, rois, batch_indices, mode, output_height, output_width, sampling_ratio, spatial_scale,
                      False)


@register("RoiAlign", *reference_versions("RoiAlign", since=16))
def roi_align(x: torch.Tensor, rois: torch.Tensor, batch_indices: torch.Tensor, *,
              coordinate_transformation_mode: str = "half_pixel", mode: str = "avg", output_height: int = 1,
              output_width: int = 1, sampling_ratio: int = 0, spatial_scale: float = 1.0) -> torch.Tensor:
    """RoiAlign-16/22: coordinate_transformation_mode half_pixel or output_half_pixel."""
    return _roi_align(x, rois, batch_indices, mode, output_height, output_width, sampling_ratio, spatial_scale,
                      coordinate_transformation_mode == "half_pixel")


def _round_half_away(v: float) -> int:
    return int(np.sign(v) * np.floor(np.abs(v) + 0.5))


@register("MaxRoiPool", *reference_versions("MaxRoiPool"))
def max_roi_pool(x: torch.Tensor, rois: torch.Tensor, *, pooled_shape: Sequence[int], spatial_scale: float = 1.0
                 ) -> torch.Tensor:
    """MaxRoiPool: the max over quantized bins of each region (bins worked out in float32 as ONNX
    Runtime does; the max is differentiable in X)."""
    _, c, h, w = x.shape
    ph_n, pw_n = (int(v) for v in pooled_shape)
    scale = np.float32(spatial_scale)
    f32 = np.float32
    out = torch.zeros((rois.shape[0], c, ph_n, pw_n), dtype=x.dtype, device=x.device)
    rows = []
    for r, roi in enumerate(rois.detach().cpu().to(torch.float32).numpy()):
        batch = int(roi[0])
        start_w, start_h, end_w, end_h = (_round_half_away(float(v * scale)) for v in roi[1:5])
        bin_h = f32(max(end_h - start_h + 1, 1)) / f32(ph_n)
        bin_w = f32(max(end_w - start_w + 1, 1)) / f32(pw_n)
        cells = []
        for ph in range(ph_n):
            hs = min(max(int(np.floor(f32(ph) * bin_h)) + start_h, 0), h)
            he = min(max(int(np.ceil(f32(ph + 1) * bin_h)) + start_h, 0), h)
            for pw in range(pw_n):
                ws = min(max(int(np.floor(f32(pw) * bin_w)) + start_w, 0), w)
                we = min(max(int(np.ceil(f32(pw + 1) * bin_w)) + start_w, 0), w)
                if he > hs and we > ws:
                    cells.append(x[batch, :, hs:he, ws:we].amax(dim=(1, 2)))
                else:
                    cells.append(out[r, :, ph, pw])
        rows.append(torch.stack(cells, dim=1).reshape(c, ph_n, pw_n))
    return torch.stack(rows) if rows else out


@register("DeformConv", *reference_versions("DeformConv"))
def deform_conv(x: torch.Tensor, w: torch.Tensor, offset: torch.Tensor, b: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, *, dilations: Sequence[int] | None = None, group: int = 1,
                kernel_shape: Sequence[int] | None = None, offset_group: int = 1, pads: Sequence[int] | None = None,
                strides: Sequence[int] | None = None) -> torch.Tensor:
    """DeformConv (2-D): bilinear sampling at the offset taps (zeros outside the image, corner by
    corner), an optional mask, then one matrix product per group; differentiable in every input."""
    if x.dim() != 4:
        raise ValueError(f"DeformConv: only 2-D inputs are supported, got shape {tuple(x.shape)}")
    dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    n, c, h, wd = x.shape
    m = w.shape[0]
    kh, kw = (int(v) for v in kernel_shape) if kernel_shape else (int(w.shape[2]), int(w.shape[3]))
    sh, sw = strides if strides else (1, 1)
    dh, dw = dilations if dilations else (1, 1)
    ph, pw = (pads[0], pads[1]) if pads else (0, 0)
    oh, ow = offset.shape[2:]
    og, k, length = offset_group, kh * kw, oh * ow
    cog = c // og
    off = offset.to(dtype).reshape(n, og, k, 2, length)
    dev = x.device
    base_y = (torch.arange(kh, device=dev) * dh).repeat_interleave(kw)[:, None] + \
        (torch.arange(oh, device=dev) * sh - ph).repeat_interleave(ow)[None, :]
    base_x = (torch.arange(kw, device=dev) * dw).repeat(kh)[:, None] + \
        (torch.arange(ow, device=dev) * sw - pw).repeat(oh)[None, :]
    py = base_y.to(dtype) + off[:, :, :, 0]
    px = base_x.to(dtype) + off[:, :, :, 1]
    y0, x0 = torch.floor(py), torch.floor(px)
    ly, lx = py - y0, px - x0
    y0i, x0i = y0.to(torch.int64), x0.to(torch.int64)
    sampled = torch.zeros((n, og, cog, k * length), dtype=dtype, device=dev)
    flat = x.to(dtype).reshape(n, og, cog, h * wd)
    for yi, xi, weight in ((y0i, x0i, (1 - ly) * (1 - lx)), (y0i, x0i + 1, (1 - ly) * lx),
                           (y0i + 1, x0i, ly * (1 - lx)), (y0i + 1, x0i + 1, ly * lx)):
        valid = (yi >= 0) & (yi < h) & (xi >= 0) & (xi < wd)
        index = (torch.clamp(yi, 0, h - 1) * wd + torch.clamp(xi, 0, wd - 1)).reshape(n, og, 1, k * length)
        values = torch.gather(flat, 3, index.expand(n, og, cog, k * length))
        sampled = sampled + values * torch.where(valid, weight, torch.zeros_like(weight)).reshape(n, og, 1, k * length)
    sampled = sampled.reshape(n, og, cog, k, length)
    if mask is not None:
        sampled = sampled * mask.to(dtype).reshape(n, og, 1, k, length)
    cg = c // group
    cols = sampled.reshape(n, group, cg * k, length)
    y = torch.matmul(w.to(dtype).reshape(group, m // group, cg * k), cols).reshape(n, m, oh, ow)
    if b is not None:
        y = y + b.to(dtype).reshape(1, -1, 1, 1)
    return y.to(x.dtype)
