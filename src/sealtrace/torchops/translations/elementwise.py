"""Elementwise arithmetic, comparison, logic and math: torch translations.

Opset < 7 binary operators broadcast with ``broadcast``/``axis`` attributes; :func:`_legacy`
reshapes B so torch's NumPy-style broadcasting matches the legacy rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from sealtrace.torchops.registry import (
    DirectCall,
    StepInput,
    reference_versions,
    register,
    specializes,
    static_array,
)


def _legacy(b: torch.Tensor, a: torch.Tensor, broadcast: int | None, axis: int | None) -> torch.Tensor:
    if not broadcast or axis is None or b.dim() == 0:
        return b
    if axis < 0:
        axis += a.dim()
    trailing = a.dim() - axis - b.dim()
    return b.reshape([*b.shape, *([1] * trailing)]) if trailing > 0 else b


# torch implements few kernels for uint16/32/64: compute those in int64 and cast back (exact for
# uint16/uint32 and for uint64 values below 2**63).
_UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)


def widened(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``fn`` applied to int64 copies of unsigned inputs, its integer result cast back."""

    def apply(*xs: torch.Tensor) -> torch.Tensor:
        original = xs[0].dtype
        if original not in _UNSIGNED:
            return fn(*xs)
        result = fn(*(x.to(torch.int64) for x in xs))
        return result.to(original) if result.dtype == torch.int64 else result

    return apply


def _binary(op_type: str, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    wide = widened(fn)

    def translate(a: torch.Tensor, b: torch.Tensor, broadcast: int | None = None, axis: int | None = None,
                  **_: Any) -> torch.Tensor:
        return wide(a, _legacy(b, a, broadcast, axis))

    translate.__name__ = translate.__qualname__ = op_type.lower()
    register(op_type, *reference_versions(op_type))(translate)


def _float_operands(attrs: dict[str, Any], inputs: list[StepInput]) -> bool:
    """Whether every input is a floating-point tensor (known so at conversion time) and no legacy
    broadcast attribute applies: the plain torch function then computes what the translation does."""
    return not attrs.get("broadcast") and all(i.present and i.dtype is not None and i.dtype.is_floating_point
                                              for i in inputs)


def _direct(op_type: str, fn: Callable[..., torch.Tensor]) -> None:
    def specializer(attrs: dict[str, Any], inputs: list[StepInput]) -> DirectCall | None:
        return DirectCall(fn, tuple(range(len(inputs))), {}) if _float_operands(attrs, inputs) else None

    specializes(op_type, *reference_versions(op_type))(specializer)


def _div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.is_floating_point() or a.is_complex():
        return torch.div(a, b)
    return torch.div(a, b, rounding_mode="trunc")  # C semantics, as ONNX Runtime computes integer Div


_binary("Add", torch.add)
_binary("Sub", torch.sub)
_binary("Mul", torch.mul)
_binary("Div", _div)
_binary("Equal", torch.eq)
_binary("Greater", torch.gt)
_binary("Less", torch.lt)
_binary("GreaterOrEqual", torch.ge)
_binary("LessOrEqual", torch.le)
_binary("And", torch.logical_and)
_binary("Or", torch.logical_or)
_binary("Xor", torch.logical_xor)
_binary("BitwiseAnd", torch.bitwise_and)
_binary("BitwiseOr", torch.bitwise_or)
_binary("BitwiseXor", torch.bitwise_xor)
for _name, _function in (("Add", torch.add), ("Sub", torch.sub), ("Mul", torch.mul), ("Div", torch.div)):
    _direct(_name, _function)


def _unary(op_type: str, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    wide = widened(fn)

    def translate(x: torch.Tensor, **_: Any) -> torch.Tensor:
        return wide(x)

    translate.__name__ = translate.__qualname__ = op_type.lower()
    register(op_type, *reference_versions(op_type))(translate)


_UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "Abs": torch.abs, "Neg": torch.neg, "Exp": torch.exp, "Log": torch.log, "Sqrt": torch.sqrt,
    "Reciprocal": torch.reciprocal, "Floor": torch.floor, "Ceil": torch.ceil, "Round": torch.round,
    "Sign": torch.sign, "Sin": torch.sin, "Cos": torch.cos, "Tan": torch.tan, "Asin": torch.asin,
    "Acos": torch.acos, "Atan": torch.atan, "Sinh": torch.sinh, "Cosh": torch.cosh, "Asinh": torch.asinh,
    "Acosh": torch.acosh, "Atanh": torch.atanh, "Erf": torch.erf, "IsNaN": torch.isnan,
    "Not": torch.logical_not,
}
# BitwiseNot of an unsigned value is not the int64 one's: flip within the type's own width.
_UNSIGNED_MAX = {torch.uint8: 0xFF, torch.uint16: 0xFFFF, torch.uint32: 0xFFFFFFFF}


@register("BitwiseNot", *reference_versions("BitwiseNot"))
def bitwise_not(x: torch.Tensor) -> torch.Tensor:
    """BitwiseNot."""
    if x.dtype in _UNSIGNED_MAX and x.dtype != torch.uint8:
        return (_UNSIGNED_MAX[x.dtype] - x.to(torch.int64)).to(x.dtype)
    return torch.bitwise_not(x)


for _name, _fn in _UNARY.items():
    _unary(_name, _fn)
for _name in ("Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sin", "Cos", "Tan",
              "Erf"):
    _direct(_name, _UNARY[_name])


@register("IsInf", *reference_versions("IsInf"))
def is_inf(x: torch.Tensor, *, detect_negative: int = 1, detect_positive: int = 1) -> torch.Tensor:
    """IsInf: which elements are +inf / -inf, as asked."""
    if detect_negative and detect_positive:
        return torch.isinf(x)
    if detect_positive:
        return torch.isposinf(x)
    if detect_negative:
        return torch.isneginf(x)
    return torch.zeros_like(x, dtype=torch.bool)


@register("Pow", *reference_versions("Pow"))
def pow_(a: torch.Tensor, b: torch.Tensor, broadcast: int | None = None, axis: int | None = None) -> torch.Tensor:
    """Pow: the result has the base's type (an integer base goes through double and truncates)."""
    b = _legacy(b, a, broadcast, axis)
    if a.is_floating_point():
        return torch.pow(a, b.to(a.dtype) if b.is_floating_point() else b).to(a.dtype)
    return torch.pow(a.double(), b.double()).trunc().to(a.dtype)


@register("Mod", *reference_versions("Mod"))
def mod(a: torch.Tensor, b: torch.Tensor, *, fmod: int = 0) -> torch.Tensor:
    """Mod: fmod=1 truncates (sign of A), fmod=0 floors (sign of B)."""
    return widened(torch.fmod if fmod else torch.remainder)(a, b)


@register("BitShift", *reference_versions("BitShift"))
def bit_shift(a: torch.Tensor, b: torch.Tensor, *, direction: str) -> torch.Tensor:
    """BitShift LEFT / RIGHT."""
    if direction == "LEFT":
        shifted = widened(torch.bitwise_left_shift)(a, b)
        if a.dtype in _UNSIGNED:  # bits shifted past the type's width are dropped
            shifted = widened(torch.bitwise_and)(shifted, torch.tensor(_UNSIGNED_MAX.get(a.dtype, -1)).to(a.dtype))
        return shifted
    return widened(torch.bitwise_right_shift)(a, b)


def _variadic(op_type: str, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], mean: bool = False) -> None:
    wide = widened(fn)

    def translate(*xs: torch.Tensor, **_: Any) -> torch.Tensor:
        result = xs[0]
        for x in xs[1:]:
            result = wide(result, x)
        if mean:
            result = result / len(xs)
        if len(xs) == 1:
            result = result.clone()
        return result

    translate.__name__ = translate.__qualname__ = op_type.lower()
    register(op_type, *reference_versions(op_type))(translate)


