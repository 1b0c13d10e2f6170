"""Training losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss): torch translations,
differentiable, with the reference's rules for weights, ignore_index and the weighted mean."""

from __future__ import annotations

from typing import Any

import torch

from sealtrace.torchops.registry import reference_versions, register


def _nll(log_prob: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int | None,
         reduction: str) -> torch.Tensor:
    target = target.to(torch.int64)
    ignored = target == ignore_index if ignore_index is not None else torch.zeros_like(target, dtype=torch.bool)
    # Ignored positions may hold any value (even out of range): gather class 0 there, then zero it.
    safe = torch.where(ignored, torch.zeros_like(target), target)
    picked = torch.gather(log_prob, 1, safe.unsqueeze(1)).squeeze(1)
    zero = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    loss = torch.where(ignored, zero, -picked)
    if weight is not None:
        w = torch.where(ignored, zero, weight.to(log_prob.dtype)[safe])
        loss = loss * w
    else:
        w = (~ignored).to(log_prob.dtype)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        if weight is None and ignore_index is None:
            return loss.mean()
        return loss.sum() / w.sum()  # 0/0 = NaN when nothing counts, as in ONNX Runtime
    raise ValueError(f"unknown reduction {reduction!r}")


def _work(x: torch.Tensor) -> torch.Tensor:
    """float16/bfloat16 losses are accumulated in float32, like the reference does."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


@register("NegativeLogLikelihoodLoss", *reference_versions("NegativeLogLikelihoodLoss"))
def negative_log_likelihood_loss(x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None, *,
                                 ignore_index: int | None = None, reduction: str = "mean") -> torch.Tensor:
    """NegativeLogLikelihoodLoss: -input[n, target[n, ...], ...], weighted, reduced."""
    return _nll(_work(x), target, weight, ignore_index, reduction).to(x.dtype)


@register("SoftmaxCrossEntropyLoss", *reference_versions("SoftmaxCrossEntropyLoss"), n_outputs=True)
def softmax_cross_entropy_loss(scores: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None = None, *,
                               n_outputs: int, ignore_index: int | None = None, reduction: str = "mean") -> Any:
    """SoftmaxCrossEntropyLoss: NLL of log_softmax(scores, axis=1); optionally log_prob too."""
    log_prob = torch.log_softmax(_work(scores), dim=1)
    loss = _nll(log_prob, labels, weights, ignore_index, reduction).to(scores.dtype)
    return (loss, log_prob.to(scores.dtype)) if n_outputs > 1 else loss
