"""Activation functions and Softmax/LogSoftmax/Hardmax (default domain).

Float32 inputs are computed in float32 (attribute constants are converted to the input's type
first, so NumPy never promotes to float64). Formulas with several steps widen float16/bfloat16
to float32 once and round once at the end. Chains run in place on one freshly allocated buffer:
the inputs are never written.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sealtrace.ops._elementwise_common import erf, narrow, normal_cdf, quiet, widen
from sealtrace.ops.registry import register

Array = np.ndarray


_FLOAT32 = np.dtype(np.float32)
_ONE32 = np.float32(1)


def _scalar(value: float, dtype: np.dtype[Any]) -> Any:
    """An attribute constant in the computation's dtype (no float64 promotion)."""
    return dtype.type(value)


def _sigmoid_inplace(out: Array) -> Array:
    """out <- 1 / (1 + exp(-out)); saturates to 0 and 1 at the ends without NaN."""
    np.negative(out, out=out)
    return _logistic_of_negated(out)


def _logistic_of_negated(out: Array) -> Array:
    """out <- 1 / (1 + exp(out)), for ``out`` holding -x."""
    np.exp(out, out=out)
    out += out.dtype.type(1)
    # divide, not np.reciprocal: the same IEEE quotient, but NumPy vectorizes only the division
    # (measured 2x faster on float32).
    np.divide(out.dtype.type(1), out, out=out)
    return out


def _fresh(x: Array) -> Array:
    """A new, writable array holding x in its compute dtype."""
    wide = widen(x)
    return wide.copy() if wide is x else wide


# Per input dtype: Relu's zero and whether the type has a -0 to normalize (its per-call cost was a
# third of a small Relu's; ACAS Xu runs six of [1, 50]).
_RELU_ZEROS: dict[np.dtype[Any], tuple[Any, bool]] = {}


@register("Relu", 1, 6, 13, 14)
def relu(x: Array, *, consumed_inputs: tuple[int, ...] | None = None) -> Array:
    """ONNX Relu (1, 6, 13, 14; integer types from 14)."""
    known = _RELU_ZEROS.get(x.dtype)
    if known is None:
        known = _RELU_ZEROS.setdefault(x.dtype, (x.dtype.type(0), x.dtype.kind not in "iu"))
    zero, signed_zeros = known
    out = np.maximum(x, zero)
    if type(out) is not np.ndarray:  # a 0-d input gives a NumPy scalar
        out = np.asarray(out)
    if signed_zeros:
        # SIMD max(-0, +0) returns either zero depending on the CPU; adding +0 makes it +0 on
        # every machine (a select would keep -0 like ONNX Runtime, but costs 10x a max)
        out += zero
    return out


@register("LeakyRelu", 1, 6, 16)
@quiet
def leaky_relu(x: Array, *, alpha: float = 0.01, consumed_inputs: tuple[int, ...] | None = None) -> Array:
    """ONNX LeakyRelu (1, 6, 16)."""
    scaled = np.multiply(x, _scalar(alpha, x.dtype))
    return np.asarray(np.where(x < 0, scaled, x))


def _prelu(x: Array, slope: Array) -> Array:
    return np.asarray(np.where(x < 0, np.multiply(x, slope), x))


@register("PRelu", 1, 6)
@quiet
def prelu_legacy(x: Array, slope: Array, *, consumed_inputs: tuple[int, ...] | None = None) -> Array:
    """ONNX PRelu 1 and 6: slope has one value or one per channel (axis 1)."""
    if slope.size == 1:
        slope = slope.reshape(())
    elif slope.ndim == 1 and x.ndim >= 2 and slope.shape[0] == x.shape[1]:
        slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
    return _prelu(x, slope)


@register("PRelu", 7, 9, 16)
@quiet
def prelu(x: Array, slope: Array) -> Array:
    """ONNX PRelu (7, 9, 16): slope broadcasts unidirectionally to X."""
    return _prelu(x, slope)


