"""Take the weights out of an ONNX model for sealing, and put them back bit-exactly.

Weights are every numeric TensorProto that carries data: graph initializers (subgraphs included)
and tensor-valued attributes (Constant ``value``, ConstantOfShape ``value``, ...), so models that
keep all their weights in Constant nodes are sealed the same way. A stripped tensor keeps
its name, dtype and dims, loses its data field, and gains one ``external_data`` entry whose key is
:data:`MARKER` and whose value is the container entry's name. Restoring removes the marker and
fills the original field again, so the model's serialized bytes come back exactly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, ModelProto, TensorProto

from sealtrace.container.errors import ContainerFormatError, SealingError
from sealtrace.container.format import DTYPE_BITS, expected_length

MARKER = "sealtrace.tensor"

# Where each non-raw storage field keeps its values, per element type: the NumPy dtype whose
# little-endian bytes are the tensor's raw_data form.
_FIELD_DTYPES: dict[tuple[str, str], str] = {
    ("float_data", "float"): "<f4", ("float_data", "complex64"): "<f4",
    ("double_data", "double"): "<f8", ("double_data", "complex128"): "<f8",
    ("int64_data", "int64"): "<i8",
    ("uint64_data", "uint64"): "<u8", ("uint64_data", "uint32"): "<u4",
    ("int32_data", "int32"): "<i4", ("int32_data", "int16"): "<i2", ("int32_data", "int8"): "i1",
    ("int32_data", "uint16"): "<u2", ("int32_data", "uint8"): "u1", ("int32_data", "bool"): "u1",
    ("int32_data", "float16"): "<u2", ("int32_data", "bfloat16"): "<u2",
}  # fmt: skip


@dataclass
class Weight:
    """One tensor taken out of the model: its container name, type, storage field and bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    storage: str
    data: bytes | memoryview


def storage_holds(storage: str, dtype: str) -> bool:
    """Whether ``storage`` (a TensorProto field) can hold ``dtype`` values, as restoring needs."""
    return storage == "raw_data" or (storage, dtype) in _FIELD_DTYPES


def dtype_name(data_type: int) -> str:
    """The container's name for an ONNX element type ('float', 'int64', 'bfloat16' ...)."""
    return str(TensorProto.DataType.Name(data_type)).lower()


def model_tensors(model: ModelProto) -> Iterator[tuple[str, TensorProto]]:
    """Every data-carrying TensorProto in the model, in a fixed order, with a readable scope name."""
    yield from _graph_tensors(model.graph, "")
    for function in model.functions:
        for i, node in enumerate(function.node):
            yield from _node_tensors(node, f"{function.domain}.{function.name}:", i)


def _graph_tensors(graph: GraphProto, scope: str) -> Iterator[tuple[str, TensorProto]]:
    for tensor in graph.initializer:
        yield scope + tensor.name, tensor
    for i, node in enumerate(graph.node):
        yield from _node_tensors(node, scope, i)


def _node_tensors(node: onnx.NodeProto, scope: str, index: int) -> Iterator[tuple[str, TensorProto]]:
    label = node.name or f"{node.op_type}_{index}"
    for attr in node.attribute:
        if attr.type == AttributeProto.TENSOR:
            # A Constant's tensor is best known by the value it produces.
            if node.op_type == "Constant" and node.output and node.output[0]:
                yield scope + node.output[0], attr.t
            else:
                yield f"{scope}{label}.{attr.name}", attr.t
        elif attr.type == AttributeProto.TENSORS:
            for j, tensor in enumerate(attr.tensors):
                yield f"{scope}{label}.{attr.name}[{j}]", tensor
        elif attr.type == AttributeProto.GRAPH:
            yield from _graph_tensors(attr.g, f"{scope}{label}.{attr.name}:")
        elif attr.type == AttributeProto.GRAPHS:
            for j, sub in enumerate(attr.graphs):
                yield from _graph_tensors(sub, f"{scope}{label}.{attr.name}[{j}]:")


