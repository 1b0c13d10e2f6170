"""Indexing kernels: Slice, Gather*, Scatter*, OneHot, NonZero, Unique, Compress, TopK, CumSum ...

Slice returns a view of its input (no kernel writes into its inputs); everything that selects
by index arrays uses NumPy advanced indexing, and the scatters copy ``data`` once, then write.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sealtrace.limits import check_allocation
from sealtrace.ops._values import axis_index as _axis
from sealtrace.ops._values import int_list as _ints
from sealtrace.ops._values import remember, take_along_axis
from sealtrace.ops.registry import VARIES, KernelFn, register, specializes


def _positive(indices: np.ndarray, dim: int) -> np.ndarray:
    """Indices in [-dim, dim) mapped to [0, dim); out-of-range ones are left to fail on use."""
    indices = indices.astype(np.int64, copy=False)
    return np.where(indices < 0, indices + dim, indices)


# ---------------------------------------------------------------------------------------------
# Slice


def _slice(
    data: np.ndarray,
    starts: Sequence[int],
    ends: Sequence[int],
    axes: Sequence[int] | None,
    steps: Sequence[int] | None,
) -> np.ndarray:
    return data[_slice_index(data.shape, starts, ends, axes, steps)]


def _slice_index(
    shape: tuple[int, ...],
    starts: Sequence[int],
    ends: Sequence[int],
    axes: Sequence[int] | None,
    steps: Sequence[int] | None,
) -> tuple[slice, ...]:
    """The basic index that Slice's clamped bounds select on an input of ``shape``."""
    rank = len(shape)
    if axes is None or len(axes) == 0:
        axes = list(range(len(starts)))
    if steps is None or len(steps) == 0:
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError("starts, ends, axes and steps must have the same length")
    index: list[slice] = [slice(None)] * rank
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        axis = _axis(axis, rank)
        dim = shape[axis]
        if step == 0:
            raise ValueError("Slice step cannot be 0")
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            index[axis] = slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
        else:
            # Backward: start is clamped to [0, dim-1] and end to [-1, dim-1], where -1 means
            # 'past the front' (which a Python slice can only say with None).
            start = min(max(start, 0), dim - 1)
            end = min(max(end, -1), dim - 1)
            if dim == 0:
                index[axis] = slice(0, 0)
            else:
                index[axis] = slice(start, None if end < 0 else end, step)
    return tuple(index)


@register("Slice", 1)
def slice_v1(
    data: np.ndarray, *, axes: tuple[int, ...] | None, ends: tuple[int, ...], starts: tuple[int, ...]
) -> np.ndarray:
    """Slice-1: starts/ends/axes as attributes, step 1."""
    return _slice(data, _ints(starts), _ints(ends), None if axes is None else _ints(axes), None)


@register("Slice", 10, 11, 13)
def slice_v10(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    axes: np.ndarray | None = None,
    steps: np.ndarray | None = None,
) -> np.ndarray:
    """Slice-10+: starts/ends/axes/steps as inputs; negative steps; clamped bounds."""
    return _slice(
        data,
        _ints(starts),
        _ints(ends),
        None if axes is None else _ints(axes),
        None if steps is None else _ints(steps),
    )


@specializes(slice_v10)
def _slice_constant_bounds(inputs: tuple[Any, ...], attributes: Any) -> KernelFn | None:
    """Slice whose starts, ends, axes and steps are all constants: the index for each input
    shape worked out once (STFT front ends slice their frames with constant bounds)."""
    if any(value is VARIES for value in inputs[1:]):
        return None
    starts, ends, axes_in, steps_in = (*inputs[1:], None, None)[:4]
    starts, ends = _ints(starts), _ints(ends)
    axes = None if axes_in is None else _ints(axes_in)
    steps = None if steps_in is None else _ints(steps_in)
    indexes: dict[tuple[int, ...], tuple[slice, ...]] = {}

    def run(data: np.ndarray, *_constants: Any) -> np.ndarray:
        index = indexes.get(data.shape)
        if index is None:
            index = remember(indexes, data.shape, _slice_index(data.shape, starts, ends, axes, steps))
        return data[index]

    return run


# ---------------------------------------------------------------------------------------------
# Gather, GatherElements, GatherND


