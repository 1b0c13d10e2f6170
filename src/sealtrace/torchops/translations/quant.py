"""QuantizeLinear / DequantizeLinear (per-tensor, per-axis and blocked): torch translations."""

from __future__ import annotations

from typing import Any

import torch

from sealtrace.torchops.dtypes import torch_dtype
from sealtrace.torchops.registry import reference_versions, register
from sealtrace.torchops.translations.shape import NO_TORCH_DTYPE

# 2/4-bit (de)quantization: torch has no such dtype (see translations/shape.py's NO_TORCH_DTYPE).
CONFORMANCE_EXCLUSIONS: dict[str, str] = {
    f"test_{op}_{narrow}": NO_TORCH_DTYPE
    for op in ("quantizelinear", "dequantizelinear") for narrow in ("float4e2m1", "int2", "int4", "uint2", "uint4")
}


def _broadcast(v: torch.Tensor, shape: torch.Size, axis: int, block_size: int) -> torch.Tensor:
    """A scale / zero point shaped to broadcast over ``shape`` (per-tensor, per-axis or blocked)."""
    if v.dim() == 0 or (v.numel() == 1 and not block_size):
        return v.reshape(())
    a = axis + len(shape) if axis < 0 else axis
    if block_size:
        if v.dim() != len(shape):
            raise ValueError(f"blocked quantization needs a scale of rank {len(shape)}, got {tuple(v.shape)}")
        return v.repeat_interleave(block_size, dim=a).narrow(a, 0, shape[a])
    if v.dim() != 1 or v.shape[0] != shape[a]:
        raise ValueError(f"per-axis scale of shape {tuple(v.shape)} does not match axis {a} of {tuple(shape)}")
    view = [1] * len(shape)
    view[a] = -1
    return v.reshape(view)


