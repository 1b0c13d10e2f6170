"""Classical ML operators of the ai.onnx.ml domain: LabelEncoder, ArrayFeatureExtractor, Binarizer,
Scaler, Normalizer, Imputer, OneHotEncoder, CategoryMapper, FeatureVectorizer, DictVectorizer, CastMap,
LinearRegressor, LinearClassifier, SVMRegressor, SVMClassifier, TreeEnsemble*, ZipMap. Maps are Python
dicts, as ONNX Runtime's Python API takes and returns them.

Where the spec leaves a case open (two-class scores, post transforms on one score), the kernels do
what ONNX Runtime, the numerical oracle, does; cases where ORT leaves part of its output unwritten
are refused.

Numerics are portable (docs/numerics.md): dot products are correctly rounded sums (numerics.gemm,
with the intercept or rho inside the one rounding), exp / tanh / log / sigmoid / pow are correctly
rounded (numerics.apply, numerics.power), reductions are numerics' (softmax, sums, norms), and every
other step is an IEEE operation in a fixed order (tree votes are added one at a time in sample and
tree order; libsvm's probability coupling accumulates its sums in index order)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sealtrace.ops import numerics
from sealtrace.ops.registry import KernelContext, register

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
    root_is_leaf: np.ndarray,
    nodes: dict[str, np.ndarray],
    members: dict[int, np.ndarray],
) -> np.ndarray:
    """Leaf index reached by every (sample, tree): walks all of them down together, one level a step.

    ``nodes`` holds per interior node: modes, splits, featureids, missing_tracks_true and, for each
    branch, the next index (truenodeids / falsenodeids) and whether it is a leaf (trueleafs / falseleafs).
    """
    samples = x.shape[0]
    current = np.broadcast_to(roots, (samples, len(roots))).copy()
    at_leaf = np.broadcast_to(root_is_leaf, current.shape).copy()
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


# ONNX Runtime's PROBIT constants, float32 operations as its ErfInv spells them:
# 2 / (float(M_PI) * 0.147f), 1 / 0.147f, and sqrt(2) as 1.41421356f.
_F32 = np.float32
_WINITZKI_A = _F32(0.147)
_ERFINV_OFFSET = _F32(2) / (_F32(math.pi) * _WINITZKI_A)
_ERFINV_SLOPE = _F32(1) / _WINITZKI_A
_PROBIT_SQRT2 = _F32(1.41421356)


def _probit(scores: np.ndarray) -> np.ndarray:
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


def _post_transform(scores: np.ndarray, post_transform: str) -> np.ndarray:
    """A post transform of [samples, n] scores in their own float type (PROBIT: float32)."""
    if post_transform == "NONE":
        return scores
    if post_transform == "SOFTMAX":
        return numerics.softmax(scores, 1)
    if post_transform == "LOGISTIC":
        return _logistic(scores)
    if post_transform == "SOFTMAX_ZERO":
        # As ONNX Runtime does it: scores within 1e-7 of zero take no part in the sum and become
        # score * exp(-max) / sum (zeros stay zero); a row of such scores divides by 0 (NaN).
        top = scores.max(axis=1, keepdims=True)
        counted = np.abs(scores.astype(_F32)) > _F32(1e-7)
        with np.errstate(invalid="ignore", over="ignore"):
            shifted = np.where(counted, numerics.apply("exp", scores - top), scores * numerics.apply("exp", -top))
        total = numerics.reduce_sum(np.where(counted, shifted, scores.dtype.type(0)), (1,))
        with np.errstate(invalid="ignore", divide="ignore"):
            return shifted / total
    if post_transform == "PROBIT":
        return _probit(scores)
    raise ValueError(f"unknown post_transform {post_transform!r}")


def _aggregate(
    leaves: np.ndarray,
    vote_ids: np.ndarray,
    vote_targets: np.ndarray,
    vote_weights: np.ndarray,
    n_targets: int,
    aggregate: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Scores [samples, n_targets] from the leaves reached (samples x trees) and the leaves' votes,
    with which scores got any vote at all.

    Votes are (leaf id, target, weight); a leaf may cast several. They are applied sample by sample in
    tree order, as ONNX Runtime accumulates them.
    """
    samples, trees = leaves.shape
    order = np.argsort(vote_ids, kind="stable")
    sorted_ids = vote_ids[order]
    flat = leaves.reshape(-1)
    first = np.searchsorted(sorted_ids, flat, side="left")
    count = np.searchsorted(sorted_ids, flat, side="right") - first
    total = int(count.sum())
    # Expand every reached leaf into its votes: vote k of leaf j is order[first[j] + k].
    owner = np.repeat(np.arange(flat.size), count)
    offset = np.arange(total) - np.repeat(np.cumsum(count) - count, count)
    votes = order[first[owner] + offset]
    rows = owner // trees
    targets = vote_targets[votes]
    weights = vote_weights[votes]
    scores = np.zeros((samples, n_targets), dtype=vote_weights.dtype)
    voted = np.zeros(scores.shape, dtype=bool)
    voted[rows, targets] = True
    if aggregate in ("SUM", "AVERAGE"):
        np.add.at(scores, (rows, targets), weights)
        if aggregate == "AVERAGE":
            scores /= vote_weights.dtype.type(trees)
        return scores, voted
    if aggregate not in ("MIN", "MAX"):
        raise ValueError(f"unknown aggregate_function {aggregate!r}")
    reduce = np.minimum if aggregate == "MIN" else np.maximum
    scores[:] = np.inf if aggregate == "MIN" else -np.inf
    reduce.at(scores, (rows, targets), weights)
    # A target that no reached leaf votes for scores 0.
    return np.where(voted, scores, 0).astype(scores.dtype), voted


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
    # A root whose branches both name the same leaf is a single-leaf tree.
    single = (
        nodes["trueleafs"][roots]
        & nodes["falseleafs"][roots]
        & (nodes["truenodeids"][roots] == nodes["falsenodeids"][roots])
    )
    leaves = _tree_leaves(data, np.where(single, nodes["truenodeids"][roots], roots), single, nodes, members)
    aggregate = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}.get(aggregate_function)
    if aggregate is None:
        raise ValueError(f"unknown aggregate_function {aggregate_function}")
    leaf_ids = np.arange(len(leaf_targetids))
    weights = np.asarray(leaf_weights).reshape(-1).astype(work)
    scores, _ = _aggregate(
        leaves, leaf_ids, np.asarray(leaf_targetids, np.int64), weights, n_targets, aggregate
    )
    post = {0: "NONE", 1: "SOFTMAX", 2: "LOGISTIC", 3: "SOFTMAX_ZERO", 4: "PROBIT"}.get(post_transform)
    if post is None:
        raise ValueError(f"unknown post_transform {post_transform}")
    return _post_transform(scores, post).astype(x.dtype)


