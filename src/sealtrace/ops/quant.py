"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear.

Portable as written: every step is an IEEE operation (division, multiplication, addition, rint,
clip, max/min) in the compute type (float32, or float64 for float64 scales), then one rounding
into the output type (a float64 into float8/float4 rounded once here, not through float32)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from onnx.helper import tensor_dtype_to_np_dtype

from sealtrace.ops import numerics
from sealtrace.ops.registry import register

# Integer quantized types saturate to their own range; ml_dtypes' int4/int2 report it via iinfo.
_FLOAT8_SATURATING_INF = {np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)}
_FLOAT8_FNUZ = {np.dtype(ml_dtypes.float8_e4m3fnuz), np.dtype(ml_dtypes.float8_e5m2fnuz)}
_SMALL_FLOATS = {
    np.dtype(t)
    for t in (
        ml_dtypes.float4_e2m1fn,
        getattr(ml_dtypes, "float6_e2m3fn", ml_dtypes.float4_e2m1fn),
        getattr(ml_dtypes, "float6_e3m2fn", ml_dtypes.float4_e2m1fn),
    )
}


def _is_integer(dtype: np.dtype[Any]) -> bool:
    if dtype.kind in "iu":
        return True
    try:
        ml_dtypes.iinfo(dtype)
    except ValueError:
        return False
    return True


def _broadcastable(param: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int) -> np.ndarray:
    """Shape a scale / zero point so it broadcasts over ``shape`` (per-tensor, per-axis or blocked)."""
    if param.ndim == 0 or (param.size == 1 and not block_size):
        return param.reshape(())
    axis = axis + len(shape) if axis < 0 else axis
    if block_size:
        if param.ndim != len(shape):
            raise ValueError(f"blocked quantization needs a scale of rank {len(shape)}, got {param.shape}")
        # Every scale covers block_size consecutive elements along axis; the last block may be short.
        return np.repeat(param, block_size, axis=axis).take(np.arange(shape[axis]), axis=axis)
    if param.ndim != 1 or param.shape[0] != shape[axis]:
        raise ValueError(f"per-axis scale of shape {param.shape} does not match axis {axis} of {shape}")
    dims = [1] * len(shape)
    dims[axis] = param.shape[0]
    return param.reshape(dims)


