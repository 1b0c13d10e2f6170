"""Signal processing: DFT, STFT, window functions and MelWeightMatrix (computed with np.fft)."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx.helper import tensor_dtype_to_np_dtype

from sealtrace.ops.registry import register


def _precision(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """FFTs run in the input's precision (single for float32 and narrower), as ONNX Runtime does."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _as_complex(x: np.ndarray) -> np.ndarray:
    """The complex signal held by a [..., 1] (real) or [..., 2] (real, imaginary) tensor."""
    real = _precision(x.dtype)
    if x.shape[-1] == 1:
        return x[..., 0].astype(real)
    if x.shape[-1] == 2:
        return x[..., 0].astype(real) + 1j * x[..., 1].astype(real)
    raise ValueError(f"the last dimension must be 1 (real) or 2 (complex), got shape {x.shape}")


def _as_pairs(z: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


def _dft(x: np.ndarray, dft_length: np.ndarray | None, axis: int, inverse: int, onesided: int) -> np.ndarray:
    rank = x.ndim
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank - 1:
        raise ValueError(f"DFT axis {axis} is out of range for an input of rank {rank}")
    signal = _as_complex(x)
    if dft_length is not None:
        n = int(dft_length.reshape(-1)[0])
    elif inverse and onesided:
        n = 2 * (x.shape[axis] - 1)
    else:
        n = x.shape[axis]
    if inverse and onesided:
        # IRFFT: one-sided spectrum in, full real signal out.
        return np.fft.irfft(signal, n=n, axis=axis)[..., None].astype(x.dtype)
    spectrum = np.fft.ifft(signal, n=n, axis=axis) if inverse else np.fft.fft(signal, n=n, axis=axis)
    if onesided:
        spectrum = np.take(spectrum, np.arange(n // 2 + 1), axis=axis)
    return _as_pairs(spectrum, x.dtype)


@register("DFT", 17)
def dft_17(
    input: np.ndarray, dft_length: np.ndarray | None = None, *, axis: int, inverse: int, onesided: int
) -> np.ndarray:
    """DFT-17: axis as an attribute (default 1)."""
    return _dft(input, dft_length, axis, inverse, onesided)


@register("DFT", 20)
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
    z = _as_complex(signal)  # [batch, signal_length]
    frames = np.lib.stride_tricks.sliding_window_view(z, length, axis=1)[:, ::step]  # [batch, frames, length]
    if window is not None:
        frames = frames * window.astype(_precision(signal.dtype))
    spectrum = np.fft.fft(frames, axis=-1)
    if onesided:
        spectrum = spectrum[..., : length // 2 + 1]
    return _as_pairs(spectrum, signal.dtype)


def _window_positions(size: np.ndarray, periodic: int) -> tuple[np.ndarray, int]:
    n = int(size.reshape(-1)[0])
    # A periodic window of length N is the first N points of a symmetric one of length N + 1.
    return np.arange(n, dtype=np.float64), n if periodic else n - 1


def _window_output(values: np.ndarray, output_datatype: int) -> np.ndarray:
    return values.astype(tensor_dtype_to_np_dtype(output_datatype))


@register("HannWindow", 17)
def hann_window(size: np.ndarray, *, output_datatype: int, periodic: int) -> np.ndarray:
    """HannWindow-17: 0.5 - 0.5 cos(2 pi n / N)."""
    n, span = _window_positions(size, periodic)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _window_output(np.sin(np.pi * n / span) ** 2, output_datatype)


@register("HammingWindow", 17)
def hamming_window(size: np.ndarray, *, output_datatype: int, periodic: int) -> np.ndarray:
    """HammingWindow-17: 25/46 - 21/46 cos(2 pi n / N)."""
    n, span = _window_positions(size, periodic)
    alpha = 25.0 / 46.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return _window_output(alpha - (1 - alpha) * np.cos(2 * np.pi * n / span), output_datatype)


@register("BlackmanWindow", 17)
def blackman_window(size: np.ndarray, *, output_datatype: int, periodic: int) -> np.ndarray:
    """BlackmanWindow-17: 0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)."""
    n, span = _window_positions(size, periodic)
    with np.errstate(divide="ignore", invalid="ignore"):
        values = 0.42 - 0.5 * np.cos(2 * np.pi * n / span) + 0.08 * np.cos(4 * np.pi * n / span)
    return _window_output(values, output_datatype)


@register("MelWeightMatrix", 17)
def mel_weight_matrix(
    num_mel_bins: np.ndarray,
    dft_length: np.ndarray,
    sample_rate: np.ndarray,
    lower_edge_hertz: np.ndarray,
    upper_edge_hertz: np.ndarray,
    *,
    output_datatype: int,
) -> np.ndarray:
    """MelWeightMatrix-17: triangular mel filters, [dft_length // 2 + 1, num_mel_bins]."""
    mel_bins = int(num_mel_bins.reshape(-1)[0])
    length = int(dft_length.reshape(-1)[0])
    rate = int(sample_rate.reshape(-1)[0])
    low = float(lower_edge_hertz.reshape(-1)[0])
    high = float(upper_edge_hertz.reshape(-1)[0])
    spectrogram_bins = length // 2 + 1
    low_mel = 2595 * np.log10(1 + low / 700)
    high_mel = 2595 * np.log10(1 + high / 700)
    mel_step = (high_mel - low_mel) / (mel_bins + 2)
    hertz = 700 * (10 ** ((np.arange(mel_bins + 2) * mel_step + low_mel) / 2595) - 1)
    edges = np.floor((length + 1) * hertz / rate).astype(np.int64)
    lower, center, upper = edges[:-2], edges[1:-1], edges[2:]
    j = np.arange(spectrogram_bins)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        rising = np.where(center > lower, (j - lower) / (center - lower), 1.0)
        falling = (upper - j) / (upper - center)
    weights = np.where((j >= lower) & (j <= center), rising, 0.0)
    # The falling edge starts at the peak (where it is 1 as well) and stops before the upper edge.
    weights = np.where((j >= center) & (j < upper), falling, weights)
    return weights.astype(tensor_dtype_to_np_dtype(output_datatype))
