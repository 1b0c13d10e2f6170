"""Plan -> torch.fx GraphModule: one fx node per executed step, weights as parameters.

How values are treated at conversion time:
- float initializers (and float Constant nodes holding more than one value) that feed a tensor
  input of some op become ``nn.Parameter`` s, so they can be trained or frozen;
- everything else known at conversion time (integer initializers, scalar Constants, the Shape of
  a value whose shape is static, and any step whose inputs are all known) is folded by running the
  NumPy reference kernel once; a folded value that a tensor input needs becomes a buffer, one that
  a shape-like input needs (a Reshape's shape, a Slice's starts ...) is written into the node's
  arguments, so the module has no data-dependent shapes where the model has none;
- every other step becomes one ``call_function`` node of its torch translation, carrying the ONNX
  node name and op in ``node.meta``.
If with a condition known at conversion time is inlined; otherwise it becomes an :class:`IfModule`
that picks a branch at run time (eager; torch.export needs a known condition). Loop becomes a
:class:`LoopModule`, unrolled by tracing when the trip count is known and the body's condition
stays true. The input model is never modified: only its Plan is read.
"""

from __future__ import annotations

import keyword
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import torch
from torch import fx

from sealtrace.backends.reference import standalone_context
from sealtrace.errors import InputError, UnsupportedError
from sealtrace.ops.registry import NONDETERMINISTIC_OPS, as_outputs, call_step
from sealtrace.plan import ModelSource, Plan, Step, build_plan
from sealtrace.torchops.control import empty_scan_output, run_scan, run_scan_8
from sealtrace.torchops.dtypes import from_numpy
from sealtrace.torchops.reference_step import ReferenceKernelStep, is_string_array
from sealtrace.torchops.registry import DirectCall, StepInput, Translation
from sealtrace.torchops.steps import check_supported, translation_for
from sealtrace.torchops.translations.sequence import sequence_construct

ModelLike = ModelSource | Plan


class IfModule(torch.nn.Module):
    """ONNX If whose condition is only known at run time: both branches as submodules."""

    def __init__(self, then_branch: torch.nn.Module, else_branch: torch.nn.Module) -> None:
        super().__init__()
        self.then_branch = then_branch
        self.else_branch = else_branch

    def forward(self, cond: torch.Tensor, *captures: Any) -> Any:
        branch = self.then_branch if bool(cond.reshape(-1)[0]) else self.else_branch
        return branch(*captures)


class LoopModule(torch.nn.Module):
    """ONNX Loop: the body as a submodule, called once per iteration.

    ``always_running`` says the body's condition output is the constant True, so a known trip
    count runs without any data-dependent check (torch.export then unrolls it).
    """

    def __init__(self, body: torch.nn.Module, n_state: int, n_scan: int, always_running: bool) -> None:
        super().__init__()
        self.body = body
        self.n_state = n_state
        self.n_scan = n_scan
        self.always_running = always_running

    def forward(self, trip_count: Any, cond: Any, *args: Any) -> Any:
        # trip_count and cond arrive as Python values when known at conversion time, else as tensors.
        state, captures = list(args[: self.n_state]), args[self.n_state :]
        max_trips = None if trip_count is None else int(_scalar(trip_count))
        running = True if cond is None else bool(_scalar(cond))
        scans: list[list[torch.Tensor]] = []
        iteration = 0
        while running and (max_trips is None or iteration < max_trips):
            outputs = self.body(torch.tensor(iteration, dtype=torch.int64), *state, *captures)
            if not isinstance(outputs, tuple):
                outputs = (outputs,)
            if not self.always_running:
                running = bool(outputs[0].reshape(-1)[0])
            state = list(outputs[1 : 1 + self.n_state])
            scan_values = outputs[1 + self.n_state :]
            if not scans:
                scans = [[] for _ in scan_values]
            for k, value in enumerate(scan_values):
                scans[k].append(value)
            iteration += 1
        if iteration == 0 and self.n_scan:
            raise ValueError("a Loop that runs no iteration has empty scan outputs of unknown shape")
        result = (*state, *(torch.stack(values) for values in scans))
        return result if len(result) != 1 else result[0]