def _graphs(model: ModelProto) -> Iterator[GraphProto]:
    """Every graph of the model: the main graph and all subgraphs (functions' too)."""
    pending: list[GraphProto] = [model.graph]
    nodes = [n for f in model.functions for n in f.node]
    while pending or nodes:
        if pending:
            graph = pending.pop()
            yield graph
            nodes.extend(graph.node)
            continue
        node = nodes.pop()
        for attr in node.attribute:
            pending.extend([attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs))


def external_references(model: ModelProto) -> list[str]:
    """Tensors anywhere in the model (sparse ones included) that point at data outside the
    model other than through a container marker. A sealed graph has none: loading one must
    never make sealtrace read another file."""
    found: list[str] = []

    def check(tensor: TensorProto, where: str) -> None:
        foreign = [e.key for e in tensor.external_data if e.key != MARKER]
        if tensor.data_location == TensorProto.EXTERNAL or foreign:
            found.append(where)

    for graph in _graphs(model):
        for tensor in graph.initializer:
            check(tensor, tensor.name)
        for sparse in graph.sparse_initializer:
            check(sparse.values, sparse.values.name)
            check(sparse.indices, sparse.values.name + " (indices)")
        for node in graph.node:
            for attr in node.attribute:
                tensors = [attr.t, *attr.tensors]
                for sparse in [attr.sparse_tensor, *attr.sparse_tensors]:
                    tensors.extend([sparse.values, sparse.indices])
                for tensor in tensors:
                    check(tensor, f"{node.name or node.op_type}.{attr.name}")
    for function in model.functions:
        for node in function.node:
            for attr in node.attribute:
                for tensor in [attr.t, *attr.tensors]:
                    check(tensor, f"{function.name}:{node.name or node.op_type}.{attr.name}")
    return found


def entry_name(scope_name: str, taken: set[str]) -> str:
    """A unique container name: the ONNX name, made relative (PyTorch names start with '/') and
    with '.'/'..' components, backslashes and drive prefixes defused, so no name reads as a path
    that escapes anything (format.check_name is the rule)."""
    parts = [p if p not in (".", "..") else p.replace(".", "_") for p in scope_name.split("/")]
    name = "/".join(parts).lstrip("/").replace("\\", "_")
    name = "".join(c if 32 <= ord(c) != 127 else "_" for c in name) or "tensor"
    if re.match(r"[A-Za-z]:", name):
        name = "_" + name  # 'w:0' (a TensorFlow name) would read as a Windows drive path
    if len(name) > 1000:
        name = name[:1000]
    candidate, k = name, 1
    while candidate in taken:
        k += 1
        candidate = f"{name}#{k}"
    taken.add(candidate)
    return candidate


def strip_weights(
    model: ModelProto,
    in_place: bool = False,
    external: Callable[[TensorProto], memoryview | None] | None = None,
) -> tuple[ModelProto, list[Weight]]:
    """``model`` without weight data (a copy, or the model itself with ``in_place``), and the
    weights in container order.

    A tensor still in an external data file is refused, unless ``external`` gives its raw bytes
    (sealtrace.container.stream: a view of the mapped file, never read here); it is then stripped
    as if it had been loaded first, so the graph comes out byte for byte the same."""
    if in_place:
        stripped = model
    else:
        stripped = ModelProto()
        stripped.CopyFrom(model)
    weights: list[Weight] = []
    taken: set[str] = set()
    for scope_name, tensor in model_tensors(stripped):
        weight: Weight | None
        if tensor.data_location == TensorProto.EXTERNAL or tensor.external_data:
            data = external(tensor) if external is not None else None
            if data is None:
                raise SealingError(f"tensor {scope_name!r} still refers to external data (load it before sealing)")
            # What loading does (sealtrace.plan.modelfile), less the bytes: the proto field set to
            # DEFAULT is serialized, so the stripped graph is the one a loaded model gives.
            tensor.data_location = TensorProto.DEFAULT
            del tensor.external_data[:]
            name = entry_name(scope_name, set(taken))
            taken.add(name)
            tensor.external_data.add(key=MARKER, value=name)
            shape = tuple(int(d) for d in tensor.dims)
            weights.append(Weight(name, dtype_name(tensor.data_type), shape, "raw_data", data))
            continue
        weight = _take(tensor, scope_name, taken)
        if weight is not None:
            weights.append(weight)
    return stripped, weights