_LEGACY_MODES = {
    "BRANCH_LEQ": 0,
    "BRANCH_LT": 1,
    "BRANCH_GTE": 2,
    "BRANCH_GT": 3,
    "BRANCH_EQ": 4,
    "BRANCH_NEQ": 5,
    "LEAF": -1,
}


def _tensor_or_list(tensor: np.ndarray | None, values: Any, work: np.dtype[Any]) -> np.ndarray:
    """A *_as_tensor attribute (double precision) when given, else the float list attribute."""
    if tensor is not None:
        return np.asarray(tensor).reshape(-1).astype(work)
    return np.asarray(values if values is not None else [], dtype=np.float32).astype(work)


def _legacy_leaves(
    data: np.ndarray, attrs: dict[str, Any], work: np.dtype[Any]
) -> tuple[np.ndarray, dict[tuple[int, int], int]]:
    """Leaves reached (global node index, samples x trees) for TreeEnsembleRegressor / Classifier."""
    tree_ids = [int(t) for t in attrs["nodes_treeids"]]
    node_ids = [int(n) for n in attrs["nodes_nodeids"]]
    where = {(t, n): i for i, (t, n) in enumerate(zip(tree_ids, node_ids, strict=True))}
    modes = np.array([_LEGACY_MODES[m] for m in attrs["nodes_modes"]], dtype=np.int64)
    count = len(modes)
    is_leaf = modes < 0

    def child(ids: Any) -> np.ndarray:
        # Leaves point nowhere: keep their own index so that the arrays stay well formed.
        return np.array(
            [i if is_leaf[i] else where[(tree_ids[i], int(ids[i]))] for i in range(count)], dtype=np.int64
        )

    true_next, false_next = child(attrs["nodes_truenodeids"]), child(attrs["nodes_falsenodeids"])
    missing = attrs.get("nodes_missing_value_tracks_true")
    nodes = {
        "modes": modes,
        "splits": _tensor_or_list(attrs.get("nodes_values_as_tensor"), attrs.get("nodes_values"), work),
        "featureids": np.asarray(attrs["nodes_featureids"], dtype=np.int64),
        "truenodeids": true_next,
        "falsenodeids": false_next,
        "trueleafs": is_leaf[true_next],
        "falseleafs": is_leaf[false_next],
        "missing_tracks_true": np.asarray(missing or [0] * count, dtype=bool),
    }
    # Each tree's root is the one node of the tree that no other node points to; trees in order of appearance.
    pointed = {
        (tree_ids[i], int(n))
        for i in range(count)
        if not is_leaf[i]
        for n in (attrs["nodes_truenodeids"][i], attrs["nodes_falsenodeids"][i])
    }
    roots: dict[int, int] = {}
    for i, key in enumerate(zip(tree_ids, node_ids, strict=True)):
        if key not in pointed and key[0] not in roots:
            roots[key[0]] = i
    root_index = np.array(list(roots.values()), dtype=np.int64)
    return _tree_leaves(data, root_index, is_leaf[root_index], nodes, {}), where


