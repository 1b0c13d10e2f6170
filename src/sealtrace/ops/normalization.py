"""Normalizations: BatchNormalization, InstanceNormalization, LayerNormalization,
GroupNormalization, RMSNormalization, LRN, MeanVarianceNormalization, LpNormalization.

Statistics are computed in float32 for float16/bfloat16/float32 inputs (ONNX Runtime does the
same; ``stash_type=1`` asks for it) and in float64 for float64 inputs; results are cast back once.
Means and norms are correctly rounded reductions of ``numerics``; the other steps are exact IEEE
operations in that type, in the order docs/numerics.md gives for each operator.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from sealtrace.ops import numerics
from sealtrace.ops._values import remember
from sealtrace.ops.registry import VARIES, KernelFn, register, specializes

Array = np.ndarray[Any, Any]


def _work_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype statistics are computed in: float64 stays, every narrower float goes to float32."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _stash_dtype(stash_type: int) -> np.dtype[Any]:
    """The ONNX TensorProto element type a ``stash_type`` attribute names."""
    return {
        1: np.dtype(np.float32),
        10: np.dtype(np.float16),
        11: np.dtype(np.float64),
        16: np.dtype(ml_dtypes.bfloat16),
    }[stash_type]


def _channel_shaped(param: Array, x: Array, work: np.dtype[Any]) -> Array:
    """A per-channel (C,) parameter as (C, 1, ..., 1); a per-activation one as X's shape without N."""
    param = param.astype(work, copy=False)
    if param.size == x.shape[1] and param.ndim <= 1:
        return param.reshape((-1,) + (1,) * (x.ndim - 2))
    return param.reshape(x.shape[1:])


def _batch_norm_inference(x: Array, scale: Array, b: Array, mean: Array, var: Array, epsilon: float) -> Array:
    return _scale_and_shift(x, *_batch_norm_folded(x, scale, b, mean, var, epsilon))


def _batch_norm_folded(
    x: Array, scale: Array, b: Array, mean: Array, var: Array, epsilon: float
) -> tuple[Array, Array]:
    """The per-channel factor and offset that make inference BatchNormalization one multiply-add
    per element, as ONNX Runtime's kernel does, shaped to broadcast against ``x``."""
    work = _work_dtype(x.dtype)
    factor = _channel_shaped(scale, x, work) / np.sqrt(_channel_shaped(var, x, work) + work.type(epsilon))
    offset = _channel_shaped(b, x, work) - _channel_shaped(mean, x, work) * factor
    return factor, offset


def _scale_and_shift(x: Array, factor: Array, offset: Array) -> Array:
    y = x.astype(factor.dtype, copy=False) * factor
    y += offset
    return y.astype(x.dtype, copy=False)


@register("BatchNormalization", 1, 6)
def batch_norm_v1(
    x: Array,
    scale: Array,
    b: Array,
    mean: Array,
    var: Array,
    *,
    epsilon: float,
    is_test: int,
    momentum: float,
    spatial: int,
    consumed_inputs: tuple[int, ...] | None = None,
) -> tuple[Array, ...]:
    """ONNX BatchNormalization v1/v6, inference semantics (the given running statistics are used)."""
    # The optional training outputs are passed through unchanged: inference never updates them.
    return (_batch_norm_inference(x, scale, b, mean, var, epsilon), mean, var, mean, var)


@register("BatchNormalization", 7)
def batch_norm_v7(
    x: Array, scale: Array, b: Array, mean: Array, var: Array, *, epsilon: float, momentum: float, spatial: int
) -> tuple[Array, ...]:
    """ONNX BatchNormalization v7 (``spatial`` selects per-channel vs per-activation statistics)."""
    return (_batch_norm_inference(x, scale, b, mean, var, epsilon), mean, var, mean, var)


@register("BatchNormalization", 9)
def batch_norm_v9(
    x: Array, scale: Array, b: Array, mean: Array, var: Array, *, epsilon: float, momentum: float
) -> tuple[Array, ...]:
    """ONNX BatchNormalization v9, inference semantics (``momentum`` only matters in training)."""
    return (_batch_norm_inference(x, scale, b, mean, var, epsilon), mean, var, mean, var)