_variadic("Max", torch.maximum)
_variadic("Min", torch.minimum)
_variadic("Sum", torch.add)
_variadic("Mean", torch.add, mean=True)


@register("Where", *reference_versions("Where"))
def where(cond: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Where(cond, X, Y)."""
    return torch.where(cond, x, y)


@register("Clip", 1, 6)
def clip_v1(x: torch.Tensor, *, min: float | None = None, max: float | None = None, **_: Any) -> torch.Tensor:
    """Clip-1/6: bounds as attributes."""
    low = -3.4028234663852886e38 if min is None else min
    high = 3.4028234663852886e38 if max is None else max
    return torch.clamp(x, low, high)


def _clip_bound(value: Any, x: torch.Tensor) -> Any:
    """A Clip bound as clamp takes it: a Python number when it was known at conversion time (the
    fast scalar kernel, as nn.ReLU6/Hardtanh run), else a 0-d tensor in X's dtype."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return value.to(x.dtype).reshape(())
    number = static_array(value).reshape(-1)[0].item()
    return number if x.is_floating_point() else int(number)


@register("Clip", 11, 12, 13, static=(1, 2))
def clip(x: torch.Tensor, low: Any = None, high: Any = None) -> torch.Tensor:
    """Clip-11+: bounds as optional scalar inputs; max then min, so NaN propagates and a low bound
    above the high one gives the high one everywhere, as the spec asks."""
    lo, hi = _clip_bound(low, x), _clip_bound(high, x)
    if lo is None and hi is None:
        return x
    if isinstance(lo, torch.Tensor) or isinstance(hi, torch.Tensor):
        if lo is not None:
            x = torch.maximum(x, lo if isinstance(lo, torch.Tensor) else torch.tensor(lo, dtype=x.dtype))
        if hi is not None:
            x = torch.minimum(x, hi if isinstance(hi, torch.Tensor) else torch.tensor(hi, dtype=x.dtype))
        return x
    return torch.clamp(x, lo, hi)


@specializes("Clip", 11, 12, 13)
def _direct_clip(attrs: dict[str, Any], inputs: list[StepInput]) -> DirectCall | None:
    """Clip of a float tensor with bounds known at conversion time: torch.clamp with numbers."""
    x, bounds = inputs[0], inputs[1:]
    if x.dtype is None or not x.dtype.is_floating_point or any(b.present and b.value is None for b in bounds):
        return None
    numbers = [float(static_array(b.value).reshape(-1)[0]) if b.present else None for b in bounds]
    numbers += [None] * (2 - len(numbers))
    if numbers == [None, None]:
        return None
    return DirectCall(torch.clamp, (0,), {"min": numbers[0], "max": numbers[1]})