def _legacy_votes(where: dict[tuple[int, int], int], tree_ids: Any, node_ids: Any) -> np.ndarray:
    """The global node index of every (tree id, node id) vote."""
    return np.array(
        [where[(int(t), int(n))] for t, n in zip(tree_ids, node_ids, strict=True)], dtype=np.int64
    )


@register("TreeEnsembleRegressor", 1, 3, domain=_ML)
def tree_ensemble_regressor(
    x: np.ndarray,
    *,
    aggregate_function: str,
    base_values: tuple[float, ...] | None,
    n_targets: int | None,
    nodes_falsenodeids: tuple[int, ...],
    nodes_featureids: tuple[int, ...],
    nodes_hitrates: tuple[float, ...] | None,
    nodes_missing_value_tracks_true: tuple[int, ...] | None,
    nodes_modes: tuple[str, ...],
    nodes_nodeids: tuple[int, ...],
    nodes_treeids: tuple[int, ...],
    nodes_truenodeids: tuple[int, ...],
    nodes_values: tuple[float, ...] | None,
    post_transform: str,
    target_ids: tuple[int, ...],
    target_nodeids: tuple[int, ...],
    target_treeids: tuple[int, ...],
    target_weights: tuple[float, ...] | None,
    base_values_as_tensor: np.ndarray | None = None,
    nodes_hitrates_as_tensor: np.ndarray | None = None,
    nodes_values_as_tensor: np.ndarray | None = None,
    target_weights_as_tensor: np.ndarray | None = None,
) -> np.ndarray:
    """TreeEnsembleRegressor-1, -3: votes of the leaves reached, aggregated, plus base values, transformed."""
    attrs = dict(locals())
    work = np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)
    data = x.astype(work).reshape(x.shape[0], -1)
    leaves, where = _legacy_leaves(data, attrs, work)
    weights = _tensor_or_list(target_weights_as_tensor, target_weights, work)
    votes = _legacy_votes(where, target_treeids, target_nodeids)
    targets = np.asarray(target_ids, dtype=np.int64)
    n_out = n_targets if n_targets is not None else int(targets.max(initial=-1)) + 1
    scores, voted = _aggregate(leaves, votes, targets, weights, n_out, aggregate_function)
    base = _tensor_or_list(base_values_as_tensor, base_values, work)
    if base.size:
        # ONNX Runtime adds a base value only to targets some leaf voted for; the others stay 0.
        scores = np.where(voted, scores + base.reshape(1, -1), scores)
    return _post_transform(scores, post_transform).astype(np.float32)