def _scalar(value: Any) -> Any:
    return value.reshape(-1)[0] if isinstance(value, torch.Tensor) else value


class ScanModule(torch.nn.Module):
    """ONNX Scan: the body as a submodule, called once per scanned step (Scan-8: per batch entry
    and step, with ``sequence_lens`` as the first value)."""

    def __init__(self, body: torch.nn.Module, n_values: int, n_state: int, n_scan_out: int,
                 attrs: Mapping[str, Any], version8: bool = False) -> None:
        super().__init__()
        self.version8 = version8
        self.body = body
        self.n_values = n_values
        self.n_state = n_state
        self.n_scan_out = n_scan_out
        self.attrs = dict(attrs)

    def forward(self, *args: Any) -> Any:
        values, captures = args[: self.n_values], args[self.n_values :]

        def call(_t: int, feeds: list[Any]) -> Sequence[Any]:
            result = self.body(*feeds, *captures)
            return result if isinstance(result, tuple) else (result,)

        if self.version8:  # sequence_lens first, batch axis 0
            body_plan = self.attrs["body_plan"]
            result = tuple(run_scan_8(call, values[0], values[1:], self.n_state, self.n_scan_out,
                                      self.attrs.get("directions"),
                                      lambda k: empty_scan_output(body_plan, self.n_state + k)))
        else:
            result = tuple(run_scan(call, values, self.n_state, self.n_scan_out, self.attrs))
        return result if len(result) != 1 else result[0]


class SubgraphStep(torch.nn.Module):
    """A translation that takes subgraphs (SequenceMap's body, FlexAttention's modifiers): each
    subgraph a submodule, handed to the translation as a callable; the values the subgraphs read
    from the enclosing graph arrive after the step's own inputs."""

    def __init__(self, fn: Any, graphs: Mapping[str, torch.nn.Module], capture_positions: Mapping[str, list[int]],
                 n_args: int) -> None:
        super().__init__()
        self.fn = fn
        self.graphs = torch.nn.ModuleDict(dict(graphs))
        self.capture_positions = dict(capture_positions)
        self.n_args = n_args

    def forward(self, *values: Any, **kwargs: Any) -> Any:
        args, captures = values[: self.n_args], values[self.n_args :]
        calls = {name: self._callable(name, [captures[i] for i in positions])
                 for name, positions in self.capture_positions.items()}
        return self.fn(*args, **kwargs, **calls)

    def _callable(self, name: str, captures: list[Any]) -> Any:
        graph = self.graphs[name]

        def run(*feeds: Any) -> list[Any]:
            result = graph(*feeds, *captures)
            return list(result) if isinstance(result, tuple) else [result]

        return run


def load_plan(model: ModelLike) -> Plan:
    """A Plan from a Plan, an ONNX path/bytes/ModelProto, or a verified .seal container."""
    if isinstance(model, Plan):
        return model
    if isinstance(model, (str, os.PathLike)):
        from sealtrace.container import is_container, load_sealed_plan

        if is_container(model):
            plan, _report = load_sealed_plan(model)
            return plan
    if isinstance(model, onnx.ModelProto):
        # build_plan may expand model-local functions; it does so on a copy, never on the caller's.
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model = copy
    return build_plan(model)


