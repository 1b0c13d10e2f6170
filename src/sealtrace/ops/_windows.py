"""Sliding-window geometry shared by the convolution and pooling kernels.

Everything here works on channels-first tensors ``[N, C, *spatial]``: it resolves ``auto_pad`` /
``pads`` / ``ceil_mode`` into explicit begin/end pads and output sizes, pads once, and hands out
strided views (one per kernel tap, or all taps at once) without copying.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import product
from math import prod
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]

# Reusable work buffers, per thread and per slot (see `scratch`).
_SCRATCH = threading.local()
# Larger work arrays are allocated afresh (and freed) rather than held between calls.
SCRATCH_MAX_BYTES = 16 << 20


def scratch(slot: str, shape: Sequence[int], dtype: np.dtype[Any]) -> Array:
    """An uninitialized work array for temporaries that never leave one kernel call (im2col
    blocks, padded canvases).

    The buffer behind each ``slot`` is kept per thread and reused, so every call overwrites the
    previous one's contents: a kernel must finish with a slot's array before it asks for the same
    slot again, and must never return it. Reuse matters inside a model run: a fresh multi-megabyte
    temporary per call comes from a new mapping, whose page faults can cost more than the copy
    that fills it (BENCHMARKS.md, "Measurements behind the code").
    """
    dtype = np.dtype(dtype)
    nbytes = prod(shape) * dtype.itemsize
    if nbytes > SCRATCH_MAX_BYTES:
        return np.empty(tuple(shape), dtype=dtype)
    buffers: dict[str, Array] | None = getattr(_SCRATCH, "buffers", None)
    if buffers is None:
        buffers = _SCRATCH.buffers = {}
    buffer = buffers.get(slot)
    if buffer is None or buffer.nbytes < nbytes:
        buffer = buffers[slot] = np.empty(max(nbytes, 1), dtype=np.uint8)
    return buffer[:nbytes].view(dtype).reshape(tuple(shape))


@dataclass(frozen=True)
class Window:
    """Resolved geometry of a sliding window over the spatial axes of one input."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    out_shape: tuple[int, ...]

    @property
    def taps(self) -> Iterator[tuple[int, ...]]:
        """Every kernel position, row-major (the order ONNX Runtime scans a window in)."""
        return product(*(range(k) for k in self.kernel))

    def needed_end_pads(self, spatial: Sequence[int]) -> tuple[int, ...]:
        """End pads that make every output window fit (ceil_mode windows may run past the pads)."""
        needed = []
        for size, k, s, d, pb, pe, o in zip(
            spatial, self.kernel, self.strides, self.dilations, self.pads_begin, self.pads_end, self.out_shape,
            strict=True,
        ):
            span = (o - 1) * s + (k - 1) * d + 1 if o > 0 else 0
            needed.append(max(pe, span - size - pb))
        return tuple(needed)


