"""Elementwise math, comparison, logical and bitwise operators (default domain).

Binary operators broadcast NumPy-style from opset 7; before that they take ``broadcast``/``axis``
attributes (see ``legacy_operand``). Outputs keep the ONNX type of their inputs: NumPy promotes
only where ONNX does (it never needs to, since ONNX binary operators take one type T).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from sealtrace.ops import numerics
from sealtrace.ops.registry import VARIES, KernelFn, quiet, register, specializes

Array = np.ndarray


def legacy_operand(b: np.ndarray, a_ndim: int, broadcast: int | None, axis: int | None) -> np.ndarray:
    """B of an opset<7 binary op, reshaped so NumPy broadcasting matches the legacy rule.

    With ``broadcast=1`` B's shape is a contiguous run of A's shape starting at ``axis``
    (default: aligned to A's trailing axes, which NumPy already does). With ``broadcast=0``
    the shapes must be equal and nothing changes.
    """
    if not broadcast or axis is None or b.ndim == 0:
        return b
    if axis < 0:
        axis += a_ndim
    trailing = a_ndim - axis - b.ndim
    if trailing <= 0:
        return b
    return b.reshape(b.shape + (1,) * trailing)


# --------------------------------------------------------------------------------------------
# Unary math


def _unary(op_type: str, ufunc: Callable[..., Any], *versions: int) -> None:
    """Register a unary ufunc for ``versions`` (opset 1's ``consumed_inputs`` is ignored)."""

    def kernel(x: Array, *, consumed_inputs: tuple[int, ...] | None = None) -> Array:
        return np.asarray(ufunc(x))

    kernel.__name__ = kernel.__qualname__ = op_type.lower()
    kernel.__doc__ = f"ONNX {op_type} (since_versions {', '.join(map(str, versions))})."
    register(op_type, *versions)(quiet(kernel))


_UNARY: tuple[tuple[str, np.ufunc, tuple[int, ...]], ...] = (
    ("Abs", np.abs, (1, 6, 13)),
    ("Neg", np.negative, (1, 6, 13)),
    ("Sqrt", np.sqrt, (1, 6, 13)),
    ("Reciprocal", np.reciprocal, (1, 6, 13)),
    ("Floor", np.floor, (1, 6, 13)),
    ("Ceil", np.ceil, (1, 6, 13)),
    ("Round", np.rint, (11, 22)),  # rint rounds half to even, as ONNX Round does
    ("Sign", np.sign, (9, 13)),
    ("IsNaN", np.isnan, (9, 13, 20)),
    ("Not", np.logical_not, (1,)),
    ("BitwiseNot", np.invert, (18,)),
)
for _op, _ufunc, _versions in _UNARY:
    _unary(_op, _ufunc, *_versions)


def _function(op_type: str, name: str, *versions: int) -> None:
    """Register the correctly rounded function ``name`` of numerics for ``versions``."""

    def kernel(x: Array, *, consumed_inputs: tuple[int, ...] | None = None) -> Array:
        return numerics.apply(name, x)

    kernel.__name__ = kernel.__qualname__ = op_type.lower()
    kernel.__doc__ = f"ONNX {op_type} (since_versions {', '.join(map(str, versions))}): RN({name}(x))."
    register(op_type, *versions)(quiet(kernel))


# The transcendental functions: correctly rounded (docs/numerics.md), never NumPy's SIMD ufuncs,
# whose float32 results differ between CPUs.
_FUNCTIONS: tuple[tuple[str, str, tuple[int, ...]], ...] = (
    ("Exp", "exp", (1, 6, 13)),
    ("Log", "log", (1, 6, 13)),
    ("Sin", "sin", (7, 22)),
    ("Cos", "cos", (7, 22)),
    ("Tan", "tan", (7, 22)),
    ("Asin", "asin", (7, 22)),
    ("Acos", "acos", (7, 22)),
    ("Atan", "atan", (7, 22)),
    ("Sinh", "sinh", (9, 22)),
    ("Cosh", "cosh", (9, 22)),
    ("Asinh", "asinh", (9, 22)),
    ("Acosh", "acosh", (9, 22)),
    ("Atanh", "atanh", (9, 22)),
)
for _op, _name, _versions in _FUNCTIONS:
    _function(_op, _name, *_versions)


@register("Erf", 9, 13)
@quiet
def erf_op(x: Array) -> Array:
    """ONNX Erf (9, 13): RN(erf(x)); integer inputs (allowed by the schema) are computed in float64
    and truncated back to their type."""
    if numerics.is_float(x.dtype):
        return numerics.apply("erf", x)
    return numerics.apply("erf", x.astype(np.float64)).astype(x.dtype)


@register("IsInf", 10, 20)
def isinf(x: Array, *, detect_negative: int = 1, detect_positive: int = 1) -> Array:
    """ONNX IsInf (10, 20) with detect_negative / detect_positive."""
    if detect_negative and detect_positive:
        return np.asarray(np.isinf(x))
    if detect_positive:
        return np.asarray(np.isposinf(x))
    if detect_negative:
        return np.asarray(np.isneginf(x))
    return np.zeros(x.shape, dtype=bool)


# --------------------------------------------------------------------------------------------
# Binary arithmetic


def _int_divide(a: Array, b: Array) -> Array:
    """Integer division truncating toward zero (C semantics, as ONNX Runtime computes it)."""
    quotient = np.floor_divide(a, b)
    if a.dtype.kind == "i":
        # floor and trunc differ when the division is inexact and the signs differ
        inexact = np.remainder(a, b) != 0
        quotient = np.asarray(quotient)
        quotient += (inexact & ((a < 0) != (b < 0))).astype(quotient.dtype)
    return np.asarray(quotient)


def _divide(a: Array, b: Array) -> Array:
    if a.dtype.kind in "iu":
        return _int_divide(a, b)
    return np.asarray(np.divide(a, b))


def _arithmetic(ufunc: np.ufunc) -> Callable[[Array, Array], Array]:
    def kernel(a: Array, b: Array) -> Array:
        out = ufunc(a, b)
        return out if type(out) is np.ndarray else np.asarray(out)  # 0-d inputs give NumPy scalars

    return kernel


_ARITH: dict[str, Callable[[Array, Array], Array]] = {
    "Add": _arithmetic(np.add),
    "Sub": _arithmetic(np.subtract),
    "Mul": _arithmetic(np.multiply),
    "Div": _divide,
}


def _binary(op_type: str, fn: Callable[[Array, Array], Array]) -> None:
    """Register ``fn`` as the v1/v6 (legacy broadcast) and v7+ (NumPy broadcast) kernels."""

    def legacy(
        a: Array,
        b: Array,
        *,
        axis: int | None = None,
        broadcast: int = 0,
        consumed_inputs: tuple[int, ...] | None = None,
    ) -> Array:
        return fn(a, legacy_operand(b, a.ndim, broadcast, axis))

    # The function itself from version 7 on: no wrapper, as Add and Mul are the most frequent steps.
    modern = fn
    for kernel, versions, kind in (
        (legacy, (1, 6), "legacy broadcast"),
        (modern, (7, 13, 14), "NumPy broadcast"),
    ):
        kernel.__name__ = kernel.__qualname__ = f"{op_type.lower()}_{'legacy' if kernel is legacy else 'v7'}"
        kernel.__doc__ = f"ONNX {op_type} ({', '.join(map(str, versions))}; {kind})."
        register(op_type, *versions)(quiet(kernel))


for _op, _fn2 in _ARITH.items():
    _binary(_op, _fn2)


def _power(base: Array, exponent: Array) -> Array:
    """Pow with the base's type as the result type (the exponent may be of another type)."""
    dtype = base.dtype
    if numerics.is_float(dtype):
        if exponent.size == 1 and exponent.ndim <= base.ndim and exponent.reshape(()) == 2:
            # x * x is RN(x**2), what a correctly rounded pow gives, in one multiplication
            return np.asarray(np.square(base))
        # RN(base ** exponent), the exponent at its own value (never first rounded to the base's type)
        return numerics.power(base, exponent)
    if numerics.is_float(exponent.dtype) or (exponent.dtype.kind == "i" and bool((exponent < 0).any())):
        # an integer base with a fractional or negative exponent: RN in float64, truncated
        with np.errstate(all="ignore"):
            return numerics.power(base.astype(np.float64), exponent.astype(np.float64)).astype(dtype)
    return np.asarray(np.power(base, exponent)).astype(dtype, copy=False)


@register("Pow", 1)
@quiet
def pow_legacy(a: Array, b: Array, *, axis: int | None = None, broadcast: int = 0) -> Array:
    """ONNX Pow 1 (legacy broadcast attributes)."""
    return _power(a, legacy_operand(b, a.ndim, broadcast, axis))


@register("Pow", 7, 12, 13, 15)
@quiet
def pow_op(a: Array, b: Array) -> Array:
    """ONNX Pow 7, 12, 13, 15 (NumPy broadcast; from 12 the exponent may have its own type)."""
    return _power(a, b)


@specializes(pow_op)
def _pow_constant_exponent(inputs: tuple[Any, ...], attributes: Any) -> KernelFn | None:
    """x ** 2 with a constant exponent (a power spectrum's square): _power's own x*x, without
    looking at the exponent on every run. Other exponents and dtypes run the kernel."""
    exponent = inputs[1]
    if exponent is VARIES or exponent.size != 1 or exponent.ndim > 0:
        return None
    if exponent.dtype.kind not in "iuf" and not numerics.is_float(exponent.dtype):
        return None
    if float(exponent.reshape(())) != 2:
        return None

    def square(base: Array, _exponent: Array) -> Array:
        if not numerics.is_float(base.dtype):
            return _power(base, exponent)
        out = np.square(base)
        return out if type(out) is np.ndarray else np.asarray(out)

    return square


@register("Mod", 10, 13, 28)
@quiet
def mod(a: Array, b: Array, *, fmod: int = 0) -> Array:
    """ONNX Mod 10, 13, 28: fmod=0 floors (sign of B), fmod=1 truncates (sign of A)."""
    # np.remainder implements A - floor(A/B)*B including the signed-zero/inf cases of Mod-28
    return np.asarray(np.fmod(a, b) if fmod else np.remainder(a, b))


# --------------------------------------------------------------------------------------------
# Variadic


def _fold(ufunc: np.ufunc, inputs: tuple[Array, ...]) -> Array:
    result = inputs[0]
    if len(inputs) == 1:
        return result
    result = np.asarray(ufunc(inputs[0], inputs[1]))
    for operand in inputs[2:]:
        if np.broadcast_shapes(result.shape, operand.shape) == result.shape and result.ndim:
            ufunc(result, operand, out=result)
        else:
            result = np.asarray(ufunc(result, operand))
    return result


def _variadic(op_type: str, ufunc: np.ufunc, versions: tuple[int, ...]) -> None:
    def kernel(*inputs: Array, consumed_inputs: tuple[int, ...] | None = None) -> Array:
        return _fold(ufunc, inputs)

    kernel.__name__ = kernel.__qualname__ = op_type.lower()
    kernel.__doc__ = f"ONNX {op_type} ({', '.join(map(str, versions))}; variadic, broadcasting from 8)."
    register(op_type, *versions)(quiet(kernel))


# maximum/minimum propagate NaN, as ONNX Runtime's Max/Min do
_variadic("Max", np.maximum, (1, 6, 8, 12, 13))
_variadic("Min", np.minimum, (1, 6, 8, 12, 13))
_variadic("Sum", np.add, (1, 6, 8, 13))


@register("Mean", 1, 6, 8, 13)
@quiet
def mean(*inputs: Array, consumed_inputs: tuple[int, ...] | None = None) -> Array:
    """ONNX Mean (1, 6, 8, 13): the sum divided by the number of inputs, in the input type."""
    total = _fold(np.add, inputs)
    if len(inputs) == 1:
        return total.copy()
    total /= total.dtype.type(len(inputs))
    return total


# --------------------------------------------------------------------------------------------
# Comparison and logic (outputs are bool)


def _compare(
    op_type: str, ufunc: np.ufunc, legacy_versions: tuple[int, ...], versions: tuple[int, ...]
) -> None:
    def legacy(a: Array, b: Array, *, axis: int | None = None, broadcast: int = 0) -> Array:
        return np.asarray(ufunc(a, legacy_operand(b, a.ndim, broadcast, axis)), dtype=bool)

    def modern(a: Array, b: Array) -> Array:
        return np.asarray(ufunc(a, b), dtype=bool)

    for kernel, vs in ((legacy, legacy_versions), (modern, versions)):
        if not vs:
            continue
        kernel.__name__ = kernel.__qualname__ = f"{op_type.lower()}_{'legacy' if kernel is legacy else 'v7'}"
        kernel.__doc__ = f"ONNX {op_type} ({', '.join(map(str, vs))})."
        register(op_type, *vs)(kernel)


_compare("Equal", np.equal, (1,), (7, 11, 13, 19))
_compare("Greater", np.greater, (1,), (7, 9, 13))
_compare("Less", np.less, (1,), (7, 9, 13))
_compare("GreaterOrEqual", np.greater_equal, (), (12, 16))
_compare("LessOrEqual", np.less_equal, (), (12, 16))
_compare("And", np.logical_and, (1,), (7,))
_compare("Or", np.logical_or, (1,), (7,))
_compare("Xor", np.logical_xor, (1,), (7,))


@register("BitwiseAnd", 18)
def bitwise_and(a: Array, b: Array) -> Array:
    """ONNX BitwiseAnd 18."""
    return np.asarray(np.bitwise_and(a, b))


@register("BitwiseOr", 18)
def bitwise_or(a: Array, b: Array) -> Array:
    """ONNX BitwiseOr 18."""
    return np.asarray(np.bitwise_or(a, b))


@register("BitwiseXor", 18)
def bitwise_xor(a: Array, b: Array) -> Array:
    """ONNX BitwiseXor 18."""
    return np.asarray(np.bitwise_xor(a, b))


@register("BitShift", 11, 28)
def bitshift(x: Array, y: Array, *, direction: str | None = None) -> Array:
    """ONNX BitShift 11, 28 (signed types from 28: arithmetic right shift)."""
    # NumPy's shifts give 0 (or -1 for a negative value shifted right) for shift amounts that
    # are negative or >= the bit width, which is the rule BitShift-28 spells out.
    if direction == "LEFT":
        return np.asarray(np.left_shift(x, y))
    if direction == "RIGHT":
        return np.asarray(np.right_shift(x, y))
    raise ValueError(f"BitShift direction must be 'LEFT' or 'RIGHT', got {direction!r}")


@register("Where", 9, 16)
def where(condition: Array, x: Array, y: Array) -> Array:
    """ONNX Where (9, 16)."""
    return np.asarray(np.where(condition, x, y))


# --------------------------------------------------------------------------------------------
# Clip


def _clip(x: Array, low: Any, high: Any) -> Array:
    if low is None and high is None:
        return x
    # np.clip is max-then-min: NaN propagates and min > max gives max everywhere, as the spec
    # asks; NumPy scalars (not 0-d arrays) as bounds take its fast SIMD loop
    low = None if low is None else np.asarray(low).reshape(())[()]
    high = None if high is None else np.asarray(high).reshape(())[()]
    if x.dtype.kind == "V":  # ml_dtypes (bfloat16) has no clip loop of its own
        out = x if low is None else np.maximum(x, low)
        return np.asarray(out if high is None else np.minimum(out, high))
    return np.asarray(np.clip(x, low, high))


def _bound(value: float | None, dtype: np.dtype[Any], default: float) -> Any:
    if value is None or value == default:
        return None
    with np.errstate(over="ignore"):
        return np.asarray(value, dtype=np.float64).astype(dtype)


_FLT_MAX = float(np.finfo(np.float32).max)


@register("Clip", 1, 6)
def clip_legacy(
    x: Array,
    *,
    min: float | None = None,
    max: float | None = None,
    consumed_inputs: tuple[int, ...] | None = None,
) -> Array:
    """ONNX Clip 1 and 6 (bounds are attributes; absent or +-FLT_MAX means unbounded)."""
    return _clip(x, _bound(min, x.dtype, -_FLT_MAX), _bound(max, x.dtype, _FLT_MAX))


@register("Clip", 11, 12, 13)
def clip(x: Array, low: Array | None = None, high: Array | None = None) -> Array:
    """ONNX Clip 11, 12, 13 (bounds are optional scalar inputs)."""
    return _clip(x, low, high)
