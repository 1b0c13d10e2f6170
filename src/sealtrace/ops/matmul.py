"""Matrix products: MatMul, Gemm, Einsum, MatMulInteger, QLinearMatMul, Det."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sealtrace.ops import numerics
from sealtrace.ops.registry import register

Array = np.ndarray[Any, Any]


def _via_float32(dtype: np.dtype[Any]) -> bool:
    """float8 and the other ml_dtypes floats numerics has no format for are computed in float32."""
    return dtype.kind == "V" and numerics.format_of(dtype) is None


@register("MatMul", 1, 9, 13)
def matmul(a: Array, b: Array) -> Array:
    """ONNX MatMul v1/9/13: numpy.matmul semantics (1-D promotion, batched broadcast); each float
    element RN(sum_k a_k b_k) (docs/numerics.md)."""
    if _via_float32(a.dtype):
        return numerics.matmul(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)
    return numerics.matmul(a, b)


def _gemm(a: Array, b: Array, c: Array | None, alpha: float, beta: float, trans_a: int, trans_b: int) -> Array:
    if _via_float32(a.dtype):
        wide_c = None if c is None else c.astype(np.float32)
        return _gemm(a.astype(np.float32), b.astype(np.float32), wide_c, alpha, beta, trans_a, trans_b).astype(a.dtype)
    return numerics.gemm(a, b, c, alpha, beta, bool(trans_a), bool(trans_b))


@register("Gemm", 1, 6)
def gemm_v1(
    a: Array,
    b: Array,
    c: Array | None = None,
    *,
    alpha: float,
    beta: float,
    broadcast: int,
    transA: int,
    transB: int,
) -> Array:
    """ONNX Gemm v1/v6: C broadcasts to the product (the ``broadcast`` flag only licensed it)."""
    return _gemm(a, b, c, alpha, beta, transA, transB)


@register("Gemm", 7, 9, 11, 13)
def gemm(
    a: Array, b: Array, c: Array | None = None, *, alpha: float, beta: float, transA: int, transB: int
) -> Array:
    """ONNX Gemm v7/9/11/13: Y = alpha * A' B' + beta * C with unidirectional broadcast of C, each
    float element one rounding of the exact value."""
    return _gemm(a, b, c, alpha, beta, transA, transB)


@register("Einsum", 12, 28)
def einsum(*inputs: Array, equation: str) -> Array:
    """ONNX Einsum v12/28: each float element RN(sum of its products)."""
    if _via_float32(inputs[0].dtype):
        return numerics.einsum(equation.strip(), *(x.astype(np.float32) for x in inputs)).astype(inputs[0].dtype)
    return numerics.einsum(equation.strip(), *inputs)


def _zero_point_rows(zp: Array | None, a: Array) -> Array | int:
    """A's zero point as a column (1-D per-row zero points broadcast along rows)."""
    if zp is None:
        return 0
    zp = zp.astype(np.int32)
    if zp.ndim == 1 and zp.size > 1 and a.ndim >= 2:
        return zp.reshape(-1, 1)
    return zp


def _exact_int_matmul(a: Array, b: Array) -> Array:
    """Integer product of 8-bit operands computed through float64 BLAS (exact below 2**53)."""
    shape = numerics.matmul_shape(a.shape, b.shape)
    if math.prod(shape) == 0:  # np.matmul would still step through every (possibly 2**40) batch
        return np.zeros(shape)
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


@register("MatMulInteger", 10)
def matmul_integer(
    a: Array, b: Array, a_zero_point: Array | None = None, b_zero_point: Array | None = None
) -> Array:
    """ONNX MatMulInteger v10: (A - a_zp) @ (B - b_zp) in int32."""
    a32 = a.astype(np.int32) - _zero_point_rows(a_zero_point, a)
    b32 = b.astype(np.int32) - (0 if b_zero_point is None else b_zero_point.astype(np.int32))
    return _exact_int_matmul(a32, b32).astype(np.int32)


def _dequantized_operand(x: Array, zp: Array | None, per_row: bool) -> Array:
    if x.dtype.kind == "V":  # float8: zero point is ignored for float types (always 0)
        return x.astype(np.float32)
    zero = _zero_point_rows(zp, x) if per_row else (0 if zp is None else zp.astype(np.int32))
    return x.astype(np.int32) - zero


@register("QLinearMatMul", 10, 21)
def qlinear_matmul(
    a: Array,
    a_scale: Array,
    a_zero_point: Array | None,
    b: Array,
    b_scale: Array,
    b_zero_point: Array | None,
    y_scale: Array,
    y_zero_point: Array | None = None,
) -> Array:
    """ONNX QLinearMatMul v10/21: quantized product requantized to y's scale and zero point."""
    acc = _exact_int_matmul(_dequantized_operand(a, a_zero_point, True), _dequantized_operand(b, b_zero_point, False))
    a_s = a_scale.astype(np.float32)
    if a_s.ndim == 1 and a_s.size > 1:
        a_s = a_s.reshape(-1, 1)
    multiplier = a_s * b_scale.astype(np.float32) / y_scale.astype(np.float32)
    y = acc.astype(np.float32) * multiplier
    out_dtype = y_zero_point.dtype if y_zero_point is not None else a.dtype
    if out_dtype.kind == "V":  # float8 output: saturating cast of the scaled value
        return y.astype(out_dtype)
    y = np.rint(y)
    if y_zero_point is not None:
        y = y + y_zero_point.astype(np.float32)
    info = np.iinfo(out_dtype)
    return np.clip(y, info.min, info.max).astype(out_dtype)


@register("Det", 11, 22)
def det(x: Array) -> Array:
    """ONNX Det v11/22: RN(the exact determinant) of each trailing square matrix."""
    if _via_float32(x.dtype):
        return numerics.determinant(x.astype(np.float32)).astype(x.dtype)
    return numerics.determinant(x)
