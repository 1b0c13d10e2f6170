"""Tree ensembles of the ai.onnx.ml domain: TreeEnsemble-5 and the older TreeEnsembleRegressor and
TreeEnsembleClassifier, scored as ONNX Runtime scores them (tree votes are added one at a time in
sample and tree order)."""

from __future__ import annotations

from typing import Any

import numpy as np

from sealtrace.ops.ml._inputs import ML_DOMAIN, class_labels
from sealtrace.ops.ml._scores import apply_post_transform, binary_scores, logistic
from sealtrace.ops.registry import register


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


@register("TreeEnsemble", 5, domain=ML_DOMAIN)
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
    return apply_post_transform(scores, post).astype(x.dtype)


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


def _legacy_scores(
    x: np.ndarray, attrs: dict[str, Any], vote: str, n_outputs: int | None, aggregate: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """TreeEnsembleRegressor / Classifier: (scores, which scores got a vote, base values, vote
    weights), in the input's precision. The votes of the leaves reached are the ``{vote}_ids``,
    ``_treeids``, ``_nodeids`` and ``_weights`` attributes (``vote``: "target" or "class"), aggregated
    into ``n_outputs`` scores per sample (None: one past the largest id)."""
    work = np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)
    data = x.astype(work).reshape(x.shape[0], -1)
    leaves, where = _legacy_leaves(data, attrs, work)
    weights = _tensor_or_list(attrs[f"{vote}_weights_as_tensor"], attrs[f"{vote}_weights"], work)
    votes = _legacy_votes(where, attrs[f"{vote}_treeids"], attrs[f"{vote}_nodeids"])
    ids = np.asarray(attrs[f"{vote}_ids"], dtype=np.int64)
    n_out = n_outputs if n_outputs is not None else int(ids.max(initial=-1)) + 1
    scores, voted = _aggregate(leaves, votes, ids, weights, n_out, aggregate)
    base = _tensor_or_list(attrs["base_values_as_tensor"], attrs["base_values"], work)
    return scores, voted, base, weights


@register("TreeEnsembleRegressor", 1, 3, domain=ML_DOMAIN)
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
    scores, voted, base, _ = _legacy_scores(x, dict(locals()), "target", n_targets, aggregate_function)
    if base.size:
        # ONNX Runtime adds a base value only to targets some leaf voted for; the others stay 0.
        scores = np.where(voted, scores + base.reshape(1, -1), scores)
    return apply_post_transform(scores, post_transform).astype(np.float32)


@register("TreeEnsembleClassifier", 1, 3, domain=ML_DOMAIN)
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
    labels = class_labels(classlabels_strings, classlabels_int64s)
    n_classes = len(labels)
    scores, voted, base, weights = _legacy_scores(x, attrs, "class", n_classes, "SUM")
    if n_classes > 2:
        # Base values count as votes: a class no leaf voted for scores its base value.
        scores[:, : base.size] += base
        voted[:, : base.size] = True
        best = np.argmax(np.where(voted, scores, -np.inf), axis=1)  # first of equal maxima
        return labels[best], apply_post_transform(scores, post_transform).astype(np.float32)
    if n_classes != 2:
        raise ValueError(f"TreeEnsembleClassifier needs at least 2 class labels, got {n_classes}")
    single_class = len(set(class_ids)) == 1
    index, out = _binary_classification(
        scores,
        voted,
        base,
        single_class=single_class,
        all_positive=bool((weights >= 0).all()),
        post_transform=post_transform,
    )
    if classlabels_strings or single_class:
        return labels[index], out
    # Both classes voted on: ONNX Runtime labels the sample 1 or 0 (the class index, whatever the
    # int64 labels are).
    return index.astype(np.int64), out


def _binary_classification(
    scores: np.ndarray,
    voted: np.ndarray,
    base: np.ndarray,
    *,
    single_class: bool,
    all_positive: bool,
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
        out[pair] = apply_post_transform(np.stack([value0[pair], value1[pair]], axis=1), post_transform)
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
            out[single_score] = binary_scores(single, post_transform)
        elif post_transform == "LOGISTIC":
            out[single_score] = np.stack([logistic(-single), logistic(single)], axis=1)
        else:
            out[single_score] = np.stack([-single, single], axis=1)
    return positive.astype(np.intp), out