def to_torch(
    model: ModelLike, *, dtype: torch.dtype | None = None, fixed_inputs: Mapping[str, Any] | None = None
) -> fx.GraphModule:
    """Convert a model (Plan, ONNX path/bytes/ModelProto or .seal container) to a torch.fx GraphModule.

    ``forward`` takes the graph inputs in order (as tensors) and returns the graph output, or a
    tuple when the graph has several. ``dtype=torch.float64`` converts every float32 weight,
    constant and Cast target to float64 (feed float64 inputs then), for gradient checks.
    ``fixed_inputs`` pins inputs to constant values (e.g. a sample rate): they leave the
    signature and fold like weights, which turns If nodes on them into inlined branches. Every
    step without a torch translation is reported in one UnsupportedError before anything is built.
    """
    plan = load_plan(model)
    check_supported(plan)
    fixed = {name: np.asarray(value) for name, value in (fixed_inputs or {}).items()}
    unknown = sorted(set(fixed) - set(plan.input_names))
    if unknown:
        raise InputError(f"fixed_inputs names no graph input: {', '.join(unknown)}; inputs: {', '.join(plan.input_names)}")
    converter = _Converter(plan, dtype, outer_known=fixed, parameter_names=_parameter_candidates(plan))
    inputs = [name for name in plan.input_names if name not in fixed]
    return converter.build(inputs, plan.output_names, single_output_unwrapped=True)


def _parameter_candidates(plan: Plan) -> set[str]:
    """Values read at a tensor (not shape-like) input position somewhere: these may be parameters."""
    tensor_uses: set[str] = set()
    for _path, step in plan.walk():
        translation = translation_for(step)
        static = translation.static if translation is not None else ()
        for position, name in enumerate(step.inputs):
            if name and position not in static:
                tensor_uses.add(name)
        tensor_uses.update(step.implicit_inputs)
    for sub_path, sub_step in plan.walk():
        del sub_path
        for sub in sub_step.subgraphs.values():
            tensor_uses.update(sub.output_names)
    tensor_uses.update(plan.output_names)
    return tensor_uses


_IDENTIFIER = re.compile(r"[^0-9a-zA-Z_]")


def _identifier(name: str) -> str:
    text = _IDENTIFIER.sub("_", name).strip("_") or "v"
    if text[0].isdigit() or keyword.iskeyword(text):
        text = "v_" + text
    return text


