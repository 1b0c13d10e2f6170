"""One-operator cases of ml, training, resize, shape (Range), cast and quant that ONNX's node test
suite covers thinly (classical-ML post transforms, SVM kernels, tree ensembles, antialiased resize,
AffineGrid, float Range, casts of float64 into narrow floats): the portability tests run them beside
the suite's cases (tests/portability/runs.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import ml_dtypes
import numpy as np
import onnx

from tests.ops.oneop import one_node_model

ML = "ai.onnx.ml"
F32 = np.float32


def _case(
    op: str, feeds: dict[str, np.ndarray], opset: int, n_out: int = 1, domain: str = "", **attrs: Any
) -> tuple[bytes, dict[str, np.ndarray]]:
    """The one-node model (serialized) and the feeds it runs on."""
    inputs: dict[str, np.ndarray | None] = dict(feeds)
    model = one_node_model(op, inputs, n_out, opset, domain, **attrs)
    given = {k: v for k, v in feeds.items() if v.dtype.isbuiltin != 2}
    return model.SerializeToString(), given


def _forest(rng: np.random.Generator, features: int, targets: int, trees: int) -> dict[str, Any]:
    """TreeEnsembleRegressor attributes: ``trees`` full trees of depth 3 with random splits."""
    attrs: dict[str, list[Any]] = {k: [] for k in (
        "nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
        "nodes_truenodeids", "nodes_falsenodeids", "target_treeids", "target_nodeids", "target_ids",
        "target_weights")}
    for tree in range(trees):
        for node in range(15):
            attrs["nodes_treeids"].append(tree)
            attrs["nodes_nodeids"].append(node)
            leaf = node >= 7
            attrs["nodes_featureids"].append(0 if leaf else int(rng.integers(0, features)))
            attrs["nodes_modes"].append("LEAF" if leaf else "BRANCH_LEQ")
            attrs["nodes_values"].append(0.0 if leaf else float(rng.normal()))
            attrs["nodes_truenodeids"].append(0 if leaf else 2 * node + 1)
            attrs["nodes_falsenodeids"].append(0 if leaf else 2 * node + 2)
            if leaf:
                for target in range(targets):
                    attrs["target_treeids"].append(tree)
                    attrs["target_nodeids"].append(node)
                    attrs["target_ids"].append(target)
                    attrs["target_weights"].append(float(rng.normal()))
    return {**attrs, "n_targets": targets}


def op_cases() -> Iterator[tuple[str, bytes, list[dict[str, np.ndarray]]]]:
    """(case, model bytes, [feeds]) of every case."""
    for name, make in _cases():
        model, feeds = make()
        yield f"op/{name}", model, [feeds]


def _cases() -> Iterator[tuple[str, Callable[[], tuple[bytes, dict[str, np.ndarray]]]]]:
    rng = np.random.default_rng(2024)
    x = rng.normal(size=(300, 48)).astype(F32)
    classes = 5
    coefficients = rng.normal(size=classes * 48).astype(F32).tolist()
    intercepts = rng.normal(size=classes).astype(F32).tolist()
    for transform in ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"):
        yield f"LinearClassifier/{transform}", partial(
            _case, "LinearClassifier", {"x": x}, 1, 2, ML, coefficients=coefficients, intercepts=intercepts,
            classlabels_ints=list(range(classes)), post_transform=transform)
    p = (np.abs(x[:, :4]) / (1 + np.abs(x[:, :4]))).astype(F32)
    yield "LinearRegressor/PROBIT", partial(
        _case, "LinearRegressor", {"x": p}, 1, 1, ML, coefficients=[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0],
        targets=2, post_transform="PROBIT")
    vectors = rng.normal(size=(40, 48)).astype(F32)
    for kernel in ("LINEAR", "POLY", "RBF", "SIGMOID"):
        yield f"SVMRegressor/{kernel}", partial(
            _case, "SVMRegressor", {"x": x}, 1, 1, ML, kernel_type=kernel, kernel_params=[0.01, 0.5, 3.0],
            n_supports=40, support_vectors=vectors.reshape(-1).tolist(), coefficients=rng.normal(size=40).tolist(),
            rho=[0.25])
        yield f"SVMClassifier/{kernel}", partial(
            _case, "SVMClassifier", {"x": x}, 1, 2, ML, kernel_type=kernel, kernel_params=[0.01, 0.5, 3.0],
            classlabels_ints=[0, 1, 2, 3], vectors_per_class=[10, 10, 10, 10],
            support_vectors=vectors.reshape(-1).tolist(), coefficients=rng.normal(size=3 * 40).tolist(),
            rho=rng.normal(size=6).tolist(), prob_a=(-rng.random(6)).tolist(), prob_b=rng.normal(size=6).tolist())
    forest = _forest(rng, features=48, targets=4, trees=30)
    for transform in ("SOFTMAX", "LOGISTIC", "PROBIT", "SOFTMAX_ZERO"):
        yield f"TreeEnsembleRegressor/{transform}", partial(
            _case, "TreeEnsembleRegressor", {"x": x}, 3, 1, ML, aggregate_function="AVERAGE",
            post_transform=transform, **forest)
    for norm in ("L1", "L2"):
        yield f"Normalizer/{norm}", partial(_case, "Normalizer", {"x": x}, 1, 1, ML, norm=norm)
    r, t = np.array(0.01, F32), np.array(3, np.int64)
    w, g = rng.normal(size=(64, 64)).astype(F32), rng.normal(size=(64, 64)).astype(F32)
    v, h = rng.normal(size=(64, 64)).astype(F32), np.abs(rng.normal(size=(64, 64))).astype(F32)
    yield "Adam", partial(_case, "Adam", {"r": r, "t": t, "w": w, "g": g, "v": v, "h": h}, 1, 3,
                          "ai.onnx.preview.training", alpha=0.9, beta=0.999, epsilon=1e-7)
    image = rng.normal(size=(1, 3, 64, 48)).astype(F32)
    resize_feeds = {"x": image, "roi": np.array([], F32), "scales": np.array([1, 1, 0.3, 0.45], F32)}
    for mode in ("linear", "cubic"):
        yield f"Resize/antialias/{mode}", partial(
            _case, "Resize", resize_feeds, 18, mode=mode, antialias=1, exclude_outside=1)
    size = np.array([2, 3, 40, 56], np.int64)
    for dtype in (np.float16, F32, np.float64):
        theta = rng.normal(size=(2, 2, 3)).astype(dtype)
        yield f"AffineGrid/{np.dtype(dtype).name}", partial(
            _case, "AffineGrid", {"theta": theta, "size": size}, 20, align_corners=0)
    for dtype in (F32, np.float64):
        bounds = {"s": np.array(0.1, dtype), "l": np.array(1000.3, dtype), "d": np.array(0.7, dtype)}
        yield f"Range/{np.dtype(dtype).name}", partial(_case, "Range", bounds, 11)
    wide = rng.normal(size=4096) * np.exp2(rng.integers(-12, 12, size=4096))
    for target in ("BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E5M2", "FLOAT4E2M1", "FLOAT8E8M0"):
        yield f"Cast/DOUBLE->{target}", partial(
            _case, "Cast", {"x": wide}, 24, to=getattr(onnx.TensorProto, target), round_mode="nearest")
    quantize_feeds = {"x": wide, "s": np.array(0.5), "z": np.array(0, ml_dtypes.float8_e4m3fn)}
    yield "QuantizeLinear/DOUBLE->FLOAT8E4M3FN", partial(_case, "QuantizeLinear", quantize_feeds, 21)
