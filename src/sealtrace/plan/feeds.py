"""Checks a run's feeds against the Plan's declared inputs before any op runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from sealtrace.arrayfiles import as_declared
from sealtrace.errors import InputError
from sealtrace.plan.model import Plan, ValueInfo


def check_feeds(plan: Plan, feeds: Mapping[str, Any]) -> dict[str, Any]:
    """Return the feeds as arrays, or raise InputError naming every wrong or missing input."""
    if not isinstance(feeds, Mapping):
        raise InputError(f"feeds must be a mapping of input name to array, not {type(feeds).__name__}")
    declared = plan.inputs_by_name
    problems: list[str] = []
    for name in feeds:
        if name not in declared:
            if name in plan.initializers:
                problems.append(f"{name!r} is a weight (initializer) of the model, not an input")
            else:
                problems.append(f"unknown input {name!r} (inputs are: {', '.join(declared) or 'none'})")
    checked: dict[str, Any] = {}
    for name, info in declared.items():
        if name not in feeds:
            problems.append(f"missing input {name!r} ({info.describe()})")
            continue
        value = as_declared(feeds[name], info.dtype) if isinstance(feeds[name], np.ndarray) else feeds[name]
        problem = _check_value(info, value)
        if problem:
            problems.append(f"input {name!r}: {problem}")
        else:
            checked[name] = value
    if problems:
        raise InputError("; ".join(problems))
    return checked


def _check_value(info: ValueInfo, value: Any) -> str | None:
    if info.kind == "sequence":
        if not isinstance(value, list):
            return f"expected a sequence (list of arrays), got {type(value).__name__}"
        return None
    if info.kind == "map":
        if not isinstance(value, Mapping):
            return f"expected a map (dict), got {type(value).__name__}"
        return None
    if info.kind == "optional":
        if isinstance(value, np.ndarray):
            return _check_value(ValueInfo(info.name, "tensor", info.dtype, info.shape), value)
        return None
    if not isinstance(value, np.ndarray):
        return f"expected a numpy array, got {type(value).__name__}"
    strings = info.dtype is not None and info.dtype.kind == "O" and value.dtype.kind in "OUS"
    if info.dtype is not None and value.dtype != info.dtype and not strings:
        return f"dtype {value.dtype} does not match the model's {info.dtype}"
    if info.shape is not None:
        if value.ndim != len(info.shape):
            return f"shape {list(value.shape)} has rank {value.ndim}; the model expects {info.describe()}"
        for axis, (want, got) in enumerate(zip(info.shape, value.shape, strict=True)):
            if isinstance(want, int) and want > 0 and want != got:
                return f"shape {list(value.shape)}: axis {axis} is {got}, the model expects {want} ({info.describe()})"
    return None
