"""Composite operators: fixed sequences of correctly rounded steps in the operator's type
(docs/numerics.md, "Composites"), the ONNX function bodies where they are sound.

Each step is an exact IEEE operation of NumPy in the input's type (subtraction, division: correctly
rounded on every machine) or a primitive of this package; the max is exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sealtrace.ops.numerics.formats import BFLOAT16
from sealtrace.ops.numerics.functions import apply
from sealtrace.ops.numerics.mode import is_native
from sealtrace.ops.numerics.reductions import reduce_sum

Array = np.ndarray[Any, Any]


def softmax(x: Array, axis: int) -> Array:
    """Softmax-13's body along ``axis``: d = x - max(x); e = Exp(d); e / ReduceSum(e)."""
    if is_native():
        out = np.subtract(x, np.max(x, axis=axis, keepdims=True))
        np.exp(out, out=out)
        out /= np.sum(out, axis=axis, keepdims=True)
        return out
    axis = axis % x.ndim
    e = apply("exp", np.subtract(x, np.max(x, axis=axis, keepdims=True)))
    return np.asarray(e / _softmax_sum(e, axis))


def log_softmax(x: Array, axis: int) -> Array:
    """LogSoftmax-13's body along ``axis``: d = x - max(x); d - Log(ReduceSum(Exp(d)))."""
    if is_native():
        out = np.subtract(x, np.max(x, axis=axis, keepdims=True))
        total = np.sum(np.exp(out), axis=axis, keepdims=True)
        np.log(total, out=total)
        out -= total
        return out
    axis = axis % x.ndim
    d = np.subtract(x, np.max(x, axis=axis, keepdims=True))
    return np.asarray(d - apply("log", _softmax_sum(apply("exp", d), axis)))


def _softmax_sum(e: Array, axis: int) -> Array:
    """The ReduceSum step of Softmax and LogSoftmax: correctly rounded, except in bfloat16, where
    it adds left to right along the axis, each addition rounded to bfloat16: the semantics of ONNX's
    reference for bfloat16 (NumPy reduces ml_dtypes' bfloat16 in order, in bfloat16), which the
    conformance suite's bfloat16 Attention cases expect to the bit (their tolerance is below a
    bfloat16 ulp)."""
    if e.dtype != BFLOAT16.dtype:
        return reduce_sum(e, (axis,))
    total = np.take(e, [0], axis=axis).copy()
    for i in range(1, e.shape[axis]):
        total += np.take(e, [i], axis=axis)
    return total


def reduce_log_sum_exp(x: Array, axes: tuple[int, ...]) -> Array:
    """ReduceLogSumExp, shifted by the slice's finite maximum m (0 when there is none) so that no
    exp overflows: Log(ReduceSum(Exp(x - m))) + m, kept dims."""
    shift = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    shift = np.where(np.isfinite(shift), shift, 0).astype(x.dtype)
    if is_native():
        total = np.sum(np.exp(x - shift), axis=axes, dtype=x.dtype, keepdims=True)
        return np.asarray(np.log(total) + shift)
    return np.asarray(apply("log", reduce_sum(apply("exp", x - shift), axes)) + shift)
