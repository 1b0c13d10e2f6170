"""Post transforms of the ai.onnx.ml models' scores, as ONNX Runtime (the numerical oracle) applies
them: NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT, and how a binary classifier's single score
becomes two."""

from __future__ import annotations

import math

import numpy as np

from sealtrace.ops import numerics

# ONNX Runtime's PROBIT constants, float32 operations as its ErfInv spells them:
# 2 / (float(M_PI) * 0.147f), 1 / 0.147f, and sqrt(2) as 1.41421356f.
_F32 = np.float32
_WINITZKI_A = _F32(0.147)
_ERFINV_OFFSET = _F32(2) / (_F32(math.pi) * _WINITZKI_A)
_ERFINV_SLOPE = _F32(1) / _WINITZKI_A
_PROBIT_SQRT2 = _F32(1.41421356)


def probit(scores: np.ndarray) -> np.ndarray:
    """sqrt(2) * erfinv(2p - 1) in float32, with ONNX Runtime's closed-form erfinv (Winitzki, a = 0.147),
    step by step: t = 2p - 1, w = (1 - t)(1 + t), L = Log(w) (correctly rounded), v = c1 + 0.5 L,
    erfinv = sign(t) * sqrt(-v + sqrt(v * v - c2 * L)); every other step an IEEE float32 operation."""
    p = scores.astype(_F32, copy=False)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        t = p * _F32(2) - _F32(1)
        sign = np.where(t < 0, _F32(-1), _F32(1))
        log = numerics.apply("log", (_F32(1) - t) * (_F32(1) + t))
        v = _ERFINV_OFFSET + _F32(0.5) * log
        inner = np.sqrt(v * v - _ERFINV_SLOPE * log)
        return np.asarray(_PROBIT_SQRT2 * (sign * np.sqrt(inner - v)), dtype=_F32)


def apply_post_transform(scores: np.ndarray, post_transform: str) -> np.ndarray:
    """A post transform of [samples, n] scores in their own float type (PROBIT: float32)."""
    if post_transform == "NONE":
        return scores
    if post_transform == "SOFTMAX":
        return numerics.softmax(scores, 1)
    if post_transform == "LOGISTIC":
        return logistic(scores)
    if post_transform == "SOFTMAX_ZERO":
        # As ONNX Runtime does it: scores within 1e-7 of zero take no part in the sum and become
        # score * exp(-max) / sum (zeros stay zero); a row of such scores divides by 0 (NaN).
        top = scores.max(axis=1, keepdims=True)
        counted = np.abs(scores.astype(_F32)) > _F32(1e-7)
        with np.errstate(invalid="ignore", over="ignore"):
            shifted = np.where(
                counted, numerics.apply("exp", scores - top), scores * numerics.apply("exp", -top)
            )
        total = numerics.reduce_sum(np.where(counted, shifted, scores.dtype.type(0)), (1,))
        with np.errstate(invalid="ignore", divide="ignore"):
            return shifted / total
    if post_transform == "PROBIT":
        return probit(scores)
    raise ValueError(f"unknown post_transform {post_transform!r}")


def logistic(x: np.ndarray) -> np.ndarray:
    """RN(1 / (1 + exp(-x))) in x's type."""
    return numerics.apply("sigmoid", x)


def binary_scores(score: np.ndarray, post_transform: str) -> np.ndarray:
    """A binary classifier's single score s per sample as ONNX Runtime writes two: [1 - s, s], with s
    the logistic of the score under LOGISTIC (no other transform applies)."""
    if post_transform == "LOGISTIC":
        score = logistic(score)
    return np.stack([1 - score, score], axis=1)


def batched_scores(scores: np.ndarray, post_transform: str, complement: bool) -> np.ndarray:
    """ONNX Runtime's post transform of the linear models' [samples, n] scores. With n > 1 it is the
    plain transform. With one score per sample only PROBIT applies, unless ``complement`` (a binary
    classifier) adds the other class's score: s becomes [1 - s, s], after the logistic under
    LOGISTIC (SOFTMAX and SOFTMAX_ZERO are not applied)."""
    if scores.shape[1] > 1:
        return apply_post_transform(scores, post_transform).astype(np.float32, copy=False)
    if post_transform == "PROBIT":
        if complement:  # ORT writes the probits packed and leaves half the output unwritten
            raise NotImplementedError(
                "LinearClassifier with one coefficient row and post_transform PROBIT: ONNX Runtime leaves half "
                "of its scores unwritten"
            )
        return apply_post_transform(scores, "PROBIT").astype(np.float32, copy=False)
    return binary_scores(scores[:, 0], post_transform) if complement else scores
