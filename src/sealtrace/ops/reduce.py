"""Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax, ArgMin.

Every Reduce* op exists in two forms: ``axes`` as an attribute (ReduceSum up to v11, the others up
to v13) and ``axes`` as an optional input with ``noop_with_empty_axes`` (ReduceSum from v13, the
others from v18). Both forms share one reduction per op; only the axes plumbing differs.
An empty reduction set yields the op's identity element (0 for sums, 1 for products, -inf for
max and log-sums ...), the output dtype is the input dtype (integer means stay integer).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sealtrace.ops.registry import KernelFn, quiet, register

Array = np.ndarray[Any, Any]
Axes = tuple[int, ...]
Reduction = Callable[[Array, Axes], Array]


def _accumulator(x: Array) -> Array:
    """float16 and ml_dtypes (bfloat16 ...) accumulate in float32; other dtypes in themselves."""
    if x.dtype == np.float16 or x.dtype.kind == "V":
        return x.astype(np.float32)
    return x


# The reductions call the ufuncs' reduce directly: np.sum, np.max ... do the same for arrays after
# a few microseconds of Python dispatch, more than reducing a small tensor costs.


def _sum(x: Array, axes: Axes) -> Array:
    acc = _accumulator(x)
    return np.add.reduce(acc, axis=axes, dtype=acc.dtype, keepdims=True)


def _sum_square(x: Array, axes: Axes) -> Array:
    acc = _accumulator(x)
    return np.add.reduce(np.square(acc), axis=axes, dtype=acc.dtype, keepdims=True)


def _l1(x: Array, axes: Axes) -> Array:
    acc = _accumulator(x)
    return np.add.reduce(np.abs(acc), axis=axes, dtype=acc.dtype, keepdims=True)


def _l2(x: Array, axes: Axes) -> Array:
    total = _sum_square(x, axes)
    if total.dtype.kind in "iu":  # integer L2: sqrt in float64, truncated back to the input dtype
        return np.sqrt(total.astype(np.float64))
    return np.sqrt(total)


def _log_sum(x: Array, axes: Axes) -> Array:
    return np.log(_sum(x, axes))


def _log_sum_exp(x: Array, axes: Axes) -> Array:
    acc = _accumulator(x)
    if acc.dtype.kind in "iu":
        acc = acc.astype(np.float64)
    # Shift by the finite maximum for stability; an all -inf (or empty) slice keeps shift 0.
    shift = np.max(acc, axis=axes, keepdims=True, initial=-np.inf)
    shift = np.where(np.isfinite(shift), shift, 0).astype(acc.dtype)
    total = np.sum(np.exp(acc - shift), axis=axes, dtype=acc.dtype, keepdims=True)
    return np.log(total) + shift


def _mean(x: Array, axes: Axes) -> Array:
    count = math.prod(x.shape[a] for a in axes)
    total = _sum(x, axes)
    if total.dtype.kind in "iu":
        # Integer mean truncates toward zero (C++ division, as ONNX Runtime does).
        if count == 0:
            return np.zeros_like(total)
        quotient = np.abs(total) // count
        return np.where(total < 0, -quotient, quotient).astype(total.dtype)
    return total / total.dtype.type(count)


def _max(x: Array, axes: Axes) -> Array:
    return np.maximum.reduce(x, axis=axes, keepdims=True, initial=_lowest(x.dtype))


def _min(x: Array, axes: Axes) -> Array:
    return np.minimum.reduce(x, axis=axes, keepdims=True, initial=_highest(x.dtype))


def _prod(x: Array, axes: Axes) -> Array:
    acc = _accumulator(x)
    return np.multiply.reduce(acc, axis=axes, dtype=acc.dtype, keepdims=True)


def _lowest(dtype: np.dtype[Any]) -> Any:
    if dtype == np.bool_:
        return False
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    return -np.inf


def _highest(dtype: np.dtype[Any]) -> Any:
    if dtype == np.bool_:
        return True
    if dtype.kind in "iu":
        return np.iinfo(dtype).max
    return np.inf


def _resolve_axes(axes: Sequence[int] | None, rank: int, noop_with_empty_axes: int) -> Axes:
    if axes is None or len(axes) == 0:
        # No axes: reduce everything, unless the op is told to pass the input through.
        return () if noop_with_empty_axes else tuple(range(rank))
    return tuple(sorted({int(a) + rank if int(a) < 0 else int(a) for a in axes}))


def _apply(reduce: Reduction, data: Array, axes: Axes, keepdims: int) -> Array:
    # The kernels are quiet (see register below): log(0), 0/0 and overflow give IEEE results.
    result = np.asarray(reduce(data, axes))
    if not keepdims:
        result = result.reshape([d for i, d in enumerate(result.shape) if i not in axes])
    return result.astype(data.dtype, copy=False)


def _attribute_form(op: str, reduce: Reduction) -> KernelFn:
    def kernel(data: Array, *, axes: tuple[int, ...] | None, keepdims: int) -> Array:
        return _apply(reduce, data, _resolve_axes(axes, data.ndim, 0), keepdims)

    kernel.__doc__ = f"ONNX {op} with ``axes`` as an attribute."
    kernel.__name__ = kernel.__qualname__ = f"{op}_axes_attribute"
    return kernel


def _input_form(op: str, reduce: Reduction) -> KernelFn:
    def kernel(data: Array, axes: Array | None = None, *, keepdims: int, noop_with_empty_axes: int) -> Array:
        listed = None if axes is None else axes.reshape(-1).astype(np.int64, copy=False).tolist()
        return _apply(reduce, data, _resolve_axes(listed, data.ndim, noop_with_empty_axes), keepdims)

    kernel.__doc__ = f"ONNX {op} with ``axes`` as an optional input (and noop_with_empty_axes)."
    kernel.__name__ = kernel.__qualname__ = f"{op}_axes_input"
    return kernel


# op -> (reduction, since_versions with axes as attribute, since_versions with axes as input)
_REDUCTIONS: dict[str, tuple[Reduction, tuple[int, ...], tuple[int, ...]]] = {
    "ReduceSum": (_sum, (1, 11), (13,)),
    "ReduceMean": (_mean, (1, 11, 13), (18,)),
    "ReduceMax": (_max, (1, 11, 12, 13), (18, 20)),
    "ReduceMin": (_min, (1, 11, 12, 13), (18, 20)),
    "ReduceProd": (_prod, (1, 11, 13), (18,)),
    "ReduceL1": (_l1, (1, 11, 13), (18,)),
    "ReduceL2": (_l2, (1, 11, 13), (18,)),
    "ReduceLogSum": (_log_sum, (1, 11, 13), (18, 28)),
    "ReduceLogSumExp": (_log_sum_exp, (1, 11, 13), (18, 28)),
    "ReduceSumSquare": (_sum_square, (1, 11, 13), (18,)),
}

for _op, (_reduce, _attr_versions, _input_versions) in _REDUCTIONS.items():
    register(_op, *_attr_versions)(quiet(_attribute_form(_op, _reduce)))
    register(_op, *_input_versions)(quiet(_input_form(_op, _reduce)))


def _arg_extreme(
    data: Array, axis: int, keepdims: int, select_last_index: int, pick: Callable[..., Array]
) -> Array:
    axis = axis + data.ndim if axis < 0 else axis
    if select_last_index:
        # The last occurrence is the first one in the reversed axis.
        flipped = pick(np.flip(data, axis=axis), axis=axis, keepdims=True)
        index = data.shape[axis] - 1 - flipped
    else:
        index = pick(data, axis=axis, keepdims=True)
    index = index.astype(np.int64)
    return index if keepdims else np.squeeze(index, axis=axis)


@register("ArgMax", 1, 11, 12, 13)
def arg_max(data: Array, *, axis: int, keepdims: int, select_last_index: int = 0) -> Array:
    """ONNX ArgMax v1/11/12/13 (select_last_index from v12)."""
    return _arg_extreme(data, axis, keepdims, select_last_index, np.argmax)


@register("ArgMin", 1, 11, 12, 13)
def arg_min(data: Array, *, axis: int, keepdims: int, select_last_index: int = 0) -> Array:
    """ONNX ArgMin v1/11/12/13 (select_last_index from v12)."""
    return _arg_extreme(data, axis, keepdims, select_last_index, np.argmin)