@register("TreeEnsembleClassifier", 1, 3, domain=_ML)
def tree_ensemble_classifier(
    x: np.ndarray,
    *,
    base_values: tuple[float, ...] | None,
    class_ids: tuple[int, ...],
    class_nodeids: tuple[int, ...],
    class_treeids: tuple[int, ...],
    class_weights: tuple[float, ...] | None,
    classlabels_int64s: tuple[int, ...] | None,
    classlabels_strings: tuple[str, ...] | None,
    nodes_falsenodeids: tuple[int, ...],
    nodes_featureids: tuple[int, ...],
    nodes_hitrates: tuple[float, ...] | None,
    nodes_missing_value_tracks_true: tuple[int, ...] | None,
    nodes_modes: tuple[str, ...],
    nodes_nodeids: tuple[int, ...],
    nodes_treeids: tuple[int, ...],
    nodes_truenodeids: tuple[int, ...],
    nodes_values: tuple[float, ...] | None,
    post_transform: str,
    base_values_as_tensor: np.ndarray | None = None,
    class_weights_as_tensor: np.ndarray | None = None,
    nodes_hitrates_as_tensor: np.ndarray | None = None,
    nodes_values_as_tensor: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """TreeEnsembleClassifier-1, -3: (top label, class scores); two classes as ONNX Runtime scores them."""
    attrs = dict(locals())
    labels: np.ndarray = (
        _object_array(classlabels_strings)
        if classlabels_strings
        else np.asarray(classlabels_int64s or (), np.int64)
    )
    n_classes = len(labels)
    work = np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)
    data = x.astype(work).reshape(x.shape[0], -1)
    leaves, where = _legacy_leaves(data, attrs, work)
    weights = _tensor_or_list(class_weights_as_tensor, class_weights, work)
    votes = _legacy_votes(where, class_treeids, class_nodeids)
    ids = np.asarray(class_ids, dtype=np.int64)
    scores, voted = _aggregate(leaves, votes, ids, weights, n_classes, "SUM")
    base = _tensor_or_list(base_values_as_tensor, base_values, work)
    if n_classes > 2:
        # Base values count as votes: a class no leaf voted for scores its base value.
        scores[:, : base.size] += base
        voted[:, : base.size] = True
        best = np.argmax(np.where(voted, scores, -np.inf), axis=1)  # first of equal maxima
        return labels[best], _post_transform(scores, post_transform).astype(np.float32)
    if n_classes != 2:
        raise ValueError(f"TreeEnsembleClassifier needs at least 2 class labels, got {n_classes}")
    single_class = len(set(class_ids)) == 1
    index, out = _binary_classification(
        scores, voted, base, single_class=single_class, all_positive=bool((weights >= 0).all()),
        post_transform=post_transform,
    )
    if classlabels_strings or single_class:
        return labels[index], out
    # Both classes voted on: ONNX Runtime labels the sample 1 or 0 (the class index, whatever the
    # int64 labels are).
    return index.astype(np.int64), out


