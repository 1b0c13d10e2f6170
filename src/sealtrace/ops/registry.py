"""The kernel registry: NumPy kernels keyed by (domain, op type, since_version).

A kernel is registered for the exact ``since_version`` values of the ONNX operator schemas whose
semantics it implements. The Plan builder asks onnx for the schema that a model's opset import
selects and then looks up a kernel registered for that schema version, so an operator whose
semantics changed in a newer opset is never run with an older kernel by accident.

Calling convention: ``fn(*inputs, **attributes)``; omitted optional inputs arrive as ``None``;
attributes arrive resolved with their schema defaults (``None`` where the schema has no default).
A kernel registered with ``context=True`` receives a :class:`KernelContext` first, which tells
how many outputs the node asked for and runs subgraphs for control-flow operators.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

import numpy as np

from sealtrace.errors import UnsupportedError

KernelFn = Callable[..., Any]


class KernelContext(Protocol):
    """What a context kernel may ask of the executor running it."""

    @property
    def n_outputs(self) -> int:
        """Number of outputs the node declares (including omitted optional ones)."""
        ...

    @property
    def since_version(self) -> int:
        """The schema version this node resolved to."""
        ...

    @property
    def requested_outputs(self) -> tuple[bool, ...]:
        """Which declared outputs the graph names (an omitted optional output is an empty name)."""
        ...

    @property
    def output_info(self) -> tuple[Any, ...]:
        """Static ValueInfo (or None) of each declared output, where shape inference knew it."""
        ...

    def run_subgraph(self, name: str, plan: Any, feeds: Sequence[Any]) -> list[Any]:
        """Run a nested Plan (an attribute called ``name``) with positional ``feeds``."""
        ...


@dataclass(frozen=True)
class Kernel:
    """One registered implementation of an ONNX operator at one schema version."""

    domain: str
    op_type: str
    since_version: int
    fn: KernelFn
    context: bool

    @property
    def qualified_name(self) -> str:
        module = getattr(self.fn, "__module__", "?")
        return f"{module}.{getattr(self.fn, '__qualname__', '?')}"


_KERNELS: dict[tuple[str, str, int], Kernel] = {}


def register(
    op_type: str, *since_versions: int, domain: str = "", context: bool = False
) -> Callable[[KernelFn], KernelFn]:
    """Register the decorated function for ``op_type`` at each of ``since_versions``."""
    if not since_versions:
        raise ValueError(f"register({op_type!r}) needs at least one since_version")
    normalized_domain = "" if domain == "ai.onnx" else domain

    def decorate(fn: KernelFn) -> KernelFn:
        for version in since_versions:
            key = (normalized_domain, op_type, version)
            if key in _KERNELS:
                raise ValueError(f"kernel for {key} registered twice")
            _KERNELS[key] = Kernel(normalized_domain, op_type, version, fn, context)
        return fn

    return decorate


def lookup(domain: str, op_type: str, since_version: int) -> Kernel | None:
    """The kernel registered for exactly this schema version, or None."""
    return _KERNELS.get(("" if domain == "ai.onnx" else domain, op_type, since_version))


def registered_ops() -> dict[tuple[str, str], list[int]]:
    """Every registered (domain, op type) with its sorted since_versions."""
    ops: dict[tuple[str, str], list[int]] = {}
    for domain, op_type, version in _KERNELS:
        ops.setdefault((domain, op_type), []).append(version)
    return {key: sorted(versions) for key, versions in sorted(ops.items())}


F = TypeVar("F", bound=Callable[..., Any])


def quiet(fn: F) -> F:
    """Run ``fn`` with NumPy's floating-point warnings off: IEEE results (inf, NaN) are the spec.

    The wrapper keeps the plain function as ``__quiet_inner__``: an executor that turns the
    warnings off once for a whole run calls that instead, saving a switch per step (which costs
    more than a small Add itself).
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)

    wrapper.__quiet_inner__ = fn  # type: ignore[attr-defined]
    return cast(F, wrapper)


