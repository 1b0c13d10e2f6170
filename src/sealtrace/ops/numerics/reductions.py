"""Reductions over axes, each output one correctly rounded function of its slice (docs/numerics.md,
"Reductions"): sum, mean, sum of squares, L1 and L2 norms, product.

The slice's terms (the values, their squares or magnitudes) are exact in float64 for the narrow
formats, so a float64 sum in any order is within (K + 1) * 2**-53 * sum|terms| of the exact sum;
``settle_sums`` rounds and re-adds the rare undecided slices exactly. float64 inputs are summed by
``math.fsum`` (correctly rounded) or, for a function of the sum, by MPFR.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import gmpy2
import numpy as np

from sealtrace.ops.numerics.formats import FLOAT64, FloatFormat, canonical_nans, exact_in_float64, format_of
from sealtrace.ops.numerics.mode import is_native
from sealtrace.ops.numerics.settle import WIDEN, U, exact_apply, settle, settle_sums

Array = np.ndarray[Any, Any]
Axes = tuple[int, ...]


def _rows(x: Array, axes: Axes) -> tuple[Array, tuple[int, ...]]:
    """``x`` as float64 [outputs, K] rows (the reduced axes last) and the kept-dims output shape."""
    keep = [a for a in range(x.ndim) if a not in axes]
    out_shape = tuple(1 if a in axes else d for a, d in enumerate(x.shape))
    count = math.prod(x.shape[a] for a in axes)
    moved = np.transpose(x, keep + list(axes)) if axes != tuple(range(x.ndim - len(axes), x.ndim)) else x
    outputs = math.prod(x.shape[a] for a in keep)
    return np.asarray(moved, dtype=np.float64).reshape(outputs, count), out_shape


def _format(x: Array) -> FloatFormat:
    fmt = format_of(x.dtype)
    if fmt is None:
        raise TypeError(f"portable reductions take float16, bfloat16, float32 or float64, not {x.dtype}")
    return fmt


def _sum_of(terms: Array, fmt: FloatFormat, out_shape: tuple[int, ...]) -> Array:
    """RN(sum of each row of exact float64 ``terms``) in ``fmt``, shaped ``out_shape``."""
    if fmt is FLOAT64 or not exact_in_float64(fmt):
        return _fsum_rows(terms).reshape(out_shape)
    with np.errstate(invalid="ignore", over="ignore"):
        y = np.sum(terms, axis=1) + 0.0
    if not np.isfinite(y).all():
        return _non_finite_sums(terms, y, fmt, out_shape)
    err = np.sum(np.abs(terms), axis=1) * ((terms.shape[1] + 1) * U * WIDEN)
    return settle_sums(y, err, fmt, lambda index: terms[index]).reshape(out_shape)


def _non_finite_sums(terms: Array, y: Array, fmt: FloatFormat, out_shape: tuple[int, ...]) -> Array:
    """Rows with an infinite or NaN term sum to IEEE's result, which no order changes; the others as usual."""
    bad: Array = np.asarray(~np.isfinite(terms).all(axis=1))
    clean = np.where(bad[:, None], 0.0, terms)
    out = _sum_of(clean, fmt, (terms.shape[0],))
    out[bad] = y[bad].astype(fmt.dtype) if fmt is not FLOAT64 else y[bad]
    return canonical_nans(out, fmt).reshape(out_shape)


def _fsum_rows(terms: Array) -> Array:
    """float64: math.fsum of each row (correctly rounded); IEEE's result where a term is not finite,
    and the infinity a finite sum overflows to."""
    out = np.empty(terms.shape[0], dtype=np.float64)
    for i, row in enumerate(terms.tolist()):
        try:
            out[i] = math.fsum(row)
        except OverflowError:  # finite terms whose exact sum is beyond float64's range
            out[i] = exact_apply([row], FLOAT64)[0]
        except ValueError:  # inf - inf inside fsum: IEEE says NaN
            out[i] = np.nan
    return canonical_nans(out + 0.0, FLOAT64)


