"""Classical ML operators of the ai.onnx.ml domain: LabelEncoder, ArrayFeatureExtractor, Binarizer,
TreeEnsemble."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sealtrace.ops.registry import register

_ML = "ai.onnx.ml"


def _object_array(values: Any) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def _encode(
    x: np.ndarray, keys: np.ndarray, values: np.ndarray, default: Any, nan_matches: bool = False
) -> np.ndarray:
    """Map every element of x through keys -> values (the last of repeated keys wins); else default."""
    flat = x.reshape(-1)
    if flat.dtype.kind == "f":
        # Floats are matched by value; from LabelEncoder-4 on a NaN key matches any NaN input.
        table = {float(k): i for i, k in enumerate(keys.astype(flat.dtype)) if not math.isnan(float(k))}
        nan_keys = (i for i, k in enumerate(keys) if math.isnan(float(k)))
        nan_index = max(nan_keys, default=-1) if nan_matches else -1
    else:
        table = {k: i for i, k in enumerate(keys.tolist())}
        nan_index = -1
    # Look every distinct input up once, then scatter back.
    distinct, inverse = np.unique(flat, return_inverse=True)
    if flat.dtype.kind == "f":
        picks = [nan_index if math.isnan(float(v)) else table.get(float(v), -1) for v in distinct]
    else:
        picks = [table.get(v, -1) for v in distinct.tolist()]
    index = np.asarray(picks, dtype=np.int64)[inverse.reshape(-1)]
    out = np.empty(flat.shape, dtype=values.dtype)
    found = index >= 0
    out[found] = values[index[found]]
    out[~found] = default
    return out.reshape(x.shape)


@register("LabelEncoder", 1, domain=_ML)
def label_encoder_1(
    x: np.ndarray, *, classes_strings: tuple[str, ...] | None, default_int64: int, default_string: str
) -> np.ndarray:
    """LabelEncoder-1: strings to their index in classes_strings, or indices to the class strings."""
    classes = _object_array(classes_strings or ())
    if x.dtype == object:
        return _encode(x, classes, np.arange(len(classes), dtype=np.int64), default_int64)
    return _encode(x.astype(np.int64), np.arange(len(classes), dtype=np.int64), classes, default_string)


def _label_encoder(x: np.ndarray, attrs: dict[str, Any], nan_matches: bool) -> np.ndarray:
    keys: np.ndarray | None = None
    if attrs.get("keys_tensor") is not None:
        keys = attrs["keys_tensor"].reshape(-1)
    elif attrs.get("keys_strings") is not None:
        keys = _object_array(attrs["keys_strings"])
    elif attrs.get("keys_int64s") is not None:
        keys = np.asarray(attrs["keys_int64s"], dtype=np.int64)
    elif attrs.get("keys_floats") is not None:
        keys = np.asarray(attrs["keys_floats"], dtype=np.float32)
    if keys is None:
        raise ValueError("LabelEncoder needs one of the keys_* attributes")
    if attrs.get("values_tensor") is not None:
        values = attrs["values_tensor"].reshape(-1)
        if attrs.get("default_tensor") is not None:
            default: Any = attrs["default_tensor"].reshape(-1)[0]
        else:
            default = "_Unused" if values.dtype == object else (-0.0 if values.dtype.kind == "f" else -1)
    elif attrs.get("values_strings") is not None:
        values, default = _object_array(attrs["values_strings"]), attrs["default_string"]
    elif attrs.get("values_int64s") is not None:
        values, default = np.asarray(attrs["values_int64s"], dtype=np.int64), attrs["default_int64"]
    elif attrs.get("values_floats") is not None:
        values, default = np.asarray(attrs["values_floats"], dtype=np.float32), attrs["default_float"]
    else:
        raise ValueError("LabelEncoder needs one of the values_* attributes")
    if len(keys) != len(values):
        raise ValueError(f"LabelEncoder has {len(keys)} keys but {len(values)} values")
    return _encode(x, keys, values, default, nan_matches)


@register("LabelEncoder", 2, domain=_ML)
def label_encoder_2(
    x: np.ndarray,
    *,
    default_float: float,
    default_int64: int,
    default_string: str,
    keys_floats: tuple[float, ...] | None,
    keys_int64s: tuple[int, ...] | None,
    keys_strings: tuple[str, ...] | None,
    values_floats: tuple[float, ...] | None,
    values_int64s: tuple[int, ...] | None,
    values_strings: tuple[str, ...] | None,
) -> np.ndarray:
    """LabelEncoder-2: keys_* -> values_* mapping (floats, int64s or strings)."""
    return _label_encoder(x, dict(locals()), nan_matches=False)


@register("LabelEncoder", 4, domain=_ML)
def label_encoder_4(
    x: np.ndarray,
    *,
    default_float: float,
    default_int64: int,
    default_string: str,
    default_tensor: np.ndarray | None,
    keys_floats: tuple[float, ...] | None,
    keys_int64s: tuple[int, ...] | None,
    keys_strings: tuple[str, ...] | None,
    keys_tensor: np.ndarray | None,
    values_floats: tuple[float, ...] | None,
    values_int64s: tuple[int, ...] | None,
    values_strings: tuple[str, ...] | None,
    values_tensor: np.ndarray | None,
) -> np.ndarray:
    """LabelEncoder-4: adds keys / values / default as tensors of any type; NaN keys match NaN."""
    return _label_encoder(x, dict(locals()), nan_matches=True)


@register("ArrayFeatureExtractor", 1, domain=_ML)
def array_feature_extractor(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """ArrayFeatureExtractor-1: x[..., y] along the last axis (a 1-D x gives one row, as in ONNX Runtime)."""
    index = y.reshape(-1).astype(np.int64)
    if index.size and (index.min() < 0 or index.max() >= x.shape[-1]):
        raise IndexError(f"indices {index.tolist()} out of range for a last axis of {x.shape[-1]}")
    out = np.take(x, index, axis=-1)
    return out.reshape(1, -1) if x.ndim == 1 else out


@register("Binarizer", 1, domain=_ML)
def binarizer(x: np.ndarray, *, threshold: float) -> np.ndarray:
    """Binarizer-1: 1 where x > threshold, else 0, in x's dtype."""
    return (x > np.asarray(threshold).astype(x.dtype)).astype(x.dtype)


