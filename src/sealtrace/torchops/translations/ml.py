"""Classical ML operators of the ai.onnx.ml domain: torch translations, or the reference kernel.

Translated to torch (differentiable in X where the op is): ArrayFeatureExtractor, Binarizer,
Scaler, Normalizer, Imputer, FeatureVectorizer, LinearRegressor, LinearClassifier (its scores;
the label is an argmax) and SVMRegressor, following :mod:`sealtrace.ops.ml` (ONNX Runtime's
conventions: float32 features, per-feature attributes indexed by the flat position, the binary
classifiers' two scores).

Run on the reference kernel: the lookups (LabelEncoder, CategoryMapper, OneHotEncoder), the tree
ensembles (piecewise constant in X: no gradient to keep), the maps (ZipMap, DictVectorizer,
CastMap: Python dicts, which torch cannot hold) and SVMClassifier (libsvm's one-vs-one votes and
its iterative float32 probability coupling, exact only as written).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from sealtrace.torchops.registry import reference_versions, register, register_reference_kernel

_ML = "ai.onnx.ml"

_LOOKUP = "a table lookup of categories (strings or integers): piecewise constant, nothing to differentiate"
for _op in ("LabelEncoder", "CategoryMapper", "OneHotEncoder"):
    register_reference_kernel(_op, *reference_versions(_op, domain=_ML), domain=_ML, reason=_LOOKUP)

_TREES = ("tree ensembles are piecewise constant in X (comparisons pick leaves): nothing to differentiate, "
          "and the votes are summed in ONNX Runtime's order")
for _op in ("TreeEnsemble", "TreeEnsembleRegressor", "TreeEnsembleClassifier"):
    register_reference_kernel(_op, *reference_versions(_op, domain=_ML), domain=_ML, reason=_TREES)

_MAPS = "maps are Python dicts, which torch cannot hold"
for _op in ("ZipMap", "DictVectorizer", "CastMap"):
    register_reference_kernel(_op, *reference_versions(_op, domain=_ML), domain=_ML, reason=_MAPS)

register_reference_kernel(
    "SVMClassifier", *reference_versions("SVMClassifier", domain=_ML), domain=_ML,
    reason="its label is a one-vs-one vote and its probabilities come from libsvm's iterative float32 coupling, "
           "exact only as the reference writes it",
)


def _rows(x: torch.Tensor, op: str) -> torch.Tensor:
    if x.dim() == 0 or x.dim() > 2:
        raise ValueError(f"{op} takes a 1-D or 2-D input, got shape {list(x.shape)}")
    return x.reshape(1, -1) if x.dim() == 1 else x


def _feature_count(x: torch.Tensor) -> int:
    return int(x.shape[0] if x.dim() == 1 else x.shape[1])


def _per_feature(x: torch.Tensor, values: torch.Tensor, op: str, what: str) -> torch.Tensor:
    """values[i % stride] for every flat element i, as ONNX Runtime indexes per-feature attributes."""
    if values.numel() == 1:
        return values.reshape(())
    stride = _feature_count(x)
    if values.numel() != stride:
        raise ValueError(f"{op}: {what} has {values.numel()} values; give 1 or one per feature ({stride})")
    repeats = -(-x.numel() // stride)
    return values.repeat(repeats)[: x.numel()].reshape(x.shape)


@register("ArrayFeatureExtractor", *reference_versions("ArrayFeatureExtractor", domain=_ML), domain=_ML)
def array_feature_extractor(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """ArrayFeatureExtractor: x[..., y] along the last axis (a 1-D x gives one row)."""
    index = y.reshape(-1).to(torch.int64)
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= x.shape[-1]):
        raise IndexError(f"indices {index.tolist()} out of range for a last axis of {x.shape[-1]}")
    out = x.index_select(x.dim() - 1, index)
    return out.reshape(1, -1) if x.dim() == 1 else out


@register("Binarizer", *reference_versions("Binarizer", domain=_ML), domain=_ML)
def binarizer(x: torch.Tensor, *, threshold: float = 0.0) -> torch.Tensor:
    """Binarizer: 1 where x > threshold (the threshold in x's dtype), else 0."""
    return (x > torch.tensor(threshold, dtype=torch.float64).to(x.dtype)).to(x.dtype)


@register("Scaler", *reference_versions("Scaler", domain=_ML), domain=_ML)
def scaler(x: torch.Tensor, *, offset: tuple[float, ...] | None = None, scale: tuple[float, ...] | None = None
           ) -> torch.Tensor:
    """Scaler: (x - offset) * scale per feature, as float32 (float64 input works in float64 first)."""
    if x.dim() == 0:
        raise ValueError("Scaler takes an input of at least one dimension")
    if not scale or len(scale) != len(offset or ()):
        raise ValueError("Scaler needs scale and offset of the same, non-zero length")
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    shift = _per_feature(x, torch.tensor(offset, dtype=torch.float32, device=x.device), "Scaler", "offset")
    factor = _per_feature(x, torch.tensor(scale, dtype=torch.float32, device=x.device), "Scaler", "scale")
    return ((x.to(work) - shift.to(work)) * factor.to(work)).to(torch.float32)


@register("Normalizer", *reference_versions("Normalizer", domain=_ML), domain=_ML)
def normalizer(x: torch.Tensor, *, norm: str = "MAX") -> torch.Tensor:
    """Normalizer: each row over its MAX (largest value), L1 or L2 norm, in float32; zero rows stay."""
    values = _rows(x, "Normalizer").to(torch.float32)
    one = torch.ones((), dtype=torch.float32, device=x.device)
    if norm == "MAX":
        total = values.amax(dim=1, keepdim=True)
        out = values / torch.where(total == 0, one, total)
    elif norm == "L1":
        total = values.abs().sum(dim=1, keepdim=True)
        out = values / torch.where(total == 0, one, total)
    elif norm == "L2":
        squares = values * values
        total = squares.sum(dim=1, keepdim=True)
        magnitude = torch.sqrt(squares / total)
        out = torch.where(total == 0, values, torch.where(values < 0, -magnitude, magnitude))
    else:
        raise ValueError(f"Normalizer norm must be MAX, L1 or L2, got {norm!r}")
    return out.reshape(x.shape)


@register("Imputer", *reference_versions("Imputer", domain=_ML), domain=_ML)
def imputer(x: torch.Tensor, *, imputed_value_floats: tuple[float, ...] | None = None,
            imputed_value_int64s: tuple[int, ...] | None = None, replaced_value_float: float = 0.0,
            replaced_value_int64: int = 0) -> torch.Tensor:
    """Imputer: elements equal to the replaced value (NaN matching NaN) take their feature's imputed value."""
    if bool(imputed_value_floats) == bool(imputed_value_int64s):
        raise ValueError("Imputer needs exactly one of imputed_value_floats and imputed_value_int64s")
    if x.dim() == 0:
        raise ValueError("Imputer takes an input of at least one dimension")
    if bool(imputed_value_floats) != x.is_floating_point():
        given = "imputed_value_floats" if imputed_value_floats else "imputed_value_int64s"
        raise ValueError(f"Imputer: {given} does not apply to a {x.dtype} input")
    if imputed_value_floats:
        imputed = torch.tensor(imputed_value_floats, dtype=torch.float32).to(x.dtype)
        hit = torch.isnan(x) if math.isnan(replaced_value_float) else \
            x == torch.tensor(replaced_value_float, dtype=torch.float64).to(x.dtype)
    else:
        imputed = torch.tensor(imputed_value_int64s, dtype=torch.int64).to(x.dtype)
        hit = x == torch.tensor(replaced_value_int64, dtype=torch.int64).to(x.dtype)
    imputed = imputed.to(x.device)
    fill = _per_feature(x, imputed, "Imputer", "imputed values") if imputed.numel() == _feature_count(x) \
        else imputed[0]
    return torch.where(hit, fill, x)


@register("FeatureVectorizer", *reference_versions("FeatureVectorizer", domain=_ML), domain=_ML)
def feature_vectorizer(*inputs: torch.Tensor, inputdimensions: tuple[int, ...] | None = None) -> torch.Tensor:
    """FeatureVectorizer: the inputs' rows side by side as float32, each cut or zero-padded to its width."""
    widths = list(inputdimensions or ())
    if len(widths) != len(inputs) or any(w < 0 for w in widths):
        raise ValueError(f"FeatureVectorizer: {len(inputs)} input(s) but inputdimensions {widths}")
    samples = 1 if inputs[0].dim() <= 1 else inputs[0].shape[0]
    parts = []
    for x, width in zip(inputs, widths, strict=True):
        rows = x.reshape(1 if x.dim() <= 1 else x.shape[0], -1).to(torch.float32)
        if rows.shape[0] != samples:
            raise ValueError(f"FeatureVectorizer: inputs of {rows.shape[0]} and {samples} samples")
        rows = rows[:, :width]
        if rows.shape[1] < width:
            rows = torch.nn.functional.pad(rows, [0, width - rows.shape[1]])
        parts.append(rows)
    return torch.cat(parts, dim=1)


def _erfinv(x: torch.Tensor) -> torch.Tensor:
    """Winitzki's closed-form inverse error function (a = 0.147), as ONNX Runtime's PROBIT uses it."""
    sign = torch.where(x < 0, -1.0, 1.0).to(x.dtype)
    log = torch.log((1 - x) * (1 + x))
    v = 2 / (math.pi * 0.147) + 0.5 * log
    return sign * torch.sqrt(-v + torch.sqrt(v * v - log / 0.147))


def _post_transform(scores: torch.Tensor, post_transform: str) -> torch.Tensor:
    if post_transform == "NONE":
        return scores
    if post_transform == "SOFTMAX":
        shifted = torch.exp(scores - scores.amax(dim=1, keepdim=True))
        return shifted / shifted.sum(dim=1, keepdim=True)
    if post_transform == "LOGISTIC":
        return 1 / (1 + torch.exp(-scores))
    if post_transform == "SOFTMAX_ZERO":
        top = scores.amax(dim=1, keepdim=True)
        counted = scores.to(torch.float32).abs() > 1e-7
        shifted = torch.where(counted, torch.exp(scores - top), scores * torch.exp(-top))
        total = torch.where(counted, shifted, torch.zeros_like(shifted)).sum(dim=1, keepdim=True)
        return shifted / total
    if post_transform == "PROBIT":
        return math.sqrt(2) * _erfinv(2 * scores.to(torch.float64) - 1)
    raise ValueError(f"unknown post_transform {post_transform!r}")


def _batched_scores(scores: torch.Tensor, post_transform: str, complement: bool) -> torch.Tensor:
    """The linear models' post transform as ONNX Runtime applies it (see sealtrace.ops.ml)."""
    if scores.shape[1] > 1:
        return _post_transform(scores, post_transform).to(torch.float32)
    if post_transform == "PROBIT":
        if complement:
            raise NotImplementedError(
                "LinearClassifier with one coefficient row and post_transform PROBIT: ONNX Runtime leaves half "
                "of its scores unwritten")
        return _post_transform(scores, "PROBIT").to(torch.float32)
    if not complement:
        return scores
    score = scores[:, 0]
    if post_transform == "LOGISTIC":
        score = 1 / (1 + torch.exp(-score))
    return torch.stack([1 - score, score], dim=1)


def _linear_scores(x: torch.Tensor, coefficients: tuple[float, ...], intercepts: tuple[float, ...] | None,
                   count: int, op: str) -> torch.Tensor:
    rows = _rows(x, op).to(torch.float32)
    weights = torch.tensor(coefficients, dtype=torch.float32, device=x.device)
    if count <= 0 or weights.numel() != count * rows.shape[1]:
        raise ValueError(f"{op}: {weights.numel()} coefficients do not make {count} row(s) of {rows.shape[1]} features")
    scores = rows @ weights.reshape(count, rows.shape[1]).T
    if intercepts is not None:
        scores = scores + torch.tensor(intercepts, dtype=torch.float32, device=x.device)
    return scores


@register("LinearRegressor", *reference_versions("LinearRegressor", domain=_ML), domain=_ML)
def linear_regressor(x: torch.Tensor, *, coefficients: tuple[float, ...] | None = None,
                     intercepts: tuple[float, ...] | None = None, post_transform: str = "NONE", targets: int = 1
                     ) -> torch.Tensor:
    """LinearRegressor: x @ coefficients^T + intercepts (used when one per target), in float32."""
    bias = intercepts if intercepts and len(intercepts) == targets else None
    scores = _linear_scores(x, coefficients or (), bias, targets, "LinearRegressor")
    return _batched_scores(scores, post_transform, False)


def _labels(chosen: torch.Tensor, ints: tuple[int, ...] | None, strings: tuple[str, ...] | None) -> Any:
    """Class labels by index: an int64 tensor, or a NumPy object array for string labels."""
    if strings:
        table = np.empty(len(strings), dtype=object)
        table[:] = list(strings)
        return table[chosen.cpu().numpy()]
    return torch.tensor(list(ints or ()), dtype=torch.int64, device=chosen.device)[chosen]


@register("LinearClassifier", *reference_versions("LinearClassifier", domain=_ML), domain=_ML)
def linear_classifier(x: torch.Tensor, *, classlabels_ints: tuple[int, ...] | None = None,
                      classlabels_strings: tuple[str, ...] | None = None, coefficients: tuple[float, ...] = (),
                      intercepts: tuple[float, ...] | None = None, multi_class: int = 0,
                      post_transform: str = "NONE") -> tuple[Any, torch.Tensor]:
    """LinearClassifier: (label, scores); one coefficient row is a binary classifier ([1 - s, s])."""
    if not intercepts:
        raise ValueError("LinearClassifier needs one intercept per class")
    scores = _linear_scores(x, coefficients, intercepts, len(intercepts), "LinearClassifier")
    binary = scores.shape[1] == 1
    count = len(classlabels_strings or ()) or len(classlabels_ints or ())
    if count != (2 if binary else scores.shape[1]):
        raise ValueError(f"LinearClassifier with {scores.shape[1]} coefficient row(s) needs "
                         f"{2 if binary else scores.shape[1]} class labels, got {count}")
    chosen = (scores[:, 0] > 0).to(torch.int64) if binary else torch.argmax(scores, dim=1)
    return _labels(chosen, classlabels_ints, classlabels_strings), _batched_scores(scores, post_transform, binary)


def _svm_kernel(x: torch.Tensor, vectors: torch.Tensor, kernel_type: str, params: tuple[float, ...] | None,
                constant: float) -> torch.Tensor:
    if params is not None and len(params) < 3:
        raise ValueError(f"SVM kernel_params must be (gamma, coef0, degree), got {list(params)}")
    gamma, coef0, degree = (float(v) for v in (params or (0.0, 0.0, 0.0))[:3])
    if kernel_type == "RBF":
        delta = x[:, None, :] - vectors[None, :, :]
        return torch.exp(-torch.tensor(gamma, dtype=torch.float32) * (delta * delta).sum(dim=2))
    products = x @ vectors.T
    if kernel_type == "LINEAR":
        return products + constant if constant else products
    if kernel_type not in ("POLY", "SIGMOID"):
        raise ValueError(f"SVM kernel_type must be LINEAR, POLY, RBF or SIGMOID, got {kernel_type!r}")
    products = products * torch.tensor(gamma, dtype=torch.float32)
    if coef0:
        products = products + torch.tensor(coef0, dtype=torch.float32)
    if kernel_type == "SIGMOID":
        return torch.tanh(products)
    return products ** 2 if degree == 2 else products ** 3 if degree == 3 else products ** degree


@register("SVMRegressor", *reference_versions("SVMRegressor", domain=_ML), domain=_ML)
def svm_regressor(x: torch.Tensor, *, coefficients: tuple[float, ...] | None = None,
                  kernel_params: tuple[float, ...] | None = None, kernel_type: str = "LINEAR", n_supports: int = 0,
                  one_class: int = 0, post_transform: str = "NONE", rho: tuple[float, ...] | None = None,
                  support_vectors: tuple[float, ...] | None = None) -> torch.Tensor:
    """SVMRegressor: sum_j coefficient_j * K(x, sv_j) + rho as float32 [N, 1]; one_class gives +1/-1."""
    rows = _rows(x, "SVMRegressor").to(torch.float32)
    weights = torch.tensor(coefficients or (), dtype=torch.float32, device=x.device)
    bias = float(np.float32((rho or (0.0,))[0]))
    if n_supports > 0:
        vectors = torch.tensor(support_vectors or (), dtype=torch.float32, device=x.device).reshape(n_supports, -1)
        if vectors.shape[1] != rows.shape[1] or weights.numel() != n_supports:
            raise ValueError("SVMRegressor: support vectors, coefficients and input features do not match")
        y = _svm_kernel(rows, vectors, kernel_type, kernel_params, 0.0) @ weights + bias
    else:
        if weights.numel() != rows.shape[1]:
            raise ValueError(f"SVMRegressor: {weights.numel()} coefficients for {rows.shape[1]} features")
        y = _svm_kernel(rows, weights.reshape(1, -1), "LINEAR", None, bias)[:, 0]
    if one_class:
        y = torch.where(y > 0, 1.0, -1.0).to(torch.float32)
    return y.reshape(-1, 1)
