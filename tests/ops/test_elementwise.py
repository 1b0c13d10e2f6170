"""Elementwise math, comparison, logic and Clip kernels against onnxruntime (and the spec where ORT
has no kernel): legacy broadcast attributes, integer division, mixed-type Pow, Mod, NaN handling,
dtype preservation, 0-d and empty tensors."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import sealtrace
from sealtrace.ops.elementwise import erf_op as erf
from tests.conftest import make_model


def _model(op: str, feeds: dict[str, np.ndarray | None], opset: int, **attrs: Any) -> onnx.ModelProto:
    inputs = [name if value is not None else "" for name, value in feeds.items()]
    while inputs and not inputs[-1]:
        inputs.pop()
    node = helper.make_node(op, inputs, ["out"], **attrs)
    return make_model(
        [node],
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in feeds.items()
            if v is not None
        ],
        [onnx.ValueInfoProto(name="out")],
        opset=opset,
    )


def ours(op: str, feeds: dict[str, np.ndarray | None], opset: int = 17, **attrs: Any) -> np.ndarray:
    model = _model(op, feeds, opset, **attrs)
    given = {k: v for k, v in feeds.items() if v is not None}
    with np.errstate(all="ignore"):
        return sealtrace.Session(model).run(None, given)[0]


def theirs(op: str, feeds: dict[str, np.ndarray | None], opset: int = 17, **attrs: Any) -> np.ndarray:
    model = _model(op, feeds, opset, **attrs)
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {k: v for k, v in feeds.items() if v is not None})[0]


def same(
    op: str, feeds: dict[str, np.ndarray | None], opset: int = 17, rtol: float = 0.0, **attrs: Any
) -> None:
    """Our output equals onnxruntime's in dtype, shape and value (NaN where NaN)."""
    got = ours(op, feeds, opset, **attrs)
    want = theirs(op, feeds, opset, **attrs)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=0)


RNG = np.random.default_rng(7)
F32 = RNG.standard_normal((2, 3, 4)).astype(np.float32)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_arithmetic_matches_onnxruntime_with_broadcasting(op: str) -> None:
    b = RNG.standard_normal((3, 1)).astype(np.float32) + 3
    for opset in (7, 13, 14):
        same(op, {"a": F32, "b": b}, opset)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_legacy_broadcast_with_axis(op: str) -> None:
    b = RNG.standard_normal((3,)).astype(np.float32) + 3
    fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op]
    got = ours(op, {"a": F32, "b": b}, 6, broadcast=1, axis=1)
    np.testing.assert_array_equal(got, fn(F32, b.reshape(3, 1)))
    # no axis: B aligns with A's trailing axes
    c = RNG.standard_normal((4,)).astype(np.float32) + 3
    np.testing.assert_array_equal(ours(op, {"a": F32, "b": c}, 1, broadcast=1), fn(F32, c))
    assert ours(op, {"a": F32, "b": c}, 1, broadcast=1).dtype == np.float32


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint16])
def test_integer_division_truncates_toward_zero(dtype: type) -> None:
    info = np.iinfo(dtype)
    if info.min == 0:
        a = np.array([7, 0, 6, 1, info.max], dtype=dtype)
        b = np.array([2, 3, 4, 1, 7], dtype=dtype)
    else:
        a = np.array([7, -7, 7, -7, 0, 6, -6, 1, info.max, info.min], dtype=dtype)
        b = np.array([2, 2, -2, -2, 3, -4, 4, -1, 7, 3], dtype=dtype)
    same("Div", {"a": a, "b": b}, 14)


def test_integer_arithmetic_wraps_and_keeps_type() -> None:
    a = np.array([120, -120, 100], dtype=np.int8)
    b = np.array([10, -10, 100], dtype=np.int8)
    for op in ("Add", "Sub", "Mul"):
        same(op, {"a": a, "b": b}, 14)