def _function_of_sum(
    values: Array,
    fmt: FloatFormat,
    out_shape: tuple[int, ...],
    square: bool,
    approximate: Callable[[Array, Array], tuple[Array, Array]],
    finish: Callable[[Any], Any],
) -> Array:
    """RN(finish(S)) in ``fmt``, S the exact sum of each row of ``values`` (of their squares when
    ``square``). ``approximate(s, e)`` turns the float64 sum s, |s - S| <= e, into an approximation
    of finish(S) and its bound; MPFR computes the undecided rows, and every float64 row."""
    terms = values * values if square else values
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        s = np.sum(terms, axis=1) + 0.0
        e = np.sum(np.abs(terms), axis=1) * ((terms.shape[1] + 1) * U * WIDEN)
        y, err = approximate(s, e)
    finite = np.isfinite(values).all(axis=1)
    if not exact_in_float64(fmt):
        # float64: every finite row by MPFR (its float64 sum may even have overflowed)
        y = np.where(finite, 0.0, y)
        err = np.where(finite, np.inf, 0.0)
    else:
        err = np.where(finite, err, 0.0)
    out = settle(y, err, fmt, lambda index: _exact_rows(values[index].tolist(), fmt, square, finish))
    if not finite.all():
        out[~finite] = y[~finite].astype(fmt.dtype)
    return canonical_nans(out, fmt).reshape(out_shape)


def _exact_rows(rows: Sequence[Sequence[float]], fmt: FloatFormat, square: bool, finish: Callable[[Any], Any]) -> list[float]:
    """finish(exact sum of each row, or of its squares), rounded once into ``fmt`` by MPFR."""
    if not square:
        return exact_apply(rows, fmt, finish)
    values = []
    for row in rows:
        with gmpy2.context(precision=4400):  # squares of float64 values, and their sum, are exact here
            total = gmpy2.fsum(gmpy2.mpfr(v, 53) ** 2 for v in row)
        with fmt.context:
            values.append(float(finish(total)))
    return values


def _plus(total: Any) -> Any:
    return +total


def reduce_sum(x: Array, axes: Axes) -> Array:
    """ReduceSum: RN(sum of the slice), keepdims shape."""
    if is_native():
        return _native('sum', x, axes)
    fmt = _format(x)
    terms, shape = _rows(x, axes)
    return _sum_of(terms, fmt, shape)


def reduce_l1(x: Array, axes: Axes) -> Array:
    """ReduceL1: RN(sum of |x|)."""
    if is_native():
        return _native('l1', x, axes)
    fmt = _format(x)
    terms, shape = _rows(x, axes)
    return _sum_of(np.abs(terms), fmt, shape)


def reduce_sum_square(x: Array, axes: Axes) -> Array:
    """ReduceSumSquare: RN(sum of x**2), one rounding."""
    if is_native():
        return _native('sum_square', x, axes)
    fmt = _format(x)
    values, shape = _rows(x, axes)
    if exact_in_float64(fmt):
        return _sum_of(values * values, fmt, shape)
    return _function_of_sum(values, fmt, shape, True, lambda s, e: (s, e), _plus)


def reduce_mean(x: Array, axes: Axes) -> Array:
    """ReduceMean: RN(sum of the slice / its size), one rounding (an empty slice gives NaN)."""
    if is_native():
        return _native('mean', x, axes)
    fmt = _format(x)
    values, shape = _rows(x, axes)
    return _mean_of(values, fmt, shape, square=False)


def mean_square(x: Array, axes: Axes) -> Array:
    """RN(sum of x**2 / size) over ``axes``, one rounding (RMSNormalization's and the variance's)."""
    if is_native():
        return _native('mean_square', x, axes)
    fmt = _format(x)
    values, shape = _rows(x, axes)
    return _mean_of(values, fmt, shape, square=True)


