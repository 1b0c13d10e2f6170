"""Sequences and optionals (every historic version of the default domain).

An ONNX sequence is a Python list of arrays; kernels never mutate the list they are given (a
value may be read by several steps), they return a new one. An optional is its element (an array
or a list) when it holds one, and None when it is empty.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sealtrace.limits import check_allocation
from sealtrace.ops._values import ARRAY_OBJECT_BYTES
from sealtrace.ops.registry import KernelContext, register


def _position(position: np.ndarray | None, length: int, default: int, upper: int, what: str) -> int:
    """A sequence position in [-length, upper - 1 + length ...], normalized to a non-negative index."""
    if position is None:
        return default
    array = np.asarray(position)
    if array.size != 1:
        raise ValueError(f"{what} position must be a scalar, got shape {array.shape}")
    index = int(array.reshape(-1)[0])
    if not -length <= index <= upper:
        raise ValueError(f"{what} position {index} out of range for a sequence of length {length}")
    return index + length if index < 0 else index


@register("SequenceConstruct", 11)
def sequence_construct(*inputs: np.ndarray) -> list[np.ndarray]:
    """ONNX SequenceConstruct (version 11): a sequence of the given tensors."""
    return list(inputs)


@register("SequenceEmpty", 11)
def sequence_empty(*, dtype: int | None) -> list[np.ndarray]:
    """ONNX SequenceEmpty (version 11): an empty sequence (its element type lives in the graph's types)."""
    return []


@register("SequenceAt", 11)
def sequence_at(input_sequence: list[np.ndarray], position: np.ndarray) -> np.ndarray:
    """ONNX SequenceAt (version 11): the tensor at a (possibly negative) position."""
    n = len(input_sequence)
    return input_sequence[_position(position, n, 0, n - 1, "SequenceAt")]


@register("SequenceInsert", 11)
def sequence_insert(
    input_sequence: list[np.ndarray], tensor: np.ndarray, position: np.ndarray | None = None
) -> list[np.ndarray]:
    """ONNX SequenceInsert (version 11): a new sequence with ``tensor`` inserted (default: at the end)."""
    n = len(input_sequence)
    index = _position(position, n, n, n, "SequenceInsert")
    return [*input_sequence[:index], tensor, *input_sequence[index:]]


@register("SequenceErase", 11)
def sequence_erase(input_sequence: list[np.ndarray], position: np.ndarray | None = None) -> list[np.ndarray]:
    """ONNX SequenceErase (version 11): a new sequence without one entry (default: the last)."""
    n = len(input_sequence)
    index = _position(position, n, n - 1, n - 1, "SequenceErase")
    if index < 0:
        raise ValueError("SequenceErase on an empty sequence")
    return [*input_sequence[:index], *input_sequence[index + 1 :]]


@register("SequenceLength", 11)
def sequence_length(input_sequence: list[np.ndarray]) -> np.ndarray:
    """ONNX SequenceLength (version 11): the number of tensors, as an int64 scalar."""
    return np.array(len(input_sequence), dtype=np.int64)


@register("SplitToSequence", 11, 24)
def split_to_sequence(
    data: np.ndarray, split: np.ndarray | None = None, *, axis: int, keepdims: int
) -> list[np.ndarray]:
    """ONNX SplitToSequence (versions 11, 24): split into equal chunks, chunks of given sizes, or units."""
    axis = _normalized_axis(axis, data.ndim)
    length = data.shape[axis]
    pieces_at_most = length if split is None or np.ndim(split) == 0 else np.size(split)
    check_allocation(pieces_at_most * ARRAY_OBJECT_BYTES, f"SplitToSequence into {pieces_at_most} tensors")
    if split is None:
        # Unit chunks; keepdims=0 drops the split axis (it only applies when split is absent).
        pieces = np.split(data, length, axis=axis) if length else []
        return [np.squeeze(p, axis=axis) for p in pieces] if not keepdims else list(pieces)
    sizes = np.asarray(split).astype(np.int64)
    if sizes.ndim == 0:
        chunk = int(sizes)
        if chunk <= 0:
            raise ValueError(f"SplitToSequence split size must be positive, got {chunk}")
        bounds = list(range(chunk, length, chunk))
    else:
        if np.any(sizes < 0) or int(sizes.sum()) != length:
            raise ValueError(f"SplitToSequence sizes {sizes.tolist()} do not add up to {length}")
        bounds = np.cumsum(sizes)[:-1].tolist()
    return list(np.split(data, bounds, axis=axis))


def _normalized_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


@register("ConcatFromSequence", 11)
def concat_from_sequence(input_sequence: list[np.ndarray], *, axis: int, new_axis: int) -> np.ndarray:
    """ONNX ConcatFromSequence (version 11): concatenate, or stack along a new axis when new_axis=1."""
    if not input_sequence:
        raise ValueError("ConcatFromSequence of an empty sequence")
    rank = input_sequence[0].ndim
    if new_axis:
        return np.stack(input_sequence, axis=_normalized_axis(axis, rank + 1))
    return np.concatenate(input_sequence, axis=_normalized_axis(axis, rank))


@register("SequenceMap", 17, context=True)
def sequence_map(
    ctx: KernelContext, input_sequence: list[np.ndarray], *additional_inputs: Any, body: Any
) -> tuple[list[Any], ...]:
    """ONNX SequenceMap (version 17): run the body per element; sequence extras are zipped, tensors shared."""
    n = len(input_sequence)
    for extra in additional_inputs:
        if isinstance(extra, list) and len(extra) != n:
            raise ValueError(f"SequenceMap: additional sequence of length {len(extra)}, expected {n}")
    results: list[list[Any]] = [[] for _ in body.outputs]
    for i in range(n):
        feeds = [input_sequence[i], *(e[i] if isinstance(e, list) else e for e in additional_inputs)]
        for k, value in enumerate(ctx.run_subgraph("body", body, feeds)):
            results[k].append(value)
    return tuple(results)


@register("Optional", 15, 28)
def optional(value: Any = None, *, type: Any) -> Any:
    """ONNX Optional (versions 15, 28): wrap a value, or make an empty optional (None)."""
    return value


@register("OptionalHasElement", 15, 18, 28)
def optional_has_element(value: Any = None) -> np.ndarray:
    """ONNX OptionalHasElement (versions 15, 18, 28): whether the optional holds a value (bool scalar)."""
    return np.array(value is not None, dtype=np.bool_)


@register("OptionalGetElement", 15, 18, 28)
def optional_get_element(value: Any) -> Any:
    """ONNX OptionalGetElement (versions 15, 18, 28): the value of a non-empty optional (or a plain value)."""
    if value is None:
        raise ValueError("OptionalGetElement of an empty optional")
    return value
