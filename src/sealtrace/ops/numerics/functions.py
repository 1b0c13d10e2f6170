"""Elementwise functions, each correctly rounded: RN(f(x)) in the input's format (docs/numerics.md,
"Functions").

The fast path evaluates f in float64: NumPy's float64 functions (libm's or NumPy's own SIMD code,
whichever the host has), fdlibm's erf, or a short formula of them for the composites (sigmoid,
softplus). Each is taken to be within 2**-40 of f(x) relative, a bound 4096 times the error of any
libm NumPy is built with (they are within a few float64 ulps). Ziv's test then rounds, and the rare
elements near a rounding boundary, about one in 30,000, are computed by MPFR: its own function,
correctly rounded by construction, or the composite formula at 96 bits and more until the rounding is
decided. float64 inputs have no wider type to approximate in: every element goes to MPFR.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gmpy2
import numpy as np

from sealtrace.ops.numerics.erf import erf64
from sealtrace.ops.numerics.formats import FLOAT32, FLOAT64, FloatFormat, format_of
from sealtrace.ops.numerics.mode import is_native
from sealtrace.ops.numerics.settle import settle

Array = np.ndarray[Any, Any]

# The relative error allowed to every float64 fast path (see the module's docstring).
RELATIVE_BOUND = 2.0**-40
# Precisions (bits) at which a composite is evaluated by MPFR until its rounding is decided.
_ZIV_PRECISIONS = (96, 192, 384, 1536)


@dataclass(frozen=True)
class Function:
    """One elementwise function: its float64 fast path, its MPFR definition, its native form."""

    name: str
    approximate: Callable[[Array], Array]
    exact: Callable[[Any], Any]
    # Whether ``exact`` is one MPFR function, correctly rounded in the current context; otherwise it
    # is a formula evaluated at rising precisions until the rounding is decided.
    single: bool
    native: Callable[[Array], Array]


def _sigmoid64(x: Array) -> Array:
    return 1.0 / (1.0 + np.exp(-x))


def _sigmoid_exact(v: Any) -> Any:
    return 1 / (1 + gmpy2.exp(-v))


def _softplus64(x: Array) -> Array:
    # x + log1p(exp(-x)) for x > 0: two positive terms, no overflow, no cancellation
    return np.where(x > 0, x + np.log1p(np.exp(-np.abs(x))), np.log1p(np.exp(np.minimum(x, 0.0))))


def _softplus_exact(v: Any) -> Any:
    if v > 0:
        return v + gmpy2.log1p(gmpy2.exp(-v))
    return gmpy2.log1p(gmpy2.exp(v))


def _native_sigmoid(x: Array) -> Array:
    out = np.negative(x)
    np.exp(out, out=out)
    out += out.dtype.type(1)
    return np.divide(out.dtype.type(1), out, out=out)


def _native_softplus(x: Array) -> Array:
    return np.logaddexp(x, x.dtype.type(0))


def _native_erf(x: Array) -> Array:
    return erf64(x.astype(np.float64)).astype(x.dtype)


FUNCTIONS: dict[str, Function] = {
    f.name: f
    for f in (
        Function("exp", np.exp, gmpy2.exp, True, np.exp),
        Function("log", np.log, gmpy2.log, True, np.log),
        Function("tanh", np.tanh, gmpy2.tanh, True, np.tanh),
        Function("sin", np.sin, gmpy2.sin, True, np.sin),
        Function("cos", np.cos, gmpy2.cos, True, np.cos),
        Function("tan", np.tan, gmpy2.tan, True, np.tan),
        Function("asin", np.arcsin, gmpy2.asin, True, np.arcsin),
        Function("acos", np.arccos, gmpy2.acos, True, np.arccos),
        Function("atan", np.arctan, gmpy2.atan, True, np.arctan),
        Function("sinh", np.sinh, gmpy2.sinh, True, np.sinh),
        Function("cosh", np.cosh, gmpy2.cosh, True, np.cosh),
        Function("asinh", np.arcsinh, gmpy2.asinh, True, np.arcsinh),
        Function("acosh", np.arccosh, gmpy2.acosh, True, np.arccosh),
        Function("atanh", np.arctanh, gmpy2.atanh, True, np.arctanh),
        Function("erf", erf64, gmpy2.erf, True, _native_erf),
        Function("sigmoid", _sigmoid64, _sigmoid_exact, False, _native_sigmoid),
        Function("softplus", _softplus64, _softplus_exact, False, _native_softplus),
    )
}


def _widened(x: Array) -> Array:
    """Native mode computes half-precision inputs in float32."""
    return x.astype(np.float32) if x.dtype != np.float64 and x.dtype != np.float32 else x


def apply(name: str, x: Array) -> Array:
    """``name`` (a key of FUNCTIONS) of float array ``x``: RN(f(x)) in x's format (portable), or
    NumPy's own function in x's type (native)."""
    function = FUNCTIONS[name]
    if is_native():
        wide = _widened(x)
        return np.asarray(function.native(wide)).astype(x.dtype, copy=False)
    fmt = _format(x)
    x64 = np.asarray(x, dtype=np.float64)
    flat = x64.reshape(-1)
    exact = _exact_of(function, fmt)
    if fmt is FLOAT64:
        return np.array([exact(v) for v in flat.tolist()], dtype=np.float64).reshape(x.shape)
    with np.errstate(all="ignore"):
        y = function.approximate(x64)
        err = np.abs(y) * RELATIVE_BOUND
    return settle(y, err, fmt, lambda index: [exact(v) for v in flat[index].tolist()])


def _format(x: Array) -> FloatFormat:
    fmt = format_of(x.dtype)
    if fmt is None:
        raise TypeError(f"portable functions take float16, bfloat16, float32 or float64, not {x.dtype}")
    return fmt


def _exact_of(function: Function, fmt: FloatFormat) -> Callable[[float], float]:
    """The MPFR evaluation of ``function`` at one float, rounded into ``fmt``."""
    if function.single:

        def single(v: float) -> float:
            argument = gmpy2.mpfr(v, 53)  # exact: made outside the narrow context
            with fmt.context:
                return float(function.exact(argument))

        return single

    def composite(v: float) -> float:
        if math.isnan(v):
            return math.nan
        return ziv(function.exact, gmpy2.mpfr(v, 53), fmt=fmt)

    return composite


def ziv(evaluate: Callable[..., Any], *arguments: Any, fmt: FloatFormat = FLOAT32) -> float:
    """RN(f(arguments)) in ``fmt`` for a formula ``evaluate`` of MPFR operations: evaluated at
    rising precisions, each time with a margin of 2**(8 - precision) relative (far above the error
    of a handful of correctly rounded operations), until both ends of the margin round alike."""
    value: Any = None
    for precision in _ZIV_PRECISIONS:
        with gmpy2.context(precision=precision):
            value = evaluate(*arguments)
            if not gmpy2.is_finite(value):
                break
            slack = abs(value) * gmpy2.mpfr(2) ** (8 - precision)
        with fmt.context:
            low = float(value - slack)
            high = float(value + slack)
        if low == high and math.copysign(1.0, low) == math.copysign(1.0, high):
            return low
    with fmt.context:
        return float(+value)


def power(base: Array, exponent: Array) -> Array:
    """Pow: RN(base ** exponent) in the base's format, IEEE 754's pow for the special cases (an
    exponent of another type is taken at its own value, never first rounded to the base's type)."""
    if is_native():
        wide = _widened(base)
        work = exponent.dtype if exponent.dtype.kind == "f" and exponent.dtype.itemsize > wide.dtype.itemsize else wide.dtype
        return np.asarray(np.power(wide.astype(work, copy=False), exponent.astype(work, copy=False))).astype(base.dtype)
    fmt = _format(base)
    b64, e64 = np.broadcast_arrays(np.asarray(base, dtype=np.float64), np.asarray(exponent, dtype=np.float64))
    b_flat = b64.reshape(-1)
    exponent_flat = np.broadcast_to(exponent, b64.shape).reshape(-1)

    def exact_at(i: int) -> float:
        e = exponent_flat[i]
        power_of = gmpy2.mpz(int(e)) if exponent.dtype.kind in "iu" else gmpy2.mpfr(float(e), 53)
        base_of = gmpy2.mpfr(float(b_flat[i]), 53)
        with fmt.context:
            return float(base_of**power_of)

    if fmt is FLOAT64:
        return np.array([exact_at(i) for i in range(b_flat.size)], dtype=np.float64).reshape(b64.shape)
    with np.errstate(all="ignore"):
        y = np.power(b64, e64)
        err = np.abs(y) * RELATIVE_BOUND
    return settle(y, err, fmt, lambda index: [exact_at(int(i)) for i in index])
