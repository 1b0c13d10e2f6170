"""The fast comparison paths give the general rule's figures bit for bit.

The rule they must match (the metrics before any shortcut): values equal everywhere (==) give the
"equal" figures; anything else goes through the general path. Figures are compared by repr, so
-0.0 vs 0.0 and NaN count as differences.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from sealtrace.parity.metrics import (
    ValueDiff,
    _compare_floats_general,
    _equal_floats,
    _finite_ulp,
    compare_values,
    ulp_distance,
)
from sealtrace.parity.tolerance import Tolerance

TOLERANCES = [Tolerance(), Tolerance(0.0, 0.0), Tolerance(10.0, 0.0), Tolerance(1e-6, 1e-6), Tolerance(1e-3, 0.5)]


def _figures(d: ValueDiff) -> str:
    return repr(tuple(getattr(d, f.name) for f in dataclasses.fields(d)))


def _rule(a: np.ndarray, b: np.ndarray, tol: Tolerance) -> ValueDiff:
    if a.size and bool((a == b).all()):
        return _equal_floats("v", a)
    return _compare_floats_general("v", a, b, tol)


def _check(a: np.ndarray, b: np.ndarray, tolerances: list[Tolerance] = TOLERANCES) -> None:
    for tol in tolerances:
        with np.errstate(all="ignore"):
            expected = _figures(_rule(a, b, tol))
            assert _figures(compare_values("v", a, b, tol)) == expected
            assert _figures(compare_values("v", a, b, tol, True)) == expected


SPECIALS = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-45, -1e-45, 1e-310, -1e-310, 3e38, -3e38, 1e20, -1e20, 1.0]


def _cast(x: float, dtype: Any) -> float:
    with np.errstate(all="ignore"):  # 3e38 overflows float16: inf, one more special
        return float(np.asarray(x).astype(dtype))


@st.composite
def float_pairs(draw: Any) -> tuple[np.ndarray, np.ndarray]:
    dtype = draw(st.sampled_from([np.float32, np.float64, np.float16]))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=12))
    elements = st.one_of(
        st.floats(width=np.dtype(dtype).itemsize * 8, allow_nan=True, allow_infinity=True, allow_subnormal=True),
        st.sampled_from(SPECIALS).map(lambda x: _cast(x, dtype)),
    )
    a = draw(hnp.arrays(dtype, shape, elements=elements))
    how = draw(st.sampled_from(["independent", "patched", "noise", "negated", "same", "signed-zeros"]))
    if how == "independent":
        b = draw(hnp.arrays(dtype, shape, elements=elements))
    elif how == "noise":
        with np.errstate(all="ignore"):
            scale = draw(st.sampled_from([1e-7, 1e-3, 1.0]))
            noise = np.random.default_rng(draw(st.integers(0, 2**16))).standard_normal(shape) * scale
            b = (a * (1 + noise)).astype(dtype)
    elif how == "negated":
        b = -a
    elif how == "signed-zeros":
        b = a.copy()
        b[b == 0] = np.copysign(0.0, -np.signbit(b[b == 0]).astype(float) + 0.5).astype(dtype)
    else:
        b = a.copy()
        if how == "patched" and b.size:
            mask = draw(hnp.arrays(np.bool_, shape))
            b[mask] = draw(hnp.arrays(dtype, shape, elements=elements))[mask]
    if draw(st.booleans()) and a.ndim >= 2:  # non-contiguous views
        a, b = a.swapaxes(0, -1), b.swapaxes(0, -1)
    return a, b


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(float_pairs())
def test_fast_paths_match_the_rule(pair: tuple[np.ndarray, np.ndarray]) -> None:
    a, b = pair
    _check(a, b)
    _check(b, a)


@settings(max_examples=200, deadline=None)
@given(
    hnp.arrays(st.sampled_from([np.int64, np.int32, np.uint8, np.bool_]), hnp.array_shapes(min_dims=0, max_dims=2)),
    st.booleans(),
)
def test_integer_shortcut_matches_the_rule(a: np.ndarray, change: bool) -> None:
    b = a.copy()
    if change and b.size:
        b.flat[0] = not b.flat[0] if b.dtype == np.bool_ else b.flat[0] ^ 1
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64)) if a.size else np.zeros(0)
    max_abs = float(diff.max()) if diff.size else 0.0
    expected = ValueDiff("v", str(a.dtype), a.shape, max_abs=max_abs, mean_abs=float(diff.mean()) if diff.size else 0.0,
                         max_ulp=None, exceeds=max_abs > 0)
    assert _figures(compare_values("v", a, b, Tolerance())) == _figures(expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [16384, 16385, 70001])
def test_large_values_match_the_rule(dtype: type[np.floating[Any]], size: int) -> None:
    # Above the bytes check: the sampled pre-check, the two-reduction relative error, the subset
    # tolerance test and the ULP difference in the reused buffer.
    rng = np.random.default_rng(size)
    a = rng.standard_normal(size).astype(dtype)
    noisy = (a * (1 + rng.standard_normal(size) * 1e-6)).astype(dtype)
    far = (a + rng.standard_normal(size) * 1e-2).astype(dtype)
    flipped = a.copy()
    flipped[::97] *= -1
    zeros = a.copy()
    zeros[::50] = 0.0
    signed = zeros.copy()
    signed[::100] = -0.0  # +0.0 vs -0.0 pairs: the most negative raw difference
    one_off = a.copy()
    one_off[-1] = np.nextafter(one_off[-1], np.inf, dtype=dtype)
    special = a.copy()
    special[::1000] = np.nan
    tols = [Tolerance(), Tolerance(0.0, 0.0), Tolerance(1e-3, 0.5)]
    for b in (a.copy(), noisy, far, -a, flipped, zeros, signed, one_off, special):
        _check(a, b, tols)
        _check(b, a, tols)
    _check(a.reshape(-1, 1)[::2], far.reshape(-1, 1)[::2], tols)  # strided


def _ulp_oracle(x: np.ndarray, y: np.ndarray) -> int:
    """The definition in Python integers: floats mapped onto one monotonic integer line (+0.0 and
    -0.0 on the same point), the largest distance between corresponding points."""
    bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize]
    sign = 1 << (8 * x.dtype.itemsize - 1)

    def point(u: int) -> int:
        return -(u - sign) if u & sign else u

    return max(
        abs(point(int(u)) - point(int(v)))
        for u, v in zip(x.view(bits).tolist(), y.view(bits).tolist(), strict=True)
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_finite_ulp_shortcut(dtype: type[np.floating[Any]]) -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal(1000).astype(dtype)
    cases = [a + dtype(1e-7), np.where(a == a[0], -0.0, a).astype(dtype), -a]
    zeros = np.zeros(10, dtype)
    neg = np.full(10, -0.0, dtype)
    for x, y in [(a, c) for c in cases] + [(zeros, neg), (neg, zeros), (zeros, zeros)]:
        y = np.asarray(y, dtype)
        expected = _ulp_oracle(x, y)
        # Same signs wherever either is non-zero: the raw difference, with the +0/-0 fallback.
        same = not (np.signbit(x) != np.signbit(y))[(x != 0) | (y != 0)].any()
        assert _finite_ulp(x, y, None, same) == expected
        assert _finite_ulp(x, y, np.empty(2 * x.size, dtype), same) == expected
        assert _finite_ulp(x, y) == ulp_distance(x, y) == expected


def test_ulp_distance_across_zero_does_not_wrap() -> None:
    # Opposite signs: the distance is the sum of both magnitudes, which for large float64 values is
    # beyond int64 (an int64 difference of the raw integers wrapped around to a small number).
    huge = np.array([1.7e308, -1.7e308, 1.0])
    expected = 2 * int(np.array(1.7e308).view(np.int64))
    assert expected > np.iinfo(np.int64).max
    assert ulp_distance(huge, -huge) == expected
    assert compare_values("v", huge, -huge, Tolerance()).max_ulp == expected
    one = np.float32([1.0, -0.0, 0.0])
    assert ulp_distance(one, np.float32([np.nextafter(np.float32(1), np.float32(2)), 0.0, -0.0])) == 1
    tiny = np.float32([1e-45])  # the smallest subnormal: one step from +0.0, two across to -1e-45
    assert ulp_distance(tiny, -tiny) == 2


@settings(max_examples=200, deadline=None)
@given(float_pairs())
def test_ulp_distance_follows_the_definition(pair: tuple[np.ndarray, np.ndarray]) -> None:
    a, b = pair
    finite = (np.isfinite(a) & np.isfinite(b)).reshape(-1)
    expected = _ulp_oracle(a.reshape(-1)[finite], b.reshape(-1)[finite]) if finite.any() else 0
    assert ulp_distance(a, b) == expected


def _figures_apart_from_sums(d: ValueDiff) -> str:
    return repr(tuple(getattr(d, f.name) for f in dataclasses.fields(d) if f.name not in ("mean_abs", "cosine")))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_chunked_values_match_the_rule(dtype: type[np.floating[Any]]) -> None:
    # Over CHUNK elements, a value is compared a chunk at a time (temporaries of one chunk): the
    # maxima, the tolerance test and the ULP distance are the rule's exactly; the float64 sums of the
    # mean and the cosine are added chunk by chunk (last bits only).
    from sealtrace.parity.metrics import CHUNK

    size = 3 * CHUNK + 5
    rng = np.random.default_rng(7)
    a = rng.standard_normal(size).astype(dtype)
    noisy = (a * (1 + rng.standard_normal(size) * 1e-6)).astype(dtype)
    far = (a + rng.standard_normal(size) * 1e-2).astype(dtype)
    flipped = a.copy()
    flipped[::97] *= -1
    signed = a.copy()
    signed[::50] = 0.0
    signed[::100] = -0.0
    zero_chunk = a.copy()  # a whole chunk of 0 vs 0 (0/0: NaN relative errors only) beside others
    zero_chunk[:CHUNK] = 0.0
    noisy_zero = noisy.copy()
    noisy_zero[:CHUNK] = 0.0
    beyond = a.copy()  # one element over tolerance, in the last chunk only
    beyond[-2] += 1.0
    special = a.copy()
    special[::1000] = np.nan  # the general path decides
    cases = [(a, a.copy()), (a, noisy), (a, far), (a, -a), (a, flipped), (a, signed), (signed, a),
             (zero_chunk, noisy_zero), (a, beyond), (a, special)]
    for x, y in cases:
        for tol in (Tolerance(), Tolerance(0.0, 0.0), Tolerance(1e-3, 0.5)):
            with np.errstate(all="ignore"):
                expected = _rule(x, y, tol)
                got = compare_values("v", x, y, tol)
            assert _figures_apart_from_sums(got) == _figures_apart_from_sums(expected)
            assert got.mean_abs == pytest.approx(expected.mean_abs, rel=1e-12, abs=0.0)
            assert got.cosine == pytest.approx(expected.cosine, rel=1e-6)


def test_chunked_comparison_holds_one_chunk_of_temporaries() -> None:
    # The temporaries of a comparison are one chunk's, not twice the value: tracemalloc sees NumPy's
    # allocations.
    import tracemalloc

    from sealtrace.parity.metrics import CHUNK

    size = 16 * CHUNK
    rng = np.random.default_rng(8)
    a = rng.standard_normal(size).astype(np.float32)
    b = (a + rng.standard_normal(size).astype(np.float32) * np.float32(1e-3)).astype(np.float32)
    tracemalloc.start()
    try:
        compare_values("v", a, b, Tolerance(1e-4, 1e-3))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < a.nbytes / 2, f"{peak} bytes of temporaries for a value of {a.nbytes}"
