"""Cast, CastLike and BitCast (default domain).

Numeric conversions follow ONNX's rules, which are C's: float to integer truncates, integer to
integer wraps, anything nonzero (NaN included) is True. Float8 targets saturate to the largest
finite value unless ``saturate=0``; float8e8m0 rounds with ``round_mode``. Strings convert the way
ONNX Runtime does (``%.8g`` for floats, ``strtod``/``strtoll``-style prefix parsing back).
bfloat16, float8, float4/6 and int4/int2 arrays are ml_dtypes arrays, as onnx's numpy_helper
produces them.

Every float conversion is one correct rounding (to nearest, ties to even) of the source's exact
value: NumPy's casts between its own types are; ml_dtypes' casts into bfloat16, float8, float6 and
float4 go through float32, which is exact from float16/float32/bfloat16/float8 but rounds a float64
or a large integer, so those are rounded here in one step. FLOAT8E8M0 applies ONNX's float32-bit
rule to the exact value.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import ml_dtypes
import numpy as np
import onnx

from sealtrace.ops import numerics
from sealtrace.ops.registry import quiet, register

Array = np.ndarray

_TP = onnx.TensorProto

# Bit widths where ml_dtypes stores a narrower type in one byte per element.
_NARROW_BITS: dict[np.dtype[Any], int] = {
    np.dtype(ml_dtypes.int4): 4,
    np.dtype(ml_dtypes.uint4): 4,
    np.dtype(ml_dtypes.float4_e2m1fn): 4,
    np.dtype(ml_dtypes.int2): 2,
    np.dtype(ml_dtypes.uint2): 2,
    np.dtype(ml_dtypes.float6_e2m3fn): 6,
    np.dtype(ml_dtypes.float6_e3m2fn): 6,
}

# float8 targets to which `saturate` applies: clamp to +-max (inf included) before rounding.
_SATURATING = {
    _TP.FLOAT8E4M3FN,
    _TP.FLOAT8E4M3FNUZ,
    _TP.FLOAT8E5M2,
    _TP.FLOAT8E5M2FNUZ,
}

_E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)


@functools.cache
def _np_dtype(code: int | str) -> np.dtype[Any]:
    """The NumPy dtype of an ONNX element type (Cast-1 names it by string)."""
    number = _TP.DataType.Value(code.upper()) if isinstance(code, str) else code
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(number))


def _is_ml_float(dtype: np.dtype[Any]) -> bool:
    """bfloat16, float8, float6 and float4 (ml_dtypes floats, NumPy kind 'V')."""
    return dtype.kind == "V" and dtype not in (
        np.dtype(ml_dtypes.int4),
        np.dtype(ml_dtypes.uint4),
        np.dtype(ml_dtypes.int2),
        np.dtype(ml_dtypes.uint2),
    )


def _bits(dtype: np.dtype[Any]) -> int:
    return _NARROW_BITS.get(dtype, dtype.itemsize * 8)


# --------------------------------------------------------------------------------------------
# strings


def _format_number(value: Any, kind: str) -> str:
    if kind == "b":
        return "1" if value else "0"
    if kind in "iu":
        return str(int(value))
    v = float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "-INF" if v < 0 else "INF"
    return "%.8g" % v  # noqa: UP031 - printf semantics are the point (ONNX Runtime prints this way)


def _to_strings(x: Array) -> Array:
    kind = x.dtype.kind
    source = x.astype(np.float32) if _is_ml_float(x.dtype) else x
    if kind == "V" and not _is_ml_float(x.dtype):
        source, kind = x.astype(np.int64), "i"
    elif _is_ml_float(x.dtype):
        kind = "f"
    out = np.empty(x.shape, dtype=object)
    flat_out = out.reshape(-1)
    for i, value in enumerate(source.reshape(-1).tolist()):
        flat_out[i] = _format_number(value, kind)
    return out


_FLOAT_PREFIX = re.compile(
    r"\s*([+-]?(?:inf(?:inity)?|nan(?:\([0-9a-z_]*\))?|0x(?:[0-9a-f]+\.?[0-9a-f]*|\.[0-9a-f]+)(?:p[+-]?\d+)?"
    r"|(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?))",
    re.IGNORECASE,
)
_INT_PREFIX = re.compile(r"\s*([+-]?\d+)")


def _parse_float(text: str) -> float:
    """strtod: the longest numeric prefix (decimal, hex, inf, nan) after leading white space."""
    match = _FLOAT_PREFIX.match(text)
    if match is None:
        raise ValueError(f"cannot cast string {text!r} to a number")
    token = match.group(1)
    if "x" in token.lower():
        return float.fromhex(token)
    if "(" in token:
        token = token[: token.index("(")]
    return float(token)


def _parse_int(text: str) -> int:
    """strtoll: the longest integer prefix after leading white space."""
    match = _INT_PREFIX.match(text)
    if match is None:
        raise ValueError(f"cannot cast string {text!r} to an integer")
    return int(match.group(1))


def _from_strings(x: Array, dtype: np.dtype[Any], saturate: int, round_mode: str) -> Array:
    texts = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in x.reshape(-1).tolist()]
    if dtype.kind in "iub":
        # integers wrap modulo 2**64 as strtoull/strtoll followed by a C cast do
        values = np.array([_parse_int(t) & 0xFFFFFFFFFFFFFFFF for t in texts], dtype=np.uint64)
        result = values.astype(bool) if dtype.kind == "b" else values.astype(dtype)
        return result.reshape(x.shape)
    # floats parse as double first, then round to the target (as stod + static_cast does)
    doubles = np.array([_parse_float(t) for t in texts], dtype=np.float64).reshape(x.shape)
    return _cast_numeric(doubles, dtype, saturate, round_mode)


# --------------------------------------------------------------------------------------------
# numbers


# Integers beyond this magnitude are not all exact in float64.
_EXACT_INTEGERS = 2**53


def _odd_float(value: int) -> float:
    """An integer as float64 rounded to odd (truncated to 53 bits, the last one set when bits were
    dropped): rounding that once more to a format of at most 51 bits gives the integer's own RN."""
    magnitude = abs(value)
    drop = max(magnitude.bit_length() - 53, 0)
    kept = magnitude >> drop
    if kept << drop != magnitude:
        kept |= 1
    return math.copysign(float(kept << drop), value)