def resolve_window(
    spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
    pads: Sequence[int] | None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool = False,
    clamp_same: bool = True,
) -> Window:
    """Resolve ONNX window attributes (defaults, auto_pad, ceil_mode) into explicit geometry.

    ``clamp_same``: SAME padding never goes negative (convolutions); pooling lets it go negative
    (kernel smaller than stride), which crops the input as ONNX's pad formula says.
    """
    rank = len(kernel)
    strides_t = tuple(strides) if strides else (1,) * rank
    dilations_t = tuple(dilations) if dilations else (1,) * rank
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end, out = [], [], []
        for size, k, s, d in zip(spatial, kernel, strides_t, dilations_t, strict=True):
            o = -(-size // s)
            total = (o - 1) * s + (k - 1) * d + 1 - size
            if clamp_same:
                total = max(total, 0)
            # C division (toward zero), as ONNX Runtime splits a negative total for pooling.
            head = int(total / 2) if auto_pad == "SAME_UPPER" else int((total + 1) / 2)
            begin.append(head)
            end.append(total - head)
            out.append(o)
        return Window(tuple(kernel), strides_t, dilations_t, tuple(begin), tuple(end), tuple(out))
    if auto_pad == "VALID":
        pads_t: tuple[int, ...] = (0,) * (2 * rank)
    elif auto_pad in ("NOTSET", "", None):
        pads_t = tuple(pads) if pads else (0,) * (2 * rank)
    else:
        raise ValueError(f"unknown auto_pad {auto_pad!r}")
    begin_t, end_t = pads_t[:rank], pads_t[rank:]
    out = []
    for size, k, s, d, pb, pe in zip(spatial, kernel, strides_t, dilations_t, begin_t, end_t, strict=True):
        span = size + pb + pe - ((k - 1) * d + 1)
        if ceil_mode:
            o = -(-span // s) + 1
            # A window that would start past the input and its begin padding is dropped.
            if (o - 1) * s >= size + pb:
                o -= 1
        else:
            o = span // s + 1
        out.append(max(o, 0))
    return Window(tuple(kernel), strides_t, dilations_t, begin_t, end_t, tuple(out))


def pad_spatial(
    x: Array,
    begin: Sequence[int],
    end: Sequence[int],
    value: Any = 0,
    extra_first: int = 0,
    slot: str | None = None,
) -> Array:
    """Pad the spatial axes (2..) of ``x`` once; returns ``x`` itself when there is nothing to pad.

    ``extra_first`` adds rows at the end of the first spatial axis. Negative pads crop. With a
    ``slot``, the padded copy is that :func:`scratch` buffer (for a temporary of one kernel call).
    """
    if not any(begin) and not any(end) and not extra_first:
        return x
    ends = list(end)
    if extra_first:
        ends[0] += extra_first
    size = [s + b + e for s, b, e in zip(x.shape[2:], begin, ends, strict=True)]
    shape = (*x.shape[:2], *size)
    # A fill + one slice copy: much cheaper than np.pad for the small tensors pooling sees.
    out = _filled(shape, x.dtype, value, slot)
    src: list[slice] = [slice(None), slice(None)]
    dst: list[slice] = [slice(None), slice(None)]
    for n, b, e in zip(x.shape[2:], begin, ends, strict=True):
        lo, hi = max(-b, 0), n - max(-e, 0)
        src.append(slice(lo, max(hi, lo)))
        dst.append(slice(lo + b, max(hi, lo) + b))
    out[tuple(dst)] = x[tuple(src)]
    return out


def _filled(shape: tuple[int, ...], dtype: np.dtype[Any], value: Any, slot: str | None) -> Array:
    """A new array of ``shape`` filled with ``value``, or the ``slot`` scratch array so filled."""
    if slot is None:
        return np.full(shape, value, dtype=dtype) if value != 0 else np.zeros(shape, dtype=dtype)
    out = scratch(slot, shape, dtype)
    out.fill(value)
    return out


def tap_view(xp: Array, tap: Sequence[int], window: Window) -> Array:
    """The strided view of padded ``xp`` that kernel position ``tap`` reads for every output."""
    index: list[slice] = [slice(None), slice(None)]
    for i, s, d, o in zip(tap, window.strides, window.dilations, window.out_shape, strict=True):
        start = i * d
        index.append(slice(start, start + (o - 1) * s + 1, s))
    return xp[tuple(index)]


def all_windows(xp: Array, window: Window) -> Array:
    """A zero-copy view ``[N, C, *kernel, *out]`` of every window of padded ``xp``."""
    rank = len(window.kernel)
    spatial_strides = xp.strides[2:]
    shape = xp.shape[:2] + window.kernel + window.out_shape
    strides = (
        xp.strides[:2]
        + tuple(st * d for st, d in zip(spatial_strides, window.dilations, strict=True))
        + tuple(st * s for st, s in zip(spatial_strides, window.strides, strict=True))
    )
    assert len(shape) == 2 + 2 * rank
    return strided_view(xp, shape, strides)


def strided_view(base: Array, shape: Sequence[int], strides: Sequence[int], offset: int = 0) -> Array:
    """A read-only view of ``base``'s memory (from element ``offset``) with the given layout."""
    if base.flags.c_contiguous:
        # Several times cheaper than as_strided, which matters for the many small convolutions.
        view: Array = np.ndarray(
            tuple(shape), base.dtype, buffer=base, offset=offset * base.itemsize, strides=tuple(strides)
        )
        view.flags.writeable = False
        return view
    if offset:
        raise ValueError("strided_view: an offset needs a C-contiguous base")
    return np.lib.stride_tricks.as_strided(base, shape=shape, strides=strides, writeable=False)


@dataclass(frozen=True)
class FlatTaps:
    """A unit-stride window's input, padded and flattened so every kernel tap is one contiguous
    1-D slice.

    The output is computed on a grid ``(out[0], grid[1], ..., grid[-1])`` that is wider than the
    output on the trailing axes (the extra columns read wrapped-around data and are cropped), so
    tap ``(t_0, ..., t_r)`` reads ``span`` positions of ``source`` [N, C, positions] with unit
    stride, from ``t_a * tap_strides[a]`` summed over the axes: one strided view covers every tap,
    and each tap is SIMD-friendly and BLAS-compatible without copies.
    """

    source: Array
    tap_strides: tuple[int, ...]
    grid: tuple[int, ...]
    out_shape: tuple[int, ...]
    span: int

    @property
    def cropped(self) -> bool:
        """Whether the computed grid is wider than the output (so :meth:`crop` copies)."""
        return self.grid[1:] != self.out_shape[1:]

    def crop(self, y: Array) -> Array:
        """Results on the computed grid [N, M, span] -> a contiguous [N, M, *out_shape]: ``y``
        itself when nothing is cropped, else always a new array (``y`` may be scratch)."""
        y = y.reshape((*y.shape[:2], self.out_shape[0], *self.grid[1:]))
        if not self.cropped:
            return y
        index = (slice(None), slice(None), slice(None), *(slice(0, o) for o in self.out_shape[1:]))
        return y[index].copy()


def flat_taps(x: Array, window: Window, value: Any = 0, slot: str | None = None) -> FlatTaps:
    """Pad ``x`` [N, C, *spatial] once (with ``value``) and lay its taps out as :class:`FlatTaps`
    (unit strides only).

    With a ``slot``, the padded canvas is that :func:`scratch` buffer: the taps are then valid
    only until the slot is next used.
    """
    if any(s != 1 for s in window.strides):
        raise ValueError(f"flat_taps needs unit strides, got {window.strides}")
    rank = len(window.kernel)
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    out = window.out_shape
    # Per axis: the computed grid extent (the output plus the kernel's reach).
    grid = [o + (k - 1) * d for o, k, d in zip(out, window.kernel, window.dilations, strict=True)]
    row = prod(grid[1:])
    span = out[0] * row if out else 1
    # Room for the last taps' slices to run past the final computed row.
    extent = [grid[0] + 1 if rank > 1 else grid[0], *grid[1:]]
    # Place x into a canvas of `extent`, shifted by the begin pads (negative pads crop).
    canvas = _filled((n, c, *extent), x.dtype, value, slot)
    src_index: list[slice] = [slice(None), slice(None)]
    dst_index: list[slice] = []
    for size, pb, e in zip(spatial, window.pads_begin, extent, strict=True):
        lo = max(-pb, 0)
        hi = max(min(size, e - pb), lo)
        src_index.append(slice(lo, hi))
        dst_index.append(slice(lo + pb, hi + pb))
    canvas[(slice(None), slice(None), *dst_index)] = x[tuple(src_index)]
    tap_strides = tuple(d * prod(grid[a + 1 :]) for a, d in enumerate(window.dilations))
    return FlatTaps(canvas.reshape(n, c, prod(extent)), tap_strides, tuple(grid), out, span)