class _Converter:
    """Builds one GraphModule from one Plan (subgraphs that stay dynamic get their own)."""

    def __init__(
        self, plan: Plan, dtype: torch.dtype | None, outer_known: Mapping[str, Any], parameter_names: set[str]
    ) -> None:
        self.plan = plan
        self.dtype = dtype
        self.root = torch.nn.Module()
        self.graph = fx.Graph()
        self.known: dict[str, Any] = dict(outer_known)
        self.nodes: dict[str, fx.Node] = {}
        # Values computed from shapes alone: their nodes yield NumPy arrays at run time (see HostStep).
        self.host: set[str] = set()
        self._host_tensors: dict[str, fx.Node] = {}
        self.parameter_names = parameter_names
        self.onnx_names: dict[str, str] = {}
        self._attr_names: set[str] = set()
        self._buffers: dict[int, fx.Node] = {}
        # Values holding strings at run time (NumPy object arrays): the steps reading them run
        # their reference kernel (torch has no string dtype).
        self.strings: set[str] = {info.name for info in plan.inputs if _is_string_info(info)}

    # -- values ---------------------------------------------------------------------------------

    def _float_dtype(self, array: np.ndarray) -> torch.dtype | None:
        if self.dtype is not None and array.dtype == np.float32:
            return self.dtype
        return None

    def _tensor(self, array: Any) -> torch.Tensor:
        tensor = from_numpy(array)
        target = self._float_dtype(np.asarray(array))
        return tensor.to(target) if target is not None else tensor

    def _attr_name(self, hint: str) -> str:
        base = _identifier(hint)
        name, k = base, 1
        while name in self._attr_names or hasattr(self.root, name):
            k += 1
            name = f"{base}_{k}"
        self._attr_names.add(name)
        return name

    def _add_parameter(self, onnx_name: str, array: np.ndarray) -> None:
        name = self._attr_name(onnx_name)
        self.root.register_parameter(name, torch.nn.Parameter(self._tensor(array)))
        self.onnx_names[name] = onnx_name
        self.nodes[onnx_name] = self.graph.get_attr(name)

    def _add_weights(self, initializers: Mapping[str, Any]) -> None:
        for name, value in initializers.items():
            self._add_value(name, value)

    def _add_value(self, name: str, value: Any, parameter: bool = True) -> None:
        """An initializer or Constant: a parameter when it is a float tensor feeding ops, else known."""
        if (
            parameter
            and isinstance(value, np.ndarray)
            and value.dtype.kind == "f"
            and name in self.parameter_names
            and value.size > 0
        ):
            self._add_parameter(name, value)
        else:
            self.known[name] = value

    def _materialize(self, name: str) -> fx.Node:
        """The fx node of a value as a tensor (known values become buffers, host values tensors)."""
        if name in self.host:
            wrapped = self._host_tensors.get(name)
            if wrapped is None:
                wrapped = self.graph.call_function(host_tensor, (self.nodes[name],))
                self._host_tensors[name] = wrapped
            return wrapped
        node = self.nodes.get(name)
        if node is not None:
            return node
        value = self.known[name]
        if isinstance(value, list):  # a known sequence: built from its elements at run time
            items = tuple(self._buffer(f"{name}_{i}", v) for i, v in enumerate(value))
            node = self.graph.call_function(sequence_construct, items)
        elif value is None:  # an empty optional
            return None  # type: ignore[return-value]
        else:
            node = self._buffer(name, value)
        self.nodes[name] = node
        return node

    def _buffer(self, hint: str, value: Any) -> fx.Node:
        if not isinstance(value, np.ndarray):
            value = np.asarray(value)
        cached = self._buffers.get(id(value))
        if cached is not None:
            return cached
        attr = self._attr_name(hint)
        if is_string_array(value):  # kept as it is: the steps reading it run NumPy kernels
            setattr(self.root, attr, np.array(value, dtype=object))
            self.onnx_names[attr] = hint
            node = self.graph.get_attr(attr)
            self._buffers[id(value)] = node
            return node
        try:
            tensor = self._tensor(value)
        except ValueError as exc:  # 4-bit types: nothing torch can hold
            raise UnsupportedError([f"value {hint!r}: {exc}"]) from None
        self.root.register_buffer(attr, tensor)
        self.onnx_names[attr] = hint
        node = self.graph.get_attr(attr)
        self._buffers[id(value)] = node
        return node

    # -- steps ----------------------------------------------------------------------------------

    def build(self, inputs: Sequence[str], outputs: Sequence[str], single_output_unwrapped: bool) -> fx.GraphModule:
        for name in inputs:
            self.nodes[name] = self.graph.placeholder(_identifier(name))
        self._add_weights(self.plan.initializers)
        self._steps(self.plan)
        results = tuple(self._materialize(name) for name in outputs)
        if single_output_unwrapped and len(results) == 1:
            self.graph.output(results[0])
        else:
            self.graph.output(results)
        module = fx.GraphModule(self.root, self.graph, class_name=_identifier(self.plan.name or "OnnxModule"))
        module.input_names = list(inputs)  # type: ignore[assignment]
        module.output_names = list(outputs)  # type: ignore[assignment]
        module.onnx_names = dict(self.onnx_names)  # type: ignore[assignment]
        return module

    def _steps(self, plan: Plan) -> None:
        for step in plan.steps:
            if step.op_type == "If":
                self._if(step)
            elif step.op_type == "Loop":
                self._loop(step)
            elif step.op_type == "Scan":
                self._scan(step)
            elif step.op_type == "Constant":
                value = as_outputs(step.kernel.fn(**step.attributes))[0]
                # Weights stored as Constant nodes (older exporters) become parameters; scalars fold.
                self._add_value(step.outputs[0], value, parameter=np.asarray(value).size > 1)
            elif not self._fold(step):
                self._emit(step)

    def _is_known(self, name: str) -> bool:
        return not name or name in self.known

    def _fold(self, step: Step) -> bool:
        """Evaluate a step once with the reference kernel when its inputs are all known; a step
        computed from shapes alone runs on the reference kernel at run time instead (host step)."""
        if step.subgraphs or step.op_type in NONDETERMINISTIC_OPS:
            return False
        if step.op_type in ("Shape", "Size") and step.inputs[0] not in self.known and step.inputs[0] not in self.host:
            if self._fold_shape(step):
                return True
            self._emit_shape(step)
            return True
        if not all(self._is_known(n) for n in step.inputs):
            if all(self._is_known(n) or n in self.host for n in step.inputs):
                self._emit_host(step)
                return True
            return False
        args = [self.known[n] if n else None for n in step.inputs]
        try:
            result = call_step(step, args, standalone_context(step))
        except Exception:
            return False  # let the translation report it at run time, where the user sees the inputs
        for name, value in zip(step.outputs, as_outputs(result), strict=False):
            if name:
                self.known[name] = value
        return True

    def _fold_shape(self, step: Step) -> bool:
        source = step.inputs[0]
        shape: tuple[Any, ...] | None = None
        node = self.nodes.get(source)
        if node is not None and node.op == "get_attr":
            shape = tuple(getattr(self.root, str(node.target)).shape)
        else:
            info = self.plan.value_info.get(source)
            if info is not None and info.shape is not None and all(isinstance(d, int) for d in info.shape):
                shape = info.shape
        if shape is None:
            return False
        dims = [int(d) for d in shape]
        if step.op_type == "Size":
            self.known[step.outputs[0]] = np.asarray(int(np.prod(dims)), dtype=np.int64)
        else:
            start = step.attributes.get("start") or 0
            end = step.attributes.get("end")
            self.known[step.outputs[0]] = np.asarray(dims[start:end], dtype=np.int64)
        return True

    def _emit_shape(self, step: Step) -> None:
        start = step.attributes.get("start") or 0
        end = step.attributes.get("end")
        node = self.graph.call_function(
            shape_of, (self.nodes[step.inputs[0]], step.op_type == "Size", start, end),
            name=_identifier(step.outputs[0]),
        )
        node.meta["onnx_node"] = step.name
        node.meta["onnx_op"] = f"{step.op_type}-{step.since_version}"
        self.nodes[step.outputs[0]] = node
        self.host.add(step.outputs[0])

    def _emit_host(self, step: Step) -> None:
        args = [
            None if not n else (self.nodes[n] if n in self.host else np.asarray(self.known[n]).tolist())
            for n in step.inputs
        ]
        dtypes = [None if not n or n in self.host else str(np.asarray(self.known[n]).dtype) for n in step.inputs]
        target = HostStep(step, dtypes)
        node = self.graph.create_node("call_function", target, tuple(args), {},
                                      name=_identifier(next((o for o in step.outputs if o), step.name)))
        node.meta["onnx_node"] = step.name
        node.meta["onnx_op"] = f"{step.op_type}-{step.since_version}"
        for i, name in enumerate(step.outputs):
            if name:
                self.nodes[name] = node if len(step.outputs) == 1 else self.graph.call_function(_output, (node, i))
                self.host.add(name)

    def _reads_strings(self, step: Step) -> bool:
        return any(n in self.strings or is_string_array(self.known.get(n)) for n in step.inputs if n)

    def _emit(self, step: Step) -> None:
        translation = translation_for(step)
        assert translation is not None  # check_supported ran first
        hint = _identifier(next((o for o in step.outputs if o), step.name))
        if translation.reference_kernel or self._reads_strings(step):
            # Known inputs stay inside the step object, so the graph's arguments are run-time values.
            constants = {i: self.known[n] for i, n in enumerate(step.inputs) if n and n in self.known}
            constants.update({i: None for i, n in enumerate(step.inputs) if not n})
            args = [self._materialize(n) for i, n in enumerate(step.inputs) if i not in constants]
            node = self.graph.create_node("call_function", ReferenceKernelStep(step, constants), tuple(args), {},
                                          name=hint)
        elif translation.subgraphs:
            self._emit_with_subgraphs(step, translation)
            return
        elif (direct := self._specialized(step, translation)) is not None:
            args = [self._materialize(step.inputs[i]) for i in direct.inputs]
            node = self.graph.create_node("call_function", direct.target, tuple(args), dict(direct.kwargs), name=hint)
        else:
            args = [self._argument(translation, position, name) for position, name in enumerate(step.inputs)]
            kwargs = self._kwargs(step, translation)
            node = self.graph.create_node("call_function", translation.fn, tuple(args), kwargs, name=hint)
        node.meta["onnx_node"] = step.name
        node.meta["onnx_op"] = f"{step.op_type}-{step.since_version}"
        for name, info in zip(step.outputs, step.output_info, strict=False):
            if name and (_is_string_info(info) or _is_string_info(self.plan.value_info.get(name))):
                self.strings.add(name)
        if len(step.outputs) == 1:
            self.nodes[step.outputs[0]] = node
            return
        for i, name in enumerate(step.outputs):
            if name:
                item = self.graph.call_function(_output, (node, i))
                item.meta.update(node.meta)
                self.nodes[name] = item

    def _specialized(self, step: Step, translation: Translation) -> DirectCall | None:
        """The translation's specializer's plain torch call for this step, if it has one."""
        if translation.specialize is None or len(step.outputs) != 1:
            return None
        inputs = [self._step_input(name) for name in step.inputs]
        attrs = {k: v for k, v in step.attributes.items() if not isinstance(v, (Plan, np.ndarray))}
        return translation.specialize(attrs, inputs)

    def _step_input(self, name: str) -> StepInput:
        if not name:
            return StepInput(present=False)
        if name in self.known:
            value = self.known[name]
            if not isinstance(value, np.ndarray):
                return StepInput(value=value)
            return StepInput(value=value, dtype=_torch_dtype_of(value.dtype), rank=value.ndim)
        node = self.nodes.get(name)
        if node is not None and node.op == "get_attr":
            weight = getattr(self.root, str(node.target))
            return StepInput(dtype=weight.dtype, rank=weight.dim())
        if name in self.host:
            return StepInput()
        info = self.plan.value_info.get(name) or next((i for i in self.plan.inputs if i.name == name), None)
        if info is None or info.kind != "tensor":
            return StepInput()
        dtype = _torch_dtype_of(info.dtype) if info.dtype is not None else None
        if dtype == torch.float32 and self.dtype is not None:
            dtype = self.dtype
        return StepInput(dtype=dtype, rank=None if info.shape is None else len(info.shape))

    def _emit_with_subgraphs(self, step: Step, translation: Translation) -> None:
        """A step whose translation takes its subgraphs as callables (SequenceMap, FlexAttention):
        a :class:`SubgraphStep` module holding one submodule per subgraph."""
        captures = sorted({c for sub in step.subgraphs.values() for c in sub.captures if c not in self.known})
        graphs = {}
        capture_positions = {}
        for name, sub in step.subgraphs.items():
            own = [c for c in captures if c in sub.captures]
            graphs[name] = self._submodule(sub, [*sub.input_names, *own])
            capture_positions[name] = [captures.index(c) for c in own]
        args = [self._argument(translation, position, name) for position, name in enumerate(step.inputs)]
        module = SubgraphStep(translation.fn, graphs, capture_positions, len(args))
        self._call_module(step, module, [*args, *(self._materialize(c) for c in captures)],
                          self._kwargs(step, translation))

    def _argument(self, translation: Translation, position: int, name: str) -> Any:
        if not name:
            return None
        if name in self.known and position in translation.static:
            return np.asarray(self.known[name]).tolist()
        if name in self.host and position in translation.static:
            return self.nodes[name]  # a NumPy array at run time: read with ints()/floats()
        return self._materialize(name)

    def _kwargs(self, step: Step, translation: Translation) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        for key, value in step.attributes.items():
            if isinstance(value, Plan):
                continue
            if isinstance(value, np.ndarray):
                kwargs[key] = self._buffer(f"{step.name}_{key}", value)
            elif isinstance(value, onnx.TypeProto) or (isinstance(value, tuple) and value and
                                                       isinstance(value[0], onnx.TypeProto)):
                continue  # types (Optional's) are carried by the values themselves
            else:
                kwargs[key] = value
        if step.op_type in ("Cast",) and self.dtype is not None and kwargs.get("to") == onnx.TensorProto.FLOAT:
            kwargs["to"] = _ELEM_TYPE[self.dtype]
        if translation.n_outputs:
            kwargs["n_outputs"] = len(step.outputs)
        return kwargs

    # -- control flow ---------------------------------------------------------------------------

    def _inline(self, branch: Plan) -> list[str]:
        """Steps of a branch emitted into this graph; returns the names of its outputs."""
        self._add_weights(branch.initializers)
        self._steps(branch)
        return branch.output_names

    def _bind_outputs(self, step: Step, sources: Sequence[str]) -> None:
        for name, source in zip(step.outputs, sources, strict=False):
            if not name:
                continue
            if source in self.known and source not in self.nodes:
                self.known[name] = self.known[source]
            else:
                self.nodes[name] = self._materialize(source)

    def _if(self, step: Step) -> None:
        cond = step.inputs[0]
        if cond in self.known:
            taken = "then_branch" if bool(np.asarray(self.known[cond]).reshape(-1)[0]) else "else_branch"
            self._bind_outputs(step, self._inline(step.attributes[taken]))
            return
        captures = sorted(set(step.attributes["then_branch"].captures) | set(step.attributes["else_branch"].captures))
        dynamic = [c for c in captures if c not in self.known]
        branches = [self._submodule(step.attributes[b], dynamic) for b in ("then_branch", "else_branch")]
        module = IfModule(*branches)
        # A condition computed from shapes stays a NumPy value: deciding on it traces cleanly.
        cond_node = self.nodes[cond] if cond in self.host else self._materialize(cond)
        self._call_module(step, module, [cond_node, *(self._materialize(c) for c in dynamic)])

    def _loop(self, step: Step) -> None:
        body: Plan = step.attributes["body"]
        trip, cond, *state = step.inputs
        captures = [c for c in body.captures if c not in self.known]
        # The body only runs while the condition holds, so inside it the condition input is True.
        known_inside = {body.input_names[1]: np.asarray(True)} if len(body.input_names) > 1 else {}
        inputs = [body.input_names[0], *body.input_names[2:]]
        sub = _Converter(body, self.dtype, {**self.known, **known_inside}, self.parameter_names)
        module = sub.build([*inputs, *captures], body.output_names, single_output_unwrapped=False)
        always = body.output_names[0] in sub.known and bool(np.asarray(sub.known[body.output_names[0]]).all())
        loop = LoopModule(module, len(state), len(body.outputs) - 1 - len(state), always)
        trip_arg = int(np.asarray(self.known[trip]).reshape(-1)[0]) if trip and trip in self.known else (
            self._materialize(trip) if trip else None)
        cond_arg = bool(np.asarray(self.known[cond]).reshape(-1)[0]) if cond and cond in self.known else (
            self._materialize(cond) if cond else None)
        self._call_module(step, loop, [trip_arg, cond_arg, *(self._materialize(s) for s in state),
                                       *(self._materialize(c) for c in captures)])

    def _scan(self, step: Step) -> None:
        body: Plan = step.attributes["body"]
        captures = [c for c in body.captures if c not in self.known]
        module = self._submodule(body, [*body.input_names, *captures])
        version8 = step.since_version < 9
        n_state = len(step.inputs) - int(step.attributes["num_scan_inputs"]) - int(version8)
        attrs = {k: step.attributes.get(k) for k in
                 ("scan_input_axes", "scan_input_directions", "scan_output_axes", "scan_output_directions",
                  "directions")}
        attrs["body_plan"] = body
        scan = ScanModule(module, len(step.inputs), n_state, len(body.outputs) - n_state, attrs, version8)
        self._call_module(step, scan, [*(self._materialize(v) if v else None for v in step.inputs),
                                       *(self._materialize(c) for c in captures)])

    def _submodule(self, plan: Plan, inputs: list[str]) -> fx.GraphModule:
        sub = _Converter(plan, self.dtype, self.known, self.parameter_names)
        return sub.build(inputs, plan.output_names, single_output_unwrapped=False)

    def _call_module(self, step: Step, module: torch.nn.Module, args: list[Any],
                     kwargs: dict[str, Any] | None = None) -> None:
        name = self._attr_name(f"{step.op_type.lower()}_{step.name}")
        self.root.add_module(name, module)
        node = self.graph.call_module(name, tuple(args), kwargs or {})
        node.meta["onnx_node"] = step.name
        node.meta["onnx_op"] = f"{step.op_type}-{step.since_version}"
        for i, out in enumerate(step.outputs):
            if out:
                item = self.graph.call_function(_output, (node, i))
                self.nodes[out] = item