def _work(dtype: torch.dtype) -> torch.dtype:
    """Half-precision math runs in float32 (as ONNX Runtime does); float64 stays float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


_FNUZ = (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)


@register("DequantizeLinear", *reference_versions("DequantizeLinear"))
def dequantize_linear(x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None = None, *,
                      axis: int = 1, block_size: int = 0, output_dtype: int = 0, **_: Any) -> torch.Tensor:
    """DequantizeLinear: (x - zero_point) * scale in float32 (float64 for float64), in the scale's
    dtype or ``output_dtype``; integers are shifted in int64, float8 inputs in the work dtype."""
    out_dtype = torch_dtype(output_dtype) if output_dtype else scale.dtype
    work = _work(out_dtype)
    if not x.is_floating_point():
        shifted = x.to(torch.int64)
        if zero_point is not None:
            shifted = shifted - _broadcast(zero_point, x.shape, axis, block_size).to(torch.int64)
        fx = shifted.to(work)
    else:
        fx = x.to(work)
        if zero_point is not None:
            fx = fx - _broadcast(zero_point, x.shape, axis, block_size).to(work)
    return (fx * _broadcast(scale, x.shape, axis, block_size).to(work)).to(out_dtype)


@register("QuantizeLinear", *reference_versions("QuantizeLinear"))
def quantize_linear(x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None = None, *,
                    axis: int = 1, block_size: int = 0, output_dtype: int = 0, saturate: int = 1,
                    precision: int = 0, **_: Any) -> torch.Tensor:
    """QuantizeLinear to integers (round half to even, add the zero point, saturate; NaN gives the
    lowest value, as ONNX Runtime does) or float8 (a zero offset is not added, so -0.0 keeps its
    sign; saturating casts clip to the type's range, the fnuz types keep inf for NaN)."""
    if zero_point is not None:
        target = zero_point.dtype
    elif output_dtype:
        target = torch_dtype(output_dtype)
    else:
        target = torch.uint8
    work = _work(torch_dtype(precision) if precision else scale.dtype)
    y = x.to(work) / _broadcast(scale, x.shape, axis, block_size).to(work)
    if not target.is_floating_point:
        info = torch.iinfo(target)
        y = torch.round(y)
        if zero_point is not None:
            y = y + _broadcast(zero_point, x.shape, axis, block_size).to(work)
        y = torch.where(torch.isnan(y), torch.tensor(float(info.min), dtype=work), y)
        return torch.clamp(y, info.min, info.max).to(target)
    if zero_point is not None:
        offset = _broadcast(zero_point, x.shape, axis, block_size).to(work)
        y = torch.where(offset == 0, y, y + offset)
    if saturate:
        limit = float(torch.finfo(target).max)
        clipped = torch.clamp(y, -limit, limit)
        y = torch.where(torch.isfinite(y), clipped, y) if target in _FNUZ else clipped
    return y.to(target)

def _rows_zero_point(zp: torch.Tensor | None, x: torch.Tensor) -> Any:
    """A's zero point as a column when it is per row (1-D with several values)."""
    if zp is None:
        return 0
    zp = zp.to(torch.float64)
    if zp.dim() == 1 and zp.numel() > 1 and x.dim() >= 2:
        return zp.reshape(-1, 1)
    return zp


def _requantize(acc: torch.Tensor, multiplier: torch.Tensor, y_zero_point: torch.Tensor | None,
                out_dtype: torch.dtype) -> torch.Tensor:
    """ONNX Runtime's requantization: the float32 accumulator times the float32 multiplier, rounded
    half to even, plus the zero point, saturated (a float8 output is a plain saturating cast)."""
    y = acc.to(torch.float32) * multiplier
    if out_dtype.is_floating_point:
        return y.to(out_dtype)
    y = torch.round(y)
    if y_zero_point is not None:
        y = y + y_zero_point.to(torch.float32)
    info = torch.iinfo(out_dtype)
    return torch.clamp(y, info.min, info.max).to(out_dtype)


def _operand(x: torch.Tensor, zp: torch.Tensor | None, per_row: bool) -> torch.Tensor:
    """A quantized operand minus its zero point, exact in float64 (float8 operands ignore it)."""
    if x.is_floating_point():
        return x.to(torch.float64)
    zero = _rows_zero_point(zp, x) if per_row else (0 if zp is None else zp.to(torch.float64))
    return x.to(torch.float64) - zero


@register("QLinearMatMul", *reference_versions("QLinearMatMul"))
def qlinear_matmul(a: torch.Tensor, a_scale: torch.Tensor, a_zero_point: torch.Tensor | None, b: torch.Tensor,
                   b_scale: torch.Tensor, b_zero_point: torch.Tensor | None, y_scale: torch.Tensor,
                   y_zero_point: torch.Tensor | None = None) -> torch.Tensor:
    """QLinearMatMul: the integer product (exact in float64) requantized to y's scale and zero point."""
    acc = torch.matmul(_operand(a, a_zero_point, True), _operand(b, b_zero_point, False))
    a_s = a_scale.to(torch.float32)
    if a_s.dim() == 1 and a_s.numel() > 1:
        a_s = a_s.reshape(-1, 1)
    multiplier = a_s * b_scale.to(torch.float32) / y_scale.to(torch.float32)
    out_dtype = y_zero_point.dtype if y_zero_point is not None else a.dtype
    return _requantize(acc, multiplier, y_zero_point, out_dtype)


@register("QLinearConv", *reference_versions("QLinearConv"))
def qlinear_conv(x: torch.Tensor, x_scale: torch.Tensor, x_zero_point: torch.Tensor, w: torch.Tensor,
                 w_scale: torch.Tensor, w_zero_point: torch.Tensor, y_scale: torch.Tensor,
                 y_zero_point: torch.Tensor, b: torch.Tensor | None = None, **attrs: Any) -> torch.Tensor:
    """QLinearConv: the integer convolution (exact in float64; padding acts as the zero point), plus
    the int32 bias, requantized as ONNX Runtime does (per-channel weight scales)."""
    from sealtrace.torchops.translations.nn import conv

    xf = x.to(torch.float64) - x_zero_point.to(torch.float64).reshape(-1)[0]
    wz = w_zero_point.to(torch.float64).reshape(-1)
    wf = w.to(torch.float64) - (wz.reshape(-1, *([1] * (w.dim() - 1))) if wz.numel() > 1 else wz[0])
    acc = conv(xf, wf, None, **attrs)
    if b is not None:
        acc = acc + b.to(torch.float64).reshape(-1, *([1] * (acc.dim() - 2)))
    multiplier = (x_scale.to(torch.float32).reshape(-1)[0] * w_scale.to(torch.float32).reshape(-1)) / \
        y_scale.to(torch.float32).reshape(-1)[0]
    multiplier = multiplier.reshape(-1, *([1] * (acc.dim() - 2))) if multiplier.numel() > 1 else multiplier[0]
    return _requantize(acc, multiplier, y_zero_point.reshape(-1)[0], y_zero_point.dtype)
