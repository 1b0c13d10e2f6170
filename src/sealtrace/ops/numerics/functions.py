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

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gmpy2
import numpy as np

from sealtrace.ops.numerics.erf import erf64, erfc64
from sealtrace.ops.numerics.formats import FLOAT32, FLOAT64, FloatFormat, format_of
from sealtrace.ops.numerics.mode import is_native
from sealtrace.ops.numerics.settle import BLOCK, Counts, settle

Array = np.ndarray[Any, Any]

# The relative error allowed to every float64 fast path (see the module's docstring).
RELATIVE_BOUND = 2.0**-40
# Precisions (bits) at which a composite is evaluated by MPFR until its rounding is decided.
_ZIV_PRECISIONS = (128, 256, 512, 2048)


@dataclass(frozen=True)
class Function:
    """One elementwise function of x and its constant parameters (attribute values, taken at their
    own value): its float64 fast path, its MPFR definition, its native form."""

    name: str
    approximate: Callable[..., Array]
    exact: Callable[..., Any]
    # Whether ``exact`` is one MPFR function, correctly rounded in the current context; otherwise it
    # is a formula evaluated at rising precisions until the rounding is decided.
    single: bool
    native: Callable[..., Array]
    # The relative error bound of ``approximate`` at (x, y, *parameters), where it exceeds
    # RELATIVE_BOUND (a formula whose inner argument is itself rounded); None: RELATIVE_BOUND.
    bound: Callable[..., Array] | None = None


def _sigmoid64(x: Array) -> Array:
    y = np.negative(x)
    np.exp(y, out=y)
    y += 1.0
    return np.divide(1.0, y, out=y)


def _sigmoid_exact(v: Any) -> Any:
    return 1 / (1 + gmpy2.exp(-v))


def _softplus64(x: Array) -> Array:
    # x + log1p(exp(-x)) for x > 0: two positive terms, no overflow, no cancellation
    return np.where(x > 0, x + np.log1p(np.exp(-np.abs(x))), np.log1p(np.exp(np.minimum(x, 0.0))))


def _softplus_exact(v: Any) -> Any:
    if v > 0:
        return v + gmpy2.log1p(gmpy2.exp(-v))
    return gmpy2.log1p(gmpy2.exp(v))


def _elu64(x: Array, alpha: float) -> Array:
    return np.where(x < 0, alpha * np.expm1(x), x)


def _elu_exact(v: Any, alpha: float) -> Any:
    return gmpy2.mpfr(alpha, 53) * gmpy2.expm1(v) if v < 0 else +v


def _selu64(x: Array, alpha: float, gamma: float) -> Array:
    return np.where(x > 0, gamma * x, (gamma * alpha) * np.expm1(x))


def _selu_exact(v: Any, alpha: float, gamma: float) -> Any:
    g = gmpy2.mpfr(gamma, 53)
    return g * v if v > 0 else g * gmpy2.mpfr(alpha, 53) * gmpy2.expm1(v)


def _celu64(x: Array, alpha: float) -> Array:
    return np.where(x >= 0, x, alpha * np.expm1(x / alpha))


def _celu_exact(v: Any, alpha: float) -> Any:
    a = gmpy2.mpfr(alpha, 53)
    return +v if v >= 0 else a * gmpy2.expm1(v / a)


_SQRT_HALF = math.sqrt(0.5)


def _gelu64(x: Array) -> Array:
    return 0.5 * x * erfc64(-_SQRT_HALF * x)


def _gelu_bound(x: Array, y: Array) -> Array:
    # erfc(z) moves by about 2 z dz relative when its argument z = -x / sqrt 2 > 0 is rounded (for
    # x < 0); for x > 0 erfc(z) is near 2 and does not move
    return RELATIVE_BOUND + np.where(x < 0, x * x, 0.0) * 2.0**-50


def _gelu_exact(v: Any) -> Any:
    return v * gmpy2.erfc(-v / gmpy2.sqrt(2)) / 2


_GELU_CUBIC = 0.044715
_SQRT_TWO_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu_tanh_argument(x: Array) -> Array:
    """2 u = 2 sqrt(2/pi) (x + 0.044715 x**3): 0.5 (1 + tanh u) = sigmoid(2 u), without the
    cancellation of 1 + tanh u for x << 0."""
    return (2.0 * _SQRT_TWO_OVER_PI) * (x + _GELU_CUBIC * (x * x * x))


def _gelu_tanh64(x: Array) -> Array:
    return x / (1.0 + np.exp(-_gelu_tanh_argument(x)))


def _gelu_tanh_bound(x: Array, y: Array) -> Array:
    # sigmoid(v) moves by at most |dv| relative; v carries a few roundings of itself
    return RELATIVE_BOUND + np.abs(_gelu_tanh_argument(x)) * 2.0**-49


def _gelu_tanh_exact(v: Any) -> Any:
    inner = v + gmpy2.mpfr("0.044715") * v**3
    return v / (1 + gmpy2.exp(-2 * gmpy2.sqrt(2 / gmpy2.const_pi()) * inner))


