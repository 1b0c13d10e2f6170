"""Torch translations of ONNX operators, registered by (op_type, since_version) like the NumPy kernels.

Calling convention (the same as :mod:`sealtrace.ops.registry`): ``fn(*inputs, **attributes)``;
omitted optional inputs arrive as ``None``; attributes arrive resolved with their schema defaults.
Tensor inputs arrive as ``torch.Tensor``. Inputs listed in ``static`` are shape-like (a Reshape's
shape, a Slice's starts, a Split's sizes ...): they arrive as whatever the caller has, a tensor or a
value folded at conversion time (a list or number), and translations read them with :func:`ints` /
:func:`floats`, so the same function serves the step-by-step backend and the fx module. A
translation registered with ``n_outputs=True`` also receives ``n_outputs`` (how many outputs the
node declares), which Split and the recurrent ops need.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

TranslationFn = Callable[..., Any]


@dataclass(frozen=True)
class Translation:
    """One torch implementation of an ONNX operator at one schema version."""

    op_type: str
    since_version: int
    fn: TranslationFn
    static: tuple[int, ...] = ()
    n_outputs: bool = False


_TRANSLATIONS: dict[tuple[str, int], Translation] = {}


def register(
    op_type: str, *since_versions: int, static: tuple[int, ...] = (), n_outputs: bool = False
) -> Callable[[TranslationFn], TranslationFn]:
    """Register the decorated function for ``op_type`` (default domain) at each of ``since_versions``."""
    if not since_versions:
        raise ValueError(f"register({op_type!r}) needs at least one since_version")

    def decorate(fn: TranslationFn) -> TranslationFn:
        for version in since_versions:
            key = (op_type, version)
            if key in _TRANSLATIONS:
                raise ValueError(f"translation for {key} registered twice")
            _TRANSLATIONS[key] = Translation(op_type, version, fn, static, n_outputs)
        return fn

    return decorate


def reference_versions(op_type: str, *, since: int = 0, until: int | None = None) -> tuple[int, ...]:
    """The since_versions the NumPy reference registers for ``op_type`` in [since, until]."""
    from sealtrace.ops.registry import registered_ops

    versions = registered_ops().get(("", op_type), [])
    return tuple(v for v in versions if v >= since and (until is None or v <= until))


def lookup(domain: str, op_type: str, since_version: int) -> Translation | None:
    """The translation for exactly this schema version, or None (other domains have none)."""
    if domain not in ("", "ai.onnx"):
        return None
    return _TRANSLATIONS.get((op_type, since_version))


def registered_translations() -> dict[str, list[int]]:
    """Every translated op type with its sorted since_versions."""
    ops: dict[str, list[int]] = {}
    for op_type, version in _TRANSLATIONS:
        ops.setdefault(op_type, []).append(version)
    return {k: sorted(v) for k, v in sorted(ops.items())}


def static_array(value: Any) -> np.ndarray:
    """A static (shape-like) input as a NumPy array, whether it is a tensor, list or number."""
    if value is None:
        return np.zeros(0, dtype=np.int64)
    if hasattr(value, "detach"):
        return np.asarray(value.detach().cpu().numpy())
    return np.asarray(value)


def ints(value: Any) -> list[int]:
    """A static input as a list of Python ints (a scalar becomes a one-element list)."""
    return [int(v) for v in static_array(value).reshape(-1).tolist()]


def floats(value: Any) -> list[float]:
    """A static input as a list of Python floats."""
    return [float(v) for v in static_array(value).reshape(-1).tolist()]