def _tree_leaves(
    x: np.ndarray,
    roots: np.ndarray,
    nodes: dict[str, np.ndarray],
    members: dict[int, np.ndarray],
) -> np.ndarray:
    """Leaf index reached by every (sample, tree): walks all of them down together, one level a step."""
    samples = x.shape[0]
    current = np.broadcast_to(roots, (samples, len(roots))).copy()
    at_leaf = np.zeros(current.shape, dtype=bool)
    # A root whose branches both name the same leaf is a single-leaf tree.
    single = (
        nodes["trueleafs"][roots]
        & nodes["falseleafs"][roots]
        & (nodes["truenodeids"][roots] == nodes["falsenodeids"][roots])
    )
    current[:, single] = nodes["truenodeids"][roots[single]]
    at_leaf[:, single] = True
    rows = np.broadcast_to(np.arange(samples)[:, None], current.shape)
    for _ in range(len(nodes["modes"]) + 1):
        active = ~at_leaf
        if not active.any():
            break
        node = current[active]
        value = x[rows[active], nodes["featureids"][node]]
        split = nodes["splits"][node]
        mode = nodes["modes"][node]
        with np.errstate(invalid="ignore"):
            outcome = np.select(
                [mode == 0, mode == 1, mode == 2, mode == 3, mode == 4, mode == 5],
                [
                    value <= split,
                    value < split,
                    value >= split,
                    value > split,
                    value == split,
                    value != split,
                ],
                default=False,
            )
        for member_node, member_set in members.items():
            here = node == member_node
            if here.any():
                outcome[here] = np.isin(value[here], member_set)
        # A NaN feature also takes the true branch where the node says so (the comparison may already).
        outcome = outcome | (np.isnan(value) & nodes["missing_tracks_true"][node])
        current[active] = np.where(outcome, nodes["truenodeids"][node], nodes["falsenodeids"][node])
        at_leaf[active] = np.where(outcome, nodes["trueleafs"][node], nodes["falseleafs"][node])
    if not at_leaf.all():
        raise ValueError("TreeEnsemble: a tree does not end in leaves (cycle in nodes_*)")
    return current


