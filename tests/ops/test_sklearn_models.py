"""Real classical-ML models: scikit-learn pipelines trained here and converted by skl2onnx (as teams
export them), run on the reference backend against ONNX Runtime.

They exercise the ai.onnx.ml kernels as converters use them: Scaler, Normalizer, Imputer,
LinearClassifier/LinearRegressor (binary and multi-class), TreeEnsembleClassifier/Regressor
(binary sklearn forests and boosted trees use the two-class conventions).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

import sealtrace

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from sklearn.ensemble import (  # noqa: E402
    GradientBoostingClassifier,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import MinMaxScaler, Normalizer, StandardScaler  # noqa: E402
from sklearn.svm import SVC, SVR, LinearSVC, NuSVC, OneClassSVM  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.normal(size=(300, 4)).astype(np.float32)
WITH_GAPS = X.copy()
WITH_GAPS[::7, 2] = np.nan
BINARY = (X[:, 0] + X[:, 1] > 0).astype(np.int64)
THREE = np.digitize(X[:, 0], [-0.5, 0.5]).astype(np.int64)
TARGET = (X @ np.float32([1, -2, 0.5, 0])).astype(np.float32)

CASES: dict[str, tuple[Any, np.ndarray, np.ndarray | None]] = {
    "scaler + logistic regression, binary": (make_pipeline(StandardScaler(), LogisticRegression()), X, BINARY),
    "scaler + logistic regression, 3 classes": (make_pipeline(StandardScaler(), LogisticRegression()), X, THREE),
    "random forest, binary": (RandomForestClassifier(n_estimators=10, max_depth=4, random_state=0), X, BINARY),
    "random forest, 3 classes": (RandomForestClassifier(n_estimators=10, max_depth=4, random_state=0), X, THREE),
    "gradient boosting, binary": (GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0), X, BINARY),
    "gradient boosting, 3 classes": (GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0), X, THREE),
    "decision tree, binary": (DecisionTreeClassifier(max_depth=4, random_state=0), X, BINARY),
    "random forest regressor": (RandomForestRegressor(n_estimators=10, max_depth=4, random_state=0), X, TARGET),
    "linear regression": (LinearRegression(), X, TARGET),
    "normalizer + ridge": (make_pipeline(Normalizer(), Ridge()), X, TARGET),
    "imputer + min-max scaler + logistic regression": (
        make_pipeline(SimpleImputer(), MinMaxScaler(), LogisticRegression()), WITH_GAPS, BINARY
    ),
    "linear SVM, binary": (LinearSVC(), X, BINARY),
    "linear SVM, 3 classes": (LinearSVC(), X, THREE),
    "RBF SVM, binary": (SVC(random_state=0), X, BINARY),
    "polynomial SVM, 3 classes (one-vs-one votes)": (SVC(kernel="poly", random_state=0), X, THREE),
    "sigmoid SVM with probabilities, 3 classes": (SVC(kernel="sigmoid", probability=True, random_state=0), X, THREE),
    "linear-kernel SVM with probabilities, binary": (SVC(kernel="linear", probability=True, random_state=0), X, BINARY),
    "nu-SVM, 3 classes": (NuSVC(random_state=0), X, THREE),
    "RBF SVM regressor": (SVR(), X, TARGET),
    "one-class SVM": (OneClassSVM(), X, None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_sklearn_pipeline_matches_onnxruntime(name: str) -> None:
    estimator, features, labels = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence and feature-name warnings of the toy fits
        estimator.fit(features) if labels is None else estimator.fit(features, labels)
    # zipmap off: class probabilities as a tensor, not a sequence of maps.
    # hasattr: SVC has predict_proba only when fitted with probability=True.
    options = {id(estimator): {"zipmap": False}} if hasattr(estimator, "predict_proba") else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # skl2onnx reads SVC attributes scikit-learn 1.9 deprecates
        model = skl2onnx.to_onnx(estimator, features[:1], options=options, target_opset={"": 17, "ai.onnx.ml": 3})
    model.ir_version = min(model.ir_version, 10)  # what onnxruntime 1.31 accepts
    feeds = {model.graph.input[0].name: features[:64]}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = sealtrace.Session(model).run(None, feeds)
    assert len(got) == len(want)
    # A kernel SVM sums one float32 term per support vector in another order than ORT: its scores
    # differ by up to about 1e-5 relative; everything else within float32 rounding.
    loose = "SVM" in name and not name.startswith("linear SVM")
    for ours, theirs in zip(got, want, strict=True):
        _assert_matches(ours, theirs, (1e-4, 1e-5) if loose else (1e-5, 1e-6))


def _assert_matches(ours: Any, theirs: Any, tolerance: tuple[float, float] = (1e-5, 1e-6)) -> None:
    """Labels exactly; scores within ``tolerance`` (rtol, atol); maps by key."""
    rtol, atol = tolerance
    if isinstance(theirs, list):  # ZipMap's sequence of maps
        assert [list(m) for m in ours] == [list(m) for m in theirs]
        for mine, other in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(list(mine.values()), list(other.values()), rtol=rtol, atol=atol)
        return
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    if ours.dtype.kind in "iuO":
        assert ours.tolist() == theirs.tolist()
    else:
        np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol)


@pytest.mark.parametrize("labels", ["int64", "string"])
def test_default_classifier_export_with_zipmap_matches_onnxruntime(labels: str) -> None:
    # skl2onnx's default: the probabilities as a sequence of maps (ZipMap), label -> probability.
    names = np.array(["low", "mid", "high"]) if labels == "string" else np.array([3, 5, 7])
    estimator = make_pipeline(StandardScaler(), LogisticRegression())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        estimator.fit(X, names[THREE])
    model = skl2onnx.to_onnx(estimator, X[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    model.ir_version = min(model.ir_version, 10)
    assert model.graph.node[-1].op_type == "ZipMap"
    feeds = {model.graph.input[0].name: X[:16]}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = sealtrace.Session(model).run(None, feeds)
    assert got[0].tolist() == want[0].tolist()
    assert [list(m) for m in got[1]] == [list(m) for m in want[1]]
    for ours, theirs in zip(got[1], want[1], strict=True):
        np.testing.assert_allclose(list(ours.values()), list(theirs.values()), rtol=1e-5, atol=1e-6)
