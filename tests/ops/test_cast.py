"""Cast, CastLike and BitCast: numeric conversions and string conversions against onnxruntime,
float8 saturation against ORT and the spec's tables, float8e8m0 rounding, Cast-1's type names."""

from __future__ import annotations

import itertools
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import sealtrace
from sealtrace.errors import SealtraceError
from sealtrace.ops.cast import cast
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


def ours(op: str, feeds: dict[str, np.ndarray], opset: int = 21, **attrs: Any) -> np.ndarray:
    return sealtrace.Session(_model(op, feeds, opset, **attrs)).run(None, feeds)[0]


def theirs(op: str, feeds: dict[str, np.ndarray], opset: int = 21, **attrs: Any) -> np.ndarray:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    model = _model(op, feeds, opset, **attrs).SerializeToString()
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def same(op: str, feeds: dict[str, np.ndarray], opset: int = 21, **attrs: Any) -> None:
    got, want = ours(op, feeds, opset, **attrs), theirs(op, feeds, opset, **attrs)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    if want.dtype == object:
        assert got.tolist() == want.tolist()
    else:
        np.testing.assert_array_equal(got, want)


NUMERIC = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
           np.int64, np.uint64, np.bool_]  # fmt: skip
CODE = {np.dtype(t): helper.np_dtype_to_tensor_dtype(np.dtype(t)) for t in NUMERIC}


def _values(dtype: type) -> np.ndarray:
    """Values every numeric type holds: floats stay within the range of the narrowest integer."""
    if dtype == np.bool_:
        return np.array([True, False, True])
    if np.dtype(dtype).kind == "f":
        return np.array([0.0, -0.0, 1.5, -1.5, 2.7, -2.7, 100.25, 0.3], dtype=dtype)
    info = np.iinfo(dtype)
    return np.array([0, 1, 7, info.max, info.min, info.max // 3], dtype=dtype)


@pytest.mark.parametrize(("source", "target"), list(itertools.product(NUMERIC, NUMERIC)))
def test_numeric_casts_match_onnxruntime(source: type, target: type) -> None:
    x = _values(source)
    if np.dtype(source).kind == "f" and np.dtype(target).kind == "u":
        x = np.abs(x)  # negative float -> unsigned is undefined behaviour in C
    for opset in (6, 13, 19, 21):
        same("Cast", {"x": x}, opset, to=CODE[np.dtype(target)])


def test_float_specials() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 1e30, -0.0], dtype=np.float32)
    same("Cast", {"x": x}, 13, to=TensorProto.DOUBLE)
    same("Cast", {"x": x}, 13, to=TensorProto.FLOAT16)
    same("Cast", {"x": x}, 13, to=TensorProto.BOOL)  # NaN is nonzero: True


def test_integer_wraps() -> None:
    x = np.array([200, -200, 70000, 2**40 + 5, -1], dtype=np.int64)
    for to in (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT32):
        same("Cast", {"x": x}, 13, to=to)


def test_float_to_int_truncates() -> None:
    x = np.array([2.9, -2.9, 0.5, -0.5, 1e9], dtype=np.float32)
    same("Cast", {"x": x}, 13, to=TensorProto.INT32)
    same("Cast", {"x": x}, 13, to=TensorProto.INT64)


def test_cast1_takes_a_type_name() -> None:
    x = np.array([1.7, -2.2], dtype=np.float32)
    got = ours("Cast", {"x": x}, 1, to="INT32")
    assert got.dtype == np.int32 and got.tolist() == [1, -2]
    assert ours("Cast", {"x": x}, 1, to="double").dtype == np.float64


def test_bfloat16_round_trip() -> None:
    x = np.array([0.478925, 1.0 / 3.0, -7.1, np.inf, np.nan], dtype=np.float32)
    got = ours("Cast", {"x": x}, 13, to=TensorProto.BFLOAT16)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.view(np.uint16), x.astype(ml_dtypes.bfloat16).view(np.uint16))
    back = ours("Cast", {"x": got}, 13, to=TensorProto.FLOAT)
    np.testing.assert_array_equal(back, got.astype(np.float32))
    assert ours("Cast", {"x": got}, 13, to=TensorProto.INT32).tolist()[:3] == [0, 0, -7]


