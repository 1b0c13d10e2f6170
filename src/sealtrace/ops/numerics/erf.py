"""The error function in float64: fdlibm's s_erf.c, the fast path of the portable Erf.

Sun's fdlibm evaluates erf to within 1 ulp of float64 with piecewise rational approximations and
exp; the portable Erf takes that as an approximation with a bound of 2**-40 relative (see
functions.py), far above its real error, and rounds it correctly. Only IEEE operations and exp are
used, evaluated on the elements of each interval.
"""

from __future__ import annotations

import numpy as np

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


def _tail(t: np.ndarray) -> np.ndarray:
    """erfc(t) for t >= 1.25 (fdlibm's tail: exp(-t*t - 0.5625 + R/S) / t)."""
    s = 1.0 / (t * t)
    near = t < 1.0 / 0.35
    ratio = np.where(near, _poly(s, _RA) / _poly(s, _SA), _poly(s, _RB) / _poly(s, _SB))
    # fdlibm splits t into a 32-bit-mantissa head so exp(-t*t) keeps its accuracy
    head = (t.view(np.uint64) & np.uint64(0xFFFFFFFF00000000)).view(np.float64)
    r = np.exp(-head * head - 0.5625)
    r *= np.exp((head - t) * (head + t) + ratio)
    r /= t
    return r


def erf64(x: np.ndarray) -> np.ndarray:
    """erf of float64 ``x`` (any shape), within 1 ulp."""
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
        out[tail] = 1.0 - _tail(t)
    # erf is odd: the mid and tail branches computed erf(|x|)
    np.copysign(out, v, out=out)
    return out.reshape(x.shape)


def erfc64(x: np.ndarray) -> np.ndarray:
    """erfc of float64 ``x`` (any shape), within a few ulps relative, the right tail included
    (fdlibm's s_erf.c, erfc)."""
    v = np.asarray(x, dtype=np.float64).reshape(-1)
    # beyond 28, erfc underflows to 0 in float64 (and to 2 on the left)
    a = np.minimum(np.abs(v), 28.0)
    out = np.empty_like(v)
    small = a < 0.84375
    mid = a < 1.25
    mid &= ~small
    tail = ~(small | mid)
    s = v[small]
    z = s * s
    out[small] = 1.0 - (s + s * (_poly(z, _PP) / _poly(z, _QQ)))
    s = a[mid] - 1.0
    d = _poly(s, _PA) / _poly(s, _QA)
    out[mid] = np.where(v[mid] > 0, (1.0 - _ERX) - d, 1.0 + (_ERX + d))
    t = a[tail]
    if t.size:
        r = _tail(t)
        out[tail] = np.where(v[tail] > 0, r, 2.0 - r)
    out[np.isnan(v)] = np.nan
    return out.reshape(x.shape)
