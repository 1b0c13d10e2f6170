"""Sliding-window geometry shared by the convolution and pooling kernels.

Everything here works on channels-first tensors ``[N, C, *spatial]``: it resolves ``auto_pad`` /
``pads`` / ``ceil_mode`` into explicit begin/end pads and output sizes, pads once, and hands out
strided views (one per kernel tap, or all taps at once) without copying.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import product
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
) -> Window:
    """Resolve ONNX window attributes (defaults, auto_pad, ceil_mode) into explicit geometry."""
    rank = len(kernel)
    strides_t = tuple(strides) if strides else (1,) * rank
    dilations_t = tuple(dilations) if dilations else (1,) * rank
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end, out = [], [], []
        for size, k, s, d in zip(spatial, kernel, strides_t, dilations_t, strict=True):
            o = -(-size // s)
            total = max(0, (o - 1) * s + (k - 1) * d + 1 - size)
            head = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
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
