"""DFT, STFT and MelWeightMatrix: torch translations (torch.fft), the reference's conventions."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sealtrace.ops.signal import mel_weight_matrix as _reference_mel
from sealtrace.torchops.dtypes import from_numpy
from sealtrace.torchops.registry import ints, reference_versions, register, static_array


def _as_complex(x: torch.Tensor) -> torch.Tensor:
    real = x.double() if x.dtype == torch.float64 else x.float()
    if x.shape[-1] == 1:
        return real[..., 0].to(torch.complex128 if real.dtype == torch.float64 else torch.complex64)
    if x.shape[-1] == 2:
        return torch.complex(real[..., 0], real[..., 1])
    raise ValueError(f"the last dimension must be 1 (real) or 2 (complex), got shape {tuple(x.shape)}")


def _as_pairs(z: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.stack([z.real, z.imag], dim=-1).to(dtype)


def _dft(x: torch.Tensor, dft_length: Any, axis: int, inverse: int, onesided: int) -> torch.Tensor:
    """DFT: on the CPU the forward values are NumPy's FFT (the reference's, to the bit; torch.fft
    rounds differently, and ONNX's data holds NumPy's rounding noise where the exact answer is 0)
    with torch.fft's gradient; on other devices and under tracing (torch.export) torch.fft alone."""
    n = ints(dft_length)[0] if dft_length is not None else None
    if type(x) is torch.Tensor and x.device.type == "cpu" and not torch.compiler.is_compiling() \
            and x.dtype in (torch.float16, torch.float32, torch.float64):
        return _NumpyForwardDFT.apply(x, n, axis, inverse, onesided)
    return _torch_dft(x, n, axis, inverse, onesided)


class _NumpyForwardDFT(torch.autograd.Function):
    """Forward: the reference kernel's np.fft; backward: the vector-Jacobian product of torch.fft's
    formulation of the same (linear) map."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, n: int | None, axis: int, inverse: int, onesided: int) -> torch.Tensor:
        from sealtrace.ops.signal import _dft as reference_dft

        ctx.save_for_backward(x)
        ctx.settings = (n, axis, inverse, onesided)
        length = None if n is None else np.asarray([n], dtype=np.int64)
        return torch.from_numpy(np.array(reference_dft(x.detach().numpy(), length, axis, inverse, onesided)))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            leaf = x.detach().requires_grad_(True)
            (grad_x,) = torch.autograd.grad(_torch_dft(leaf, *ctx.settings), leaf, grad)
        return grad_x, None, None, None, None


def _torch_dft(x: torch.Tensor, n: int | None, axis: int, inverse: int, onesided: int) -> torch.Tensor:
    rank = x.dim()
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank - 1:
        raise ValueError(f"DFT axis {axis} is out of range for an input of rank {rank}")
    signal = _as_complex(x)
    if n is None:
        n = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    if inverse and onesided:
        return torch.fft.irfft(signal, n=n, dim=axis).unsqueeze(-1).to(x.dtype)
    spectrum = torch.fft.ifft(signal, n=n, dim=axis) if inverse else torch.fft.fft(signal, n=n, dim=axis)
    if onesided:
        spectrum = spectrum.narrow(axis, 0, n // 2 + 1)
    return _as_pairs(spectrum, x.dtype)


@register("DFT", 17, static=(1,))
def dft_17(x: torch.Tensor, dft_length: Any = None, *, axis: int = 1, inverse: int = 0, onesided: int = 0
           ) -> torch.Tensor:
    """DFT-17: axis as an attribute."""
    return _dft(x, dft_length, axis, inverse, onesided)


@register("DFT", 20, static=(1, 2))
def dft_20(x: torch.Tensor, dft_length: Any = None, axis: Any = None, *, inverse: int = 0, onesided: int = 0
           ) -> torch.Tensor:
    """DFT-20: axis as an optional input (default -2)."""
    chosen = ints(axis) if axis is not None else []
    return _dft(x, dft_length, chosen[0] if chosen else -2, inverse, onesided)


@register("STFT", *reference_versions("STFT"), static=(1, 3))
def stft(signal: torch.Tensor, frame_step: Any, window: torch.Tensor | None = None, frame_length: Any = None, *,
         onesided: int = 1) -> torch.Tensor:
    """STFT: windowed DFTs of frames; output [batch, frames, bins, 2]."""
    step = ints(frame_step)[0]
    length = ints(frame_length)[0] if frame_length is not None else (
        window.shape[0] if window is not None else signal.shape[1])
    z = _as_complex(signal)
    frames = z.unfold(1, length, step)  # [batch, frames, length]
    if window is not None:
        frames = frames * window.to(frames.real.dtype)
    spectrum = torch.fft.fft(frames, dim=-1)
    if onesided:
        spectrum = spectrum[..., : length // 2 + 1]
    return _as_pairs(spectrum, signal.dtype)


@register("MelWeightMatrix", *reference_versions("MelWeightMatrix"), static=(0, 1, 2, 3, 4))
def mel_weight_matrix(num_mel_bins: Any, dft_length: Any, sample_rate: Any, lower_edge_hertz: Any,
                      upper_edge_hertz: Any, *, output_datatype: int = 1) -> torch.Tensor:
    """MelWeightMatrix: a constant of its scalar inputs, computed by the reference kernel."""
    arrays = [np.asarray(static_array(v)) for v in (num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
                                                      upper_edge_hertz)]
    return from_numpy(_reference_mel(*arrays, output_datatype=output_datatype))
