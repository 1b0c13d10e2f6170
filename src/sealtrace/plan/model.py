"""The Plan: a model compiled once into a fixed, topologically ordered list of steps."""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from sealtrace.digest import canonical_dtype, json_digest, tensor_digest
from sealtrace.ops.registry import Kernel

PLAN_FORMAT = "sealtrace.plan.v1"

Dim = int | str | None


@dataclass(frozen=True)
class ValueInfo:
    """What is statically known of one value: its kind, element dtype and shape.

    ``kind`` is 'tensor', 'sequence', 'optional' or 'map'; ``dtype`` is the element dtype (None when
    unknown); ``shape`` is None when even the rank is unknown, else one entry per axis: an int for a
    fixed size, a string for a named dynamic size, None for an unnamed one.
    """

    name: str
    kind: str = "tensor"
    dtype: np.dtype[Any] | None = None
    shape: tuple[Dim, ...] | None = None

    def describe(self) -> str:
        dtype = str(self.dtype) if self.dtype is not None else "?"
        shape = "?" if self.shape is None else "[" + ",".join("?" if d is None else str(d) for d in self.shape) + "]"
        prefix = "" if self.kind == "tensor" else f"{self.kind} of "
        return f"{prefix}{dtype}{shape}"

    @property
    def type(self) -> str:
        """The type as onnxruntime's NodeArg.type spells it: 'tensor(float)', 'seq(tensor(int64))'."""
        elem = "unknown"
        if self.dtype is not None:
            import onnx

            if self.dtype.kind == "O":
                elem = "string"
            else:
                code = onnx.helper.np_dtype_to_tensor_dtype(self.dtype)
                elem = onnx.TensorProto.DataType.Name(code).lower()
        tensor = f"tensor({elem})"
        return {"sequence": f"seq({tensor})", "optional": f"optional({tensor})"}.get(self.kind, tensor)

    def canonical(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "dtype": None if self.dtype is None else canonical_dtype(self.dtype),
            "shape": None if self.shape is None else list(self.shape),
        }


@dataclass(frozen=True)
class Step:
    """One node of the graph, bound to the kernel chosen for the model's opset version."""

    index: int
    name: str
    op_type: str
    domain: str
    since_version: int
    kernel: Kernel
    attributes: Mapping[str, Any]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    output_info: tuple[ValueInfo | None, ...]
    # Values the step's subgraphs read from enclosing scopes; they count as uses of this step.
    implicit_inputs: tuple[str, ...] = ()
    # The ONNX node the step came from, for backends that rebuild single-node models (not hashed:
    # the canonical form already covers everything in it).
    node: Any = field(default=None, repr=False, compare=False)

    @property
    def subgraphs(self) -> dict[str, Plan]:
        """Nested Plans held by graph attributes (If branches, Loop/Scan bodies)."""
        found: dict[str, Plan] = {}
        for key, value in self.attributes.items():
            if isinstance(value, Plan):
                found[key] = value
            elif isinstance(value, tuple) and value and all(isinstance(v, Plan) for v in value):
                for i, sub in enumerate(value):
                    found[f"{key}[{i}]"] = sub
        return found

    def canonical(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "op_type": self.op_type,
            "domain": self.domain,
            "since_version": self.since_version,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "attributes": {k: _canonical_attribute(v) for k, v in sorted(self.attributes.items())},
        }


