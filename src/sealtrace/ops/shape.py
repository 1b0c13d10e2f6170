"""Shape-manipulation kernels: Reshape, Transpose, Squeeze, Concat, Split, Expand, Constant ...

Kernels that only rearrange metadata (Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Identity,
Split, Expand) return NumPy views of their inputs: no kernel ever writes into an input, so sharing
memory is safe and saves a copy per step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sealtrace.limits import check_allocation
from sealtrace.ops._values import axis_index as _axis
from sealtrace.ops._values import int_list as _ints
from sealtrace.ops._values import remember
from sealtrace.ops.registry import VARIES, KernelContext, KernelFn, register, specializes

_ALL_VERSIONS_FROM_13 = (13, 21, 23, 24, 25)


def _onnx_dtype(code: int) -> np.dtype[Any]:
    import onnx

    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(code))


# ---------------------------------------------------------------------------------------------
# Reshape, Transpose, Squeeze, Unsqueeze, Flatten


def _reshape(data: np.ndarray, shape: Sequence[int], allowzero: int) -> np.ndarray:
    target = list(shape)
    if not allowzero:
        # 0 copies the input's dimension at the same position (unless allowzero).
        for i, dim in enumerate(target):
            if dim == 0:
                target[i] = data.shape[i]
    return data.reshape(target)


@register("Reshape", 1)
def reshape_v1(data: np.ndarray, *, consumed_inputs: Any, shape: tuple[int, ...] | None) -> np.ndarray:
    """Reshape-1: target shape as the ``shape`` attribute."""
    return _reshape(data, _ints(shape), 0)


@register("Reshape", 5, 13)
def reshape_v5(data: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """Reshape-5/13: target shape as an input; 0 copies the input dimension."""
    return _reshape(data, _ints(shape), 0)


@register("Reshape", 14, 19, 21, 23, 24, 25)
def reshape_v14(data: np.ndarray, shape: np.ndarray, *, allowzero: int) -> np.ndarray:
    """Reshape-14+: with ``allowzero`` (0 means an empty dimension instead of 'copy')."""
    return _reshape(data, _ints(shape), allowzero)


def _by_input_shape(generic: KernelFn) -> KernelFn:
    """A reshape-like step with constant operands: its output shape is a function of its input's
    shape alone, worked out by ``generic(data)`` (which also checks it) the first time a shape is
    seen and a bare ``reshape`` afterwards, the same view the kernel returns."""
    shapes: dict[tuple[int, ...], tuple[int, ...]] = {}

    def run(data: np.ndarray, *_constants: Any) -> np.ndarray:
        target = shapes.get(data.shape)
        if target is None:
            out = generic(data)
            remember(shapes, data.shape, out.shape)
            return out
        return data.reshape(target)

    return run


@specializes(reshape_v5, reshape_v14)
def _reshape_to_constant_shape(inputs: tuple[Any, ...], attributes: Any) -> KernelFn | None:
    if inputs[1] is VARIES:
        return None
    target = _ints(inputs[1])
    allowzero = attributes.get("allowzero", 0)
    return _by_input_shape(lambda data: _reshape(data, target, allowzero))


@register("Transpose", 1, *_ALL_VERSIONS_FROM_13)
def transpose(data: np.ndarray, *, perm: tuple[int, ...] | None) -> np.ndarray:
    """Transpose-1+: permute axes (reverse them without ``perm``)."""
    return np.transpose(data, perm if perm else None)


def _squeeze(data: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    shape = data.shape
    if not axes:
        return data.reshape([n for n in shape if n != 1])
    drop = {_axis(a, data.ndim) for a in axes}
    if len(drop) != len(axes) or any(shape[a] != 1 for a in drop):
        raise ValueError(f"cannot squeeze axes {list(axes)} of shape {list(shape)}: need distinct axes of size 1")
    # A reshape, not np.squeeze: the same view at a fraction of the per-call cost
    return data.reshape([n for a, n in enumerate(shape) if a not in drop])


def _unsqueeze(data: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    rank = data.ndim + len(axes)
    inserted = sorted(_axis(a, rank) for a in axes)
    if len(set(inserted)) != len(inserted):
        raise ValueError(f"Unsqueeze axes {list(axes)} repeat an axis")
    shape = list(data.shape)
    for position in inserted:  # ascending: each position is final once the earlier ones are in
        shape.insert(position, 1)
    return data.reshape(shape)


@register("Squeeze", 1, 11)
def squeeze_v1(data: np.ndarray, *, axes: tuple[int, ...] | None) -> np.ndarray:
    """Squeeze-1/11: axes as an attribute (all size-1 axes without it)."""
    return _squeeze(data, _ints(axes))


@register("Squeeze", *_ALL_VERSIONS_FROM_13)
def squeeze_v13(data: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    """Squeeze-13+: axes as an optional input."""
    return _squeeze(data, _ints(axes))


@register("Unsqueeze", 1, 11)
def unsqueeze_v1(data: np.ndarray, *, axes: tuple[int, ...]) -> np.ndarray:
    """Unsqueeze-1/11: axes (positions in the output) as an attribute."""
    return _unsqueeze(data, _ints(axes))


@register("Unsqueeze", *_ALL_VERSIONS_FROM_13)
def unsqueeze_v13(data: np.ndarray, axes: np.ndarray) -> np.ndarray:
    """Unsqueeze-13+: axes as an input."""
    return _unsqueeze(data, _ints(axes))


def _constant_axes(
    reshape: Callable[[np.ndarray, Sequence[int]], np.ndarray],
) -> Callable[[tuple[Any, ...], Any], KernelFn | None]:
    """The specializer of Squeeze or Unsqueeze (``reshape``) whose axes input is a constant."""

    def specialize(inputs: tuple[Any, ...], attributes: Any) -> KernelFn | None:
        if inputs[1] is VARIES:
            return None
        axes = _ints(inputs[1])
        return _by_input_shape(lambda data: reshape(data, axes))

    return specialize


specializes(squeeze_v13)(_constant_axes(_squeeze))
specializes(unsqueeze_v13)(_constant_axes(_unsqueeze))


@register("Flatten", 1, 9, 11, *_ALL_VERSIONS_FROM_13)
def flatten(data: np.ndarray, *, axis: int) -> np.ndarray:
    """Flatten-1+: collapse into 2-D at ``axis``."""
    rank = data.ndim
    if not -rank <= axis <= rank:
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    outer = math.prod(data.shape[:axis])
    inner = math.prod(data.shape[axis:])
    # Explicit sizes, not -1: -1 is ambiguous for empty tensors.
    return data.reshape(outer, inner)


# ---------------------------------------------------------------------------------------------
# Shape, Size, Identity


@register("Shape", 1, 13)
def shape_v1(data: np.ndarray) -> np.ndarray:
    """Shape-1/13: the input's shape as int64."""
    return np.array(data.shape, dtype=np.int64)


