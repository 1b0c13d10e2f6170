"""Per-leaf export parity: where a PyTorch model's ONNX export stops matching PyTorch.

1. Every leaf module CALL is captured in PyTorch with forward hooks (a module called twice gives
   two entries; outputs are cloned, so later in-place ops cannot change what was recorded).
2. The module is exported with ``torch.onnx.export(dynamo=True)``. Each exported node carries
   ``pkg.torch.onnx.name_scopes`` metadata naming the module it came from; consecutive nodes of one
   leaf module form one call, in execution order, and the values they hand to the rest of the graph
   are that call's outputs (matched to the captured tensors by order and shape).
3. The ONNX model runs on each backend (reference, onnxruntime per-op) and every mapped leaf call
   is compared with PyTorch using sealtrace.parity's metrics; the result per backend is a
   :class:`~sealtrace.parity.DriftReport` (steps = leaf calls), so drift origin, layout detection
   and the JSON / Markdown / HTML reports are the parity ones.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import dataclasses
import io
import logging
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import torch
from torch.utils import _pytree as pytree

from sealtrace.backends import Backend, get_backend
from sealtrace.errors import BackendError, SealtraceError
from sealtrace.parity import DriftReport, StepComparison, ToleranceTable, ValueDiff, compare_values
from sealtrace.parity.checker import comparison_status
from sealtrace.parity.precision import precision_diff
from sealtrace.plan import Plan, build_plan
from sealtrace.plan.events import StepEvent
from sealtrace.torchops.dtypes import to_numpy

_SCOPES = "pkg.torch.onnx.name_scopes"


class ExportParityError(SealtraceError):
    """The module could not be run or exported (names the reason)."""


@dataclass(frozen=True)
class LeafCall:
    """One call of one leaf module, as PyTorch computed it, and where it lives in the ONNX graph."""

    position: int  # order of the call in the PyTorch run
    module: str  # qualified name ('encoder.layer.0.attention.self.query')
    call: int  # 0 for the first call of this module, 1 for the second ...
    type: str  # the module's class name
    outputs: tuple[np.ndarray, ...]
    onnx_values: tuple[str, ...] = ()  # empty when no ONNX value maps to this call
    inputs: tuple[np.ndarray, ...] = ()  # the tensors the call was given, before it ran
    nodes: tuple[int, ...] = ()  # positions in the ONNX graph of the nodes of this call

    @property
    def label(self) -> str:
        return f"{self.module}#{self.call}"


@dataclass
class ExportParityReport:
    """Leaf calls of one PyTorch run compared with the ONNX export on each backend."""

    calls: list[LeafCall]
    reports: dict[str, DriftReport]
    onnx_model: onnx.ModelProto = field(repr=False)
    precision: str | None = None  # fp16 | bf16 when both sides ran in that precision

    @property
    def unmapped(self) -> list[LeafCall]:
        """Leaf calls with no ONNX value (folded away, or an identity such as Dropout in eval)."""
        return [c for c in self.calls if not c.onnx_values]

    @property
    def nothing_compared(self) -> str | None:
        """Why no leaf call was compared, when none was (a check of nothing is no pass)."""
        if not self.calls:
            return "the module made no leaf module call"
        compared = sum(1 for r in self.reports.values() for s in r.steps if s.status != "not-compared")
        if not compared:
            return f"none of the {len(self.calls)} leaf module calls has an ONNX value"
        return None

    @property
    def passed(self) -> bool:
        return self.nothing_compared is None and all(r.passed for r in self.reports.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "sealtrace.export-parity.v1",
            "leaf_calls": [
                {"position": c.position, "module": c.module, "call": c.call, "type": c.type,
                 "onnx_values": list(c.onnx_values)}
                for c in self.calls
            ],
            "precision": self.precision,
            "reports": {name: r.to_json() for name, r in sorted(self.reports.items())},
            "passed": self.passed,
        }


def _leaves(value: Any) -> list[torch.Tensor]:
    return [v for v in pytree.tree_leaves(value) if isinstance(v, torch.Tensor)]


def _capture_leaf_calls(
    module: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[list[LeafCall], list[torch.Tensor]]:
    leaves = {name: m for name, m in module.named_modules() if name and not any(True for _ in m.children())}
    calls: list[LeafCall] = []
    counts: dict[str, int] = {}
    given: dict[str, tuple[np.ndarray, ...]] = {}
    handles = []

    def record(value: Any) -> tuple[np.ndarray, ...]:
        # Cloned now: an in-place op later in the forward pass must not change the record.
        return tuple(to_numpy(t.detach().clone()) for t in _leaves(value))

    def pre_hook_for(name: str) -> Any:
        def pre_hook(_module: torch.nn.Module, inputs: Any) -> None:
            given[name] = record(inputs)  # before an in-place leaf (ReLU(inplace=True)) overwrites them

        return pre_hook

    def hook_for(name: str, leaf: torch.nn.Module) -> Any:
        def hook(_module: torch.nn.Module, _inputs: Any, output: Any) -> None:
            k = counts.get(name, 0)
            counts[name] = k + 1
            calls.append(LeafCall(len(calls), name, k, type(leaf).__name__, record(output), inputs=given.pop(name, ())))

        return hook

    for name, leaf in leaves.items():
        handles.append(leaf.register_forward_pre_hook(pre_hook_for(name)))
        handles.append(leaf.register_forward_hook(hook_for(name, leaf)))
    try:
        with torch.no_grad():
            result = module(*args, **kwargs)
    except Exception as exc:
        raise ExportParityError(f"the module failed on the example inputs: {type(exc).__name__}: {exc}") from None
    finally:
        for handle in handles:
            handle.remove()
    return calls, _leaves(result)


def _export(module: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any], opset: int | None,
            optimize: bool) -> onnx.ModelProto:
    try:
        import onnxscript  # noqa: F401
    except ImportError:
        raise BackendError("export parity needs onnxscript (pip install onnxscript)") from None
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.disable(logging.WARNING)
            try:
                program = torch.onnx.export(module, args, kwargs=dict(kwargs) or None, dynamo=True,
                                            opset_version=opset, verbose=False, optimize=optimize)
                if program is not None and _has_autocast_region(program.exported_program):
                    # torch.export wraps a `with torch.autocast(...)` block in a higher-order op whose
                    # nodes lose their modules when it is inlined; exported without pre-dispatch, the
                    # block is traced through (its casts are ops) and every node keeps its module.
                    from torch.export._trace import _export as export_program

                    inference = export_program(module, args, dict(kwargs) or None, strict=False, pre_dispatch=False)
                    program = torch.onnx.export(inference, args, kwargs=dict(kwargs) or None, dynamo=True,
                                                opset_version=opset, verbose=False, optimize=optimize)
            finally:
                logging.disable(logging.NOTSET)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ExportParityError(f"torch.onnx.export failed: {type(exc).__name__}: {first[:300]}") from None
    assert program is not None
    model: onnx.ModelProto = program.model_proto
    return model


def _has_autocast_region(program: Any) -> bool:
    return program is not None and any(
        (node.meta.get("torch_fn") or ("",))[0] == "wrap_with_autocast" for node in program.graph.nodes
    )


def _scope_of(node: onnx.NodeProto) -> str | None:
    for prop in node.metadata_props:
        if prop.key == _SCOPES:
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                return None
            # The last entry names the fx node; the one before is the innermost module.
            return str(scopes[-2]) if len(scopes) >= 2 else ""
    return None


def _map_calls(model: onnx.ModelProto, calls: list[LeafCall]) -> list[LeafCall]:
    """Attach to each leaf call the ONNX values its run of nodes hands to the rest of the graph."""
    names = {c.module for c in calls}
    nodes = list(model.graph.node)
    runs: list[tuple[str, list[onnx.NodeProto]]] = []
    at: dict[int, int] = {}  # id(node) -> its position in the graph
    for position, node in enumerate(nodes):
        scope = _scope_of(node)
        if scope in names:
            assert scope is not None
            at[id(node)] = position
            if runs and runs[-1][0] == scope:
                runs[-1][1].append(node)
            else:
                runs.append((scope, [node]))
    consumers: dict[str, int] = {}
    for node in nodes:
        for value in node.input:
            consumers[value] = consumers.get(value, 0) + 1
    graph_outputs = [o.name for o in model.graph.output]
    shapes = _static_shapes(model)
    per_module: dict[str, list[list[onnx.NodeProto]]] = {}
    for scope, run in runs:
        per_module.setdefault(scope, []).append(run)
    mapped: list[LeafCall] = []
    for call in calls:
        module_runs = per_module.get(call.module, [])
        if len(module_runs) != sum(1 for c in calls if c.module == call.module) or call.call >= len(module_runs):
            mapped.append(call)  # calls and runs disagree: do not guess
            continue
        run = module_runs[call.call]
        inside = {v for n in run for v in n.input}
        produced = [v for n in run for v in n.output if v]
        # Values used outside the run (or leaving the graph) are the call's outputs.
        used_inside = {v: sum(1 for n in run for i in n.input if i == v) for v in produced}
        leaving = [v for v in produced if v in graph_outputs or consumers.get(v, 0) > used_inside.get(v, 0)]
        if not leaving:
            leaving = [produced[-1]] if produced and produced[-1] not in inside else []
        values = _match(call.outputs, leaving, shapes)
        mapped.append(dataclasses.replace(call, onnx_values=values, nodes=tuple(at[id(n)] for n in run)))
    return mapped


def _match(outputs: Sequence[np.ndarray], candidates: list[str], shapes: Mapping[str, tuple[int, ...]]
           ) -> tuple[str, ...]:
    if len(outputs) == len(candidates):
        return tuple(candidates)
    picked: list[str] = []
    left = list(candidates)
    for out in outputs:
        hit = next((c for c in left if shapes.get(c) == out.shape), None)
        if hit is None:
            return ()
        picked.append(hit)
        left.remove(hit)
    return tuple(picked)


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:
        return {}
    shapes: dict[str, tuple[int, ...]] = {}
    for vi in [*inferred.graph.value_info, *inferred.graph.output]:
        dims = vi.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = tuple(d.dim_value for d in dims)
    return shapes


class _Collector:
    """Observer keeping the values of the named steps' outputs."""

    def __init__(self, wanted: set[str]) -> None:
        self.wanted = wanted
        self.values: dict[str, Any] = {}

    def on_run_start(self, plan: Plan, feeds: Mapping[str, Any], backend: Backend) -> None:
        for name, value in feeds.items():
            if name in self.wanted:
                self.values[name] = value

    def on_step(self, event: StepEvent) -> None:
        if event.path:
            return
        for name, value in zip(event.step.outputs, event.outputs, strict=False):
            if name in self.wanted:
                self.values[name] = np.array(value, copy=True)

    def on_run_end(self, outputs: Mapping[str, Any]) -> None:
        pass


