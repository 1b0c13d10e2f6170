"""Training losses: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss.

Numerics (docs/numerics.md): the ONNX function bodies, every step in the input's type T (half
precision included). NegativeLogLikelihoodLoss: loss = -input[n, target, ...], times the gathered
weight when there is a weight or an ignore_index (an ignored position gathers 0 and weighs 0);
'sum' is ReduceSum(loss) and 'mean' ReduceMean(loss) without weight or ignore_index, else
ReduceSum(loss) / ReduceSum(weights), each reduction correctly rounded (``numerics``) and the
division IEEE's. SoftmaxCrossEntropyLoss: that, of LogSoftmax-13's body along the class axis
(``numerics.log_softmax``).
"""

from __future__ import annotations

import numpy as np

from sealtrace.ops import numerics
from sealtrace.ops._values import take_along_axis
from sealtrace.ops.registry import quiet, register


def _nll(
    log_prob: np.ndarray,
    target: np.ndarray,
    weight: np.ndarray | None,
    ignore_index: int | None,
    reduction: str,
) -> np.ndarray:
    """Weighted negative log likelihood of ``target`` classes over axis 1, in log_prob's type."""
    if log_prob.ndim < 2:
        raise ValueError(f"input must be at least 2-D (N, C, ...), got shape {log_prob.shape}")
    if reduction not in ("none", "sum", "mean"):
        raise ValueError(f"unknown reduction {reduction!r}")
    dtype = log_prob.dtype
    zero = dtype.type(0)
    target = target.astype(np.int64, copy=False)
    ignored = target == ignore_index if ignore_index is not None else None
    # Ignored positions may hold any value (even out of range); gather class 0 there and zero it.
    safe = target if ignored is None else np.where(ignored, 0, target)
    picked = take_along_axis(log_prob, safe[:, None], axis=1)[:, 0]
    if ignored is not None:
        picked = np.where(ignored, zero, picked)
    loss = np.negative(picked)
    weights: np.ndarray | None = None
    if weight is not None:
        weights = np.asarray(weight, dtype=dtype)[safe]
        if ignored is not None:
            weights = np.where(ignored, zero, weights)
    elif ignored is not None:
        weights = np.where(ignored, zero, dtype.type(1))
    if weights is not None:
        loss = loss * weights
    if reduction == "none":
        return np.asarray(loss)
    axes = tuple(range(loss.ndim))
    if reduction == "sum":
        return numerics.reduce_sum(loss, axes).reshape(())
    if weights is None:
        return numerics.reduce_mean(loss, axes).reshape(())
    # The mean is over the weights of the positions that count (ignored ones weigh 0); when
    # nothing counts it is 0/0 = NaN, as in ONNX Runtime.
    return np.asarray(numerics.reduce_sum(loss, axes) / numerics.reduce_sum(weights, axes)).reshape(())


def _computable(x: np.ndarray) -> np.ndarray:
    """float8 and other types numerics does not cover compute in float32 (cast back at the end)."""
    return x if numerics.format_of(x.dtype) is not None else x.astype(np.float32)


@register("NegativeLogLikelihoodLoss", 12, 13, 22)
@quiet
def negative_log_likelihood_loss(
    input: np.ndarray,
    target: np.ndarray,
    weight: np.ndarray | None = None,
    *,
    ignore_index: int | None,
    reduction: str,
) -> np.ndarray:
    """NegativeLogLikelihoodLoss-12, -13, -22: loss = -input[n, target[n, ...], ...] (weighted)."""
    loss = _nll(_computable(input), target, weight, ignore_index, reduction)
    return loss.astype(input.dtype, copy=False)


@register("SoftmaxCrossEntropyLoss", 12, 13)
@quiet
def softmax_cross_entropy_loss(
    scores: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray | None = None,
    *,
    ignore_index: int | None,
    reduction: str,
) -> tuple[np.ndarray, np.ndarray]:
    """SoftmaxCrossEntropyLoss-12, -13: NLL of log_softmax(scores, axis=1); also returns log_prob."""
    x = _computable(scores)
    if x.ndim < 2:
        raise ValueError(f"scores must be at least 2-D (N, C, ...), got shape {x.shape}")
    log_prob = numerics.log_softmax(x, 1)
    loss = _nll(log_prob, labels, weights, ignore_index, reduction)
    return loss.astype(scores.dtype, copy=False), log_prob.astype(scores.dtype, copy=False)
