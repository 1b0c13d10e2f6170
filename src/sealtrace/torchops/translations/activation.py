"""Activations and softmax-like ops: torch translations."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from sealtrace.torchops.registry import DirectCall, StepInput, reference_versions, register, specializes


@register("Relu", *reference_versions("Relu"))
def relu(x: torch.Tensor, **_: Any) -> torch.Tensor:
    """Relu."""
    return torch.relu(x)


@register("LeakyRelu", *reference_versions("LeakyRelu"))
def leaky_relu(x: torch.Tensor, *, alpha: float = 0.01, **_: Any) -> torch.Tensor:
    """LeakyRelu."""
    return torch.where(x >= 0, x, x * alpha)


@register("PRelu", *reference_versions("PRelu"))
def prelu(x: torch.Tensor, slope: torch.Tensor, **_: Any) -> torch.Tensor:
    """PRelu: the slope broadcasts against X (unidirectionally)."""
    return torch.where(x >= 0, x, x * slope)


@register("Elu", *reference_versions("Elu"))
def elu(x: torch.Tensor, *, alpha: float = 1.0, **_: Any) -> torch.Tensor:
    """Elu."""
    return torch.where(x > 0, x, alpha * torch.expm1(x))


@register("Selu", *reference_versions("Selu"))
def selu(x: torch.Tensor, *, alpha: float, gamma: float, **_: Any) -> torch.Tensor:
    """Selu."""
    return gamma * torch.where(x > 0, x, alpha * torch.expm1(x))


@register("Celu", *reference_versions("Celu"))
def celu(x: torch.Tensor, *, alpha: float = 1.0) -> torch.Tensor:
    """Celu."""
    return torch.clamp(x, min=0) + torch.clamp(alpha * torch.expm1(x / alpha), max=0)


@register("Sigmoid", *reference_versions("Sigmoid"))
def sigmoid(x: torch.Tensor, **_: Any) -> torch.Tensor:
    """Sigmoid."""
    return torch.sigmoid(x)


@register("HardSigmoid", *reference_versions("HardSigmoid"))
def hard_sigmoid(x: torch.Tensor, *, alpha: float, beta: float, **_: Any) -> torch.Tensor:
    """HardSigmoid: max(0, min(1, alpha * x + beta))."""
    return torch.clamp(x * alpha + beta, 0.0, 1.0)


@register("HardSwish", *reference_versions("HardSwish"))
def hard_swish(x: torch.Tensor) -> torch.Tensor:
    """HardSwish: x * HardSigmoid(x) with alpha 1/6, beta 0.5."""
    return x * torch.clamp(x * (1.0 / 6.0) + 0.5, 0.0, 1.0)


@register("Softplus", *reference_versions("Softplus"))
def softplus(x: torch.Tensor) -> torch.Tensor:
    """Softplus: log(1 + exp(x)), computed stably."""
    return torch.clamp(x, min=0) + torch.log1p(torch.exp(-torch.abs(x)))


@register("Softsign", *reference_versions("Softsign"))
def softsign(x: torch.Tensor) -> torch.Tensor:
    """Softsign."""
    return x / (1 + torch.abs(x))


@register("Tanh", *reference_versions("Tanh"))
def tanh(x: torch.Tensor, **_: Any) -> torch.Tensor:
    """Tanh."""
    return torch.tanh(x)


@register("Gelu", *reference_versions("Gelu"))
def gelu(x: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    """Gelu (exact or tanh approximation)."""
    if approximate == "tanh":
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1 + torch.erf(x * (1 / math.sqrt(2))))


@register("Mish", *reference_versions("Mish"))
def mish(x: torch.Tensor) -> torch.Tensor:
    """Mish: x * tanh(softplus(x))."""
    return x * torch.tanh(softplus(x))


@register("Swish", *reference_versions("Swish"))
def swish(x: torch.Tensor, *, alpha: float = 1.0) -> torch.Tensor:
    """Swish: x * sigmoid(alpha * x)."""
    return x * torch.sigmoid(alpha * x)


@register("ThresholdedRelu", *reference_versions("ThresholdedRelu"))
def thresholded_relu(x: torch.Tensor, *, alpha: float = 1.0) -> torch.Tensor:
    """ThresholdedRelu."""
    return torch.where(x > alpha, x, torch.zeros_like(x))


@register("Shrink", *reference_versions("Shrink"))
def shrink(x: torch.Tensor, *, bias: float = 0.0, lambd: float = 0.5) -> torch.Tensor:
    """Shrink."""
    zero = torch.zeros_like(x)
    return torch.where(x < -lambd, x + bias, torch.where(x > lambd, x - bias, zero))


def _coerced(x: torch.Tensor, axis: int) -> tuple[torch.Tensor, torch.Size]:
    """Opset < 13 softmax family: X flattened to 2-D at ``axis``."""
    axis = axis + x.dim() if axis < 0 else axis
    outer = math.prod(x.shape[:axis])
    return x.reshape(outer, -1), x.shape


_HALF = (torch.float16, torch.bfloat16)


def ordered_sum(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum along ``dim`` (kept) as NumPy sums the reference's values: float16 accumulates in float32
    and rounds once (NumPy's pairwise sum, as torch's); bfloat16 (ml_dtypes) adds element by element
    in order, rounding to bfloat16 after every addition."""
    if x.dtype != torch.bfloat16 or x.shape[dim] == 0:
        return x.sum(dim=dim, keepdim=True)
    total = x.narrow(dim, 0, 1)
    for j in range(1, x.shape[dim]):
        total = total + x.narrow(dim, j, 1)
    return total