# strings ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source", [np.float32, np.float64, np.float16, np.int64, np.int8, np.uint32, np.bool_]
)
def test_numbers_to_strings_match_onnxruntime(source: type) -> None:
    if np.dtype(source).kind == "f":
        x = np.array([0.1, 1.0, -2.5, 1e20, 1e-7, np.nan, np.inf, -np.inf, 3.14159265, 1.2345678e8, -0.0])
        with np.errstate(over="ignore"):
            x = x.astype(source)
    else:
        x = _values(source)
    same("Cast", {"x": x}, 13, to=TensorProto.STRING)


@pytest.mark.parametrize(
    "target",
    [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.INT32,
     TensorProto.UINT8, TensorProto.UINT64, TensorProto.BOOL],
)  # fmt: skip
def test_strings_to_numbers_match_onnxruntime(target: int) -> None:
    if target in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16):
        texts = [
            "1.5",
            "-inf",
            "INF",
            "+INF",
            "NaN",
            "nan",
            "1e-5",
            "  3",
            "0x10",
            "3.7xyz",
            "-0",
            "infinity",
            ".5",
            "5.",
        ]
    else:
        texts = ["12", "-7", "3.7", "1e3", "+5", "0x10", " 9", "0"]
    x = np.array(texts, dtype=object)
    got, want = ours("Cast", {"x": x}, 13, to=target), theirs("Cast", {"x": x}, 13, to=target)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    if got.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_string_to_string() -> None:
    x = np.array(["a", "b"], dtype=object)
    assert ours("Cast", {"x": x}, 13, to=TensorProto.STRING).tolist() == ["a", "b"]
    unicode = cast(np.array(["x", "yz"]), to=TensorProto.STRING)
    assert unicode.dtype == object and unicode.tolist() == ["x", "yz"]
    assert cast(np.array([b"7", b"-2"]), to=TensorProto.INT32).tolist() == [7, -2]


# float8 and friends ------------------------------------------------------------------------------

F8_INPUT = np.array(
    [1e6, -1e6, np.inf, -np.inf, np.nan, -0.0, 0.0, 448, 464, 470, -500, 1e-9, 0.3, 57344, 61440, 1e-6],
    dtype=np.float32,
)


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("source", [np.float32, np.float16])
def test_float8e4m3fn_matches_onnxruntime_bitwise(saturate: int, source: type) -> None:
    with np.errstate(over="ignore"):
        x = F8_INPUT.astype(source)
    got = ours("Cast", {"x": x}, 21, to=TensorProto.FLOAT8E4M3FN, saturate=saturate)
    want = theirs("Cast", {"x": x}, 21, to=TensorProto.FLOAT8E4M3FN, saturate=saturate)
    assert got.dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(got.view(np.uint8), np.asarray(want).view(np.uint8))


@pytest.mark.parametrize(
    ("to", "dtype"),
    [
        (TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn),
        (TensorProto.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz),
        (TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2),
        (TensorProto.FLOAT8E5M2FNUZ, ml_dtypes.float8_e5m2fnuz),
    ],
)
def test_float8_tables_of_the_spec(to: int, dtype: Any) -> None:
    x = np.array([np.inf, -np.inf, 1e9, -1e9, np.nan, -0.0, 0.3], dtype=np.float32)
    top = float(ml_dtypes.finfo(dtype).max)
    sat = ours("Cast", {"x": x}, 19, to=to).astype(np.float32)
    np.testing.assert_array_equal(sat[:4], [top, -top, top, -top])
    assert np.isnan(sat[4])
    assert np.signbit(sat[5]) == (to in (TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2))
    free = ours("Cast", {"x": x}, 19, to=to, saturate=0).astype(np.float32)
    if to == TensorProto.FLOAT8E5M2:
        np.testing.assert_array_equal(free[:4], [np.inf, -np.inf, np.inf, -np.inf])
    else:
        assert np.isnan(free[:5]).all()


