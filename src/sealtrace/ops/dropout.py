"""Dropout (default domain): the identity at inference; in training (Dropout-1/6 without
``is_test``, Dropout-12+ with ``training_mode``) a seeded random mask, drawn as ONNX's reference
draws it, and the kept values scaled by 1 / (1 - ratio)."""

from __future__ import annotations

from typing import Any

import numpy as np

from sealtrace.ops.registry import register

# Without a seed attribute the spec lets the runtime pick one; a fixed one keeps runs bit-identical.
_DEFAULT_DROPOUT_SEED = 0


def _dropout(
    data: np.ndarray, ratio: float, training: bool, seed: int | None, mask_dtype: np.dtype[Any]
) -> tuple[np.ndarray, np.ndarray]:
    if not training or ratio == 0:
        # An all-ones mask as a broadcast view: inference graphs rarely read it, so it costs nothing.
        return data, np.broadcast_to(np.ones((), dtype=mask_dtype), data.shape)
    # Same generator and draw as ONNX's reference and its conformance data.
    rng = np.random.RandomState(_DEFAULT_DROPOUT_SEED if seed is None else seed)
    keep = rng.uniform(0, 1.0, data.shape) >= ratio
    # The scale is computed in (at least) float32, as onnxruntime does, then applied.
    compute = np.result_type(data.dtype, np.float32)
    one = compute.type(1)
    scale = one / (one - compute.type(ratio))
    out = (np.where(keep, data, data.dtype.type(0)) * scale).astype(data.dtype, copy=False)
    return out, keep.astype(mask_dtype)


@register("Dropout", 1)
def dropout_v1(
    data: np.ndarray, *, consumed_inputs: Any, is_test: int, ratio: float
) -> tuple[np.ndarray, np.ndarray]:
    """Dropout-1: random dropout unless ``is_test``; mask has the data's type."""
    return _dropout(data, ratio, not is_test, None, data.dtype)


@register("Dropout", 6)
def dropout_v6(data: np.ndarray, *, is_test: int, ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """Dropout-6: random dropout unless ``is_test``; mask has the data's type."""
    return _dropout(data, ratio, not is_test, None, data.dtype)


@register("Dropout", 7)
def dropout_v7(data: np.ndarray, *, ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """Dropout-7: inference (identity); mask of ones in the data's type."""
    return _dropout(data, ratio, False, None, data.dtype)


@register("Dropout", 10)
def dropout_v10(data: np.ndarray, *, ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """Dropout-10: inference (identity); boolean mask of all True."""
    return _dropout(data, ratio, False, None, np.dtype(bool))


@register("Dropout", 12, 13, 22)
def dropout_v12(
    data: np.ndarray,
    ratio: np.ndarray | None = None,
    training_mode: np.ndarray | None = None,
    *,
    seed: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Dropout-12+: identity unless ``training_mode``, then seeded random dropout."""
    rate = 0.5 if ratio is None else float(ratio.reshape(-1)[0])
    training = training_mode is not None and bool(training_mode.reshape(-1)[0])
    return _dropout(data, rate, training, seed, np.dtype(bool))
