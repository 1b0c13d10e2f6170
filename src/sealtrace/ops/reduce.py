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

from sealtrace.ops import numerics
from sealtrace.ops.registry import KernelFn, quiet, register

Array = np.ndarray[Any, Any]
Axes = tuple[int, ...]
Reduction = Callable[[Array, Axes], Array]


def _portable(reduce: Callable[[Array, Axes], Array]) -> Reduction:
    """A float reduction of ``numerics`` (float8 types computed in float32 and rounded back)."""

    def run(x: Array, axes: Axes) -> Array:
        if x.dtype.kind == "V" and numerics.format_of(x.dtype) is None:
            return reduce(x.astype(np.float32), axes).astype(x.dtype)
        return reduce(x, axes)

    return run


def _float_or_integer(portable: Reduction, integer: Reduction) -> Reduction:
    """Floats reduce through ``numerics`` (docs/numerics.md), integers and bool exactly in NumPy."""
    floating = _portable(portable)

    def run(x: Array, axes: Axes) -> Array:
        return floating(x, axes) if numerics.is_float(x.dtype) else integer(x, axes)

    return run


def _integer_sum(x: Array, axes: Axes) -> Array:
    return np.add.reduce(x, axis=axes, dtype=x.dtype, keepdims=True)


def _integer_sum_square(x: Array, axes: Axes) -> Array:
    return np.add.reduce(np.square(x), axis=axes, dtype=x.dtype, keepdims=True)


def _integer_l1(x: Array, axes: Axes) -> Array:
    return np.add.reduce(np.abs(x), axis=axes, dtype=x.dtype, keepdims=True)


def _integer_l2(x: Array, axes: Axes) -> Array:
    # integer L2: sqrt in float64 of the exact integer sum, truncated back to the input dtype
    return np.sqrt(_integer_sum_square(x, axes).astype(np.float64))


def _integer_mean(x: Array, axes: Axes) -> Array:
    # Integer mean truncates toward zero (C++ division, as ONNX Runtime does).
    count = math.prod(x.shape[a] for a in axes)
    total = _integer_sum(x, axes)
    if count == 0:
        return np.zeros_like(total)
    quotient = np.abs(total) // count
    return np.where(total < 0, -quotient, quotient).astype(total.dtype)


def _integer_prod(x: Array, axes: Axes) -> Array:
    return np.multiply.reduce(x, axis=axes, dtype=x.dtype, keepdims=True)


def _integer_log_sum(x: Array, axes: Axes) -> Array:
    return np.log(_integer_sum(x, axes).astype(np.float64))


def _integer_log_sum_exp(x: Array, axes: Axes) -> Array:
    return numerics.reduce_log_sum_exp(x.astype(np.float64), axes)


def _float_log_sum(x: Array, axes: Axes) -> Array:
    """ReduceLogSum's body: Log(ReduceSum(X)), each correctly rounded."""
    return numerics.apply("log", numerics.reduce_sum(x, axes))


_sum = _float_or_integer(numerics.reduce_sum, _integer_sum)
_sum_square = _float_or_integer(numerics.reduce_sum_square, _integer_sum_square)
_l1 = _float_or_integer(numerics.reduce_l1, _integer_l1)
_l2 = _float_or_integer(numerics.reduce_l2, _integer_l2)
_mean = _float_or_integer(numerics.reduce_mean, _integer_mean)
_prod = _float_or_integer(numerics.reduce_prod, _integer_prod)
_log_sum = _float_or_integer(_float_log_sum, _integer_log_sum)
_log_sum_exp = _float_or_integer(numerics.reduce_log_sum_exp, _integer_log_sum_exp)


def reduce_max(x: Array, axes: Axes) -> Array:
    """The maximum over ``axes`` (kept as size 1): NaN where the slice holds one, -0 below +0."""
    return _signed_zero(np.maximum.reduce(x, axis=axes, keepdims=True, initial=_lowest(x.dtype)), x, axes, 0.0)


def reduce_min(x: Array, axes: Axes) -> Array:
    """The minimum over ``axes`` (kept as size 1): NaN where the slice holds one, -0 below +0."""
    return _signed_zero(np.minimum.reduce(x, axis=axes, keepdims=True, initial=_highest(x.dtype)), x, axes, -0.0)


def _signed_zero(result: Array, x: Array, axes: Axes, preferred: float) -> Array:
    """A zero maximum is +0 where the slice holds a +0, a zero minimum -0 where it holds a -0 (IEEE
    754-2019's maximum and minimum order -0 below +0): NumPy's reductions keep whichever zero their
    SIMD lanes meet last, which depends on the slice's length and the CPU."""
    if not numerics.is_float(x.dtype) or not bool((result == 0).any()):
        return result
    wide = x.astype(np.float32) if x.dtype.kind == "V" else x
    holds = np.logical_or.reduce((wide == 0) & (np.signbit(wide) == bool(np.signbit(preferred))), axis=axes, keepdims=True)
    zero = np.where(holds, preferred, -preferred).astype(result.dtype)
    return np.where(result == 0, zero, result)


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
    "ReduceMax": (reduce_max, (1, 11, 12, 13), (18, 20)),
    "ReduceMin": (reduce_min, (1, 11, 12, 13), (18, 20)),
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