@register("Elu", 1, 6, 22)
@quiet
def elu(x: Array, *, alpha: float = 1.0, consumed_inputs: tuple[int, ...] | None = None) -> Array:
    """ONNX Elu (1, 6, 22): x if x >= 0 else alpha * (exp(x) - 1)."""
    out = _fresh(x)
    negative = out < 0
    # expm1 is exp(x) - 1 without the cancellation near 0
    np.expm1(out, out=out, where=negative)
    np.multiply(out, _scalar(alpha, out.dtype), out=out, where=negative)
    return narrow(out, x.dtype)


@register("Selu", 1, 6, 22)
@quiet
def selu(
    x: Array,
    *,
    alpha: float = 1.67326319217681884765625,
    gamma: float = 1.05070102214813232421875,
    consumed_inputs: tuple[int, ...] | None = None,
) -> Array:
    """ONNX Selu (1, 6, 22): gamma * (x if x > 0 else alpha * exp(x) - alpha)."""
    out = _fresh(x)
    a = _scalar(alpha, out.dtype)
    nonpositive = out <= 0
    # alpha * exp(x) - alpha == alpha * expm1(x), without the cancellation near 0
    np.expm1(out, out=out, where=nonpositive)
    np.multiply(out, a, out=out, where=nonpositive)
    out *= _scalar(gamma, out.dtype)
    return narrow(out, x.dtype)