@register("BatchNormalization", 14, 15)
def batch_norm_v14(
    x: Array,
    scale: Array,
    b: Array,
    input_mean: Array,
    input_var: Array,
    *,
    epsilon: float,
    momentum: float,
    training_mode: int,
) -> tuple[Array, ...]:
    """ONNX BatchNormalization v14/v15: inference, or training mode with updated running statistics."""
    if not training_mode:
        return _batch_norm_inference(x, scale, b, input_mean, input_var, epsilon), input_mean, input_var
    work = _work_dtype(x.dtype)
    xw = x.astype(work, copy=False)
    axes = (0, *range(2, x.ndim))
    current_mean = numerics.reduce_mean(xw, axes)
    # population variance, as the spec says: the mean of the squared deviations
    deviation = xw - current_mean
    current_var = numerics.reduce_mean(deviation * deviation, axes).reshape(-1)
    current_mean = current_mean.reshape(-1)
    y = _batch_norm_inference(x, scale, b, current_mean, current_var, epsilon)
    m = work.type(momentum)
    running_mean = input_mean.astype(work) * m + current_mean * (1 - m)
    running_var = input_var.astype(work) * m + current_var * (1 - m)
    return y, running_mean.astype(input_mean.dtype), running_var.astype(input_var.dtype)


@specializes(batch_norm_v7, batch_norm_v9, batch_norm_v14)
def _batch_norm_constant_statistics(inputs: tuple[Any, ...], attributes: Any) -> KernelFn | None:
    """Inference BatchNormalization of constant statistics (every convolutional network's): the
    factor and offset computed once per input layout instead of in eight small NumPy calls."""
    if any(value is VARIES for value in inputs[1:5]) or attributes.get("training_mode", 0):
        return None
    scale, b, mean, var = inputs[1:5]
    epsilon = attributes["epsilon"]
    passed_through = (mean, var) if "training_mode" in attributes else (mean, var, mean, var)
    folded: dict[tuple[Any, ...], tuple[Array, Array]] = {}

    def run(x: Array, *_statistics: Any) -> tuple[Array, ...]:
        key = (x.shape[1:], x.dtype)
        pair = folded.get(key)
        if pair is None:
            pair = remember(folded, key, _batch_norm_folded(x, scale, b, mean, var, epsilon))
        return (_scale_and_shift(x, *pair), *passed_through)

    return run


@register("InstanceNormalization", 1, 6, 22)
def instance_norm(
    x: Array, scale: Array, b: Array, *, epsilon: float, consumed_inputs: tuple[int, ...] | None = None
) -> Array:
    """ONNX InstanceNormalization v1/6/22: per (instance, channel) statistics over spatial axes."""
    if x.size == 0:  # (the statistics of a [2**40, C, 0] input alone would take terabytes)
        return x.copy()
    work = _work_dtype(x.dtype)
    xw = x.astype(work, copy=False)
    axes = tuple(range(2, x.ndim))
    mean = numerics.reduce_mean(xw, axes)
    y = xw - mean
    var = numerics.reduce_mean(y * y, axes)
    y *= _channel_shaped(scale, x, work) / np.sqrt(var + work.type(epsilon))
    y += _channel_shaped(b, x, work)
    return y.astype(x.dtype, copy=False)


def _standardize(xw: Array, axes: tuple[int, ...], epsilon: float) -> tuple[Array, Array, Array]:
    """LayerNormalization's body over ``axes``: D = X - ReduceMean(X), StdDev = Sqrt(Var + eps),
    D / StdDev, with the kept-dims mean and 1 / StdDev. The variance is ReduceMean(D * D), the
    two-pass form: the body's ReduceMean(X * X) - Mean * Mean cancels, down to negative variances,
    where the mean is large against the spread."""
    mean = numerics.reduce_mean(xw, axes)
    centered = xw - mean
    var = numerics.reduce_mean(centered * centered, axes)
    std = np.sqrt(var + xw.dtype.type(epsilon))
    centered /= std
    return centered, mean, np.reciprocal(std)


@register("LayerNormalization", 17)
def layer_norm(
    x: Array, scale: Array, b: Array | None = None, *, axis: int, epsilon: float, stash_type: int
) -> tuple[Array, Array, Array]:
    """ONNX LayerNormalization v17: normalize over axes [axis, rank); outputs Y, Mean, InvStdDev."""
    stash = _stash_dtype(stash_type)
    work = np.dtype(np.float64) if x.dtype == np.float64 else _work_dtype(stash)
    axis = axis + x.ndim if axis < 0 else axis
    y, mean, inv_std = _standardize(x.astype(work, copy=False), tuple(range(axis, x.ndim)), epsilon)
    y *= scale.astype(work, copy=False)
    if b is not None:
        y += b.astype(work, copy=False)
    return y.astype(x.dtype, copy=False), mean.astype(stash), inv_std.astype(stash)


