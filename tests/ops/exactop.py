"""One-node models checked bit for bit against onnxruntime (shape and indexing tests)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

import sealtrace


def node_model(
    op: str, inputs: dict[str, Any], outputs: dict[str, Any], opset: int, **attrs: Any
) -> onnx.ModelProto:
    names = [n if v is not None else "" for n, v in inputs.items()]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, list(outputs), **attrs)
    graph_inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for n, v in inputs.items()
        if v is not None
    ]
    graph_outputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(d)), None)
        for n, d in outputs.items()
    ]
    graph = helper.make_graph([node], "single", graph_inputs, graph_outputs)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset)])


def present(inputs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in inputs.items() if v is not None}


def run(op: str, inputs: dict[str, Any], outputs: dict[str, Any], opset: int, **attrs: Any) -> list[Any]:
    """Run one node on the reference backend."""
    return sealtrace.Session(node_model(op, inputs, outputs, opset, **attrs)).run(None, present(inputs))


def assert_identical(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert (g.dtype, g.shape) == (w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)


def check(op: str, inputs: dict[str, Any], outputs: dict[str, Any], opset: int, **attrs: Any) -> list[Any]:
    """Run one node on the reference backend and on onnxruntime; outputs must be identical."""
    import onnxruntime as ort

    model = node_model(op, inputs, outputs, opset, **attrs)
    got = sealtrace.Session(model).run(None, present(inputs))
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    assert_identical(got, session.run(None, present(inputs)))
    return got
