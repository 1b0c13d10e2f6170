"""Support vector machines of the ai.onnx.ml domain: SVMRegressor and SVMClassifier, with ONNX
Runtime's kernels (LINEAR, POLY, RBF, SIGMOID) in portable numerics and libsvm's probability
coupling (its sums accumulated in index order)."""

from __future__ import annotations

import numpy as np

from sealtrace.ops import numerics
from sealtrace.ops.ml._inputs import ML_DOMAIN, as_float32, class_labels, feature_rows
from sealtrace.ops.ml._scores import batched_scores, binary_scores, logistic
from sealtrace.ops.registry import register

_RBF_ELEMENTS = 1 << 22


def _svm_kernel(
    x: np.ndarray, vectors: np.ndarray, kernel_type: str, params: tuple[float, ...] | None, constant: float
) -> np.ndarray:
    """K[i, j] = kernel(x_i, vectors_j) in float32, ONNX Runtime's SVM kernels with portable numerics;
    ``constant`` is added to the LINEAR kernel's products (the linear SVMs' rho).

    LINEAR: RN(<x, v> + constant); POLY: Pow(RN(gamma <x, v> + coef0), degree); SIGMOID:
    Tanh(RN(gamma <x, v> + coef0)) (each RN one rounding of the exact value, as Gemm); RBF:
    Exp(-gamma * RN(sum (x_k - v_k)**2)), the differences rounded to float32 first."""
    if params is not None and len(params) < 3:
        raise ValueError(f"SVM kernel_params must be (gamma, coef0, degree), got {list(params)}")
    gamma, coef0, degree = (np.float32(v) for v in (params or (0.0, 0.0, 0.0))[:3])
    if kernel_type == "RBF":
        out = np.empty((x.shape[0], vectors.shape[0]), dtype=np.float32)
        rows = max(1, _RBF_ELEMENTS // max(1, vectors.size))
        for start in range(0, x.shape[0], rows):
            delta = x[start : start + rows, None, :] - vectors[None, :, :]
            distance = numerics.reduce_sum_square(delta, (2,))[:, :, 0]
            with np.errstate(over="ignore"):
                out[start : start + rows] = numerics.apply("exp", -gamma * distance)
        return out
    if kernel_type == "LINEAR":
        shift = np.asarray(constant, dtype=np.float32) if constant else None
        return numerics.gemm(x, vectors.T, shift, 1.0, 1.0)
    if kernel_type not in ("POLY", "SIGMOID"):
        raise ValueError(f"SVM kernel_type must be LINEAR, POLY, RBF or SIGMOID, got {kernel_type!r}")
    products = numerics.gemm(x, vectors.T, np.asarray(coef0) if coef0 else None, float(gamma), 1.0)
    if kernel_type == "SIGMOID":
        return numerics.apply("tanh", products)
    return numerics.power(products, np.asarray(degree))


@register("SVMRegressor", 1, domain=ML_DOMAIN)
def svm_regressor(
    x: np.ndarray,
    *,
    coefficients: tuple[float, ...] | None,
    kernel_params: tuple[float, ...] | None,
    kernel_type: str,
    n_supports: int,
    one_class: int,
    post_transform: str,
    rho: tuple[float, ...] | None,
    support_vectors: tuple[float, ...] | None,
) -> np.ndarray:
    """SVMRegressor-1: sum_j coefficient_j * K(x, sv_j) + rho, as float32 [N, 1] (a linear model
    when there are no support vectors); one_class gives the sign as +1/-1. ORT applies no post
    transform here, and neither do we."""
    rows = as_float32(feature_rows(x, "SVMRegressor"))
    weights = np.asarray(coefficients or (), dtype=np.float32)
    bias = np.float32((rho or (0.0,))[0])
    if n_supports > 0:
        vectors = np.asarray(support_vectors or (), dtype=np.float32).reshape(n_supports, -1)
        if vectors.shape[1] != rows.shape[1] or weights.size != n_supports:
            raise ValueError("SVMRegressor: support vectors, coefficients and input features do not match")
        kernels = _svm_kernel(rows, vectors, kernel_type, kernel_params, 0.0)
        y = numerics.gemm(kernels, weights.reshape(-1, 1), np.asarray(bias), 1.0, 1.0)[:, 0]
    else:
        if weights.size != rows.shape[1]:
            raise ValueError(f"SVMRegressor: {weights.size} coefficients for {rows.shape[1]} features")
        y = _svm_kernel(rows, weights.reshape(1, -1), "LINEAR", None, float(bias))[:, 0]
    if one_class:
        y = np.where(y > 0, np.float32(1), np.float32(-1))
    return y.astype(np.float32, copy=False).reshape(-1, 1)


@register("SVMClassifier", 1, domain=ML_DOMAIN)
def svm_classifier(
    x: np.ndarray,
    *,
    classlabels_ints: tuple[int, ...] | None,
    classlabels_strings: tuple[str, ...] | None,
    coefficients: tuple[float, ...] | None,
    kernel_params: tuple[float, ...] | None,
    kernel_type: str,
    post_transform: str,
    prob_a: tuple[float, ...] | None,
    prob_b: tuple[float, ...] | None,
    rho: tuple[float, ...] | None,
    support_vectors: tuple[float, ...] | None,
    vectors_per_class: tuple[int, ...] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """SVMClassifier-1: (label, scores), as ONNX Runtime computes them.

    With support vectors (libsvm's SVC): one-vs-one classifiers, one per pair of classes, each
    score summed in float64 and voted on (score > 0: the first class of the pair); the label is
    the class with most votes. The scores are the pairs' (for two classes: [-s, s] without a
    transform, else binary_scores's [1 - s, s]), or with prob_a/prob_b the class probabilities from
    Platt-scaled pairs coupled as libsvm does. Without support vectors (liblinear): one linear
    score per class.
    """
    labels = class_labels(classlabels_strings, classlabels_ints)
    classes = len(labels)
    if classes < 2:
        raise ValueError("SVMClassifier needs at least two class labels")
    rows = as_float32(feature_rows(x, "SVMClassifier"))
    weights = np.asarray(coefficients or (), dtype=np.float32)
    offsets = np.asarray(rho or (), dtype=np.float32)
    per_class = [int(v) for v in vectors_per_class or ()]
    if len(prob_a or ()) != len(prob_b or ()):
        raise ValueError("SVMClassifier: prob_a and prob_b differ in length")
    if sum(per_class) == 0:  # liblinear: a linear score per class, plus rho[0]
        if weights.size != classes * rows.shape[1] or offsets.size < 1:
            raise ValueError(
                "SVMClassifier: coefficients do not make one row per class of the input's features"
            )
        scores = _svm_kernel(rows, weights.reshape(classes, -1), "LINEAR", None, float(offsets[0]))
        best = np.argmax(scores, axis=1)
        if classes == 2 and not prob_a:  # ORT's binary rule (with probabilities: the argmax)
            top = scores[np.arange(len(scores)), best]
            positive = (top >= 0.5) if bool((weights >= 0).all()) else (top > 0)
            best = np.where(positive, 1, best)
        return labels[best], batched_scores(scores, post_transform, False)
    return _svc(
        rows,
        labels,
        weights,
        offsets,
        per_class,
        kernel_type,
        kernel_params,
        prob_a,
        prob_b,
        support_vectors,
        post_transform,
    )


def _svc(
    rows: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    offsets: np.ndarray,
    per_class: list[int],
    kernel_type: str,
    kernel_params: tuple[float, ...] | None,
    prob_a: tuple[float, ...] | None,
    prob_b: tuple[float, ...] | None,
    support_vectors: tuple[float, ...] | None,
    post_transform: str,
) -> tuple[np.ndarray, np.ndarray]:
    classes, count = len(labels), sum(per_class)
    pairs = [(i, j) for i in range(classes - 1) for j in range(i + 1, classes)]
    if len(per_class) != classes or weights.size < (classes - 1) * count or offsets.size < len(pairs):
        raise ValueError(
            "SVMClassifier: vectors_per_class, coefficients and rho do not match the class labels"
        )
    vectors = np.asarray(support_vectors or (), dtype=np.float32).reshape(count, -1)
    if vectors.shape[1] != rows.shape[1]:
        raise ValueError(
            f"SVMClassifier: support vectors of {vectors.shape[1]} features, input of {rows.shape[1]}"
        )
    kernels = _svm_kernel(rows, vectors, kernel_type, kernel_params, 0.0)
    starts = np.concatenate([[0], np.cumsum(per_class)]).astype(np.intp)
    coef = weights[: (classes - 1) * count].reshape(classes - 1, count)
    scores = np.empty((len(rows), len(pairs)), dtype=np.float32)
    votes = np.zeros((len(rows), classes), dtype=np.int64)
    for index, (i, j) in enumerate(pairs):
        own = slice(starts[i], starts[i + 1])
        other = slice(starts[j], starts[j + 1])
        # float32 products summed in float64, as ORT does (here RN64 of their exact sum); then + rho.
        terms = np.concatenate(
            [coef[j - 1, own] * kernels[:, own], coef[i, other] * kernels[:, other]], axis=1
        )
        total = numerics.reduce_sum(terms.astype(np.float64), (1,))[:, 0] + np.float64(offsets[index])
        scores[:, index] = total
        votes[np.arange(len(rows)), np.where(total > 0, i, j)] += 1
    best = np.argmax(votes, axis=1)  # the first of equal vote counts
    if prob_a:
        a, b = np.asarray(prob_a, np.float32), np.asarray(prob_b, np.float32)
        pairwise = 1 - logistic(scores * a[: len(pairs)] + b[: len(pairs)])
        pairwise = np.clip(pairwise, np.float32(1e-7), np.float32(1 - 1e-7))
        probabilities = (
            np.stack([_couple(classes, pairs, p) for p in pairwise]) if len(rows) else np.zeros((0, classes))
        )
        return labels[best], batched_scores(probabilities.astype(np.float32), post_transform, False)
    if classes > 2:
        return labels[best], batched_scores(scores, post_transform, False)
    if post_transform == "PROBIT":  # ORT writes one probit and leaves the second score unwritten
        raise NotImplementedError(
            "SVMClassifier with two classes, no probabilities and post_transform PROBIT: ONNX Runtime leaves the "
            "second score unwritten"
        )
    if post_transform == "NONE":
        return labels[best], np.concatenate([-scores, scores], axis=1)
    return labels[best], binary_scores(scores[:, 0], post_transform)  # [1 - s, s], s after any logistic


def _couple(classes: int, pairs: list[tuple[int, int]], pairwise: np.ndarray) -> np.ndarray:
    """Class probabilities from pairwise ones (libsvm's multiclass_probability, Wu, Lin and Weng
    2004), in float32 as ONNX Runtime iterates it: every sum accumulates from 0 in index order, one
    IEEE float32 operation at a time."""
    f = np.float32
    r = np.zeros((classes, classes), dtype=f)
    for (i, j), value in zip(pairs, pairwise.tolist(), strict=True):
        r[i, j] = value
        r[j, i] = f(1) - f(value)
    q = np.zeros((classes, classes), dtype=f)
    for i in range(classes):
        for j in range(classes):
            if j != i:
                q[i, i] += r[j, i] * r[j, i]
        for j in range(i):
            q[i, j] = q[j, i]
        for j in range(i + 1, classes):
            q[i, j] = -r[j, i] * r[i, j]
    p = np.full(classes, f(1) / f(classes), dtype=f)
    eps = f(0.005) / f(classes)
    for _ in range(100):
        qp = np.zeros(classes, dtype=f)
        for j in range(classes):
            qp = qp + q[:, j] * p[j]
        pqp = f(0)
        for i in range(classes):
            pqp = pqp + p[i] * qp[i]
        if np.max(np.abs(qp - pqp)) < eps:
            break
        for i in range(classes):
            diff = (-qp[i] + pqp) / q[i, i]
            p[i] += diff
            pqp = (pqp + diff * (diff * q[i, i] + f(2) * qp[i])) / (f(1) + diff) / (f(1) + diff)
            qp = (qp + diff * q[i, :]) / (f(1) + diff)
            p /= f(1) + diff
    return p
