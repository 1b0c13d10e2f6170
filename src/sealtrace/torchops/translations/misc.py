"""Smaller ops torch expresses directly: CumProd, Compress, ReverseSequence, CenterCropPad,
window functions, integer matmul/conv, DynamicQuantizeLinear, BitCast, AffineGrid, Col2Im."""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the name every torch reader knows

from sealtrace.torchops.dtypes import torch_dtype
from sealtrace.torchops.registry import ints, reference_versions, register


@register("CumProd", *reference_versions("CumProd"), static=(1,))
def cum_prod(x: torch.Tensor, axis: Any, *, exclusive: int = 0, reverse: int = 0) -> torch.Tensor:
    """CumProd with ``exclusive`` and ``reverse``."""
    a = ints(axis)[0]
    a = a + x.dim() if a < 0 else a
    y = x.flip(a) if reverse else x
    if exclusive:
        ones = torch.ones_like(y.narrow(a, 0, 1))
        y = torch.cat([ones, y.narrow(a, 0, y.shape[a] - 1)], dim=a)
    out = torch.cumprod(y, dim=a).to(x.dtype)
    return out.flip(a) if reverse else out


@register("Compress", *reference_versions("Compress"))
def compress(x: torch.Tensor, condition: torch.Tensor, *, axis: int | None = None) -> torch.Tensor:
    """Compress: the slices where ``condition`` is true (a shorter condition selects fewer)."""
    flat = x.reshape(-1) if axis is None else x
    a = 0 if axis is None else (axis + x.dim() if axis < 0 else axis)
    keep = torch.nonzero(condition.reshape(-1)[: flat.shape[a]].to(torch.bool)).reshape(-1)
    return flat.index_select(a, keep)


@register("ReverseSequence", *reference_versions("ReverseSequence"))
def reverse_sequence(x: torch.Tensor, sequence_lens: torch.Tensor, *, batch_axis: int = 1, time_axis: int = 0
                     ) -> torch.Tensor:
    """ReverseSequence: reverse the first sequence_lens[b] steps of every batch entry."""
    steps = x.shape[time_axis]
    index = torch.arange(steps, device=x.device).reshape(1, -1).repeat(x.shape[batch_axis], 1)
    lens = sequence_lens.to(torch.int64).reshape(-1, 1)
    reversed_index = torch.where(index < lens, lens - 1 - index, index)  # [batch, time]
    shape = [1] * x.dim()
    shape[batch_axis], shape[time_axis] = x.shape[batch_axis], steps
    order = reversed_index if batch_axis < time_axis else reversed_index.T
    return torch.gather(x, time_axis, order.reshape(shape).expand(x.shape))


