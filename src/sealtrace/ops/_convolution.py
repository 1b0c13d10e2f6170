"""Convolution as matrix products: the engine under every convolution kernel (conv.py and
conv_transpose.py).

Speed comes from doing the arithmetic in BLAS. A unit-stride convolution pads its input once into
a flat canvas where every kernel tap is one contiguous slice (see ``_windows.flat_taps``); the
im2col matrix is then a cheap copy of those slices, built a cache-sized chunk of output columns at
a time, each chunk followed by one GEMM per group. Other shapes get their own paths: 1x1
convolutions (a plain matmul), strided windows, tiny outputs and wide kernels (a direct strided
im2col, a block of output rows at a time), depthwise convolutions (im2col per channel, one gemv
per channel), and transposed convolutions (a matmul, then a scatter-add of each tap into the
output canvas). im2col blocks and padded inputs live in reused per-thread scratch buffers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any, TypeVar, cast

import numpy as np

from sealtrace.limits import check_allocation
from sealtrace.ops import numerics
from sealtrace.ops._windows import (
    Array,
    FlatTaps,
    Window,
    all_windows,
    flat_taps,
    pad_spatial,
    resolve_window,
    scratch,
    strided_view,
)

F = TypeVar("F", bound=Callable[..., Array])


def float8_in_float32(kernel: F) -> F:
    """``kernel`` with float8 inputs (numerics has no format of its own for them) computed in
    float32: its array inputs widened exactly, the result rounded back to the input's type once."""

    @functools.wraps(kernel)
    def wrapper(x: Array, *inputs: Array | None, **attributes: Any) -> Array:
        if x.dtype.kind == "V" and numerics.format_of(x.dtype) is None:
            wide = [None if v is None else v.astype(np.float32) for v in inputs]
            return kernel(x.astype(np.float32), *wide, **attributes).astype(x.dtype)
        return kernel(x, *inputs, **attributes)

    return cast(F, wrapper)


class Products:
    """How a convolution's matrix products run, and which dtypes they use.

    Every convolution here is GEMMs of a weight matrix [M, K] and im2col blocks [K, L] (of one
    image, one group, one channel ...), each a stack [G, M, K] x [G or 1, K, L]; a stack of one
    weight is used for every block. The strategy decides the arithmetic: portable numerics
    (docs/numerics.md: each output RN(sum of its products + bias), the products exact in float64),
    native (the BLAS in float32 or float64, the bias added after), or exact
    integer sums (ConvInteger: float64 GEMM, exact below 2**53).
    """

    cols_dtype: np.dtype[Any]
    out_dtype: np.dtype[Any]

    def __init__(self, dtype: np.dtype[Any], integer: bool = False) -> None:
        self.fmt = None if integer or numerics.is_native() else numerics.format_of(dtype)
        if integer:
            self.cols_dtype = self.out_dtype = np.dtype(np.float64)
        elif self.fmt is not None:
            # im2col in the input's own type (a strided copy that also converts runs several times
            # slower than one that does not); the product widens the contiguous blocks to float64
            self.cols_dtype = dtype
            self.out_dtype = self.fmt.dtype
        else:  # native: float16/bfloat16 have no BLAS, they are computed in float32
            self.cols_dtype = self.out_dtype = dtype if dtype in _WIDE else np.dtype(np.float32)

    def __call__(
        self, w: Array, cols: Array, bias: Array | None = None, col_norms: Array | None = None
    ) -> Array:
        """[G or 1, M, K] x [G or 1, K, L] (+ bias [G or 1, M]) -> [G, M, L] of ``out_dtype``;
        ``col_norms`` [G or 1, L] bound the columns' norms (see column_norms)."""
        if self.fmt is not None:
            addend = None if bias is None else np.asarray(bias, dtype=np.float64)[..., None]
            wide, row_norms = numerics.prepared_rows(w)  # once per weight, for read-only ones
            return numerics.product(wide, cols, self.fmt, addend, a_norms=row_norms, b_norms=col_norms)
        wide = w.astype(self.cols_dtype, copy=False)
        y = np.dot(wide[0], cols[0])[None] if w.shape[0] == cols.shape[0] == 1 else np.matmul(wide, cols)
        if bias is not None:
            y += bias.astype(y.dtype, copy=False)[..., None]
        return y