@register("Shape", 15, 19, 21, 23, 24, 25)
def shape_v15(data: np.ndarray, *, end: int | None, start: int) -> np.ndarray:
    """Shape-15+: a [start, end) window of the shape (Python slice clamping = ONNX clamping)."""
    return np.array(data.shape[start:end], dtype=np.int64)


@register("Size", 1, 13, 19, 21, 23, 24, 25)
def size(data: np.ndarray) -> np.ndarray:
    """Size-1+: number of elements as a 0-d int64."""
    return np.array(data.size, dtype=np.int64)


@register("Identity", 1, 13, 14, 16, 19, 21, 23, 24, 25)
def identity(value: Any) -> Any:
    """Identity-1+: tensors, sequences and optionals pass through unchanged."""
    return value


# ---------------------------------------------------------------------------------------------
# Concat, Split


@register("Concat", 1, 4, 11, 13)
def concat(*inputs: np.ndarray, axis: int | None) -> np.ndarray:
    """Concat-1+: join along ``axis`` (Concat-1 defaults to axis 1)."""
    axis = 1 if axis is None else axis
    return np.concatenate(inputs, axis=_axis(axis, inputs[0].ndim))


def _split(data: np.ndarray, axis: int, sizes: Sequence[int]) -> tuple[np.ndarray, ...]:
    axis = _axis(axis, data.ndim)
    if sum(sizes) != data.shape[axis] or any(size < 0 for size in sizes):
        raise ValueError(f"split sizes {list(sizes)} are not non-negative sizes adding up to {data.shape[axis]}")
    # Views by slicing: np.split's own bookkeeping costs more than the views on small tensors
    index: list[slice] = [slice(None)] * data.ndim
    parts = []
    start = 0
    for size in sizes:
        index[axis] = slice(start, start + size)
        parts.append(data[tuple(index)])
        start += size
    return tuple(parts)


