"""Convolution kernels: Conv, ConvInteger, QLinearConv, DeformConv, CausalConvWithState; they run
on the matrix-product engine of ``_convolution`` (its docstring tells how).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sealtrace.ops import numerics
from sealtrace.ops._convolution import (
    Products,
    conv_geometry,
    convolve,
    depthwise_conv,
    float8_in_float32,
    group_bias,
    kernel_of,
    one_block_conv,
)
from sealtrace.ops._values import take_along_axis
from sealtrace.ops._windows import Array, Window, resolve_window
from sealtrace.ops.registry import register


@register("Conv", 1, 11, 22)
@float8_in_float32
def conv(
    x: Array,
    w: Array,
    b: Array | None = None,
    *,
    auto_pad: str,
    dilations: Sequence[int] | None,
    group: int,
    kernel_shape: Sequence[int] | None,
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
) -> Array:
    """ONNX Conv (versions 1, 11, 22): N-D grouped, dilated, strided, padded convolution; each
    float output RN(sum of its products + bias) (docs/numerics.md)."""
    products = Products(x.dtype)
    geometry = conv_geometry(x, w, kernel_shape, strides, dilations, pads, auto_pad)
    if geometry.one_block:
        y = one_block_conv(x, w, b, geometry, group, products)
    else:
        y = convolve(x, w, geometry.window, group, products, b)
    return y.astype(x.dtype, copy=False)


@register("ConvInteger", 10)
def conv_integer(
    x: Array,
    w: Array,
    x_zero_point: Array | None = None,
    w_zero_point: Array | None = None,
    *,
    auto_pad: str,
    dilations: Sequence[int] | None,
    group: int,
    kernel_shape: Sequence[int] | None,
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
) -> Array:
    """ONNX ConvInteger (version 10): integer convolution with zero points, int32 output."""
    window = resolve_window(x.shape[2:], kernel_of(w, kernel_shape), strides, dilations, pads, auto_pad)
    return _integer_accumulate(x, w, x_zero_point, w_zero_point, window, group)


def _integer_accumulate(
    x: Array, w: Array, x_zero_point: Array | None, w_zero_point: Array | None, window: Window, group: int
) -> Array:
    """Exact int32 sum of (x - x_zp) * (w - w_zp); padding acts as the zero point.

    float64 GEMM is exact here: every partial sum of 8-bit products stays far below 2**53.
    """
    xf = x.astype(np.float64)
    if x_zero_point is not None:
        xf -= np.float64(np.asarray(x_zero_point).reshape(-1)[0])
    wf = w.astype(np.float64)
    if w_zero_point is not None:
        wz = np.asarray(w_zero_point, dtype=np.float64).reshape(-1)
        wf -= wz.reshape((-1,) + (1,) * (w.ndim - 1)) if wz.size > 1 else wz[0]
    return convolve(xf, wf, window, group, Products(xf.dtype, integer=True), None).astype(np.int32)


@register("QLinearConv", 10)
def qlinear_conv(
    x: Array,
    x_scale: Array,
    x_zero_point: Array,
    w: Array,
    w_scale: Array,
    w_zero_point: Array,
    y_scale: Array,
    y_zero_point: Array,
    b: Array | None = None,
    *,
    auto_pad: str,
    dilations: Sequence[int] | None,
    group: int,
    kernel_shape: Sequence[int] | None,
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
) -> Array:
    """ONNX QLinearConv (version 10): quantized convolution, requantized as ONNX Runtime does."""
    window = resolve_window(x.shape[2:], kernel_of(w, kernel_shape), strides, dilations, pads, auto_pad)
    acc = _integer_accumulate(x, w, x_zero_point, w_zero_point, window, group)
    if b is not None:
        acc += b.astype(np.int32).reshape((-1,) + (1,) * (acc.ndim - 2))
    # The multiplier is formed in float32 and applied to the float32 accumulator, then rounded
    # half to even: ONNX Runtime's requantization.
    w_scale32 = np.asarray(w_scale, dtype=np.float32).reshape(-1)
    multiplier = (np.float32(np.asarray(x_scale).reshape(-1)[0]) * w_scale32) / np.float32(
        np.asarray(y_scale).reshape(-1)[0]
    )
    multiplier = multiplier.reshape((-1,) + (1,) * (acc.ndim - 2)) if multiplier.size > 1 else multiplier[0]
    out_dtype = np.asarray(y_zero_point).dtype
    info = np.iinfo(out_dtype)
    y = np.rint(acc.astype(np.float32) * multiplier) + np.float32(np.asarray(y_zero_point).reshape(-1)[0])
    return np.clip(y, info.min, info.max).astype(out_dtype)


@register("DeformConv", 19, 22)
def deform_conv(
    x: Array,
    w: Array,
    offset: Array,
    b: Array | None = None,
    mask: Array | None = None,
    *,
    dilations: Sequence[int] | None,
    group: int,
    kernel_shape: Sequence[int] | None,
    offset_group: int,
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
) -> Array:
    """ONNX DeformConv (versions 19, 22), 2-D: bilinear sampling at offset taps, then GEMM."""
    if x.ndim != 4:
        raise NotImplementedError(f"DeformConv: only 2-D inputs are supported, got {x.shape}")
    if x.dtype != np.float32 and x.dtype != np.float64:
        # half precision and float8: the sampling and the products in float32, rounded once
        wide = [None if v is None else v.astype(np.float32) for v in (b, mask)]
        return deform_conv(
            x.astype(np.float32),
            w.astype(np.float32),
            offset.astype(np.float32),
            wide[0],
            wide[1],
            dilations=dilations,
            group=group,
            kernel_shape=kernel_shape,
            offset_group=offset_group,
            pads=pads,
            strides=strides,
        ).astype(x.dtype)
    dtype = x.dtype
    products = Products(dtype)
    n, c, h, wd = x.shape
    m = w.shape[0]
    kh, kw = kernel_of(w, kernel_shape)
    sh, sw = strides if strides else (1, 1)
    dh, dw = dilations if dilations else (1, 1)
    ph, pw = (pads[0], pads[1]) if pads else (0, 0)
    oh, ow = offset.shape[2:]
    if n * m * oh * ow == 0:  # (a [2**40, C, 0, W] input: no image to step through)
        return np.zeros((n, m, oh, ow), x.dtype)
    og = offset_group
    k = kh * kw
    length = oh * ow
    cog = c // og
    off = offset.astype(dtype, copy=False).reshape(n, og, k, 2, length)
    # Where each (tap, output) samples before the learned offset.
    base_y = (np.arange(kh) * dh).repeat(kw)[:, None] + (np.arange(oh) * sh - ph).repeat(ow)[None, :]
    base_x = np.tile(np.arange(kw) * dw, kh)[:, None] + np.tile(np.arange(ow) * sw - pw, oh)[None, :]
    py = base_y.astype(dtype) + off[:, :, :, 0]  # [N, og, K, L]
    px = base_x.astype(dtype) + off[:, :, :, 1]
    y0 = np.floor(py)
    x0 = np.floor(px)
    ly = py - y0
    lx = px - x0
    y0i = y0.astype(np.int64)
    x0i = x0.astype(np.int64)
    sampled = np.zeros((n, og, cog, k * length), dtype=dtype)
    flat = x.astype(dtype, copy=False).reshape(n, og, cog, h * wd)
    for yi, xi, weight in (
        (y0i, x0i, (1 - ly) * (1 - lx)),
        (y0i, x0i + 1, (1 - ly) * lx),
        (y0i + 1, x0i, ly * (1 - lx)),
        (y0i + 1, x0i + 1, ly * lx),
    ):
        # Bilinear with zeros outside the image, corner by corner (torchvision / ONNX Runtime).
        valid = (yi >= 0) & (yi < h) & (xi >= 0) & (xi < wd)
        index = (np.clip(yi, 0, h - 1) * wd + np.clip(xi, 0, wd - 1)).reshape(n, og, 1, k * length)
        values = take_along_axis(flat, index, axis=3)
        sampled += values * np.where(valid, weight, 0).reshape(n, og, 1, k * length).astype(dtype)
    sampled = sampled.reshape(n, og, cog, k, length)
    if mask is not None:
        sampled *= mask.astype(dtype, copy=False).reshape(n, og, 1, k, length)
    cg = c // group
    cols = sampled.reshape(n, group, cg * k, length)
    wg = w.reshape(group, m // group, cg * k)
    y = np.stack(
        [products(wg, cols[image].astype(products.cols_dtype), group_bias(b, group)) for image in range(n)]
    )
    return y.reshape(n, m, oh, ow).astype(x.dtype, copy=False)


@register("CausalConvWithState", 27)
def causal_conv_with_state(
    x: Array,
    weight: Array,
    bias: Array | None = None,
    past_state: Array | None = None,
    *,
    activation: str,
) -> tuple[Array, Array]:
    """ONNX CausalConvWithState (version 27): stateful causal depthwise 1-D conv (+ SiLU)."""
    if activation not in ("none", "silu", "swish"):
        raise ValueError(f"CausalConvWithState: unknown activation {activation!r}")
    batch, channels, _ = x.shape
    k = weight.shape[2]
    if past_state is None:
        past_state = np.zeros((batch, channels, k - 1), dtype=x.dtype)
    padded = np.concatenate([past_state, x], axis=2)
    products = Products(x.dtype)
    window = resolve_window(padded.shape[2:], (k,), None, None, None)
    y = depthwise_conv(padded, weight.reshape(channels, k), window, products, bias)
    if activation != "none":
        y = numerics.apply("swish", y, 1.0)  # SiLU: RN(y * sigmoid(y))
    present = np.ascontiguousarray(padded[:, :, padded.shape[2] - (k - 1) :])
    return y.astype(x.dtype, copy=False), present
