"""Transposed convolutions and their scatter-add: ConvTranspose, Col2Im (the col2im that
ConvTranspose's native path shares); they run on the matrix-product engine of ``_convolution``.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

import numpy as np

from sealtrace.ops._convolution import Products, add_bias, convolve, float8_in_float32, kernel_of
from sealtrace.ops._windows import Array, Window
from sealtrace.ops.registry import register


def _transpose_geometry(
    in_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    output_padding: Sequence[int],
    pads: Sequence[int] | None,
    output_shape: Sequence[int] | None,
    auto_pad: str,
) -> tuple[list[int], list[int]]:
    """(pads_begin, out_shape) of a transposed convolution, per the ConvTranspose spec."""
    rank = len(kernel)
    full = [
        s * (i - 1) + op + (k - 1) * d + 1
        for i, k, s, d, op in zip(in_shape, kernel, strides, dilations, output_padding, strict=True)
    ]
    if output_shape:
        wanted = list(output_shape)[-rank:]
        totals = [f - o for f, o in zip(full, wanted, strict=True)]
        upper = auto_pad == "SAME_UPPER"
        begin = [t // 2 if upper else t - t // 2 for t in totals]
        return begin, wanted
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        wanted = [i * s for i, s in zip(in_shape, strides, strict=True)]
        totals = [f - o for f, o in zip(full, wanted, strict=True)]
        upper = auto_pad == "SAME_UPPER"
        begin = [t // 2 if upper else t - t // 2 for t in totals]
        return begin, wanted
    pads_t = list(pads) if pads and auto_pad != "VALID" else [0] * (2 * rank)
    begin = pads_t[:rank]
    return begin, [f - b - e for f, b, e in zip(full, begin, pads_t[rank:], strict=True)]


def _scatter_taps(
    cols: Array,
    strides: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
    out_shape: Sequence[int],
) -> Array:
    """col2im: add ``cols`` [N, C, *kernel, *grid] into an output of ``out_shape``.

    Tap ``t`` of grid cell ``g`` lands at ``g * stride + t * dilation - begin`` (dropped when it
    falls outside the output). One strided add per kernel tap.
    """
    rank = len(out_shape)
    kernel = cols.shape[2 : 2 + rank]
    grid = cols.shape[2 + rank :]
    if all(d == 1 and k == s for k, s, d in zip(kernel, strides, dilations, strict=True)):
        # Taps tile the output without overlap (k == stride upsampling): one interleaving copy.
        order = [0, 1] + [a for i in range(rank) for a in (2 + rank + i, 2 + i)]
        dense = cols.transpose(order).reshape(
            (*cols.shape[:2], *(g * k for g, k in zip(grid, kernel, strict=True)))
        )
        return _window_of_canvas(dense, begin, out_shape)
    # A canvas holding both every tap's landing range and the output window, so no add is clipped.
    lo = [min(0, b) for b in begin]
    hi = [
        max((g - 1) * s + (k - 1) * d + 1, b + o)
        for g, k, s, d, b, o in zip(grid, kernel, strides, dilations, begin, out_shape, strict=True)
    ]
    canvas = np.zeros(
        cols.shape[:2] + tuple(h - low for h, low in zip(hi, lo, strict=True)), dtype=cols.dtype
    )
    for tap in np.ndindex(*kernel):
        index: list[slice] = [slice(None), slice(None)]
        for t, g, s, d, low in zip(tap, grid, strides, dilations, lo, strict=True):
            start = t * d - low
            index.append(slice(start, start + (g - 1) * s + 1, s))
        canvas[tuple(index)] += cols[(slice(None), slice(None), *tap)]
    crop = tuple(slice(b - low, b - low + o) for b, low, o in zip(begin, lo, out_shape, strict=True))
    return np.ascontiguousarray(canvas[(slice(None), slice(None), *crop)])


def _window_of_canvas(
    canvas: Array, begin: Sequence[int], out_shape: Sequence[int], fill: Array | None = None
) -> Array:
    """``canvas[..., b : b + o]`` per spatial axis, with zeros (or ``fill``, one value per channel)
    wherever that runs off the canvas."""
    size = canvas.shape[2:]
    if all(b >= 0 and b + o <= s for b, o, s in zip(begin, out_shape, size, strict=True)):
        index = tuple(slice(b, b + o) for b, o in zip(begin, out_shape, strict=True))
        return np.ascontiguousarray(canvas[(slice(None), slice(None), *index)])
    out = np.zeros((*canvas.shape[:2], *out_shape), dtype=canvas.dtype)
    if fill is not None:
        out[...] = fill.astype(canvas.dtype).reshape((1, -1) + (1,) * len(out_shape))
    src = tuple(slice(max(b, 0), min(s, b + o)) for b, o, s in zip(begin, out_shape, size, strict=True))
    dst = tuple(
        slice(max(b, 0) - b, min(s, b + o) - b) for b, o, s in zip(begin, out_shape, size, strict=True)
    )
    out[(slice(None), slice(None), *dst)] = canvas[(slice(None), slice(None), *src)]
    return out


@register("ConvTranspose", 1, 11, 22)
@float8_in_float32
def conv_transpose(
    x: Array,
    w: Array,
    b: Array | None = None,
    *,
    auto_pad: str,
    dilations: Sequence[int] | None,
    group: int,
    kernel_shape: Sequence[int] | None,
    output_padding: Sequence[int] | None,
    output_shape: Sequence[int] | None,
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
) -> Array:
    """ONNX ConvTranspose (versions 1, 11, 22): each float output RN(sum of the products of the
    taps that land on it + bias) (docs/numerics.md). Portable numerics compute it as the
    convolution it equals (see _transposed_as_convolution); native numerics as a matmul, then a
    col2im scatter-add over taps."""
    n, c = x.shape[:2]
    in_shape = x.shape[2:]
    rank = len(in_shape)
    kernel = kernel_of(w, kernel_shape)
    strides_t = tuple(strides) if strides else (1,) * rank
    dilations_t = tuple(dilations) if dilations else (1,) * rank
    out_pad = tuple(output_padding) if output_padding else (0,) * rank
    begin, out_shape = _transpose_geometry(
        in_shape, kernel, strides_t, dilations_t, out_pad, pads, output_shape, auto_pad
    )
    if n * prod(out_shape) == 0:  # (a [2**40, C, 0, W] input: no image to step through)
        return np.zeros((n, w.shape[1] * group, *out_shape), x.dtype)
    products = Products(x.dtype)
    if products.fmt is not None:
        if all(k == st and d == 1 for k, st, d in zip(kernel, strides_t, dilations_t, strict=True)):
            y = _transposed_tiles(x, w, b, group, kernel, begin, out_shape, products)
        else:
            y = _transposed_as_convolution(
                x, w, b, group, kernel, strides_t, dilations_t, begin, out_shape, products
            )
        return y.astype(x.dtype, copy=False)
    dtype = products.cols_dtype
    mg = w.shape[1]
    cg = c // group
    k = prod(kernel)
    length = prod(in_shape)
    xs = x.astype(dtype, copy=False).reshape(n, group, cg, length)
    wt = w.astype(dtype, copy=False).reshape(group, cg, mg * k).transpose(0, 2, 1)
    cols = np.matmul(wt, xs)  # [N, G, Mg*K, L]
    cols = cols.reshape((n, group * mg, *kernel, *in_shape))
    y = _scatter_taps(cols, strides_t, dilations_t, begin, out_shape)
    return add_bias(y, b).astype(x.dtype, copy=False)


def _transposed_tiles(
    x: Array,
    w: Array,
    b: Array | None,
    group: int,
    kernel: Sequence[int],
    begin: Sequence[int],
    out_shape: Sequence[int],
    products: Products,
) -> Array:
    """A transposed convolution whose taps tile the output (kernel = stride, no dilation: the
    upsampling of DBNet's head): every output position takes exactly one (input position, tap)
    pair, so each output is one product sum over the input channels plus the bias, rounded once,
    and the output is those sums interleaved. Positions the tiles do not reach (output padding)
    hold the bias alone."""
    n, c = x.shape[:2]
    in_shape = x.shape[2:]
    cg = c // group
    mg = w.shape[1]
    taps = prod(kernel)
    columns = np.asarray(x, dtype=products.cols_dtype).reshape(n, group, cg, prod(in_shape))
    weights = w.reshape(group, cg, mg * taps).transpose(0, 2, 1)  # [G, Mg*K, Cg]
    bias = None if b is None else np.repeat(b.reshape(group, mg), taps, axis=1)  # each tap's row
    sums = np.stack([products(weights, columns[image], bias) for image in range(n)])
    rank = len(kernel)
    cols = sums.reshape((n, group * mg, *kernel, *in_shape))
    order = [0, 1] + [a for i in range(rank) for a in (2 + rank + i, 2 + i)]
    dense = cols.transpose(order).reshape(
        (n, group * mg, *(i * k for i, k in zip(in_shape, kernel, strict=True)))
    )
    return _window_of_canvas(dense, begin, out_shape, b)


def _transposed_as_convolution(
    x: Array,
    w: Array,
    b: Array | None,
    group: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
    out_shape: Sequence[int],
    products: Products,
) -> Array:
    """A transposed convolution as the convolution it equals: output o gathers input i through tap
    t where o = i * stride + t * dilation - begin, which is a unit-stride correlation of the input
    spread out by the stride (stride - 1 zeros between values) with the flipped kernel, padded by
    (k - 1) * dilation - begin in front. Every output is then one sum of its products (the zeros add
    nothing), rounded once with the bias, where a scatter-add would round once per tap."""
    n, c = x.shape[:2]
    rank = len(kernel)
    spread_shape = tuple((i - 1) * s + 1 for i, s in zip(x.shape[2:], strides, strict=True))
    spread = np.zeros((n, c, *spread_shape), dtype=x.dtype)
    spread[(slice(None), slice(None), *(slice(None, None, s) for s in strides))] = x
    cg = c // group
    mg = w.shape[1]
    # [C, M/group, *k] -> [M, C/group, *k], every spatial axis flipped
    weights = w.reshape(group, cg, mg, *kernel).swapaxes(1, 2).reshape(group * mg, cg, *kernel)
    weights = np.ascontiguousarray(np.flip(weights, axis=tuple(range(2, 2 + rank))))
    front = [(k - 1) * d - bg for k, d, bg in zip(kernel, dilations, begin, strict=True)]
    back = [
        o + (k - 1) * d - size - f
        for o, k, d, size, f in zip(out_shape, kernel, dilations, spread_shape, front, strict=True)
    ]
    window = Window(tuple(kernel), (1,) * rank, tuple(dilations), tuple(front), tuple(back), tuple(out_shape))
    return convolve(spread, weights, window, group, products, b)


@register("Col2Im", 18)
def col2im(
    data: Array,
    image_shape: Array,
    block_shape: Array,
    *,
    dilations: Sequence[int] | None,
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
) -> Array:
    """ONNX Col2Im (version 18): sum sliding blocks [N, C*prod(block), L] back into images."""
    image = [int(v) for v in image_shape]
    block = tuple(int(v) for v in block_shape)
    rank = len(image)
    strides_t = tuple(strides) if strides else (1,) * rank
    dilations_t = tuple(dilations) if dilations else (1,) * rank
    pads_t = tuple(pads) if pads else (0,) * (2 * rank)
    grid = tuple(
        (i + pads_t[a] + pads_t[rank + a] - ((k - 1) * d + 1)) // s + 1
        for a, (i, k, s, d) in enumerate(zip(image, block, strides_t, dilations_t, strict=True))
    )
    n = data.shape[0]
    c = data.shape[1] // prod(block)
    if c * prod(block) != data.shape[1] or prod(grid) != data.shape[2]:
        raise ValueError(f"Col2Im: input {data.shape} does not fit image {image} with blocks {block}")
    cols = data.reshape((n, c, *block, *grid))
    return _scatter_taps(cols, strides_t, dilations_t, pads_t[:rank], image)
