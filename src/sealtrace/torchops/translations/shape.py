"""Shape, layout, indexing and tensor-creation ops: torch translations.

Shape-like inputs (a Reshape's shape, a Slice's starts ...) are declared ``static``: they arrive as
folded values or as tensors and are read with :func:`ints`, so the translations work both in the
step-by-step backend and in an fx module whose shape values were folded at conversion time.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
import torch
import torch.nn.functional as F  # noqa: N812 - the name every torch reader knows

from sealtrace.torchops.dtypes import from_numpy, torch_dtype
from sealtrace.torchops.registry import (
    DirectCall,
    StepInput,
    floats,
    ints,
    reference_versions,
    register,
    specializes,
    static_array,
)


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


@register("Identity", *reference_versions("Identity"))
def identity(x: Any) -> Any:
    """Identity."""
    return x


@register("Shape", 1, 13)
def shape_v1(x: torch.Tensor) -> torch.Tensor:
    """Shape-1/13."""
    return torch.tensor(list(x.shape), dtype=torch.int64, device=x.device)


@register("Shape", *reference_versions("Shape", since=15))
def shape(x: torch.Tensor, *, start: int = 0, end: int | None = None) -> torch.Tensor:
    """Shape-15+: an optional [start, end) window of the dims (clamped, negatives from the back)."""
    dims = list(x.shape)
    return torch.tensor(dims[start:end], dtype=torch.int64, device=x.device)


@register("Size", *reference_versions("Size"))
def size(x: torch.Tensor) -> torch.Tensor:
    """Size: the element count as an int64 scalar."""
    return torch.tensor(x.numel(), dtype=torch.int64, device=x.device)


def _reshape(x: torch.Tensor, shape: list[int], allowzero: int) -> torch.Tensor:
    target = [x.shape[i] if (d == 0 and not allowzero and i < x.dim()) else d for i, d in enumerate(shape)]
    return x.reshape(target)


@register("Reshape", 1)
def reshape_v1(x: torch.Tensor, *, shape: tuple[int, ...], **_: Any) -> torch.Tensor:
    """Reshape-1: the shape as an attribute."""
    return _reshape(x, list(shape), 0)


@register("Reshape", 5, 13, static=(1,))
def reshape_v5(x: torch.Tensor, shape: Any) -> torch.Tensor:
    """Reshape-5/13: 0 copies the input dim, -1 is inferred."""
    return _reshape(x, ints(shape), 0)


@register("Reshape", *reference_versions("Reshape", since=14), static=(1,))
def reshape(x: torch.Tensor, shape: Any, *, allowzero: int = 0) -> torch.Tensor:
    """Reshape-14+: with ``allowzero`` a 0 is a real zero-sized dim."""
    return _reshape(x, ints(shape), allowzero)


@register("Flatten", *reference_versions("Flatten"))
def flatten(x: torch.Tensor, *, axis: int = 1) -> torch.Tensor:
    """Flatten to 2-D at ``axis``."""
    axis = _axis(axis, x.dim())
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@register("Transpose", *reference_versions("Transpose"))
def transpose(x: torch.Tensor, *, perm: tuple[int, ...] | None = None) -> torch.Tensor:
    """Transpose (default: reverse the axes)."""
    order = list(perm) if perm else list(range(x.dim()))[::-1]
    return x.permute(order)


@specializes("Transpose", *reference_versions("Transpose"))
def _direct_transpose(attrs: dict[str, Any], inputs: list[StepInput]) -> DirectCall | None:
    """Transpose is torch.permute with the order written into the call."""
    perm = attrs.get("perm")
    if not perm:
        if inputs[0].rank is None:
            return None
        perm = tuple(range(inputs[0].rank))[::-1]
    return DirectCall(torch.permute, (0,), {"dims": tuple(int(p) for p in perm)})


def _squeeze(x: torch.Tensor, axes: list[int] | None) -> torch.Tensor:
    if not axes:
        return x.reshape([d for d in x.shape if d != 1])
    drop = {_axis(a, x.dim()) for a in axes}
    return x.reshape([d for i, d in enumerate(x.shape) if i not in drop])


@register("Squeeze", 1, 11)
def squeeze_v1(x: torch.Tensor, *, axes: tuple[int, ...] | None = None) -> torch.Tensor:
    """Squeeze-1/11: axes as an attribute."""
    return _squeeze(x, list(axes) if axes else None)


@register("Squeeze", *reference_versions("Squeeze", since=13), static=(1,))
def squeeze(x: torch.Tensor, axes: Any = None) -> torch.Tensor:
    """Squeeze-13+: axes as an optional input."""
    return _squeeze(x, ints(axes) if axes is not None else None)


def _unsqueeze(x: torch.Tensor, axes: list[int]) -> torch.Tensor:
    rank = x.dim() + len(axes)
    inserted = sorted(_axis(a, rank) for a in axes)
    dims = list(x.shape)
    for a in inserted:
        dims.insert(a, 1)
    return x.reshape(dims)


@register("Unsqueeze", 1, 11)
def unsqueeze_v1(x: torch.Tensor, *, axes: tuple[int, ...]) -> torch.Tensor:
    """Unsqueeze-1/11: axes as an attribute."""
    return _unsqueeze(x, list(axes))


@register("Unsqueeze", *reference_versions("Unsqueeze", since=13), static=(1,))
def unsqueeze(x: torch.Tensor, axes: Any) -> torch.Tensor:
    """Unsqueeze-13+: axes as an input."""
    return _unsqueeze(x, ints(axes))


@register("Concat", *reference_versions("Concat"))
def concat(*xs: torch.Tensor, axis: int = 1) -> torch.Tensor:
    """Concat (Concat-1 defaults to axis 1)."""
    return torch.cat(list(xs), dim=axis)


def _split(x: torch.Tensor, axis: int, sizes: list[int]) -> Any:
    # A translation returns a tuple exactly when the node declares more than one output.
    parts = tuple(torch.split(x, sizes, dim=_axis(axis, x.dim())))
    return parts if len(parts) != 1 else parts[0]


def _equal_sizes(x: torch.Tensor, axis: int, parts: int) -> list[int]:
    dim = x.shape[_axis(axis, x.dim())]
    if dim % parts:
        raise ValueError(f"dimension {dim} cannot be split into {parts} equal parts")
    return [dim // parts] * parts


@register("Split", 1, static=(1,), n_outputs=True)
def split_v1(x: torch.Tensor, sizes: Any = None, *, n_outputs: int, axis: int | None = None,
             split: tuple[int, ...] | None = None) -> Any:
    """Split-1: sizes as the ``split`` attribute or the second input, else equal parts."""
    axis = 0 if axis is None else axis
    chosen = list(split) if split else (ints(sizes) if sizes is not None else [])
    return _split(x, axis, chosen or _equal_sizes(x, axis, n_outputs))


@register("Split", 2, 11, n_outputs=True)
def split_v2(x: torch.Tensor, *, n_outputs: int, axis: int = 0, split: tuple[int, ...] | None = None) -> Any:
    """Split-2/11: sizes as the ``split`` attribute, else equal parts."""
    return _split(x, axis, list(split) if split else _equal_sizes(x, axis, n_outputs))


@register("Split", 13, static=(1,), n_outputs=True)
def split_v13(x: torch.Tensor, split: Any = None, *, n_outputs: int, axis: int = 0) -> Any:
    """Split-13: sizes as an optional input, else equal parts."""
    sizes = ints(split) if split is not None else []
    return _split(x, axis, sizes or _equal_sizes(x, axis, n_outputs))


@register("Split", 18, static=(1,), n_outputs=True)
def split_v18(x: torch.Tensor, split: Any = None, *, n_outputs: int, axis: int = 0,
              num_outputs: int | None = None) -> Any:
    """Split-18: sizes as an input, or ``num_outputs`` chunks of ceil(dim/n) with a smaller last one."""
    sizes = ints(split) if split is not None else []
    if not sizes:
        dim = x.shape[_axis(axis, x.dim())]
        parts = num_outputs if num_outputs is not None else n_outputs
        chunk = -(-dim // parts)
        sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(parts)]
    return _split(x, axis, sizes)


def _slice(x: torch.Tensor, starts: list[int], ends: list[int], axes: list[int] | None,
           steps: list[int] | None) -> torch.Tensor:
    axes = axes if axes else list(range(len(starts)))
    steps = steps if steps else [1] * len(starts)
    index: list[Any] = [slice(None)] * x.dim()
    flips: list[tuple[int, list[int]]] = []
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        a = _axis(axis, x.dim())
        dim = x.shape[a]
        # Python's slice.indices clamps exactly as the spec does, for both step signs.
        begin, stop, stride = slice(start, end, step).indices(dim)
        if stride > 0:
            index[a] = slice(begin, stop, stride)
        else:
            flips.append((a, list(range(begin, stop, stride))))
    y = x[tuple(index)]
    for a, picked in flips:
        y = y.index_select(a, torch.tensor(picked, dtype=torch.int64, device=x.device))
    return y


@register("Slice", 1)
def slice_v1(x: torch.Tensor, *, starts: tuple[int, ...], ends: tuple[int, ...],
             axes: tuple[int, ...] | None = None) -> torch.Tensor:
    """Slice-1: starts/ends/axes as attributes."""
    return _slice(x, list(starts), list(ends), list(axes) if axes else None, None)


@register("Slice", 10, 11, 13, static=(1, 2, 3, 4))
def slice_(x: torch.Tensor, starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> torch.Tensor:
    """Slice-10+: starts/ends/axes/steps as inputs (negative steps included)."""
    return _slice(x, ints(starts), ints(ends), ints(axes) if axes is not None else None,
                  ints(steps) if steps is not None else None)


def _positive(indices: torch.Tensor, dim: int) -> torch.Tensor:
    indices = indices.to(torch.int64)
    return torch.where(indices < 0, indices + dim, indices)


@register("Gather", *reference_versions("Gather"))
def gather(x: torch.Tensor, indices: torch.Tensor, *, axis: int = 0) -> torch.Tensor:
    """Gather along ``axis`` (negative indices count from the back)."""
    a = _axis(axis, x.dim())
    idx = _positive(indices, x.shape[a])
    picked = x.index_select(a, idx.reshape(-1))
    return picked.reshape([*x.shape[:a], *idx.shape, *x.shape[a + 1:]])


@register("GatherElements", *reference_versions("GatherElements"))
def gather_elements(x: torch.Tensor, indices: torch.Tensor, *, axis: int = 0) -> torch.Tensor:
    """GatherElements."""
    a = _axis(axis, x.dim())
    return torch.gather(x, a, _positive(indices, x.shape[a]))


@register("GatherND", *reference_versions("GatherND"))
def gather_nd(x: torch.Tensor, indices: torch.Tensor, *, batch_dims: int = 0) -> torch.Tensor:
    """GatherND with ``batch_dims`` leading batch axes."""
    b = batch_dims
    k = indices.shape[-1]
    batch = math.prod(x.shape[:b])
    xf = x.reshape(batch, *x.shape[b:])
    idx = indices.to(torch.int64).reshape(batch, -1, k)
    cols = []
    for i in range(k):
        cols.append(_positive(idx[..., i], x.shape[b + i]))
    rows = torch.arange(batch, device=x.device).reshape(batch, 1).expand(batch, idx.shape[1])
    picked = xf[(rows, *cols)]
    return picked.reshape([*indices.shape[:-1], *x.shape[b + k:]])


@register("ScatterElements", *reference_versions("ScatterElements"))
def scatter_elements(x: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor, *, axis: int = 0,
                     reduction: str = "none") -> torch.Tensor:
    """ScatterElements (reduction none/add/mul/max/min)."""
    a = _axis(axis, x.dim())
    idx = _positive(indices, x.shape[a])
    if reduction == "none":
        return torch.scatter(x, a, idx, updates)
    name = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[reduction]
    return torch.scatter_reduce(x, a, idx, updates, name, include_self=True)


register("Scatter", *reference_versions("Scatter"))(scatter_elements)


@register("ScatterND", *reference_versions("ScatterND"))
def scatter_nd(x: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor, *, reduction: str = "none"
               ) -> torch.Tensor:
    """ScatterND (reduction none/add; mul/max/min element by element)."""
    k = indices.shape[-1]
    idx = indices.to(torch.int64).reshape(-1, k)
    cols = tuple(_positive(idx[:, i], x.shape[i]) for i in range(k))
    upd = updates.reshape(idx.shape[0], *x.shape[k:])
    if reduction in ("none", "add"):
        return x.index_put(cols, upd, accumulate=reduction == "add")
    out = x.clone()
    for row in range(idx.shape[0]):
        at = tuple(int(c[row]) for c in cols)
        if reduction == "mul":
            out[at] = out[at] * upd[row]
        elif reduction == "max":
            out[at] = torch.maximum(out[at], upd[row])
        else:
            out[at] = torch.minimum(out[at], upd[row])
    return out


@register("Expand", *reference_versions("Expand"), static=(1,))
def expand(x: torch.Tensor, shape: Any) -> torch.Tensor:
    """Expand: bidirectional broadcast of X to ``shape``."""
    target = torch.broadcast_shapes(tuple(x.shape), tuple(ints(shape)))
    return x.expand(target)


@register("Tile", 6, 13, static=(1,))
def tile(x: torch.Tensor, repeats: Any) -> torch.Tensor:
    """Tile-6/13."""
    return x.repeat(ints(repeats)) if x.dim() else x.clone()


@register("Tile", 1, static=(1, 2))
def tile_v1(x: torch.Tensor, tiles: Any, axis: Any) -> torch.Tensor:
    """Tile-1: ``tiles`` copies along ``axis``."""
    reps = [1] * x.dim()
    reps[_axis(ints(axis)[0], x.dim())] = ints(tiles)[0]
    return x.repeat(reps)


def _pad(x: torch.Tensor, pads: list[int], mode: str, value: Any, axes: list[int] | None = None) -> torch.Tensor:
    rank = x.dim()
    chosen = [_axis(a, rank) for a in axes] if axes else list(range(rank))
    n = len(chosen)
    begin = dict(zip(chosen, pads[:n], strict=True))
    end = dict(zip(chosen, pads[n:], strict=True))
    # Negative pads crop first; what is left is non-negative padding.
    crop = tuple(slice(max(-begin.get(a, 0), 0), x.shape[a] - max(-end.get(a, 0), 0)) for a in range(rank))
    x = x[crop]
    b = {a: max(v, 0) for a, v in begin.items()}
    e = {a: max(v, 0) for a, v in end.items()}
    if mode == "constant":
        flat: list[int] = []
        for a in reversed(range(rank)):
            flat += [b.get(a, 0), e.get(a, 0)]
        fill = 0 if value is None else value
        if not any(flat):
            return x
        return F.pad(x, flat, mode="constant", value=fill)
    for a in range(rank):
        lo, hi = b.get(a, 0), e.get(a, 0)
        if not lo and not hi:
            continue
        dim = x.shape[a]
        positions = range(-lo, dim + hi)
        if mode == "edge":
            picked = [min(max(p, 0), dim - 1) for p in positions]
        elif mode == "wrap":
            picked = [p % dim for p in positions]
        elif mode == "reflect":
            period = 2 * (dim - 1)
            picked = []
            for p in positions:
                q = p % period if period else 0
                picked.append(q if q < dim else period - q)
        else:
            raise ValueError(f"unknown Pad mode {mode!r}")
        x = x.index_select(a, torch.tensor(picked, dtype=torch.int64, device=x.device))
    return x


def _scalar(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return value.reshape(-1)[0].item() if value.numel() else None
    arr = static_array(value).reshape(-1)
    return arr[0].item() if arr.size else None


@register("Pad", 1)
def pad_v1(x: torch.Tensor, *, mode: str = "constant", paddings: tuple[int, ...], value: float = 0.0
           ) -> torch.Tensor:
    """Pad-1: ``paddings`` attribute."""
    return _pad(x, list(paddings), mode, value)


@register("Pad", 2)
def pad_v2(x: torch.Tensor, *, mode: str = "constant", pads: tuple[int, ...], value: float = 0.0) -> torch.Tensor:
    """Pad-2: ``pads`` attribute."""
    return _pad(x, list(pads), mode, value)


@register("Pad", 11, 13, static=(1,))
def pad_v11(x: torch.Tensor, pads: Any, constant_value: Any = None, *, mode: str = "constant") -> torch.Tensor:
    """Pad-11/13: pads and the constant value as inputs."""
    return _pad(x, ints(pads), mode, _scalar(constant_value))


@register("Pad", *reference_versions("Pad", since=18), static=(1, 3))
def pad(x: torch.Tensor, pads: Any, constant_value: Any = None, axes: Any = None, *, mode: str = "constant"
        ) -> torch.Tensor:
    """Pad-18+: optional ``axes`` input; modes constant, reflect, edge, wrap."""
    return _pad(x, ints(pads), mode, _scalar(constant_value), ints(axes) if axes is not None else None)


@register("ConstantOfShape", *reference_versions("ConstantOfShape"), static=(0,))
def constant_of_shape(shape: Any, *, value: Any = None) -> torch.Tensor:
    """ConstantOfShape: ``value`` (a one-element tensor; float32 0 by default) broadcast to ``shape``."""
    dims = ints(shape)
    if value is None:
        return torch.zeros(dims, dtype=torch.float32)
    fill = value if isinstance(value, torch.Tensor) else from_numpy(value)
    return fill.reshape(()).expand(dims).clone()


@register("Range", *reference_versions("Range"), static=(0, 1, 2))
def range_(start: Any, limit: Any, delta: Any, **_: Any) -> torch.Tensor:
    """Range: max(ceil((limit - start) / delta), 0) elements, in the dtype of ``start``.

    The three scalars are shape-like (static): tensors, or folded Python numbers (an int means
    int64, a float float32, the dtypes ONNX models use for Range).
    """
    # Range-27's stash_type (the precision of the accumulation) needs nothing here: every element
    # is computed directly as start + i * delta in double precision.
    dtype = start.dtype if isinstance(start, torch.Tensor) else from_numpy(static_array(start)).dtype
    if dtype == torch.float64 and not isinstance(start, torch.Tensor):
        dtype = torch.float32
    first, last, step = (static_array(v).reshape(-1)[0].item() for v in (start, limit, delta))
    count = max(math.ceil((last - first) / step), 0)
    device = start.device if isinstance(start, torch.Tensor) else None
    work = torch.float64 if dtype.is_floating_point else torch.int64
    return (torch.arange(count, device=device, dtype=work) * step + first).to(dtype)


# Node test cases the torch bridge does not claim, each with its reason (gathered by
# sealtrace.torchops.registry.conformance_exclusions, as the reference gathers its own).
NO_TORCH_DTYPE = (
    "torch has no usable 2/4-bit type: torch.int2/int4/uint2/uint4 are placeholders without conversion or "
    "arithmetic kernels, and float4_e2m1fn_x2 packs two values per element (a different shape)"
)
_NARROW_TYPES = ("FLOAT4E2M1", "INT2", "INT4", "UINT2", "UINT4")
_CAST_CASES = [
    *(f"{source}_to_{narrow}" for source in ("FLOAT16", "FLOAT") for narrow in _NARROW_TYPES),
    *(f"{narrow}_to_{target}" for narrow in _NARROW_TYPES
      for target in ("FLOAT", "FLOAT16", *{"INT": ("INT8",), "UINT": ("UINT8",)}.get(narrow[:-1], ()))),
]
CONFORMANCE_EXCLUSIONS: dict[str, str] = {
    **{f"test_cast_{case}": NO_TORCH_DTYPE for case in _CAST_CASES},
    **{f"test_castlike_{case}{suffix}": NO_TORCH_DTYPE for case in _CAST_CASES for suffix in ("", "_expanded")},
}


@register("Cast", *reference_versions("Cast"))
def cast(x: torch.Tensor, *, to: int, saturate: int = 1, round_mode: str = "up", **_: Any) -> Any:
    """Cast to the ONNX element type ``to`` (4-bit targets have no torch dtype; a string target
    is the reference kernel's formatting, a NumPy object array, with no gradient).

    float8 targets follow the spec's table: with ``saturate`` (the default) values beyond the
    type's range, infinities included, become its largest value; without it they become inf where
    the type has one, else NaN.
    """
    if int(to) == onnx.TensorProto.STRING:
        from sealtrace.ops.cast import _cast
        from sealtrace.torchops.dtypes import to_numpy

        return _cast(to_numpy(x), np.dtype(object), saturate, round_mode)
    target = torch_dtype(int(to))
    if target == torch.float8_e8m0fnu:
        return _to_e8m0(x, saturate, round_mode)
    if target in _FLOAT8 and x.is_floating_point():
        top = torch.finfo(target).max
        if saturate:
            x = torch.clamp(x, -top, top)
        else:
            # Values that round past the largest finite one: beyond top + half its last step.
            below = (torch.tensor(top).to(target).view(torch.uint8) - 1).view(target).float().item()
            beyond = torch.abs(x.float()) >= top + (top - below) / 2
            overflow = float("inf") if target == torch.float8_e5m2 else float("nan")
            x = torch.where(beyond, torch.copysign(torch.full_like(x, overflow), x), x)
    return x.to(target)


def _to_e8m0(x: torch.Tensor, saturate: int, round_mode: str) -> torch.Tensor:
    """float8e8m0 (a bare biased power-of-two exponent) from the float32 bits of ``x``, rounded by
    ``round_mode`` as the spec (and the reference) does: torch's own cast rounds differently."""
    bits = x.to(torch.float32).view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    exponent = (bits >> 23) & 0xFF
    fraction = bits & 0x7FFFFF
    special = exponent == 0xFF
    if round_mode == "up":
        carry = fraction > 0
    elif round_mode == "down":
        carry = torch.zeros_like(special)
    elif round_mode == "nearest":
        carry = (fraction & 0x400000) > 0
    else:
        raise ValueError(f"Cast round_mode must be 'up', 'down' or 'nearest', got {round_mode!r}")
    exponent = exponent + (carry & ~special).to(torch.int64)
    if saturate:
        exponent = torch.where(~special & (exponent > 0xFE), 0xFE, exponent)
        exponent = torch.where(special & ~torch.isnan(x.to(torch.float32)), 0xFE, exponent)
    exponent = torch.clamp(exponent, max=0xFF)
    return exponent.to(torch.uint8).view(torch.float8_e8m0fnu)


_FLOAT8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz)