def _exact_float64(x: Array) -> Array:
    """``x`` as float64 values from which one more rounding to a narrow format is correct: floats
    exactly, integers exactly up to 2**53 and rounded to odd beyond."""
    with np.errstate(invalid="ignore"):
        out = np.asarray(x.astype(np.float64))
    if x.dtype.kind in "iu" and x.size:
        flat_in, flat_out = x.reshape(-1), out.reshape(-1)
        big = np.flatnonzero((flat_in > _EXACT_INTEGERS) | (flat_in < -_EXACT_INTEGERS))
        for i in big.tolist():
            flat_out[i] = _odd_float(int(flat_in[i]))
    return out


def _is_narrow_float(dtype: np.dtype[Any]) -> bool:
    """bfloat16, float8 (not e8m0), float6 and float4: the ml_dtypes floats ml_dtypes rounds into
    through float32 (so a float64 or a large integer would be rounded twice)."""
    return dtype not in _NUMPY_NUMBERS and dtype != _E8M0 and (dtype.kind == "f" or _is_ml_float(dtype))


def _to_e8m0(x: Array, saturate: int, round_mode: str) -> Array:
    """float8e8m0 (a bare biased power-of-two exponent), as ONNX defines it on float32 bits (the
    exponent field, plus a carry from the fraction), applied to the exact value of ``x`` (a float64
    or an integer is not rounded to float32 first)."""
    value = _exact_float64(x)
    magnitude = np.abs(value)  # the sign is ignored (negative inputs are unspecified)
    fraction, power = np.frexp(magnitude)  # magnitude = fraction * 2**power, fraction in [0.5, 1)
    normal = magnitude >= 2.0**-126
    special = ~np.isfinite(value)
    exponent = np.where(normal, power.astype(np.int64) + 126, 0)
    if round_mode == "up":
        carry = np.where(normal, fraction != 0.5, magnitude > 0)
    elif round_mode == "down":
        carry = np.zeros(value.shape, dtype=bool)
    elif round_mode == "nearest":
        # round to nearest, ties up: the first fraction bit decides (below 2**-126 too)
        carry = np.where(normal, fraction >= 0.75, magnitude >= 2.0**-127)
    else:
        raise ValueError(f"Cast round_mode must be 'up', 'down' or 'nearest', got {round_mode!r}")
    exponent = np.where(special, 0xFF, exponent + carry)
    if saturate:
        exponent = np.where(~special & (exponent > 0xFE), 0xFE, exponent)
        exponent = np.where(special & ~np.isnan(value), 0xFE, exponent)  # +-inf -> E8M0_MAX
    exponent = np.where(exponent > 0xFF, 0xFF, exponent)
    return exponent.astype(np.uint8).view(_E8M0)


# NumPy's own number types (ml_dtypes' bfloat16 and float8 types report kind 'f' or 'V' too).
_NUMPY_NUMBERS = frozenset(
    np.dtype(t)
    for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
              np.float16, np.float32, np.float64)
)