def _compute_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """Half-precision math is carried out in float32 (as ONNX Runtime does), float64 stays float64."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _to_float(y: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """One rounding into a float8/float6/float4 type (ml_dtypes' own cast, through float32, would
    round a float64 twice)."""
    if y.dtype == np.float64:
        return numerics.round_to_narrow(y, dtype)
    return y.astype(dtype)


def _saturate_float(y: np.ndarray, dtype: np.dtype[Any], saturate: int) -> np.ndarray:
    """Cast to a float8/float4 type with the ONNX saturation tables."""
    if dtype in _SMALL_FLOATS or not saturate:
        # No inf encoding (float4/float6): the cast saturates by itself. saturate=0: plain IEEE cast.
        return _to_float(y, dtype)
    limit = float(ml_dtypes.finfo(dtype).max)
    if dtype in _FLOAT8_FNUZ:
        # The fnuz types map +-inf to NaN even when saturating; only finite values are clipped.
        y = np.where(np.isfinite(y), np.clip(y, -limit, limit), y)
        return _to_float(y, dtype)
    return _to_float(np.clip(y, -limit, limit), dtype)


def _quantize(
    x: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray | None,
    axis: int,
    saturate: int,
    block_size: int,
    output_dtype: int,
    precision: int,
) -> np.ndarray:
    if y_zero_point is not None:
        out_dtype = y_zero_point.dtype
        if output_dtype and np.dtype(tensor_dtype_to_np_dtype(output_dtype)) != out_dtype:
            raise ValueError(f"output_dtype {output_dtype} does not match the zero point's {out_dtype}")
    elif output_dtype:
        out_dtype = np.dtype(tensor_dtype_to_np_dtype(output_dtype))
    else:
        out_dtype = np.dtype(np.uint8)
    if precision:
        work = _compute_dtype(np.dtype(tensor_dtype_to_np_dtype(precision)))
    else:
        work = _compute_dtype(y_scale.dtype)
    scale = _broadcastable(y_scale, x.shape, axis, block_size).astype(work)
    y = x.astype(work) / scale
    if _is_integer(out_dtype):
        info = ml_dtypes.iinfo(out_dtype)
        y = np.rint(y)  # round half to even
        if y_zero_point is not None:
            y = y + _broadcastable(y_zero_point, x.shape, axis, block_size).astype(work)
        # NaN quantizes to the lowest value, as ONNX Runtime does (a cast of NaN is undefined).
        y = np.where(np.isnan(y), info.min, y)
        return np.clip(y, info.min, info.max).astype(out_dtype)
    if y_zero_point is not None:
        # A zero offset is not added at all, so that -0.0 keeps its sign (as in ONNX Runtime).
        offset = _broadcastable(y_zero_point, x.shape, axis, block_size).astype(work)
        y = np.where(offset == 0, y, y + offset)
    return _saturate_float(y, out_dtype, saturate)


@register("QuantizeLinear", 10)
def quantize_linear_10(
    x: np.ndarray, y_scale: np.ndarray, y_zero_point: np.ndarray | None = None
) -> np.ndarray:
    """QuantizeLinear-10: per-tensor quantization to int8/uint8."""
    return _quantize(x, y_scale, y_zero_point, 1, 1, 0, 0, 0)


@register("QuantizeLinear", 13, 19, 21, 23, 24, 25, 28)
def quantize_linear(
    x: np.ndarray,
    y_scale: np.ndarray,
    y_zero_point: np.ndarray | None = None,
    *,
    axis: int = 1,
    saturate: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
    precision: int = 0,
) -> np.ndarray:
    """QuantizeLinear-13..28: per-tensor, per-axis and blocked; integer, float8 and float4 outputs."""
    return _quantize(
        x, y_scale, y_zero_point, axis, saturate, block_size or 0, output_dtype or 0, precision or 0
    )


def _dequantize(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray | None,
    axis: int,
    block_size: int,
    output_dtype: int,
) -> np.ndarray:
    out_dtype = np.dtype(tensor_dtype_to_np_dtype(output_dtype)) if output_dtype else x_scale.dtype
    work = _compute_dtype(out_dtype)
    if _is_integer(x.dtype):
        # Subtract in integers (int32 inputs would lose bits in float32 before the subtraction).
        dx = x.astype(np.int64)
        if x_zero_point is not None:
            dx = dx - _broadcastable(x_zero_point, x.shape, axis, block_size).astype(np.int64)
        fx = dx.astype(work)
    else:
        fx = x.astype(work)
        if x_zero_point is not None:
            fx = fx - _broadcastable(x_zero_point, x.shape, axis, block_size).astype(work)
    y = fx * _broadcastable(x_scale, x.shape, axis, block_size).astype(work)
    return y.astype(out_dtype)


@register("DequantizeLinear", 10)
def dequantize_linear_10(
    x: np.ndarray, x_scale: np.ndarray, x_zero_point: np.ndarray | None = None
) -> np.ndarray:
    """DequantizeLinear-10: per-tensor dequantization of int8/uint8/int32."""
    return _dequantize(x, x_scale, x_zero_point, 1, 0, 0)


@register("DequantizeLinear", 13, 19, 21, 23, 24, 25, 28)
def dequantize_linear(
    x: np.ndarray,
    x_scale: np.ndarray,
    x_zero_point: np.ndarray | None = None,
    *,
    axis: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
) -> np.ndarray:
    """DequantizeLinear-13..28: per-tensor, per-axis and blocked; integer, float8 and float4 inputs."""
    return _dequantize(x, x_scale, x_zero_point, axis, block_size or 0, output_dtype or 0)


@register("DynamicQuantizeLinear", 11)
def dynamic_quantize_linear(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DynamicQuantizeLinear-11: uint8 quantization with scale and zero point from the data range."""
    x32 = x.astype(np.float32)
    # The range always includes 0 so that 0 is exactly representable.
    hi = np.float32(max(0.0, float(x32.max()))) if x32.size else np.float32(0)
    lo = np.float32(min(0.0, float(x32.min()))) if x32.size else np.float32(0)
    # An all-zero input gets scale 1 (ONNX Runtime), any other one spreads its range over 255 steps.
    scale = np.float32((hi - lo) / np.float32(255)) if hi != lo else np.float32(1.0)
    zero_point = np.float32(np.rint(np.clip(np.float32(0) - lo / scale, 0, 255)))
    y = np.clip(np.rint(x32 / scale) + zero_point, 0, 255).astype(np.uint8)
    return y, np.array(scale, dtype=np.float32), np.array(zero_point, dtype=np.uint8)
