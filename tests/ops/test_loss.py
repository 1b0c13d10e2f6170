"""SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss against onnxruntime: every version,
reductions, class weights, ignore_index (also negative and on every position), N-D inputs, dtypes."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import sealtrace


def _model(
    op: str, feeds: dict[str, np.ndarray | None], n_out: int, opset: int, domain: str, **attrs: Any
) -> onnx.ModelProto:
    inputs = [name if value is not None else "" for name, value in feeds.items()]
    while inputs and not inputs[-1]:
        inputs.pop()
    outputs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op, inputs, outputs, domain=domain, **attrs)
    graph = helper.make_graph(
        [node],
        "test",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in feeds.items()
            if v is not None
        ],
        [onnx.ValueInfoProto(name=o) for o in outputs],
    )
    opsets = [helper.make_opsetid(domain, opset)] + ([helper.make_opsetid("", 17)] if domain else [])
    return helper.make_model(graph, ir_version=10, opset_imports=opsets)


def both(
    op: str, feeds: dict[str, np.ndarray | None], opset: int, n_out: int = 1, domain: str = "", **attrs: Any
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(ours, onnxruntime's) outputs of a one-node model."""
    model = _model(op, feeds, n_out, opset, domain, **attrs)
    given = {k: v for k, v in feeds.items() if v is not None}
    with np.errstate(all="ignore"):
        got = sealtrace.Session(model).run(None, given)
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return list(got), list(session.run(None, given))


def assert_same(got: list[np.ndarray], want: list[np.ndarray], rtol: float = 0.0, atol: float = 0.0) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        if g.dtype == object:
            assert g.tolist() == w.tolist()
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


RNG = np.random.default_rng(0)


def _case(shape: tuple[int, ...], dtype: type, ignore_index: int | None, weighted: bool) -> dict[str, Any]:
    x = RNG.standard_normal(shape).astype(dtype)
    target = RNG.integers(0, shape[1], (shape[0], *shape[2:])).astype(np.int64)
    if ignore_index is not None:
        target.reshape(-1)[::3] = ignore_index
    weight = RNG.random(shape[1]).astype(dtype) if weighted else None
    return {"x": x, "target": target, "weight": weight}


@pytest.mark.parametrize(
    ("op", "opsets"), [("SoftmaxCrossEntropyLoss", (12, 13)), ("NegativeLogLikelihoodLoss", (12, 13, 22))]
)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("ignore_index", [None, 2, -1])
@pytest.mark.parametrize("weighted", [False, True])
def test_losses_match_onnxruntime(
    op: str, opsets: tuple[int, ...], reduction: str, ignore_index: int | None, weighted: bool
) -> None:
    n_out = 2 if op == "SoftmaxCrossEntropyLoss" else 1
    attrs: dict[str, Any] = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    for opset in opsets:
        for shape in [(5, 4), (3, 4, 2, 3)]:
            feeds = _case(shape, np.float32, ignore_index, weighted)
            got, want = both(op, feeds, opset, n_out=n_out, **attrs)
            assert_same(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
@pytest.mark.parametrize("op", ["SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"])
def test_losses_keep_the_input_dtype(dtype: type, op: str) -> None:
    n_out = 2 if op == "SoftmaxCrossEntropyLoss" else 1
    feeds = _case((4, 5, 3), dtype, 1, True)
    got, want = both(op, feeds, 13, n_out=n_out, reduction="mean", ignore_index=1)
    assert_same(got, want, rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("op", ["SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"])
def test_mean_over_only_ignored_positions_is_nan(op: str) -> None:
    feeds = {"x": RNG.standard_normal((3, 4)).astype(np.float32), "target": np.ones(3, np.int64)}
    got, want = both(op, feeds, 13, reduction="mean", ignore_index=1)
    assert np.isnan(got[0]) and np.isnan(want[0])


def test_log_prob_output_is_log_softmax() -> None:
    scores = RNG.standard_normal((3, 5)).astype(np.float32) * 30
    got, _ = both("SoftmaxCrossEntropyLoss", {"x": scores, "target": np.array([0, 4, 2])}, 13, n_out=2)
    shifted = scores.astype(np.float64) - scores.max(axis=1, keepdims=True)
    expected = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(got[1], expected, rtol=1e-5, atol=1e-5)
