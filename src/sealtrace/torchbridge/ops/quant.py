"""QuantizeLinear / DequantizeLinear (per-tensor, per-axis and blocked): torch translations."""

from __future__ import annotations

from typing import Any

import torch

from sealtrace.torchbridge.registry import reference_versions, register


def _broadcast(v: torch.Tensor, x: torch.Tensor, axis: int, block_size: int) -> torch.Tensor:
    if v.dim() == 0 or (v.numel() == 1 and x.dim() <= 1):
        return v.reshape(())
    a = axis + x.dim() if axis < 0 else axis
    if block_size:
        v = v.repeat_interleave(block_size, dim=a).narrow(a, 0, x.shape[a])
        return v
    view = [1] * x.dim()
    view[a] = -1
    return v.reshape(view)


@register("DequantizeLinear", *reference_versions("DequantizeLinear"))
def dequantize_linear(x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None = None, *,
                      axis: int = 1, block_size: int = 0, output_dtype: int = 0, **_: Any) -> torch.Tensor:
    """DequantizeLinear: (x - zero_point) * scale, in the scale's dtype."""
    s = _broadcast(scale, x, axis, block_size)
    shifted = x.to(torch.int32 if not x.is_floating_point() else x.dtype)
    if zero_point is not None:
        shifted = shifted - _broadcast(zero_point, x, axis, block_size).to(shifted.dtype)
    return shifted.to(scale.dtype) * s


@register("QuantizeLinear", *reference_versions("QuantizeLinear"))
def quantize_linear(x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None = None, *,
                    axis: int = 1, block_size: int = 0, output_dtype: int = 0, saturate: int = 1,
                    precision: int = 0, **_: Any) -> torch.Tensor:
    """QuantizeLinear to (u)int8/(u)int16: round half to even, add zero point, saturate."""
    target = zero_point.dtype if zero_point is not None else torch.uint8
    if output_dtype:
        from sealtrace.torchbridge.dtypes import torch_dtype

        target = torch_dtype(output_dtype)
    if target.is_floating_point:
        raise ValueError("float8 quantization has no torch translation here")
    y = torch.round(x / _broadcast(scale, x, axis, block_size).to(x.dtype))
    if zero_point is not None:
        y = y + _broadcast(zero_point, x, axis, block_size).to(y.dtype)
    info = torch.iinfo(target)
    return torch.clamp(y, info.min, info.max).to(target)
