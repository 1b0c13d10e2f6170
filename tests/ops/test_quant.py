"""Quantization kernels against onnxruntime: per-tensor (opset 10), per-axis, blocked, rounding
half to even, saturation of integer, int4 and float8 outputs, DynamicQuantizeLinear edge ranges."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

from tests.ops.oneop import assert_same, both

RNG = np.random.default_rng(0)
HALVES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 300.0, -300.0, 0.49, 127.5], dtype=np.float32)


@pytest.mark.parametrize("opset", [10, 13, 19, 21, 23])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_quantize_per_tensor_rounds_half_to_even_and_saturates(opset: int, dtype: type) -> None:
    zero_point = np.array(3 if dtype == np.uint8 else -3, dtype=dtype)
    got, want = both("QuantizeLinear", {"x": HALVES, "s": np.array(1.0, np.float32), "z": zero_point}, opset)
    assert_same(got, want)


def test_quantize_without_zero_point_is_uint8() -> None:
    got, want = both("QuantizeLinear", {"x": HALVES, "s": np.array(0.5, np.float32)}, 13)
    assert got[0].dtype == np.uint8
    assert_same(got, want)


@pytest.mark.parametrize("opset", [13, 19, 21])
def test_quantize_dequantize_per_axis(opset: int) -> None:
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32) * 4
    scale = np.array([0.1, 0.2, 0.05], np.float32)
    zero_point = np.array([0, 10, 250], np.uint8)
    got, want = both("QuantizeLinear", {"x": x, "s": scale, "z": zero_point}, opset, axis=1)
    assert_same(got, want)
    got, want = both("DequantizeLinear", {"q": want[0], "s": scale, "z": zero_point}, opset, axis=1)
    assert_same(got, want)
    scale_last = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    got, want = both("QuantizeLinear", {"x": x, "s": scale_last}, opset, axis=-1)
    assert_same(got, want)


def test_blocked_quantization_with_a_short_last_block() -> None:
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    scale = np.abs(RNG.standard_normal((3, 3))).astype(np.float32) / 50 + 0.01
    zero_point = RNG.integers(-5, 5, (3, 3)).astype(np.int8)
    got, want = both("QuantizeLinear", {"x": x, "s": scale, "z": zero_point}, 21, axis=1, block_size=2)
    assert_same(got, want)
    got, want = both(
        "DequantizeLinear", {"q": want[0], "s": scale, "z": zero_point}, 21, axis=1, block_size=2
    )
    assert_same(got, want)


def test_output_dtype_attribute_without_zero_point() -> None:
    x = (RNG.standard_normal(10) * 1000).astype(np.float32)
    got, want = both(
        "QuantizeLinear", {"x": x, "s": np.array(0.5, np.float32)}, 21, output_dtype=TensorProto.INT16
    )
    assert got[0].dtype == np.int16
    assert_same(got, want)


@pytest.mark.parametrize(("dtype", "low", "high"), [(ml_dtypes.int4, -8, 7), (ml_dtypes.uint4, 0, 15)])
def test_int4_saturates(dtype: type, low: int, high: int) -> None:
    # onnxruntime cannot hand int4 outputs to numpy: compare with the spec's formula instead.
    from sealtrace.ops.quant import quantize_linear

    x = np.linspace(-20, 20, 17).astype(np.float32)
    y = quantize_linear(x, np.array(1.5, np.float32), np.array([1], dtype=dtype), axis=0)
    assert y.dtype == np.dtype(dtype)
    expected = np.clip(np.rint(x / np.float32(1.5)) + 1, low, high)
    np.testing.assert_array_equal(y.astype(np.float32), expected)


@pytest.mark.parametrize("saturate", [0, 1])
def test_float8_e4m3fn_saturation(saturate: int) -> None:
    dtype = ml_dtypes.float8_e4m3fn
    x = np.array([0.0, -0.0, 1.0, 3.3, 500.0, -1e6, 1e6, np.inf, -np.inf, 57000, 0.001], np.float32)
    zero_point = np.zeros(1, dtype=dtype)
    got, want = both(
        "QuantizeLinear", {"x": x, "s": np.array(1.0, np.float32), "z": zero_point}, 19, saturate=saturate
    )
    # onnxruntime returns float8 tensors as their raw bytes.
    np.testing.assert_array_equal(got[0].view(np.uint8), want[0].view(np.uint8))


def test_float8_e5m2_saturation() -> None:
    # onnxruntime cannot hand float8e5m2 outputs to numpy: the spec's table instead.
    from sealtrace.ops.quant import quantize_linear

    x = np.array([1e6, -np.inf, np.nan, 3.3], np.float32)
    zero_point = np.zeros(1, dtype=ml_dtypes.float8_e5m2)
    saturated = quantize_linear(x, np.array(1.0, np.float32), zero_point).astype(np.float32)
    assert saturated[0] == 57344 and saturated[1] == -57344 and np.isnan(saturated[2]) and saturated[3] == 3.5
    plain = quantize_linear(x, np.array(1.0, np.float32), zero_point, saturate=0).astype(np.float32)
    assert plain[0] == np.inf and plain[1] == -np.inf


def test_fnuz_infinity_becomes_nan_even_when_saturating() -> None:
    from sealtrace.ops.quant import quantize_linear

    x = np.array([np.inf, -np.inf, 1e6], np.float32)
    zero_point = np.zeros(1, dtype=ml_dtypes.float8_e4m3fnuz)
    y = quantize_linear(x, np.array(1.0, np.float32), zero_point).astype(np.float32)
    assert np.isnan(y[0]) and np.isnan(y[1]) and y[2] == 240


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
def test_dequantize_int32_and_int8(opset: int) -> None:
    x32 = np.array([-(2**31), -5, 0, 7, 2**31 - 1], np.int32)
    got, want = both("DequantizeLinear", {"x": x32, "s": np.array(0.25, np.float32)}, opset)
    assert_same(got, want)
    x8 = np.arange(-128, 128, 17, dtype=np.int8)
    got, want = both(
        "DequantizeLinear", {"x": x8, "s": np.array(0.1, np.float32), "z": np.array(-3, np.int8)}, opset
    )
    assert_same(got, want)


def test_dequantize_float16_scale_keeps_float16() -> None:
    x = np.arange(0, 256, 5, dtype=np.uint8)
    got, want = both(
        "DequantizeLinear", {"x": x, "s": np.array(0.02, np.float16), "z": np.array(128, np.uint8)}, 19
    )
    assert got[0].dtype == np.float16
    assert_same(got, want)


def test_dequantize_output_dtype_attribute() -> None:
    from sealtrace.ops.quant import dequantize_linear

    y = dequantize_linear(
        np.array([1, 2], np.int8), np.array(0.5, np.float32), output_dtype=TensorProto.FLOAT16
    )
    assert y.dtype == np.float16 and y.tolist() == [0.5, 1.0]


@pytest.mark.parametrize(
    "x",
    [
        np.array([0.0, 0.0, 0.0], np.float32),
        np.array([1.0, 2.0, 3.0], np.float32),
        np.array([-1.0, -2.0, -3.0], np.float32),
        RNG.standard_normal((3, 4)).astype(np.float32),
    ],
)
def test_dynamic_quantize_linear(x: np.ndarray) -> None:
    got, want = both("DynamicQuantizeLinear", {"x": x}, 11, n_out=3)
    assert_same(got, want)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.uint16])
def test_quantize_nan_and_infinities(dtype: type) -> None:
    x = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    got, want = both("QuantizeLinear", {"x": x, "s": np.array(1.0, np.float32), "z": np.zeros((), dtype)}, 21)
    assert_same(got, want)