@register("CastLike", *reference_versions("CastLike"))
def cast_like(x: torch.Tensor, like: torch.Tensor, *, saturate: int = 1, **_: Any) -> torch.Tensor:
    """CastLike: X in the dtype of the second input."""
    from sealtrace.torchops.dtypes import onnx_elem_type

    return cast(x, to=onnx_elem_type(like.dtype), saturate=saturate)


@register("Constant", *reference_versions("Constant"))
def constant(**attrs: Any) -> Any:
    """Constant: whichever value attribute is set (strings as a NumPy object array: torch has none)."""
    for key in ("value", "sparse_value"):
        if attrs.get(key) is not None:
            v = attrs[key]
            if isinstance(v, np.ndarray) and v.dtype.kind in "OSU":
                return v
            return v if isinstance(v, torch.Tensor) else from_numpy(v)
    for key in ("value_string", "value_strings"):
        if attrs.get(key) is not None:
            strings = np.empty(len(attrs[key]) if key == "value_strings" else (), dtype=object)
            strings[...] = list(attrs[key]) if key == "value_strings" else attrs[key]
            return strings
    if attrs.get("value_float") is not None:
        return torch.tensor(attrs["value_float"], dtype=torch.float32)
    if attrs.get("value_floats") is not None:
        return torch.tensor(list(attrs["value_floats"]), dtype=torch.float32)
    if attrs.get("value_int") is not None:
        return torch.tensor(attrs["value_int"], dtype=torch.int64)
    if attrs.get("value_ints") is not None:
        return torch.tensor(list(attrs["value_ints"]), dtype=torch.int64)
    raise ValueError("Constant without a numeric value (strings have no torch equivalent)")


