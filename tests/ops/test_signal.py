"""DFT, STFT, window functions and MelWeightMatrix against onnxruntime: both DFT versions (axis
attribute / input), forward and inverse, one-sided (RFFT / IRFFT), dft_length padding and truncation."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest

from tests.ops.oneop import assert_same, both

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize(
    ("inverse", "onesided", "last"), [(0, 0, 1), (0, 0, 2), (1, 0, 2), (1, 0, 1), (0, 1, 1)]
)
@pytest.mark.parametrize("axis", [1, 2, -2])
@pytest.mark.parametrize("length", [None, 5, 12])
def test_dft_matches_onnxruntime(
    opset: int, inverse: int, onesided: int, last: int, axis: int, length: int | None
) -> None:
    x = RNG.standard_normal((2, 6, 8, last)).astype(np.float32)
    feeds: dict[str, np.ndarray | None] = {
        "x": x,
        "n": None if length is None else np.array(length, np.int64),
    }
    attrs: dict[str, Any] = {"inverse": inverse, "onesided": onesided}
    if opset == 17:
        attrs["axis"] = axis
    else:
        feeds["axis"] = np.array(axis, np.int64)
    got, want = both("DFT", feeds, opset, **attrs)
    assert_same(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("length", [5, 6, 12])
def test_irfft_inverts_rfft(length: int) -> None:
    signal = RNG.standard_normal((2, length, 3))
    spectrum = np.fft.rfft(signal, axis=1)
    x = np.stack([spectrum.real, spectrum.imag], -1).astype(np.float32)
    got, want = both("DFT", {"x": x, "n": np.array(length, np.int64)}, 17, inverse=1, onesided=1, axis=1)
    assert_same(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[0][..., 0], signal, atol=1e-5)


def test_dft_float64_keeps_double_precision() -> None:
    x = RNG.standard_normal((1, 16, 1))
    got, want = both("DFT", {"x": x}, 17)
    assert got[0].dtype == np.float64
    assert_same(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("inputs", ["window", "frame_length", "both"])
def test_stft_matches_onnxruntime(onesided: int, inputs: str) -> None:
    x = RNG.standard_normal((2, 64, 1)).astype(np.float32)
    window = np.hanning(16).astype(np.float32) if inputs != "frame_length" else None
    frame_length = np.array(16, np.int64) if inputs != "window" else None
    feeds = {"x": x, "step": np.array(6, np.int64), "window": window, "frame_length": frame_length}
    got, want = both("STFT", feeds, 17, onesided=onesided)
    assert_same(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size", [2, 7, 16])
@pytest.mark.parametrize("output_datatype", [onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE])
def test_windows_match_onnxruntime(op: str, periodic: int, size: int, output_datatype: int) -> None:
    got, want = both(
        op, {"size": np.array(size, np.int64)}, 17, periodic=periodic, output_datatype=output_datatype
    )
    assert_same(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("bins", "length", "rate", "low", "high"),
    [(8, 16, 8192, 0.0, 4096.0), (20, 512, 16000, 20.0, 8000.0), (40, 400, 16000, 0.0, 8000.0)],
)
def test_mel_weight_matrix_matches_onnxruntime(
    bins: int, length: int, rate: int, low: float, high: float
) -> None:
    feeds = {
        "bins": np.array(bins, np.int64),
        "length": np.array(length, np.int64),
        "rate": np.array(rate, np.int64),
        "low": np.array(low, np.float32),
        "high": np.array(high, np.float32),
    }
    got, want = both("MelWeightMatrix", feeds, 17)
    assert_same(got, want, rtol=1e-5, atol=1e-6)
