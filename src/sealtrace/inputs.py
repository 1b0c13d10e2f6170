"""Feeds for a run: read from .npy/.npz files, or drawn at random from a seed."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sealtrace import arrayfiles
from sealtrace.arrayfiles import load_npy
from sealtrace.errors import InputError
from sealtrace.limits import check_allocation
from sealtrace.outputs import atomic_output
from sealtrace.plan.model import Plan, ValueInfo


def load_array(path: str | os.PathLike[str]) -> np.ndarray:
    """Read one .npy file (no pickles; its declared size checked before allocating)."""
    return load_npy(path)


def load_npz(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Read every array of a .npz file, keyed by name (no pickles; declared sizes checked first)."""
    return arrayfiles.load_npz(path)


def parse_assignments(items: Sequence[str], what: str) -> dict[str, str]:
    """Parse NAME=VALUE pairs from the command line."""
    parsed: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise InputError(f"{what} {item!r}: expected NAME=VALUE")
        parsed[name] = value
    return parsed


def random_feeds(
    inputs: Sequence[ValueInfo], seed: int = 0, dims: Mapping[str, int] | None = None
) -> dict[str, np.ndarray]:
    """Random values for ``inputs`` (e.g. ``plan.inputs``) of their declared dtypes and shapes.

    Named dynamic dimensions take their size from ``dims`` (by name, or 'INPUT:AXIS').
    """
    rng = np.random.default_rng(seed)
    dims = dict(dims or {})
    feeds: dict[str, np.ndarray] = {}
    shapes = {info.name: _concrete_shape(info, dims) for info in inputs}
    # Every shape is known before any value is drawn: --dim batch=10**9 is refused, not attempted.
    # Floats are drawn as float64 and then cast, so that is what the budget is checked against.
    declared = 0
    for info in inputs:
        itemsize = max(8, info.dtype.itemsize if info.dtype is not None else 4)
        declared += int(np.prod(shapes[info.name], dtype=object)) * itemsize
    check_allocation(declared, "--random-inputs")
    for info in inputs:
        feeds[info.name] = _random_array(rng, info, shapes[info.name])
    return feeds


def _concrete_shape(info: ValueInfo, dims: Mapping[str, int]) -> tuple[int, ...]:
    if info.kind == "map":
        raise InputError(f"input {info.name!r} is a map: feed it from Python (Session.run with a dict)")
    if info.kind != "tensor" or info.shape is None:
        raise InputError(f"input {info.name!r}: {info.describe()} has no static shape; give it with --input")
    shape: list[int] = []
    for axis, dim in enumerate(info.shape):
        if isinstance(dim, int) and dim > 0:
            shape.append(dim)
        elif isinstance(dim, str) and dim in dims:
            shape.append(int(dims[dim]))
        elif f"{info.name}:{axis}" in dims:
            shape.append(int(dims[f"{info.name}:{axis}"]))
        else:
            label = repr(dim) if isinstance(dim, str) else f"{info.name}:{axis}"
            raise InputError(
                f"input {info.name!r} ({info.describe()}): dynamic dimension {label} needs --dim {label.strip(chr(39))}=SIZE"
            )
    return tuple(shape)


def _random_array(rng: np.random.Generator, info: ValueInfo, shape: tuple[int, ...]) -> np.ndarray:
    from sealtrace.ops.numerics import format_of, is_float, round_to  # the kernels' import: only when drawing

    dtype = info.dtype if info.dtype is not None else np.dtype(np.float32)
    if is_float(dtype):  # bfloat16 too: rounded once from float64, as NumPy rounds into float16/32
        values = rng.standard_normal(shape)
        fmt = format_of(dtype)
        return round_to(values, fmt) if fmt is not None else values.astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 16, size=shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    raise InputError(f"input {info.name!r}: cannot draw random values of dtype {dtype}")


def gather_feeds(
    plan: Plan,
    input_files: Sequence[str] = (),
    npz_files: Sequence[str] = (),
    random: bool = False,
    seed: int = 0,
    dims: Sequence[str] = (),
) -> dict[str, Any]:
    """Feeds from the CLI's --input/--inputs/--random-inputs/--dim options, files first."""
    feeds: dict[str, Any] = {}
    for npz in npz_files:
        feeds.update(load_npz(npz))
    for name, path in parse_assignments(input_files, "--input").items():
        feeds[name] = load_array(Path(path))
    if random:
        sizes: dict[str, int] = {}
        for name, value in parse_assignments(dims, "--dim").items():
            try:
                sizes[name] = int(value)
            except ValueError:
                raise InputError(f"--dim {name}={value}: size must be an integer") from None
            if sizes[name] <= 0:
                raise InputError(f"--dim {name}={value}: size must be positive")
        _check_dim_names(plan.inputs, sizes)
        missing = [v for v in plan.inputs if v.name not in feeds]
        feeds.update(random_feeds(missing, seed, sizes))
    elif dims:
        raise InputError("--dim sizes dynamic dimensions of --random-inputs; give it with --random-inputs")
    return feeds


def _check_dim_names(inputs: Sequence[ValueInfo], sizes: Mapping[str, int]) -> None:
    """Every --dim must name a dynamic dimension of an input: a typo is not silently ignored."""
    known: set[str] = set()
    for info in inputs:
        for axis, dim in enumerate(info.shape or ()):
            if not (isinstance(dim, int) and dim > 0):
                known.add(f"{info.name}:{axis}")
                if isinstance(dim, str):
                    known.add(dim)
    unknown = sorted(set(sizes) - known)
    if unknown:
        offered = ", ".join(sorted(known)) or "none: every input has a static shape"
        raise InputError(f"--dim {', '.join(unknown)}: no input has such a dynamic dimension (dynamic: {offered})")


def write_npz_atomically(path: Path, arrays: Mapping[str, np.ndarray], force: bool = True) -> None:
    """Write ``arrays`` to ``path`` whole or not at all (sealtrace.outputs.atomic_output); bfloat16
    arrays under their type's name (sealtrace.arrayfiles.save_npz).

    A directory that vanished meanwhile is a typed OutputPathError, not an internal error.
    """
    with atomic_output(path, force=force) as f:
        arrayfiles.save_npz(f, dict(arrays))