@register("EyeLike", *reference_versions("EyeLike"))
def eye_like(x: torch.Tensor, *, dtype: int | None = None, k: int = 0) -> torch.Tensor:
    """EyeLike: ones on the k-th diagonal, shaped like X."""
    target = torch_dtype(dtype) if dtype else x.dtype
    rows = torch.arange(x.shape[0], device=x.device).reshape(-1, 1)
    cols = torch.arange(x.shape[1], device=x.device).reshape(1, -1)
    return (cols - rows == k).to(target)


@register("Trilu", *reference_versions("Trilu"), static=(1,))
def trilu(x: torch.Tensor, k: Any = None, *, upper: int = 1) -> torch.Tensor:
    """Trilu: upper (triu) or lower (tril) triangle from diagonal ``k``."""
    diag = ints(k)[0] if k is not None else 0
    return torch.triu(x, diag) if upper else torch.tril(x, diag)


@register("DepthToSpace", *reference_versions("DepthToSpace"))
def depth_to_space(x: torch.Tensor, *, blocksize: int, mode: str = "DCR") -> torch.Tensor:
    """DepthToSpace (DCR or CRD)."""
    n, c, h, w = x.shape
    b = blocksize
    if mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@register("SpaceToDepth", *reference_versions("SpaceToDepth"))
