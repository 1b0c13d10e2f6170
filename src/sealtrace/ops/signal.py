"""Signal processing: DFT, STFT, window functions and MelWeightMatrix.

Numerics (docs/numerics.md), in the input's type T (half precision included):

- DFT and STFT are sums of products, not FFTs: with the twiddle factors
  ``c[m] = RN_T(cos(2 pi m / N))`` and ``s[m] = RN_T(sin(2 pi m / N))``, m = k n mod N reduced in
  integers (so the angle is exact; MPFR computes each factor once per (N, T), cached), every output
  element is one correctly rounded sum of products: ``Re X[k] = RN(sum a[n] c + b[n] s)`` and
  ``Im X[k] = RN(sum b[n] c - a[n] s)`` (the signs flip for the inverse, which then divides by N,
  one more rounding). The one-sided inverse (IRFFT) sums the one-sided spectrum with weights
  1, 2, ..., 2 (1 at N/2), the imaginary parts of bins 0 and N/2 ignored. STFT multiplies each
  frame by the window in T (one rounding each) and transforms it.
- Hann, Hamming and Blackman windows run their ONNX function bodies in float32, Cos correctly
  rounded, and cast to output_datatype.
- MelWeightMatrix: the mel edges by IEEE float64 steps with log10 and 10**x correctly rounded, and
  each weight a ratio of integers correctly rounded to the output type.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from onnx.helper import tensor_dtype_to_np_dtype

from sealtrace.ops import numerics
from sealtrace.ops.registry import quiet, register

Array = np.ndarray[Any, Any]

CONFORMANCE_EXCLUSIONS: dict[str, str] = {
    name: (
        "expected data is NumPy 2's single-precision FFT (np.fft.ifft of complex64), whose rounding "
        "noise (1.9e-7) exceeds the case's atol (1e-7) at the bins whose exact value is 0 (the "
        "imaginary parts of bins 0 and 5 of a real signal); the portable DFT gives those exactly 0, "
        "and ONNX Runtime fails this case too"
    )
    for name in ("test_dft_inverse", "test_dft_inverse_opset19")
}

# Twiddle matrices up to this many elements are cached per (N, bins, kind, dtype).
_CACHED_MATRIX_ELEMENTS = 1 << 22


def _computable(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The type the transform computes in: T itself, or float32 for types numerics does not cover."""
    return dtype if numerics.format_of(dtype) is not None else np.dtype(np.float32)


def _twiddles(n: int, bins: int, dtype: np.dtype[Any]) -> tuple[Array, Array]:
    """C[j, k] = c[(j k) mod n] and S[j, k] = s[(j k) mod n] for j in [0, n), k in [0, bins)."""
    fmt = numerics.format_of(dtype)
    assert fmt is not None
    cos, sin = numerics.unit_circle(n, fmt)
    m = np.outer(np.arange(n, dtype=np.int64), np.arange(bins, dtype=np.int64)) % max(n, 1)
    return cos[m], sin[m]


def _matrix_of(n: int, bins: int, kind: str, dtype: np.dtype[Any]) -> Array:
    """The right operand of the transform as one product, values of ``dtype``:

    - "forward-real" [n, 2 bins]: [C, -S]; "forward" [2n, 2 bins]: [[C, -S], [S, C]];
    - "inverse" [2n, 2 bins]: [[C, S], [-S, C]] (unnormalized);
    - "irfft" [2 bins, n], bins = n // 2 + 1: [[w C^T], [-w S^T]], w = 1, 2, ..., 2 (1 at n / 2),
      the row of bin 0's imaginary part zero.
    """
    if n * bins * 4 <= _CACHED_MATRIX_ELEMENTS:
        return _cached_matrix(n, bins, kind, dtype)
    return _build_matrix(n, bins, kind, dtype)


