"""The floating-point formats the reference computes in, and correct rounding into them.

A format is what docs/numerics.md calls a type: its precision and exponent range decide every
rounding. ``round_to`` rounds float64 values to a format, to nearest with ties to even (RN), as
IEEE 754 defines it. Where NumPy's own cast is that rounding on every CPU (the hardware conversion to
float32, NumPy's software or F16C conversion to float16) it is used; bfloat16 is rounded here, since
ml_dtypes converts a float64 through float32 and so rounds twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import gmpy2
import ml_dtypes
import numpy as np

Array = np.ndarray[Any, Any]

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: ``precision`` significand bits (the leading one included),
    normal numbers in [2**emin_normal, 2**(emax + 1)), subnormals below, down to
    2**(emin_normal - precision + 1)."""

    name: str
    dtype: np.dtype[Any]
    precision: int
    emin_normal: int
    emax: int
    # The unsigned integer of the same width: comparing bits tells -0 from +0 and NaNs apart.
    bits: np.dtype[Any] = field(compare=False)

    @property
    def smallest_subnormal_exponent(self) -> int:
        return self.emin_normal - self.precision + 1

    @cached_property
    def largest(self) -> float:
        """The largest finite value."""
        return float((2.0 - 2.0 ** (1 - self.precision)) * 2.0**self.emax)

    @cached_property
    def canonical_nan(self) -> Any:
        """The one NaN every numerics primitive writes: sign 0, quiet bit set, payload 0."""
        infinity = np.array(np.inf, dtype=self.dtype).view(self.bits)
        quiet = infinity | self.bits.type(1 << (self.precision - 2))  # NumPy 1.26: no Python int here
        return np.asarray(quiet, dtype=self.bits).view(self.dtype)[()]

    @cached_property
    def context(self) -> Any:
        """The gmpy2 (MPFR) context whose operations round exactly as this format does: the exact
        fallback of every primitive computes there (``emin``/``emax`` in MPFR's convention, with
        the significand in [1/2, 1))."""
        return gmpy2.context(
            precision=self.precision,
            emin=self.smallest_subnormal_exponent + 1,
            emax=self.emax + 1,
            subnormalize=True,
            round=gmpy2.RoundToNearest,
        )


FLOAT16 = FloatFormat("float16", np.dtype(np.float16), 11, -14, 15, np.dtype(np.uint16))
BFLOAT16 = FloatFormat("bfloat16", _BFLOAT16, 8, -126, 127, np.dtype(np.uint16))
FLOAT32 = FloatFormat("float32", np.dtype(np.float32), 24, -126, 127, np.dtype(np.uint32))
FLOAT64 = FloatFormat("float64", np.dtype(np.float64), 53, -1022, 1023, np.dtype(np.uint64))

_FORMATS = {f.dtype: f for f in (FLOAT16, BFLOAT16, FLOAT32, FLOAT64)}


def format_of(dtype: np.dtype[Any]) -> FloatFormat | None:
    """The format of a float dtype the numerics define (float16, bfloat16, float32, float64);
    None for every other dtype (integers, bool, strings, the float8 and float4 types)."""
    return _FORMATS.get(dtype)


def is_float(dtype: np.dtype[Any]) -> bool:
    """True for IEEE-like floats, ml_dtypes' bfloat16 included."""
    return dtype.kind == "f" or dtype == _BFLOAT16


def exact_in_float64(fmt: FloatFormat) -> bool:
    """Whether a product of two values of ``fmt`` is exact in float64 (2 * precision <= 53)."""
    return 2 * fmt.precision <= 53


def round_to(y: Array, fmt: FloatFormat) -> Array:
    """``y`` (float64) rounded to nearest, ties to even, into ``fmt``: a new array."""
    if fmt is FLOAT64:
        return np.array(y, dtype=np.float64)
    if fmt is BFLOAT16:
        return round_to_narrow(y, fmt.dtype)
    with np.errstate(over="ignore"):
        return np.asarray(y, dtype=np.float64).astype(fmt.dtype)


def round_to_narrow(y: Array, dtype: np.dtype[Any]) -> Array:
    """float64 ``y`` rounded once (to nearest, ties to even) into an ml_dtypes float ``dtype``
    (bfloat16, the float8, float6 and float4 types), where ml_dtypes' own cast of a float64 goes
    through float32 and so rounds twice: scale the quantum of y's binade to 1, rint, scale back
    (each step exact in float64), then cast the value, which is now one of dtype's; a value beyond
    dtype's largest overflows as ml_dtypes' cast of it does (infinity, NaN, or saturation for the
    types without either)."""
    info = ml_dtypes.finfo(dtype)
    y = np.asarray(y, dtype=np.float64)
    _, exponent = np.frexp(y)  # |y| in [2**(e-1), 2**e)
    quantum = np.maximum(exponent - 1, info.minexp) - info.nmant
    with np.errstate(invalid="ignore", over="ignore"):
        rounded = np.copysign(np.ldexp(np.rint(np.ldexp(y, -quantum)), quantum), y)
        return rounded.astype(dtype)


def canonical_nans(out: Array, fmt: FloatFormat) -> Array:
    """``out`` with every NaN replaced by the format's canonical NaN (in place when it is writable)."""
    nan = np.isnan(out)
    if nan.any():
        if not out.flags.writeable:
            out = out.copy()
        out[nan] = fmt.canonical_nan
    return out


def bits_of(values: Array, fmt: FloatFormat) -> Array:
    """The raw bits of ``values`` (an array of ``fmt``), as unsigned integers."""
    return values.view(fmt.bits)


def canonical_nan_value(value: Any) -> Any:
    """A step's output with every NaN of a float tensor made the canonical NaN (docs/numerics.md,
    "NaN"): ``value`` itself when it has none or only canonical ones, else a copy. IEEE 754 leaves
    the sign and payload of a NaN result unspecified, and CPUs differ (x86's default NaN has its
    sign bit set, Arm's does not). Sequences (lists) are handled element by element."""
    if type(value) is list:
        return [canonical_nan_value(v) for v in value]
    if type(value) is not np.ndarray or value.size == 0:
        return value
    fmt = _FORMATS.get(value.dtype)
    if fmt is None:
        return value
    with np.errstate(invalid="ignore"):
        if not np.isnan(np.max(value)):
            return value
    nan = np.isnan(value)
    canonical = np.asarray(fmt.canonical_nan, dtype=fmt.dtype).view(fmt.bits)
    if (value.view(fmt.bits)[nan] == canonical).all():
        return value
    out = value.copy()
    out[nan] = fmt.canonical_nan
    return out
