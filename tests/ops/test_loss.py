"""SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss against onnxruntime: every version,
reductions, class weights, ignore_index (also negative and on every position), N-D inputs, dtypes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.ops.oneop import assert_same, both

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
