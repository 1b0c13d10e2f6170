"""ai.onnx.ml kernels against onnxruntime: LabelEncoder (all versions and key/value types),
ArrayFeatureExtractor, Binarizer, Scaler, Normalizer, Imputer, OneHotEncoder, LinearRegressor,
LinearClassifier (binary and multi-class, every post transform), TreeEnsemble (random trees: every
node mode, NaN routing, set membership, aggregations and post transforms), TreeEnsembleRegressor and
TreeEnsembleClassifier (two classes included, with ONNX Runtime's conventions for them)."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pytest
from onnx import numpy_helper

from sealtrace.errors import KernelError
from tests.ops.oneop import assert_same, both

ML = "ai.onnx.ml"


def strings(*values: str) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def test_label_encoder_1_both_directions() -> None:
    classes = ["cat", "dog", "fish"]
    got, want = both(
        "LabelEncoder",
        {"x": strings("dog", "cow", "fish")},
        1,
        domain=ML,
        classes_strings=classes,
        default_int64=-7,
    )
    assert_same(got, want)
    got, want = both(
        "LabelEncoder",
        {"x": np.array([2, 0, 5], np.int64)},
        1,
        domain=ML,
        classes_strings=classes,
        default_string="?",
    )
    assert_same(got, want)


@pytest.mark.parametrize("opset", [2, 4])
@pytest.mark.parametrize(
    ("x", "keys", "values", "default"),
    [
        (
            strings("a", "b", "z", "a"),
            {"keys_strings": ["a", "b"]},
            {"values_int64s": [1, 2]},
            {"default_int64": 9},
        ),
        (
            np.array([1, 5, 7], np.int64),
            {"keys_int64s": [1, 7]},
            {"values_strings": ["one", "seven"]},
            {"default_string": "-"},
        ),
        (
            np.array([0.5, np.nan, 2.0, -0.0], np.float32),
            {"keys_floats": [0.5, float("nan"), 0.0]},
            {"values_floats": [10.0, 20.0, 30.0]},
            {},
        ),
        (np.array([3, 4], np.int64), {"keys_int64s": [3]}, {"values_floats": [1.5]}, {"default_float": 2.5}),
    ],
)
def test_label_encoder_keys_and_values(
    opset: int, x: np.ndarray, keys: dict[str, Any], values: dict[str, Any], default: dict[str, Any]
) -> None:
    got, want = both("LabelEncoder", {"x": x}, opset, domain=ML, **keys, **values, **default)
    assert_same(got, want)


def test_label_encoder_4_tensor_attributes() -> None:
    # onnxruntime has no int32 -> int16 LabelEncoder: the spec's behaviour, checked directly.
    from sealtrace.ops.ml.encoders import label_encoder_4

    unset: dict[str, Any] = {
        k: None
        for k in (
            "keys_floats",
            "keys_int64s",
            "keys_strings",
            "values_floats",
            "values_int64s",
            "values_strings",
        )
    }
    y = label_encoder_4(
        np.array([[1, 2], [4, 3]], np.int32),
        default_float=-0.0,
        default_int64=-1,
        default_string="_Unused",
        keys_tensor=np.array([3, 1, 2], np.int32),
        values_tensor=np.array([30, 10, 20], np.int16),
        default_tensor=np.array([-5], np.int16),
        **unset,
    )
    assert y.dtype == np.int16 and y.tolist() == [[10, 20], [-5, 30]]


def test_label_encoder_repeated_key_takes_the_last_value() -> None:
    # The spec: "If a key is repeated, the last key takes precedence" (onnxruntime keeps the first).
    from sealtrace.ops.ml.encoders import label_encoder_2

    y = label_encoder_2(
        strings("a", "b"),
        default_float=-0.0,
        default_int64=-1,
        default_string="_Unused",
        keys_floats=None,
        keys_int64s=None,
        keys_strings=("a", "b", "a"),
        values_floats=None,
        values_int64s=(1, 2, 3),
        values_strings=None,
    )
    assert y.tolist() == [3, 2]


@pytest.mark.parametrize("shape", [(7,), (3, 7), (2, 3, 7)])
def test_array_feature_extractor(shape: tuple[int, ...]) -> None:
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    got, want = both("ArrayFeatureExtractor", {"x": x, "y": np.array([6, 0, 3], np.int64)}, 1, domain=ML)
    assert_same(got, want)


def test_binarizer() -> None:
    x = np.array([-1.0, 0.5, 0.50001, 3.0, np.inf], np.float32)
    got, want = both("Binarizer", {"x": x}, 1, domain=ML, threshold=0.5)
    assert_same(got, want)


def _random_forest(
    rng: np.random.Generator, features: int, n_targets: int, with_members: bool, dtype: type
) -> dict[str, Any]:
    """Random trees in TreeEnsemble's encoding (every interior node mode, NaN routing, set membership)."""
    nodes: dict[str, list[Any]] = {
        k: [] for k in ("modes", "splits", "features", "true", "false", "true_leaf", "false_leaf", "missing")
    }
    leaves: dict[str, list[Any]] = {"targets": [], "weights": []}
    members: list[float] = []
    roots: list[int] = []

    def leaf() -> int:
        leaves["targets"].append(int(rng.integers(0, n_targets)))
        leaves["weights"].append(float(rng.normal()))
        return len(leaves["targets"]) - 1

    def grow(depth: int) -> int:
        index = len(nodes["modes"])
        mode = int(rng.integers(0, 7 if with_members else 6))
        split = float(np.round(rng.normal(), 1))
        for key, value in (
            ("modes", mode),
            ("splits", split),
            # Set membership only on feature 0 (integral values): onnxruntime truncates the feature to int.
            ("features", 0 if mode == 6 else int(rng.integers(0, features))),
            ("missing", int(rng.integers(0, 2))),
        ):
            nodes[key].append(value)
        for key in ("true", "false", "true_leaf", "false_leaf"):
            nodes[key].append(0)
        if mode == 6:
            # onnxruntime only implements integral set members.
            members.extend([float(v) for v in rng.integers(-2, 3, size=3)] + [float("nan")])
        for side in ("true", "false"):
            if depth >= 3 or rng.random() < 0.3:
                nodes[side][index], nodes[f"{side}_leaf"][index] = leaf(), 1
            else:
                nodes[side][index], nodes[f"{side}_leaf"][index] = grow(depth + 1), 0
        return index

    for _ in range(int(rng.integers(1, 5))):
        roots.append(grow(0))
    attrs: dict[str, Any] = {
        "n_targets": n_targets,
        "tree_roots": roots,
        "nodes_modes": numpy_helper.from_array(np.array(nodes["modes"], np.uint8)),
        "nodes_splits": numpy_helper.from_array(np.array(nodes["splits"], dtype)),
        "nodes_featureids": nodes["features"],
        "nodes_truenodeids": nodes["true"],
        "nodes_falsenodeids": nodes["false"],
        "nodes_trueleafs": nodes["true_leaf"],
        "nodes_falseleafs": nodes["false_leaf"],
        "nodes_missing_value_tracks_true": nodes["missing"],
        "leaf_targetids": leaves["targets"],
        "leaf_weights": numpy_helper.from_array(np.array(leaves["weights"], dtype)),
    }
    if members:
        attrs["membership_values"] = numpy_helper.from_array(np.array(members, dtype))
    return attrs


