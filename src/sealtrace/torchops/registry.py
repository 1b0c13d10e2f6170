"""Torch translations of ONNX operators, registered by (op_type, since_version) like the NumPy kernels.

Calling convention (the same as :mod:`sealtrace.ops.registry`): ``fn(*inputs, **attributes)``;
omitted optional inputs arrive as ``None``; attributes arrive resolved with their schema defaults.
Tensor inputs arrive as ``torch.Tensor``. Inputs listed in ``static`` are shape-like (a Reshape's
shape, a Slice's starts, a Split's sizes ...): they arrive as whatever the caller has, a tensor or a
value folded at conversion time (a list or number), and translations read them with :func:`ints` /
:func:`floats`, so the same function serves the step-by-step backend and the fx module. A
translation registered with ``n_outputs=True`` also receives ``n_outputs`` (how many outputs the
node declares), which Split and the recurrent ops need; one registered with ``subgraphs=True``
receives each subgraph attribute as a callable (inputs in, list of outputs out).

Some operators run their NumPy reference kernel inside the module instead of a torch formulation
(:func:`register_reference_kernel`): those on strings, which torch cannot hold, and those whose
outputs are piecewise constant in their inputs (indices, counts, tree decisions), where a torch
formulation would only add a second implementation to keep exact. Each such registration carries
its reason; :func:`reference_kernel_ops` lists them for the docs and tests.
"""

from __future__ import annotations

import dataclasses
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
    domain: str = ""
    # Why the step runs its NumPy reference kernel instead of torch ops ("" for a torch formulation).
    reference_kernel: str = ""
    # The op holds subgraphs (SequenceMap's body, FlexAttention's modifiers): the executors pass
    # each as a keyword argument, a callable taking the subgraph's inputs and returning its outputs.
    subgraphs: bool = False
    # Called by the fx converter (see :func:`specializes`): a cheaper call for this step, or None.
    specialize: Specializer | None = None


@dataclass(frozen=True)
class DirectCall:
    """A step as one call of a plain torch function: ``target(*inputs named by position, **kwargs)``."""

    target: Callable[..., Any]
    inputs: tuple[int, ...]
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class StepInput:
    """What the fx converter knows of one step input when it builds the module."""

    value: Any = None  # the value, when known at conversion time (a NumPy array)
    dtype: Any = None  # its torch dtype, when known (a known value, a weight, or shape inference)
    present: bool = True  # False for an omitted optional input
    rank: int | None = None  # its rank, when known


Specializer = Callable[[dict[str, Any], list[StepInput]], "DirectCall | None"]

_TRANSLATIONS: dict[tuple[str, str, int], Translation] = {}


def specializes(op_type: str, *since_versions: int, domain: str = "") -> Callable[[Specializer], Specializer]:
    """Register the decorated function as the fx converter's specializer of ``op_type``'s translation.

    Called once per step when a module is built, with the step's attributes and what is known of its
    inputs, it returns a :class:`DirectCall`, the step as one plain torch call (``F.conv2d`` with
    its padding worked out, ``torch.clamp`` with number bounds, ``torch.add`` of two float tensors),
    or None to keep the translation. The call must compute what the translation computes, for any
    value of the run-time inputs; it saves the translation's Python work on every run.
    """

    def decorate(specializer: Specializer) -> Specializer:
        for version in since_versions:
            key = (_domain(domain), op_type, version)
            if key not in _TRANSLATIONS:
                raise ValueError(f"specializer for {key}, which has no translation")
            _TRANSLATIONS[key] = dataclasses.replace(_TRANSLATIONS[key], specialize=specializer)
        return specializer

    return decorate


def _domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def register(
    op_type: str, *since_versions: int, static: tuple[int, ...] = (), n_outputs: bool = False, domain: str = "",
    subgraphs: bool = False,
) -> Callable[[TranslationFn], TranslationFn]:
    """Register the decorated function for ``op_type`` (of ``domain``) at each of ``since_versions``."""
    if not since_versions:
        raise ValueError(f"register({op_type!r}) needs at least one since_version")

    def decorate(fn: TranslationFn) -> TranslationFn:
        for version in since_versions:
            _add(Translation(op_type, version, fn, static, n_outputs, _domain(domain), subgraphs=subgraphs))
        return fn

    return decorate