@pytest.mark.parametrize(
    ("base", "exponent"),
    [
        (np.float32, np.float32),
        (np.float32, np.int64),
        (np.float32, np.int32),
        (np.int32, np.int32),
        (np.int64, np.int64),
        (np.int64, np.float32),
        (np.float64, np.float32),
    ],
)
def test_pow_mixed_types(base: type, exponent: type) -> None:
    x = np.array([[1, 2, 3], [4, 5, 6]]).astype(base)
    y = np.array([2, 3, 0]).astype(exponent)
    same("Pow", {"x": x, "y": y}, 15, rtol=1e-6)


def test_pow_keeps_the_wider_exponent() -> None:
    x = np.array([2.0, 3.0, 10.0], dtype=np.float32)
    got = ours("Pow", {"x": x, "y": np.array([0.1, 1 / 3, -0.7], np.float64)}, 15)
    want = np.power(x.astype(np.float64), [0.1, 1 / 3, -0.7]).astype(np.float32)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    half = ours("Pow", {"x": x.astype(np.float16), "y": np.array(0.1, np.float32)}, 15)
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, np.power(x, np.float32(0.1)).astype(np.float16))


def test_pow_square_and_fractional() -> None:
    x = np.abs(F32) + 0.5
    same("Pow", {"x": x, "y": np.array(2.0, np.float32)}, 15, rtol=1e-7)
    same("Pow", {"x": x, "y": np.array(0.5, np.float32)}, 15, rtol=1e-7)
    signed = F32 * 10
    # ONNX Runtime computes x*x*x (two roundings); ours is the correctly rounded cube
    # (docs/numerics.md), within one float32 rounding of it
    cube = ours("Pow", {"x": signed, "y": np.array(3.0, np.float32)}, 15)
    np.testing.assert_allclose(cube, theirs("Pow", {"x": signed, "y": np.array(3.0, np.float32)}, 15), rtol=2.4e-7)
    exact = [float(Fraction(float(v)) ** 3) for v in signed.reshape(-1)]  # RN64 of the exact cube,
    assert cube.reshape(-1).tolist() == [float(np.float32(v)) for v in exact]  # then RN32 (no tie here)
    same("Pow", {"x": signed, "y": np.array([2.0], np.float32)}, 15)
    same("Pow", {"x": x, "y": np.array(-1.5, np.float32)}, 15, rtol=1e-6)


@pytest.mark.parametrize(
    ("fmod", "dtype"), [(0, np.int32), (0, np.int64), (1, np.int32), (1, np.int64), (1, np.float32)]
)
def test_mod(fmod: int, dtype: type) -> None:
    a = np.array([-4, 7, 5, 4, -7, 8, -3, 3], dtype=dtype)
    b = np.array([2, -3, 8, -2, 3, 5, 5, -5], dtype=dtype)
    same("Mod", {"a": a, "b": b}, 13, fmod=fmod)


def test_mod28_float_floor_semantics() -> None:
    a = np.array([5.5, -5.5, 0.0, -0.0, np.inf, 3.0, 3.0, -3.0, np.nan], dtype=np.float32)
    b = np.array([2.0, 2.0, -3.0, 3.0, 2.0, 0.0, -np.inf, np.inf, 1.0], dtype=np.float32)
    got = ours("Mod", {"a": a, "b": b}, 28, fmod=0)
    want = np.array([1.5, 0.5, -0.0, 0.0, np.nan, np.nan, -np.inf, np.inf, np.nan], dtype=np.float32)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got[2:4]), [True, False])


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic_broadcasting(op: str) -> None:
    feeds = {
        "a": RNG.standard_normal((2, 1, 4)).astype(np.float32),
        "b": RNG.standard_normal((3, 1)).astype(np.float32),
        "c": RNG.standard_normal((4,)).astype(np.float32),
    }
    same(op, feeds, 13, rtol=1e-6)
    same(op, {"a": feeds["a"]}, 13)