def _feeds(plan: Plan, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """ONNX graph inputs from the example: keyword tensors by name (the exporter keeps them),
    the other tensors in order."""
    named = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
    rest = [t for t in pytree.tree_leaves((args, {k: v for k, v in kwargs.items() if k not in named}))
            if isinstance(t, torch.Tensor)]
    feeds: dict[str, Any] = {}
    for info in plan.inputs:
        if info.name in named:
            feeds[info.name] = to_numpy(named.pop(info.name))
        elif rest:
            feeds[info.name] = to_numpy(rest.pop(0))
        else:
            raise ExportParityError(f"no example tensor for ONNX input {info.name!r}")
    if rest or named:
        raise ExportParityError(f"the ONNX model takes {len(plan.inputs)} inputs; the example has more tensors")
    return feeds


def _backend(name: str) -> Backend:
    if name == "onnxruntime":
        from sealtrace.backends.onnxruntime import OnnxRuntimeBackend

        return OnnxRuntimeBackend(per_op=True)
    return get_backend(name)


# int8-dynamic is `sealtrace parity`'s only: torch's quantize_dynamic quantizes Linear layers
# (activations with reduce_range on x86) and ONNX Runtime's MatMul and Conv but not Gemm (what a
# Linear on 2-D inputs exports to), so the two sides would not run the same int8 model.
PRECISIONS = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _in_precision(module: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any], precision: str
                  ) -> tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]:
    """A copy of the module and the example with floating-point weights and tensors in ``precision``."""
    dtype = PRECISIONS.get(precision)
    if dtype is None:
        raise ExportParityError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")

    def cast(value: Any) -> Any:
        return value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() else value

    low = copy.deepcopy(module).to(dtype)
    return low, pytree.tree_map(cast, args), pytree.tree_map(cast, dict(kwargs))