def half_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax step by step in x's own half-precision type (every op rounds), as the reference and
    ONNX's conformance data compute it; a bfloat16 ulp is beyond the cases' tolerance."""
    out = x - torch.amax(x, dim=dim, keepdim=True)
    out = torch.exp(out)
    return out / ordered_sum(out, dim)


def _half_log_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    out = x - torch.amax(x, dim=dim, keepdim=True)
    return out - torch.log(ordered_sum(torch.exp(out), dim))


@register("Softmax", 1, 11)
def softmax_v1(x: torch.Tensor, *, axis: int = 1) -> torch.Tensor:
    """Softmax-1/11: over the flattened trailing axes from ``axis``."""
    flat, shape = _coerced(x, axis)
    return (half_softmax(flat, 1) if x.dtype in _HALF else torch.softmax(flat, dim=1)).reshape(shape)


@register("Softmax", 13)
def softmax(x: torch.Tensor, *, axis: int = -1) -> torch.Tensor:
    """Softmax-13 (torch's fused kernel; half-precision types step by step, as the reference)."""
    return half_softmax(x, axis) if x.dtype in _HALF else torch.softmax(x, dim=axis)


@register("LogSoftmax", 1, 11)
def log_softmax_v1(x: torch.Tensor, *, axis: int = 1) -> torch.Tensor:
    """LogSoftmax-1/11."""
    flat, shape = _coerced(x, axis)
    return (_half_log_softmax(flat, 1) if x.dtype in _HALF else torch.log_softmax(flat, dim=1)).reshape(shape)


@register("LogSoftmax", 13)
def log_softmax(x: torch.Tensor, *, axis: int = -1) -> torch.Tensor:
    """LogSoftmax-13."""
    return _half_log_softmax(x, axis) if x.dtype in _HALF else torch.log_softmax(x, dim=axis)


def _hardmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    index = torch.argmax(x, dim=dim, keepdim=True)  # first maximum, as the spec says
    return torch.zeros_like(x).scatter(dim, index, 1.0)


@register("Hardmax", 1, 11)
def hardmax_v1(x: torch.Tensor, *, axis: int = 1) -> torch.Tensor:
    """Hardmax-1/11."""
    flat, shape = _coerced(x, axis)
    return _hardmax(flat, 1).reshape(shape)


@register("Hardmax", 13)
def hardmax(x: torch.Tensor, *, axis: int = -1) -> torch.Tensor:
    """Hardmax-13."""
    return _hardmax(x, axis)




@register("SwiGLU", *reference_versions("SwiGLU"))
def swiglu(a: torch.Tensor, b: torch.Tensor, *, alpha: float = 1.0) -> torch.Tensor:
    """SwiGLU: Swish_alpha(A) * B, computed in float32 for half-precision inputs (as the reference)."""
    if a.shape != b.shape:
        raise ValueError(f"SwiGLU inputs must have one shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    work = a.dtype if a.dtype == torch.float64 else torch.float32
    wide = a.to(work)
    return (wide * torch.sigmoid(wide * alpha) * b.to(work)).to(a.dtype)


def _direct_activation(op_type: str, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    def specializer(attrs: dict[str, Any], inputs: list[StepInput]) -> DirectCall | None:
        dtype = inputs[0].dtype
        return DirectCall(fn, (0,), {}) if dtype is not None and dtype.is_floating_point else None

    specializes(op_type, *reference_versions(op_type))(specializer)


for _op, _fn in (("Relu", torch.relu), ("Sigmoid", torch.sigmoid), ("Tanh", torch.tanh)):
    _direct_activation(_op, _fn)