def test_max_min_propagate_nan() -> None:
    a = np.array([1.0, np.nan, 3.0], dtype=np.float32)
    b = np.array([np.nan, 2.0, 1.0], dtype=np.float32)
    for op in ("Max", "Min"):
        got = ours(op, {"a": a, "b": b}, 13)
        assert np.isnan(got[:2]).all() and got[2] == (3.0 if op == "Max" else 1.0)


def test_variadic_legacy_versions_keep_integer_types() -> None:
    a = np.array([1, 5, -3], dtype=np.int32)
    b = np.array([4, 2, -8], dtype=np.int32)
    for op in ("Max", "Min"):
        same(op, {"a": a, "b": b}, 12)
    a16 = a.astype(np.float16)
    assert ours("Sum", {"a": a16, "b": a16}, 6).dtype == np.float16
    assert ours("Mean", {"a": a16, "b": a16}, 8).dtype == np.float16


@pytest.mark.parametrize("op", ["Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8, np.uint32])
def test_comparisons(op: str, dtype: type) -> None:
    a = np.array([[1, 2, 3], [3, 2, 1]], dtype=dtype)
    b = np.array([2, 2, 2], dtype=dtype)
    same(op, {"a": a, "b": b}, 16)


def test_equal_on_strings() -> None:
    a = np.array(["ab", "cd", ""], dtype=object)
    b = np.array(["ab", "ce", ""], dtype=object)
    got = ours("Equal", {"a": a, "b": b}, 19)
    assert got.dtype == bool and got.tolist() == [True, False, True]


def test_legacy_comparison_and_logic_broadcast() -> None:
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    b = RNG.standard_normal((3,)).astype(np.float32)
    got = ours("Greater", {"a": a, "b": b}, 1, broadcast=1, axis=1)
    np.testing.assert_array_equal(got, a > b.reshape(3, 1))
    p = RNG.random((2, 3, 4)) > 0.5
    q = RNG.random((2, 3)) > 0.5
    got = ours("And", {"a": p, "b": q}, 1, broadcast=1, axis=0)
    np.testing.assert_array_equal(got, p & q[:, :, None])


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(op: str) -> None:
    a = RNG.random((3, 4)) > 0.5
    b = RNG.random((4,)) > 0.5
    same(op, {"a": a, "b": b}, 7)
    same("Not", {"a": a}, 1)


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise(op: str) -> None:
    a = np.array([0b1100, -1, 7], dtype=np.int32)
    b = np.array([0b1010, 5, -8], dtype=np.int32)
    same(op, {"a": a, "b": b}, 18)
    same("BitwiseNot", {"a": a}, 18)


def test_bitshift() -> None:
    x = np.array([16, 4, 1, 255], dtype=np.uint8)
    y = np.array([1, 2, 3, 9], dtype=np.uint8)
    same("BitShift", {"x": x, "y": y}, 11, direction="RIGHT")
    same("BitShift", {"x": x, "y": y}, 11, direction="LEFT")


def test_bitshift28_signed_rules() -> None:
    x = np.array([-16, -16, 16, -1, 64, -3], dtype=np.int8)
    y = np.array([2, 9, 9, -1, 2, 8], dtype=np.int8)
    right = ours("BitShift", {"x": x, "y": y}, 28, direction="RIGHT")
    np.testing.assert_array_equal(right, np.array([-4, -1, 0, -1, 16, -1], dtype=np.int8))
    left = ours("BitShift", {"x": x, "y": y}, 28, direction="LEFT")
    np.testing.assert_array_equal(left, np.array([-64, 0, 0, 0, 0, 0], dtype=np.int8))


UNARY_FLOAT = [
    ("Abs", 13), ("Neg", 13), ("Exp", 13), ("Log", 13), ("Sqrt", 13), ("Reciprocal", 13),
    ("Floor", 13), ("Ceil", 13), ("Round", 11), ("Sign", 13), ("Sin", 7), ("Cos", 7), ("Tan", 7),
    ("Asin", 7), ("Acos", 7), ("Atan", 7), ("Sinh", 9), ("Cosh", 9), ("Asinh", 9), ("Acosh", 9),
    ("Atanh", 9), ("Erf", 13),
]  # fmt: skip


ORT_FLOAT64 = {
    "Abs",
    "Neg",
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Sin",
    "Cos",
}
MATH_NAMES = {
    "Asin": "asin",
    "Acos": "acos",
    "Atan": "atan",
    "Asinh": "asinh",
    "Acosh": "acosh",
    "Atanh": "atanh",
}


@pytest.mark.parametrize(("op", "opset"), UNARY_FLOAT)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_math(op: str, opset: int, dtype: type) -> None:
    x = np.array([-2.5, -1.5, -0.5, -0.25, 0.0, 0.25, 0.5, 0.9, 1.5, 2.5, 3.0], dtype=dtype)
    if op in ("Log", "Sqrt", "Acosh"):
        x = np.abs(x) + 1
    if op in ("Asin", "Acos", "Atanh"):
        x = x / 4
    if dtype == np.float32 or op in ORT_FLOAT64:
        same(op, {"x": x}, opset, rtol=2e-7 if dtype == np.float32 else 1e-15)
        return
    # onnxruntime has no double kernel for this op: compare with Python's math module
    want = np.array([getattr(math, MATH_NAMES.get(op, op.lower()))(v) for v in x.tolist()])
    got = ours(op, {"x": x}, opset)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-15)


@pytest.mark.parametrize("op", ["Abs", "Neg", "Sqrt", "Exp", "Floor", "Sigmoid", "Relu"])
def test_unary_keeps_float16(op: str) -> None:
    x = np.array([0.5, 1.5, 2.25], dtype=np.float16)
    assert ours(op, {"x": x}, 13).dtype == np.float16


def test_abs_neg_sign_on_integers() -> None:
    x = np.array([-128, -5, 0, 7, 127], dtype=np.int8)
    for op in ("Abs", "Neg", "Sign"):
        same(op, {"x": x}, 13)


def test_round_is_half_to_even() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, 2.6], dtype=np.float32)
    np.testing.assert_array_equal(ours("Round", {"x": x}, 22), [0, 2, 2, -0, -2, -2, 2, 3])
    same("Round", {"x": x}, 11)


