"""Translations that ONNX's node suite does not exercise (most of ai.onnx.ml, MaxRoiPool, Upsample-1,
Dropout-6 in training, strings through ordinary ops) against the reference kernels, on the torch
backend and as an fx module; gradients of the newly translated differentiable ops by gradcheck."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from sealtrace.backends import get_backend  # noqa: E402
from sealtrace.plan import build_plan  # noqa: E402
from sealtrace.torchbridge import reference_kernel_ops, registered_translations, to_torch  # noqa: E402
from sealtrace.torchops.dtypes import from_numpy, to_numpy  # noqa: E402
from sealtrace.torchops.reference_step import is_string_array  # noqa: E402

ML = "ai.onnx.ml"
F = TensorProto.FLOAT


def model_of(node: Any, inputs: list[Any], outputs: list[Any], opsets: dict[str, int] | None = None,
             initializers: list[Any] | None = None) -> Any:
    graph = helper.make_graph([node], "t", inputs, outputs, initializers or [])
    imports = [helper.make_opsetid(domain, version) for domain, version in (opsets or {"": 21, ML: 5}).items()]
    return helper.make_model(graph, opset_imports=imports)


def value(name: str, elem: int = F, shape: list[int] | None = None) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def seq_value(name: str) -> Any:
    return helper.make_value_info(name, helper.make_sequence_type_proto(helper.make_map_type_proto(
        TensorProto.INT64, helper.make_tensor_type_proto(F, []))))


def run_all(model: Any, feeds: dict[str, Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """Outputs of the reference, the torch backend and the fx module, in graph output order."""
    plan = build_plan(model)
    expected = get_backend("reference").run(plan, feeds)
    backend = get_backend("torch").run(plan, feeds)
    module = to_torch(plan)
    args = [feeds[n] if is_string_array(feeds[n]) else from_numpy(feeds[n]) for n in module.input_names]
    with torch.no_grad():
        result = module(*args)
    result = result if isinstance(result, tuple) else (result,)
    names = plan.output_names
    return [expected[n] for n in names], [backend[n] for n in names], [to_numpy(r) for r in result]


def assert_same(expected: Any, actual: Any) -> None:
    if isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected)
        for e, a in zip(expected, actual, strict=True):
            assert_same(e, a)
    elif isinstance(expected, dict):
        assert actual.keys() == expected.keys()
        np.testing.assert_allclose(list(actual.values()), list(expected.values()), rtol=1e-5, atol=1e-6)
    elif expected.dtype == object:
        assert actual.dtype == object and np.array_equal(actual, expected)
    else:
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=1e-5, atol=1e-6)


X = np.array([[0.5, -1.0, 2.0], [3.0, 0.0, -0.25], [np.nan, 1.5, 4.0]], dtype=np.float32)
STRINGS = np.array([["a", "bb"], ["c", "a"]], dtype=object)

CASES: dict[str, tuple[Any, dict[str, Any]]] = {
    "Scaler": (model_of(helper.make_node("Scaler", ["x"], ["y"], domain=ML, offset=[0.5, 1.0, -1.0],
                                         scale=[2.0, 0.5, 3.0]), [value("x", F, [3, 3])], [value("y")]), {"x": X}),
    "Normalizer-L2": (model_of(helper.make_node("Normalizer", ["x"], ["y"], domain=ML, norm="L2"),
                               [value("x", F, [3, 3])], [value("y")]), {"x": np.nan_to_num(X)}),
    "Normalizer-MAX": (model_of(helper.make_node("Normalizer", ["x"], ["y"], domain=ML, norm="MAX"),
                                [value("x", F, [3, 3])], [value("y")]), {"x": np.nan_to_num(X)}),
    "Imputer": (model_of(helper.make_node("Imputer", ["x"], ["y"], domain=ML, imputed_value_floats=[9.0, 8.0, 7.0],
                                          replaced_value_float=float("nan")), [value("x", F, [3, 3])], [value("y")]),
                {"x": X}),
    "FeatureVectorizer": (model_of(helper.make_node("FeatureVectorizer", ["x", "z"], ["y"], domain=ML,
                                                    inputdimensions=[2, 4]),
                                   [value("x", F, [3, 3]), value("z", TensorProto.INT64, [3, 2])], [value("y")]),
                          {"x": X, "z": np.arange(6, dtype=np.int64).reshape(3, 2)}),
    "LinearRegressor": (model_of(helper.make_node("LinearRegressor", ["x"], ["y"], domain=ML,
                                                  coefficients=[0.5, -1.0, 2.0, 1.0, 1.0, 1.0], intercepts=[0.1, 0.2],
                                                  targets=2, post_transform="SOFTMAX"),
                                 [value("x", F, [3, 3])], [value("y")]), {"x": np.nan_to_num(X)}),
    "LinearClassifier-strings": (model_of(helper.make_node(
        "LinearClassifier", ["x"], ["label", "scores"], domain=ML, coefficients=[0.5, -1.0, 2.0, 1.0, 1.0, 1.0,
                                                                                  -1.0, 0.0, 0.5],
        intercepts=[0.1, 0.2, -0.3], classlabels_strings=["cat", "dog", "eel"], post_transform="LOGISTIC"),
        [value("x", F, [3, 3])], [value("label", TensorProto.STRING), value("scores")]), {"x": np.nan_to_num(X)}),
    "LinearClassifier-binary": (model_of(helper.make_node(
        "LinearClassifier", ["x"], ["label", "scores"], domain=ML, coefficients=[0.5, -1.0, 2.0], intercepts=[0.1],
        classlabels_ints=[3, 7]), [value("x", F, [3, 3])], [value("label", TensorProto.INT64), value("scores")]),
        {"x": np.nan_to_num(X)}),
    "SVMRegressor": (model_of(helper.make_node(
        "SVMRegressor", ["x"], ["y"], domain=ML, coefficients=[0.5, -1.5], kernel_type="RBF",
        kernel_params=[0.3, 0.0, 3.0], n_supports=2, rho=[0.25], support_vectors=[1.0, 0.0, 2.0, -1.0, 1.0, 0.5]),
        [value("x", F, [3, 3])], [value("y")]), {"x": np.nan_to_num(X)}),
    "SVMClassifier": (model_of(helper.make_node(
        "SVMClassifier", ["x"], ["label", "scores"], domain=ML, classlabels_ints=[0, 1, 2],
        coefficients=[0.5, -1.5, 1.0, 0.2, -0.3, 0.7], kernel_type="LINEAR", rho=[0.1, -0.2, 0.3],
        support_vectors=[1.0, 0.0, 2.0, -1.0, 1.0, 0.5, 0.0, 2.0, 1.0], vectors_per_class=[1, 1, 1]),
        [value("x", F, [3, 3])], [value("label", TensorProto.INT64), value("scores")]), {"x": np.nan_to_num(X)}),
    "OneHotEncoder": (model_of(helper.make_node("OneHotEncoder", ["x"], ["y"], domain=ML, cats_strings=["a", "c"]),
                               [value("x", TensorProto.STRING, [2, 2])], [value("y")]), {"x": STRINGS}),
    "CategoryMapper": (model_of(helper.make_node("CategoryMapper", ["x"], ["y"], domain=ML, cats_strings=["a", "bb"],
                                                 cats_int64s=[5, 6]),
                                [value("x", TensorProto.STRING, [2, 2])], [value("y", TensorProto.INT64)]),
                       {"x": STRINGS}),
    "ZipMap": (model_of(helper.make_node("ZipMap", ["x"], ["y"], domain=ML, classlabels_int64s=[10, 20, 30]),
                        [value("x", F, [3, 3])], [seq_value("y")]), {"x": np.nan_to_num(X)}),
    "TreeEnsembleRegressor": (model_of(helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain=ML, n_targets=1, nodes_treeids=[0, 0, 0],
        nodes_nodeids=[0, 1, 2], nodes_featureids=[1, 0, 0], nodes_values=[0.1, 0.0, 0.0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
        target_treeids=[0, 0], target_nodeids=[1, 2], target_ids=[0, 0], target_weights=[-2.0, 3.0]),
        [value("x", F, [3, 3])], [value("y")], {"": 21, ML: 3}), {"x": X}),
    "MaxRoiPool": (model_of(helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[2, 2],
                                             spatial_scale=0.5),
                            [value("x", F, [1, 2, 6, 6]), value("rois", F, [2, 5])], [value("y")]),
                   {"x": np.random.default_rng(0).standard_normal((1, 2, 6, 6)).astype(np.float32),
                    "rois": np.array([[0, 0, 0, 9, 9], [0, 2, 3, 7, 11]], dtype=np.float32)}),
    "Upsample-1": (model_of(helper.make_node("Upsample", ["x"], ["y"], height_scale=2.0, width_scale=3.0,
                                             mode="nearest"),
                            [value("x", F, [1, 1, 2, 2])], [value("y")], {"": 1}),
                   {"x": np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)}),
    "Dropout-6-training": (model_of(helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.4),
                                    [value("x", F, [3, 3])], [value("y"), value("mask")], {"": 6}),
                           {"x": np.nan_to_num(X)}),
    "GridSample-3d-cubic": (model_of(helper.make_node("GridSample", ["x", "grid"], ["y"], mode="cubic",
                                                     padding_mode="border"),
                                    [value("x", F, [1, 2, 3, 4, 4]), value("grid", F, [1, 2, 3, 3, 3])], [value("y")],
                                    {"": 22}),
                           {"x": np.random.default_rng(1).standard_normal((1, 2, 3, 4, 4)).astype(np.float32),
                            "grid": np.random.default_rng(2).uniform(-1.2, 1.2, (1, 2, 3, 3, 3)).astype(np.float32)}),
    "GridSample-1d-reflection": (model_of(helper.make_node("GridSample", ["x", "grid"], ["y"], mode="linear",
                                                          padding_mode="reflection", align_corners=1),
                                         [value("x", F, [1, 2, 5]), value("grid", F, [1, 4, 1])], [value("y")],
                                         {"": 22}),
                                {"x": np.random.default_rng(3).standard_normal((1, 2, 5)).astype(np.float32),
                                 "grid": np.array([[[-1.7], [-0.3], [0.9], [2.6]]], dtype=np.float32)}),
    "Conv-4d": (model_of(helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 0, 0, 1, 0, 1, 1, 0],
                                          strides=[1, 2, 1, 1], group=2),
                         [value("x", F, [1, 4, 3, 4, 3, 3]), value("w", F, [2, 2, 2, 2, 2, 2]), value("b", F, [2])],
                         [value("y")]),
                {"x": np.random.default_rng(4).standard_normal((1, 4, 3, 4, 3, 3)).astype(np.float32),
                 "w": np.random.default_rng(5).standard_normal((2, 2, 2, 2, 2, 2)).astype(np.float32),
                 "b": np.array([0.5, -1.0], dtype=np.float32)}),
    "ConvTranspose-4d": (model_of(helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 1, 1, 2],
                                                   output_padding=[1, 0, 0, 0], pads=[0, 1, 0, 0, 0, 0, 1, 1]),
                                  [value("x", F, [1, 2, 2, 3, 2, 2]), value("w", F, [2, 3, 2, 2, 2, 2])],
                                  [value("y")]),
                         {"x": np.random.default_rng(6).standard_normal((1, 2, 2, 3, 2, 2)).astype(np.float32),
                          "w": np.random.default_rng(7).standard_normal((2, 3, 2, 2, 2, 2)).astype(np.float32)}),
    "Cast-to-string": (model_of(helper.make_node("Cast", ["x"], ["y"], to=TensorProto.STRING),
                                [value("x", F, [3, 3])], [value("y", TensorProto.STRING)]), {"x": X}),
    "Reshape-of-strings": (model_of(helper.make_node("Reshape", ["x", "shape"], ["y"]),
                                    [value("x", TensorProto.STRING, [2, 2])], [value("y", TensorProto.STRING)],
                                    {"": 21}, [numpy_helper.from_array(np.array([4], dtype=np.int64), "shape")]),
                           {"x": STRINGS}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_translation_matches_the_reference(name: str) -> None:
    model, feeds = CASES[name]
    expected, backend, module = run_all(model, feeds)
    for e, b, m in zip(expected, backend, module, strict=True):
        assert_same(e, b)
        assert_same(e, m)


def test_every_reference_op_has_a_translation_and_reference_kernels_say_why() -> None:
    from sealtrace.ops.registry import registered_ops

    translated = registered_translations()
    missing = []
    for (domain, op), versions in registered_ops().items():
        if domain == "" and op in ("If", "Loop", "Scan"):
            continue  # the executors run control flow themselves
        name = f"{domain}::{op}" if domain else op
        missing += [f"{name}-{v}" for v in versions if v not in translated.get(name, [])]
    assert not missing, missing
    reasons = reference_kernel_ops()
    assert "StringSplit" in reasons and "ai.onnx.ml::TreeEnsemble" in reasons
    assert all(len(reason) > 20 for reason in reasons.values())


def _module64(model: Any) -> Any:
    return to_torch(model, dtype=torch.float64)


def _gradcheck(model: Any, feeds: dict[str, np.ndarray], wrt: list[str]) -> None:
    module = _module64(model)
    base = {n: torch.from_numpy(np.asarray(v, dtype=np.float64) if v.dtype == np.float32 else v) for n, v in
            feeds.items()}

    def f(*tensors: torch.Tensor) -> Any:
        args = dict(base)
        args.update(zip(wrt, tensors, strict=True))
        out = module(*(args[n] for n in module.input_names))
        return out if isinstance(out, tuple) else (out,)

    inputs = tuple(base[n].clone().requires_grad_(True) for n in wrt)
    assert torch.autograd.gradcheck(lambda *t: tuple(o for o in f(*t) if o.is_floating_point()), inputs,
                                    eps=1e-6, atol=1e-5, fast_mode=True)


RNG = np.random.default_rng(3)
GRADIENT_CASES: dict[str, tuple[Any, dict[str, np.ndarray], list[str]]] = {
    "RoiAlign": (model_of(helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], output_height=2, output_width=2,
                                           sampling_ratio=2),
                          [value("x", F, [1, 2, 5, 5]), value("rois", F, [2, 4]), value("idx", TensorProto.INT64, [2])],
                          [value("y")]),
                 {"x": RNG.standard_normal((1, 2, 5, 5)).astype(np.float32),
                  "rois": np.array([[0.3, 0.6, 3.2, 3.9], [1.1, 0.2, 4.4, 2.7]], dtype=np.float32),
                  "idx": np.zeros(2, dtype=np.int64)}, ["x"]),
    "DeformConv": (model_of(helper.make_node("DeformConv", ["x", "w", "offset", "b", "mask"], ["y"],
                                             kernel_shape=[2, 2]),
                            [value(n, F, s) for n, s in (("x", [1, 2, 4, 4]), ("w", [3, 2, 2, 2]),
                                                         ("offset", [1, 8, 3, 3]), ("b", [3]), ("mask", [1, 4, 3, 3]))],
                            [value("y")]),
                   {"x": RNG.standard_normal((1, 2, 4, 4)).astype(np.float32),
                    "w": RNG.standard_normal((3, 2, 2, 2)).astype(np.float32),
                    "offset": (0.3 * RNG.standard_normal((1, 8, 3, 3)) + 0.25).astype(np.float32),
                    "b": RNG.standard_normal(3).astype(np.float32),
                    "mask": RNG.random((1, 4, 3, 3)).astype(np.float32)}, ["x", "w", "offset", "b", "mask"]),
    "LinearAttention": (model_of(helper.make_node("LinearAttention", ["q", "k", "v", "", "decay", "beta"],
                                                  ["y", "state"], q_num_heads=2, kv_num_heads=1,
                                                  update_rule="gated_delta"),
                                 [value(n, F, s) for n, s in (("q", [1, 3, 4]), ("k", [1, 3, 2]), ("v", [1, 3, 2]),
                                                              ("decay", [1, 3, 1]), ("beta", [1, 3, 1]))],
                                 [value("y"), value("state")], {"": 27}),
                        {"q": RNG.standard_normal((1, 3, 4)).astype(np.float32),
                         "k": RNG.standard_normal((1, 3, 2)).astype(np.float32),
                         "v": RNG.standard_normal((1, 3, 2)).astype(np.float32),
                         "decay": -RNG.random((1, 3, 1)).astype(np.float32),
                         "beta": RNG.random((1, 3, 1)).astype(np.float32)}, ["q", "k", "v", "decay", "beta"]),
    "CausalConvWithState": (model_of(helper.make_node("CausalConvWithState", ["x", "w", "b", "past"], ["y", "state"],
                                                      activation="silu"),
                                     [value(n, F, s) for n, s in (("x", [1, 2, 4]), ("w", [2, 1, 3]), ("b", [2]),
                                                                  ("past", [1, 2, 2]))],
                                     [value("y"), value("state")], {"": 27}),
                            {"x": RNG.standard_normal((1, 2, 4)).astype(np.float32),
                             "w": RNG.standard_normal((2, 1, 3)).astype(np.float32),
                             "b": RNG.standard_normal(2).astype(np.float32),
                             "past": RNG.standard_normal((1, 2, 2)).astype(np.float32)}, ["x", "w", "b", "past"]),
    "TensorScatter": (model_of(helper.make_node("TensorScatter", ["cache", "update", "at"], ["y"], mode="circular"),
                               [value("cache", F, [2, 4, 3]), value("update", F, [2, 2, 3]),
                                value("at", TensorProto.INT64, [2])], [value("y")], {"": 24}),
                      {"cache": RNG.standard_normal((2, 4, 3)).astype(np.float32),
                       "update": RNG.standard_normal((2, 2, 3)).astype(np.float32),
                       "at": np.array([3, 1], dtype=np.int64)}, ["cache", "update"]),
    "DFT": (model_of(helper.make_node("DFT", ["x", "", "axis"], ["y"], inverse=1),
                     [value("x", F, [1, 6, 2])], [value("y")], {"": 20},
                     [numpy_helper.from_array(np.array(1, dtype=np.int64), "axis")]),
            {"x": RNG.standard_normal((1, 6, 2)).astype(np.float32)}, ["x"]),
    "BatchNormalization-training": (model_of(helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"],
                                                              ["y", "rm", "rv"], training_mode=1),
                                             [value(n, F, sh) for n, sh in (("x", [3, 2, 2]), ("s", [2]), ("b", [2]),
                                                                            ("m", [2]), ("v", [2]))],
                                             [value("y"), value("rm"), value("rv")], {"": 15}),
                                    {"x": RNG.standard_normal((3, 2, 2)).astype(np.float32),
                                     "s": RNG.standard_normal(2).astype(np.float32),
                                     "b": RNG.standard_normal(2).astype(np.float32),
                                     "m": RNG.standard_normal(2).astype(np.float32),
                                     "v": RNG.random(2).astype(np.float32) + 0.5}, ["x", "s", "b"]),
    "SwiGLU": (model_of(helper.make_node("SwiGLU", ["a", "b"], ["y"], alpha=1.5),
                        [value("a", F, [2, 3]), value("b", F, [2, 3])], [value("y")], {"": 28}),
               {"a": RNG.standard_normal((2, 3)).astype(np.float32),
                "b": RNG.standard_normal((2, 3)).astype(np.float32)}, ["a", "b"]),
}


@pytest.mark.parametrize("name", list(GRADIENT_CASES))
def test_new_differentiable_translations_pass_gradcheck(name: str) -> None:
    model, feeds, wrt = GRADIENT_CASES[name]
    _gradcheck(model, feeds, wrt)


def test_dft_gradient_is_torch_ffts() -> None:
    # DFT's forward is NumPy's FFT (the reference's values); its gradient is torch.fft's.
    from sealtrace.torchops.translations.signal import _dft, _torch_dft

    x = torch.from_numpy(RNG.standard_normal((2, 8, 2))).requires_grad_(True)
    weights = torch.from_numpy(RNG.standard_normal((2, 5, 2)))
    (ours,) = torch.autograd.grad((_dft(x, None, 1, 0, 1) * weights).sum(), x)
    (theirs,) = torch.autograd.grad((_torch_dft(x, None, 1, 0, 1) * weights).sum(), x)
    torch.testing.assert_close(ours, theirs)


def test_specialized_steps_are_plain_torch_calls_with_the_translations_values() -> None:
    # Conv with symmetric pads, Clip with constant bounds, float Add, Erf, Transpose without perm
    # become plain torch calls in the fx graph; Conv with asymmetric pads keeps its translation.
    rng = np.random.default_rng(5)
    weights = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
               numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
               numpy_helper.from_array(np.array(-0.5, dtype=np.float32), "lo"),
               numpy_helper.from_array(np.array(0.75, dtype=np.float32), "hi")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Conv", ["x", "w"], ["c2"], pads=[0, 1, 2, 1]),
             helper.make_node("Clip", ["c1", "lo", "hi"], ["k"]),
             helper.make_node("Erf", ["k"], ["e"]),
             helper.make_node("Add", ["e", "e"], ["a"]),
             helper.make_node("Transpose", ["a"], ["t"]),
             helper.make_node("Transpose", ["c2"], ["t2"], perm=[0, 2, 3, 1])]
    graph = helper.make_graph(nodes, "g", [value("x", F, [1, 3, 7, 7])], [value("t"), value("t2")], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    module = to_torch(model)
    targets = [n.target for n in module.graph.nodes if n.op == "call_function"]
    assert torch.nn.functional.conv2d in targets and torch.clamp in targets and torch.add in targets
    assert torch.erf in targets and torch.permute in targets
    assert sum(t is torch.nn.functional.conv2d for t in targets) == 1  # the asymmetric one is translated
    x = rng.standard_normal((1, 3, 7, 7)).astype(np.float32)
    backend = get_backend("torch").run(build_plan(model), {"x": x})
    with torch.no_grad():
        t, t2 = module(torch.from_numpy(x))
    assert np.array_equal(t.numpy(), backend["t"]) and np.array_equal(t2.numpy(), backend["t2"])
