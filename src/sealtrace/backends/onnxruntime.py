"""The ONNX Runtime backend: runs the Plan's source model in an onnxruntime.InferenceSession.

Two modes:
- optimized (what users deploy): ORT's graph optimizations on; only graph outputs come back, so
  observers see the run's start and end but no steps.
- per-op: every intermediate value of the top-level graph is exposed as an extra graph output and
  graph optimizations are disabled (fusions would remove the very values we compare). After the run,
  each top-level step is reported to observers in Plan order with its inputs and outputs, exactly as
  the reference backend reports them. Steps inside subgraphs (If/Loop/Scan bodies) are not visible to
  ORT's outputs and are not reported; their enclosing step is.
By default the mode follows the observers: per-op when a run has observers, optimized otherwise.
Models over 2 GB are handed to ORT through a temporary file with external data.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from sealtrace.backends.base import StepEvent, StepObserver
from sealtrace.errors import BackendError
from sealtrace.plan.model import Plan, Step

_PROTOBUF_LIMIT = 2_000_000_000
_LEVELS = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


class OnnxRuntimeBackend:
    """ONNX Runtime on the CPU, optimized or per-op (see the module docstring)."""

    name = "onnxruntime"
    # ORT executes the ONNX model itself: steps without a NumPy kernel (com.microsoft ops) are fine.
    needs_kernels = False

    def __init__(self, threads: int | None = None, optimization: str = "all", per_op: bool | None = None) -> None:
        if optimization not in _LEVELS:
            raise BackendError(f"unknown optimization level {optimization!r}; choose one of {', '.join(_LEVELS)}")
        self.threads = threads
        self.optimization = optimization
        self.per_op = per_op
        self._sessions: dict[tuple[int, bool], tuple[Plan, ort.InferenceSession]] = {}
        self._tmp: list[tempfile.TemporaryDirectory[str]] = []
        self._running_per_op = False

    @property
    def version(self) -> str:
        return str(ort.__version__)

    @property
    def per_step(self) -> bool:
        """Whether the current (or last) run reports every step: per-op mode."""
        return bool(self.per_op if self.per_op is not None else self._running_per_op)

    def describe(self, per_op: bool) -> dict[str, Any]:
        """Settings that shape the numbers, for audit headers and reports."""
        return {
            "mode": "per-op" if per_op else "optimized",
            "graph_optimization": "disabled" if per_op else self.optimization,
            "intra_op_threads": self.threads or 0,
        }

    def session_for(self, plan: Plan, per_op: bool = False) -> ort.InferenceSession:
        """The InferenceSession for ``plan`` in the given mode, created once per Plan."""
        key = (id(plan), per_op)
        cached = self._sessions.get(key)
        if cached is not None and cached[0] is plan:
            return cached[1]
        if plan.source is None:
            raise BackendError("the onnxruntime backend needs a Plan built from an ONNX model")
        model = _expose_intermediates(plan) if per_op else plan.source
        options = ort.SessionOptions()
        if self.threads:
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
        options.graph_optimization_level = _LEVELS["disabled" if per_op else self.optimization]
        options.log_severity_level = 3
        try:
            session = ort.InferenceSession(self._loadable(model), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT raises its own exception types
            raise BackendError(f"onnxruntime cannot load the model: {_first_line(exc)}") from None
        self._sessions[key] = (plan, session)
        return session

    def _loadable(self, model: onnx.ModelProto) -> bytes | str:
        if model.ByteSize() < _PROTOBUF_LIMIT:
            return model.SerializeToString()
        tmp = tempfile.TemporaryDirectory(prefix="sealtrace-ort-")
        self._tmp.append(tmp)
        path = Path(tmp.name) / "model.onnx"
        onnx.save_model(model, str(path), save_as_external_data=True, location="model.data")
        return str(path)

    def run(
        self,
        plan: Plan,
        feeds: Mapping[str, Any],
        observers: Sequence[StepObserver] = (),
    ) -> dict[str, Any]:
        per_op = self.per_op if self.per_op is not None else bool(observers)
        self._running_per_op = per_op
        session = self.session_for(plan, per_op)
        for observer in observers:
            observer.on_run_start(plan, feeds, self)
        names = [o.name for o in session.get_outputs()]
        try:
            values = session.run(names, dict(feeds))
        except Exception as exc:  # ORT raises its own exception types
            raise BackendError(f"onnxruntime failed: {_first_line(exc)}") from None
        env: dict[str, Any] = dict(zip(names, values, strict=True))
        result = {name: env[name] for name in plan.output_names}
        if per_op:
            _report_steps(plan, feeds, env, observers)
        for observer in observers:
            observer.on_run_end(result)
        return result

    def run_step(self, plan: Plan, step: Step, inputs: Sequence[Any]) -> list[Any] | None:
        """Run one step alone on ORT with the given inputs (None for steps with subgraphs)."""
        if step.subgraphs or step.node is None or plan.source is None:
            return None
        model = _single_node_model(plan, step, inputs)
        options = ort.SessionOptions()
        options.graph_optimization_level = _LEVELS["disabled"]
        options.log_severity_level = 3
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        feeds = {f"in{i}": v for i, v in enumerate(inputs) if step.inputs[i]}
        return list(session.run(None, feeds))


def _report_steps(
    plan: Plan, feeds: Mapping[str, Any], env: dict[str, Any], observers: Sequence[StepObserver]
) -> None:
    """Replay the per-op results to observers in Plan order, releasing values as the Plan says."""
    values: dict[str, Any] = dict(plan.initializers)
    values.update(feeds)
    values.update(env)
    for step, release in zip(plan.steps, plan.release_after, strict=True):
        inputs = [values.get(n) if n else None for n in step.inputs]
        outputs = [values.get(n) if n else None for n in step.outputs]
        event = StepEvent((), step, inputs, outputs)
        for observer in observers:
            observer.on_step(event)
        for name in release:
            if name not in plan.output_names:
                values.pop(name, None)


def _expose_intermediates(plan: Plan) -> onnx.ModelProto:
    """A copy of the source model whose graph outputs include every top-level step output."""
    model = onnx.ModelProto()
    model.CopyFrom(plan.source)
    existing = {o.name for o in model.graph.output}
    known = {vi.name: vi for vi in model.graph.value_info}
    for step in plan.steps:
        for name in step.outputs:
            if name and name not in existing:
                existing.add(name)
                if name in known:
                    model.graph.output.append(known[name])
                else:
                    model.graph.output.append(onnx.ValueInfoProto(name=name))
    return model


def _single_node_model(plan: Plan, step: Step, inputs: Sequence[Any]) -> onnx.ModelProto:
    node = onnx.NodeProto()
    node.CopyFrom(step.node)
    del node.input[:]
    graph_inputs = []
    for i, (name, value) in enumerate(zip(step.inputs, inputs, strict=True)):
        if not name:
            node.input.append("")
            continue
        node.input.append(f"in{i}")
        array = np.asarray(value)
        elem = onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
        graph_inputs.append(onnx.helper.make_tensor_value_info(f"in{i}", elem, list(array.shape)))
    outputs = [onnx.ValueInfoProto(name=o) for o in step.outputs if o]
    graph = onnx.helper.make_graph([node], f"step_{step.index}", graph_inputs, outputs)
    source = plan.source
    return onnx.helper.make_model(graph, ir_version=source.ir_version, opset_imports=list(source.opset_import))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