def _add(translation: Translation) -> None:
    key = (translation.domain, translation.op_type, translation.since_version)
    if key in _TRANSLATIONS:
        raise ValueError(f"translation for {key} registered twice")
    _TRANSLATIONS[key] = translation


def _not_called(*_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError("a reference-kernel step is run by its executor (ReferenceKernelStep), not called directly")


def register_reference_kernel(op_type: str, *since_versions: int, domain: str = "", reason: str) -> None:
    """Let ``op_type`` run its NumPy reference kernel inside torch modules, for ``reason``.

    The executors hand such a step's tensors to the kernel as NumPy arrays and its numeric outputs
    back as tensors (string outputs stay NumPy object arrays, maps stay dicts). Nothing flows back
    through autograd: use this only where there is no gradient to lose.
    """
    if not since_versions:
        raise ValueError(f"register_reference_kernel({op_type!r}) needs at least one since_version")
    if len(reason) < 20:
        raise ValueError(f"register_reference_kernel({op_type!r}) needs a real reason")
    for version in since_versions:
        _add(Translation(op_type, version, _not_called, domain=_domain(domain), reference_kernel=reason))


def reference_versions(
    op_type: str, *, since: int = 0, until: int | None = None, domain: str = ""
) -> tuple[int, ...]:
    """The since_versions the NumPy reference registers for ``op_type`` in [since, until]."""
    from sealtrace.ops.registry import registered_ops

    versions = registered_ops().get((_domain(domain), op_type), [])
    return tuple(v for v in versions if v >= since and (until is None or v <= until))


def lookup(domain: str, op_type: str, since_version: int) -> Translation | None:
    """The translation for exactly this schema version, or None."""
    return _TRANSLATIONS.get((_domain(domain), op_type, since_version))


def _qualified(domain: str, op_type: str) -> str:
    return f"{domain}::{op_type}" if domain else op_type


def registered_translations() -> dict[str, list[int]]:
    """Every translated op type (``domain::Op`` outside the default domain) with its sorted since_versions."""
    ops: dict[str, list[int]] = {}
    for domain, op_type, version in _TRANSLATIONS:
        ops.setdefault(_qualified(domain, op_type), []).append(version)
    return {k: sorted(v) for k, v in sorted(ops.items())}


def reference_kernel_ops() -> dict[str, str]:
    """Every op type (``domain::Op`` outside the default domain) that runs its reference kernel, with the reason."""
    return {_qualified(t.domain, t.op_type): t.reference_kernel
            for t in sorted(_TRANSLATIONS.values(), key=lambda t: (t.domain, t.op_type)) if t.reference_kernel}


def static_array(value: Any) -> np.ndarray:
    """A static (shape-like) input as a NumPy array, whether it is a tensor, list or number."""
    if value is None:
        return np.zeros(0, dtype=np.int64)
    if hasattr(value, "detach"):
        from sealtrace.torchops.dtypes import to_numpy  # bfloat16 and float8 go through ml_dtypes

        return np.asarray(to_numpy(value))
    return np.asarray(value)


def ints(value: Any) -> list[int]:
    """A static input as a list of Python ints (a scalar becomes a one-element list)."""
    return [int(v) for v in static_array(value).reshape(-1).tolist()]


def floats(value: Any) -> list[float]:
    """A static input as a list of Python floats."""
    return [float(v) for v in static_array(value).reshape(-1).tolist()]


def conformance_exclusions() -> dict[str, str]:
    """Node test cases the torch bridge does not claim (beyond the reference's own exclusions), with
    the reason: each translation module's ``CONFORMANCE_EXCLUSIONS``, as the reference declares its own."""
    import sys

    import sealtrace.torchops.translations  # noqa: F401 - importing it loads every translation module

    found: dict[str, str] = {}
    for name, module in sorted(sys.modules.items()):
        if name.startswith("sealtrace.torchops.translations.") and hasattr(module, "CONFORMANCE_EXCLUSIONS"):
            found.update(module.CONFORMANCE_EXCLUSIONS)
    return found