def test_erf_accuracy_against_math_erf() -> None:
    x = np.concatenate([np.linspace(-7, 7, 20001), [0.0, -0.0, 1e-300, 0.84375, 1.25, 2.857, 6.0]])
    got = erf(x)
    want = np.array([math.erf(v) for v in x])
    ulps = np.abs(got - want) / np.spacing(np.maximum(np.abs(want), 1e-300))
    assert ulps.max() <= 1.0
    special = erf(np.array([np.inf, -np.inf, np.nan, -0.0]))
    assert special[0] == 1 and special[1] == -1 and np.isnan(special[2]) and np.signbit(special[3])
    assert erf(np.float32([0.5])).dtype == np.float32
    # float32: a branch-free rational approximation, within 2 ulp of the correctly rounded value
    x32 = np.concatenate([np.linspace(-7, 7, 20001), np.geomspace(1e-38, 1, 500)]).astype(np.float32)
    want32 = np.array([math.erf(v) for v in x32.astype(np.float64)]).astype(np.float32)
    ulps32 = np.abs(erf(x32).astype(np.float64) - want32) / np.spacing(np.abs(want32)).astype(np.float64)
    assert ulps32.max() <= 2.0


def test_erf_in_blocks_gives_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    from sealtrace.ops.numerics import functions

    x = np.random.default_rng(3).standard_normal((7, 9, 11)).astype(np.float32).transpose(2, 0, 1)
    whole = erf(np.ascontiguousarray(x))
    monkeypatch.setattr(functions, "BLOCK", 100)  # uneven blocks of a strided input
    blocked = erf(x)
    assert blocked.shape == x.shape and blocked.tobytes() == np.ascontiguousarray(whole).tobytes()