def _mish64(x: Array) -> Array:
    return x * np.tanh(_softplus64(x))


def _mish_exact(v: Any) -> Any:
    return v * gmpy2.tanh(_softplus_exact(v))


def _swish64(x: Array, alpha: float) -> Array:
    return x / (1.0 + np.exp(-(alpha * x)))


def _swish_bound(x: Array, y: Array, alpha: float) -> Array:
    return RELATIVE_BOUND + np.abs(alpha * x) * 2.0**-50


def _swish_exact(v: Any, alpha: float) -> Any:
    return v / (1 + gmpy2.exp(-gmpy2.mpfr(alpha, 53) * v))


def _native_sigmoid(x: Array) -> Array:
    out = np.negative(x)
    np.exp(out, out=out)
    out += out.dtype.type(1)
    return np.divide(out.dtype.type(1), out, out=out)


def _native_softplus(x: Array) -> Array:
    return np.logaddexp(x, x.dtype.type(0))


def _native_via_float64(approximate: Callable[..., Array]) -> Callable[..., Array]:
    """Native form of a function with no NumPy ufunc: the fast path, rounded once (not portable:
    it carries the host's float64 exp and friends)."""

    def native(x: Array, *parameters: float) -> Array:
        return np.asarray(approximate(x.astype(np.float64), *parameters)).astype(x.dtype)

    return native


def _function(name: str, approximate: Callable[..., Array], exact: Callable[..., Any], single: bool,
              native: Callable[..., Array] | None = None, bound: Callable[..., Array] | None = None) -> Function:
    return Function(name, approximate, exact, single, native or _native_via_float64(approximate), bound)


FUNCTIONS: dict[str, Function] = {
    f.name: f
    for f in (
        _function("exp", np.exp, gmpy2.exp, True, np.exp),
        _function("log", np.log, gmpy2.log, True, np.log),
        _function("log10", np.log10, gmpy2.log10, True, np.log10),
        _function("tanh", np.tanh, gmpy2.tanh, True, np.tanh),
        _function("sin", np.sin, gmpy2.sin, True, np.sin),
        _function("cos", np.cos, gmpy2.cos, True, np.cos),
        _function("tan", np.tan, gmpy2.tan, True, np.tan),
        _function("asin", np.arcsin, gmpy2.asin, True, np.arcsin),
        _function("acos", np.arccos, gmpy2.acos, True, np.arccos),
        _function("atan", np.arctan, gmpy2.atan, True, np.arctan),
        _function("sinh", np.sinh, gmpy2.sinh, True, np.sinh),
        _function("cosh", np.cosh, gmpy2.cosh, True, np.cosh),
        _function("asinh", np.arcsinh, gmpy2.asinh, True, np.arcsinh),
        _function("acosh", np.arccosh, gmpy2.acosh, True, np.arccosh),
        _function("atanh", np.arctanh, gmpy2.atanh, True, np.arctanh),
        _function("erf", erf64, gmpy2.erf, True),
        _function("sigmoid", _sigmoid64, _sigmoid_exact, False, _native_sigmoid),
        _function("softplus", _softplus64, _softplus_exact, False, _native_softplus),
        _function("elu", _elu64, _elu_exact, False),
        _function("selu", _selu64, _selu_exact, False),
        _function("celu", _celu64, _celu_exact, False),
        _function("gelu", _gelu64, _gelu_exact, False, bound=_gelu_bound),
        _function("gelu_tanh", _gelu_tanh64, _gelu_tanh_exact, False, bound=_gelu_tanh_bound),
        _function("mish", _mish64, _mish_exact, False),
        _function("swish", _swish64, _swish_exact, False, bound=_swish_bound),
    )
}


def _widened(x: Array) -> Array:
    """Native mode computes half-precision inputs in float32."""
    return x.astype(np.float32) if x.dtype != np.float64 and x.dtype != np.float32 else x


def apply(name: str, x: Array, *parameters: float) -> Array:
    """``name`` (a key of FUNCTIONS) of float array ``x`` and the function's constant
    ``parameters``: RN(f(x)) in x's format (portable), or the host's evaluation (native)."""
    function = FUNCTIONS[name]
    if is_native():
        wide = _widened(x)
        return np.asarray(function.native(wide, *parameters)).astype(x.dtype, copy=False)
    fmt = _format(x)
    exact = _exact_of(function, fmt, parameters)
    if fmt is FLOAT64:
        flat = np.asarray(x, dtype=np.float64).reshape(-1)
        return np.array([exact(v) for v in flat.tolist()], dtype=np.float64).reshape(x.shape)
    if x.size <= BLOCK:
        return _apply_block(function, np.asarray(x, dtype=np.float64), fmt, exact, parameters)
    # A block at a time: the float64 evaluation and its rounding test stay in a core's cache.
    flat_in = x.reshape(-1)
    out = np.empty(x.size, dtype=fmt.dtype)
    for start in range(0, x.size, BLOCK):
        block = np.asarray(flat_in[start : start + BLOCK], dtype=np.float64)
        out[start : start + BLOCK] = _apply_block(function, block, fmt, exact, parameters)
    return out.reshape(x.shape)