def _mean_of(values: Array, fmt: FloatFormat, shape: tuple[int, ...], square: bool) -> Array:
    count = values.shape[1]
    if count == 0:
        return np.full(shape, fmt.canonical_nan, dtype=fmt.dtype)

    def approximate(s: Array, e: Array) -> tuple[Array, Array]:
        y = s / count
        return y, e / count + np.abs(y) * (U * WIDEN)

    return _function_of_sum(values, fmt, shape, square, approximate, lambda total: total / count)


def reduce_l2(x: Array, axes: Axes) -> Array:
    """ReduceL2: RN(sqrt(sum of x**2)), one rounding."""
    if is_native():
        return _native('l2', x, axes)
    fmt = _format(x)
    values, shape = _rows(x, axes)

    def approximate(s: Array, e: Array) -> tuple[Array, Array]:
        y = np.sqrt(s)
        # |sqrt(S) - sqrt(s)| <= |S - s| / sqrt(s), and <= sqrt|S - s| always
        spread = np.minimum(np.where(y > 0, e / np.where(y > 0, y, 1.0), np.inf), np.sqrt(e))
        return y, spread * WIDEN + y * (U * WIDEN)

    return _function_of_sum(values, fmt, shape, True, approximate, gmpy2.sqrt)


# Renormalize the running product of mantissas this often (each factor is at least 1/2).
_PRODUCT_CHUNK = 512


def reduce_prod(x: Array, axes: Axes) -> Array:
    """ReduceProd: RN(product of the slice), one rounding (an empty slice gives 1)."""
    if is_native():
        return _native('prod', x, axes)
    fmt = _format(x)
    values, shape = _rows(x, axes)
    count = values.shape[1]
    finite = np.isfinite(values).all(axis=1)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        mantissa, exponent = np.frexp(values)
        total = np.ones(values.shape[0])
        scale = exponent.sum(axis=1)
        for start in range(0, count, _PRODUCT_CHUNK):
            total *= np.prod(mantissa[:, start : start + _PRODUCT_CHUNK], axis=1)
            total, shift = np.frexp(total)
            scale += shift
        y = np.ldexp(total, scale)
        naive = np.prod(values, axis=1)  # IEEE's result for rows with an infinity or a NaN
    y = np.where(finite, y, naive) + 0.0
    err = np.abs(y) * ((count + 2) * U * WIDEN) if exact_in_float64(fmt) else np.full_like(y, np.inf)
    err = np.where(finite, err, 0.0)
    def exact(index: Array) -> list[float]:
        out = []
        for row in values[index].tolist():
            with gmpy2.context(precision=53 * max(len(row), 1)):
                product = math.prod((gmpy2.mpfr(v, 53) for v in row), start=gmpy2.mpfr(1))
            with fmt.context:
                out.append(float(+product))
        return out

    return canonical_nans(settle(y, err, fmt, exact), fmt).reshape(shape)


# ------------------------------------------------------------------------------------------------
# Native numerics: NumPy's reductions in the input's type (half precision accumulated in float32).


def _native_accumulator(x: Array) -> Array:
    return x.astype(np.float32) if x.dtype != np.float64 and x.dtype != np.float32 else x


def _native(kind: str, x: Array, axes: Axes) -> Array:
    acc = _native_accumulator(x)
    if kind in ("sum_square", "l2", "mean_square"):
        acc = np.square(acc)
    elif kind == "l1":
        acc = np.abs(acc)
    if kind == "prod":
        y = np.multiply.reduce(acc, axis=axes, dtype=acc.dtype, keepdims=True)
    else:
        y = np.add.reduce(acc, axis=axes, dtype=acc.dtype, keepdims=True)
    if kind in ("mean", "mean_square"):
        y = y / y.dtype.type(math.prod(x.shape[a] for a in axes))
    elif kind == "l2":
        y = np.sqrt(y)
    return np.asarray(y).astype(x.dtype, copy=False)
