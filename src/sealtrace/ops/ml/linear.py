"""Linear models of the ai.onnx.ml domain: LinearRegressor and LinearClassifier; each score is a
correctly rounded sum of products with the intercept inside the one rounding (numerics.gemm)."""

from __future__ import annotations

import numpy as np

from sealtrace.ops import numerics
from sealtrace.ops.ml._inputs import ML_DOMAIN, as_float32, class_labels, feature_rows
from sealtrace.ops.ml._scores import batched_scores
from sealtrace.ops.registry import register


def _linear_scores(
    x: np.ndarray, coefficients: tuple[float, ...], intercepts: np.ndarray | None, count: int, op: str
) -> np.ndarray:
    """x @ coefficients^T (+ intercepts) in float32: [samples, count], each element RN(sum of
    products + intercept), one rounding (Gemm's)."""
    rows = as_float32(feature_rows(x, op))
    weights = np.asarray(coefficients, dtype=np.float32)
    if count <= 0 or weights.size != count * rows.shape[1]:
        raise ValueError(
            f"{op}: {weights.size} coefficients do not make {count} row(s) of {rows.shape[1]} features"
        )
    return numerics.gemm(rows, weights.reshape(count, rows.shape[1]).T, intercepts, 1.0, 1.0)


@register("LinearRegressor", 1, domain=ML_DOMAIN)
def linear_regressor(
    x: np.ndarray,
    *,
    coefficients: tuple[float, ...] | None,
    intercepts: tuple[float, ...] | None,
    post_transform: str,
    targets: int,
) -> np.ndarray:
    """LinearRegressor-1: x @ coefficients^T + intercepts (used when one per target), in float32."""
    bias = np.asarray(intercepts, np.float32) if intercepts and len(intercepts) == targets else None
    scores = _linear_scores(x, coefficients or (), bias, targets, "LinearRegressor")
    return batched_scores(scores, post_transform, False)


@register("LinearClassifier", 1, domain=ML_DOMAIN)
def linear_classifier(
    x: np.ndarray,
    *,
    classlabels_ints: tuple[int, ...] | None,
    classlabels_strings: tuple[str, ...] | None,
    coefficients: tuple[float, ...],
    intercepts: tuple[float, ...] | None,
    multi_class: int,
    post_transform: str,
) -> tuple[np.ndarray, np.ndarray]:
    """LinearClassifier-1: (label, scores). One score per class (one per intercept), the label of
    the largest (the first of equal ones). One coefficient row is a binary classifier with two
    labels: the second label when the score s is above 0, and the scores [1 - s, s]."""
    if not intercepts:
        raise ValueError("LinearClassifier needs one intercept per class")
    labels = class_labels(classlabels_strings, classlabels_ints)
    scores = _linear_scores(
        x, coefficients, np.asarray(intercepts, np.float32), len(intercepts), "LinearClassifier"
    )
    binary = scores.shape[1] == 1
    if len(labels) != (2 if binary else scores.shape[1]):
        raise ValueError(
            f"LinearClassifier with {scores.shape[1]} coefficient row(s) needs {2 if binary else scores.shape[1]} "
            f"class labels, got {len(labels)}"
        )
    chosen = (scores[:, 0] > 0).astype(np.intp) if binary else np.argmax(scores, axis=1)
    return labels[chosen], batched_scores(scores, post_transform, binary)
