"""Sliding-window geometry shared by the convolution and pooling kernels.

Everything here works on channels-first tensors ``[N, C, *spatial]``: it resolves ``auto_pad`` /
``pads`` / ``ceil_mode`` into explicit begin/end pads and output sizes, pads once, and hands out
strided views (one per kernel tap, or all taps at once) without copying.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import product
from math import prod
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]


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
    x: Array, begin: Sequence[int], end: Sequence[int], value: Any = 0, extra_first: int = 0
) -> Array:
    """Pad the spatial axes (2..) of ``x`` once; returns ``x`` itself when there is nothing to pad.

    ``extra_first`` adds rows at the end of the first spatial axis (room for flat tap slices).
    Negative pads crop.
    """
    if not any(begin) and not any(end) and not extra_first:
        return x
    if min(begin, default=0) < 0 or min(end, default=0) < 0:
        crop = tuple(slice(max(-b, 0), x.shape[2 + i] - max(-e, 0)) for i, (b, e) in enumerate(zip(begin, end, strict=True)))
        x = x[(slice(None), slice(None), *crop)]
        begin = [max(b, 0) for b in begin]
        end = [max(e, 0) for e in end]
    widths = [(0, 0), (0, 0)] + [(b, e) for b, e in zip(begin, end, strict=True)]
    if extra_first:
        widths[2] = (widths[2][0], widths[2][1] + extra_first)
    return np.pad(x, widths, mode="constant", constant_values=value)


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
    return np.lib.stride_tricks.as_strided(xp, shape=shape, strides=strides, writeable=False)


@dataclass(frozen=True)
class FlatTaps:
    """Every kernel tap of a window as a contiguous 1-D slice of a flattened, padded input.

    The output is computed on a grid ``(out[0], grid[1], ..., grid[-1])`` that is wider than the
    output on the trailing axes (the extra columns read wrapped-around data and are cropped), so
    tap ``t`` reads ``sources[source_of[t]][:, :, offsets[t] : offsets[t] + length]`` with unit
    stride: fast, SIMD-friendly passes, and BLAS-compatible without copies. Strided windows are
    split into stride phases first (one copy of the input), after which every tap is unit-stride.
    """

    sources: tuple[Array, ...]
    source_of: tuple[int, ...]
    offsets: tuple[int, ...]
    grid: tuple[int, ...]
    out_shape: tuple[int, ...]

    @property
    def length(self) -> int:
        return self.out_shape[0] * prod(self.grid[1:]) if self.out_shape else 1

    @property
    def waste(self) -> float:
        """Computed grid size over the true output size (the cost of the cropped columns)."""
        return self.length / max(prod(self.out_shape), 1)

    def tap(self, t: int) -> Array:
        start = self.offsets[t]
        return self.sources[self.source_of[t]][:, :, start : start + self.length]

    def crop(self, y: Array) -> Array:
        """[N, M, length] results on the computed grid -> contiguous [N, M, *out_shape]."""
        full = y.reshape((*y.shape[:2], self.out_shape[0], *self.grid[1:]))
        if self.grid[1:] == self.out_shape[1:]:
            return full
        index = (slice(None), slice(None), slice(None), *(slice(0, o) for o in self.out_shape[1:]))
        return np.ascontiguousarray(full[index])


def flat_taps(x: Array, window: Window, value: Any = 0) -> FlatTaps:
    """Pad ``x`` [N, C, *spatial] once (with ``value``) and lay its taps out as :class:`FlatTaps`."""
    rank = len(window.kernel)
    spatial = x.shape[2:]
    out = window.out_shape
    # Per axis: the largest whole-stride offset any tap reads, and the computed grid extent.
    reach = [(k - 1) * d // s for k, d, s in zip(window.kernel, window.dilations, window.strides, strict=True)]
    grid = [o + q for o, q in zip(out, reach, strict=True)]
    if rank > 1:
        grid[0] += 1  # room for the last taps' slices to run past the final computed row
    extent = [g * s for g, s in zip(grid, window.strides, strict=True)]
    # Place x into a canvas of `extent`, shifted by the begin pads (negative pads crop).
    canvas = np.full((*x.shape[:2], *extent), value, dtype=x.dtype) if value != 0 else np.zeros(
        (*x.shape[:2], *extent), dtype=x.dtype
    )
    src_index: list[slice] = [slice(None), slice(None)]
    dst_index: list[slice] = [slice(None), slice(None)]
    for size, pb, e in zip(spatial, window.pads_begin, extent, strict=True):
        lo = max(-pb, 0)
        hi = min(size, e - pb)
        src_index.append(slice(lo, max(hi, lo)))
        dst_index.append(slice(lo + pb, max(hi, lo) + pb))
    canvas[tuple(dst_index)] = x[tuple(src_index)]
    axis_strides = [prod(grid[a + 1 :]) for a in range(rank)]
    phases: dict[tuple[int, ...], int] = {}
    sources: list[Array] = []
    source_of: list[int] = []
    offsets: list[int] = []
    for tap in window.taps:
        pos = [t * d for t, d in zip(tap, window.dilations, strict=True)]
        phase = tuple(p % s for p, s in zip(pos, window.strides, strict=True))
        if phase not in phases:
            if all(s == 1 for s in window.strides):
                source = canvas
            else:
                index = (slice(None), slice(None), *(slice(p, None, s) for p, s in zip(phase, window.strides, strict=True)))
                source = np.ascontiguousarray(canvas[index])
            phases[phase] = len(sources)
            sources.append(source.reshape(*x.shape[:2], prod(source.shape[2:])))
        source_of.append(phases[phase])
        offsets.append(sum((p // s) * st for p, s, st in zip(pos, window.strides, axis_strides, strict=True)))
    return FlatTaps(tuple(sources), tuple(source_of), tuple(offsets), tuple(grid), out)