@register("Gather", 1, 11, 13)
def gather(data: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    """Gather-1+: take slices along ``axis`` (negative indices count from the back)."""
    return np.take(data, indices, axis=_axis(axis, data.ndim))


@specializes(gather)
def _gather_constant_index(inputs: tuple[Any, ...], attributes: Any) -> KernelFn | None:
    """Gather of one constant scalar index (taking a dimension out of a Shape, a state out of a
    stack): the basic index per input rank, made once. A view where np.take copies; the values are
    the same and no kernel writes into its inputs."""
    indices = inputs[1]
    if indices is VARIES or indices.ndim != 0 or indices.dtype.kind not in "iu":
        return None
    position = int(indices)
    axis = attributes["axis"]
    # By input rank: the normalized axis and the index (the Ellipsis keeps a 0-d result an array).
    indexes: dict[int, tuple[int, tuple[Any, ...]]] = {}

    def run(data: np.ndarray, _indices: np.ndarray) -> np.ndarray:
        known = indexes.get(data.ndim)
        if known is None:
            if data.ndim == 0:
                return gather(data, indices, axis=axis)  # the kernel's error
            normalized = _axis(axis, data.ndim)
            known = indexes[data.ndim] = (normalized, (slice(None),) * normalized + (position, Ellipsis))
        dim = data.shape[known[0]]
        if not -dim <= position < dim:
            return gather(data, indices, axis=axis)  # out of range: the kernel's error
        return data[known[1]]

    return run


@register("GatherElements", 11, 13)
def gather_elements(data: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    """GatherElements-11/13: output[i][j] = data[indices[i][j]][j] (for axis 0), output shaped like indices."""
    axis = _axis(axis, data.ndim)
    _check_element_indices(data, indices, axis)
    # Indices may be smaller than data on the other axes: only that leading block is read.
    block = tuple(slice(None) if a == axis else slice(0, n) for a, n in enumerate(indices.shape))
    return take_along_axis(data[block], _positive(indices, data.shape[axis]), axis=axis)


def _check_element_indices(data: np.ndarray, indices: np.ndarray, axis: int) -> None:
    """Same rank, and no larger than data off the axis (NumPy would broadcast size-1 axes instead)."""
    if indices.ndim != data.ndim or any(
        i > d for a, (i, d) in enumerate(zip(indices.shape, data.shape, strict=True)) if a != axis
    ):
        raise ValueError(
            f"indices shape {indices.shape} does not fit data shape {data.shape} off axis {axis}"
        )


def _gather_nd(data: np.ndarray, indices: np.ndarray, batch_dims: int) -> np.ndarray:
    b = batch_dims
    k = indices.shape[-1]
    batch_shape = data.shape[:b]
    query_shape = indices.shape[b:-1]
    n_batch = int(np.prod(batch_shape, dtype=np.int64))
    n_query = int(np.prod(query_shape, dtype=np.int64))
    if n_batch * n_query == 0:  # no index tuple: nothing to step through, whatever the batch
        return np.empty((*batch_shape, *query_shape, *data.shape[b + k :]), data.dtype)
    flat_data = data.reshape((n_batch, *data.shape[b:]))
    flat_idx = indices.reshape(n_batch, n_query, k)
    batch = np.broadcast_to(np.arange(n_batch)[:, None], (n_batch, n_query))
    key = (batch, *(flat_idx[..., i] for i in range(k)))
    picked = flat_data[key]
    return picked.reshape((*batch_shape, *query_shape, *data.shape[b + k :]))


@register("GatherND", 11)
def gather_nd_v11(data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """GatherND-11: index tuples into ``data``."""
    return _gather_nd(data, indices, 0)


@register("GatherND", 12, 13)
def gather_nd(data: np.ndarray, indices: np.ndarray, *, batch_dims: int) -> np.ndarray:
    """GatherND-12/13: with leading ``batch_dims`` shared by data and indices."""
    return _gather_nd(data, indices, batch_dims)


# ---------------------------------------------------------------------------------------------
# Scatter, ScatterElements, ScatterND, TensorScatter

_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _write(out: np.ndarray, key: Any, updates: np.ndarray, reduction: str) -> np.ndarray:
    if reduction == "none":
        out[key] = updates
    elif reduction in _REDUCTIONS:
        # ufunc.at applies repeated indices once each, as the spec's loop does.
        _REDUCTIONS[reduction].at(out, key, updates)
    else:
        raise ValueError(f"unknown reduction {reduction!r}")
    return out


def _scatter_elements(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int, reduction: str
) -> np.ndarray:
    axis = _axis(axis, data.ndim)
    _check_element_indices(data, indices, axis)
    if updates.shape != indices.shape:
        raise ValueError(f"updates shape {updates.shape} differs from indices shape {indices.shape}")
    if indices.size == 0:  # (np.ogrid would lay out every other axis: 2**40 rows of nothing)
        return data.copy()
    key = list(np.ogrid[tuple(slice(0, n) for n in indices.shape)])
    key[axis] = _positive(indices, data.shape[axis])
    return _write(data.copy(), tuple(key), updates, reduction)


@register("Scatter", 9, 11)
def scatter(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, axis: int) -> np.ndarray:
    """Scatter-9/11 (deprecated): ScatterElements without reduction."""
    return _scatter_elements(data, indices, updates, axis, "none")


@register("ScatterElements", 11, 13)
def scatter_elements_v11(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, axis: int
) -> np.ndarray:
    """ScatterElements-11/13: write ``updates`` at ``indices`` along ``axis``."""
    return _scatter_elements(data, indices, updates, axis, "none")


@register("ScatterElements", 16, 18)
def scatter_elements(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, axis: int, reduction: str
) -> np.ndarray:
    """ScatterElements-16/18: with reduction none/add/mul (16) and max/min (18)."""
    return _scatter_elements(data, indices, updates, axis, reduction)


def _scatter_nd(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, reduction: str) -> np.ndarray:
    key = tuple(np.moveaxis(indices.astype(np.int64, copy=False), -1, 0))
    return _write(data.copy(), key, updates, reduction)


@register("ScatterND", 11, 13)
def scatter_nd_v11(data: np.ndarray, indices: np.ndarray, updates: np.ndarray) -> np.ndarray:
    """ScatterND-11/13: write slices at index tuples."""
    return _scatter_nd(data, indices, updates, "none")


@register("ScatterND", 16, 18)
def scatter_nd(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, reduction: str) -> np.ndarray:
    """ScatterND-16/18: with reduction none/add/mul (16) and max/min (18)."""
    return _scatter_nd(data, indices, updates, reduction)


@register("TensorScatter", 24)
def tensor_scatter(
    past_cache: np.ndarray,
    update: np.ndarray,
    write_indices: np.ndarray | None = None,
    *,
    axis: int,
    mode: str,
) -> np.ndarray:
    """TensorScatter-24: write ``update`` into the cache at per-batch offsets along ``axis``."""
    axis = _axis(axis, past_cache.ndim)
    if axis == 0:
        raise ValueError("TensorScatter axis cannot be the batch axis")
    if mode not in ("linear", "circular"):
        raise ValueError(f"unknown TensorScatter mode {mode!r}")
    batch, max_len, seq_len = past_cache.shape[0], past_cache.shape[axis], update.shape[axis]
    expected = (*past_cache.shape[:axis], seq_len, *past_cache.shape[axis + 1 :])
    if update.ndim != past_cache.ndim or update.shape != expected or seq_len > max_len:
        raise ValueError(
            f"update shape {update.shape} does not fit cache shape {past_cache.shape} on axis {axis}"
        )
    starts = np.zeros(batch, np.int64) if write_indices is None else write_indices.astype(np.int64)
    positions = starts[:, None] + np.arange(seq_len)
    if mode == "circular":
        positions %= max_len
    elif seq_len and (positions.min() < 0 or positions.max() >= max_len):
        raise ValueError("TensorScatter linear write runs past the cache")
    present = past_cache.copy()
    # With the sequence axis moved next to the batch axis, one advanced index writes every row.
    target = np.moveaxis(present, axis, 1)
    target[np.arange(batch)[:, None], positions] = np.moveaxis(update, axis, 1)
    return present


# ---------------------------------------------------------------------------------------------
# OneHot, NonZero, Unique, Compress, ReverseSequence


def _one_hot(
    indices: np.ndarray, depth: np.ndarray, values: np.ndarray, axis: int, negative: bool
) -> np.ndarray:
    size = int(np.asarray(depth).reshape(-1)[0])
    rank = indices.ndim
    if not -rank - 1 <= axis <= rank:
        raise ValueError(f"axis {axis} is out of range for output rank {rank + 1}")
    axis = axis + rank + 1 if axis < 0 else axis
    index = indices.astype(np.int64)
    if negative:
        index = np.where(index < 0, index + size, index)
    # Out-of-range indices match no position, leaving an all-off row.
    hot = index[..., None] == np.arange(size)
    pair = values.reshape(-1)
    return np.moveaxis(np.where(hot, pair[1], pair[0]), -1, axis)


@register("OneHot", 9)
def one_hot_v9(indices: np.ndarray, depth: np.ndarray, values: np.ndarray, *, axis: int) -> np.ndarray:
    """OneHot-9: indices outside [0, depth) give all-off rows."""
    return _one_hot(indices, depth, values, axis, negative=False)


@register("OneHot", 11, 28)
def one_hot(indices: np.ndarray, depth: np.ndarray, values: np.ndarray, *, axis: int) -> np.ndarray:
    """OneHot-11/28: negative indices count from the back of [0, depth)."""
    return _one_hot(indices, depth, values, axis, negative=True)


@register("NonZero", 9, 13)
def non_zero(x: np.ndarray) -> np.ndarray:
    """NonZero-9/13: indices of the non-zero elements, shape (rank, count), int64."""
    if x.ndim == 0:
        # A scalar is indexed as a 1-element vector (shape (1, count)), as onnxruntime and
        # ONNX's reference do; NumPy itself no longer accepts 0-d input here.
        return np.zeros((1, int(bool(x))), dtype=np.int64)
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


@register("Unique", 11, 28)
def unique(
    x: np.ndarray,
    *,
    axis: int | None,
    sorted: int,  # the ONNX attribute is called so
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Unique-11/28: unique values or slices, first-occurrence indices, inverse indices, counts."""
    take_axis = 0 if axis is None else _axis(axis, x.ndim)
    source = x.reshape(-1) if axis is None else x
    # The inverse indices alone take one int64 per slice, however empty ([2**40, 0] along axis 0).
    check_allocation(source.shape[take_axis] * 8, f"Unique of shape {x.shape}")
    values, first, inverse, counts = np.unique(
        source,
        return_index=True,
        return_inverse=True,
        return_counts=True,
        axis=None if axis is None else take_axis,
    )
    inverse = inverse.reshape(-1)
    if not sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        values = np.take(values, order, axis=take_axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    as_int64 = np.int64
    return values, first.astype(as_int64), inverse.astype(as_int64), counts.astype(as_int64)


@register("Compress", 9, 11, 28)
def compress(data: np.ndarray, condition: np.ndarray, *, axis: int | None) -> np.ndarray:
    """Compress-9+: keep the slices (or flattened elements) whose condition is true."""
    if axis is None:
        return np.compress(condition.reshape(-1), data.reshape(-1))
    return np.compress(condition.reshape(-1), data, axis=_axis(axis, data.ndim))


@register("ReverseSequence", 10, 28)
def reverse_sequence(
    data: np.ndarray, sequence_lens: np.ndarray, *, batch_axis: int, time_axis: int
) -> np.ndarray:
    """ReverseSequence-10/28: reverse the first sequence_lens[b] steps of each batch entry."""
    steps = np.arange(data.shape[time_axis])
    lens = sequence_lens.astype(np.int64)[:, None]
    source = np.where(steps < lens, lens - 1 - steps, steps)  # (batch, time)
    if time_axis < batch_axis:
        source = source.T
    shape = [1] * data.ndim
    shape[batch_axis], shape[time_axis] = data.shape[batch_axis], data.shape[time_axis]
    return take_along_axis(data, source.reshape(shape), axis=time_axis)


# ---------------------------------------------------------------------------------------------
# TopK


def _top_k(x: np.ndarray, k: int, axis: int, largest: int) -> tuple[np.ndarray, np.ndarray]:
    axis = _axis(axis, x.ndim)
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise ValueError(f"k={k} is out of range for an axis of size {n}")
    rows = np.moveaxis(x, axis, -1)
    picked = None
    # Selection by partition is O(n); it needs a total order, so NaN inputs take the full sort.
    if 0 < 4 * k < n and (x.dtype.kind in "iu" or (x.dtype.kind == "f" and not np.isnan(x).any())):
        picked = _top_k_partitioned(rows, k, largest)
    if picked is None:
        picked = _top_k_sorted(rows, k, largest)
    values = take_along_axis(rows, picked, axis=-1)
    return np.moveaxis(values, -1, axis), np.moveaxis(picked, -1, axis)


def _order_stably(values: np.ndarray, largest: int) -> np.ndarray:
    """Positions that sort ``values`` along the last axis; equal values keep their order."""
    if not largest:
        return np.argsort(values, axis=-1, kind="stable")
    # Stable ascending sort of the reversed axis, read backwards: descending values, and among
    # equal values the earlier position first.
    n = values.shape[-1]
    return (n - 1) - np.argsort(values[..., ::-1], axis=-1, kind="stable")[..., ::-1]


def _top_k_sorted(rows: np.ndarray, k: int, largest: int) -> np.ndarray:
    return _order_stably(rows, largest)[..., :k].astype(np.int64, copy=False)


def _top_k_partitioned(rows: np.ndarray, k: int, largest: int) -> np.ndarray | None:
    """Top-k by partition, or None when values tie with the k-th one (the full sort decides those)."""
    n = rows.shape[-1]
    kth_at = n - k if largest else k - 1
    kth = np.partition(rows, kth_at, axis=-1)[..., kth_at : kth_at + 1]
    chosen = rows >= kth if largest else rows <= kth
    if (np.count_nonzero(chosen, axis=-1) != k).any():
        return None
    # Exactly k per row; np.nonzero lists them row by row in ascending index order.
    candidates = (
        np.nonzero(chosen.reshape(-1, n))[1].reshape((*rows.shape[:-1], k)).astype(np.int64, copy=False)
    )
    order = _order_stably(take_along_axis(rows, candidates, axis=-1), largest)
    return take_along_axis(candidates, order, axis=-1)


@register("TopK", 1)
def top_k_v1(x: np.ndarray, *, axis: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """TopK-1: ``k`` as an attribute, largest first."""
    return _top_k(x, k, axis, 1)


@register("TopK", 10)
def top_k_v10(x: np.ndarray, k: np.ndarray, *, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """TopK-10: ``k`` as an input, largest first."""
    return _top_k(x, _ints(k)[0], axis, 1)


@register("TopK", 11, 24)
def top_k(
    x: np.ndarray,
    k: np.ndarray,
    *,
    axis: int,
    largest: int,
    sorted: int,  # the ONNX attribute is called so
) -> tuple[np.ndarray, np.ndarray]:
    """TopK-11/24: largest or smallest; results are always sorted (allowed when sorted=0)."""
    return _top_k(x, _ints(k)[0], axis, largest)


# ---------------------------------------------------------------------------------------------
# CumSum, CumProd


def _cumulate(x: np.ndarray, axis: np.ndarray, exclusive: int, reverse: int, ufunc: np.ufunc) -> np.ndarray:
    ax = _axis(_ints(axis)[0], x.ndim)
    source = np.flip(x, ax) if reverse else x
    # dtype=x.dtype: NumPy would otherwise widen small integer types.
    out = ufunc.accumulate(source, axis=ax, dtype=x.dtype)
    if exclusive:
        shifted = np.empty_like(out)
        head = [slice(None)] * x.ndim
        head[ax] = slice(0, 1)
        shifted[tuple(head)] = ufunc.identity
        body, prev = list(head), list(head)
        body[ax], prev[ax] = slice(1, None), slice(0, -1)
        shifted[tuple(body)] = out[tuple(prev)]
        out = shifted
    return np.flip(out, ax) if reverse else out


@register("CumSum", 11, 14)
def cum_sum(x: np.ndarray, axis: np.ndarray, *, exclusive: int, reverse: int) -> np.ndarray:
    """CumSum-11/14: running sum along ``axis`` (exclusive and/or reversed)."""
    return _cumulate(x, axis, exclusive, reverse, np.add)


@register("CumProd", 26)
def cum_prod(x: np.ndarray, axis: np.ndarray, *, exclusive: int, reverse: int) -> np.ndarray:
    """CumProd-26: running product along ``axis`` (exclusive and/or reversed)."""
    return _cumulate(x, axis, exclusive, reverse, np.multiply)