def _binary_classification(
    scores: np.ndarray, voted: np.ndarray, base: np.ndarray, *, single_class: bool, all_positive: bool,
    post_transform: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Two classes, as ONNX Runtime scores them (the spec leaves this open): the index of the label
    chosen per sample and the [samples, 2] scores.

    ONNX Runtime works on (score, has_score) pairs, where a score no leaf voted for reads as 0:
    - base_values of length 2: a sample with a vote for class 1 gets class 1 = base[1] + class 0 and
      class 0 = -class 1; otherwise each class adds its base value. Length 1: class 0 adds it, and a
      sample with no vote for class 1 keeps a single score. None: as length 1, and a single score s
      becomes [-s, s].
    - The decision weight is class 1's score when it has one, else class 0's. When every vote is for
      one class, the label is class 1 above 0.5 (all weights non-negative) or above 0 (mixed), and a
      single score s becomes [1 - s, s] (non-negative weights; LOGISTIC: s = logistic(s) first) or
      [-s, s] (mixed). With votes for both classes the label is 1 when the decision weight is above 0.
    - [-s, s] under LOGISTIC is [logistic(-s), logistic(s)]; two scores go through the post
      transform like any other.
    """
    samples = scores.shape[0]
    score0, score1 = scores[:, 0].copy(), scores[:, 1].copy()
    has0, has1 = voted[:, 0], voted[:, 1]
    single_score = np.zeros(samples, dtype=bool)
    expand: str | None = None  # how a single score s becomes two: "complement", "negate", or not at all
    if base.size == 2:
        score1 = np.where(has1, base[1] + score0, score1 + base[1])
        score0 = np.where(has1, -score1, score0 + base[0])
    elif base.size <= 1:
        if base.size:
            score0 = score0 + base[0]
        else:
            expand = "negate"
        single_score = ~has1
    value0 = np.where(has0, score0, 0).astype(score0.dtype)
    value1 = np.where(has1, score1, 0).astype(score1.dtype)
    decision = np.where(has1 & ~single_score, value1, value0)
    if single_class:
        positive = decision > (0.5 if all_positive else 0)
        expand = "complement" if all_positive else "negate"
    else:
        positive = decision > 0
    out = np.empty((samples, 2), dtype=np.float32)
    pair = ~single_score
    if pair.any():
        out[pair] = _post_transform(np.stack([value0[pair], value1[pair]], axis=1), post_transform)
    if single_score.any():
        if post_transform == "PROBIT" or expand is None:
            # ONNX Runtime writes one score and leaves the second column as it found the buffer.
            why = "post_transform PROBIT" if post_transform == "PROBIT" else "votes for both classes"
            raise NotImplementedError(
                f"TreeEnsembleClassifier with two classes, {why} and fewer than 2 base_values: a sample no "
                "leaf votes class 1 for has no defined second score (ONNX Runtime leaves it unwritten)"
            )
        single = value0[single_score]
        if expand == "complement":
            out[single_score] = _complement(single, post_transform)
        elif post_transform == "LOGISTIC":
            out[single_score] = np.stack([_logistic(-single), _logistic(single)], axis=1)
        else:
            out[single_score] = np.stack([-single, single], axis=1)
    return positive.astype(np.intp), out


def _logistic(x: np.ndarray) -> np.ndarray:
    """RN(1 / (1 + exp(-x))) in x's type."""
    return numerics.apply("sigmoid", x)


def _complement(score: np.ndarray, post_transform: str) -> np.ndarray:
    """A binary classifier's single score s per sample as ONNX Runtime writes two: [1 - s, s], with s
    the logistic of the score under LOGISTIC (no other transform applies)."""
    if post_transform == "LOGISTIC":
        score = _logistic(score)
    return np.stack([1 - score, score], axis=1)


def _as_float32(x: np.ndarray) -> np.ndarray:
    """The input as float32, as ONNX Runtime casts float64/int32/int64 features for these kernels."""
    return x.astype(np.float32, copy=False)


def _rows(x: np.ndarray, op: str) -> np.ndarray:
    """A 1-D or 2-D feature input as [samples, features] (1-D: one sample)."""
    if x.ndim == 0 or x.ndim > 2:
        raise ValueError(f"{op} takes a 1-D or 2-D input, got shape {list(x.shape)}")
    return x.reshape(1, -1) if x.ndim == 1 else x


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


@register("Scaler", 1, domain=_ML)
def scaler(x: np.ndarray, *, offset: tuple[float, ...] | None, scale: tuple[float, ...] | None) -> np.ndarray:
    """Scaler-1: (x - offset) * scale per feature, as float32 (float64 input works in float64 first)."""
    if x.ndim == 0:
        raise ValueError("Scaler takes an input of at least one dimension")
    if not scale or len(scale) != len(offset or ()):
        raise ValueError("Scaler needs scale and offset of the same, non-zero length")
    work = np.float64 if x.dtype == np.float64 else np.float32
    shifted = x.astype(work, copy=False) - _per_feature(x, np.asarray(offset, np.float32), "Scaler", "offset")
    return (shifted * _per_feature(x, np.asarray(scale, np.float32), "Scaler", "scale")).astype(np.float32)


@register("Normalizer", 1, domain=_ML)
def normalizer(x: np.ndarray, *, norm: str) -> np.ndarray:
    """Normalizer-1: each row divided by its MAX (the largest value, not magnitude), L1 or L2 norm,
    in float32; a row whose norm is 0 is left as it is."""
    rows = _rows(x, "Normalizer")
    values = _as_float32(rows)
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


@register("Imputer", 1, domain=_ML)
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


@register("OneHotEncoder", 1, domain=_ML)
def one_hot_encoder(
    x: np.ndarray, *, cats_int64s: tuple[int, ...] | None, cats_strings: tuple[str, ...] | None, zeros: int
) -> np.ndarray:
    """OneHotEncoder-1: a new last axis of len(categories), 1.0 at each element's category (numbers
    are truncated to int64 first); an unknown category is all zeros, or an error when zeros=0."""
    if bool(cats_int64s) == bool(cats_strings):
        raise ValueError("OneHotEncoder needs exactly one of cats_int64s and cats_strings")
    if x.ndim > 2:
        raise ValueError(f"OneHotEncoder takes an input of rank 2 at most, got shape {list(x.shape)}")
    if cats_strings:
        categories = _object_array(cats_strings)
        flat = x.reshape(-1)
    else:
        categories = np.asarray(cats_int64s, dtype=np.int64)
        flat = x.reshape(-1).astype(np.int64)
    # A repeated category counts at its last position, as in ORT's category table.
    index = _encode(flat, categories, np.arange(len(categories), dtype=np.int64), -1)
    if not zeros and (index < 0).any():
        unknown = flat[int(np.flatnonzero(index < 0)[0])]
        raise ValueError(f"OneHotEncoder: unknown category {unknown!r} and zeros=0")
    out = np.zeros((flat.size, len(categories)), dtype=np.float32)
    known = np.flatnonzero(index >= 0)
    out[known, index[known]] = 1.0
    return out.reshape(*x.shape, len(categories))


def _linear_scores(x: np.ndarray, coefficients: tuple[float, ...], intercepts: np.ndarray | None, count: int,
                   op: str) -> np.ndarray:
    """x @ coefficients^T (+ intercepts) in float32: [samples, count], each element RN(sum of
    products + intercept), one rounding (Gemm's)."""
    rows = _as_float32(_rows(x, op))
    weights = np.asarray(coefficients, dtype=np.float32)
    if count <= 0 or weights.size != count * rows.shape[1]:
        raise ValueError(
            f"{op}: {weights.size} coefficients do not make {count} row(s) of {rows.shape[1]} features"
        )
    return numerics.gemm(rows, weights.reshape(count, rows.shape[1]).T, intercepts, 1.0, 1.0)


def _batched_scores(scores: np.ndarray, post_transform: str, complement: bool) -> np.ndarray:
    """ONNX Runtime's post transform of the linear models' [samples, n] scores. With n > 1 it is the
    plain transform. With one score per sample only PROBIT applies, unless ``complement`` (a binary
    classifier) adds the other class's score: s becomes [1 - s, s], after the logistic under
    LOGISTIC (SOFTMAX and SOFTMAX_ZERO are not applied)."""
    if scores.shape[1] > 1:
        return _post_transform(scores, post_transform).astype(np.float32, copy=False)
    if post_transform == "PROBIT":
        if complement:  # ORT writes the probits packed and leaves half the output unwritten
            raise NotImplementedError(
                "LinearClassifier with one coefficient row and post_transform PROBIT: ONNX Runtime leaves half "
                "of its scores unwritten"
            )
        return _post_transform(scores, "PROBIT").astype(np.float32, copy=False)
    return _complement(scores[:, 0], post_transform) if complement else scores


@register("LinearRegressor", 1, domain=_ML)
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
    return _batched_scores(scores, post_transform, False)


@register("LinearClassifier", 1, domain=_ML)
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
    labels: np.ndarray = (
        _object_array(classlabels_strings) if classlabels_strings else np.asarray(classlabels_ints or (), np.int64)
    )
    scores = _linear_scores(x, coefficients, np.asarray(intercepts, np.float32), len(intercepts), "LinearClassifier")
    binary = scores.shape[1] == 1
    if len(labels) != (2 if binary else scores.shape[1]):
        raise ValueError(
            f"LinearClassifier with {scores.shape[1]} coefficient row(s) needs {2 if binary else scores.shape[1]} "
            f"class labels, got {len(labels)}"
        )
    chosen = (scores[:, 0] > 0).astype(np.intp) if binary else np.argmax(scores, axis=1)
    return labels[chosen], _batched_scores(scores, post_transform, binary)


@register("ZipMap", 1, domain=_ML)
def zip_map(
    x: np.ndarray, *, classlabels_int64s: tuple[int, ...] | None, classlabels_strings: tuple[str, ...] | None
) -> list[dict[Any, float]]:
    """ZipMap-1: each row of scores as a map from class label to score, a sequence of maps. Maps are
    Python dicts of Python numbers, as ONNX Runtime's Python API returns them (scikit-learn
    classifiers converted by skl2onnx end with this op by default)."""
    if bool(classlabels_int64s) == bool(classlabels_strings):
        raise ValueError("ZipMap needs exactly one of classlabels_int64s and classlabels_strings")
    labels: list[Any] = list(classlabels_strings) if classlabels_strings else [int(v) for v in classlabels_int64s or ()]
    if x.ndim not in (1, 2) or x.shape[-1] != len(labels):
        raise ValueError(f"ZipMap: input of shape {list(x.shape)} for {len(labels)} class labels")
    rows = x.reshape(-1, len(labels)).astype(np.float32, copy=False).tolist()
    return [dict(zip(labels, row, strict=True)) for row in rows]


@register("CategoryMapper", 1, domain=_ML)
def category_mapper(
    x: np.ndarray,
    *,
    cats_int64s: tuple[int, ...] | None,
    cats_strings: tuple[str, ...] | None,
    default_int64: int,
    default_string: str,
) -> np.ndarray:
    """CategoryMapper-1: strings to their paired int64 (default_int64 when unknown), or int64 to
    their paired string (default_string)."""
    strings, ints = _object_array(cats_strings or ()), np.asarray(cats_int64s or (), dtype=np.int64)
    if len(strings) != len(ints):
        raise ValueError(f"CategoryMapper: {len(strings)} cats_strings but {len(ints)} cats_int64s")
    if x.dtype == object:
        return _encode(x, strings, ints, default_int64)
    return _encode(x.astype(np.int64, copy=False), ints, strings, default_string)


@register("FeatureVectorizer", 1, domain=_ML)
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


# Rows of X per block in the RBF kernel: the block's differences to every support vector stay small.
_RBF_ELEMENTS = 1 << 22


def _svm_kernel(x: np.ndarray, vectors: np.ndarray, kernel_type: str, params: tuple[float, ...] | None,
                constant: float) -> np.ndarray:
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


@register("SVMRegressor", 1, domain=_ML)
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
    rows = _as_float32(_rows(x, "SVMRegressor"))
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


@register("SVMClassifier", 1, domain=_ML)
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
    transform, else _complement's [1 - s, s]), or with prob_a/prob_b the class probabilities from
    Platt-scaled pairs coupled as libsvm does. Without support vectors (liblinear): one linear
    score per class.
    """
    labels: np.ndarray = (
        _object_array(classlabels_strings) if classlabels_strings else np.asarray(classlabels_ints or (), np.int64)
    )
    classes = len(labels)
    if classes < 2:
        raise ValueError("SVMClassifier needs at least two class labels")
    rows = _as_float32(_rows(x, "SVMClassifier"))
    weights = np.asarray(coefficients or (), dtype=np.float32)
    offsets = np.asarray(rho or (), dtype=np.float32)
    per_class = [int(v) for v in vectors_per_class or ()]
    if len(prob_a or ()) != len(prob_b or ()):
        raise ValueError("SVMClassifier: prob_a and prob_b differ in length")
    if sum(per_class) == 0:  # liblinear: a linear score per class, plus rho[0]
        if weights.size != classes * rows.shape[1] or offsets.size < 1:
            raise ValueError("SVMClassifier: coefficients do not make one row per class of the input's features")
        scores = _svm_kernel(rows, weights.reshape(classes, -1), "LINEAR", None, float(offsets[0]))
        best = np.argmax(scores, axis=1)
        if classes == 2 and not prob_a:  # ORT's binary rule (with probabilities: the argmax)
            top = scores[np.arange(len(scores)), best]
            positive = (top >= 0.5) if bool((weights >= 0).all()) else (top > 0)
            best = np.where(positive, 1, best)
        return labels[best], _batched_scores(scores, post_transform, False)
    return _svc(rows, labels, weights, offsets, per_class, kernel_type, kernel_params, prob_a, prob_b, support_vectors,
                post_transform)


def _svc(
    rows: np.ndarray, labels: np.ndarray, weights: np.ndarray, offsets: np.ndarray, per_class: list[int],
    kernel_type: str, kernel_params: tuple[float, ...] | None, prob_a: tuple[float, ...] | None,
    prob_b: tuple[float, ...] | None, support_vectors: tuple[float, ...] | None, post_transform: str,
) -> tuple[np.ndarray, np.ndarray]:
    classes, count = len(labels), sum(per_class)
    pairs = [(i, j) for i in range(classes - 1) for j in range(i + 1, classes)]
    if len(per_class) != classes or weights.size < (classes - 1) * count or offsets.size < len(pairs):
        raise ValueError("SVMClassifier: vectors_per_class, coefficients and rho do not match the class labels")
    vectors = np.asarray(support_vectors or (), dtype=np.float32).reshape(count, -1)
    if vectors.shape[1] != rows.shape[1]:
        raise ValueError(f"SVMClassifier: support vectors of {vectors.shape[1]} features, input of {rows.shape[1]}")
    kernels = _svm_kernel(rows, vectors, kernel_type, kernel_params, 0.0)
    starts = np.concatenate([[0], np.cumsum(per_class)]).astype(np.intp)
    coef = weights[: (classes - 1) * count].reshape(classes - 1, count)
    scores = np.empty((len(rows), len(pairs)), dtype=np.float32)
    votes = np.zeros((len(rows), classes), dtype=np.int64)
    for index, (i, j) in enumerate(pairs):
        own = slice(starts[i], starts[i + 1])
        other = slice(starts[j], starts[j + 1])
        # float32 products summed in float64, as ORT does (here RN64 of their exact sum); then + rho.
        terms = np.concatenate([coef[j - 1, own] * kernels[:, own], coef[i, other] * kernels[:, other]], axis=1)
        total = numerics.reduce_sum(terms.astype(np.float64), (1,))[:, 0] + np.float64(offsets[index])
        scores[:, index] = total
        votes[np.arange(len(rows)), np.where(total > 0, i, j)] += 1
    best = np.argmax(votes, axis=1)  # the first of equal vote counts
    if prob_a:
        a, b = np.asarray(prob_a, np.float32), np.asarray(prob_b, np.float32)
        pairwise = 1 - _logistic(scores * a[: len(pairs)] + b[: len(pairs)])
        pairwise = np.clip(pairwise, np.float32(1e-7), np.float32(1 - 1e-7))
        probabilities = np.stack([_couple(classes, pairs, p) for p in pairwise]) if len(rows) else np.zeros((0, classes))
        return labels[best], _batched_scores(probabilities.astype(np.float32), post_transform, False)
    if classes > 2:
        return labels[best], _batched_scores(scores, post_transform, False)
    if post_transform == "PROBIT":  # ORT writes one probit and leaves the second score unwritten
        raise NotImplementedError(
            "SVMClassifier with two classes, no probabilities and post_transform PROBIT: ONNX Runtime leaves the "
            "second score unwritten"
        )
    if post_transform == "NONE":
        return labels[best], np.concatenate([-scores, scores], axis=1)
    return labels[best], _complement(scores[:, 0], post_transform)  # [1 - s, s], s after any logistic


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


@register("DictVectorizer", 1, domain=_ML, context=True)
def dict_vectorizer(
    ctx: KernelContext,
    x: dict[Any, Any],
    *,
    int64_vocabulary: tuple[int, ...] | None,
    string_vocabulary: tuple[str, ...] | None,
) -> np.ndarray:
    """DictVectorizer-1: a map's values at the vocabulary's keys, [1, len(vocabulary)]; a key the map
    lacks gives 0 (or "" for string values). The dtype is the map's value type as the model declares
    it (a dict of Python floats does not say float32 or float64)."""
    if not isinstance(x, dict):
        raise ValueError(f"DictVectorizer takes a map, got {type(x).__name__}")
    if bool(int64_vocabulary) == bool(string_vocabulary):
        raise ValueError("DictVectorizer needs exactly one of int64_vocabulary and string_vocabulary")
    vocabulary: list[Any] = list(string_vocabulary) if string_vocabulary else [int(v) for v in int64_vocabulary or ()]
    declared = ctx.output_info[0].dtype if ctx.output_info and ctx.output_info[0] is not None else None
    values = list(x.values())
    if (declared is not None and declared.kind in "OUS") or (values and all(isinstance(v, str) for v in values)):
        return _object_array([x.get(k, "") for k in vocabulary]).reshape(1, -1)
    dtype = declared if declared is not None else (np.asarray(values).dtype if values else np.dtype(np.float32))
    return np.asarray([x.get(k, 0) for k in vocabulary], dtype=dtype).reshape(1, -1)


@register("CastMap", 1, domain=_ML)
def cast_map(x: dict[int, Any], *, cast_to: str, map_form: str, max_map: int) -> np.ndarray:
    """CastMap-1: an int64-keyed map's values in key order as a [1, n] tensor of cast_to's type; SPARSE
    puts each value at its key's position among 0..max_map-1 and pads the rest (0, or "0.f" as ORT
    writes for strings)."""
    if not isinstance(x, dict):
        raise ValueError(f"CastMap takes a map, got {type(x).__name__}")
    keys = sorted(int(k) for k in x)
    target = {"TO_FLOAT": np.float32, "TO_INT64": np.int64, "TO_STRING": object}.get(cast_to)
    if target is None:
        raise ValueError(f"CastMap cast_to must be TO_FLOAT, TO_INT64 or TO_STRING, got {cast_to!r}")

    def cast(value: Any) -> Any:
        if target is object:  # std::to_string of a float: six decimals
            return value if isinstance(value, str) else f"{float(np.float32(value)):.6f}"
        number = float(value) if isinstance(value, str) else float(np.float32(value))
        return np.float32(number) if target is np.float32 else int(number)

    if map_form == "DENSE":
        items = [cast(x[k]) for k in keys]
    elif map_form == "SPARSE":
        if keys and keys[0] < 0:
            raise ValueError(f"CastMap SPARSE: negative key {keys[0]}")
        pad: Any = "0.f" if target is object else 0
        items = [cast(x[k]) if k in x else pad for k in range(max_map)]
    else:
        raise ValueError(f"CastMap map_form must be DENSE or SPARSE, got {map_form!r}")
    if target is object:
        return _object_array(items).reshape(1, -1)
    return np.asarray(items, dtype=target).reshape(1, -1)