_WIDE = {np.dtype(np.float32), np.dtype(np.float64)}


def _squares_by_group(x: Array, group: int) -> Array:
    """sum over each group's channels of x**2, [N, group, *spatial] float64: the im2col columns'
    squared norms are its window sums (a group's columns hold its channels' window values)."""
    x64 = np.asarray(x, dtype=np.float64)
    grouped = x64.reshape(x.shape[0], group, x.shape[1] // group, *x.shape[2:])
    return np.einsum("ngc...,ngc...->ng...", grouped, grouped)


def _window_norms(windows: Array, rank: int) -> Array:
    """sqrt of the sum over each window's taps: [N, G, *kernel, *grid] -> [N, G, prod(grid)]."""
    summed = np.add.reduce(windows, axis=tuple(range(2, 2 + rank)))
    return np.sqrt(summed.reshape(*summed.shape[:2], prod(summed.shape[2:])))


def group_bias(b: Array | None, group: int) -> Array | None:
    """A per-output-channel bias as [group, M / group] rows of the grouped products."""
    return None if b is None else b.reshape(group, -1)


def _check_groups(channels: int, w: Array, group: int) -> None:
    if w.shape[1] * group != channels or w.shape[0] % group:
        raise ValueError(f"Conv: input channels {channels}, weight {w.shape} and group {group} disagree")


def convolve(x: Array, w: Array, window: Window, group: int, products: Products, b: Array | None) -> Array:
    """Convolution of ``x`` [N, C, *in] with ``w`` [M, C/group, *k], bias ``b`` [M] added, in
    ``products.out_dtype``."""
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    _check_groups(c, w, group)
    mg = m // group
    out_shape = window.out_shape
    # An empty input may declare an output of any size (padding, a [2**40, C, 0, W] batch): refused
    # beyond the memory budget before the loops over images, and made at once where it is empty.
    full_shape = (n, m, *out_shape)
    check_allocation(prod(full_shape) * products.out_dtype.itemsize, f"Conv of {x.shape} by {w.shape}")
    if prod(full_shape) == 0:
        return np.zeros(full_shape, products.out_dtype)
    length = prod(out_shape)
    unpadded = not any(window.pads_begin) and not any(window.pads_end)
    if all(k == 1 for k in window.kernel) and unpadded:
        # 1x1: no windows at all, the convolution is a matmul over channels.
        if any(s != 1 for s in window.strides):
            x = x[(slice(None), slice(None), *(slice(None, None, s) for s in window.strides))]
            x = x[(slice(None), slice(None), *(slice(0, o) for o in out_shape))]
        columns = np.asarray(x, dtype=products.cols_dtype).reshape(n * group, cg, length)
        if group == 1:
            y = products(w.reshape(1, m, c), columns, None if b is None else b[None])
        else:
            weights = np.broadcast_to(w.reshape(1, group, mg, cg), (n, group, mg, cg)).reshape(
                n * group, mg, cg
            )
            bias = (
                None
                if b is None
                else np.broadcast_to(b.reshape(1, group, mg), (n, group, mg)).reshape(n * group, mg)
            )
            y = products(weights, columns, bias)
        return y.reshape((n, m, *out_shape))
    k = prod(window.kernel)
    if cg == 1 and m == c and group == c:
        return depthwise_conv(x, w.reshape(c, k), window, products, b)
    if any(s != 1 for s in window.strides) or length <= _SMALL_OUTPUT or _flat_waste(window) > _MAX_WASTE:
        # Strided windows, small outputs, wide kernels: a direct strided im2col copy is cheaper
        # than the flat layout's stride-phase copies and cropped columns.
        return _direct_conv(x, w, window, group, products, b)
    taps = flat_taps(x, window, slot="canvas")
    # im2col (unit strides): every tap is a contiguous slice; copied into [N, C, K, chunk] a chunk
    # of output columns at a time (so the copy stays in cache), then one GEMM per group and chunk.
    span = taps.span
    chunk = max(256, IM2COL_BYTES // (c * k * products.cols_dtype.itemsize))
    y = _grid_output(taps, (n, group, mg, span), products.out_dtype)
    wg = w.reshape(group, mg, cg * k)
    bias = group_bias(b, group)
    norms = None
    if products.fmt is not None:
        # the columns' norms from the window sums of the squares: a pass over the input, not over
        # the K times larger columns (the cropped columns' ones are as meaningless as their values)
        square_taps = flat_taps(_squares_by_group(x, group), window)
        norms = _window_norms(_tap_windows(square_taps, window, 0, span), len(window.kernel))
    for start in range(0, span, chunk):
        stop = min(span, start + chunk)
        cols = _im2col(taps, window, start, stop, products.cols_dtype).reshape(n, group, cg * k, stop - start)
        for image in range(n):
            chunk_norms = None if norms is None else norms[image, :, start:stop]
            y[image, :, :, start:stop] = products(wg, cols[image], bias, chunk_norms)
    return taps.crop(y.reshape(n, m, span))


# Bytes of im2col columns built per GEMM: about what stays in a core's L2 cache.
IM2COL_BYTES = 2 << 20
# A single image whose whole im2col matrix is at most this big is convolved in one GEMM from a
# fresh copy (small enough to come from the allocator's free lists, not a new mapping).
_ONE_BLOCK_BYTES = 128 << 10


@dataclass(frozen=True, slots=True)
class Geometry:
    """A Window resolved for one input shape and dtype: how the input is padded and the layout of
    the zero-copy view of all its windows. Resolving this per call cost more than the arithmetic
    of small convolutions (a few microseconds each), so it is cached (see conv_geometry)."""

    window: Window
    # Whether one_block_conv takes it: an im2col matrix of at most _ONE_BLOCK_BYTES (of one image,
    # or of a batch convolved with one group), for an output that is not empty.
    one_block: bool
    # The padded input's shape, or None when the input needs no padding.
    padded: tuple[int, ...] | None
    # Where the input goes in the padded canvas, and which part of it (negative pads crop).
    target: tuple[slice, ...]
    source: tuple[slice, ...]
    # The view [N, C, *kernel, *out] of every window of the (padded, C-contiguous) input: strides in bytes.
    windows_shape: tuple[int, ...]
    windows_strides: tuple[int, ...]

    @classmethod
    def of(cls, x: Array, w: Array, window: Window) -> Geometry:
        spatial = x.shape[2:]
        ends = window.needed_end_pads(spatial)
        padded_spatial = tuple(s + b + e for s, b, e in zip(spatial, window.pads_begin, ends, strict=True))
        target: list[slice] = [slice(None), slice(None)]
        source: list[slice] = [slice(None), slice(None)]
        for size, b, e in zip(spatial, window.pads_begin, ends, strict=True):
            lo, hi = max(-b, 0), size - max(-e, 0)
            source.append(slice(lo, max(hi, lo)))
            target.append(slice(lo + b, max(hi, lo) + b))
        shape = (*x.shape[:2], *padded_spatial)
        # C-contiguous strides of the padded input, in bytes.
        strides = [x.itemsize] * len(shape)
        for axis in range(len(shape) - 2, -1, -1):
            strides[axis] = strides[axis + 1] * shape[axis + 1]
        spatial_strides = strides[2:]
        n, c = x.shape[:2]
        w_channels = w.shape[1]
        return cls(
            window,
            # (a batch of several images is taken for one group only: group from the weight's shape)
            n * c * prod(window.kernel) * prod(window.out_shape) * x.itemsize <= _ONE_BLOCK_BYTES
            and (n == 1 or (n > 1 and w_channels == c))
            and n * w.shape[0] * prod(window.out_shape) > 0,  # (convolve makes an empty output at once)
            None if not any(window.pads_begin) and not any(ends) else shape,
            tuple(target),
            tuple(source),
            (*shape[:2], *window.kernel, *window.out_shape),
            (
                *strides[:2],
                *(st * d for st, d in zip(spatial_strides, window.dilations, strict=True)),
                *(st * s for st, s in zip(spatial_strides, window.strides, strict=True)),
            ),
        )


def one_block_conv(
    x: Array, w: Array, b: Array | None, geometry: Geometry, group: int, products: Products
) -> Array:
    """Convolution of one small image (or a small batch, one group), bias added: its windows copied
    into one im2col matrix, one GEMM per group (the arithmetic of _direct_conv's single-block case,
    with none of its set-up)."""
    _check_groups(x.shape[1], w, group)
    if geometry.padded is None:
        canvas = np.ascontiguousarray(x)
    else:
        canvas = np.zeros(geometry.padded, dtype=x.dtype)
        canvas[geometry.target] = x[geometry.source]
    windows: Array = np.ndarray(
        geometry.windows_shape, x.dtype, buffer=canvas, strides=geometry.windows_strides
    )
    m = w.shape[0]
    n = x.shape[0]
    out = geometry.window.out_shape
    length = prod(out)
    if n > 1:
        # A batch (one group): the images side by side in the GEMM's columns, [M, C*K] x [C*K, N*L],
        # instead of N thin products that each read the whole weight (batched audio chunks).
        batch = np.moveaxis(windows, 0, 1 + len(out)).reshape(-1, n * length)  # [C, *kernel, N, *out]
        y = products(
            w.reshape(1, m, -1),
            np.asarray(batch, dtype=products.cols_dtype)[None],
            None if b is None else b[None],
        )
        return np.ascontiguousarray(y.reshape(m, n, length).transpose(1, 0, 2)).reshape((n, m, *out))
    columns = np.asarray(windows, dtype=products.cols_dtype).reshape(group, -1, length)
    y = products(w.reshape(group, m // group, -1), columns, group_bias(b, group))
    return y.reshape((1, m, *out))


# Geometries of recent convolutions, by input shape, dtype and attributes: a model asks for the
# same few on every run. Cleared when full, so a stream of new shapes cannot grow it without bound.
_GEOMETRIES: dict[tuple[Any, ...], Geometry] = {}
_GEOMETRIES_MAX = 4096


def conv_geometry(
    x: Array,
    w: Array,
    kernel_shape: Sequence[int] | None,
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
    pads: Sequence[int] | None,
    auto_pad: str,
) -> Geometry:
    key = (x.shape, x.dtype, w.shape, kernel_shape, strides, dilations, pads, auto_pad)
    # (group is not part of the key: nothing here depends on it)
    try:
        geometry = _GEOMETRIES.get(key)
        cacheable = True
    except TypeError:  # list-valued attributes from a direct call: not cached
        geometry, cacheable = None, False
    if geometry is None:
        window = resolve_window(x.shape[2:], kernel_of(w, kernel_shape), strides, dilations, pads, auto_pad)
        geometry = Geometry.of(x, w, window)
        if cacheable:
            if len(_GEOMETRIES) >= _GEOMETRIES_MAX:
                _GEOMETRIES.clear()
            _GEOMETRIES[key] = geometry
    return geometry


def _im2col(
    taps: FlatTaps,
    window: Window,
    start: int,
    stop: int,
    dtype: np.dtype[Any],
    first: int = 0,
    last: int | None = None,
) -> Array:
    """Columns ``start:stop`` of the im2col matrix for channels ``first:last``, as a
    [N, channels, K, stop - start] scratch array: one strided view covers every tap."""
    view = _tap_windows(taps, window, start, stop, first, last)
    cols = scratch("im2col", view.shape, dtype)
    np.copyto(cols, view)
    return cols.reshape(view.shape[0], view.shape[1], prod(window.kernel), stop - start)


def _tap_windows(
    taps: FlatTaps, window: Window, start: int, stop: int, first: int = 0, last: int | None = None
) -> Array:
    """The zero-copy view [N, channels, *kernel, stop - start] of columns ``start:stop`` of the
    im2col matrix for channels ``first:last``."""
    source = taps.source
    n, positions = source.shape[0], source.shape[2]
    last = source.shape[1] if last is None else last
    itemsize = source.itemsize
    return strided_view(
        source,
        (n, last - first, *window.kernel, stop - start),
        (*source.strides[:2], *(t * itemsize for t in taps.tap_strides), itemsize),
        offset=first * positions + start,
    )


def _direct_conv(
    x: Array, w: Array, window: Window, group: int, products: Products, b: Array | None
) -> Array:
    """Convolution by a direct strided im2col: every window copied from the padded input, a
    block of output rows at a time (so the copy stays in cache), each block one GEMM per group."""
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    mg = m // group
    k = prod(window.kernel)
    out = window.out_shape
    rest = prod(out[1:])
    xp = pad_spatial(x, window.pads_begin, window.needed_end_pads(x.shape[2:]), slot="canvas")
    windows = all_windows(xp, window)  # [N, C, *kernel, *out]
    y = np.empty((n, group, mg, prod(out)), dtype=products.out_dtype)
    wg = w.reshape(group, mg, cg * k)
    bias = group_bias(b, group)
    norms = None
    if products.fmt is not None:  # the columns' norms from the input's squares (see convolve)
        squares = pad_spatial(
            _squares_by_group(x, group), window.pads_begin, window.needed_end_pads(x.shape[2:])
        )
        norms = _window_norms(all_windows(squares, window), len(out))  # [N, G, L]
    step = max(1, IM2COL_BYTES // max(c * k * rest * products.cols_dtype.itemsize, 1))
    for r0 in range(0, out[0], step):
        r1 = min(out[0], r0 + step)
        block = windows[(slice(None),) * (2 + len(out)) + (slice(r0, r1),)]  # rows r0:r1 of the output
        if n > 1 and group == 1:
            # A batch: the images side by side in the GEMM's columns, one [M, C*K] x [C*K, N*L]
            # product instead of N thin ones that each read the whole weight.
            block = np.moveaxis(block, 0, 1 + len(out))  # [C, *kernel, N, rows, ...]
            cols = scratch("im2col", block.shape, products.cols_dtype)
            np.copyto(cols, block)
            block_norms = None if norms is None else norms[:, 0, r0 * rest : r1 * rest].reshape(1, -1)
            product = products(wg, cols.reshape(1, c * k, n * (r1 - r0) * rest), bias, block_norms)
            y[:, 0, :, r0 * rest : r1 * rest] = product.reshape(m, n, (r1 - r0) * rest).transpose(1, 0, 2)
            continue
        cols = scratch("im2col", block.shape, products.cols_dtype)
        np.copyto(cols, block)
        cols = cols.reshape(n, group, cg * k, (r1 - r0) * rest)
        for image in range(n):
            block_norms = None if norms is None else norms[image, :, r0 * rest : r1 * rest]
            y[image, :, :, r0 * rest : r1 * rest] = products(wg, cols[image], bias, block_norms)
    return y.reshape((n, m, *out))


# Largest computed-grid / output ratio the flat im2col accepts before a strided copy is cheaper.
_MAX_WASTE = 1.3
# Outputs this small are not worth the flat layout's setup.
_SMALL_OUTPUT = 64


def _flat_waste(window: Window) -> float:
    """The computed-grid / output ratio of :func:`flat_taps`: the share of cropped columns."""
    geometry = zip(window.out_shape, window.kernel, window.dilations, window.strides, strict=True)
    grid = [o + (k - 1) * d // s for o, k, d, s in geometry]
    return prod(grid[1:]) / max(prod(window.out_shape[1:]), 1)


def depthwise_conv(x: Array, w: Array, window: Window, products: Products, b: Array | None) -> Array:
    """Depthwise convolution (one filter per channel, ``w`` [C, K]) as one gemv per channel.

    Each channel's K taps are copied into a [K, L] im2col block and contracted with its K weights
    by BLAS: one copy pass and one fused multiply-add pass over the taps, where a tap-by-tap
    multiply-accumulate costs two elementwise passes (and two NumPy calls) per tap. Unit strides
    gather from the flat layout (long contiguous runs); strided windows gather their windows
    directly, which skips the flat layout's stride-phase copies and cropped columns.
    """
    n, c = x.shape[:2]
    k = w.shape[1]
    wk = w.reshape(c, 1, k)
    bias = None if b is None else b.reshape(c, 1)
    itemsize = products.cols_dtype.itemsize
    if all(s == 1 for s in window.strides):
        taps = flat_taps(x, window, slot="canvas")
        y = _grid_output(taps, (n, c, 1, taps.span), products.out_dtype)
        for start, stop in _channel_blocks(c, k * taps.span * itemsize):
            cols = _im2col(taps, window, 0, taps.span, products.cols_dtype, start, stop)
            for image in range(n):
                y[image, start:stop] = products(
                    wk[start:stop], cols[image], None if bias is None else bias[start:stop]
                )
        return taps.crop(y.reshape(n, c, taps.span))
    xp = pad_spatial(x, window.pads_begin, window.needed_end_pads(x.shape[2:]), slot="canvas")
    windows = all_windows(xp, window)
    length = prod(window.out_shape)
    y = np.empty((n, c, 1, length), dtype=products.out_dtype)
    for start, stop in _channel_blocks(c, k * length * itemsize):
        block = windows[:, start:stop]
        cols = scratch("im2col", block.shape, products.cols_dtype)
        np.copyto(cols, block)
        cols = cols.reshape(n, stop - start, k, length)
        for image in range(n):
            y[image, start:stop] = products(
                wk[start:stop], cols[image], None if bias is None else bias[start:stop]
            )
    return y.reshape((n, c, *window.out_shape))


def _grid_output(taps: FlatTaps, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Array:
    """The array results on the computed grid go to: scratch when :meth:`FlatTaps.crop` copies
    them out anyway, a new array when the grid is the output (crop then returns it as it is)."""
    return scratch("grid", shape, dtype) if taps.cropped else np.empty(shape, dtype=dtype)


def _channel_blocks(channels: int, bytes_per_channel: int) -> list[tuple[int, int]]:
    """Channel ranges whose im2col blocks hold about ``IM2COL_BYTES``: a block is copied and then
    read back by the gemv while still in cache (BENCHMARKS.md, "Measurements behind the code")."""
    step = max(1, IM2COL_BYTES // max(bytes_per_channel, 1))
    return [(start, min(channels, start + step)) for start in range(0, channels, step)]


def add_bias(y: Array, b: Array | None) -> Array:
    if b is None:
        return y
    bias = b.astype(y.dtype, copy=False)
    spatial = prod(y.shape[2:])
    if spatial < _SMALL_OUTPUT and y.flags.c_contiguous:
        # Few output positions per channel: NumPy's broadcast of one bias value per row would run
        # an inner loop that short for every row; one contiguous add of the repeated bias instead
        # (the same additions, so the same bits).
        flat = y.reshape(y.shape[0], -1)
        flat += np.repeat(bias, spatial)
        return y
    y += bias.reshape((-1,) + (1,) * (y.ndim - 2))
    return y


def kernel_of(w: Array, kernel_shape: Sequence[int] | None) -> tuple[int, ...]:
    return tuple(kernel_shape) if kernel_shape else tuple(w.shape[2:])
