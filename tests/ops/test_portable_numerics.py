"""Portable numerics of the ml, training, resize, Range, cast and quant kernels: each result is the
definition docs/numerics.md gives (checked against exact rational arithmetic or a step-by-step
re-implementation). That the same bits come out under other CPU features, BLAS kernels, thread
counts and NumPy versions is tests/portability's (op_cases.py holds these families' cases)."""

from __future__ import annotations

import math
import threading
from fractions import Fraction
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest

from sealtrace.ops import numerics
from sealtrace.ops.cast import cast
from sealtrace.ops.grid_sample import affine_grid
from sealtrace.ops.ml._scores import probit
from sealtrace.ops.ml.preprocessing import normalizer
from sealtrace.ops.ml.svm import _couple, _svm_kernel
from sealtrace.ops.quant import quantize_linear
from sealtrace.ops.shape import range_v11
from sealtrace.ops.training import adam
from tests.ops.oneop import both

F32 = np.float32
ROOT = Path(__file__).resolve().parents[2]


def _bits(x: np.ndarray) -> bytes:
    return np.ascontiguousarray(x).tobytes()


def _rn(value: Fraction, dtype: Any) -> Any:
    """RN(value) in float32 / float16, ties to even: the nearest of the value's float64 rounding and
    its two neighbours in the narrow type (a plain cast of the float64 could round twice)."""
    candidate = np.asarray(float(value)).astype(dtype)
    neighbours = [candidate, np.nextafter(candidate, dtype(-np.inf)), np.nextafter(candidate, dtype(np.inf))]
    bits = np.uint32 if dtype == F32 else np.uint16

    def key(c: Any) -> tuple[Fraction, int]:
        return abs(Fraction(float(c)) - value), int(np.asarray(c).view(bits)) & 1

    return dtype(min(neighbours, key=key))


def _log_fraction(v: float) -> Fraction:
    """log(v) to far more than float32's precision (MPFR at 200 bits), as a rational."""
    import gmpy2

    with gmpy2.context(precision=200):
        return Fraction(*gmpy2.log(gmpy2.mpfr(v)).as_integer_ratio())


# ----------------------------------------------------------------------------------------------
# ai.onnx.ml


def test_probit_is_onnxruntimes_formula_with_a_correctly_rounded_log() -> None:
    p = np.linspace(0.0005, 0.9995, 4001, dtype=F32)
    got = probit(p)
    t = p * F32(2) - F32(1)
    w = (F32(1) - t) * (F32(1) + t)
    exact_log = np.array([_rn(_log_fraction(float(v)), F32) for v in w], dtype=F32)
    c1 = F32(2) / (F32(math.pi) * F32(0.147))
    v = c1 + F32(0.5) * exact_log
    want = F32(1.41421356) * (np.where(t < 0, F32(-1), F32(1)) * np.sqrt(-v + np.sqrt(v * v - (F32(1) / F32(0.147)) * exact_log)))
    assert _bits(got) == _bits(want.astype(F32))


def test_probit_agrees_with_onnxruntime() -> None:
    p = np.linspace(0.001, 0.999, 999, dtype=F32).reshape(-1, 1)
    got, want = both("LinearRegressor", {"x": p}, 1, 1, "ai.onnx.ml", coefficients=[1.0], intercepts=[0.0],
                     targets=1, post_transform="PROBIT")
    same = np.mean(got[0] == want[0])
    assert same > 0.99, same  # the rest differ by ONNX Runtime's logf being off by an ulp
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=1e-6)


def test_svm_kernels_round_each_dot_product_once() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(5, 9)).astype(F32)
    vectors = rng.normal(size=(4, 9)).astype(F32)
    gamma, coef0 = F32(0.3), F32(0.7)
    linear = _svm_kernel(x, vectors, "LINEAR", None, 0.25)
    poly = _svm_kernel(x, vectors, "POLY", (0.3, 0.7, 3.0), 0.0)
    rbf = _svm_kernel(x, vectors, "RBF", (0.3, 0.7, 3.0), 0.0)
    for i in range(5):
        for j in range(4):
            dot = sum((Fraction(float(a)) * Fraction(float(b)) for a, b in zip(x[i], vectors[j], strict=True)),
                      Fraction(0))
            assert linear[i, j] == _rn(dot + Fraction(0.25), F32)
            inner = _rn(Fraction(float(gamma)) * dot + Fraction(float(coef0)), F32)
            assert poly[i, j] == _rn(Fraction(float(inner)) ** 3, F32)
            delta = x[i] - vectors[j]  # float32 differences
            distance = _rn(sum((Fraction(float(d)) ** 2 for d in delta), Fraction(0)), F32)
            assert rbf[i, j] == numerics.apply("exp", np.asarray(-gamma * distance, F32))


def test_normalizer_sums_do_not_depend_on_the_feature_order() -> None:
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(50, 300)) * np.exp2(rng.integers(-20, 20, size=(50, 300)))).astype(F32)
    order = rng.permutation(300)
    for norm in ("L1", "L2"):
        assert _bits(normalizer(x, norm=norm)[:, order]) == _bits(normalizer(x[:, order], norm=norm))


