"""DFT, STFT, the windows and MelWeightMatrix on portable numerics (docs/numerics.md): the twiddle
factors are RN(cos(2 pi m / N)) and RN(sin(2 pi m / N)), each output one correctly rounded sum of
products (checked in exact rational arithmetic), the windows give their function bodies' bits."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import gmpy2
import ml_dtypes
import numpy as np
import pytest

from sealtrace import Session
from sealtrace.conformance import collect_cases
from sealtrace.ops import numerics, signal

BF16 = np.dtype(ml_dtypes.bfloat16)


def _rn(value: Fraction, dtype: np.dtype[Any]) -> float:
    """RN(value) in ``dtype``, ties to even (MPFR in the format's context: exact rational in)."""
    fmt = numerics.format_of(dtype)
    assert fmt is not None
    with fmt.context:
        return float(gmpy2.mpfr(gmpy2.mpq(value.numerator, value.denominator)))


def _exact(v: Any) -> Fraction:
    return Fraction(*v.as_integer_ratio())


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 8, 12, 100, 400, 512])
@pytest.mark.parametrize(
    "dtype", [np.dtype(np.float32), np.dtype(np.float16), BF16, np.dtype(np.float64)], ids=str
)
def test_twiddles_are_correctly_rounded(dtype: np.dtype[Any], n: int) -> None:
    cos, sin = numerics.unit_circle(n, numerics.format_of(np.dtype(dtype)))
    assert cos.dtype == dtype and sin.dtype == dtype
    with gmpy2.context(precision=300):
        for m in range(n):
            angle = 2 * gmpy2.const_pi() * m / n
            for table, fn in ((cos, gmpy2.cos), (sin, gmpy2.sin)):
                want = fn(angle)
                got = float(table[m])
                # exact values (0, +-1/2, +-1) exactly, zeros as +0; others RN of 300 bits
                if abs(want) < gmpy2.mpfr(2) ** -250:
                    assert got == 0 and np.signbit(got) == False  # noqa: E712
                else:
                    assert got == _rn(_exact(want), dtype), (m, n)


def _dft_exact(a: np.ndarray, b: np.ndarray, n: int, bins: int, inverse: bool) -> np.ndarray:
    """sum_j (a_j + i b_j) (c - / + i s)[(j k) mod n] exactly, with the kernel's rounded twiddles."""
    cos, sin = numerics.unit_circle(n, numerics.format_of(a.dtype))
    sign = 1 if inverse else -1
    out = []
    for k in range(bins):
        re = im = Fraction(0)
        for j in range(n):
            m = (j * k) % n
            c, s = _exact(float(cos[m])), sign * _exact(float(sin[m]))
            aj, bj = _exact(float(a[j])), _exact(float(b[j]))
            re += aj * c - bj * s
            im += aj * s + bj * c
        out.append((re, im))
    return np.array(out, dtype=object)


@pytest.mark.parametrize(("inverse", "onesided"), [(0, 0), (1, 0), (0, 1)])
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16), BF16], ids=str)
def test_dft_is_one_rounding_of_its_sums(dtype: np.dtype[Any], inverse: int, onesided: int) -> None:
    rng = np.random.default_rng(0)
    n = 12
    x = rng.standard_normal((1, n, 2)).astype(dtype)
    if onesided:
        x[..., 1] = 0
    got = signal.dft_17(x if not onesided else x[..., :1], None, axis=1, inverse=inverse, onesided=onesided)
    bins = n // 2 + 1 if onesided else n
    sums = _dft_exact(x[0, :, 0], x[0, :, 1], n, bins, bool(inverse))
    for k in range(bins):
        for part in range(2):
            value = sums[k][part]
            want = _rn(value, dtype)
            if inverse:  # RN(RN(sum) / n)
                want = _rn(Fraction(want) / n, dtype)
            assert float(got[0, k, part]) == want, (k, part)


def test_irfft_sums_the_one_sided_spectrum_with_weights() -> None:
    rng = np.random.default_rng(1)
    n = 10
    spectrum = rng.standard_normal((1, n // 2 + 1, 2)).astype(np.float32)
    got = signal.dft_17(spectrum, np.array(n), axis=1, inverse=1, onesided=1)
    cos, sin = numerics.unit_circle(n, numerics.FLOAT32)
    for j in range(n):
        total = Fraction(0)
        for k in range(n // 2 + 1):
            w = 1 if k in (0, n // 2) else 2
            m = (j * k) % n
            total += w * _exact(float(spectrum[0, k, 0])) * _exact(float(cos[m]))
            if k != 0:
                total -= w * _exact(float(spectrum[0, k, 1])) * _exact(float(sin[m]))
        want = _rn(Fraction(_rn(total, np.dtype(np.float32))) / n, np.dtype(np.float32))
        assert float(got[0, j, 0]) == want


def test_exact_zeros_are_exact() -> None:
    """Bins whose exact value is 0 (a real signal's DC imaginary part, a symmetric signal's sine
    sums) are +0: the twiddles keep the circle's symmetries exactly."""
    x = np.arange(100, dtype=np.float32).reshape(1, 10, 10, 1)
    y = signal.dft_17(x, None, axis=1, inverse=1, onesided=0)
    assert np.all(y[0, 0, :, 1] == 0) and np.all(y[0, 5, :, 1] == 0)
    assert not np.signbit(y[0, 0, :, 1]).any()


def test_stft_is_the_dft_of_windowed_frames() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 300, 1)).astype(np.float32)
    window = signal.hann_window(np.array(64), output_datatype=1, periodic=1)
    got = signal.stft(x, np.array(20), window, None, onesided=1)
    frames = np.lib.stride_tricks.sliding_window_view(x[..., 0], 64, axis=1)[:, ::20] * window
    want = signal.dft_17(np.ascontiguousarray(frames)[..., None], None, axis=2, inverse=0, onesided=1)
    assert got.tobytes() == want.tobytes()


def test_windows_give_their_function_bodies_bits() -> None:
    cases = {c.name: c for c in collect_cases(["HannWindow", "HammingWindow", "BlackmanWindow"])}
    twins = [(c, cases[n + "_expanded"]) for n, c in sorted(cases.items()) if n + "_expanded" in cases]
    assert len(twins) == 6
    for case, expanded in twins:
        size = np.asarray(case.data_sets[0][0][0])
        ours = Session(case.model).run(None, {case.model.graph.input[0].name: size})[0]
        body = Session(expanded.model).run(None, {expanded.model.graph.input[0].name: size})[0]
        assert ours.tobytes() == body.tobytes(), case.name


def test_mel_weights_are_correctly_rounded_ratios() -> None:
    weights = signal.mel_weight_matrix(
        np.array(10),
        np.array(64),
        np.array(8000),
        np.array(0.0, np.float32),
        np.array(4000.0, np.float32),
        output_datatype=10,
    )
    assert weights.dtype == np.float16
    for value in np.unique(weights):
        ratio = Fraction(float(value)).limit_denominator(64)
        assert float(value) == _rn(ratio, np.dtype(np.float16))