def _build_matrix(n: int, bins: int, kind: str, dtype: np.dtype[Any]) -> Array:
    if kind == "irfft":
        # [bins, n]: the length-n tables at (k j) mod n, bin k by sample j
        c, s = (t.T for t in _twiddles(n, bins, dtype))
        weight = np.full((bins, 1), 2, dtype=dtype)
        weight[0] = 1
        if n % 2 == 0 and bins > 1:
            weight[n // 2] = 1
        imaginary = -(weight * s)
        imaginary[0] = 0
        return np.concatenate([weight * c, imaginary], axis=0)
    c, s = _twiddles(n, bins, dtype)
    if kind == "forward-real":
        return np.concatenate([c, -s], axis=1)
    if kind == "forward":
        return np.concatenate([np.concatenate([c, -s], axis=1), np.concatenate([s, c], axis=1)], axis=0)
    return np.concatenate([np.concatenate([c, s], axis=1), np.concatenate([-s, c], axis=1)], axis=0)


@functools.lru_cache(maxsize=32)
def _cached_matrix(n: int, bins: int, kind: str, dtype: np.dtype[Any]) -> Array:
    matrix = _build_matrix(n, bins, kind, dtype)
    matrix.flags.writeable = False
    return matrix


def _fit(x: Array, length: int) -> Array:
    """``x`` truncated or zero-padded along its last axis to ``length`` (np.fft's ``n``)."""
    have = x.shape[-1]
    if have >= length:
        return x[..., :length]
    return np.concatenate([x, np.zeros((*x.shape[:-1], length - have), dtype=x.dtype)], axis=-1)


def _transform(real: Array, imag: Array | None, n: int, inverse: bool, onesided: bool) -> Array:
    """The DFT of length ``n`` along the last axis of a real (``imag`` None) or complex signal of
    type T: [..., bins, 2] pairs (real, imaginary), or [..., n, 1] for the one-sided inverse."""
    dtype = real.dtype
    lead = real.shape[:-1]
    signals = math.prod(lead)  # (not -1: a reshape cannot infer it for an empty [2**40, 0] batch)
    if inverse and onesided:
        bins = n // 2 + 1
        rows = [_fit(real, bins), _fit(imag if imag is not None else np.zeros_like(real), bins)]
        operand = np.concatenate(rows, axis=-1).reshape(signals, 2 * bins)
        total = numerics.matmul(operand, _matrix_of(n, bins, "irfft", dtype))
        return _divided(total, n).reshape(*lead, n, 1)
    bins = n // 2 + 1 if onesided else n
    if imag is None and not inverse:
        operand, kind = _fit(real, n).reshape(signals, n), "forward-real"
    else:
        imag = imag if imag is not None else np.zeros_like(real)
        operand = np.concatenate([_fit(real, n), _fit(imag, n)], axis=-1).reshape(signals, 2 * n)
        kind = "inverse" if inverse else "forward"
    total = numerics.matmul(operand, _matrix_of(n, bins, kind, dtype))
    if inverse:
        total = _divided(total, n)
    pairs = np.stack([total[:, :bins], total[:, bins:]], axis=-1)
    return pairs.reshape(*lead, bins, 2)


def _divided(total: Array, n: int) -> Array:
    """RN_T(total / n), one rounding: the float64 quotient of a T value by an integer rounds to T
    exactly as the exact quotient does (it never lands on a rounding boundary of T that the exact
    quotient misses, for n < 2**27)."""
    fmt = numerics.format_of(total.dtype)
    if fmt is None or numerics.is_native():
        return np.asarray(total / total.dtype.type(n))
    return numerics.round_to(np.asarray(total, dtype=np.float64) / float(n), fmt)


def _dft(x: Array, dft_length: Array | None, axis: int, inverse: int, onesided: int) -> Array:
    rank = x.ndim
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank - 1:
        raise ValueError(f"DFT axis {axis} is out of range for an input of rank {rank}")
    if x.shape[-1] not in (1, 2):
        raise ValueError(f"the last dimension must be 1 (real) or 2 (complex), got shape {x.shape}")
    if dft_length is not None:
        n = int(dft_length.reshape(-1)[0])
    elif inverse and onesided:
        n = 2 * (x.shape[axis] - 1)
    else:
        n = x.shape[axis]
    work = _computable(x.dtype)
    moved = np.moveaxis(x, axis, -2).astype(work, copy=False)  # [..., length, 1 or 2]
    real = moved[..., 0]
    imag = moved[..., 1] if x.shape[-1] == 2 else None
    out = _transform(real, imag, n, bool(inverse), bool(onesided))  # [..., bins, 1 or 2]
    return np.ascontiguousarray(np.moveaxis(out, -2, axis)).astype(x.dtype, copy=False)


@register("DFT", 17)
@quiet
def dft_17(
    input: np.ndarray, dft_length: np.ndarray | None = None, *, axis: int, inverse: int, onesided: int
) -> np.ndarray:
    """DFT-17: axis as an attribute (default 1)."""
    return _dft(input, dft_length, axis, inverse, onesided)


@register("DFT", 20)
@quiet
def dft_20(
    input: np.ndarray,
    dft_length: np.ndarray | None = None,
    axis: np.ndarray | None = None,
    *,
    inverse: int,
    onesided: int,
) -> np.ndarray:
    """DFT-20: axis as an optional input (default -2)."""
    chosen = -2 if axis is None or axis.size == 0 else int(axis.reshape(-1)[0])
    return _dft(input, dft_length, chosen, inverse, onesided)


@register("STFT", 17)
@quiet
def stft(
    signal: np.ndarray,
    frame_step: np.ndarray,
    window: np.ndarray | None = None,
    frame_length: np.ndarray | None = None,
    *,
    onesided: int,
) -> np.ndarray:
    """STFT-17: windowed DFTs of frames; output [batch, frames, bins, 2]."""
    step = int(frame_step.reshape(-1)[0])
    if frame_length is not None:
        length = int(frame_length.reshape(-1)[0])
    elif window is not None:
        length = window.shape[0]
    else:
        length = signal.shape[1]
    if window is not None and window.shape[0] != length:
        raise ValueError(f"window of length {window.shape[0]} does not match frame_length {length}")
    if signal.shape[-1] not in (1, 2):
        raise ValueError(f"the last dimension must be 1 (real) or 2 (complex), got shape {signal.shape}")
    work = _computable(signal.dtype)
    x = signal.astype(work, copy=False)
    # [batch, frames, 1 or 2, length]: each frame of the real and imaginary parts
    frames = np.lib.stride_tricks.sliding_window_view(x, length, axis=1)[:, ::step]
    if window is not None:
        frames = frames * window.astype(work)  # one rounding per sample, in T
    real = frames[:, :, 0]
    imag = frames[:, :, 1] if signal.shape[-1] == 2 else None
    out = _transform(np.ascontiguousarray(real), None if imag is None else np.ascontiguousarray(imag),
                     length, False, bool(onesided))  # fmt: skip
    return out.astype(signal.dtype, copy=False)


# Window functions: the ONNX function bodies (HannWindow-17, HammingWindow-17, BlackmanWindow-17),
# in float32 as they are written: Tau = 6.2831855 (2 pi in float32), AngularIncrement =
# Tau / N (N = size if periodic else size - 1), x = n * AngularIncrement,
# output = (A0 - A1 Cos(x)) + A2 Cos(2 x), each step rounded to float32 (Cos correctly rounded),
# then Cast to output_datatype.
_TAU = np.float32(6.2831855)


def _window(size: np.ndarray, periodic: int, output_datatype: int, a0: float, a1: float, a2: float) -> Array:
    n = int(size.reshape(-1)[0])
    span = np.float32(n if periodic else n - 1)
    increment = _TAU / span
    angle = np.arange(n, dtype=np.float32) * increment
    first = numerics.apply("cos", angle)
    second = numerics.apply("cos", angle * np.float32(2))
    values = (np.float32(a0) - np.float32(a1) * first) + np.float32(a2) * second
    dtype = tensor_dtype_to_np_dtype(output_datatype)
    return values.astype(dtype)  # float32 to any type: one rounding (or exact)


@register("HannWindow", 17)
@quiet
def hann_window(size: np.ndarray, *, output_datatype: int, periodic: int) -> np.ndarray:
    """HannWindow-17: 0.5 - 0.5 cos(2 pi n / N), its body in float32."""
    return _window(size, periodic, output_datatype, 0.5, 0.5, 0.0)


@register("HammingWindow", 17)
@quiet
def hamming_window(size: np.ndarray, *, output_datatype: int, periodic: int) -> np.ndarray:
    """HammingWindow-17: 25/46 - 21/46 cos(2 pi n / N), its body in float32."""
    return _window(size, periodic, output_datatype, 25.0 / 46.0, 21.0 / 46.0, 0.0)


@register("BlackmanWindow", 17)
@quiet
def blackman_window(size: np.ndarray, *, output_datatype: int, periodic: int) -> np.ndarray:
    """BlackmanWindow-17: 0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N), its body in float32."""
    return _window(size, periodic, output_datatype, 0.42, 0.5, 0.08)


def _log10(value: float) -> float:
    """RN(log10(value)) in float64."""
    return float(numerics.apply("log10", np.array([value], dtype=np.float64))[0])


@register("MelWeightMatrix", 17)
@quiet
def mel_weight_matrix(
    num_mel_bins: np.ndarray,
    dft_length: np.ndarray,
    sample_rate: np.ndarray,
    lower_edge_hertz: np.ndarray,
    upper_edge_hertz: np.ndarray,
    *,
    output_datatype: int,
) -> np.ndarray:
    """MelWeightMatrix-17: triangular mel filters, [dft_length // 2 + 1, num_mel_bins].

    The edges: mel(f) = 2595 log10(1 + f / 700) at both ends, mel_i = i * step + low (step =
    (high - low) / (bins + 2)), hz_i = 700 (10 ** (mel_i / 2595) - 1), edge_i = floor((length + 1)
    hz_i / rate), each step an IEEE float64 operation, log10 and the power correctly rounded.
    """
    mel_bins = int(num_mel_bins.reshape(-1)[0])
    length = int(dft_length.reshape(-1)[0])
    rate = int(sample_rate.reshape(-1)[0])
    low = float(lower_edge_hertz.reshape(-1)[0])
    high = float(upper_edge_hertz.reshape(-1)[0])
    spectrogram_bins = length // 2 + 1
    low_mel = 2595 * _log10(1 + low / 700)
    high_mel = 2595 * _log10(1 + high / 700)
    mel_step = (high_mel - low_mel) / (mel_bins + 2)
    exponent = (np.arange(mel_bins + 2) * mel_step + low_mel) / 2595
    hertz = 700 * (numerics.power(np.full_like(exponent, 10.0), exponent) - 1)
    edges = np.floor((length + 1) * hertz / rate).astype(np.int64)
    lower, center, upper = edges[:-2], edges[1:-1], edges[2:]
    j = np.arange(spectrogram_bins)[:, None]
    # Each weight is a ratio of integers p / q: its float64 quotient rounds to the output type as
    # p / q itself does (it cannot land on a rounding boundary p / q misses, for q < 2**27).
    rising = np.where(center > lower, (j - lower) / np.where(center > lower, center - lower, 1), 1.0)
    falling = (upper - j) / np.where(upper > center, upper - center, 1)
    weights = np.where((j >= lower) & (j <= center), rising, 0.0)
    # The falling edge starts at the peak (where it is 1 as well) and stops before the upper edge.
    weights = np.where((j >= center) & (j < upper), falling, weights)
    dtype = np.dtype(tensor_dtype_to_np_dtype(output_datatype))
    fmt = numerics.format_of(dtype)
    if fmt is not None:
        return numerics.round_to(weights, fmt)
    return weights.astype(dtype)
