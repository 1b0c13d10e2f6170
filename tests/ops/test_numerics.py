"""Portable numerics (docs/numerics.md): every primitive against an oracle that shares none of its code.

Sums, products, means and norms are checked against exact rational arithmetic (fractions) rounded
by a rounding written here from the definition; the elementwise functions against MPFR directly
(their definition; benchmarks/exhaustive_functions.py checks them against a separate C program over
every float32 input). The inputs aim at the hard places: cancellation, exact ties, subnormal and
overflowing results, signed zeros, non-finite values.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import gmpy2
import ml_dtypes
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from sealtrace.ops import numerics
from sealtrace.ops.numerics import BFLOAT16, FLOAT16, FLOAT32, FLOAT64, FloatFormat

RNG = np.random.default_rng(20261128)
FORMATS = [(np.float32, FLOAT32), (np.float16, FLOAT16), (ml_dtypes.bfloat16, BFLOAT16)]


def rn(q: Fraction, fmt: FloatFormat) -> float:
    """Round the rational ``q`` to nearest, ties to even, in ``fmt`` (overflow to infinity)."""
    if q == 0:
        return 0.0
    sign = -1.0 if q < 0 else 1.0
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    e = max(e, fmt.emin_normal)
    quantum = Fraction(2) ** (e - fmt.precision + 1)
    scaled = q / quantum
    n, rest = divmod(scaled.numerator, scaled.denominator)
    rest_fraction = Fraction(rest, scaled.denominator)
    if rest_fraction > Fraction(1, 2) or (rest_fraction == Fraction(1, 2) and n % 2 == 1):
        n += 1
    value = n * quantum
    if value > Fraction(fmt.largest):
        return sign * math.inf
    return sign * float(value)


def same_bits(got: Any, want: Any) -> bool:
    """Equal values with equal signs of zero; any NaN equals any NaN."""
    got, want = float(got), float(want)
    if math.isnan(got) or math.isnan(want):
        return math.isnan(got) and math.isnan(want)
    return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)


def exact(values: Any) -> list[Fraction]:
    return [Fraction(float(v)) for v in np.asarray(values, dtype=np.float64).reshape(-1)]


def assert_all(got: np.ndarray, want: list[float]) -> None:
    flat = got.astype(np.float64).reshape(-1).tolist()
    bad = [(i, g, w) for i, (g, w) in enumerate(zip(flat, want, strict=True)) if not same_bits(g, w)]
    assert not bad, f"{len(bad)} of {len(flat)} differ, first {bad[:3]}"


# ------------------------------------------------------------------------------------------------
# Rounding into a format


@pytest.mark.parametrize(("dtype", "fmt"), FORMATS, ids=lambda v: getattr(v, "name", ""))
def test_round_to_is_round_to_nearest_even_at_every_midpoint(dtype: Any, fmt: FloatFormat) -> None:
    # every value of the format next to its neighbour's midpoint, and a float64 step either side
    bits = RNG.integers(0, int(np.array(np.inf, dtype=dtype).view(fmt.bits)), 3000).astype(fmt.bits)
    values = bits.view(dtype).astype(np.float64)
    upper = np.nextafter(values.astype(dtype), np.array(np.inf, dtype=dtype)).astype(np.float64)
    midpoints = (values + upper) / 2  # exact in float64
    ys = np.concatenate([midpoints, np.nextafter(midpoints, 0), np.nextafter(midpoints, np.inf), -midpoints])
    ys = ys[np.isfinite(ys)]
    assert_all(numerics.round_to(ys, fmt), [rn(Fraction(y), fmt) for y in ys.tolist()])


def test_bfloat16_rounds_float64_once_where_ml_dtypes_rounds_twice() -> None:
    y = np.array([1 + 2**-8 + 2**-30])  # above bfloat16's midpoint, which float32 rounds it onto
    assert float(numerics.round_to(y, BFLOAT16)[0]) == 1 + 2**-7
    assert float(y.astype(ml_dtypes.bfloat16)[0]) == 1.0  # the double rounding avoided


# ------------------------------------------------------------------------------------------------
# Sums of products


def _matmul_oracle(a: np.ndarray, b: np.ndarray, fmt: FloatFormat, bias: np.ndarray | None = None) -> list[float]:
    rows = [exact(r) for r in a.astype(np.float64)]
    cols = [exact(c) for c in b.astype(np.float64).T]
    out = []
    for i, row in enumerate(rows):
        for col in cols:
            total = sum((x * w for x, w in zip(row, col, strict=True)), Fraction(0))
            if bias is not None:
                total += Fraction(float(bias[i]))
            out.append(rn(total, fmt))
    return out


def _cancelling(shape: tuple[int, int], dtype: Any) -> np.ndarray:
    """Values of many magnitudes whose products cancel: sums far smaller than their terms."""
    mantissa = RNG.standard_normal(shape)
    reach = 6 if np.dtype(dtype) == np.float16 else 20
    exponent = RNG.integers(-reach, reach, shape)
    return np.ldexp(mantissa, exponent).astype(dtype)


@pytest.mark.parametrize(("dtype", "fmt"), FORMATS, ids=lambda v: getattr(v, "name", ""))
def test_matmul_is_correctly_rounded(dtype: Any, fmt: FloatFormat) -> None:
    a = RNG.standard_normal((9, 70)).astype(dtype)
    b = RNG.standard_normal((70, 11)).astype(dtype)
    assert_all(numerics.matmul(a, b), _matmul_oracle(a, b, fmt))
    a, b = _cancelling((7, 40), dtype), _cancelling((40, 6), dtype)
    b[:, 0] = -b[:, 1]  # columns 0 and 1 make opposite sums
    assert_all(numerics.matmul(a, b), _matmul_oracle(a, b, fmt))


def test_matmul_exact_ties_round_to_even() -> None:
    # integer products whose sums are odd numbers above 2**24: exactly halfway between two float32
    a = RNG.integers(-64, 64, (6, 300)).astype(np.float32)
    b = (RNG.integers(-64, 64, (300, 5)) * 2.0**9).astype(np.float32)
    got = numerics.matmul(a, b)
    assert_all(got, _matmul_oracle(a, b, FLOAT32))


def test_a_near_tie_whose_float64_sum_lands_on_the_midpoint() -> None:
    # 2**24 + 1 + 2**-60: float64 rounds it onto float32's midpoint 2**24 + 1 (the 2**-60 is below
    # its ulp), where ties go to even, 2**24; the exact value lies above: 2**24 + 2
    a = np.array([[2.0**24, 1.0, 2.0**-30]], np.float32)
    b = np.array([[1.0], [1.0], [2.0**-30]], np.float32)
    assert float(numerics.matmul(a, b)[0, 0]) == 2.0**24 + 2
    x = np.array([[2.0**24, 1.0, 2.0**-60]], np.float32)
    assert float(numerics.reduce_sum(x, (1,))[0, 0]) == 2.0**24 + 2


def test_matmul_subnormal_overflowing_and_signed_zero_results() -> None:
    tiny = np.array([[2.0**-75, -(2.0**-75)], [2.0**-80, 2.0**-80], [0.0, -0.0]], np.float32)
    b = np.array([[2.0**-75, 2.0**-76], [2.0**-75, 2.0**-75]], np.float32)
    assert_all(numerics.matmul(tiny, b), _matmul_oracle(tiny, b, FLOAT32))
    huge = np.array([[3e38, 3e38]], np.float32)
    got = numerics.matmul(huge, np.array([[2.0], [1.0]], np.float32))
    assert float(got[0, 0]) == math.inf
    # an exact zero is +0, whatever the BLAS returns; a tiny negative sum rounds to -0
    zero = numerics.matmul(np.array([[-0.0, -0.0]], np.float32), np.array([[1.0], [1.0]], np.float32))
    assert same_bits(zero[0, 0], 0.0)
    minus = numerics.matmul(np.array([[-(2.0**-100)]], np.float32), np.array([[2.0**-100]], np.float32))
    assert same_bits(minus[0, 0], -0.0)


def test_matmul_infinities_and_nans_follow_ieee_whatever_the_order() -> None:
    a = np.array([[np.inf, 1.0], [1.0, 2.0], [np.nan, 0.0], [np.inf, 1.0]], np.float32)
    b = np.array([[1.0, 0.0, -1.0], [1.0, 1.0, 1.0]], np.float32)
    got = numerics.matmul(a, b)
    assert got[0].tolist()[0] == math.inf and math.isnan(got[0, 1]) and got[0, 2] == -math.inf
    assert got[1].tolist() == [3.0, 2.0, 1.0]
    assert np.isnan(got[2]).all()
    nan_bits = got[2].view(np.uint32)
    assert (nan_bits == 0x7FC00000).all()  # canonical NaN


def test_matmul_shapes_batches_and_vectors() -> None:
    a = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = RNG.standard_normal((3, 5, 6)).astype(np.float32)
    got = numerics.matmul(a, b)
    assert got.shape == (2, 3, 4, 6)
    assert_all(got[1, 2], _matmul_oracle(a[1, 2], b[2], FLOAT32))
    v = RNG.standard_normal(5).astype(np.float32)
    assert numerics.matmul(v, v).shape == ()
    assert numerics.matmul(a[0, 0], v).shape == (4,)


def test_product_with_bias_rounds_once() -> None:
    w = RNG.standard_normal((4, 30)).astype(np.float32)
    cols = RNG.standard_normal((30, 12)).astype(np.float32)
    bias = RNG.standard_normal(4).astype(np.float32) * 100
    got = numerics.product(w[None], cols[None], FLOAT32, bias.astype(np.float64)[None, :, None])[0]
    assert_all(got, _matmul_oracle(w, cols, FLOAT32, bias))


def test_gemm_alpha_beta_and_c_round_once() -> None:
    a = RNG.standard_normal((5, 20)).astype(np.float32)
    b = RNG.standard_normal((20, 7)).astype(np.float32)
    c = RNG.standard_normal((1, 7)).astype(np.float32)
    alpha, beta = 0.37, -1.9
    got = numerics.gemm(a, b, c, alpha, beta)
    rows, cols = [exact(r) for r in a], [exact(col) for col in b.T]
    fa, fb = Fraction(float(np.float32(alpha))), Fraction(float(np.float32(beta)))
    want = [
        rn(fa * sum((x * w for x, w in zip(rows[i], cols[j], strict=True)), Fraction(0)) + fb * Fraction(float(c[0, j])), FLOAT32)
        for i in range(5)
        for j in range(7)
    ]
    assert_all(got, want)


def test_float64_products_are_correctly_rounded() -> None:
    a = _cancelling((4, 25), np.float64)
    b = _cancelling((25, 3), np.float64)
    assert_all(numerics.matmul(a, b), _matmul_oracle(a, b, FLOAT64))


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [("ij,jk->ik", [(3, 8), (8, 4)]), ("bij,bkj->bik", [(2, 3, 6), (2, 4, 6)]), ("ii->i", [(5, 5)]),
     ("i,i->", [(9,), (9,)]), ("ij,jk,k->i", [(3, 4), (4, 5), (5,)]), ("...j,j->...", [(2, 3, 4), (4,)])],
)
def test_einsum_is_correctly_rounded(equation: str, shapes: list[tuple[int, ...]]) -> None:
    operands = [_cancelling(s if len(s) == 2 else (int(np.prod(s)), 1), np.float32).reshape(s) for s in shapes]
    got = numerics.einsum(equation, *operands)
    # the oracle: every term of every output element, from numpy.einsum of the exact rationals
    wide = [op.astype(object) for op in operands]
    with np.errstate(all="ignore"):
        exact_values = np.einsum(equation, *[np.vectorize(lambda v: Fraction(float(v)))(w) for w in wide])
    want = [rn(Fraction(v), FLOAT32) for v in np.asarray(exact_values).reshape(-1).tolist()]
    assert got.shape == np.einsum(equation, *operands).shape
    assert_all(got, want)


def test_products_do_not_depend_on_the_blas_thread_count() -> None:
    a = _cancelling((64, 256), np.float32)
    b = _cancelling((256, 48), np.float32)
    with threadpool_limits(1):
        one = numerics.matmul(a, b)
    with threadpool_limits(2):
        two = numerics.matmul(a, b)
    assert one.tobytes() == two.tobytes()


def test_determinant_is_the_rounded_exact_determinant() -> None:
    x = RNG.standard_normal((3, 4, 4)).astype(np.float32)
    got = numerics.determinant(x)
    for m, value in zip(x, got, strict=True):
        q = [[Fraction(float(v)) for v in row] for row in m]
        assert same_bits(value, rn(_fraction_det(q), FLOAT32))


def _fraction_det(rows: list[list[Fraction]]) -> Fraction:
    if len(rows) == 1:
        return rows[0][0]
    return sum(
        ((-1) ** j * rows[0][j] * _fraction_det([r[:j] + r[j + 1 :] for r in rows[1:]]) for j in range(len(rows))),
        Fraction(0),
    )


# ------------------------------------------------------------------------------------------------
# Reductions


@pytest.mark.parametrize(("dtype", "fmt"), FORMATS, ids=lambda v: getattr(v, "name", ""))
def test_reductions_are_correctly_rounded(dtype: Any, fmt: FloatFormat) -> None:
    x = _cancelling((6, 50), np.float64)
    x = np.clip(x, -200, 200).astype(dtype)  # squares within float16's range
    rows = [exact(r) for r in x]
    cases = {
        "reduce_sum": lambda r: sum(r, Fraction(0)),
        "reduce_mean": lambda r: sum(r, Fraction(0)) / len(r),
        "reduce_l1": lambda r: sum((abs(v) for v in r), Fraction(0)),
        "reduce_sum_square": lambda r: sum((v * v for v in r), Fraction(0)),
        "mean_square": lambda r: sum((v * v for v in r), Fraction(0)) / len(r),
    }
    for name, oracle in cases.items():
        got = getattr(numerics, name)(x, (1,))
        assert got.shape == (6, 1)
        assert_all(got, [rn(oracle(r), fmt) for r in rows])
    got = numerics.reduce_l2(x, (1,))
    assert_all(got, [_rn_sqrt(sum((v * v for v in r), Fraction(0)), fmt) for r in rows])


def _rn_sqrt(q: Fraction, fmt: FloatFormat) -> float:
    """RN(sqrt(q)) from an integer square root 300 bits finer than any format: exact when q is a
    square, else a point strictly inside the tiny interval that holds the irrational root."""
    scale = 1 << 300
    n = q.numerator * q.denominator * scale * scale
    root = math.isqrt(n)
    if root * root == n:
        return rn(Fraction(root, q.denominator * scale), fmt)
    return rn(Fraction(2 * root + 1, 2 * q.denominator * scale), fmt)


def test_reductions_over_several_axes_and_empty_slices() -> None:
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    got = numerics.reduce_sum(x, (0, 2))
    want = [rn(sum(exact(x[:, j, :]), Fraction(0)), FLOAT32) for j in range(4)]
    assert got.shape == (1, 4, 1)
    assert_all(got, want)
    empty = np.zeros((2, 0), np.float32)
    assert numerics.reduce_sum(empty, (1,)).tolist() == [[0.0], [0.0]]
    assert np.isnan(numerics.reduce_mean(empty, (1,))).all()
    assert numerics.reduce_prod(empty, (1,)).tolist() == [[1.0], [1.0]]


def test_reduce_prod_is_correctly_rounded_past_the_float64_range() -> None:
    values = np.array([[3e38] * 9 + [1e-38] * 9, [-1e-30] * 5 + [7.0] + [1.0] * 12], dtype=np.float32)
    got = numerics.reduce_prod(values, (1,))
    for row, value in zip(values, got[:, 0], strict=True):
        want = Fraction(1)
        for v in row.tolist():
            want *= Fraction(v)
        assert same_bits(value, rn(want, FLOAT32))


def test_float64_reductions_are_correctly_rounded() -> None:
    x = _cancelling((4, 30), np.float64)
    rows = [exact(r) for r in x]
    assert_all(numerics.reduce_sum(x, (1,)), [rn(sum(r, Fraction(0)), FLOAT64) for r in rows])
    assert_all(numerics.reduce_mean(x, (1,)), [rn(sum(r, Fraction(0)) / 30, FLOAT64) for r in rows])
    assert_all(numerics.reduce_sum_square(x, (1,)), [rn(sum((v * v for v in r), Fraction(0)), FLOAT64) for r in rows])


def test_reductions_with_infinities_and_nans() -> None:
    x = np.array([[1.0, np.inf], [np.inf, -np.inf], [np.nan, 1.0], [2.0, 3.0]], np.float32)
    got = numerics.reduce_sum(x, (1,)).reshape(-1)
    assert got[0] == np.inf and np.isnan(got[1]) and np.isnan(got[2]) and got[3] == 5.0


# ------------------------------------------------------------------------------------------------
# Elementwise functions


def _hard_inputs(dtype: Any, fmt: FloatFormat, count: int) -> np.ndarray:
    """Random bit patterns over the whole range, and the values where functions turn: zeros,
    subnormals, the overflow and underflow thresholds, infinities, NaN."""
    bits = RNG.integers(0, 1 << (8 * np.dtype(fmt.bits).itemsize), count, dtype=np.uint64).astype(fmt.bits)
    special = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 88.72, -87.3, -103.9, 89.0, 1e-40, -1e-40, 710.0, 9.01, -9.01,
               np.inf, -np.inf, np.nan, 1e-7, 3.14159, 1.5707964, 1e30, -1e30]
    return np.concatenate([bits.view(dtype), np.array(special).astype(dtype)])


PARAMETERS = {"elu": (1.0,), "selu": (1.67326319217681884765625, 1.05070102214813232421875), "celu": (0.7,), "swish": (1.3,)}


@pytest.mark.parametrize("name", sorted(numerics.FUNCTIONS))
@pytest.mark.parametrize(("dtype", "fmt"), FORMATS, ids=lambda v: getattr(v, "name", ""))
def test_functions_are_correctly_rounded(name: str, dtype: Any, fmt: FloatFormat) -> None:
    x = _hard_inputs(dtype, fmt, 3000)
    parameters = PARAMETERS.get(name, ())
    with np.errstate(all="ignore"):
        got = numerics.apply(name, x, *parameters)
    function = numerics.FUNCTIONS[name]
    want = []
    for v in x.astype(np.float64).tolist():
        argument = gmpy2.mpfr(v, 53)
        if function.single:
            with fmt.context:
                want.append(float(function.exact(argument, *parameters)))
        else:
            want.append(math.nan if math.isnan(v) else numerics.functions.ziv(function.exact, argument, *parameters, fmt=fmt))
    assert got.dtype == np.dtype(dtype)
    assert_all(got, want)


def test_float64_functions_go_to_mpfr() -> None:
    x = np.array([0.5, -3.0, 1e-300, 700.0])
    got = numerics.apply("exp", x)
    with FLOAT64.context:
        want = [float(gmpy2.exp(gmpy2.mpfr(v, 53))) for v in x.tolist()]
    assert_all(got, want)


def test_power_exact_cases_and_ties() -> None:
    base = np.array([2.0, 4.0, 9.0, -8.0, 1 + 2**-12, 0.0, -0.0, -2.0, 10.0], np.float32)
    exponent = np.array([3.0, 0.5, 0.5, 1 / 3, 2.0, -1.0, 3.0, 0.5, 7.0], np.float32)
    got = numerics.power(base, exponent)
    with FLOAT32.context:
        want = [float(gmpy2.mpfr(float(b), 53) ** gmpy2.mpfr(float(e), 53)) for b, e in zip(base, exponent, strict=True)]
    assert_all(got, want)
    assert float(got[4]) == 1 + 2**-11  # (1 + 2**-12)**2 is a tie between two float32: even wins
    ints = numerics.power(np.array([3.0, 2.0], np.float32), np.array([5, -3], np.int64))
    assert ints.tolist() == [243.0, 0.125]


def test_native_mode_calls_numpy_and_portable_is_the_default() -> None:
    x = RNG.standard_normal(1000).astype(np.float32)
    assert numerics.current_mode() == numerics.PORTABLE
    with numerics.numerics_mode(numerics.NATIVE):
        native = numerics.apply("exp", x)
        assert numerics.is_native()
    assert not numerics.is_native()
    np.testing.assert_allclose(native, numerics.apply("exp", x), rtol=4e-7)
    with pytest.raises(ValueError, match="numerics must be one of portable, native"):
        numerics.check_mode("fast")


def test_canonical_nan_value() -> None:
    x = np.array([1.0, -np.nan, np.nan], np.float32)
    x[2] = np.frombuffer(np.uint32(0x7FC00123).tobytes(), np.float32)[0]  # a payload
    out = numerics.canonical_nan_value(x)
    assert out.view(np.uint32).tolist() == [0x3F800000, 0x7FC00000, 0x7FC00000]
    clean = np.array([1.0, 2.0], np.float32)
    assert numerics.canonical_nan_value(clean) is clean
    assert numerics.canonical_nan_value([x])[0].view(np.uint32)[1] == 0x7FC00000