def test_probability_coupling_accumulates_in_index_order() -> None:
    rng = np.random.default_rng(11)
    classes = 5
    pairs = [(i, j) for i in range(classes - 1) for j in range(i + 1, classes)]
    pairwise = rng.uniform(0.05, 0.95, size=len(pairs)).astype(F32)
    got = _couple(classes, pairs, pairwise)
    # ONNX Runtime's multiclass_probability, one float32 operation at a time
    f = F32
    r = [[f(0)] * classes for _ in range(classes)]
    for (i, j), value in zip(pairs, pairwise.tolist(), strict=True):
        r[i][j], r[j][i] = f(value), f(1) - f(value)
    q = [[f(0)] * classes for _ in range(classes)]
    for i in range(classes):
        for j in range(i):
            q[i][i] += r[j][i] * r[j][i]
            q[i][j] = q[j][i]
        for j in range(i + 1, classes):
            q[i][i] += r[j][i] * r[j][i]
            q[i][j] = -r[j][i] * r[i][j]
    p = [f(1) / f(classes)] * classes
    for _ in range(100):
        qp = [f(0)] * classes
        pqp = f(0)
        for i in range(classes):
            for j in range(classes):
                qp[i] += q[i][j] * p[j]
            pqp += p[i] * qp[i]
        if max(abs(qp[i] - pqp) for i in range(classes)) < f(0.005) / f(classes):
            break
        for i in range(classes):
            diff = (-qp[i] + pqp) / q[i][i]
            p[i] += diff
            pqp = (pqp + diff * (diff * q[i][i] + f(2) * qp[i])) / (f(1) + diff) / (f(1) + diff)
            for j in range(classes):
                qp[j] = (qp[j] + diff * q[i][j]) / (f(1) + diff)
                p[j] /= f(1) + diff
    assert _bits(got) == _bits(np.array(p, dtype=F32))


# ----------------------------------------------------------------------------------------------
# Adam, AffineGrid, Range


def test_adam_powers_are_correctly_rounded() -> None:
    x, g = np.array([1.5], F32), np.array([0.25], F32)
    v, h = np.array([0.1], F32), np.array([0.2], F32)
    alpha, beta = float(F32(0.9)), float(F32(0.999))
    (x_new, _, h_new) = adam(np.array(0.01, F32), np.array(7, np.int64), x, g, v, h, alpha=alpha, beta=beta,
                             epsilon=float(F32(1e-7)), norm_coefficient=0.0, norm_coefficient_post=0.0)
    rate = float(F32(0.01)) * math.sqrt(1 - float(Fraction(beta) ** 7)) / (1 - float(Fraction(alpha) ** 7))
    v_new = F32(alpha) * v + F32(1 - alpha) * g
    want = x - F32(rate) * (v_new / (np.sqrt(h_new) + F32(float(F32(1e-7)))))
    assert _bits(x_new) == _bits(want)


def test_affine_grid_float16_rounds_each_value_once_in_float16() -> None:
    rng = np.random.default_rng(5)
    theta = rng.normal(size=(1, 2, 3)).astype(np.float16)
    grid = affine_grid(theta, np.array([1, 1, 3, 4]), align_corners=0)
    assert grid.dtype == np.float16
    h16 = np.float16
    xs = (np.arange(4).astype(h16) * h16(2) + h16(1)) / h16(4) - h16(1)
    ys = (np.arange(3).astype(h16) * h16(2) + h16(1)) / h16(3) - h16(1)
    for row, y in enumerate(ys):
        for col, x in enumerate(xs):
            for r in range(2):
                exact = (Fraction(float(theta[0, r, 0])) * Fraction(float(x)) + Fraction(float(theta[0, r, 1]))
                         * Fraction(float(y)) + Fraction(float(theta[0, r, 2])))
                assert grid[0, row, col, r] == _rn(exact, np.float16)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("start", "limit", "delta"), [(0.1, 100.3, 0.7), (-3.0, 2.0, 0.3), (1e7, 1e7 + 1000, 3.3)])
def test_float_range_accumulates_as_onnxruntime_and_the_function_body(
    dtype: type, start: float, limit: float, delta: float
) -> None:
    s: np.ndarray = np.array(start, dtype)
    d: np.ndarray = np.array(delta, dtype)
    feeds: dict[str, np.ndarray | None] = {"s": s, "l": np.array(limit, dtype), "d": d}
    got, want = both("Range", feeds, 11)
    assert got[0].dtype == want[0].dtype and _bits(got[0]) == _bits(want[0])
    # the function body's Loop: prev + delta, in order
    expected = [s]
    for _ in range(1, got[0].size):
        expected.append(expected[-1] + d)
    assert _bits(range_v11(s, np.array(limit, dtype), d)) == _bits(np.array(expected, dtype))


# ----------------------------------------------------------------------------------------------
# Cast, QuantizeLinear: one rounding into the narrow floats


def _to(x: np.ndarray, name: str, **attrs: Any) -> np.ndarray:
    return cast(x, to=getattr(onnx.TensorProto, name), **attrs)