def _group_norm(
    x: Array, scale: Array, bias: Array, num_groups: int, epsilon: float, work: np.dtype[Any], per_channel: bool
) -> Array:
    if x.size == 0:  # (the statistics of a [2**40, C, 0] input alone would take terabytes)
        return x.copy()
    grouped = x.astype(work, copy=False).reshape(x.shape[0], num_groups, -1)
    y, _, _ = _standardize(grouped, (2,), epsilon)
    if per_channel:
        y = y.reshape(x.shape)
        y *= _channel_shaped(scale, x, work)
        y += _channel_shaped(bias, x, work)
    else:
        y *= scale.astype(work).reshape(num_groups, 1)
        y += bias.astype(work).reshape(num_groups, 1)
    return y.reshape(x.shape).astype(x.dtype, copy=False)


@register("GroupNormalization", 18)
def group_norm_v18(x: Array, scale: Array, bias: Array, *, epsilon: float, num_groups: int) -> Array:
    """ONNX GroupNormalization v18: scale and bias hold one value per group."""
    return _group_norm(x, scale, bias, num_groups, epsilon, _work_dtype(x.dtype), per_channel=False)


@register("GroupNormalization", 21)
def group_norm_v21(
    x: Array, scale: Array, bias: Array, *, epsilon: float, num_groups: int, stash_type: int
) -> Array:
    """ONNX GroupNormalization v21: scale and bias hold one value per channel."""
    work = np.dtype(np.float64) if x.dtype == np.float64 else _work_dtype(_stash_dtype(stash_type))
    return _group_norm(x, scale, bias, num_groups, epsilon, work, per_channel=True)


@register("RMSNormalization", 23)
def rms_norm(x: Array, scale: Array, *, axis: int, epsilon: float, stash_type: int) -> Array:
    """ONNX RMSNormalization v23: x / sqrt(mean(x^2) + eps) * scale over axes [axis, rank)."""
    work = np.dtype(np.float64) if x.dtype == np.float64 else _work_dtype(_stash_dtype(stash_type))
    axis = axis + x.ndim if axis < 0 else axis
    xw = x.astype(work, copy=False)
    mean_square = numerics.reduce_mean(xw * xw, tuple(range(axis, x.ndim)))
    y = xw / np.sqrt(mean_square + work.type(epsilon))
    y *= scale.astype(work, copy=False)
    return y.astype(scale.dtype, copy=False)


@register("LRN", 1, 13)
def lrn(x: Array, *, alpha: float, beta: float, bias: float, size: int) -> Array:
    """ONNX LRN v1/13: local response normalization across channels."""
    work = _work_dtype(x.dtype)
    xw = x.astype(work, copy=False)
    square = np.square(xw)
    before, after = (size - 1) // 2, size // 2  # floor and ceil of (size - 1) / 2
    pad = [(0, 0)] * x.ndim
    pad[1] = (before, after)
    padded = np.pad(square, pad)
    channels = x.shape[1]
    square_sum = np.zeros_like(square)
    for offset in range(size):  # a few window taps along the channel axis
        square_sum += padded[:, offset : offset + channels]
    base = work.type(bias) + work.type(alpha / size) * square_sum
    denominator = numerics.power(base, np.asarray(beta, dtype=work))
    return (xw / denominator).astype(x.dtype, copy=False)


@register("MeanVarianceNormalization", 9, 13)
def mean_variance_norm(x: Array, *, axes: tuple[int, ...]) -> Array:
    """ONNX MeanVarianceNormalization v9/13: (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9)."""
    work = _work_dtype(x.dtype)
    xw = x.astype(work, copy=False)
    reduce_axes = tuple(sorted(a + x.ndim if a < 0 else a for a in axes))
    mean = numerics.reduce_mean(xw, reduce_axes)
    mean_square = numerics.reduce_mean(xw * xw, reduce_axes)
    # The function body's E[X^2] - E[X]^2 can round below zero; clamp so sqrt stays real.
    std = np.sqrt(np.maximum(mean_square - np.square(mean), 0))
    return ((xw - mean) / (std + work.type(1e-9))).astype(x.dtype, copy=False)


@register("LpNormalization", 1, 22)
def lp_norm(x: Array, *, axis: int, p: int) -> Array:
    """ONNX LpNormalization v1/22: x / ||x||_p along ``axis`` (p is 1 or 2); a zero norm gives 0."""
    work = _work_dtype(x.dtype)
    xw = x.astype(work, copy=False)
    axes = (axis % x.ndim,)
    if p == 1:
        norm = numerics.reduce_l1(xw, axes)
    elif p == 2:
        norm = numerics.reduce_l2(xw, axes)
    else:
        raise ValueError(f"LpNormalization supports p=1 or p=2, got p={p}")
    safe = np.where(norm == 0, work.type(1), norm)
    y = np.where(norm == 0, work.type(0), xw / safe)
    return y.astype(x.dtype, copy=False)