def unquieted(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function a :func:`quiet` wrapper runs (``fn`` itself when it is not one); call it only
    with NumPy's floating-point warnings already off."""
    return getattr(fn, "__quiet_inner__", fn)


class _Varies:
    """The marker a specializer sees for an input whose value changes from run to run."""

    def __repr__(self) -> str:
        return "VARIES"


VARIES: Any = _Varies()

# Specializers, by the kernel function they specialize (see `specializes`).
Specializer = Callable[[tuple[Any, ...], Mapping[str, Any]], "KernelFn | None"]
_SPECIALIZERS: dict[KernelFn, Specializer] = {}


def specializes(*kernels: KernelFn) -> Callable[[Specializer], Specializer]:
    """Register the decorated function as the specializer of ``kernels``.

    A specializer is called once when a Plan is prepared for running, for each step whose kernel
    it specializes, with the step's inputs (each input's value where it is a constant of the
    Plan: a weight or a folded value; ``VARIES`` where it changes from run to run; None where it
    is omitted) and its attributes. It returns a function called as ``fn(*inputs)`` (no
    attributes) that gives bit for bit what the kernel gives for any values of the varying
    inputs, or None to keep the kernel. Shape and indexing steps whose axes, starts or shape are
    constants spend most of their microseconds turning those tensors into Python integers on
    every run: a specialized function does it once.
    """

    def decorate(specializer: Specializer) -> Specializer:
        for kernel in kernels:
            _SPECIALIZERS[unquieted(kernel)] = specializer
        return specializer

    return decorate


def specialized(kernel: Kernel, inputs: tuple[Any, ...], attributes: Mapping[str, Any]) -> KernelFn | None:
    """The specialized function for one step (see :func:`specializes`), or None."""
    specializer = _SPECIALIZERS.get(unquieted(kernel.fn))
    if specializer is None or all(value is VARIES for value in inputs):
        return None
    try:
        return specializer(inputs, attributes)
    except Exception:  # malformed constants: the kernel runs, and its error names the step
        return None


# Operators whose outputs are not a function of their inputs alone: every constant folder (the
# reference backend's, the engines' shape pass, the torch bridge's) leaves them to run each time.
NONDETERMINISTIC_OPS = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout"}
)

SubgraphRunner = Callable[[Any, Mapping[str, Any], tuple[str, ...]], list[Any]]


class CalledStep(Protocol):
    """What calling a step's kernel reads of a Plan step (sealtrace.plan.Step)."""

    @property
    def name(self) -> str: ...

    @property
    def op_type(self) -> str: ...

    @property
    def kernel(self) -> Kernel | None: ...

    @property
    def attributes(self) -> Mapping[str, Any]: ...

    @property
    def outputs(self) -> tuple[str, ...]: ...

    @property
    def since_version(self) -> int: ...

    @property
    def output_info(self) -> tuple[Any, ...]: ...


class StandaloneContext:
    """The KernelContext of a step called outside a run (a constant folded, a reference kernel
    inside a torch module, parity's re-run of one step): the step's own facts, and its subgraphs
    run by ``run_plan(plan, feeds, path)`` (an executor's, unobserved); without one a subgraph
    is refused."""

    __slots__ = ("_calls", "_path", "_run_plan", "_step")

    def __init__(self, step: CalledStep, path: tuple[str, ...] = (), run_plan: SubgraphRunner | None = None) -> None:
        self._step = step
        self._path = path
        self._run_plan = run_plan
        self._calls: dict[str, int] = {}

    @property
    def n_outputs(self) -> int:
        return len(self._step.outputs)

    @property
    def since_version(self) -> int:
        return self._step.since_version

    @property
    def output_info(self) -> tuple[Any, ...]:
        """Static info (ValueInfo or None) of each declared output, from shape inference."""
        return self._step.output_info

    @property
    def requested_outputs(self) -> tuple[bool, ...]:
        """Which declared outputs the graph actually names (optional ones may be empty)."""
        return tuple(bool(o) for o in self._step.outputs)

    def run_subgraph(self, name: str, plan: Any, feeds: Sequence[Any]) -> list[Any]:
        if self._run_plan is None:
            raise UnsupportedError([f"{self._step.op_type} step {self._step.name!r}: its subgraph {name!r} runs only in a run"])
        call = self._calls.get(name, 0)
        self._calls[name] = call + 1
        path = (*self._path, self._step.name, name, str(call))
        return self._run_plan(plan, dict(zip(plan.input_names, feeds, strict=False)), path)


def call_step(
    step: CalledStep, inputs: Sequence[Any], context: KernelContext | None = None, *, fn: KernelFn | None = None
) -> Any:
    """``step``'s kernel on ``inputs`` with the step's attributes, as an executor calls it: a kernel
    that takes a context gets ``context`` first (a :class:`StandaloneContext` of the step when None).
    ``fn`` is the kernel's function in another form (:func:`unquieted`, inside a run whose warnings
    are off already)."""
    kernel = step.kernel
    if kernel is None:
        raise UnsupportedError([f"{step.op_type} step {step.name!r} has no kernel"])
    call = kernel.fn if fn is None else fn
    if kernel.context:
        return call(context if context is not None else StandaloneContext(step), *inputs, **step.attributes)
    return call(*inputs, **step.attributes)


def as_outputs(result: Any) -> list[Any]:
    """Normalize a kernel's return value into a list of outputs (arrays, sequences or None)."""
    if isinstance(result, tuple):
        return [_as_value(r) for r in result]
    return [_as_value(result)]


def _as_value(value: Any) -> Any:
    if value is None or isinstance(value, (np.ndarray, list)):
        return value
    return np.asarray(value)