@register("Celu", 12, 28)
@quiet
def celu(x: Array, *, alpha: float = 1.0) -> Array:
    """ONNX Celu (12, 28): max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    wide = widen(x)
    a = _scalar(alpha, wide.dtype)
    negative_part = np.asarray(np.expm1(wide / a))  # exp(x/alpha) - 1 without cancellation
    negative_part *= a
    np.minimum(negative_part, wide.dtype.type(0), out=negative_part)
    negative_part += np.maximum(wide, wide.dtype.type(0))
    return narrow(negative_part, x.dtype)


@register("Sigmoid", 1, 6, 13)
@quiet
def sigmoid(x: Array, *, consumed_inputs: tuple[int, ...] | None = None) -> Array:
    """ONNX Sigmoid (1, 6, 13)."""
    if x.dtype is _FLOAT32:  # the common case, in four NumPy calls (small tensors: calls are the cost)
        out = np.negative(x)
        if type(out) is not np.ndarray:
            out = np.asarray(out)
        np.exp(out, out=out)
        out += _ONE32
        return np.divide(_ONE32, out, out=out)
    wide = widen(x)
    # Negating into a new array doubles as the copy the in-place chain needs (one pass fewer).
    negated = np.negative(wide) if wide is x else np.negative(wide, out=wide)
    return narrow(_logistic_of_negated(negated), x.dtype)


@register("HardSigmoid", 1, 6, 22)
@quiet
def hard_sigmoid(
    x: Array, *, alpha: float = 0.2, beta: float = 0.5, consumed_inputs: tuple[int, ...] | None = None
) -> Array:
    """ONNX HardSigmoid (1, 6, 22): max(0, min(1, alpha * x + beta))."""
    out = _fresh(x)
    out *= _scalar(alpha, out.dtype)
    out += _scalar(beta, out.dtype)
    np.clip(out, out.dtype.type(0), out.dtype.type(1), out=out)
    out += out.dtype.type(0)  # clip's SIMD max may return -0 or +0 at 0: make it +0 everywhere
    return narrow(out, x.dtype)


@register("HardSwish", 14, 22)
@quiet
def hard_swish(x: Array) -> Array:
    """ONNX HardSwish (14, 22): x * max(0, min(1, x / 6 + 0.5))."""
    wide = widen(x)
    out = np.asarray(np.multiply(wide, _scalar(1.0 / 6.0, wide.dtype)))
    out += wide.dtype.type(0.5)
    # No -0 to normalize after the clip (unlike HardSigmoid with beta 0): x / 6 + 0.5 is never -0
    # (a sum with 0.5 that cancels exactly rounds to +0), so clip's max only ever meets +0.
    np.clip(out, wide.dtype.type(0), wide.dtype.type(1), out=out)
    out *= wide
    return narrow(out, x.dtype)


@register("Softplus", 1, 22)
@quiet
def softplus(x: Array) -> Array:
    """ONNX Softplus (1, 22): log(exp(x) + 1), computed without overflow."""
    wide = widen(x)
    return narrow(np.asarray(np.logaddexp(wide, wide.dtype.type(0))), x.dtype)


@register("Softsign", 1, 22)
@quiet
def softsign(x: Array) -> Array:
    """ONNX Softsign (1, 22): x / (1 + |x|)."""
    wide = widen(x)
    denominator = np.asarray(np.abs(wide))
    denominator += wide.dtype.type(1)
    np.divide(wide, denominator, out=denominator)
    return narrow(denominator, x.dtype)


@register("Tanh", 1, 6, 13)
def tanh(x: Array, *, consumed_inputs: tuple[int, ...] | None = None) -> Array:
    """ONNX Tanh (1, 6, 13)."""
    return np.asarray(np.tanh(x))


@register("Gelu", 20)
@quiet
def gelu(x: Array, *, approximate: str = "none") -> Array:
    """ONNX Gelu 20: exact (erf) or approximate='tanh'."""
    wide = widen(x)
    t = wide.dtype.type
    if approximate == "tanh":
        # 0.5 * (1 + tanh(u)) == sigmoid(2u): the same value without 1 + tanh(u) cancelling for x << 0
        inner = np.asarray(np.multiply(wide, wide))
        inner *= t(0.044715)
        inner += t(1)
        inner *= wide
        inner *= t(2.0 * np.sqrt(2.0 / np.pi))
        _sigmoid_inplace(inner)
        inner *= wide
        return narrow(inner, x.dtype)
    if approximate != "none":
        raise ValueError(f"Gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    if x.dtype == np.float64:
        inner = erf(np.multiply(wide, t(1.0 / np.sqrt(2.0))))
        inner += t(1)
        inner *= wide
        inner *= t(0.5)
        return narrow(inner, x.dtype)
    # x * Phi(x) with Phi from erfc: no cancellation in 1 + erf(x/sqrt2) for x << 0
    cdf = normal_cdf(wide)
    cdf *= wide
    return cdf.astype(x.dtype)


@register("Mish", 18, 22)
@quiet
def mish(x: Array) -> Array:
    """ONNX Mish (18, 22): x * tanh(softplus(x))."""
    wide = widen(x)
    out = np.asarray(np.logaddexp(wide, wide.dtype.type(0)))
    np.tanh(out, out=out)
    out *= wide
    return narrow(out, x.dtype)


def _swish(x: Array, alpha: float) -> Array:
    wide = widen(x)
    gate = np.asarray(np.multiply(wide, _scalar(alpha, wide.dtype)))
    _sigmoid_inplace(gate)
    gate *= wide
    return gate


@register("Swish", 24)
@quiet
def swish(x: Array, *, alpha: float = 1.0) -> Array:
    """ONNX Swish 24: x * sigmoid(alpha * x)."""
    return narrow(_swish(x, alpha), x.dtype)


@register("SwiGLU", 28)
@quiet
def swiglu(a: Array, b: Array, *, alpha: float = 1.0) -> Array:
    """ONNX SwiGLU 28: Swish_alpha(A) * B (A and B of one shape)."""
    if a.shape != b.shape:
        raise ValueError(f"SwiGLU inputs must have one shape, got {a.shape} and {b.shape}")
    out = _swish(a, alpha)
    out *= widen(b)
    return narrow(out, a.dtype)


@register("ThresholdedRelu", 10, 22)
@quiet
def thresholded_relu(x: Array, *, alpha: float = 1.0) -> Array:
    """ONNX ThresholdedRelu (10, 22): x if x > alpha else 0."""
    return np.asarray(np.where(x > _scalar(alpha, x.dtype), x, x.dtype.type(0)))


@register("Shrink", 9)
@quiet
def shrink(x: Array, *, bias: float = 0.0, lambd: float = 0.5) -> Array:
    """ONNX Shrink 9: x + bias below -lambd, x - bias above lambd, else 0."""
    # the comparisons use lambd as a float, the arithmetic happens in x's type
    b = np.asarray(bias).astype(x.dtype)
    out = np.zeros_like(x)
    below = x < -lambd
    above = x > lambd
    np.add(x, b, out=out, where=below)
    np.subtract(x, b, out=out, where=above)
    return out


# --------------------------------------------------------------------------------------------
# Softmax family: before opset 13 the input is coerced to 2-D at `axis` and normalized over the
# flattened trailing block; from 13 the normalization runs along the one axis. Unlike the other
# activations these run step by step in the input's own type, half precision included: that is
# what ONNX's reference and ONNX Runtime compute, and the fp16/bf16 Attention cases of the
# conformance suite expect exactly those roundings (a bf16 ulp exceeds their tolerance).


def _softmax(x: Array, axis: int) -> Array:
    out = np.subtract(x, np.max(x, axis=axis, keepdims=True))
    np.exp(out, out=out)
    out /= np.sum(out, axis=axis, keepdims=True)
    return out


def _log_softmax(x: Array, axis: int) -> Array:
    out = np.subtract(x, np.max(x, axis=axis, keepdims=True))
    total = np.exp(out)
    total = np.sum(total, axis=axis, keepdims=True)
    np.log(total, out=total)
    out -= total
    return out


def _hardmax(x: Array, axis: int) -> Array:
    out = np.zeros_like(x)
    # argmax picks the first maximum, as the spec asks
    np.put_along_axis(out, np.argmax(x, axis=axis, keepdims=True), x.dtype.type(1), axis=axis)
    return out


def _coerced(fn: Any, x: Array, axis: int) -> Array:
    if x.size == 0:
        return x.copy()
    if axis < 0:
        axis += x.ndim
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    return fn(x.reshape(rows, -1), 1).reshape(x.shape)


def _along(fn: Any, x: Array, axis: int) -> Array:
    if x.size == 0:
        return x.copy()
    return fn(x, axis)


@register("Softmax", 1, 11)
@quiet
def softmax_2d(x: Array, *, axis: int = 1) -> Array:
    """ONNX Softmax 1 and 11 (input coerced to 2-D at axis)."""
    return _coerced(_softmax, x, axis)


@register("Softmax", 13)
@quiet
def softmax(x: Array, *, axis: int = -1) -> Array:
    """ONNX Softmax 13 (along one axis)."""
    return _along(_softmax, x, axis)


@register("LogSoftmax", 1, 11)
@quiet
def log_softmax_2d(x: Array, *, axis: int = 1) -> Array:
    """ONNX LogSoftmax 1 and 11 (input coerced to 2-D at axis)."""
    return _coerced(_log_softmax, x, axis)


@register("LogSoftmax", 13)
@quiet
def log_softmax(x: Array, *, axis: int = -1) -> Array:
    """ONNX LogSoftmax 13 (along one axis)."""
    return _along(_log_softmax, x, axis)


@register("Hardmax", 1, 11)
@quiet
def hardmax_2d(x: Array, *, axis: int = 1) -> Array:
    """ONNX Hardmax 1 and 11 (input coerced to 2-D at axis)."""
    return _coerced(_hardmax, x, axis)


@register("Hardmax", 13)
@quiet
def hardmax(x: Array, *, axis: int = -1) -> Array:
    """ONNX Hardmax 13 (along one axis)."""
    return _along(_hardmax, x, axis)