class HostStep:
    """A step computed from shapes alone, run on its NumPy reference kernel inside the module.

    Its inputs are NumPy arrays (from :func:`shape_of` or other host steps) or folded constants
    (as lists, with their dtypes recorded here), so it never touches tensor data: under
    torch.export it evaluates to plain Python values and leaves no data-dependent shapes behind.
    """

    __module__ = __name__

    def __init__(self, step: Step, dtypes: Sequence[str | None]) -> None:
        self.step = step
        self.dtypes = list(dtypes)
        self.__name__ = f"host_{_identifier(step.op_type.lower())}"

    def __call__(self, *args: Any) -> Any:
        arrays = [
            None if a is None else (np.asarray(a, dtype=d) if d is not None else np.asarray(a))
            for a, d in zip(args, self.dtypes, strict=True)
        ]
        step = self.step
        outputs = as_outputs(call_step(step, arrays, standalone_context(step)))
        return outputs[0] if len(step.outputs) == 1 else tuple(outputs)

    def __repr__(self) -> str:
        return f"HostStep({self.step.name!r}, {self.step.op_type})"


def _torch_dtype_of(dtype: np.dtype[Any]) -> torch.dtype | None:
    try:
        return from_numpy(np.zeros(0, dtype=dtype)).dtype
    except (ValueError, TypeError):
        return None


def _is_string_info(info: Any) -> bool:
    return info is not None and info.dtype is not None and info.dtype.kind in "OSU"


def shape_of(x: torch.Tensor, size: bool, start: int, end: int | None) -> np.ndarray:
    """ONNX Shape (or Size) of ``x`` as a NumPy int64 array, computed from the tensor's shape only."""
    dims = [int(d) for d in x.shape]
    if size:
        return np.asarray(int(np.prod(dims)), dtype=np.int64)
    return np.asarray(dims[start:end], dtype=np.int64)


def host_tensor(value: Any) -> torch.Tensor:
    """A host (NumPy) value as a tensor, where an op needs one."""
    return from_numpy(value)


def _output(result: Any, index: int) -> Any:
    """Output ``index`` of a node's result (a tuple when the node has several outputs; a list
    is one sequence value)."""
    if isinstance(result, tuple):
        return result[index]
    return result


_ELEM_TYPE = {torch.float64: onnx.TensorProto.DOUBLE, torch.float32: onnx.TensorProto.FLOAT,
              torch.float16: onnx.TensorProto.FLOAT16, torch.bfloat16: onnx.TensorProto.BFLOAT16}