def _cast_numeric(x: Array, dtype: np.dtype[Any], saturate: int, round_mode: str) -> Array:
    if x.dtype == dtype:
        return x  # kernels never write their inputs, so no copy is needed
    if x.dtype in _NUMPY_NUMBERS and dtype in _NUMPY_NUMBERS and dtype.kind != "b":
        # NumPy's own types both ways (the common case, and the cheap one to recognize): no
        # saturation or rounding mode applies, astype is the ONNX cast, but for a float that no
        # integer of the type holds
        if x.dtype.kind == "f" and dtype.kind in "iu":
            return _float_to_integer(x, dtype)
        return x.astype(dtype)
    code = onnx.helper.np_dtype_to_tensor_dtype(dtype)
    if code == getattr(_TP, "FLOAT8E8M0", None):  # (onnx 1.17, which the package accepts, has no E8M0)
        return _to_e8m0(x, saturate, round_mode)
    if _is_ml_float(x.dtype) and dtype.kind != "f":
        # ml_dtypes' own casts to integers, bool and each other go through float32 (exact)
        x = x.astype(np.float32)
    elif x.dtype.kind == "V" and not _is_ml_float(x.dtype):  # int4/int2 widen exactly to int8/uint8
        x = x.astype(np.int8 if x.dtype in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.int2)) else np.uint8)
    # ml_dtypes rounds into its narrow floats through float32: from float64 or a large integer that
    # would round twice, so those are rounded here, once (float16 and float32 sources are exact in
    # float32 and keep ml_dtypes' single rounding).
    round_once = _is_narrow_float(dtype) and (x.dtype == np.float64 or x.dtype.kind in "iu")
    if round_once:
        x = _exact_float64(x)
    if code in _SATURATING and saturate:
        limit = float(ml_dtypes.finfo(dtype).max)
        if x.dtype.kind != "f":
            x = x.astype(np.float64)
        # clamping before rounding gives the same as rounding then clamping: values between max
        # and the next representable magnitude round down to max anyway; NaN passes through
        x = np.clip(x, x.dtype.type(-limit), x.dtype.type(limit))
    if dtype.kind == "b":
        return np.asarray(x != 0)
    if round_once:
        return numerics.round_to_narrow(x, dtype)
    if x.dtype.kind == "f" and dtype.kind in "iu":
        return _float_to_integer(x, dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(dtype)


def _float_to_integer(x: Array, dtype: np.dtype[Any]) -> Array:
    """Floats to an integer type (docs/numerics.md, Cast): truncation toward zero, then reduction
    modulo 2**bits into the type (two's complement, as ONNX Runtime's cast gives on x86-64: -2.2 to
    uint8 is 254, 300.0 is 44); NaN, infinities and magnitudes of 2**63 or more give -2**63 reduced
    the same way (x86-64's "integer indefinite"), but uint64 takes every value in [0, 2**64) exactly.
    ONNX leaves these casts undefined and CPUs differ (Arm saturates), so the rule is spelled out
    here rather than left to the CPU's conversion instruction."""
    with np.errstate(invalid="ignore", over="ignore"):
        t = np.trunc(x)
        inside = (t >= -(2.0**63)) & (t < 2.0**63)  # NaN: False
        if dtype == np.uint64:
            high = (t >= 2.0**63) & (t < 2.0**64)
            if high.any():
                out = np.where(inside, t, -(2.0**63)).astype(np.int64).astype(np.uint64)
                out[high] = t[high].astype(np.uint64)
                return out
        if inside.all():
            return t.astype(np.int64).astype(dtype)
        return np.where(inside, t, -(2.0**63)).astype(np.int64).astype(dtype)


def _cast(x: Array, dtype: np.dtype[Any], saturate: int, round_mode: str) -> Array:
    if dtype.kind == "O":
        if x.dtype.kind == "O":
            return x
        if x.dtype.kind in "US":
            texts = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in x.reshape(-1).tolist()]
            return np.array(texts, dtype=object).reshape(x.shape)
        return _to_strings(x)
    if x.dtype.kind in "OUS":
        return _from_strings(x, dtype, saturate, round_mode)
    return _cast_numeric(x, dtype, saturate, round_mode)


@register("Cast", 1, 6, 9, 13, 19, 21, 23, 24, 25, 28)
@quiet
def cast(x: Array, *, to: int | str, saturate: int = 1, round_mode: str = "up") -> Array:
    """ONNX Cast (every version: `to` is a type name in 1, saturate from 19, round_mode from 24)."""
    return _cast(x, _np_dtype(to), saturate, round_mode)


@register("CastLike", 15, 19, 21, 23, 24, 25)
@quiet
def cast_like(x: Array, target_type: Array, *, saturate: int = 1, round_mode: str = "up") -> Array:
    """ONNX CastLike (15 .. 25): Cast to the element type of the second input."""
    return _cast(x, target_type.dtype, saturate, round_mode)


@register("BitCast", 26)
def bitcast(x: Array, *, to: int) -> Array:
    """ONNX BitCast 26: reinterpret the bits of each element as another type of one width."""
    dtype = _np_dtype(to)
    if dtype.kind == "O" or x.dtype.kind in "OUS":
        raise ValueError("BitCast does not take strings")
    if _bits(dtype) != _bits(x.dtype):
        raise ValueError(f"BitCast needs types of one bit width, got {x.dtype} and {dtype}")
    if dtype.kind == "b":
        # bool is one byte; any nonzero byte reads as True
        return np.asarray(np.array(x, order="C").view(np.uint8) != 0)
    # ml_dtypes keeps narrow types in the low bits of a byte, so a view reinterprets them too
    return np.array(x, order="C").view(dtype)