def _equal_sizes(dim: int, parts: int) -> list[int]:
    if dim % parts:
        raise ValueError(f"dimension {dim} cannot be split into {parts} equal parts")
    return [dim // parts] * parts


@register("Split", 1, context=True)
def split_v1(
    ctx: KernelContext,
    data: np.ndarray,
    *sizes_input: np.ndarray | None,
    axis: int | None,
    split: tuple[int, ...] | None,
) -> tuple[np.ndarray, ...]:
    """Split-1: sizes from the optional second input or the ``split`` attribute, else equal parts."""
    # The input and the attribute share the name 'split', so the input arrives positionally.
    given = sizes_input[0] if sizes_input and sizes_input[0] is not None else None
    sizes = _ints(given) if given is not None else _ints(split)
    axis = 0 if axis is None else axis
    if not sizes:
        sizes = _equal_sizes(data.shape[_axis(axis, data.ndim)], ctx.n_outputs)
    return _split(data, axis, sizes)


@register("Split", 2, 11, context=True)
def split_v2(
    ctx: KernelContext, data: np.ndarray, *, axis: int, split: tuple[int, ...] | None
) -> tuple[np.ndarray, ...]:
    """Split-2/11: sizes as the ``split`` attribute, else equal parts."""
    sizes = _ints(split) or _equal_sizes(data.shape[_axis(axis, data.ndim)], ctx.n_outputs)
    return _split(data, axis, sizes)


@register("Split", 13, context=True)
def split_v13(
    ctx: KernelContext, data: np.ndarray, split: np.ndarray | None = None, *, axis: int
) -> tuple[np.ndarray, ...]:
    """Split-13: sizes as an optional input, else equal parts."""
    sizes = _ints(split) if split is not None else []
    if not sizes:
        sizes = _equal_sizes(data.shape[_axis(axis, data.ndim)], ctx.n_outputs)
    return _split(data, axis, sizes)


@register("Split", 18, context=True)
def split_v18(
    ctx: KernelContext,
    data: np.ndarray,
    split: np.ndarray | None = None,
    *,
    axis: int,
    num_outputs: int | None,
) -> tuple[np.ndarray, ...]:
    """Split-18: sizes as an input, or ``num_outputs`` chunks of ceil(dim/n) with a smaller last one."""
    dim = data.shape[_axis(axis, data.ndim)]
    if split is not None and split.size:
        sizes = _ints(split)
    else:
        parts = num_outputs if num_outputs is not None else ctx.n_outputs
        chunk = -(-dim // parts)
        sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(parts)]
    return _split(data, axis, sizes)


# ---------------------------------------------------------------------------------------------
# Tile, Expand, Range, ConstantOfShape, Constant, EyeLike, Trilu


@register("Tile", 1)
def tile_v1(data: np.ndarray, tiles: np.ndarray, axis: np.ndarray) -> np.ndarray:
    """Tile-1: ``tiles`` copies along one ``axis``."""
    reps = [1] * data.ndim
    reps[_axis(int(axis.reshape(-1)[0]), data.ndim)] = int(tiles.reshape(-1)[0])
    return np.tile(data, reps)


@register("Tile", 6, 13)
def tile(data: np.ndarray, repeats: np.ndarray) -> np.ndarray:
    """Tile-6/13: repeat along every axis."""
    reps = _ints(repeats)
    if len(reps) != data.ndim:
        raise ValueError(f"repeats has {len(reps)} values for rank {data.ndim}")
    return np.tile(data, reps)


@register("Expand", 8, 13)
def expand(data: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """Expand-8/13: bidirectional broadcast to ``shape`` (a read-only broadcast view)."""
    target = np.broadcast_shapes(data.shape, tuple(_ints(shape)))
    # A view costs nothing, but whatever reads it (the next step, the run's outputs) pays its size.
    if math.prod(target) > data.size:
        check_allocation(math.prod(target) * data.itemsize, f"Expand of {data.shape} to {list(target)[:8]}")
    return np.broadcast_to(data, target)


def _range(start: np.ndarray, limit: np.ndarray, delta: np.ndarray, compute: np.dtype[Any]) -> np.ndarray:
    """Range in the compute type: integers exactly (start + i * delta); floats as the ONNX function
    body's Loop and ONNX Runtime accumulate them, output[0] = start, output[i] = output[i-1] + delta
    (each sum rounded to the compute type, in order), with ceil((limit - start) / delta) elements,
    the difference rounded to the compute type and divided in float64 (ONNX Runtime's count)."""
    dtype = start.dtype
    s, lim, d = (np.asarray(v).reshape(()).astype(compute) for v in (start, limit, delta))
    if compute.kind in "iu":
        count = max(-((int(s) - int(lim)) // int(d)), 0)
        check_allocation(count * compute.itemsize, f"Range of {count} elements")
        out = np.arange(count, dtype=compute) * d + s
        return out.astype(dtype, copy=False)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        quotient = np.float64(lim - s) / np.float64(d)
    if not np.isfinite(quotient):
        raise ValueError(f"Range: (limit - start) / delta is {quotient}; the element count is undefined")
    count = max(int(np.ceil(quotient)), 0)
    check_allocation(count * compute.itemsize, f"Range of {count} elements")
    steps = np.full(count, d, dtype=compute)
    if count:
        steps[0] = s
    return np.add.accumulate(steps, dtype=compute).astype(dtype, copy=False)


@register("Range", 11)
def range_v11(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Range-11: [start, limit) by delta, in the inputs' type."""
    return _range(start, limit, delta, start.dtype)


@register("Range", 27)
def range_v27(start: np.ndarray, limit: np.ndarray, delta: np.ndarray, *, stash_type: int) -> np.ndarray:
    """Range-27: float16/bfloat16 computed in ``stash_type`` precision."""
    compute = start.dtype
    if compute.itemsize == 2 and compute.kind in "fV":
        compute = _onnx_dtype(stash_type)
    return _range(start, limit, delta, compute)


@register("ConstantOfShape", 9, 20, 21, 23, 24, 25)
def constant_of_shape(data: np.ndarray, *, value: np.ndarray | None) -> np.ndarray:
    """ConstantOfShape-9+: a tensor of ``input``'s shape filled with ``value`` (float32 0)."""
    fill = np.zeros((), dtype=np.float32) if value is None else value.reshape(())
    shape = tuple(_ints(data))
    check_allocation(math.prod(shape) * fill.dtype.itemsize, f"ConstantOfShape of shape {list(shape)[:8]}")
    return np.full(shape, fill, dtype=fill.dtype)


def _frozen(value: np.ndarray) -> np.ndarray:
    """A read-only view: the attribute array belongs to the Plan and must survive every run."""
    view = value.view()
    view.flags.writeable = False
    return view


@register("Constant", 1, 9)
def constant_v1(*, value: np.ndarray) -> np.ndarray:
    """Constant-1/9: the ``value`` tensor."""
    return _frozen(value)


@register("Constant", 11)
def constant_v11(*, value: np.ndarray | None, sparse_value: np.ndarray | None) -> np.ndarray:
    """Constant-11: ``value`` or (densified) ``sparse_value``."""
    return _frozen(value if value is not None else sparse_value)  # type: ignore[arg-type]


@register("Constant", 12, 13, 19, 21, 23, 24, 25)
def constant_v12(
    *,
    value: np.ndarray | None,
    sparse_value: np.ndarray | None,
    value_float: float | None,
    value_floats: tuple[float, ...] | None,
    value_int: int | None,
    value_ints: tuple[int, ...] | None,
    value_string: str | None,
    value_strings: tuple[str, ...] | None,
) -> np.ndarray:
    """Constant-12+: exactly one of the value attributes."""
    if value is not None:
        return _frozen(value)
    if sparse_value is not None:
        return _frozen(sparse_value)
    if value_float is not None:
        return np.array(value_float, dtype=np.float32)
    if value_floats is not None:
        return np.array(value_floats, dtype=np.float32)
    if value_int is not None:
        return np.array(value_int, dtype=np.int64)
    if value_ints is not None:
        return np.array(value_ints, dtype=np.int64)
    if value_string is not None:
        return np.array(value_string, dtype=object)
    if value_strings is not None:
        return np.array(value_strings, dtype=object).reshape(len(value_strings))
    raise ValueError("Constant has no value attribute")


@register("EyeLike", 9, 22)
def eye_like(data: np.ndarray, *, dtype: int | None, k: int) -> np.ndarray:
    """EyeLike-9/22: ones on diagonal ``k`` of a matrix shaped like ``input``."""
    if data.ndim != 2:
        raise ValueError(f"EyeLike needs a rank-2 input, got rank {data.ndim}")
    out_dtype = data.dtype if dtype is None else _onnx_dtype(dtype)
    return np.eye(data.shape[0], data.shape[1], k=k, dtype=out_dtype)


@register("Trilu", 14)
def trilu(data: np.ndarray, k: np.ndarray | None = None, *, upper: int) -> np.ndarray:
    """Trilu-14: keep the upper (or lower) triangle of the last two axes from diagonal ``k``."""
    offset = 0 if k is None else int(k.reshape(-1)[0])
    return np.triu(data, offset) if upper else np.tril(data, offset)


# ---------------------------------------------------------------------------------------------
# DepthToSpace, SpaceToDepth


@register("DepthToSpace", 1)
def depth_to_space_v1(data: np.ndarray, *, blocksize: int) -> np.ndarray:
    """DepthToSpace-1: DCR order."""
    return _depth_to_space(data, blocksize, "DCR")


@register("DepthToSpace", 11, 13, 28)
def depth_to_space(data: np.ndarray, *, blocksize: int, mode: str) -> np.ndarray:
    """DepthToSpace-11+: DCR or CRD order."""
    return _depth_to_space(data, blocksize, mode)


def _depth_to_space(x: np.ndarray, bs: int, mode: str) -> np.ndarray:
    b, c, h, w = x.shape
    if mode == "DCR":
        tmp = x.reshape(b, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        tmp = x.reshape(b, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        raise ValueError(f"unknown DepthToSpace mode {mode!r}")
    return tmp.reshape(b, c // (bs * bs), h * bs, w * bs)


@register("SpaceToDepth", 1, 13)
def space_to_depth_v1(data: np.ndarray, *, blocksize: int) -> np.ndarray:
    """SpaceToDepth-1/13: DCR order."""
    return _space_to_depth(data, blocksize, "DCR")


@register("SpaceToDepth", 28)
def space_to_depth(data: np.ndarray, *, blocksize: int, mode: str) -> np.ndarray:
    """SpaceToDepth-28: DCR or CRD order."""
    return _space_to_depth(data, blocksize, mode)


def _space_to_depth(x: np.ndarray, bs: int, mode: str) -> np.ndarray:
    b, c, h, w = x.shape
    tmp = x.reshape(b, c, h // bs, bs, w // bs, bs)
    if mode == "DCR":
        tmp = tmp.transpose(0, 3, 5, 1, 2, 4)
    elif mode == "CRD":
        tmp = tmp.transpose(0, 1, 3, 5, 2, 4)
    else:
        raise ValueError(f"unknown SpaceToDepth mode {mode!r}")
    return tmp.reshape(b, c * bs * bs, h // bs, w // bs)
