"""Optimizer steps of the ai.onnx.preview.training domain: Adagrad, Adam, Momentum (all version 1).

Each updates n tensors at once: the inputs are R (learning rate) and T (update count), both
scalars, then the n tensors, then their n gradients, then each state of the optimizer (n per
state); the outputs are the n new tensors followed by the n new values of each state. The scalar
learning-rate factors are worked out in float64 (IEEE operations; Adam's powers correctly rounded by
numerics.power); the elementwise updates are IEEE operations in each tensor's own dtype, left to
right as written, and return it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from sealtrace.ops import numerics
from sealtrace.ops.registry import quiet, register

Array = np.ndarray[Any, Any]

_TRAINING = "ai.onnx.preview.training"


def _groups(op: str, tensors: tuple[Array, ...], per_tensor: int) -> list[tuple[Array, ...]]:
    """The inputs after R and T, regrouped per optimized tensor: (X, G, state...)."""
    if not tensors or len(tensors) % per_tensor:
        raise ValueError(
            f"{op} takes R, T and then {per_tensor} inputs per optimized tensor; got {len(tensors)} after R and T"
        )
    count = len(tensors) // per_tensor
    return [tuple(tensors[i + k * count] for k in range(per_tensor)) for i in range(count)]


def _scalar(value: Array, what: str) -> float:
    array = np.asarray(value)
    if array.size != 1:
        raise ValueError(f"{what} must be a scalar, got shape {list(array.shape)}")
    return float(array.reshape(-1)[0])


def _power(base: float, exponent: float) -> float:
    """RN(base ** exponent) in float64, the same on every machine (a libm's pow is not)."""
    return float(numerics.power(np.array(base, dtype=np.float64), np.array(exponent, dtype=np.float64)))


def _regularized(x: Array, g: Array, norm_coefficient: float) -> Array:
    return x.dtype.type(norm_coefficient) * x + g


def _by_output(updates: Sequence[tuple[Array, ...]]) -> tuple[Array, ...]:
    """Per-tensor (X_new, state_new...) tuples, reordered as the op's outputs: all X_new, then each state."""
    return tuple(update[k] for k in range(len(updates[0])) for update in updates)


@register("Adagrad", 1, domain=_TRAINING)
@quiet
def adagrad(
    r: Array, t: Array, *tensors: Array, decay_factor: float, epsilon: float, norm_coefficient: float
) -> tuple[Array, ...]:
    """Adagrad-1: H_new = H + G_r^2; X_new = X - R / (1 + T * decay_factor) * G_r / (sqrt(H_new) + epsilon)."""
    rate = _scalar(r, "Adagrad R") / (1 + _scalar(t, "Adagrad T") * decay_factor)
    updates = []
    for x, g, h in _groups("Adagrad", tensors, 3):
        work = x.dtype.type
        regularized = _regularized(x, g, norm_coefficient)
        h_new = h + regularized * regularized
        x_new = x - work(rate) * regularized / (np.sqrt(h_new) + work(epsilon))
        updates.append((x_new.astype(x.dtype, copy=False), h_new.astype(h.dtype, copy=False)))
    return _by_output(updates)


@register("Adam", 1, domain=_TRAINING)
@quiet
def adam(
    r: Array,
    t: Array,
    *tensors: Array,
    alpha: float,
    beta: float,
    epsilon: float,
    norm_coefficient: float,
    norm_coefficient_post: float,
) -> tuple[Array, ...]:
    """Adam-1: exponentially averaged gradient V and squared gradient H, a bias-corrected rate
    after the first update, and an optional post-update shrink of X."""
    rate, count = _scalar(r, "Adam R"), _scalar(t, "Adam T")
    if count > 0:
        # beta**T and alpha**T correctly rounded (numerics.power), the rest IEEE float64 operations
        rate = rate * math.sqrt(1 - _power(beta, count)) / (1 - _power(alpha, count))
    updates = []
    for x, g, v, h in _groups("Adam", tensors, 4):
        work = x.dtype.type
        regularized = _regularized(x, g, norm_coefficient)
        v_new = work(alpha) * v + work(1 - alpha) * regularized
        h_new = work(beta) * h + work(1 - beta) * (regularized * regularized)
        x_new = x - work(rate) * (v_new / (np.sqrt(h_new) + work(epsilon)))
        x_final = work(1 - norm_coefficient_post) * x_new
        updates.append(
            (x_final.astype(x.dtype, copy=False), v_new.astype(v.dtype, copy=False), h_new.astype(h.dtype, copy=False))
        )
    return _by_output(updates)


@register("Momentum", 1, domain=_TRAINING)
@quiet
def momentum(
    r: Array, t: Array, *tensors: Array, alpha: float, beta: float, mode: str, norm_coefficient: float
) -> tuple[Array, ...]:
    """Momentum-1: V_new = alpha * V + beta' * G_r (beta' = 1 on the first update); X moves by
    R * V_new ("standard") or R * (G_r + alpha * V_new) ("nesterov")."""
    if mode not in ("standard", "nesterov"):
        raise ValueError(f"Momentum mode must be 'standard' or 'nesterov', got {mode!r}")
    rate = _scalar(r, "Momentum R")
    scale = beta if _scalar(t, "Momentum T") > 0 else 1.0
    updates = []
    for x, g, v in _groups("Momentum", tensors, 3):
        work = x.dtype.type
        regularized = _regularized(x, g, norm_coefficient)
        v_new = work(alpha) * v + work(scale) * regularized
        step = v_new if mode == "standard" else regularized + work(alpha) * v_new
        x_new = x - work(rate) * step
        updates.append((x_new.astype(x.dtype, copy=False), v_new.astype(v.dtype, copy=False)))
    return _by_output(updates)
