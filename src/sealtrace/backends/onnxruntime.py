"""The ONNX Runtime backend: runs the Plan's source model in an onnxruntime.InferenceSession."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import onnxruntime as ort

from sealtrace.backends.base import StepObserver
from sealtrace.errors import BackendError
from sealtrace.plan.model import Plan


class OnnxRuntimeBackend:
    """Plain ONNX Runtime on the CPU; reports graph outputs only (per_step is False)."""

    name = "onnxruntime"
    per_step = False

    def __init__(self, threads: int | None = None, optimization: str = "all") -> None:
        self.threads = threads
        self.optimization = optimization
        self._sessions: dict[int, tuple[Plan, ort.InferenceSession]] = {}

    @property
    def version(self) -> str:
        return str(ort.__version__)

    def session_for(self, plan: Plan) -> ort.InferenceSession:
        """The InferenceSession for ``plan``, created once per Plan."""
        cached = self._sessions.get(id(plan))
        if cached is not None and cached[0] is plan:
            return cached[1]
        if plan.source is None:
            raise BackendError("the onnxruntime backend needs a Plan built from an ONNX model")
        options = ort.SessionOptions()
        if self.threads:
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
        options.graph_optimization_level = {
            "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[self.optimization]
        options.log_severity_level = 3
        try:
            session = ort.InferenceSession(
                plan.source.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
            raise BackendError(f"onnxruntime cannot load the model: {exc}") from None
        self._sessions = {id(plan): (plan, session)}
        return session

    def run(
        self,
        plan: Plan,
        feeds: Mapping[str, Any],
        observers: Sequence[StepObserver] = (),
    ) -> dict[str, Any]:
        session = self.session_for(plan)
        for observer in observers:
            observer.on_run_start(plan, feeds, self)
        try:
            values = session.run(plan.output_names, dict(feeds))
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types
            raise BackendError(f"onnxruntime failed: {exc}") from None
        result = dict(zip(plan.output_names, values, strict=True))
        for observer in observers:
            observer.on_run_end(result)
        return result
