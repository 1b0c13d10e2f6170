"""Optimizer steps of the ai.onnx.preview.training domain (Adagrad, Adam, Momentum): torch translations.

The same arithmetic as :mod:`sealtrace.ops.training`: the scalar learning-rate factors are worked
out in float64 from R and T, then every elementwise update runs in the tensor's own dtype with the
factors rounded to it first (as NumPy's scalar types do).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from sealtrace.torchops.registry import reference_versions, register

_TRAINING = "ai.onnx.preview.training"


def _groups(op: str, tensors: Sequence[torch.Tensor], per_tensor: int) -> list[tuple[torch.Tensor, ...]]:
    if not tensors or len(tensors) % per_tensor:
        raise ValueError(
            f"{op} takes R, T and then {per_tensor} inputs per optimized tensor; got {len(tensors)} after R and T")
    count = len(tensors) // per_tensor
    return [tuple(tensors[i + k * count] for k in range(per_tensor)) for i in range(count)]


def _scalar(value: torch.Tensor, what: str) -> float:
    if value.numel() != 1:
        raise ValueError(f"{what} must be a scalar, got shape {list(value.shape)}")
    return float(value.reshape(-1)[0])


def _const(value: float, like: torch.Tensor) -> torch.Tensor:
    """A scalar rounded to ``like``'s dtype, as ``x.dtype.type(value)`` rounds it in NumPy."""
    return torch.tensor(value, dtype=torch.float64, device=like.device).to(like.dtype)


def _by_output(updates: Sequence[tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
    return tuple(update[k] for k in range(len(updates[0])) for update in updates)


@register("Adagrad", *reference_versions("Adagrad", domain=_TRAINING), domain=_TRAINING)
def adagrad(r: torch.Tensor, t: torch.Tensor, *tensors: torch.Tensor, decay_factor: float = 0.0,
            epsilon: float = 0.0, norm_coefficient: float = 0.0) -> tuple[torch.Tensor, ...]:
    """Adagrad: H_new = H + G_r^2; X_new = X - R / (1 + T * decay_factor) * G_r / (sqrt(H_new) + epsilon)."""
    rate = _scalar(r, "Adagrad R") / (1 + _scalar(t, "Adagrad T") * decay_factor)
    updates = []
    for x, g, h in _groups("Adagrad", tensors, 3):
        regularized = _const(norm_coefficient, x) * x + g
        h_new = h + regularized * regularized
        x_new = x - _const(rate, x) * regularized / (torch.sqrt(h_new) + _const(epsilon, x))
        updates.append((x_new.to(x.dtype), h_new.to(h.dtype)))
    return _by_output(updates)


@register("Adam", *reference_versions("Adam", domain=_TRAINING), domain=_TRAINING)
def adam(r: torch.Tensor, t: torch.Tensor, *tensors: torch.Tensor, alpha: float = 0.9, beta: float = 0.999,
         epsilon: float = 0.0, norm_coefficient: float = 0.0, norm_coefficient_post: float = 0.0
         ) -> tuple[torch.Tensor, ...]:
    """Adam: averaged gradient V and squared gradient H, a bias-corrected rate after the first update."""
    rate, count = _scalar(r, "Adam R"), _scalar(t, "Adam T")
    if count > 0:
        rate = rate * math.sqrt(1 - beta**count) / (1 - alpha**count)
    updates = []
    for x, g, v, h in _groups("Adam", tensors, 4):
        regularized = _const(norm_coefficient, x) * x + g
        v_new = _const(alpha, x) * v + _const(1 - alpha, x) * regularized
        h_new = _const(beta, x) * h + _const(1 - beta, x) * (regularized * regularized)
        x_new = x - _const(rate, x) * (v_new / (torch.sqrt(h_new) + _const(epsilon, x)))
        x_final = _const(1 - norm_coefficient_post, x) * x_new
        updates.append((x_final.to(x.dtype), v_new.to(v.dtype), h_new.to(h.dtype)))
    return _by_output(updates)


@register("Momentum", *reference_versions("Momentum", domain=_TRAINING), domain=_TRAINING)
def momentum(r: torch.Tensor, t: torch.Tensor, *tensors: torch.Tensor, alpha: float = 0.0, beta: float = 0.0,
             mode: str = "standard", norm_coefficient: float = 0.0, **_: Any) -> tuple[torch.Tensor, ...]:
    """Momentum: V_new = alpha * V + beta' * G_r (beta' = 1 on the first update); standard or nesterov."""
    if mode not in ("standard", "nesterov"):
        raise ValueError(f"Momentum mode must be 'standard' or 'nesterov', got {mode!r}")
    rate = _scalar(r, "Momentum R")
    scale = beta if _scalar(t, "Momentum T") > 0 else 1.0
    updates = []
    for x, g, v in _groups("Momentum", tensors, 3):
        regularized = _const(norm_coefficient, x) * x + g
        v_new = _const(alpha, x) * v + _const(scale, x) * regularized
        step = v_new if mode == "standard" else regularized + _const(alpha, x) * v_new
        x_new = x - _const(rate, x) * step
        updates.append((x_new.to(x.dtype), v_new.to(v.dtype)))
    return _by_output(updates)