def space_to_depth(x: torch.Tensor, *, blocksize: int, mode: str = "DCR") -> torch.Tensor:
    """SpaceToDepth (DCR; CRD from version 28)."""
    n, c, h, w = x.shape
    b = blocksize
    order = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    y = x.reshape(n, c, h // b, b, w // b, b).permute(order)
    return y.reshape(n, c * b * b, h // b, w // b)


@register("OneHot", *reference_versions("OneHot"), static=(1,))
def one_hot(indices: torch.Tensor, depth: Any, values: torch.Tensor, *, axis: int = -1) -> torch.Tensor:
    """OneHot: off/on values from ``values``; negative indices count from the back."""
    d = int(floats(depth)[0])
    idx = indices.to(torch.int64)
    idx = torch.where(idx < 0, idx + d, idx)
    valid = (idx >= 0) & (idx < d)
    hot = F.one_hot(torch.where(valid, idx, torch.zeros_like(idx)), d) * valid.unsqueeze(-1)
    rank = hot.dim()
    a = _axis(axis, rank)
    hot = hot.movedim(-1, a)
    return torch.where(hot.bool(), values[1], values[0])


@register("CumSum", *reference_versions("CumSum"), static=(1,))
def cum_sum(x: torch.Tensor, axis: Any, *, exclusive: int = 0, reverse: int = 0) -> torch.Tensor:
    """CumSum with ``exclusive`` and ``reverse``."""
    a = _axis(ints(axis)[0], x.dim())
    y = x.flip(a) if reverse else x
    out = torch.cumsum(y, dim=a).to(x.dtype)
    if exclusive:
        out = out - y
    return out.flip(a) if reverse else out


@register("NonZero", *reference_versions("NonZero"))
def non_zero(x: torch.Tensor) -> torch.Tensor:
    """NonZero: indices [rank, count] in row-major order."""
    if x.dim() == 0:
        return torch.zeros((0, int(bool(x))), dtype=torch.int64)
    return torch.nonzero(x).T.contiguous()


# Without a seed attribute the spec lets the runtime pick one; the reference's fixed one keeps the
# two backends' masks identical.
_DEFAULT_DROPOUT_SEED = 0


def _dropout(x: torch.Tensor, ratio: float, training: bool, seed: int | None, mask_dtype: torch.dtype,
             n_outputs: int) -> Any:
    """Dropout: the identity in inference; in training the reference's seeded mask (NumPy's
    RandomState, the generator ONNX's conformance data uses) applied in torch, so X's gradient flows."""
    if not training or ratio == 0:
        outputs: tuple[Any, ...] = (x, torch.ones(x.shape, dtype=mask_dtype, device=x.device))
    else:
        rng = np.random.RandomState(_DEFAULT_DROPOUT_SEED if seed is None else seed)
        keep = torch.from_numpy(np.asarray(rng.uniform(0, 1.0, tuple(x.shape)) >= ratio)).to(x.device)
        compute = torch.promote_types(x.dtype, torch.float32)
        one = torch.ones((), dtype=compute)
        scale = one / (one - torch.tensor(ratio, dtype=torch.float64).to(compute))
        dropped = torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))
        outputs = ((dropped * scale).to(x.dtype), keep.to(mask_dtype))
    return outputs[:n_outputs] if n_outputs > 1 else outputs[0]