@pytest.mark.parametrize("aggregate_function", [0, 1, 2, 3])
@pytest.mark.parametrize("post_transform", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tree_ensemble_matches_onnxruntime(aggregate_function: int, post_transform: int, dtype: type) -> None:
    rng = np.random.default_rng(aggregate_function * 10 + post_transform)
    for trial in range(4):
        attrs = _random_forest(rng, features=3, n_targets=3, with_members=trial % 2 == 1, dtype=dtype)
        if post_transform == 4:
            attrs["leaf_weights"] = numpy_helper.from_array(
                rng.uniform(0.05, 0.3, len(attrs["leaf_targetids"])).astype(dtype)
            )
        x = np.round(rng.normal(size=(16, 3)), 1).astype(dtype)
        x[:, 0] = np.round(x[:, 0])  # hits the integral set members
        x[rng.random(x.shape) < 0.1] = np.nan
        settings = {"aggregate_function": aggregate_function, **attrs}
        got, _ = both("TreeEnsemble", {"x": x}, 5, domain=ML, post_transform=post_transform, **settings)
        # onnxruntime reads 1 as LOGISTIC and 2 as SOFTMAX; the spec has 1 = SOFTMAX, 2 = LOGISTIC.
        theirs = {1: 2, 2: 1}.get(post_transform, post_transform)
        _, want = both("TreeEnsemble", {"x": x}, 5, domain=ML, post_transform=theirs, **settings)
        assert_same(got, want, rtol=1e-5, atol=1e-6)


LEGACY_MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def _legacy_forest(rng: np.random.Generator, features: int, outputs: int, prefix: str) -> dict[str, Any]:
    """Random trees in the TreeEnsembleRegressor / Classifier encoding (node ids restart at 0 per tree)."""
    nodes: dict[str, list[Any]] = {
        k: []
        for k in (
            "treeids",
            "nodeids",
            "featureids",
            "modes",
            "values",
            "truenodeids",
            "falsenodeids",
            "missing_value_tracks_true",
        )
    }
    votes: dict[str, list[Any]] = {k: [] for k in ("treeids", "nodeids", "ids", "weights")}
    for tree in range(int(rng.integers(1, 5))):
        counter = [0]

        def grow(depth: int, tree: int = tree, counter: list[int] = counter) -> int:
            node = counter[0]
            counter[0] += 1
            index = len(nodes["nodeids"])
            leaf = depth >= 3 or (depth > 0 and rng.random() < 0.3)
            for key, value in (
                ("treeids", tree),
                ("nodeids", node),
                ("featureids", int(rng.integers(0, features))),
                ("modes", "LEAF" if leaf else LEGACY_MODES[int(rng.integers(0, 6))]),
                ("values", float(np.round(rng.normal(), 1))),
                ("truenodeids", 0),
                ("falsenodeids", 0),
                ("missing_value_tracks_true", int(rng.integers(0, 2))),
            ):
                nodes[key].append(value)
            if leaf:
                for target in rng.choice(outputs, int(rng.integers(1, outputs + 1)), replace=False):
                    votes["treeids"].append(tree)
                    votes["nodeids"].append(node)
                    votes["ids"].append(int(target))
                    votes["weights"].append(float(rng.normal()))
            else:
                nodes["truenodeids"][index] = grow(depth + 1)
                nodes["falsenodeids"][index] = grow(depth + 1)
            return node

        grow(0)
    attrs = {f"nodes_{k}": v for k, v in nodes.items()}
    attrs.update({f"{prefix}_{k}": v for k, v in votes.items()})
    return attrs


@pytest.mark.parametrize("aggregate_function", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("post_transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("opset", [1, 3])
def test_tree_ensemble_regressor_matches_onnxruntime(
    aggregate_function: str, post_transform: str, opset: int
) -> None:
    rng = np.random.default_rng(len(aggregate_function) * 7 + len(post_transform) + opset)
    for trial in range(4):
        attrs = _legacy_forest(rng, features=3, outputs=3, prefix="target")
        if trial % 2:
            attrs["base_values"] = [0.5, -1.0, 2.0]
        x = np.round(rng.normal(size=(12, 3)), 1).astype(np.float32 if trial < 2 else np.float64)
        x[rng.random(x.shape) < 0.1] = np.nan
        got, want = both(
            "TreeEnsembleRegressor",
            {"x": x},
            opset,
            domain=ML,
            n_targets=3,
            aggregate_function=aggregate_function,
            post_transform=post_transform,
            **attrs,
        )
        assert_same(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("post_transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("labels", ["int64", "string"])
@pytest.mark.parametrize("with_base", [False, True])
def test_tree_ensemble_classifier_multiclass_matches_onnxruntime(
    post_transform: str, labels: str, with_base: bool
) -> None:
    rng = np.random.default_rng(len(post_transform) + 10 * with_base)
    for trial in range(3):
        classes = 3 + trial % 2
        attrs = _legacy_forest(rng, features=3, outputs=classes, prefix="class")
        if with_base:
            attrs["base_values"] = [float(v) for v in np.round(rng.normal(size=classes), 2)]
        if labels == "string":
            attrs["classlabels_strings"] = [f"class{i}" for i in range(classes)]
        else:
            attrs["classlabels_int64s"] = [10 * i + 3 for i in range(classes)]
        x = np.round(rng.normal(size=(12, 3)), 1).astype(np.float32)
        got, want = both(
            "TreeEnsembleClassifier", {"x": x}, 3, n_out=2, domain=ML, post_transform=post_transform, **attrs
        )
        assert_same(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("votes_for", ["class 0", "class 1", "both"])
@pytest.mark.parametrize("weights", ["non-negative", "mixed"])
@pytest.mark.parametrize("base", [0, 1, 2])
@pytest.mark.parametrize("post_transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
def test_tree_ensemble_classifier_two_classes_matches_onnxruntime(
    votes_for: str, weights: str, base: int, post_transform: str
) -> None:
    # The spec leaves two classes open; ONNX Runtime derives the label and the second score from
    # which classes were voted for, the weights' signs and the number of base values (the sklearn
    # converters' binary classifiers are such models). Where it writes one score and leaves the
    # second column unwritten, the kernel refuses the sample.
    rng = np.random.default_rng(zlib.crc32(f"{votes_for}/{weights}/{base}/{post_transform}".encode()))
    compared = 0
    for trial in range(6):
        attrs = _legacy_forest(rng, features=3, outputs=2, prefix="class")
        if votes_for != "both":
            attrs["class_ids"] = [int(votes_for[-1])] * len(attrs["class_ids"])
        else:  # both classes, whatever the random trees drew
            attrs["class_ids"][0] = 1 - attrs["class_ids"][-1]
        scale = rng.choice([1.0, 0.3])
        attrs["class_weights"] = [
            round(abs(w) * scale if weights == "non-negative" else w * scale, 2) for w in attrs["class_weights"]
        ]
        if base:
            attrs["base_values"] = [float(v) for v in np.round(rng.normal(size=base) * 0.5, 2)]
        if trial % 2:
            attrs["classlabels_strings"] = ["no", "yes"]
        else:
            attrs["classlabels_int64s"] = [3, 7]
        x = np.round(rng.normal(size=(16, 3)), 1).astype(np.float32)
        try:
            got, want = both(
                "TreeEnsembleClassifier", {"x": x}, 3, n_out=2, domain=ML, post_transform=post_transform, **attrs
            )
        except KernelError as exc:
            assert "no defined second score" in str(exc)
            continue
        assert_same(got, want, rtol=1e-5, atol=1e-6)
        compared += 1
    if post_transform != "PROBIT" and (votes_for != "both" or base == 2):
        assert compared == 6  # refused only where ONNX Runtime leaves a score unwritten


@pytest.mark.parametrize("aggregate_function", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("post_transform", ["NONE", "PROBIT"])
def test_tree_ensemble_regressor_single_target(aggregate_function: str, post_transform: str) -> None:
    # (onnxruntime ignores LOGISTIC / SOFTMAX for a single target; the spec does not, nor do we.)
    rng = np.random.default_rng(1)
    attrs = _legacy_forest(rng, features=3, outputs=1, prefix="target")
    attrs["target_weights"] = [abs(w) / 5 for w in attrs["target_weights"]]
    attrs["base_values"] = [0.25]
    x = np.round(rng.normal(size=(6, 3)), 1).astype(np.float32)
    settings = {"aggregate_function": aggregate_function, "post_transform": post_transform, **attrs}
    got, want = both("TreeEnsembleRegressor", {"x": x}, 3, domain=ML, n_targets=1, **settings)
    assert_same(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["TreeEnsembleRegressor", "TreeEnsembleClassifier"])
def test_softmax_zero_follows_onnxruntime_near_zero(op: str) -> None:
    # Scores within 1e-7 of zero are left out of the sum (and scaled by exp(-max), not zeroed); a
    # sample whose every score is such divides by zero, which ONNX Runtime reports as NaN.
    prefix = "target" if op == "TreeEnsembleRegressor" else "class"
    attrs: dict[str, Any] = {
        "nodes_treeids": [0, 0, 0],
        "nodes_nodeids": [0, 1, 2],
        "nodes_featureids": [0, 0, 0],
        "nodes_modes": ["BRANCH_LEQ", "LEAF", "LEAF"],
        "nodes_values": [0.0, 0.0, 0.0],
        "nodes_truenodeids": [1, 0, 0],
        "nodes_falsenodeids": [2, 0, 0],
        f"{prefix}_treeids": [0] * 6,
        f"{prefix}_nodeids": [1, 1, 1, 2, 2, 2],
        f"{prefix}_ids": [0, 1, 2, 0, 1, 2],
        f"{prefix}_weights": [0.0, 0.0, 0.0, 5e-8, 0.5, -0.3],
    }
    if op == "TreeEnsembleRegressor":
        attrs["n_targets"] = 3
    else:
        attrs["classlabels_int64s"] = [1, 2, 3]
    x = np.float32([[-1.0], [1.0]])
    got, want = both(op, {"x": x}, 3, n_out=1 if prefix == "target" else 2, domain=ML,
                     post_transform="SOFTMAX_ZERO", **attrs)
    assert np.isnan(want[-1][0]).all()  # the all-zero sample
    assert_same(got, want, rtol=1e-6)


FEATURE_INPUTS = {
    "float32": np.float32([[1.5, -2.0, 0.0, 3.25], [0.0, 0.0, 0.0, 0.0], [-1.0, 4.0, 2.5, -0.5]]),
    "float64": np.array([[1.5, -2.0, 0.0, 3.25], [2.0, 1.0, -7.0, 0.5]]),
    "int64": np.array([[1, -2, 0, 3], [4, 0, 0, -5]], dtype=np.int64),
    "int32": np.array([[1, -2, 0, 3]], dtype=np.int32),
    "1-D": np.float32([0.5, -1.0, 2.0, 4.0]),
}


@pytest.mark.parametrize("kind", list(FEATURE_INPUTS))
@pytest.mark.parametrize("per_feature", [True, False])
def test_scaler_matches_onnxruntime(kind: str, per_feature: bool) -> None:
    x = FEATURE_INPUTS[kind]
    attrs = {"offset": [0.5, -1.0, 2.0, 0.25], "scale": [2.0, 0.5, -1.0, 3.0]} if per_feature else {
        "offset": [1.5], "scale": [0.1]}
    got, want = both("Scaler", {"x": x}, 1, domain=ML, **attrs)
    assert_same(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind", list(FEATURE_INPUTS))
@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer_matches_onnxruntime(kind: str, norm: str) -> None:
    # Includes a row of zeros (left as it is) and negative values (MAX divides by the largest value).
    got, want = both("Normalizer", {"x": FEATURE_INPUTS[kind]}, 1, domain=ML, norm=norm)
    assert_same(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    ("x", "attrs"),
    [
        (np.float32([[1.0, np.nan, 3.0], [np.nan, 5.0, np.nan]]),
         {"imputed_value_floats": [10.0, 20.0, 30.0], "replaced_value_float": float("nan")}),
        (np.float32([[1.0, 0.0, 3.0], [0.0, 5.0, -1.0]]), {"imputed_value_floats": [9.5], "replaced_value_float": 0.0}),
        (np.float32([2.0, -1.0, -1.0]), {"imputed_value_floats": [7.0, 8.0, 9.0], "replaced_value_float": -1.0}),
        # Neither one value nor one per feature: ORT takes the first for all.
        (np.float32([[1.0, 0.0, 3.0, 0.0], [0.0, 5.0, -1.0, 2.0]]),
         {"imputed_value_floats": [7.0, 8.0], "replaced_value_float": 0.0}),
        (np.array([[1, -1, 3], [-1, 5, -1]], dtype=np.int64),
         {"imputed_value_int64s": [100, 200, 300], "replaced_value_int64": -1}),
    ],
)
def test_imputer_matches_onnxruntime(x: np.ndarray, attrs: dict[str, Any]) -> None:
    got, want = both("Imputer", {"x": x}, 1, domain=ML, **attrs)
    assert_same(got, want)


@pytest.mark.parametrize(
    ("x", "attrs"),
    [
        (np.array([[1, 5, 3], [3, 9, 1]], dtype=np.int64), {"cats_int64s": [1, 3, 5], "zeros": 1}),
        (np.float32([2.7, 1.2, -3.0]), {"cats_int64s": [1, 2, -3]}),
        (np.array([2.9, 7.0]), {"cats_int64s": [2, 7], "zeros": 1}),
        (strings("cat", "dog", "emu"), {"cats_strings": ["dog", "cat"], "zeros": 1}),
    ],
)
def test_one_hot_encoder_matches_onnxruntime(x: np.ndarray, attrs: dict[str, Any]) -> None:
    got, want = both("OneHotEncoder", {"x": x}, 1, domain=ML, **attrs)
    assert_same(got, want)


def test_one_hot_encoder_refuses_an_unknown_category_when_zeros_is_0() -> None:
    with pytest.raises(KernelError, match="unknown category 'yak'"):
        run_ours("OneHotEncoder", strings("cat", "yak"), {"cats_strings": ["cat"], "zeros": 0}, n_out=1)


@pytest.mark.parametrize("targets", [1, 3])
@pytest.mark.parametrize("post_transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("with_intercepts", [True, False])
def test_linear_regressor_matches_onnxruntime(targets: int, post_transform: str, with_intercepts: bool) -> None:
    # With one target ORT applies only PROBIT (it ignores the other transforms); so do we.
    rng = np.random.default_rng(targets + len(post_transform))
    x = rng.uniform(-1, 1, (5, 4)).astype(np.float32)
    scale = 0.2 if post_transform == "PROBIT" else 1.0  # PROBIT needs scores in (0, 1)
    attrs: dict[str, Any] = {
        "coefficients": [round(float(v) * scale, 3) for v in rng.normal(size=4 * targets)],
        "targets": targets, "post_transform": post_transform,
    }
    if with_intercepts:
        attrs["intercepts"] = [0.5] * targets
    got, want = both("LinearRegressor", {"x": x}, 1, domain=ML, **attrs)
    assert_same(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("classes", [1, 2, 3])
@pytest.mark.parametrize("labels", ["int64", "string"])
@pytest.mark.parametrize("post_transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("kind", ["float32", "float64", "int64", "1-D"])
def test_linear_classifier_matches_onnxruntime(classes: int, labels: str, post_transform: str, kind: str) -> None:
    # One coefficient row is the binary case (sklearn's LogisticRegression exports): the sign decides
    # between two labels and the scores are [1 - s, s], s after the logistic under LOGISTIC. Under
    # PROBIT ORT writes the two scores packed and leaves half the output unwritten: refused.
    rng = np.random.default_rng(classes * 10 + len(post_transform))
    x = FEATURE_INPUTS[kind]
    features = x.shape[-1]
    count = 2 if classes == 1 else classes
    scale = 0.05 if post_transform == "PROBIT" else 1.0
    attrs: dict[str, Any] = {
        "coefficients": [round(float(v) * scale, 3) for v in rng.normal(size=features * classes)],
        "intercepts": [round(float(v) * scale, 3) for v in rng.normal(size=classes)],
        "post_transform": post_transform,
    }
    if labels == "string":
        attrs["classlabels_strings"] = [f"class{i}" for i in range(count)]
    else:
        attrs["classlabels_ints"] = [10 * i + 3 for i in range(count)]
    if classes == 1 and post_transform == "PROBIT":
        with pytest.raises(KernelError, match="unwritten"):
            run_ours("LinearClassifier", x, attrs)
        return
    got, want = both("LinearClassifier", {"x": x}, 1, n_out=2, domain=ML, **attrs)
    assert_same(got, want, rtol=1e-5, atol=1e-6)


def test_linear_classifier_refuses_a_label_count_that_does_not_match() -> None:
    # ORT refuses these models when it loads them; the kernel refuses them when the step runs.
    x = FEATURE_INPUTS["float32"]
    one_row = {"coefficients": [0.1] * 4, "intercepts": [0.0], "classlabels_ints": [1]}
    with pytest.raises(KernelError, match="needs 2 class labels, got 1"):
        run_ours("LinearClassifier", x, one_row)
    three_rows = {"coefficients": [0.1] * 12, "intercepts": [0.0] * 3, "classlabels_strings": ["a", "b"]}
    with pytest.raises(KernelError, match="needs 3 class labels, got 2"):
        run_ours("LinearClassifier", x, three_rows)


def run_ours(op: str, x: np.ndarray, attrs: dict[str, Any], n_out: int = 2) -> list[np.ndarray]:
    import sealtrace
    from tests.ops.oneop import one_node_model

    model = one_node_model(op, {"x": x}, n_out, 1, ML, **attrs)
    return sealtrace.Session(model).run(None, {"x": x})


def test_one_hot_encoder_repeated_category_counts_at_its_last_position() -> None:
    got, want = both("OneHotEncoder", {"x": np.array([[4, 2]], dtype=np.int64)}, 1, domain=ML, cats_int64s=[4, 2, 4])
    assert_same(got, want)
    assert got[0][0, 0].tolist() == [0.0, 0.0, 1.0]


def test_imputer_refuses_values_of_the_other_kind() -> None:
    with pytest.raises(KernelError, match="imputed_value_floats does not apply to a int64 input"):
        run_ours("Imputer", np.array([1, 0], np.int64), {"imputed_value_floats": [1.0], "replaced_value_float": 0.0},
                 n_out=1)


@pytest.mark.parametrize(
    "x", [strings("a", "zz", "c", "b"), np.array([[2, 9], [1, 3]], dtype=np.int64)], ids=["strings", "int64"]
)
def test_category_mapper_matches_onnxruntime(x: np.ndarray) -> None:
    attrs = {"cats_strings": ["a", "b", "c", "a"], "cats_int64s": [1, 2, 3, 4], "default_int64": -5,
             "default_string": "?"}  # "a" twice: which of its codes wins is ORT's choice too
    got, want = both("CategoryMapper", {"x": x}, 1, domain=ML, **attrs)
    assert_same(got, want)


def test_feature_vectorizer_matches_onnxruntime() -> None:
    # Inputs of one dtype (the schema binds them to one type) and other widths: cut when longer than
    # their dimension, zero-padded when shorter.
    for dtype in (np.float32, np.float64, np.int64):
        feeds = {
            "a": np.array([[1, 2, 3], [4, 5, 6]], dtype=dtype),
            "b": np.array([[7], [8]], dtype=dtype),
            "c": np.array([[0.5, 0.25, 9.0, 10.0], [1.5, 2.5, 3.5, 4.5]]).astype(dtype),
        }
        got, want = both("FeatureVectorizer", feeds, 1, domain=ML, inputdimensions=[3, 2, 2])
        assert_same(got, want)


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("signs", ["non-negative", "mixed"])
@pytest.mark.parametrize("post_transform", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_svm_classifier_liblinear_mode_matches_onnxruntime(classes: int, signs: str, post_transform: str) -> None:
    # No support vectors: one linear score per class plus rho[0] (scikit-learn never exports this
    # mode, so it is built here); two classes take ORT's binary rule (0.5 or 0 on the top score).
    rng = np.random.default_rng(classes + len(signs) + len(post_transform))
    x = rng.normal(size=(12, 4)).astype(np.float32)
    weights = rng.normal(size=classes * 4) * 0.5
    attrs = {
        "coefficients": [float(abs(w)) if signs == "non-negative" else float(w) for w in weights],
        "rho": [0.1], "kernel_type": "LINEAR", "kernel_params": [0.0, 0.0, 0.0], "post_transform": post_transform,
        "classlabels_ints": [2 * i + 1 for i in range(classes)],
    }
    got, want = both("SVMClassifier", {"x": x}, 1, n_out=2, domain=ML, **attrs)
    assert_same(got, want, rtol=1e-5, atol=1e-6)


def test_binary_svc_without_probabilities_refuses_probit() -> None:
    # ORT writes one probit per sample and leaves the second score unwritten.
    attrs = {
        "coefficients": [1.0, -1.0], "rho": [0.0], "kernel_type": "RBF", "kernel_params": [0.5, 0.0, 3.0],
        "support_vectors": [0.0, 1.0, 1.0, 0.0], "vectors_per_class": [1, 1], "classlabels_ints": [0, 1],
        "post_transform": "PROBIT",
    }
    with pytest.raises(KernelError, match="second score unwritten"):
        run_ours("SVMClassifier", np.float32([[0.5, 0.5]]), attrs)


@pytest.mark.parametrize("post_transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
def test_binary_svc_without_probabilities_matches_onnxruntime(post_transform: str) -> None:
    # One pair score s: [-s, s] without a transform, else [1 - s, s] with s after the logistic
    # under LOGISTIC (the binary linear classifiers' rule).
    attrs = {
        "coefficients": [1.0, -0.7], "rho": [0.1], "kernel_type": "RBF", "kernel_params": [0.5, 0.0, 3.0],
        "support_vectors": [0.0, 1.0, 1.0, 0.0], "vectors_per_class": [1, 1], "classlabels_ints": [0, 1],
        "post_transform": post_transform,
    }
    x = np.float32([[0.5, 0.5], [2.0, -1.0], [-1.0, 0.3]])
    got, want = both("SVMClassifier", {"x": x}, 1, n_out=2, domain=ML, **attrs)
    assert_same(got, want, rtol=1e-5, atol=1e-6)