def _take(tensor: TensorProto, scope_name: str, taken: set[str]) -> Weight | None:
    """Strip one tensor in place; None (left inline, covered by the graph digest) when it cannot
    be restored bit-exactly: strings, segments, sparse forms, unusual storage."""
    dtype = dtype_name(tensor.data_type)
    if dtype not in DTYPE_BITS or tensor.HasField("segment"):
        return None
    fields = [f for f in ("raw_data", "float_data", "double_data", "int32_data", "int64_data", "uint64_data")
              if (tensor.HasField(f) if f == "raw_data" else len(getattr(tensor, f)) > 0)]  # fmt: skip
    if len(fields) != 1:
        return None
    storage = fields[0]
    shape = tuple(int(d) for d in tensor.dims)
    if any(d < 0 for d in shape):
        return None
    if storage == "raw_data":
        data: bytes | memoryview = tensor.raw_data
    else:
        wire = _FIELD_DTYPES.get((storage, dtype))
        if wire is None:
            return None
        try:
            data = np.array(getattr(tensor, storage), dtype=wire).tobytes()
        except (OverflowError, ValueError):
            return None
    if len(data) != expected_length(dtype, list(shape)):
        return None
    name = entry_name(scope_name, set(taken))
    if storage != "raw_data":
        # Repeated numeric fields go through NumPy and back: prove the round trip before relying
        # on it (raw_data comes back as the same bytes by construction).
        original = tensor.SerializeToString()
        probe = TensorProto()
        probe.CopyFrom(tensor)
        probe.ClearField(storage)
        _fill(probe, storage, dtype, data)
        if probe.SerializeToString() != original:
            return None  # restoring would not give the same bytes back: keep it inline
    tensor.ClearField(storage)
    entry = tensor.external_data.add()
    entry.key = MARKER
    entry.value = name
    taken.add(name)
    return Weight(name, dtype, shape, storage, data)


def _fill(tensor: TensorProto, storage: str, dtype: str, data: bytes | memoryview) -> None:
    del tensor.external_data[:]
    if storage == "raw_data":
        tensor.raw_data = bytes(data)
        return
    wire = _FIELD_DTYPES[(storage, dtype)]
    getattr(tensor, storage).extend(np.frombuffer(data, dtype=wire).tolist())


def restore_weights(stripped: ModelProto, fetch: dict[str, tuple[str, str, tuple[int, ...], memoryview]]) -> None:
    """Put the weights back into ``stripped`` in place. ``fetch`` maps each container name to
    (storage, dtype, shape, bytes). Every marker must match one entry and every entry one marker."""
    seen: set[str] = set()
    for scope_name, tensor in model_tensors(stripped):
        markers = [e for e in tensor.external_data if e.key == MARKER]
        if not markers:
            continue
        if len(markers) != 1 or len(tensor.external_data) != 1:
            raise ContainerFormatError(f"graph tensor {scope_name!r} has a malformed container reference")
        name = markers[0].value
        if name not in fetch or name in seen:
            raise ContainerFormatError(f"graph tensor {scope_name!r} refers to {name[:80]!r}, which is not in the tensor table once")
        seen.add(name)
        storage, dtype, shape, data = fetch[name]
        if dtype_name(tensor.data_type) != dtype or tuple(tensor.dims) != shape:
            raise ContainerFormatError(f"tensor {name!r}: graph and tensor table disagree on dtype or shape")
        if not storage_holds(storage, dtype):
            raise ContainerFormatError(f"tensor {name!r}: storage {storage} cannot hold {dtype}")
        _fill(tensor, storage, dtype, data)
    unused = sorted(set(fetch) - seen)
    if unused:
        raise ContainerFormatError(f"tensor table entries not used by the graph: {', '.join(unused[:10])}")
