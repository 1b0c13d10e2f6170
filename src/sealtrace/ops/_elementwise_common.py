"""Shared pieces of the elementwise, activation and cast kernels.

Opset < 7 binary operators broadcast with ``broadcast``/``axis`` attributes instead of NumPy
rules; ``legacy_operand`` turns such a B into one NumPy broadcasts correctly. ``erf`` is a
vectorized error function (NumPy has none). ``compute_dtype`` says in which float type a
multi-step formula is evaluated: half-precision inputs are widened to float32 once and rounded
once at the end, so intermediate results are not rounded to 8 or 11 bits at every step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sealtrace.ops.registry import quiet as quiet  # re-exported: the kernels' historic import path

try:  # ml_dtypes ships with onnx; bfloat16 and the float8 types live there.
    import ml_dtypes

    BFLOAT16: np.dtype[Any] | None = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - onnx always installs it
    BFLOAT16 = None

_HALF_KINDS = {np.dtype(np.float16)}
if BFLOAT16 is not None:
    _HALF_KINDS.add(BFLOAT16)


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


def is_float(dtype: np.dtype[Any]) -> bool:
    """True for IEEE-like floats, including ml_dtypes' bfloat16."""
    return dtype.kind == "f" or dtype == BFLOAT16


def compute_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype a multi-step float formula is evaluated in for inputs of ``dtype``."""
    return np.dtype(np.float32) if dtype in _HALF_KINDS else dtype


def widen(x: np.ndarray) -> np.ndarray:
    """``x`` in its compute dtype (a new float32 array for half-precision inputs, else ``x``)."""
    wide = compute_dtype(x.dtype)
    return x if wide == x.dtype else x.astype(wide)


def narrow(y: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """``y`` rounded once to ``dtype`` (no copy when it already is)."""
    return y if y.dtype == dtype else y.astype(dtype)


# Error function: the rational approximations of Sun's fdlibm s_erf.c (accurate to < 1 ulp in
# float64), evaluated piecewise on the elements of each interval only.
_ERX = 8.45062911510467529297e-01
_PP = (
    1.28379167095512558561e-01,
    -3.25042107247001499370e-01,
    -2.84817495755985104766e-02,
    -5.77027029648944159157e-03,
    -2.37630166566501626084e-05,
)
_QQ = (
    1.0,
    3.97917223959155352819e-01,
    6.50222499887672944485e-02,
    5.08130628187576562776e-03,
    1.32494738004321644526e-04,
    -3.96022827877536812320e-06,
)
_PA = (
    -2.36211856075265944077e-03,
    4.14856118683748331666e-01,
    -3.72207876035701323847e-01,
    3.18346619901161753674e-01,
    -1.10894694282396677476e-01,
    3.54783043256182359371e-02,
    -2.16637559486879084300e-03,
)
_QA = (
    1.0,
    1.06420880400844228286e-01,
    5.40397917702171048937e-01,
    7.18286544141962662868e-02,
    1.26171219808761642112e-01,
    1.36370839120290507362e-02,
    1.19844998467991074170e-02,
)
_RA = (
    -9.86494403484714822705e-03,
    -6.93858572707181764372e-01,
    -1.05586262253232909814e01,
    -6.23753324503260060396e01,
    -1.62396669462573470355e02,
    -1.84605092906711035994e02,
    -8.12874355063065934246e01,
    -9.81432934416914548592e00,
)
_SA = (
    1.0,
    1.96512716674392571292e01,
    1.37657754143519042600e02,
    4.34565877475229228821e02,
    6.45387271733267880336e02,
    4.29008140027567833386e02,
    1.08635005541779435134e02,
    6.57024977031928170135e00,
    -6.04244152148580987438e-02,
)
_RB = (
    -9.86494292470009928597e-03,
    -7.99283237680523006574e-01,
    -1.77579549177547519889e01,
    -1.60636384855821916062e02,
    -6.37566443368389627722e02,
    -1.02509513161107724954e03,
    -4.83519191608651397019e02,
)
_SB = (
    1.0,
    3.03380607434824582924e01,
    3.25792512996573918826e02,
    1.53672958608443695994e03,
    3.19985821950859553908e03,
    2.55305040643316442583e03,
    4.74528541206955367215e02,
    -2.24409524465858183362e01,
)


def _poly(z: np.ndarray, coefficients: tuple[float, ...]) -> np.ndarray:
    """Horner evaluation of c0 + c1*z + c2*z**2 + ... ."""
    acc = np.full_like(z, coefficients[-1])
    for c in coefficients[-2::-1]:
        acc *= z
        acc += c
    return acc


# A branch-free rational approximation x * P(x^2) / Q(x^2) on [-4, 4] (the coefficients of
# Eigen's float erf), evaluated in float64: within 2 ulp of the correctly rounded float32 result
# and 5-10x faster than the piecewise fdlibm evaluation, whose masked gathers dominate its cost.
_ALPHA = (
    -1.60960333262415e-02,
    -2.95459980854025e-03,
    -7.34990630326855e-04,
    -5.69250639462346e-05,
    -2.10102402082508e-06,
    2.77068142495902e-08,
    -2.72614225801306e-10,
)
_BETA = (
    -1.42647390514189e-02,
    -7.37332916720468e-03,
    -1.68282697438203e-03,
    -2.13374055278905e-04,
    -1.45660718464996e-05,
)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function of ``x`` in x's float dtype.

    float64 inputs get fdlibm's piecewise evaluation (< 1 ulp); narrower floats the branch-free
    rational approximation evaluated in float64 (< 2 ulp of float32), which is far faster.
    """
    if x.dtype == np.float64:
        return _erf_fdlibm(x)
    if x.size > _ERF_BLOCK:
        # Block by block: the two dozen float64 passes then run on temporaries that stay in the
        # core's cache (2.5x faster from about 40 thousand elements; the same values).
        out = np.empty(x.shape, dtype=x.dtype)
        flat, flat_out = x.reshape(-1), out.reshape(-1)
        for start in range(0, flat.size, _ERF_BLOCK):
            flat_out[start : start + _ERF_BLOCK] = _erf_rational(flat[start : start + _ERF_BLOCK])
        return out
    return _erf_rational(x)


