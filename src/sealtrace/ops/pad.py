"""Pad and CenterCropPad: an output of new borders around (or a crop of) the input.

Each kernel works out, from the shapes alone, a recipe of a few slice copies; a step whose pads
are constants keeps the recipe per input shape (its specializer).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from sealtrace.ops._values import axis_index as _axis
from sealtrace.ops._values import int_list as _ints
from sealtrace.ops._values import remember
from sealtrace.ops.registry import VARIES, KernelFn, register, specializes

Index = tuple[slice, ...]


class _PadRecipe(NamedTuple):
    """How Pad fills its output for one input shape: a few slice copies, worked out from the
    shapes alone (a specialized Pad step keeps it per input shape; np.pad's Python work on every
    call costs more than the copying itself on the small tensors models pad)."""

    crop: Index | None  # negative pads remove elements: what of the input is kept
    width: tuple[tuple[int, int], ...]  # the (non-negative) pads per axis, after cropping
    out_shape: tuple[int, ...]
    interior: Index  # where the (cropped) input goes
    # constant mode: the borders that get the value; other modes: (border, what it copies), in order
    borders: tuple[Index, ...]
    copies: tuple[tuple[Index, Index], ...]
    general: bool  # reflect/wrap pads wider than one reflection: np.pad does it


def _pad_recipe(shape: tuple[int, ...], pads: Sequence[int], mode: str, axes: Sequence[int] | None) -> _PadRecipe:
    rank = len(shape)
    axes = list(range(rank)) if axes is None else [_axis(a, rank) for a in axes]
    if len(pads) != 2 * len(axes):
        raise ValueError(f"pads has {len(pads)} values, expected {2 * len(axes)}")
    width = [(0, 0)] * rank
    for i, axis in enumerate(axes):
        width[axis] = (pads[i], pads[len(axes) + i])
    crop = None
    if any(b < 0 or e < 0 for b, e in width):
        crop = tuple(slice(max(-b, 0), dim - max(-e, 0)) for (b, e), dim in zip(width, shape, strict=True))
        shape = tuple(len(range(*c.indices(dim))) for c, dim in zip(crop, shape, strict=True))
        width = [(max(b, 0), max(e, 0)) for b, e in width]
    out_shape = tuple(d + b + e for d, (b, e) in zip(shape, width, strict=True))
    interior = tuple(slice(b, b + d) for d, (b, _e) in zip(shape, width, strict=True))
    recipe = _PadRecipe(crop, tuple(width), out_shape, interior, (), (), False)
    if not any(b or e for b, e in width):
        return recipe

    def at(axis: int, part: slice) -> Index:
        index = [slice(None)] * rank
        index[axis] = part
        return tuple(index)

    if mode == "constant":
        # Only the borders get the constant: the interior is written once, by the input's copy.
        borders = [
            at(axis, part)
            for axis, ((b, e), dim) in enumerate(zip(width, shape, strict=True))
            for part, size in ((slice(0, b), b), (slice(b + dim, None), e))
            if size
        ]
        return recipe._replace(borders=tuple(borders))
    if mode not in ("reflect", "edge", "wrap"):
        raise ValueError(f"unknown Pad mode {mode!r}")
    if math.prod(shape) == 0:
        raise ValueError(f"Pad mode {mode!r} needs a non-empty input")
    if not all(_fits(mode, dim, b, e) for dim, (b, e) in zip(shape, width, strict=True)):
        return recipe._replace(general=True)
    # Axes are padded in order over the whole output, as np.pad does: the borders of later axes
    # hold garbage until their own turn overwrites them, and earlier axes' borders are final.
    copies: list[tuple[Index, Index]] = []
    for axis, ((before, after), dim) in enumerate(zip(width, shape, strict=True)):
        end = before + dim  # one past the last original element along this axis
        if mode == "reflect":  # mirror without repeating the edge element
            stop = end - 2 - after  # -1 (before the front) only when the mirror reaches index 0
            left, right = slice(before + before, before, -1), slice(end - 2, None if stop < 0 else stop, -1)
        elif mode == "edge":
            left, right = slice(before, before + 1), slice(end - 1, end)
        else:  # wrap
            left, right = slice(end - before, end), slice(before, before + after)
        if before:
            copies.append((at(axis, slice(0, before)), at(axis, left)))
        if after:
            copies.append((at(axis, slice(end, end + after)), at(axis, right)))
    return recipe._replace(copies=tuple(copies))


def _apply_pad(data: np.ndarray, recipe: _PadRecipe, mode: str, value: Any) -> np.ndarray:
    if recipe.crop is not None:
        data = data[recipe.crop]
    if not (recipe.borders or recipe.copies or recipe.general):
        return data
    if recipe.general:
        return np.pad(data, recipe.width, mode=mode)  # type: ignore[call-overload]
    out = np.empty(recipe.out_shape, dtype=data.dtype)
    out[recipe.interior] = data
    if recipe.borders:
        fill = np.asarray(value if value is not None else ("" if data.dtype == object else 0))
        fill = fill.astype(data.dtype) if data.dtype != object else fill
        for border in recipe.borders:
            out[border] = fill
    for border, source in recipe.copies:
        out[border] = out[source]
    return out


def _pad(
    data: np.ndarray, pads: Sequence[int], mode: str, value: Any, axes: Sequence[int] | None = None
) -> np.ndarray:
    return _apply_pad(data, _pad_recipe(data.shape, pads, mode, axes), mode, value)


def _fits(mode: str, dim: int, before: int, after: int) -> bool:
    """Whether one reflection (or one wrap) covers the pads, so slice copies do it."""
    if mode == "reflect":
        return max(before, after) <= dim - 1 or before == after == 0
    if mode == "wrap":
        return max(before, after) <= dim
    return True  # edge


@register("Pad", 1)
def pad_v1(data: np.ndarray, *, mode: str, paddings: tuple[int, ...], value: float) -> np.ndarray:
    """Pad-1: ``paddings`` and ``value`` as attributes."""
    return _pad(data, paddings, mode, value)


@register("Pad", 2)
def pad_v2(data: np.ndarray, *, mode: str, pads: tuple[int, ...], value: float) -> np.ndarray:
    """Pad-2: ``pads`` and ``value`` as attributes."""
    return _pad(data, pads, mode, value)


@register("Pad", 11, 13)
def pad_v11(
    data: np.ndarray, pads: np.ndarray, constant_value: np.ndarray | None = None, *, mode: str
) -> np.ndarray:
    """Pad-11/13: ``pads`` and ``constant_value`` as inputs."""
    return _pad(data, _ints(pads), mode, _scalar(constant_value))


@register("Pad", 18, 19, 21, 23, 24, 25)
def pad_v18(
    data: np.ndarray,
    pads: np.ndarray,
    constant_value: np.ndarray | None = None,
    axes: np.ndarray | None = None,
    *,
    mode: str,
) -> np.ndarray:
    """Pad-18+: with ``axes`` (18) and mode ``wrap`` (19)."""
    return _pad(data, _ints(pads), mode, _scalar(constant_value), None if axes is None else _ints(axes))


@specializes(pad_v11, pad_v18)
def _pad_constant_pads(inputs: tuple[Any, ...], attributes: Any) -> KernelFn | None:
    """Pad whose pads, value and axes are constants: the recipe for each input shape made once."""
    if any(value is VARIES for value in inputs[1:]):
        return None
    pads_in, value_in, axes_in = (*inputs[1:], None, None)[:3]
    pads, value = _ints(pads_in), _scalar(value_in)
    axes = None if axes_in is None else _ints(axes_in)
    mode = attributes["mode"]
    recipes: dict[tuple[int, ...], _PadRecipe] = {}

    def run(data: np.ndarray, *_constants: Any) -> np.ndarray:
        recipe = recipes.get(data.shape)
        if recipe is None:
            recipe = remember(recipes, data.shape, _pad_recipe(data.shape, pads, mode, axes))
        return _apply_pad(data, recipe, mode, value)

    return run


def _scalar(value: np.ndarray | None) -> Any:
    if value is None or value.size == 0:
        return None
    return value.reshape(-1)[0]


@register("CenterCropPad", 18)
def center_crop_pad(input_data: np.ndarray, shape: np.ndarray, *, axes: tuple[int, ...] | None) -> np.ndarray:
    """CenterCropPad-18: crop or zero-pad each axis around its center (extra element at the end)."""
    rank = input_data.ndim
    axis_list = list(range(rank)) if axes is None else [_axis(a, rank) for a in axes]
    target = list(input_data.shape)
    crop = [slice(None)] * rank
    place = [slice(None)] * rank
    for axis, size in zip(axis_list, _ints(shape), strict=True):
        dim = input_data.shape[axis]
        target[axis] = size
        if size < dim:
            start = (dim - size) // 2
            crop[axis] = slice(start, start + size)
        elif size > dim:
            start = (size - dim) // 2
            place[axis] = slice(start, start + dim)
    out = np.full(target, "" if input_data.dtype == object else 0, dtype=input_data.dtype)
    out[tuple(place)] = input_data[tuple(crop)]
    return out