def test_float64_to_narrow_floats_rounds_once() -> None:
    # each just below a midpoint of the target, at a distance float32 cannot hold: through float32
    # it would become the midpoint and round to even, the wrong way
    below_3_5 = np.nextafter(3.5, 0.0)
    assert float(_to(np.array([below_3_5]), "FLOAT4E2M1")[0]) == 3.0
    assert float(_to(np.array([1 + 2.0**-8 + 2.0**-40]), "BFLOAT16")[0]) == 1 + 2.0**-7
    assert float(_to(np.array([1 + 2.0**-8 - 2.0**-40]), "BFLOAT16")[0]) == 1.0
    assert float(_to(np.array([17.0 + 2.0**-30]), "FLOAT8E4M3FN")[0]) == 18.0  # 16, 18 around 17
    assert float(_to(np.array([18.0 + 2.0**-30]), "FLOAT8E5M2")[0]) == 20.0  # 16, 20 around 18
    # overflow and saturation as before
    assert np.isnan(float(_to(np.array([470.0]), "FLOAT8E4M3FN", saturate=0)[0]))
    assert float(_to(np.array([1e300]), "FLOAT8E4M3FN")[0]) == 448.0
    assert float(_to(np.array([1e300]), "BFLOAT16")[0]) == math.inf


def test_float32_to_narrow_floats_is_ml_dtypes_own_rounding() -> None:
    x = np.random.default_rng(1).normal(size=5000).astype(F32) * F32(50)
    for name, dtype in (("BFLOAT16", ml_dtypes.bfloat16), ("FLOAT8E4M3FN", ml_dtypes.float8_e4m3fn),
                        ("FLOAT8E5M2", ml_dtypes.float8_e5m2)):
        assert _bits(_to(x, name)) == _bits(np.clip(x, -448, 448).astype(dtype) if name == "FLOAT8E4M3FN"
                                            else x.astype(dtype))


def test_large_integers_to_bfloat16_round_once() -> None:
    values = np.array([2**60 + 2**52 + 1, -(2**60 + 2**52 + 1), 2**30 + 2**22 + 1, 2**63 - 1, 7], np.int64)
    got = _to(values, "BFLOAT16").astype(np.float64)
    want = [float(_rn_bfloat16(int(v))) for v in values]
    assert got.tolist() == want


def _rn_bfloat16(value: int) -> float:
    """RN(value) with 8 significant bits (ties to even), exactly."""
    if value == 0:
        return 0.0
    magnitude = abs(value)
    drop = max(magnitude.bit_length() - 8, 0)
    kept, rest = magnitude >> drop, magnitude & ((1 << drop) - 1)
    half = 1 << (drop - 1) if drop else 0
    if drop and (rest > half or (rest == half and kept & 1)):
        kept += 1
    return math.copysign(float(kept << drop), value)


def test_e8m0_from_float64_uses_the_exact_value() -> None:
    just_above = np.array([1024.0 * (1 + 2.0**-40)])
    just_below = np.array([2048.0 * (1 - 2.0**-40)])
    assert float(_to(just_above, "FLOAT8E8M0", round_mode="up")[0]) == 2048.0
    assert float(_to(just_below, "FLOAT8E8M0", round_mode="down")[0]) == 1024.0
    assert float(_to(just_below, "FLOAT8E8M0", round_mode="nearest")[0]) == 2048.0
    # float32 inputs: the spec's rule on the float32 bits, unchanged
    assert float(_to(np.array([1.5], F32), "FLOAT8E8M0", round_mode="nearest")[0]) == 2.0
    assert float(_to(np.array([1.25], F32), "FLOAT8E8M0", round_mode="up")[0]) == 2.0


def test_quantize_float64_to_float8_rounds_once() -> None:
    x = np.array([17.0 + 2.0**-30, 1e9, -2.0])
    zero = np.array(0, ml_dtypes.float8_e4m3fn)
    got = quantize_linear(x, np.array(1.0), zero)
    assert got.astype(np.float64).tolist() == [18.0, 448.0, -2.0]


def test_a_weight_that_dies_while_its_thread_holds_the_cache_lock_does_not_deadlock() -> None:
    # A weak reference's callback runs wherever the garbage collector runs: also in a thread that
    # holds the prepared-weights lock, where waiting for the lock would hang the run for good.
    from sealtrace.ops.numerics import products

    x = np.ones((1, 4), np.float32)
    w = np.ones((4, 4), np.float32)
    w.flags.writeable = False
    products.matmul(x, w)  # prepared once: its entry goes when w dies
    key = next(k for k in products._PREPARED if k[0] == id(w))
    done = threading.Event()

    def die_holding_the_lock() -> None:
        nonlocal w
        with products._PREPARED_LOCK:
            del w  # its callback runs here
        done.set()

    thread = threading.Thread(target=die_holding_the_lock, daemon=True)
    thread.start()
    thread.join(10)
    assert done.is_set()
    other = np.ones((4, 3), np.float32)  # another key, even where it reuses w's memory and id
    other.flags.writeable = False
    products.matmul(x, other)  # the next caller removes what died meanwhile
    assert key not in products._PREPARED