def _precision_loss(calls: Sequence[LeafCall], full: Sequence[LeafCall], table: ToleranceTable
                    ) -> dict[str, tuple[ValueDiff, ...]]:
    """Per leaf call, its outputs in the lower precision (as float32) against the float32 model's."""
    reference = {c.label: c.outputs for c in full}
    loss: dict[str, tuple[ValueDiff, ...]] = {}
    for call in calls:
        theirs = reference.get(call.label)
        if theirs is None or len(theirs) != len(call.outputs):
            continue
        loss[call.label] = tuple(
            precision_diff(f"{call.label}:{k}", mine, wide, table, call.type)
            for k, (mine, wide) in enumerate(zip(call.outputs, theirs, strict=True))
        )
    return loss


class _LocalErrors:
    """Each leaf call's own error on a backend: its ONNX nodes re-run alone on that backend with the
    inputs PyTorch gave the call, compared with PyTorch's outputs (as `sealtrace parity` re-runs a
    step with the other side's inputs). None where the nodes' inputs cannot all be named."""

    def __init__(self, model: onnx.ModelProto, table: ToleranceTable) -> None:
        self.model = model
        self.table = table
        self.weights = {t.name for t in model.graph.initializer}
        self.producer = {v: node for node in model.graph.node for v in node.output}
        self.shapes = _static_shapes(model)
        self.parts: dict[int, tuple[Plan, dict[str, np.ndarray]] | None] = {}
        self.done: dict[tuple[str, int], tuple[ValueDiff, ...] | None] = {}

    def of(self, call: LeafCall, backend: Backend) -> tuple[ValueDiff, ...] | None:
        key = (backend.name, call.position)
        if key not in self.done:
            self.done[key] = self._compute(call, backend)
        return self.done[key]

    def _compute(self, call: LeafCall, backend: Backend) -> tuple[ValueDiff, ...] | None:
        if call.position not in self.parts:
            self.parts[call.position] = self._part(call)
        part = self.parts[call.position]
        if part is None:
            return None
        plan, feeds = part
        try:
            outputs = backend.run(plan, feeds)
        except Exception:  # a part the backend cannot run alone gives no local figure
            return None
        return tuple(
            compare_values(value, outputs[value], theirs, self.table.for_value(call.type, value))
            for value, theirs in zip(call.onnx_values, call.outputs, strict=True)
        )

    def _part(self, call: LeafCall) -> tuple[Plan, dict[str, np.ndarray]] | None:
        """The call's nodes as a model of their own (with the Constants they read), and its feeds."""
        graph = self.model.graph
        run = [graph.node[i] for i in call.nodes]
        made: set[str] = set()
        needed: list[str] = []
        constants: list[onnx.NodeProto] = []
        for node in run:
            for value in node.input:
                if value and value not in made and value not in self.weights and value not in needed:
                    producer = self.producer.get(value)
                    if producer is not None and producer.op_type == "Constant":
                        constants.append(producer)
                        made.add(value)
                    else:
                        needed.append(value)
            made.update(node.output)
        names = _match(call.inputs, needed, self.shapes) if needed else ()
        if not run or len(names) != len(needed):
            return None
        feeds = dict(zip(names, call.inputs, strict=True))
        used = {v for node in run for v in node.input}
        sub = onnx.helper.make_graph(
            [*constants, *run], call.label,
            [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
             for n, a in feeds.items()],
            [onnx.helper.make_tensor_value_info(v, onnx.helper.np_dtype_to_tensor_dtype(out.dtype), out.shape)
             for v, out in zip(call.onnx_values, call.outputs, strict=True)],
            [t for t in graph.initializer if t.name in used],
        )
        try:
            part = onnx.helper.make_model(sub, opset_imports=self.model.opset_import, ir_version=self.model.ir_version)
            return build_plan(part), feeds
        except Exception:  # nodes that do not stand alone (a value from a subgraph's scope) give no figure
            return None