def _e8m0(values: list[float], **attrs: Any) -> list[float]:
    x = np.array(values, dtype=np.float32)
    got = ours("Cast", {"x": x}, 24, to=TensorProto.FLOAT8E8M0, **attrs)
    assert got.dtype == ml_dtypes.float8_e8m0fnu
    return got.astype(np.float32).tolist()


def test_float8e8m0_rounding_modes() -> None:
    values = [1.0, 1.5, 1.25, 1.75, 3.0, 0.124, 2.0**127 * 1.5]
    assert _e8m0(values) == [1.0, 2.0, 2.0, 2.0, 4.0, 0.125, 2.0**127]  # up, saturating
    assert _e8m0(values, round_mode="down") == [1.0, 1.0, 1.0, 1.0, 2.0, 0.0625, 2.0**127]
    assert _e8m0(values, round_mode="nearest") == [1.0, 2.0, 1.0, 2.0, 4.0, 0.125, 2.0**127]
    free = _e8m0([2.0**127 * 1.5, np.inf, np.nan], saturate=0)
    assert all(np.isnan(free))
    assert _e8m0([np.inf, np.nan])[0] == 2.0**127 and np.isnan(_e8m0([np.nan])[0])


def test_int4_and_float4() -> None:
    x = np.arange(-9, 16).astype(np.float32)
    got = ours("Cast", {"x": x}, 21, to=TensorProto.INT4)
    assert got.dtype == ml_dtypes.int4
    np.testing.assert_array_equal(got.astype(np.int8), x.astype(ml_dtypes.int4).astype(np.int8))
    back = ours("Cast", {"x": got}, 21, to=TensorProto.INT8)
    assert back.dtype == np.int8 and back.tolist() == got.astype(np.int8).tolist()
    f4 = ours("Cast", {"x": np.array([0.48, -3.5, 9.0, 0.01], np.float32)}, 23, to=TensorProto.FLOAT4E2M1)
    assert f4.astype(np.float32).tolist() == [0.5, -4.0, 6.0, 0.0]


# CastLike and BitCast ----------------------------------------------------------------------------


def test_castlike_matches_onnxruntime() -> None:
    x = np.array([1.7, -2.2, 300.0], dtype=np.float32)
    for like in (
        np.zeros(0, np.int32),
        np.zeros(2, np.float16),
        np.zeros((1, 1), np.uint8),
        np.zeros(0, bool),
    ):
        for opset in (15, 19, 21):
            same("CastLike", {"x": x, "like": like}, opset)


def test_bitcast() -> None:
    x = np.array([1.0, -2.5, np.inf], dtype=np.float32)
    got = ours("BitCast", {"x": x}, 26, to=TensorProto.INT32)
    np.testing.assert_array_equal(got, x.view(np.int32))
    assert ours("BitCast", {"x": np.array(1.0, np.float32)}, 26, to=TensorProto.UINT32).shape == ()
    flags = ours("BitCast", {"x": np.array([0, 1, 2], np.uint8)}, 26, to=TensorProto.BOOL)
    assert flags.tolist() == [False, True, True]
    nibbles = ours("BitCast", {"x": np.array([-1, 7, -8], ml_dtypes.int4)}, 26, to=TensorProto.UINT4)
    assert nibbles.astype(np.int32).tolist() == [15, 7, 8]
    half = ours("BitCast", {"x": np.array([1.0], np.float16)}, 26, to=TensorProto.BFLOAT16)
    assert half.view(np.uint16).tolist() == [0x3C00]
    with pytest.raises(SealtraceError):
        ours("BitCast", {"x": np.array([1, 2], ml_dtypes.int4)}, 26, to=TensorProto.UINT8)
    with pytest.raises(SealtraceError):
        ours("BitCast", {"x": x}, 26, to=TensorProto.INT64)
