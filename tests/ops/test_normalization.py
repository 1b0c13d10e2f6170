"""Normalization kernels against onnxruntime: BatchNormalization across opsets, Layer/Group/RMS/
Instance normalization, LRN, MeanVarianceNormalization, LpNormalization."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.ops.test_matmul import assert_same, run_both, run_ours

RNG = np.random.default_rng(2)


def _bn_feeds(x_shape: tuple[int, ...], dtype: type = np.float32) -> dict[str, np.ndarray | None]:
    c = x_shape[1]
    return {
        "X": RNG.standard_normal(x_shape).astype(dtype),
        "scale": RNG.standard_normal(c).astype(dtype),
        "B": RNG.standard_normal(c).astype(dtype),
        "mean": RNG.standard_normal(c).astype(dtype),
        "var": RNG.uniform(0.5, 2.0, c).astype(dtype),
    }


@pytest.mark.parametrize("opset", [7, 9, 14, 15])
@pytest.mark.parametrize("x_shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5)])
def test_batch_norm_inference_uses_running_statistics(opset: int, x_shape: tuple[int, ...]) -> None:
    feeds = _bn_feeds(x_shape)
    assert_same(*run_both("BatchNormalization", feeds, opset, epsilon=1e-3), rtol=1e-5, atol=1e-5)


def _bn_expected(feeds: dict[str, np.ndarray | None], epsilon: float = 1e-5) -> np.ndarray:
    x, s, b, m, v = (feeds[k] for k in ("X", "scale", "B", "mean", "var"))
    assert x is not None and s is not None and b is not None and m is not None and v is not None
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return (x - m.reshape(shape)) / np.sqrt(v.reshape(shape) + epsilon) * s.reshape(shape) + b.reshape(shape)


@pytest.mark.parametrize(("opset", "attrs"), [(6, {"is_test": 1}), (6, {"is_test": 0}), (9, {}), (14, {})])
def test_batch_norm_momentum_does_not_touch_inference(opset: int, attrs: dict[str, Any]) -> None:
    # onnx's reference evaluator mixes batch statistics in when momentum is set (opsets 9-13);
    # onnxruntime has no BatchNormalization-6 kernel, so the formula is the reference here.
    feeds = _bn_feeds((4, 3, 2, 2))
    (y, *_) = run_ours("BatchNormalization", feeds, opset, momentum=0.5, **attrs)
    np.testing.assert_allclose(y, _bn_expected(feeds), rtol=1e-5, atol=1e-5)


def test_batch_norm_v6_declared_training_outputs_pass_statistics_through() -> None:
    feeds = _bn_feeds((2, 3, 4))
    y, mean, var, saved_mean, saved_var = run_ours("BatchNormalization", feeds, 6, n_outputs=5, is_test=1)
    np.testing.assert_allclose(y, _bn_expected(feeds), rtol=1e-5, atol=1e-5)
    for got, name in zip((mean, var, saved_mean, saved_var), ("mean", "var", "mean", "var"), strict=True):
        np.testing.assert_array_equal(got, feeds[name])


def test_batch_norm_v7_non_spatial() -> None:
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    params = {k: RNG.uniform(0.5, 2.0, (3, 4)).astype(np.float32) for k in ("scale", "B", "mean", "var")}
    (y, *_) = run_ours("BatchNormalization", {"X": x, **params}, 7, spatial=0)
    expected = (x - params["mean"]) / np.sqrt(params["var"] + 1e-5) * params["scale"] + params["B"]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_batch_norm_training_mode_outputs() -> None:
    feeds = _bn_feeds((4, 3, 5))
    ours, theirs = run_both("BatchNormalization", feeds, 15, n_outputs=3, training_mode=1, momentum=0.8)
    assert_same(ours, theirs, rtol=1e-5, atol=1e-5)


def test_batch_norm_float16() -> None:
    ours, theirs = run_both("BatchNormalization", _bn_feeds((2, 3, 4), np.float16), 15)
    assert_same(ours, theirs, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("opset", [6, 22])
def test_instance_norm(opset: int) -> None:
    feeds: dict[str, np.ndarray | None] = {
        "input": RNG.standard_normal((2, 3, 4, 5)).astype(np.float32),
        "scale": RNG.standard_normal(3).astype(np.float32),
        "B": RNG.standard_normal(3).astype(np.float32),
    }
    assert_same(*run_both("InstanceNormalization", feeds, opset, epsilon=1e-3), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis", [-1, -2, 1, 0])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm_outputs_match_onnxruntime(axis: int, with_bias: bool) -> None:
    x = RNG.standard_normal((2, 3, 8)).astype(np.float32)
    norm_shape = x.shape[axis:]
    feeds: dict[str, np.ndarray | None] = {
        "X": x,
        "Scale": RNG.standard_normal(norm_shape).astype(np.float32),
        "B": RNG.standard_normal(norm_shape).astype(np.float32) if with_bias else None,
    }
    ours, theirs = run_both("LayerNormalization", feeds, 17, n_outputs=3, axis=axis, epsilon=1e-5)
    assert ours[1].shape == x.shape[: axis % 3] + (1,) * (3 - axis % 3)
    assert_same(ours, theirs, rtol=1e-4, atol=1e-5)


def test_layer_norm_float16_stashes_float32_statistics() -> None:
    x = RNG.standard_normal((4, 16)).astype(np.float16)
    feeds: dict[str, np.ndarray | None] = {"X": x, "Scale": np.ones(16, np.float16), "B": np.zeros(16, np.float16)}
    ours, theirs = run_both("LayerNormalization", feeds, 17, n_outputs=3)
    assert [o.dtype for o in ours] == [np.float16, np.float32, np.float32]
    assert_same(ours, theirs, rtol=2e-3, atol=2e-3)


def test_layer_norm_bert_sized_is_deterministic() -> None:
    x = RNG.standard_normal((1, 128, 384)).astype(np.float32)
    feeds: dict[str, np.ndarray | None] = {"X": x, "Scale": RNG.standard_normal(384).astype(np.float32)}
    first = run_ours("LayerNormalization", feeds, 17, epsilon=1e-12)[0]
    assert first.dtype == np.float32
    assert first.tobytes() == run_ours("LayerNormalization", feeds, 17, epsilon=1e-12)[0].tobytes()


def _group_norm_expected(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, groups: int, per_channel: bool) -> np.ndarray:
    g = x.reshape(x.shape[0], groups, -1).astype(np.float64)
    y = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)
    if per_channel:
        shape = (1, -1) + (1,) * (x.ndim - 2)
        return y.reshape(x.shape) * scale.reshape(shape) + bias.reshape(shape)
    return (y * scale.reshape(1, -1, 1) + bias.reshape(1, -1, 1)).reshape(x.shape)


def test_group_norm_v18_scale_per_group() -> None:
    x = RNG.standard_normal((2, 6, 3, 3)).astype(np.float32)
    scale, bias = RNG.standard_normal(3).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    (y,) = run_ours("GroupNormalization", {"X": x, "scale": scale, "bias": bias}, 18, num_groups=3)
    np.testing.assert_allclose(y, _group_norm_expected(x, scale, bias, 3, False), rtol=1e-4, atol=1e-5)


def test_group_norm_v21_scale_per_channel() -> None:
    x = RNG.standard_normal((2, 6, 3, 3)).astype(np.float32)
    scale, bias = RNG.standard_normal(6).astype(np.float32), RNG.standard_normal(6).astype(np.float32)
    ours, theirs = run_both("GroupNormalization", {"X": x, "scale": scale, "bias": bias}, 21, num_groups=3)
    np.testing.assert_allclose(ours[0], _group_norm_expected(x, scale, bias, 3, True), rtol=1e-4, atol=1e-5)
    assert_same(ours, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_norm(axis: int) -> None:
    x = RNG.standard_normal((2, 3, 8)).astype(np.float32)
    scale = RNG.standard_normal(x.shape[axis:]).astype(np.float32)
    ours, theirs = run_both("RMSNormalization", {"X": x, "scale": scale}, 23, axis=axis)
    assert_same(ours, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn(size: int) -> None:
    x = RNG.standard_normal((2, 6, 3, 3)).astype(np.float32)
    attrs = {"size": size, "alpha": 1e-3, "beta": 0.75, "bias": 2.0}
    assert_same(*run_both("LRN", {"X": x}, 13, **attrs), rtol=1e-5, atol=1e-6)


def test_lrn_even_size_window_follows_spec() -> None:
    # onnxruntime only accepts odd sizes; the spec's window is [c - floor((s-1)/2), c + ceil((s-1)/2)].
    x = RNG.standard_normal((1, 5, 2)).astype(np.float32)
    (y,) = run_ours("LRN", {"X": x}, 13, size=4, alpha=0.5, beta=0.75, bias=1.0)
    square_sum = np.stack([np.sum(x[:, max(0, c - 1) : min(5, c + 3)] ** 2, axis=1) for c in range(5)], axis=1)
    np.testing.assert_allclose(y, x / (1.0 + 0.5 / 4 * square_sum) ** 0.75, rtol=1e-5)


@pytest.mark.parametrize("axes", [None, [0, 2, 3], [1], [2, 3]])
def test_mean_variance_norm(axes: list[int] | None) -> None:
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    attrs = {} if axes is None else {"axes": axes}
    assert_same(*run_both("MeanVarianceNormalization", {"X": x}, 13, **attrs), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [-1, 0])
def test_lp_norm(p: int, axis: int) -> None:
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    assert_same(*run_both("LpNormalization", {"input": x}, 1, p=p, axis=axis), rtol=1e-5, atol=1e-6)


def test_lp_norm_zero_vector_gives_zero() -> None:
    (y,) = run_ours("LpNormalization", {"input": np.zeros((2, 3), np.float32)}, 22, p=2, axis=1)
    np.testing.assert_array_equal(y, np.zeros((2, 3), np.float32))