@register("CenterCropPad", *reference_versions("CenterCropPad"), static=(1,))
def center_crop_pad(x: torch.Tensor, shape: Any, *, axes: tuple[int, ...] | None = None) -> torch.Tensor:
    """CenterCropPad: crop or zero-pad each chosen axis around its centre."""
    sizes = ints(shape)
    chosen = [a + x.dim() if a < 0 else a for a in axes] if axes else list(range(x.dim()))
    for axis, size in zip(chosen, sizes, strict=True):
        dim = x.shape[axis]
        if size < dim:
            x = x.narrow(axis, (dim - size) // 2, size)
        elif size > dim:
            before = (size - dim) // 2
            pads = [0, 0] * (x.dim() - 1 - axis) + [before, size - dim - before]
            x = F.pad(x, pads)
    return x


def _window(size: Any, output_datatype: int, periodic: int, coefficients: tuple[float, ...]) -> torch.Tensor:
    n = ints(size)[0]
    denominator = n if periodic else n - 1
    k = torch.arange(n, dtype=torch.float64)
    w = torch.zeros(n, dtype=torch.float64)
    for i, c in enumerate(coefficients):
        w = w + ((-1) ** i) * c * torch.cos(2 * math.pi * i * k / denominator)
    return w.to(torch_dtype(output_datatype))


@register("HannWindow", *reference_versions("HannWindow"), static=(0,))
def hann_window(size: Any, *, output_datatype: int = 1, periodic: int = 1) -> torch.Tensor:
    """HannWindow."""
    return _window(size, output_datatype, periodic, (0.5, 0.5))


@register("HammingWindow", *reference_versions("HammingWindow"), static=(0,))
def hamming_window(size: Any, *, output_datatype: int = 1, periodic: int = 1) -> torch.Tensor:
    """HammingWindow (alpha 25/46)."""
    return _window(size, output_datatype, periodic, (25 / 46, 1 - 25 / 46))


@register("BlackmanWindow", *reference_versions("BlackmanWindow"), static=(0,))
def blackman_window(size: Any, *, output_datatype: int = 1, periodic: int = 1) -> torch.Tensor:
    """BlackmanWindow."""
    return _window(size, output_datatype, periodic, (0.42, 0.5, 0.08))


def _zero_point(v: torch.Tensor | None, x: torch.Tensor, per_row_axis: int) -> Any:
    if v is None:
        return 0
    v = v.to(torch.int64)
    if v.dim() == 0 or v.numel() == 1:
        return v.reshape(())
    shape = [1] * x.dim()
    shape[per_row_axis] = -1
    return v.reshape(shape)


@register("MatMulInteger", *reference_versions("MatMulInteger"))
def matmul_integer(a: torch.Tensor, b: torch.Tensor, a_zero_point: torch.Tensor | None = None,
                   b_zero_point: torch.Tensor | None = None) -> torch.Tensor:
    """MatMulInteger: (A - a_zp) @ (B - b_zp) in int32 (a_zp per row, b_zp per column)."""
    aa = a.to(torch.int64) - _zero_point(a_zero_point, a, a.dim() - 2 if a.dim() >= 2 else 0)
    bb = b.to(torch.int64) - _zero_point(b_zero_point, b, b.dim() - 1)
    return torch.matmul(aa, bb).to(torch.int32)


@register("ConvInteger", *reference_versions("ConvInteger"))
def conv_integer(x: torch.Tensor, w: torch.Tensor, x_zero_point: torch.Tensor | None = None,
                 w_zero_point: torch.Tensor | None = None, **attrs: Any) -> torch.Tensor:
    """ConvInteger: the convolution of zero-point-shifted integers, exact in float64, as int32."""
    from sealtrace.torchops.translations.nn import conv

    xx = x.to(torch.float64) - (0 if x_zero_point is None else x_zero_point.to(torch.float64).reshape(()))
    ww = w.to(torch.float64)
    if w_zero_point is not None:
        ww = ww - (w_zero_point.to(torch.float64).reshape(-1, *([1] * (w.dim() - 1)))
                   if w_zero_point.numel() > 1 else w_zero_point.to(torch.float64).reshape(()))
    return torch.round(conv(xx, ww, None, **attrs)).to(torch.int32)


@register("DynamicQuantizeLinear", *reference_versions("DynamicQuantizeLinear"))
def dynamic_quantize_linear(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """DynamicQuantizeLinear: uint8 with a scale and zero point from the data's range (incl. 0)."""
    low = torch.clamp(x.min(), max=0).float()
    high = torch.clamp(x.max(), min=0).float()
    scale = (high - low) / 255
    zero_point = torch.clamp(torch.round(0 - low / scale), 0, 255) if float(scale) != 0 else torch.tensor(0.0)
    y = torch.clamp(torch.round(x.float() / scale) + zero_point, 0, 255) if float(scale) != 0 \
        else torch.clamp(zero_point + torch.zeros_like(x, dtype=torch.float32), 0, 255)
    return y.to(torch.uint8), scale.to(x.dtype), zero_point.to(torch.uint8)


@register("AffineGrid", *reference_versions("AffineGrid"), static=(1,))
def affine_grid(theta: torch.Tensor, size: Any, *, align_corners: int = 0) -> torch.Tensor:
    """AffineGrid (2-D and 3-D)."""
    return F.affine_grid(theta, ints(size), align_corners=bool(align_corners))


@register("Col2Im", *reference_versions("Col2Im"), static=(1, 2))
def col2im(x: torch.Tensor, image_shape: Any, block_shape: Any, *, dilations: tuple[int, ...] | None = None,
           pads: tuple[int, ...] | None = None, strides: tuple[int, ...] | None = None) -> torch.Tensor:
    """Col2Im: sum the sliding blocks [N, C*prod(block), L] back into images of any rank (2-D
    images with symmetric pads use torch's fold; the rest adds one strided slice per block tap)."""
    image, block = ints(image_shape), ints(block_shape)
    rank = len(image)
    s = list(strides) if strides else [1] * rank
    d = list(dilations) if dilations else [1] * rank
    p = list(pads) if pads else [0] * (2 * rank)
    if rank == 2 and p[:2] == p[2:]:
        return F.fold(x, tuple(image), tuple(block), dilation=tuple(d), padding=tuple(p[:2]), stride=tuple(s))
    grid = [(i + p[a] + p[rank + a] - ((k - 1) * dd + 1)) // ss + 1
            for a, (i, k, ss, dd) in enumerate(zip(image, block, s, d, strict=True))]
    n = x.shape[0]
    c = x.shape[1] // math.prod(block)
    if c * math.prod(block) != x.shape[1] or math.prod(grid) != x.shape[2]:
        raise ValueError(f"Col2Im: input {tuple(x.shape)} does not fit image {image} with blocks {block}")
    cols = x.reshape(n, c, *block, *grid)
    # A canvas of the padded image (plus any overhang of the last blocks); the pads are cut at the end.
    canvas_shape = [max(g_ - 1, 0) * ss + (k - 1) * dd + 1 for g_, k, ss, dd in zip(grid, block, s, d, strict=True)]
    canvas_shape = [max(cs, i + p[a] + p[rank + a]) for a, (cs, i) in enumerate(zip(canvas_shape, image, strict=True))]
    canvas = torch.zeros((n, c, *canvas_shape), dtype=x.dtype, device=x.device)
    for tap in itertools.product(*(range(k) for k in block)):
        index: list[slice] = [slice(None), slice(None)]
        for t, g_, ss, dd in zip(tap, grid, s, d, strict=True):
            index.append(slice(t * dd, t * dd + (g_ - 1) * ss + 1, ss))
        block_tap: tuple[Any, ...] = (slice(None), slice(None), *tap)
        canvas[tuple(index)] += cols[block_tap]
    window = (slice(None), slice(None), *(slice(p[a], p[a] + i) for a, i in enumerate(image)))
    return canvas[window]


_GRID_MODES = {"linear": "bilinear", "bilinear": "bilinear", "nearest": "nearest", "cubic": "bicubic",
               "bicubic": "bicubic"}


@register("GridSample", *reference_versions("GridSample"))
def grid_sample(x: torch.Tensor, grid: torch.Tensor, *, align_corners: int = 0, mode: str = "linear",
                padding_mode: str = "zeros") -> torch.Tensor:
    """GridSample: torch's grid_sample for float 2-D inputs and linear/nearest 3-D ones; every other
    rank, mode and dtype by the reference's own formulation (:func:`_grid_sample_nd`)."""
    if x.is_floating_point() and (x.dim() == 4 or (x.dim() == 5 and mode not in ("cubic", "bicubic"))):
        return F.grid_sample(x, grid.to(x.dtype), mode=_GRID_MODES[mode], padding_mode=padding_mode,
                             align_corners=bool(align_corners))
    return _grid_sample_nd(x, grid, mode, padding_mode, align_corners)


def _grid_reflect(c: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Coordinates reflected into [low, high] by the nearer border until they land inside."""
    span = high - low
    if span <= 0:
        return torch.full_like(c, low)
    below, above = c < low, c > high
    dx = torch.where(below, low - c, torch.where(above, c - high, torch.zeros_like(c)))
    n = torch.trunc(dx / span)
    r = dx - n * span
    even = torch.remainder(n, 2) == 0
    from_low = torch.where(even, low + r, high - r)
    from_high = torch.where(even, high - r, low + r)
    return torch.where(below, from_low, torch.where(above, from_high, c))


def _padded_index(index: torch.Tensor, length: int, padding_mode: str, low: float, high: float,
                  work: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None]:
    if padding_mode == "zeros":
        return torch.clamp(index, 0, length - 1), (index >= 0) & (index < length)
    if padding_mode == "reflection":
        index = torch.trunc(_grid_reflect(index.to(work), low, high)).to(torch.int64)
    return torch.clamp(index, 0, length - 1), None


def _cubic_kernel(d: torch.Tensor, a: float) -> torch.Tensor:
    d = torch.abs(d)
    d2, d3 = d * d, d * d * d
    near = (a + 2) * d3 - (a + 3) * d2 + 1
    far = a * d3 - 5 * a * d2 + 8 * a * d - 4 * a
    return torch.where(d <= 1, near, torch.where(d < 2, far, torch.zeros_like(d)))


def _grid_sample_nd(x: torch.Tensor, grid: torch.Tensor, mode: str, padding_mode: str, align_corners: int
                    ) -> torch.Tensor:
    """GridSample of any rank, mode and dtype, as the reference kernel computes it (sealtrace.ops.resize)."""
    spatial = list(x.shape[2:])
    rank = len(spatial)
    if grid.shape[-1] != rank or grid.shape[0] != x.shape[0]:
        raise ValueError(f"grid of shape {tuple(grid.shape)} does not fit an input of shape {tuple(x.shape)}")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    work = torch.float64 if torch.float64 in (x.dtype, grid.dtype) else torch.float32
    g = grid.to(work)
    coords, bounds = [], []
    for d, length in enumerate(spatial):
        n = g[..., rank - 1 - d]  # the grid lists coordinates innermost first (x, y, z ...)
        if align_corners:
            c = (n + 1) / 2 * (length - 1)
            low, high = 0.0, float(length - 1)
        else:
            c = ((n + 1) * length - 1) / 2
            low, high = -0.5, length - 0.5
        if mode == "nearest":
            c = torch.round(c)  # half to even
        outside = (c < low) | (c > high)
        if padding_mode == "border" and mode != "cubic":
            c = torch.where(outside, torch.clamp(c, 0, length - 1), c)
        elif padding_mode == "reflection":
            c = torch.where(outside, _grid_reflect(c, low, high), c)
        coords.append(c)
        bounds.append((low, high))
    data = x.movedim(1, -1)  # channels last: one advanced index gathers every channel of a point
    batch = torch.arange(x.shape[0], device=x.device).reshape(-1, *([1] * (grid.dim() - 2)))
    if mode == "nearest":
        index: list[torch.Tensor] = [batch]
        valid = torch.ones(grid.shape[:-1], dtype=torch.bool, device=x.device)
        for d, c in enumerate(coords):
            i, mask = _padded_index(torch.trunc(c).to(torch.int64), spatial[d], padding_mode, *bounds[d], work)
            index.append(i)
            if mask is not None:
                valid = valid & mask
        out = data[tuple(index)]
        if padding_mode == "zeros":
            out = torch.where(valid[..., None], out, torch.zeros((), dtype=x.dtype, device=x.device))
        return out.movedim(-1, 1)
    if mode not in ("linear", "cubic"):
        raise ValueError(f"unknown GridSample mode {mode!r}")
    offsets = range(2) if mode == "linear" else range(-1, 3)
    per_dim = []
    for d, c in enumerate(coords):
        t = c - torch.floor(c)
        weights = [1 - t, t] if mode == "linear" else [_cubic_kernel(t - o, -0.75) for o in offsets]
        base = torch.floor(c).to(torch.int64)
        taps = [_padded_index(base + o, spatial[d], padding_mode, *bounds[d], work) for o in offsets]
        per_dim.append([(i, m, w) for (i, m), w in zip(taps, weights, strict=True)])
    values = data.to(work)
    acc = torch.zeros((*grid.shape[:-1], x.shape[1]), dtype=work, device=x.device)
    for combo in itertools.product(*(range(len(taps)) for taps in per_dim)):
        index = [batch]
        weight = torch.ones(grid.shape[:-1], dtype=work, device=x.device)
        for d, k in enumerate(combo):
            i, mask, w = per_dim[d][k]
            index.append(i)
            weight = weight * (w if mask is None else torch.where(mask, w, torch.zeros_like(w)))
        acc = acc + values[tuple(index)] * weight[..., None]
    out = acc if x.is_floating_point() else torch.trunc(acc)
    return out.to(x.dtype).movedim(-1, 1)


@register("MaxUnpool", *reference_versions("MaxUnpool"), static=(2,))
def max_unpool(x: torch.Tensor, indices: torch.Tensor, output_shape: Any = None, *,
               kernel_shape: tuple[int, ...], pads: tuple[int, ...] | None = None,
               strides: tuple[int, ...] | None = None) -> torch.Tensor:
    """MaxUnpool: scatter X to the flat positions ``indices`` of the shape the attributes infer;
    an explicit ``output_shape`` then holds that result in its top-left corner (ONNX's test data)."""
    rank = len(kernel_shape)
    s = list(strides) if strides else [1] * rank
    p = list(pads) if pads else [0] * (2 * rank)
    spatial = [(d - 1) * st - p[i] - p[i + rank] + k
               for i, (d, st, k) in enumerate(zip(x.shape[2:], s, kernel_shape, strict=True))]
    inferred = [*x.shape[:2], *spatial]
    flat = torch.zeros(math.prod(inferred), dtype=x.dtype, device=x.device)
    y = flat.scatter(0, indices.to(torch.int64).reshape(-1), x.reshape(-1)).reshape(inferred)
    if output_shape is None or ints(output_shape) == inferred:
        return y
    shape = ints(output_shape)
    window = tuple(slice(0, min(i, o)) for i, o in zip(inferred, shape, strict=True))
    out = torch.zeros(shape, dtype=x.dtype, device=x.device)
    out[window] = y[window]
    return out


@register("BitCast", *reference_versions("BitCast"))
def bit_cast(x: torch.Tensor, *, to: int) -> torch.Tensor:
    """BitCast between types of the same width (torch's view)."""
    return x.view(torch_dtype(int(to)))


@register("Unique", *reference_versions("Unique"), n_outputs=True)
def unique(x: torch.Tensor, *, n_outputs: int, axis: int | None = None, sorted: int = 1) -> Any:
    """Unique: values (or slices), first-occurrence indices, inverse indices, counts; sorted or in
    order of first occurrence."""
    source = x.reshape(-1) if axis is None else x
    dim = 0 if axis is None else (axis + x.dim() if axis < 0 else axis)
    values, inverse, counts = torch.unique(source, sorted=True, return_inverse=True, return_counts=True, dim=dim)
    inverse = inverse.reshape(-1)
    positions = torch.arange(inverse.numel(), device=x.device)
    first = torch.full((counts.numel(),), inverse.numel(), dtype=torch.int64, device=x.device)
    first = first.scatter_reduce(0, inverse, positions, "amin")
    if not sorted:
        order = torch.argsort(first, stable=True)
        rank = torch.empty_like(order)
        rank[order] = torch.arange(order.numel(), device=x.device)
        values, first, counts, inverse = values.index_select(dim, order), first[order], counts[order], rank[inverse]
    outputs = (values, first.to(torch.int64), inverse.to(torch.int64), counts.to(torch.int64))
    return outputs[:n_outputs] if n_outputs > 1 else values