def _apply_block(
    function: Function, x64: Array, fmt: FloatFormat, exact: Callable[[float], float], parameters: tuple[float, ...]
) -> Array:
    with np.errstate(all="ignore"):
        y = function.approximate(x64, *parameters)
        relative = RELATIVE_BOUND if function.bound is None else function.bound(x64, y, *parameters)
    flat = x64.reshape(-1)
    return settle(y, relative, fmt, lambda index: [exact(v) for v in flat[index].tolist()], relative=True)


def _format(x: Array) -> FloatFormat:
    fmt = format_of(x.dtype)
    if fmt is None:
        raise TypeError(f"portable functions take float16, bfloat16, float32 or float64, not {x.dtype}")
    return fmt


def _exact_of(function: Function, fmt: FloatFormat, parameters: tuple[float, ...]) -> Callable[[float], float]:
    """The MPFR evaluation of ``function`` at one float, rounded into ``fmt``."""
    if function.single:

        def single(v: float) -> float:
            Counts.mpfr += 1
            argument = gmpy2.mpfr(v, 53)  # exact: made outside the narrow context
            with fmt.context:
                return float(function.exact(argument, *parameters))

        return single

    def composite(v: float) -> float:
        Counts.mpfr += 1
        if math.isnan(v):
            return math.nan
        return ziv(function.exact, gmpy2.mpfr(v, 53), *parameters, fmt=fmt)

    return composite


def ziv(evaluate: Callable[..., Any], *arguments: Any, fmt: FloatFormat = FLOAT32) -> float:
    """RN(f(arguments)) in ``fmt`` for a formula ``evaluate`` of MPFR operations: evaluated at
    rising precisions, each time with a margin of 2**(32 - precision) relative, until both ends of
    the margin round alike. The margin covers a handful of correctly rounded operations whose
    rounding errors are amplified up to 2**30 times (exp of an argument near MPFR's overflow)."""
    value: Any = None
    for precision in _ZIV_PRECISIONS:
        with gmpy2.context(precision=precision):
            value = evaluate(*arguments)
            if not gmpy2.is_finite(value):
                break
            slack = abs(value) * gmpy2.mpfr(2) ** (32 - precision)
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
        # A copy, not the broadcast view: NumPy takes a stride-0 exponent of 0.5 as sqrt, whose
        # sqrt(-0) = -0 and sqrt(-inf) = NaN are not IEEE pow's +0 and +inf.
        y = np.power(b64, np.array(e64))
    return settle(y, RELATIVE_BOUND, fmt, lambda index: [exact_at(int(i)) for i in index], relative=True)


def _cos_quarter(t: int, n: int) -> Any:
    return gmpy2.cos(gmpy2.const_pi() * t / (2 * n))


def _sin_quarter(t: int, n: int) -> Any:
    return gmpy2.sin(gmpy2.const_pi() * t / (2 * n))


@functools.lru_cache(maxsize=64)
def unit_circle(n: int, fmt: FloatFormat) -> tuple[Array, Array]:
    """(RN(cos(2 pi m / n)), RN(sin(2 pi m / n))) for m in [0, n), correctly rounded into ``fmt``:
    the twiddle factors of a DFT of length n (read-only; cached per length and format).

    In exact integers, m = (n / 4)(q + r / n) with q the quadrant, and the angle within it folds to
    pi t / (2 n) with t <= n / 2 (an angle of at most pi / 4, where cos >= 0.7 and sin vanishes only
    at t = 0, exactly): MPFR evaluates those at rising precisions until the rounding is decided
    (``ziv``), and the quadrant's symmetries (negations, exact) give the rest.
    """
    half = n // 2
    base_cos = np.array([1.0] + [ziv(_cos_quarter, t, n, fmt=fmt) for t in range(1, half + 1)])
    base_sin = np.array([0.0] + [ziv(_sin_quarter, t, n, fmt=fmt) for t in range(1, half + 1)])
    m = np.arange(n, dtype=np.int64)
    quadrant, r = np.divmod(4 * m, n)
    folded = 2 * r > n  # pi r / (2 n) = pi / 2 - pi (n - r) / (2 n)
    t = np.where(folded, n - r, r)
    cos_phi = np.where(folded, base_sin[t], base_cos[t])
    sin_phi = np.where(folded, base_cos[t], base_sin[t])
    cos = (np.choose(quadrant, [cos_phi, -sin_phi, -cos_phi, sin_phi]) + 0.0).astype(fmt.dtype)  # + 0.0: no -0
    sin = (np.choose(quadrant, [sin_phi, cos_phi, -sin_phi, -cos_phi]) + 0.0).astype(fmt.dtype)
    cos.setflags(write=False)
    sin.setflags(write=False)
    return cos, sin
