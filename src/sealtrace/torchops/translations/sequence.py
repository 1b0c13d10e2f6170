"""Sequence and optional values: torch translations.

A sequence is a Python list of tensors, an empty optional is ``None`` (as in the reference
interpreter). Several outputs are always a tuple, so a list is never mistaken for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from sealtrace.torchops.registry import ints, reference_versions, register


def _position(position: Any, n: int, default: int, what: str, allow_end: bool) -> int:
    if position is None:
        return default
    index = ints(position)[0]
    index = index + n if index < 0 else index
    if not 0 <= index <= (n if allow_end else n - 1):
        raise ValueError(f"{what}: position {ints(position)[0]} out of range for a sequence of {n}")
    return index


@register("SequenceConstruct", *reference_versions("SequenceConstruct"))
def sequence_construct(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """SequenceConstruct."""
    return list(tensors)


@register("SequenceEmpty", *reference_versions("SequenceEmpty"))
def sequence_empty(*, dtype: int | None = None) -> list[torch.Tensor]:
    """SequenceEmpty."""
    return []


@register("SequenceAt", *reference_versions("SequenceAt"), static=(1,))
def sequence_at(sequence: list[torch.Tensor], position: Any) -> torch.Tensor:
    """SequenceAt (negative positions count from the back)."""
    return sequence[_position(position, len(sequence), 0, "SequenceAt", allow_end=False)]


@register("SequenceInsert", *reference_versions("SequenceInsert"), static=(2,))
def sequence_insert(sequence: list[torch.Tensor], tensor: torch.Tensor, position: Any = None) -> list[torch.Tensor]:
    """SequenceInsert (default: at the end)."""
    n = len(sequence)
    index = _position(position, n, n, "SequenceInsert", allow_end=True)
    return [*sequence[:index], tensor, *sequence[index:]]


@register("SequenceErase", *reference_versions("SequenceErase"), static=(1,))
def sequence_erase(sequence: list[torch.Tensor], position: Any = None) -> list[torch.Tensor]:
    """SequenceErase (default: the last entry)."""
    n = len(sequence)
    index = _position(position, n, n - 1, "SequenceErase", allow_end=False)
    return [*sequence[:index], *sequence[index + 1 :]]


@register("SequenceLength", *reference_versions("SequenceLength"))
def sequence_length(sequence: list[torch.Tensor]) -> torch.Tensor:
    """SequenceLength as an int64 scalar."""
    return torch.tensor(len(sequence), dtype=torch.int64)


@register("SplitToSequence", *reference_versions("SplitToSequence"), static=(1,))
def split_to_sequence(x: torch.Tensor, split: Any = None, *, axis: int = 0, keepdims: int = 1
                      ) -> list[torch.Tensor]:
    """SplitToSequence: unit chunks (keepdims=0 drops the axis), chunks of one size, or given sizes."""
    a = axis + x.dim() if axis < 0 else axis
    length = x.shape[a]
    if split is None:
        pieces = list(torch.split(x, 1, dim=a)) if length else []
        return pieces if keepdims else [p.squeeze(a) for p in pieces]
    sizes = ints(split)
    is_scalar = not isinstance(split, (list, tuple)) and getattr(split, "dim", lambda: 1)() == 0
    if is_scalar or (isinstance(split, (int, float))):
        return list(torch.split(x, sizes[0], dim=a))
    return list(torch.split(x, sizes, dim=a))


@register("ConcatFromSequence", *reference_versions("ConcatFromSequence"))
def concat_from_sequence(sequence: list[torch.Tensor], *, axis: int, new_axis: int = 0) -> torch.Tensor:
    """ConcatFromSequence: concatenate, or stack along a new axis."""
    if not sequence:
        raise ValueError("ConcatFromSequence of an empty sequence")
    if new_axis:
        rank = sequence[0].dim() + 1
        return torch.stack(sequence, dim=axis + rank if axis < 0 else axis)
    return torch.cat(sequence, dim=axis)


@register("Optional", *reference_versions("Optional"))
def optional(value: Any = None, **_: Any) -> Any:
    """Optional: the value, or an empty optional (None)."""
    return value


@register("OptionalHasElement", *reference_versions("OptionalHasElement"))
def optional_has_element(value: Any = None) -> torch.Tensor:
    """OptionalHasElement."""
    return torch.tensor(value is not None)


@register("OptionalGetElement", *reference_versions("OptionalGetElement"))
def optional_get_element(value: Any) -> Any:
    """OptionalGetElement."""
    if value is None:
        raise ValueError("OptionalGetElement of an empty optional")
    return value


@register("SequenceMap", *reference_versions("SequenceMap"), n_outputs=True, subgraphs=True)
def sequence_map(input_sequence: list[Any], *additional_inputs: Any, n_outputs: int,
                 body: Callable[..., list[Any]]) -> tuple[list[Any], ...]:
    """SequenceMap: the body once per element; additional sequences are zipped, tensors shared."""
    n = len(input_sequence)
    for extra in additional_inputs:
        if isinstance(extra, list) and len(extra) != n:
            raise ValueError(f"SequenceMap: additional sequence of length {len(extra)}, expected {n}")
    results: list[list[Any]] = [[] for _ in range(n_outputs)]
    for i in range(n):
        outputs = body(input_sequence[i], *(e[i] if isinstance(e, list) else e for e in additional_inputs))
        for k, value in enumerate(outputs):
            results[k].append(value)
    return tuple(results)