@dataclass(eq=False)
class Plan:
    """A graph compiled into steps. Subgraphs (If, Loop, Scan bodies) are nested Plans.

    ``inputs`` are the values a caller feeds (initializers excluded); ``initializers`` are the
    weights; ``captures`` are names a subgraph reads from its enclosing graph; ``release_after[i]``
    lists the values no later step needs once step ``i`` ran, so an executor can free them.
    """

    name: str
    opsets: Mapping[str, int]
    inputs: tuple[ValueInfo, ...]
    outputs: tuple[ValueInfo, ...]
    initializers: Mapping[str, Any]
    steps: tuple[Step, ...]
    captures: tuple[str, ...] = ()
    release_after: tuple[tuple[str, ...], ...] = ()
    value_info: Mapping[str, ValueInfo] = field(default_factory=dict)
    ir_version: int = 0
    # The ONNX model the Plan was built from (top-level Plans only); backends that execute ONNX
    # themselves (onnxruntime) need it. Not part of the digest: the canonical form covers it.
    source: Any = field(default=None, repr=False)
    # Nodes without a NumPy kernel, when the Plan was built for a backend that needs none.
    unsupported: tuple[str, ...] = ()

    @property
    def input_names(self) -> list[str]:
        return list(self._input_names)

    @property
    def output_names(self) -> list[str]:
        return list(self._output_names)

    # Worked out once: runs ask for them every time, and a tiny model runs in microseconds.
    @cached_property
    def _input_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.inputs)

    @cached_property
    def _output_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.outputs)

    @cached_property
    def inputs_by_name(self) -> Mapping[str, ValueInfo]:
        """The declared inputs by name (read-only use)."""
        return {v.name: v for v in self.inputs}

    def walk(self, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Step]]:
        """Every step, subgraph steps included, with the path of subgraphs that holds it."""
        found: list[tuple[tuple[str, ...], Step]] = []
        for step in self.steps:
            found.append((path, step))
            for attr, sub in step.subgraphs.items():
                found.extend(sub.walk((*path, step.name, attr)))
        return found

    def canonical(self) -> dict[str, Any]:
        """The canonical form the Plan digest is computed over (weights enter by digest)."""
        return {
            "format": PLAN_FORMAT,
            "name": self.name,
            "opsets": dict(sorted(self.opsets.items())),
            "inputs": [v.canonical() for v in self.inputs],
            "outputs": [v.canonical() for v in self.outputs],
            "captures": list(self.captures),
            "initializers": {k: _canonical_value(v) for k, v in sorted(self.initializers.items())},
            "steps": [s.canonical() for s in self.steps],
        }

    @cached_property
    def digest(self) -> str:
        """sha256 of the canonical form: commits to graph, opsets, attributes and every weight."""
        return json_digest(self.canonical())


# Digests of arrays the Plan digest need not read again, by the array's id: sealing a model with
# external data (sealtrace.container.stream) hashes each weight as it streams it into the
# container, and sets this only around that Plan's first digest.
KNOWN_DIGESTS: ContextVar[Mapping[int, str] | None] = ContextVar("sealtrace_known_digests", default=None)


def _array_digest(value: np.ndarray) -> str:
    known = KNOWN_DIGESTS.get()
    if known is not None and id(value) in known:
        return known[id(value)]
    return tensor_digest(value)


def _canonical_value(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"tensor": _array_digest(value)}
    if isinstance(value, list):
        return {"sequence": [_canonical_value(v) for v in value]}
    if value is None:
        return None
    raise TypeError(f"cannot canonicalize {type(value).__name__}")


def _canonical_attribute(value: Any) -> Any:
    if isinstance(value, Plan):
        return {"graph": value.canonical()}
    if isinstance(value, np.ndarray):
        return {"tensor": _array_digest(value)}
    if isinstance(value, float):
        return {"float": value.hex()}
    if isinstance(value, (tuple, list)):
        return [_canonical_attribute(v) for v in value]
    if isinstance(value, np.dtype):
        return {"dtype": canonical_dtype(value)}
    if value is None or isinstance(value, (int, str, bool)):
        return value
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    # TypeProto and other protos: their serialized form is canonical enough for one onnx version.
    serialize = getattr(value, "SerializeToString", None)
    if serialize is not None:
        return {"proto": serialize(deterministic=True).hex()}
    raise TypeError(f"cannot canonicalize attribute of type {type(value).__name__}")
