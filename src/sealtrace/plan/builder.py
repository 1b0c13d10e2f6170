"""ONNX model -> Plan: load, resolve opsets and kernels, order topologically, check everything.

Every problem that can be found without running an op is found here, and problems of one kind are
reported together (all unsupported nodes in one error, all dangling inputs in one error).
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import Any

import numpy as np
import onnx
import onnx.inliner
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TypeProto, numpy_helper

from sealtrace.errors import InvalidModelError, PlanError, UnsupportedError
from sealtrace.limits import check_allocation
from sealtrace.ops import lookup
from sealtrace.ops.registry import Kernel
from sealtrace.plan.model import Plan, Step, ValueInfo
from sealtrace.plan.modelfile import ModelFile, parse_model, read_model_file

ModelSource = str | os.PathLike[str] | bytes | ModelProto

_DEFAULT_DOMAINS = ("", "ai.onnx")


def load_model(source: ModelSource) -> ModelProto:
    """Read an ONNX model from a path, bytes or proto; external data is loaded beside the file."""
    if isinstance(source, ModelProto):
        return source
    if isinstance(source, bytes):
        return parse_model(source, "<bytes>")
    return load_model_file(source).model


def load_model_file(source: str | os.PathLike[str]) -> ModelFile:
    """Read an ONNX file and its external data once (sealtrace.plan.modelfile): the model, filled
    from the very bytes whose digests come with it, so a file replaced between hashing and
    parsing cannot pass for the one that runs."""
    return read_model_file(source)


def build_plan(source: ModelSource, *, require_kernels: bool = True) -> Plan:
    """Compile an ONNX model into a :class:`Plan`, checking everything before any op runs.

    Every node without a NumPy kernel is listed in one UnsupportedError. ``require_kernels=False``
    is for backends that execute the ONNX model themselves (ONNX Runtime, e.g. on its own
    optimized models with com.microsoft operators): such steps are kept, listed in
    ``plan.unsupported``, and the reference backend refuses the Plan when asked to run it.
    """
    model = load_model(source)
    _check_graph_text(model.graph, "")  # before any of its names is copied or compared
    if model.functions:
        model = _inline_local_functions(model)
    opsets = _opsets(model)
    value_info = _infer_value_info(model)
    builder = _GraphBuilder(opsets, value_info, ir_version=model.ir_version)
    plan = builder.build(model.graph, outer_scope=frozenset())
    if builder.unsupported and require_kernels:
        raise UnsupportedError(builder.unsupported)
    plan.unsupported = tuple(builder.unsupported)
    plan.source = model
    return plan


def _inline_local_functions(model: ModelProto) -> ModelProto:
    """The model with every call of a model-local function expanded, so each step maps to one kernel.

    A function written against another ONNX opset than the model's (exporters do this) is converted
    to the model's opset first (onnx's version converter); one that cannot be is refused by name.
    """
    onnx_opset = _opsets(model).get("")
    # Conversion only where needed: onnx's inliner cannot type a converted call inside a subgraph.
    convert = any(
        imp.version != onnx_opset
        for function in model.functions
        for imp in function.opset_import
        if imp.domain in _DEFAULT_DOMAINS
    )
    try:
        inlined = onnx.inliner.inline_local_functions(model, convert_version=convert)
    except Exception as exc:  # only onnx runs here, and its C++ code raises assorted types
        # Recursive or duplicated functions, malformed bodies, failed shape inference or version
        # conversion of a body: onnx's message names the function or the value.
        raise InvalidModelError(f"cannot expand model-local functions: {_first_line(exc)}") from None
    return inlined


def _check_text(value: str | bytes, what: str) -> None:
    """Protobuf hands back a string field that is not valid UTF-8 as bytes; such a name is refused."""
    if not isinstance(value, str):
        raise InvalidModelError(f"{what} is not valid UTF-8 text ({bytes(value)[:60]!r})")


def _check_graph_text(graph: GraphProto, path: str) -> None:
    """Every name the builder reads from ``graph`` (its subgraphs are checked as they are built).

    Each check tests the type first and words its message only for a name that fails: formatting
    a message per name took a tenth of building a Plan of a thousand small initializers.
    """
    _check_text(graph.name, f"{path}a graph name")
    for tensor in graph.initializer:
        if type(tensor.name) is not str:
            _check_text(tensor.name, f"{path}an initializer name")
    for sparse in graph.sparse_initializer:
        _check_text(sparse.values.name, f"{path}a sparse initializer name")
    for info in (*graph.input, *graph.output, *graph.value_info):
        if type(info.name) is not str:
            _check_text(info.name, f"{path}a value name")
    for node in graph.node:
        texts = (node.name, node.op_type, node.domain, *node.input, *node.output)
        if not all(type(text) is str for text in texts):
            for text in texts:
                _check_text(text, f"{path}a name in node {node.name!r} ({node.op_type!r})")
        for attr in node.attribute:
            if type(attr.name) is not str or type(attr.ref_attr_name) is not str:
                _check_text(attr.name, f"{path}an attribute name in node {node.name!r}")
                _check_text(attr.ref_attr_name, f"{path}an attribute reference in node {node.name!r}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _opsets(model: ModelProto) -> dict[str, int]:
    opsets: dict[str, int] = {}
    for imp in model.opset_import:
        _check_text(imp.domain, "an opset import's domain")
        domain = "" if imp.domain in _DEFAULT_DOMAINS else imp.domain
        if not 0 <= imp.version < 2**31:
            raise InvalidModelError(f"opset import {domain or 'ai.onnx'!r}: version {imp.version} is out of range")
        opsets[domain] = imp.version
    if "" not in opsets and model.ir_version < 3:
        opsets[""] = 1
    return opsets


def _infer_value_info(model: ModelProto) -> dict[str, ValueInfo]:
    """Static dtypes and shapes from onnx shape inference, where it succeeds."""
    infos: dict[str, ValueInfo] = {}
    light = _without_large_weights(model)
    # onnx's data propagation builds one entry per element of a declared shape: an input declared
    # [10^9] makes it allocate gigabytes (it was killed for memory). Shape tensors have a handful of
    # elements; with larger declared dims, inference runs without data propagation.
    data_prop = all(
        dim.dim_value <= _DATA_PROP_MAX_DIM
        for vi in light.graph.input
        if vi.type.HasField("tensor_type")
        for dim in vi.type.tensor_type.shape.dim
    )
    try:
        inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False, data_prop=data_prop)
    except Exception:  # inference is best effort; the Plan does not depend on it
        inferred = model
    graph = inferred.graph
    for vi in list(graph.value_info) + list(graph.output) + list(graph.input):
        infos[vi.name] = value_info_from_type(vi.name, vi.type)
    return infos


_DATA_PROP_MAX_DIM = 1 << 16
_LARGE_WEIGHT = 4096  # elements; larger initializers carry no shape information inference needs


def _without_large_weights(model: ModelProto) -> ModelProto:
    """A copy for shape inference in which large initializers are typed graph inputs instead.

    Shape inference serializes the whole model; for a 1 GB model that copy dominates building the
    Plan. Only small initializers (shape tensors, axes) feed its data propagation.
    """
    graph = model.graph
    if not any(_numel(t) > _LARGE_WEIGHT for t in graph.initializer):
        return model
    light = ModelProto(ir_version=model.ir_version)
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    lg = light.graph
    lg.name = graph.name
    lg.node.extend(graph.node)
    lg.value_info.extend(graph.value_info)
    lg.output.extend(graph.output)
    declared = {vi.name for vi in graph.input}
    lg.input.extend(graph.input)
    for tensor in graph.initializer:
        if _numel(tensor) > _LARGE_WEIGHT:
            if tensor.name not in declared:
                lg.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
        else:
            lg.initializer.append(tensor)
    return light


def _numel(tensor: onnx.TensorProto) -> int:
    count = 1
    for d in tensor.dims:
        count *= d
    return count


def value_info_from_type(name: str, tp: TypeProto) -> ValueInfo:
    """Translate an ONNX TypeProto into a :class:`ValueInfo`."""
    which = tp.WhichOneof("value")
    if which == "tensor_type" or which == "sparse_tensor_type":
        tt = tp.tensor_type if which == "tensor_type" else tp.sparse_tensor_type
        dtype = _np_dtype(tt.elem_type)
        shape: tuple[int | str | None, ...] | None = None
        if tt.HasField("shape"):
            shape = tuple(
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim
            )
        return ValueInfo(name, "tensor", dtype, shape)
    if which == "sequence_type":
        inner = value_info_from_type(name, tp.sequence_type.elem_type)
        return ValueInfo(name, "sequence", inner.dtype, inner.shape)
    if which == "optional_type":
        inner = value_info_from_type(name, tp.optional_type.elem_type)
        return ValueInfo(name, "optional", inner.dtype, inner.shape)
    if which == "map_type":
        return ValueInfo(name, "map", None, None)
    return ValueInfo(name)


def _np_dtype(elem_type: int) -> np.dtype[Any] | None:
    if elem_type == 0:
        return None
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        return None


class _GraphBuilder:
    def __init__(self, opsets: Mapping[str, int], value_info: Mapping[str, ValueInfo], ir_version: int):
        self.opsets = opsets
        self.value_info = value_info
        self.ir_version = ir_version
        self.unsupported: list[str] = []
        self._anonymous = 0
        # Per (op_type, opset version, domain): the schema (or the SchemaError) and its attributes'
        # defaults. onnx makes a new schema object on every lookup and parses each attribute's
        # default from bytes on every access: a model of a thousand nodes of twenty op types
        # spent a fifth of its Plan build there.
        self._schemas: dict[tuple[str, int, str], Any] = {}
        self._defaults: dict[tuple[str, int, str], tuple[tuple[str, AttributeProto | None], ...]] = {}

    def build(self, graph: GraphProto, outer_scope: frozenset[str], path: str = "") -> Plan:
        _check_graph_text(graph, path)
        initializers: dict[str, Any] = {}
        for tensor in graph.initializer:
            if tensor.name in initializers:
                raise PlanError(f"{path}initializer {tensor.name!r} is defined twice")
            initializers[tensor.name] = _to_array(tensor, f"initializer {tensor.name!r}")
        for sparse in graph.sparse_initializer:
            name = sparse.values.name
            if not name:
                raise InvalidModelError(f"{path}a sparse initializer has no name (its values tensor names it)")
            if name in initializers:
                raise PlanError(f"{path}initializer {name!r} is defined twice")
            initializers[name] = _sparse_to_array(sparse, f"{path}sparse initializer {name!r}")

        # IR < 4 lists every initializer as a graph input too; those are weights, not feeds.
        inputs = tuple(
            self._declared(vi.name, vi.type) for vi in graph.input if vi.name not in initializers
        )
        input_names = [v.name for v in inputs]
        if len(set(input_names)) != len(input_names):
            raise PlanError(f"{path}graph {graph.name!r} declares an input twice")

        nodes = list(graph.node)
        names = self._node_names(nodes, path)
        produced: dict[str, int] = {}
        for i, node in enumerate(nodes):
            for out in node.output:
                if not out:
                    continue
                if out in produced:
                    raise PlanError(
                        f"{path}value {out!r} is produced by both node {names[produced[out]]!r} "
                        f"and node {names[i]!r}"
                    )
                if out in initializers or out in input_names:
                    raise PlanError(f"{path}node {names[i]!r} overwrites graph input or initializer {out!r}")
                produced[out] = i

        defined_here = set(initializers) | set(input_names) | set(produced)
        visible = outer_scope | defined_here
        steps_spec: list[tuple[NodeProto, str, dict[str, Any], tuple[str, ...]]] = []
        dangling: list[str] = []
        for node, name in zip(nodes, names, strict=True):
            attrs, implicit = self._attributes(node, name, visible, path)
            for value in node.input:
                if value and value not in visible:
                    dangling.append(f"node {name!r} reads {value!r}")
            steps_spec.append((node, name, attrs, implicit))
        for out in graph.output:
            if out.name not in visible:
                dangling.append(f"graph output {out.name!r}")
        if dangling:
            raise PlanError(f"{path}undefined values: " + "; ".join(dangling))

        order = self._topological_order(nodes, names, produced, steps_spec, path)
        steps: list[Step] = []
        for index, node_index in enumerate(order):
            node, name, attrs, implicit = steps_spec[node_index]
            steps.append(self._step(index, node, name, attrs, implicit))
        for step in steps:
            _check_constant_of_shape(step, initializers, path)

        outputs = tuple(self._declared(vi.name, vi.type) for vi in graph.output)
        # A subgraph may read outer values in its steps or return one directly as an output.
        captures = sorted(
            {v for s in steps for v in (*s.inputs, *s.implicit_inputs) if v and v not in defined_here}
            | {o.name for o in outputs if o.name not in defined_here}
        )
        plan = Plan(
            name=graph.name,
            opsets=dict(self.opsets),
            inputs=inputs,
            outputs=outputs,
            initializers=initializers,
            steps=tuple(steps),
            captures=tuple(captures),
            release_after=_release_schedule(steps, {o.name for o in outputs}, defined_here),
            value_info={k: v for k, v in self.value_info.items() if k in defined_here},
            ir_version=self.ir_version,
        )
        return plan

    def _declared(self, name: str, tp: TypeProto) -> ValueInfo:
        declared = value_info_from_type(name, tp)
        if declared.dtype is None and name in self.value_info:
            return self.value_info[name]
        return declared

    def _node_names(self, nodes: list[NodeProto], path: str) -> list[str]:
        names: list[str] = []
        seen: set[str] = set()
        for i, node in enumerate(nodes):
            name = node.name or f"{node.op_type}_{i}"
            if name in seen:  # duplicated names would make audit records ambiguous
                name = f"{name}#{i}"
            seen.add(name)
            names.append(name)
        return names

    def _attributes(
        self, node: NodeProto, name: str, visible: frozenset[str] | set[str], path: str
    ) -> tuple[dict[str, Any], tuple[str, ...]]:
        domain = "" if node.domain in _DEFAULT_DOMAINS else node.domain
        schema = self._schema(node, name, domain)
        attrs: dict[str, Any] = {}
        implicit: list[str] = []
        if schema is not None:
            key = (node.op_type, self.opsets[domain], domain)
            defaults = self._defaults.get(key)
            if defaults is None:
                defaults = self._defaults[key] = tuple(
                    (attr_name, default if default is not None and default.type != AttributeProto.UNDEFINED else None)
                    for attr_name, attr in schema.attributes.items()
                    for default in (attr.default_value,)
                )
            for attr_name, default in defaults:
                attrs[attr_name] = None if default is None else self._attribute_value(default, name, visible, path, implicit)
        for attr in node.attribute:
            if attr.ref_attr_name:
                raise PlanError(f"{path}node {name!r}: attribute reference outside a function")
            if schema is not None and attr.name not in attrs:
                raise PlanError(
                    f"{path}node {name!r} ({node.op_type}) has unknown attribute {attr.name!r}"
                )
            attrs[attr.name] = self._attribute_value(attr, name, visible, f"{path}{name}/", implicit)
        return attrs, tuple(dict.fromkeys(implicit))

    def _schema(self, node: NodeProto, name: str, domain: str) -> Any:
        if domain not in self.opsets:
            self.unsupported.append(f"{name!r} ({node.op_type}): domain {domain!r} is not imported by the model")
            return None
        schema = self._lookup_schema(node.op_type, self.opsets[domain], domain)
        if schema is None:
            where = f"domain {domain!r}" if domain else "the default domain"
            self.unsupported.append(
                f"{name!r} ({node.op_type}): no such operator in {where} at opset {self.opsets[domain]}"
            )
            return None
        return schema

    def _lookup_schema(self, op_type: str, version: int, domain: str) -> Any:
        """onnx's schema of ``op_type`` at opset ``version`` of ``domain`` (None: none), looked up once per build."""
        key = (op_type, version, domain)
        if key in self._schemas:
            return self._schemas[key]
        try:
            schema = onnx.defs.get_schema(op_type, version, domain)
        except onnx.defs.SchemaError:
            schema = None
        self._schemas[key] = schema
        return schema

    def _attribute_value(
        self, attr: AttributeProto, node_name: str, visible: Any, path: str, implicit: list[str]
    ) -> Any:
        kind = attr.type
        if kind == AttributeProto.GRAPH:
            sub = self.build(attr.g, frozenset(visible), path)
            implicit.extend(sub.captures)
            return sub
        if kind == AttributeProto.GRAPHS:
            subs = tuple(self.build(g, frozenset(visible), path) for g in attr.graphs)
            for sub in subs:
                implicit.extend(sub.captures)
            return subs
        if kind == AttributeProto.TENSOR:
            return _to_array(attr.t, f"attribute {attr.name!r} of node {node_name!r}")
        if kind == AttributeProto.TENSORS:
            return tuple(_to_array(t, f"attribute {attr.name!r}") for t in attr.tensors)
        if kind == AttributeProto.SPARSE_TENSOR:
            return _sparse_to_array(attr.sparse_tensor, f"attribute {attr.name!r} of node {node_name!r}")
        if kind == AttributeProto.STRING:
            return attr.s.decode("utf-8", errors="replace")
        if kind == AttributeProto.STRINGS:
            return tuple(s.decode("utf-8", errors="replace") for s in attr.strings)
        if kind == AttributeProto.INTS:
            return tuple(int(v) for v in attr.ints)
        if kind == AttributeProto.FLOATS:
            return tuple(float(v) for v in attr.floats)
        if kind == AttributeProto.INT:
            return int(attr.i)
        if kind == AttributeProto.FLOAT:
            return float(attr.f)
        if kind == AttributeProto.TYPE_PROTO:
            return attr.tp
        if kind == AttributeProto.TYPE_PROTOS:
            return tuple(attr.type_protos)
        return onnx.helper.get_attribute_value(attr)

    def _topological_order(
        self,
        nodes: list[NodeProto],
        names: list[str],
        produced: Mapping[str, int],
        specs: list[tuple[NodeProto, str, dict[str, Any], tuple[str, ...]]],
        path: str,
    ) -> list[int]:
        """Kahn's algorithm, taking ready nodes in file order so the order is stable."""
        deps: list[set[int]] = []
        for node, _name, _attrs, implicit in specs:
            deps.append({produced[v] for v in (*node.input, *implicit) if v in produced})
        users: list[list[int]] = [[] for _ in nodes]
        remaining = [len(d) for d in deps]
        for i, d in enumerate(deps):
            for j in d:
                users[j].append(i)
        ready = [i for i, r in enumerate(remaining) if r == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for u in users[i]:
                remaining[u] -= 1
                if remaining[u] == 0:
                    heapq.heappush(ready, u)
        if len(order) != len(nodes):
            stuck = [names[i] for i, r in enumerate(remaining) if r > 0]
            raise PlanError(f"{path}graph has a cycle through node(s): {', '.join(stuck[:10])}")
        return order

    def _step(
        self, index: int, node: NodeProto, name: str, attrs: dict[str, Any], implicit: tuple[str, ...]
    ) -> Step:
        domain = "" if node.domain in _DEFAULT_DOMAINS else node.domain
        version = self.opsets.get(domain, 0)
        since = 0
        kernel = None
        schema = self._lookup_schema(node.op_type, version, domain)
        if schema is not None:  # None: already recorded as unsupported by _schema
            since = schema.since_version
            kernel = lookup(domain, node.op_type, since)
        if kernel is None:
            if since:
                self.unsupported.append(
                    f"{name!r} ({node.op_type}, opset {version} -> since_version {since}): no kernel"
                )
            kernel = _MISSING
        return Step(
            index=index,
            name=name,
            op_type=node.op_type,
            domain=domain,
            since_version=since,
            kernel=kernel,
            attributes=attrs,
            inputs=tuple(node.input),
            outputs=tuple(node.output),
            output_info=tuple(self.value_info.get(o) if o else None for o in node.output),
            implicit_inputs=implicit,
            node=node,
        )


def _check_constant_of_shape(step: Step, initializers: Mapping[str, Any], path: str) -> None:
    """A ConstantOfShape whose shape is a weight declares its allocation in the model: a few bytes
    may ask for terabytes, so it is checked against the memory budget before anything runs."""
    if step.op_type != "ConstantOfShape" or step.domain or not step.inputs:
        return
    shape = initializers.get(step.inputs[0])
    if not isinstance(shape, np.ndarray) or shape.dtype.kind not in "iu" or shape.ndim != 1:
        return  # computed at run time, or malformed (the kernel reports it, naming the step)
    value = step.attributes.get("value")
    itemsize = value.dtype.itemsize if isinstance(value, np.ndarray) else 4  # default: float32 zero
    numel = 1
    for d in shape.tolist():
        if d < 0:
            raise InvalidModelError(f"{path}node {step.name!r} (ConstantOfShape): negative dimension in shape {shape.tolist()}")
        numel *= d
    check_allocation(numel * itemsize, f"{path}node {step.name!r} (ConstantOfShape of shape {shape.tolist()[:8]})")


def _missing_kernel(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("a Plan with unsupported steps is never returned")


_MISSING = Kernel("", "<missing>", 0, _missing_kernel, False)


# Sealing a model with external data (sealtrace.container.stream) builds its Plan without loading
# the large external weights: it supplies their arrays here (read-only views of the mapped file,
# whose digests it gives the Plan digest through sealtrace.plan.model.KNOWN_DIGESTS). None: the
# tensor is read as usual.
EXTERNAL_TENSORS: ContextVar[Callable[[onnx.TensorProto], np.ndarray | None] | None] = ContextVar(
    "sealtrace_external_tensors", default=None
)


def _to_array(tensor: onnx.TensorProto, what: str) -> np.ndarray:
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        provide = EXTERNAL_TENSORS.get()
        supplied = provide(tensor) if provide is not None else None
        if supplied is not None:
            return supplied
    try:
        array = numpy_helper.to_array(tensor)
    except Exception as exc:  # onnx raises assorted errors for malformed tensors
        raise InvalidModelError(f"{what}: unreadable tensor data ({exc})") from None
    if array.dtype.kind in "US":
        array = array.astype(object)
    # A Plan's weights never change: read-only whichever way onnx decoded them (raw_data gives a
    # read-only view already, float_data lists a fresh array), so no kernel or caller can edit one
    # in place and caches keyed by a weight's identity stay valid.
    array.setflags(write=False)
    return array


def _sparse_to_array(sparse: onnx.SparseTensorProto, what: str) -> np.ndarray:
    """The dense array of a SparseTensorProto, every index checked before anything is written.

    The format (onnx.proto): ``values`` is [NNZ]; ``indices`` is [NNZ] linear indices or
    [NNZ, rank] coordinates, in ascending order without duplicates; ``dims`` is the dense shape.
    The dense size is checked against the memory budget before it is allocated: a few bytes of
    protobuf may declare 10^12 elements.
    """
    dims = tuple(int(d) for d in sparse.dims)
    if any(d < 0 for d in dims):
        raise InvalidModelError(f"{what}: negative dimension in dims {list(dims)}")
    values = _to_array(sparse.values, what + " (values)")
    if values.ndim != 1:
        raise InvalidModelError(f"{what}: values must be one-dimensional [NNZ], not of shape {list(values.shape)}")
    count = values.shape[0]
    indices = _to_array(sparse.indices, what + " (indices)") if sparse.HasField("indices") else np.zeros(0, np.int64)
    if indices.dtype.kind not in "iu":
        raise InvalidModelError(f"{what}: indices must be integers, not {indices.dtype}")
    numel = 1
    for d in dims:
        numel *= d
    check_allocation(numel * values.dtype.itemsize, what)
    if indices.ndim == 1 and indices.shape[0] == count:
        linear = indices.astype(np.int64)
        if count and (int(indices.min()) < 0 or int(indices.max()) >= numel):
            raise InvalidModelError(
                f"{what}: linear index {_first_outside(indices, numel)} is outside the dense shape {list(dims)}"
            )
    elif indices.ndim == 2 and indices.shape == (count, len(dims)):
        for axis, size in enumerate(dims):
            column = indices[:, axis]
            if count and (int(column.min()) < 0 or int(column.max()) >= size):
                raise InvalidModelError(
                    f"{what}: index {_first_outside(column, size)} on axis {axis} is outside the dense shape {list(dims)}"
                )
        coordinates = tuple(indices.astype(np.int64).T)
        linear = np.ravel_multi_index(coordinates, dims) if count and dims else np.zeros(count, np.int64)
    else:
        raise InvalidModelError(
            f"{what}: indices of shape {list(indices.shape)} fit neither [NNZ] nor [NNZ, rank] for {count} "
            f"value(s) of a rank-{len(dims)} tensor"
        )
    if count > 1 and not bool(np.all(np.diff(linear) > 0)):
        raise InvalidModelError(f"{what}: indices are not in ascending order without duplicates")
    dense = np.zeros(dims, dtype=values.dtype) if values.dtype != object else np.full(dims, "", dtype=object)
    dense.reshape(-1)[linear] = values
    dense.setflags(write=False)
    return dense


def _first_outside(indices: np.ndarray, size: int) -> int:
    """The first index of ``indices`` outside [0, size), for the error message."""
    bad = indices[(indices < 0) | (indices >= size)]
    return int(bad[0])


def _release_schedule(
    steps: Iterable[Step], keep: set[str], defined_here: set[str]
) -> tuple[tuple[str, ...], ...]:
    """For each step, the values whose last reader it is (graph outputs and captures never freed)."""
    steps = list(steps)
    last_use: dict[str, int] = {}
    for step in steps:
        for value in (*step.inputs, *step.implicit_inputs):
            if value:
                last_use[value] = step.index
        for value in step.outputs:
            # An output nobody reads can go right after it is made.
            if value and value not in last_use:
                last_use[value] = step.index
    schedule: list[list[str]] = [[] for _ in steps]
    for value, index in last_use.items():
        if value not in keep and value in defined_here:
            schedule[index].append(value)
    return tuple(tuple(sorted(names)) for names in schedule)