def check_export(
    module: torch.nn.Module,
    example_inputs: tuple[Any, ...] | Any,
    *,
    kwargs: Mapping[str, Any] | None = None,
    backends: Sequence[str] = ("reference", "onnxruntime"),
    tolerance: ToleranceTable | None = None,
    opset: int | None = None,
    optimize: bool = False,
    precision: str | None = None,
) -> ExportParityReport:
    """Compare ``module`` with its dynamo ONNX export, leaf module call by leaf module call.

    ``example_inputs`` are the positional arguments (a tuple, or one tensor), ``kwargs`` keyword
    arguments. The module is put in eval mode. Returns one DriftReport per backend whose steps are
    the leaf calls in PyTorch execution order ("not-compared" where no ONNX value maps to a call;
    a call over tolerance is "born-here" or "inherited" by its local error, see _LocalErrors).
    ``optimize=False`` (the default) exports without the exporter's graph optimizations, which
    fuse leaves away (Conv + BatchNorm); ``True`` checks the optimized model users deploy.
    ``precision`` ("fp16", "bf16") runs PyTorch and the export with weights and floating-point
    inputs in that precision; each report's ``precision_loss`` then holds, per leaf call, how far
    the call's PyTorch outputs moved from the float32 model's: the drift the precision causes,
    apart from the export drift the steps show.
    """
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    kw = dict(kwargs or {})
    module = module.eval()
    table = tolerance or ToleranceTable()
    loss: dict[str, tuple[ValueDiff, ...]] = {}
    if precision is not None:
        full, _ = _capture_leaf_calls(module, args, kw)
        module, args, kw = _in_precision(module, args, kw, precision)
    calls, final = _capture_leaf_calls(module, args, kw)
    if precision is not None:
        loss = _precision_loss(calls, full, table)
    model = _export(module, args, kw, opset, optimize)
    calls = _map_calls(model, calls)
    plan = build_plan(model)
    feeds = _feeds(plan, args, kw)
    local = _LocalErrors(model, table)
    wanted = {v for c in calls for v in c.onnx_values}
    reports: dict[str, DriftReport] = {}
    for name in backends:
        backend = _backend(name)
        collector = _Collector(wanted)
        outputs = backend.run(plan, feeds, [collector])
        steps: list[StepComparison] = []
        for i, call in enumerate(calls):
            if not call.onnx_values or any(v not in collector.values for v in call.onnx_values):
                steps.append(StepComparison(i, (), i, call.label, call.type, (), None, "not-compared"))
                continue
            diffs = tuple(
                compare_values(value, collector.values[value], theirs, table.for_value(call.type, value))
                for value, theirs in zip(call.onnx_values, call.outputs, strict=True)
            )
            # The local re-run costs a run of the leaf's nodes: done for calls over tolerance only.
            own = local.of(call, backend) if any(d.exceeds for d in diffs) else None
            steps.append(StepComparison(i, (), i, call.label, call.type, diffs, own, comparison_status(diffs, own)))
        graph_outputs = [
            compare_values(out, outputs[out], to_numpy(t), table.for_value("", out))
            for out, t in zip(plan.output_names, final, strict=False)
        ]
        reports[name] = DriftReport(
            model=type(module).__name__,
            plan_digest=plan.digest,
            backends=(backend.name, "pytorch"),
            backend_settings={backend.name: {"version": backend.version},
                              "pytorch": {"version": str(torch.__version__)}},
            tolerance=table,
            steps=steps,
            graph_outputs=graph_outputs,
            precision=precision,
            precision_loss=loss,
        )
    return ExportParityReport(calls, reports, model, precision)
