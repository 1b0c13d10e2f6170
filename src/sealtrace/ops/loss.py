"""Training losses: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss."""

from __future__ import annotations

from typing import Any

import numpy as np

from sealtrace.ops.registry import register


def _work_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """float16/bfloat16 losses are accumulated in float32; float64 stays float64."""
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _nll(
    log_prob: np.ndarray,
    target: np.ndarray,
    weight: np.ndarray | None,
    ignore_index: int | None,
    reduction: str,
) -> np.ndarray:
    """Weighted negative log likelihood of ``target`` classes over axis 1, in the work dtype."""
    if log_prob.ndim < 2:
        raise ValueError(f"input must be at least 2-D (N, C, ...), got shape {log_prob.shape}")
    target = target.astype(np.int64, copy=False)
    ignored = target == ignore_index if ignore_index is not None else np.zeros(target.shape, dtype=bool)
    # Ignored positions may hold any value (even out of range); gather class 0 there and zero it.
    safe = np.where(ignored, 0, target)
    picked = np.take_along_axis(log_prob, safe[:, None], axis=1)[:, 0]
    loss = np.where(ignored, 0, -picked).astype(log_prob.dtype)
    if weight is not None:
        w = np.where(ignored, 0, weight.astype(log_prob.dtype)[safe]).astype(log_prob.dtype)
    else:
        w = (~ignored).astype(log_prob.dtype)
    if weight is not None:
        loss = loss * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.asarray(loss.sum(dtype=log_prob.dtype))
    if reduction == "mean":
        if weight is None and ignore_index is None:
            return np.asarray(loss.mean(dtype=log_prob.dtype))
        # The mean is over the weights of the positions that count (ignored ones have weight 0);
        # when nothing counts it is 0/0 = NaN, as in ONNX Runtime.
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(loss.sum(dtype=log_prob.dtype) / w.sum(dtype=log_prob.dtype))
    raise ValueError(f"unknown reduction {reduction!r}")


@register("NegativeLogLikelihoodLoss", 12, 13, 22)
def negative_log_likelihood_loss(
    input: np.ndarray,
    target: np.ndarray,
    weight: np.ndarray | None = None,
    *,
    ignore_index: int | None,
    reduction: str,
) -> np.ndarray:
    """NegativeLogLikelihoodLoss-12, -13, -22: loss = -input[n, target[n, ...], ...] (weighted)."""
    work = _work_dtype(input.dtype)
    loss = _nll(input.astype(work, copy=False), target, weight, ignore_index, reduction)
    return loss.astype(input.dtype)


@register("SoftmaxCrossEntropyLoss", 12, 13)
def softmax_cross_entropy_loss(
    scores: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray | None = None,
    *,
    ignore_index: int | None,
    reduction: str,
) -> tuple[np.ndarray, np.ndarray]:
    """SoftmaxCrossEntropyLoss-12, -13: NLL of log_softmax(scores, axis=1); also returns log_prob."""
    work = _work_dtype(scores.dtype)
    x = scores.astype(work, copy=False)
    shifted = x - x.max(axis=1, keepdims=True)
    log_prob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = _nll(log_prob, labels, weights, ignore_index, reduction)
    return loss.astype(scores.dtype), log_prob.astype(scores.dtype)
