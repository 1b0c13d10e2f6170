"""Small helpers the shape and indexing kernels share: axes and integer lists from tensors, and a
take_along_axis whose empty results cost nothing.

They run on every Slice, Reshape, Unsqueeze ... of a model, many of which move a handful of
elements, so they are written for the per-call cost (``tolist`` converts a whole array in C).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

import numpy as np


def axis_index(axis: int, rank: int) -> int:
    """Normalize a possibly negative axis into [0, rank)."""
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def int_list(values: np.ndarray | Sequence[int] | None) -> list[int]:
    """A 0-d/1-d integer tensor or attribute tuple as a list of Python ints."""
    if values is None:
        return []
    if isinstance(values, (tuple, list)):
        return [int(v) for v in values]
    array = np.asarray(values).reshape(-1)
    if array.dtype.kind not in "iu":
        array = array.astype(np.int64)  # bool or float index tensors truncate as int() would
    return array.tolist()


# What a kernel that makes one array per step or piece (Scan, SplitToSequence) pays at the least per
# array, however empty: the price at which their counts are held to the memory budget, before the
# first one is made (a [2**40, 0] input would otherwise make 2**40 of them). It is sys.getsizeof of an
# empty array in NumPy 1.26 and 2.x, written out so that where a run is refused depends on its inputs
# alone, not on the NumPy that runs it.
ARRAY_OBJECT_BYTES = 112


K = TypeVar("K")
V = TypeVar("V")

# How many input shapes (or layouts) one specialized step remembers: models feed a step one or a few.
REMEMBERED = 64


def remember(cache: dict[K, V], key: K, value: V) -> V:
    """Keep ``value`` for ``key`` in a specialized step's cache while it holds fewer than
    REMEMBERED entries (a stream of new shapes must not grow it without bound); return it."""
    if len(cache) < REMEMBERED:
        cache[key] = value
    return value


def take_along_axis(data: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
    """``np.take_along_axis``, made at once where the result is empty: NumPy first builds an index
    range of every other axis, 2**40 entries for a [2**40, 0] input."""
    axis %= data.ndim
    shape = list(np.broadcast_shapes(_flat_at(data.shape, axis), _flat_at(indices.shape, axis)))
    shape[axis] = indices.shape[axis]
    if math.prod(shape) == 0:
        return np.empty(shape, data.dtype)
    return np.take_along_axis(data, indices, axis=axis)


def _flat_at(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    return (*shape[:axis], 1, *shape[axis + 1 :])