def test_isnan_isinf() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -1.0], dtype=np.float32)
    same("IsNaN", {"x": x}, 13)
    same("IsInf", {"x": x}, 10)
    same("IsInf", {"x": x}, 10, detect_negative=0)
    same("IsInf", {"x": x}, 10, detect_positive=0)
    assert not ours("IsInf", {"x": x}, 20, detect_positive=0, detect_negative=0).any()


def test_where_broadcasts_and_keeps_type() -> None:
    condition = RNG.random((2, 1, 4)) > 0.5
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    y = np.array(-1, dtype=np.int64)
    same("Where", {"c": condition, "x": x, "y": y}, 16)
    strings = ours("Where", {"c": np.array([True, False]), "x": np.array(["a", "b"], dtype=object),
                             "y": np.array(["c", "d"], dtype=object)}, 16)  # fmt: skip
    assert strings.tolist() == ["a", "d"]


def test_clip_versions() -> None:
    x = np.array([-3.0, -1.0, 0.0, 0.5, 2.0, np.nan], dtype=np.float32)
    lo, hi = np.array(-1.5, np.float32), np.array(1.0, np.float32)
    same("Clip", {"x": x, "min": lo, "max": hi}, 13)
    same("Clip", {"x": x, "min": None, "max": hi}, 11)
    same("Clip", {"x": x, "min": lo}, 12)
    same("Clip", {"x": x}, 13)
    same("Clip", {"x": x, "min": hi, "max": lo}, 13)  # min > max: everything becomes max
    xi = np.array([-300, -3, 0, 5, 900], dtype=np.int32)
    same("Clip", {"x": xi, "min": np.array(-5, np.int32), "max": np.array(7, np.int32)}, 12)
    np.testing.assert_array_equal(ours("Clip", {"x": x[:5]}, 6, min=-1.5, max=1.0), [-1.5, -1, 0, 0.5, 1])
    np.testing.assert_array_equal(ours("Clip", {"x": x[:5]}, 6, max=0.25), [-3, -1, 0, 0.25, 0.25])
    np.testing.assert_array_equal(ours("Clip", {"x": x[:5]}, 1, min=-1.0), [-1, -1, 0, 0.5, 2])
    assert ours("Clip", {"x": x.astype(np.float16)}, 6, min=-1.0).dtype == np.float16
    bf16 = x.astype(ml_dtypes.bfloat16)
    got = ours("Clip", {"x": bf16, "min": lo.astype(bf16.dtype), "max": hi.astype(bf16.dtype)}, 13)
    assert got.dtype == bf16.dtype
    np.testing.assert_array_equal(got.astype(np.float32), np.clip(x, lo, hi))


def test_scalars_and_empty_tensors() -> None:
    s = np.array(2.0, dtype=np.float32)
    for op in ("Add", "Mul", "Pow", "Div"):
        got = ours(op, {"a": s, "b": s}, 14 if op != "Pow" else 15)
        assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == np.float32
    empty = np.zeros((0, 3), dtype=np.float32)
    assert ours("Add", {"a": empty, "b": np.ones(3, np.float32)}, 14).shape == (0, 3)
    assert ours("Sum", {"a": empty, "b": empty, "c": empty}, 13).shape == (0, 3)
    assert ours("Clip", {"x": empty, "min": np.array(0, np.float32)}, 13).shape == (0, 3)


def test_inputs_are_not_modified() -> None:
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    b, c = a.copy(), a.copy()
    before = a.copy()
    ours("Sum", {"a": a, "b": b, "c": c}, 13)
    ours("Mean", {"a": a, "b": b}, 13)
    ours("Clip", {"x": a, "min": np.array(0, np.float32)}, 13)
    np.testing.assert_array_equal(a, before)