def _erfinv(x: np.ndarray) -> np.ndarray:
    """Winitzki's closed-form inverse error function (a = 0.147), the one ONNX Runtime's PROBIT uses."""
    sign = np.where(x < 0, -1.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        log = np.log((1 - x) * (1 + x))
        v = 2 / (np.pi * 0.147) + 0.5 * log
        return sign * np.sqrt(-v + np.sqrt(v * v - log / 0.147))


def _post_transform(scores: np.ndarray, post_transform: int) -> np.ndarray:
    if post_transform == 0:
        return scores
    if post_transform == 1:  # SOFTMAX
        shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)
    if post_transform == 2:  # LOGISTIC
        return 1 / (1 + np.exp(-scores))
    if post_transform == 3:  # SOFTMAX_ZERO: zeros stay zero
        nonzero = scores != 0
        shifted = np.where(nonzero, np.exp(scores - scores.max(axis=1, keepdims=True)), 0)
        total = shifted.sum(axis=1, keepdims=True)
        return shifted / np.where(total == 0, 1, total)
    if post_transform == 4:  # PROBIT: sqrt(2) * erfinv(2p - 1)
        return np.sqrt(2) * _erfinv(2 * scores - 1)
    raise ValueError(f"unknown post_transform {post_transform}")


@register("TreeEnsemble", 5, domain=_ML)
def tree_ensemble(
    x: np.ndarray,
    *,
    aggregate_function: int,
    leaf_targetids: tuple[int, ...],
    leaf_weights: np.ndarray,
    membership_values: np.ndarray | None,
    n_targets: int,
    nodes_falseleafs: tuple[int, ...],
    nodes_falsenodeids: tuple[int, ...],
    nodes_featureids: tuple[int, ...],
    nodes_hitrates: np.ndarray | None,
    nodes_missing_value_tracks_true: tuple[int, ...] | None,
    nodes_modes: np.ndarray,
    nodes_splits: np.ndarray,
    nodes_trueleafs: tuple[int, ...],
    nodes_truenodeids: tuple[int, ...],
    post_transform: int,
    tree_roots: tuple[int, ...],
) -> np.ndarray:
    """TreeEnsemble-5: every tree's leaf weight added to its target, aggregated, post-transformed."""
    work = np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)
    data = x.astype(work, copy=False).reshape(x.shape[0], -1)
    count = len(nodes_modes)
    modes = np.asarray(nodes_modes, dtype=np.int64).reshape(-1)
    nodes = {
        "modes": modes,
        # Thresholds in the input's precision, compared exactly.
        "splits": np.asarray(nodes_splits).reshape(-1).astype(work),
        "featureids": np.asarray(nodes_featureids, dtype=np.int64),
        "truenodeids": np.asarray(nodes_truenodeids, dtype=np.int64),
        "falsenodeids": np.asarray(nodes_falsenodeids, dtype=np.int64),
        "trueleafs": np.asarray(nodes_trueleafs, dtype=bool),
        "falseleafs": np.asarray(nodes_falseleafs, dtype=bool),
        "missing_tracks_true": np.asarray(nodes_missing_value_tracks_true or [0] * count, dtype=bool),
    }
    members: dict[int, np.ndarray] = {}
    if (modes == 6).any():
        if membership_values is None:
            raise ValueError("TreeEnsemble: BRANCH_MEMBER nodes need membership_values")
        flat = np.asarray(membership_values).reshape(-1).astype(work)
        # One NaN-terminated set per BRANCH_MEMBER node, in node order.
        cuts = np.nonzero(np.isnan(flat))[0]
        starts = np.concatenate([[0], cuts[:-1] + 1])
        for node, start, stop in zip(np.nonzero(modes == 6)[0], starts, cuts, strict=False):
            members[int(node)] = flat[start:stop]
    roots = np.asarray(tree_roots, dtype=np.int64)
    leaves = _tree_leaves(data, roots, nodes, members)
    weights = np.asarray(leaf_weights).reshape(-1).astype(work)[leaves]
    targets = np.asarray(leaf_targetids, dtype=np.int64)[leaves]
    samples = np.broadcast_to(np.arange(data.shape[0])[:, None], leaves.shape)
    scores = np.zeros((data.shape[0], n_targets), dtype=work)
    if aggregate_function in (0, 1):  # AVERAGE, SUM
        np.add.at(scores, (samples, targets), weights)
        if aggregate_function == 0:
            scores /= work.type(len(roots))
    elif aggregate_function in (2, 3):  # MIN, MAX
        reduce = np.minimum if aggregate_function == 2 else np.maximum
        start = np.inf if aggregate_function == 2 else -np.inf
        scores[:] = start
        reduce.at(scores, (samples, targets), weights)
        # A target no tree contributes to scores 0.
        scores[np.isinf(scores) & (scores == start)] = 0
    else:
        raise ValueError(f"unknown aggregate_function {aggregate_function}")
    return _post_transform(scores, post_transform).astype(x.dtype)