@register("Dropout", 1, 6, n_outputs=True)
def dropout_v1(x: torch.Tensor, *, n_outputs: int, is_test: int = 0, ratio: float = 0.5, **_: Any) -> Any:
    """Dropout-1/6: seeded random dropout unless ``is_test``; the mask has X's dtype."""
    return _dropout(x, ratio, not is_test, None, x.dtype, n_outputs)


@register("Dropout", 7, n_outputs=True)
def dropout_v7(x: torch.Tensor, *, n_outputs: int, ratio: float = 0.5) -> Any:
    """Dropout-7: the identity; a mask of ones in X's dtype."""
    return _dropout(x, ratio, False, None, x.dtype, n_outputs)


@register("Dropout", 10, n_outputs=True)
def dropout_v10(x: torch.Tensor, *, n_outputs: int, ratio: float = 0.5) -> Any:
    """Dropout-10: the identity; a bool mask of ones."""
    return _dropout(x, ratio, False, None, torch.bool, n_outputs)


@register("Dropout", *reference_versions("Dropout", since=12), static=(1, 2), n_outputs=True)
def dropout(x: torch.Tensor, ratio: Any = None, training_mode: Any = None, *, n_outputs: int,
            seed: int | None = None) -> Any:
    """Dropout-12+: the identity unless ``training_mode``, then seeded random dropout; a bool mask."""
    rate = 0.5 if ratio is None else floats(ratio)[0]
    training = training_mode is not None and bool(ints(training_mode)[0])
    return _dropout(x, rate, training, seed, torch.bool, n_outputs)


