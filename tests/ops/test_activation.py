"""Activation kernels and Softmax/LogSoftmax/Hardmax against onnxruntime: every historic version
ORT still runs, the opset-13 change of Softmax semantics, attributes, dtypes and edge values."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import sealtrace
from tests.conftest import make_model


def _model(op: str, feeds: dict[str, np.ndarray], opset: int, **attrs: Any) -> onnx.ModelProto:
    node = helper.make_node(op, list(feeds), ["out"], **attrs)
    return make_model(
        [node],
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in feeds.items()
        ],
        [onnx.ValueInfoProto(name="out")],
        opset=opset,
    )


def ours(op: str, feeds: dict[str, np.ndarray], opset: int, **attrs: Any) -> np.ndarray:
    with np.errstate(all="ignore"):
        return sealtrace.Session(_model(op, feeds, opset, **attrs)).run(None, feeds)[0]


def theirs(op: str, feeds: dict[str, np.ndarray], opset: int, **attrs: Any) -> np.ndarray:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    model = _model(op, feeds, opset, **attrs).SerializeToString()
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def same(
    op: str, feeds: dict[str, np.ndarray], opset: int, rtol: float = 1e-6, atol: float = 0.0, **attrs: Any
) -> None:
    got = ours(op, feeds, opset, **attrs)
    want = theirs(op, feeds, opset, **attrs)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


RNG = np.random.default_rng(3)
X = np.concatenate([RNG.standard_normal(40) * 4, [0.0, -0.0, 1.0, -1.0, 30.0, -30.0, 100.0, -100.0]])
X = X.astype(np.float32).reshape(4, 12)

CASES: list[tuple[str, tuple[int, ...], dict[str, Any]]] = [
    ("Relu", (6, 13, 14), {}),
    ("LeakyRelu", (6, 16), {}),
    ("LeakyRelu", (16,), {"alpha": 0.3}),
    ("Elu", (6, 22), {}),
    ("Elu", (6,), {"alpha": 0.5}),
    ("Selu", (6, 22), {}),
    ("Selu", (6,), {"alpha": 2.0, "gamma": 3.0}),
    ("Celu", (12,), {"alpha": 2.0}),
    ("Sigmoid", (6, 13), {}),
    ("HardSigmoid", (6, 22), {}),
    ("HardSigmoid", (6,), {"alpha": 0.3, "beta": 0.6}),
    ("HardSwish", (14, 22), {}),
    ("Softplus", (1, 22), {}),
    ("Softsign", (1, 22), {}),
    ("Tanh", (6, 13), {}),
    ("Mish", (18, 22), {}),
    ("ThresholdedRelu", (10, 22), {"alpha": 0.7}),
    ("Shrink", (9,), {"lambd": 1.5, "bias": 0.5}),
]


def test_gelu_exact() -> None:
    # 1 + erf(x/sqrt2) cancels for x << 0; with erf within 2 ulp the absolute error stays ~1e-7
    same("Gelu", {"x": X}, 20, rtol=2e-6, atol=3e-7)


def test_gelu_and_elu_stay_accurate_where_the_result_is_tiny() -> None:
    x = np.array([-5.55, -7.0, -3.0, -1e-3, 2.0, 1e-4], dtype=np.float32)
    t = x.astype(np.float64)
    phi = np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in t])
    np.testing.assert_allclose(ours("Gelu", {"x": x}, 20), t * phi, rtol=3e-7)
    np.testing.assert_allclose(ours("Elu", {"x": x}, 22), np.where(t < 0, np.expm1(t), t), rtol=2e-7)
    selu = 1.0507009873554805 * np.where(t <= 0, 1.6732632423543772 * np.expm1(t), t)
    np.testing.assert_allclose(ours("Selu", {"x": x}, 22), selu, rtol=3e-7)


def test_gelu_tanh_approximation() -> None:
    # ORT's tanh is a fast approximation; both stay within 1e-6 of the float64 formula
    same("Gelu", {"x": X}, 20, rtol=1e-5, atol=1e-6, approximate="tanh")
    t = X.astype(np.float64)
    want = 0.5 * t * (1 + np.tanh(np.sqrt(2 / np.pi) * (t + 0.044715 * t**3)))
    np.testing.assert_allclose(ours("Gelu", {"x": X}, 20, approximate="tanh"), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("op", "opsets", "attrs"), CASES)
def test_activation_matches_onnxruntime(op: str, opsets: tuple[int, ...], attrs: dict[str, Any]) -> None:
    for opset in opsets:
        same(op, {"x": X}, opset, rtol=2e-6, atol=1e-7, **attrs)


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax"])
def test_activation_float64(op: str) -> None:
    same(op, {"x": X.astype(np.float64)}, 13, rtol=1e-12, atol=1e-15)


def test_float64_stays_float64() -> None:
    x = X.astype(np.float64)
    for op, opset in [
        ("LeakyRelu", 16),
        ("Elu", 22),
        ("HardSigmoid", 22),
        ("HardSwish", 22),
        ("Softplus", 22),
    ]:
        assert ours(op, {"x": x}, opset).dtype == np.float64


@pytest.mark.parametrize("op", ["Sigmoid", "Gelu", "Elu", "Softplus", "Mish", "Swish", "Celu"])
def test_half_precision_rounds_once_from_the_exact_value(op: str) -> None:
    # one-function activations round the exact value once into float16 (docs/numerics.md), never
    # through float32: the float32 result rounded again to float16 agrees except where that
    # second rounding lands on a float16 tie, which X does not hit
    opset = {"Gelu": 20, "Mish": 22, "Swish": 24, "Celu": 28}.get(op, 22)
    x16 = X.astype(np.float16)
    got = ours(op, {"x": x16}, opset)
    want = ours(op, {"x": x16.astype(np.float32)}, opset).astype(np.float16)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)


def test_half_precision_hard_swish_runs_its_body_in_float16() -> None:
    # HardSwish is a composite: its body's steps, each rounded to the input's type
    x16 = X.astype(np.float16)
    t = np.float16
    sigmoid = np.clip(x16 * np.float32(1 / 6).astype(t) + t(0.5), t(0), t(1)) + t(0)
    np.testing.assert_array_equal(ours("HardSwish", {"x": x16}, 22), x16 * sigmoid)


def test_relu_integer_types() -> None:
    for dtype in (np.int8, np.int32, np.int64):
        got = ours("Relu", {"x": np.array([-5, 0, 7], dtype=dtype)}, 14)
        assert got.dtype == dtype and got.tolist() == [0, 0, 7]


def test_shrink_on_integers() -> None:
    x = np.array([-5, -1, 0, 1, 5], dtype=np.int32)
    same("Shrink", {"x": x}, 9, rtol=0, lambd=1.5, bias=1.0)


def test_prelu() -> None:
    slope = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2], dtype=np.float32)
    for opset in (7, 9, 16):
        same("PRelu", {"x": X, "slope": slope}, opset)
        same("PRelu", {"x": X, "slope": np.array([0.25], np.float32)}, opset)


def test_prelu_legacy_slope_per_channel() -> None:
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    slope = np.array([0.1, 0.2, 0.3], dtype=np.float32)
    got = ours("PRelu", {"x": x, "slope": slope}, 6)
    np.testing.assert_array_equal(got, np.where(x < 0, x * slope.reshape(3, 1), x))


def test_swish_and_swiglu() -> None:
    x = X.reshape(4, 12)
    want = x / (1 + np.exp(-0.5 * x.astype(np.float64)))
    np.testing.assert_allclose(ours("Swish", {"x": x}, 24, alpha=0.5), want, rtol=1e-6, atol=1e-30)
    b = RNG.standard_normal((4, 12)).astype(np.float32)
    got = ours("SwiGLU", {"a": x, "b": b}, 28, alpha=0.5)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want * b, rtol=1e-6, atol=1e-30)


def test_sigmoid_saturates_without_nan() -> None:
    x = np.array([-1000.0, -88.0, 0.0, 88.0, 1000.0, np.inf, -np.inf], dtype=np.float32)
    got = ours("Sigmoid", {"x": x}, 13)
    np.testing.assert_allclose(got, [0, 1 / (1 + np.exp(88.0)), 0.5, 1, 1, 1, 0], rtol=1e-6)


# Softmax family ------------------------------------------------------------------------------

T3 = RNG.standard_normal((2, 3, 4)).astype(np.float32)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_softmax_family_before_13_coerces_to_2d(op: str, axis: int) -> None:
    for opset in (1, 11):
        if opset == 1 and axis < 0:
            continue
        same(op, {"x": T3}, opset, rtol=1e-6, atol=1e-7, axis=axis)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_softmax_family_from_13_works_along_one_axis(op: str, axis: int) -> None:
    same(op, {"x": T3}, 13, rtol=1e-6, atol=1e-7, axis=axis)


def test_softmax_semantics_change_at_13() -> None:
    old = ours("Softmax", {"x": T3}, 11, axis=1)
    new = ours("Softmax", {"x": T3}, 13, axis=1)
    np.testing.assert_allclose(old.sum(axis=(1, 2)), 1, rtol=1e-6)
    np.testing.assert_allclose(new.sum(axis=1), 1, rtol=1e-6)


def test_softmax_defaults_and_large_values() -> None:
    x = np.array([[1000.0, 1000.0, -1000.0], [0.0, -np.inf, 1.0]], dtype=np.float32)
    same("Softmax", {"x": x}, 13)
    same("LogSoftmax", {"x": x}, 13)
    same("Softmax", {"x": x.astype(np.float64)}, 13)


def test_hardmax_picks_first_maximum() -> None:
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]], dtype=np.float32)
    np.testing.assert_array_equal(ours("Hardmax", {"x": x}, 13), [[0, 1, 0, 0], [1, 0, 0, 0]])
    same("Hardmax", {"x": x}, 13)


def test_softmax_keeps_half_precision_and_empty_shapes() -> None:
    assert ours("Softmax", {"x": T3.astype(np.float16)}, 13).dtype == np.float16
    empty = np.zeros((0, 4), dtype=np.float32)
    for opset in (11, 13):
        assert ours("Softmax", {"x": empty}, opset).shape == (0, 4)


def test_inputs_are_not_modified() -> None:
    x = X.copy()
    for op, opset in [("Sigmoid", 13), ("HardSwish", 14), ("HardSigmoid", 6), ("Elu", 6), ("Softsign", 1),
                      ("Gelu", 20), ("Softmax", 13), ("Selu", 6)]:  # fmt: skip
        ours(op, {"x": x}, opset)
        np.testing.assert_array_equal(x, X)


def test_hardswish_signed_zeros_match_onnxruntime() -> None:
    # Where the gate clips to 0 the result is x * +0: -0 for negative x, as in ONNX Runtime.
    x = np.array([-3.0, -4.0, -1e30, -0.0, 0.0, -1e-40, 1e-40, 3.0], dtype=np.float32)
    got = ours("HardSwish", {"x": x}, 14)
    want = theirs("HardSwish", {"x": x}, 14)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(got, want)
