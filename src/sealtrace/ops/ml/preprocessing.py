"""Feature preprocessing of the ai.onnx.ml domain: ArrayFeatureExtractor, Binarizer, Scaler,
Normalizer, Imputer and FeatureVectorizer."""

from __future__ import annotations

import math

import numpy as np

from sealtrace.ops import numerics
from sealtrace.ops.ml._inputs import ML_DOMAIN, as_float32, feature_rows
from sealtrace.ops.registry import register


@register("ArrayFeatureExtractor", 1, domain=ML_DOMAIN)
def array_feature_extractor(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """ArrayFeatureExtractor-1: x[..., y] along the last axis (a 1-D x gives one row, as in ONNX Runtime)."""
    index = y.reshape(-1).astype(np.int64)
    if index.size and (index.min() < 0 or index.max() >= x.shape[-1]):
        raise IndexError(f"indices {index.tolist()} out of range for a last axis of {x.shape[-1]}")
    out = np.take(x, index, axis=-1)
    return out.reshape(1, -1) if x.ndim == 1 else out


@register("Binarizer", 1, domain=ML_DOMAIN)
def binarizer(x: np.ndarray, *, threshold: float) -> np.ndarray:
    """Binarizer-1: 1 where x > threshold, else 0, in x's dtype."""
    return (x > np.asarray(threshold).astype(x.dtype)).astype(x.dtype)


def _feature_count(x: np.ndarray) -> int:
    """The stride ORT indexes per-feature attributes by: dims[1], or dims[0] of a 1-D input."""
    return int(x.shape[0] if x.ndim == 1 else x.shape[1])


def _per_feature(x: np.ndarray, values: np.ndarray, op: str, what: str) -> np.ndarray:
    """values[i % stride] for every flat element i (stride: _feature_count), as ORT indexes these
    per-feature attributes; one value applies to all."""
    if values.size == 1:
        return values.reshape(())
    stride = _feature_count(x)
    if values.size != stride:
        raise ValueError(f"{op}: {what} has {values.size} values; give 1 or one per feature ({stride})")
    return np.resize(values, x.size).reshape(x.shape)


@register("Scaler", 1, domain=ML_DOMAIN)
def scaler(x: np.ndarray, *, offset: tuple[float, ...] | None, scale: tuple[float, ...] | None) -> np.ndarray:
    """Scaler-1: (x - offset) * scale per feature, as float32 (float64 input works in float64 first)."""
    if x.ndim == 0:
        raise ValueError("Scaler takes an input of at least one dimension")
    if not scale or len(scale) != len(offset or ()):
        raise ValueError("Scaler needs scale and offset of the same, non-zero length")
    work = np.float64 if x.dtype == np.float64 else np.float32
    shifted = x.astype(work, copy=False) - _per_feature(x, np.asarray(offset, np.float32), "Scaler", "offset")
    return (shifted * _per_feature(x, np.asarray(scale, np.float32), "Scaler", "scale")).astype(np.float32)


@register("Normalizer", 1, domain=ML_DOMAIN)
def normalizer(x: np.ndarray, *, norm: str) -> np.ndarray:
    """Normalizer-1: each row divided by its MAX (the largest value, not magnitude), L1 or L2 norm,
    in float32; a row whose norm is 0 is left as it is."""
    rows = feature_rows(x, "Normalizer")
    values = as_float32(rows)
    if norm == "MAX":
        total = values.max(axis=1, keepdims=True)
        out = values / np.where(total == 0, np.float32(1), total)
    elif norm == "L1":
        total = numerics.reduce_l1(values, (1,))
        out = values / np.where(total == 0, np.float32(1), total)
    elif norm == "L2":
        # As ONNX Runtime: each square rounded to float32, their sum (here correctly rounded), then
        # sign(x) * sqrt(x**2 / sum) per element.
        squares = values * values
        total = numerics.reduce_sum(squares, (1,))
        with np.errstate(invalid="ignore", divide="ignore"):
            magnitude = np.sqrt(squares / total)
        out = np.where(total == 0, values, np.where(values < 0, -magnitude, magnitude))
    else:
        raise ValueError(f"Normalizer norm must be MAX, L1 or L2, got {norm!r}")
    return out.astype(np.float32, copy=False).reshape(x.shape)


@register("Imputer", 1, domain=ML_DOMAIN)
def imputer(
    x: np.ndarray,
    *,
    imputed_value_floats: tuple[float, ...] | None,
    imputed_value_int64s: tuple[int, ...] | None,
    replaced_value_float: float,
    replaced_value_int64: int,
) -> np.ndarray:
    """Imputer-1: elements equal to the replaced value (NaN matching NaN) become the imputed value of
    their feature (one per feature; any other count: the first for all)."""
    if bool(imputed_value_floats) == bool(imputed_value_int64s):
        raise ValueError("Imputer needs exactly one of imputed_value_floats and imputed_value_int64s")
    if x.ndim == 0:
        raise ValueError("Imputer takes an input of at least one dimension")
    if bool(imputed_value_floats) != (x.dtype.kind == "f"):
        given = "imputed_value_floats" if imputed_value_floats else "imputed_value_int64s"
        raise ValueError(f"Imputer: {given} does not apply to a {x.dtype} input")
    if imputed_value_floats:
        imputed = np.asarray(imputed_value_floats, dtype=x.dtype)
        replaced = x.dtype.type(replaced_value_float)
        hit = np.isnan(x) if math.isnan(replaced_value_float) else x == replaced
    else:
        imputed = np.asarray(imputed_value_int64s, dtype=x.dtype)
        hit = x == x.dtype.type(replaced_value_int64)
    # One per feature, or else (any other count, as ORT reads it) the first value for all.
    per_feature = imputed.size == _feature_count(x)
    fill = _per_feature(x, imputed, "Imputer", "imputed values") if per_feature else imputed[0]
    return np.where(hit, fill, x).astype(x.dtype, copy=False)


@register("FeatureVectorizer", 1, domain=ML_DOMAIN)
def feature_vectorizer(*inputs: np.ndarray, inputdimensions: tuple[int, ...] | None) -> np.ndarray:
    """FeatureVectorizer-1: the inputs' rows side by side as float32 [N, sum(inputdimensions)]; each
    input fills its own width, cut when longer and zero-padded when shorter."""
    widths = list(inputdimensions or ())
    if len(widths) != len(inputs) or any(w < 0 for w in widths):
        raise ValueError(f"FeatureVectorizer: {len(inputs)} input(s) but inputdimensions {widths}")
    samples = 1 if inputs[0].ndim <= 1 else inputs[0].shape[0]
    out = np.zeros((samples, sum(widths)), dtype=np.float32)
    start = 0
    for x, width in zip(inputs, widths, strict=True):
        rows = x.reshape(1 if x.ndim <= 1 else x.shape[0], -1)
        if rows.shape[0] != samples:
            raise ValueError(f"FeatureVectorizer: inputs of {rows.shape[0]} and {samples} samples")
        used = min(width, rows.shape[1])
        out[:, start : start + used] = rows[:, :used]
        start += width
    return out