# Elements per block of erf: 128 KiB per float64 temporary.
_ERF_BLOCK = 16384


def _erf_rational(x: np.ndarray) -> np.ndarray:
    v = np.clip(np.asarray(x, dtype=np.float64), -4.0, 4.0)  # erf(4) rounds to 1 in float32
    z = np.asarray(v * v)
    numerator = _poly(z, _ALPHA)
    numerator *= v
    numerator /= _poly(z, _BETA)
    return numerator.astype(x.dtype)


# erfc(z) = t * exp(-z*z + P(t)), t = 1 / (1 + z/2), z >= 0: the Chebyshev fit of Numerical
# Recipes (erfcc), relative error < 1.2e-7 over the whole range, tails included.
_ERFC = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)


def normal_cdf(x: np.ndarray) -> np.ndarray:
    """Phi(x) = erfc(-x / sqrt 2) / 2 in float64, relative error < 1.2e-7 even deep in the left tail.

    Unlike (1 + erf(x / sqrt 2)) / 2 it does not cancel for x << 0, so x * Phi(x) (Gelu) keeps
    its relative accuracy where the result is tiny.
    """
    v = np.asarray(x, dtype=np.float64)
    z = np.abs(v) * (1.0 / np.sqrt(2.0))
    t = z * 0.5
    t += 1.0
    np.reciprocal(t, out=t)
    exponent = _poly(t, _ERFC)
    exponent -= z * z
    tail = np.exp(exponent)
    tail *= t  # erfc(|x| / sqrt 2)
    tail *= 0.5
    # the right half is 1 - (left tail), which cannot cancel below 1/2
    return np.asarray(np.where(v >= 0, 1.0 - tail, tail))


def _erf_fdlibm(x: np.ndarray) -> np.ndarray:
    """erf in float64 with the piecewise rational approximations of fdlibm."""
    v = np.asarray(x, dtype=np.float64).reshape(-1)
    # beyond 6, 1 - erfc(6) rounds to 1.0 in float64: clamping folds that range into the tail
    a = np.minimum(np.abs(v), 6.0)
    out = np.empty_like(v)
    small = a < 0.84375
    mid = a < 1.25
    mid &= ~small
    tail = ~(small | mid)  # NaN lands here and stays NaN
    s = v[small]
    z = s * s
    out[small] = s + s * (_poly(z, _PP) / _poly(z, _QQ))
    s = a[mid] - 1.0
    out[mid] = _ERX + _poly(s, _PA) / _poly(s, _QA)
    t = a[tail]
    if t.size:
        s = 1.0 / (t * t)
        near = t < 1.0 / 0.35
        ratio = np.where(near, _poly(s, _RA) / _poly(s, _SA), _poly(s, _RB) / _poly(s, _SB))
        # fdlibm splits t into a 32-bit-mantissa head so exp(-t*t) keeps its accuracy
        head = (t.view(np.uint64) & np.uint64(0xFFFFFFFF00000000)).view(np.float64)
        r = np.exp(-head * head - 0.5625)
        r *= np.exp((head - t) * (head + t) + ratio)
        r /= t
        out[tail] = 1.0 - r
    # erf is odd: the mid and tail branches computed erf(|x|)
    np.copysign(out, v, out=out)
    return out.reshape(x.shape)