@register("Einsum", *reference_versions("Einsum"))
def einsum(*xs: torch.Tensor, equation: str) -> torch.Tensor:
    """Einsum."""
    return torch.einsum(equation, *xs)


@register("Det", *reference_versions("Det"))
def det(x: torch.Tensor) -> torch.Tensor:
    """Det."""
    return torch.linalg.det(x)


@register("TopK", 1)
def top_k_v1(x: torch.Tensor, *, axis: int = -1, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """TopK-1: k as an attribute."""
    values, indices = torch.topk(x, k, dim=axis, largest=True, sorted=True)
    return values, indices


@register("TopK", 10, 11, 24, static=(1,))
def top_k(x: torch.Tensor, k: Any, *, axis: int = -1, largest: int = 1, sorted: int = 1
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """TopK-10+: ties keep the lower index first, as the spec asks (a stable sort)."""
    count = ints(k)[0]
    a = _axis(axis, x.dim())
    keys = x.to(torch.int64) if x.dtype in (torch.uint16, torch.uint32, torch.uint64) else x
    order = torch.sort(keys, dim=a, descending=bool(largest), stable=True).indices.narrow(a, 0, count)
    return torch.gather(keys, a, order).to(x.dtype), order


def _arg(x: torch.Tensor, axis: int, keepdims: int, select_last_index: int, largest: bool) -> torch.Tensor:
    a = _axis(axis, x.dim())
    y = x.flip(a) if select_last_index else x
    idx = torch.argmax(y, dim=a, keepdim=True) if largest else torch.argmin(y, dim=a, keepdim=True)
    if select_last_index:
        idx = x.shape[a] - 1 - idx
    return idx if keepdims else idx.squeeze(a)


@register("ArgMax", *reference_versions("ArgMax"))
def arg_max(x: torch.Tensor, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> torch.Tensor:
    """ArgMax."""
    return _arg(x, axis, keepdims, select_last_index, True)


@register("ArgMin", *reference_versions("ArgMin"))
def arg_min(x: torch.Tensor, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> torch.Tensor:
    """ArgMin."""
    return _arg(x, axis, keepdims, select_last_index, False)



@register("TensorScatter", *reference_versions("TensorScatter"))
def tensor_scatter(past_cache: torch.Tensor, update: torch.Tensor, write_indices: torch.Tensor | None = None, *,
                   axis: int = -2, mode: str = "linear") -> torch.Tensor:
    """TensorScatter: ``update`` written into a copy of the cache at per-batch offsets along ``axis``
    (``circular`` wraps around the cache length)."""
    a = _axis(axis, past_cache.dim())
    if a == 0:
        raise ValueError("TensorScatter axis cannot be the batch axis")
    if mode not in ("linear", "circular"):
        raise ValueError(f"unknown TensorScatter mode {mode!r}")
    batch, max_len, seq_len = past_cache.shape[0], past_cache.shape[a], update.shape[a]
    expected = (*past_cache.shape[:a], seq_len, *past_cache.shape[a + 1:])
    if update.dim() != past_cache.dim() or tuple(update.shape) != tuple(expected) or seq_len > max_len:
        raise ValueError(f"update shape {tuple(update.shape)} does not fit cache shape {tuple(past_cache.shape)} "
                         f"on axis {a}")
    starts = torch.zeros(batch, dtype=torch.int64, device=past_cache.device) if write_indices is None \
        else write_indices.to(torch.int64)
    positions = starts[:, None] + torch.arange(seq_len, device=past_cache.device)
    if mode == "circular":
        positions = positions % max_len
    elif seq_len and (int(positions.min()) < 0 or int(positions.max()) >= max_len):
        raise ValueError("TensorScatter linear write runs past the cache")
    # The sequence axis next to the batch axis: one index_put writes every row (differentiable in both).
    target = past_cache.movedim(a, 1)
    rows = torch.arange(batch, device=past_cache.device)[:, None].expand(batch, seq_len)
    present = target.index_put((rows, positions), update.movedim(a, 1))
    return present.movedim(1, a)
