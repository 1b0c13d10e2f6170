"""Activation functions and Softmax/LogSoftmax/Hardmax (default domain).

The numerics are docs/numerics.md's: a function of one argument (Sigmoid, Tanh, Softplus) is
correctly rounded by ``numerics``; an operator with an ONNX function body runs that body's steps
in the input's own type T, half precision included (attribute constants converted to T first, so
NumPy never promotes), each transcendental step correctly rounded and the others exact IEEE
operations. Chains run in place on freshly allocated buffers: the inputs are never written.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sealtrace.ops import numerics
from sealtrace.ops.registry import quiet, register

Array = np.ndarray


def _attribute(value: float) -> float:
    """A float attribute at its own value: a float32 in the model."""
    return float(np.float32(value))


def _scalar(value: float, dtype: np.dtype[Any]) -> Any:
    """An attribute constant (a float32 in the model) in the computation's type T: the body's
    ``CastLike(Constant(value), X)``."""
    return np.asarray(np.float32(value)).astype(dtype)[()]


# Per input dtype: Relu's zero and whether the type has a -0 to normalize, made once: on small
# tensors making them per call is a large part of the call (BENCHMARKS.md, "Measurements behind the code").
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
    """ONNX Elu (1, 6, 22): RN(x if x >= 0 else alpha * (exp(x) - 1)), one function (the body's
    Exp(x) - 1 cancels near 0)."""
    return numerics.apply("elu", x, _attribute(alpha))


@register("Selu", 1, 6, 22)
@quiet
def selu(
    x: Array,
    *,
    alpha: float = 1.67326319217681884765625,
    gamma: float = 1.05070102214813232421875,
    consumed_inputs: tuple[int, ...] | None = None,
) -> Array:
    """ONNX Selu (1, 6, 22): RN(gamma * x if x > 0 else gamma * alpha * (exp(x) - 1)), one function."""
    return numerics.apply("selu", x, _attribute(alpha), _attribute(gamma))


@register("Celu", 12, 28)
@quiet
def celu(x: Array, *, alpha: float = 1.0) -> Array:
    """ONNX Celu (12, 28): RN(x if x >= 0 else alpha * (exp(x / alpha) - 1)), one function."""
    return numerics.apply("celu", x, _attribute(alpha))


@register("Sigmoid", 1, 6, 13)
@quiet
def sigmoid(x: Array, *, consumed_inputs: tuple[int, ...] | None = None) -> Array:
    """ONNX Sigmoid (1, 6, 13): RN(1 / (1 + exp(-x)))."""
    return numerics.apply("sigmoid", x)


@register("HardSigmoid", 1, 6, 22)
@quiet
def hard_sigmoid(
    x: Array, *, alpha: float = 0.2, beta: float = 0.5, consumed_inputs: tuple[int, ...] | None = None
) -> Array:
    """ONNX HardSigmoid (1, 6, 22), its body: max(0, min(1, alpha * x + beta)) in x's type."""
    return _hard_sigmoid(x, alpha, beta)


def _hard_sigmoid(x: Array, alpha: float, beta: float) -> Array:
    t = x.dtype.type
    out = np.multiply(x, _scalar(alpha, x.dtype))
    out += _scalar(beta, x.dtype)
    np.clip(out, t(0), t(1), out=out)
    out += t(0)  # clip's SIMD max may return -0 or +0 at 0: make it +0 everywhere
    return np.asarray(out)


@register("HardSwish", 14, 22)
@quiet
def hard_swish(x: Array) -> Array:
    """ONNX HardSwish (14, 22), its body: x * HardSigmoid(x, alpha=1/6 (as a float32), beta=0.5)."""
    out = _hard_sigmoid(x, 1.0 / 6.0, 0.5)
    out *= x
    return out


@register("Softplus", 1, 22)
@quiet
def softplus(x: Array) -> Array:
    """ONNX Softplus (1, 22): RN(log(exp(x) + 1)), one function (the body's Exp overflows for
    x > 88 in float32, where softplus(x) is about x)."""
    return numerics.apply("softplus", x)


@register("Softsign", 1, 22)
@quiet
def softsign(x: Array) -> Array:
    """ONNX Softsign (1, 22), its body: x / (1 + |x|) in x's type."""
    denominator = np.asarray(np.abs(x))
    denominator += x.dtype.type(1)
    np.divide(x, denominator, out=denominator)
    return denominator


@register("Tanh", 1, 6, 13)
def tanh(x: Array, *, consumed_inputs: tuple[int, ...] | None = None) -> Array:
    """ONNX Tanh (1, 6, 13): RN(tanh(x))."""
    return numerics.apply("tanh", x)


@register("Gelu", 20)
@quiet
def gelu(x: Array, *, approximate: str = "none") -> Array:
    """ONNX Gelu 20: RN(x * Phi(x)), Phi the normal distribution (approximate 'none'), or
    RN(0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))) (approximate 'tanh'): one function each
    (the body's 1 + Erf(..) cancels for x << 0)."""
    if approximate == "none":
        return numerics.apply("gelu", x)
    if approximate == "tanh":
        return numerics.apply("gelu_tanh", x)
    raise ValueError(f"Gelu approximate must be 'none' or 'tanh', got {approximate!r}")


@register("Mish", 18, 22)
@quiet
def mish(x: Array) -> Array:
    """ONNX Mish (18, 22): RN(x * tanh(log(1 + exp(x)))), one function."""
    return numerics.apply("mish", x)


@register("Swish", 24)
@quiet
def swish(x: Array, *, alpha: float = 1.0) -> Array:
    """ONNX Swish 24: RN(x * sigmoid(alpha * x)), one function."""
    return numerics.apply("swish", x, _attribute(alpha))


@register("SwiGLU", 28)
@quiet
def swiglu(a: Array, b: Array, *, alpha: float = 1.0) -> Array:
    """ONNX SwiGLU 28, its body: Swish_alpha(A) * B in A's type (A and B of one shape)."""
    if a.shape != b.shape:
        raise ValueError(f"SwiGLU inputs must have one shape, got {a.shape} and {b.shape}")
    out = numerics.apply("swish", a, _attribute(alpha))
    out *= b
    return out


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
# flattened trailing block; from 13 the normalization runs along the one axis. Softmax-13's and
# LogSoftmax-13's bodies in the input's own type (numerics.softmax, numerics.log_softmax), half
# precision included: ONNX Runtime computes those steps too, and the fp16/bf16 Attention cases of
# the conformance suite expect exactly those roundings (a bf16 ulp exceeds their tolerance).


def _softmax(x: Array, axis: int) -> Array:
    return numerics.softmax(x, axis)


def _log_softmax(x: Array, axis: int) -> Array:
    return numerics.log_softmax(x, axis)


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
