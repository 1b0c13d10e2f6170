"""Shared fixtures and helpers: real material is required in CI and skipped (with the reason) elsewhere."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import onnx
import pytest

from sealtrace.plan.events import StepEvent
from sealtrace.zoo import MaterialMissingError


class StepRecorder:
    """An observer that keeps every event of its latest run."""

    def __init__(self) -> None:
        self.events: list[StepEvent] = []

    def on_run_start(self, plan: Any, feeds: Mapping[str, Any], backend: Any) -> None:
        self.events.clear()

    def on_step(self, event: StepEvent) -> None:
        self.events.append(event)

    def on_run_end(self, outputs: Mapping[str, Any]) -> None:
        pass


def require_material(load: Callable[[], Any]) -> Any:
    """Return ``load()``; a missing model or input fails in CI and skips locally."""
    try:
        return load()
    except MaterialMissingError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"real material missing in CI: {exc}")
        pytest.skip(str(exc))


def make_model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: list[onnx.TensorProto] | None = None,
    opset: int = 17,
    name: str = "test",
) -> onnx.ModelProto:
    """A small model that onnxruntime 1.31 accepts (IR version pinned: onnx 1.23 writes 14)."""
    graph = onnx.helper.make_graph(nodes, name, inputs, outputs, initializer=initializers or [])
    return onnx.helper.make_model(
        graph, ir_version=10, opset_imports=[onnx.helper.make_opsetid("", opset)]
    )


def mlp_model(scale: float = 1.0, batch: int | str = 1) -> onnx.ModelProto:
    """x[batch,4] -> MatMul -> Add -> Relu -> y[batch,3] with fixed random weights; ``scale`` scales the
    weight tensor w (another model with the same graph), ``batch`` may name a dynamic axis."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((4, 3)) * scale).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
        helper.make_node("Add", ["h", "b"], ["z"], name="add"),
        helper.make_node("Relu", ["z"], ["y"], name="relu"),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )


@pytest.fixture
def tiny_mlp() -> onnx.ModelProto:
    """x[1,4] -> MatMul -> Add -> Relu -> y[1,3], with weights as initializers."""
    return mlp_model()
