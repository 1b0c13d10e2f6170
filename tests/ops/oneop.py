"""One-node models run on the reference backend and on onnxruntime, for the op family tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import sealtrace


def _constant(value: np.ndarray) -> bool:
    """onnxruntime cannot be fed ml_dtypes arrays (int4, float8): those become initializers."""
    return value.dtype.isbuiltin == 2


def one_node_model(
    op: str, feeds: dict[str, np.ndarray | None], n_out: int, opset: int, domain: str, **attrs: Any
) -> onnx.ModelProto:
    inputs = [name if value is not None else "" for name, value in feeds.items()]
    while inputs and not inputs[-1]:
        inputs.pop()
    outputs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op, inputs, outputs, domain=domain, **attrs)
    graph = helper.make_graph(
        [node],
        "test",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in feeds.items()
            if v is not None and not _constant(v)
        ],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        initializer=[numpy_helper.from_array(v, n) for n, v in feeds.items() if v is not None and _constant(v)],
    )
    opsets = [helper.make_opsetid(domain, opset)] + ([helper.make_opsetid("", 17)] if domain else [])
    return helper.make_model(graph, ir_version=10, opset_imports=opsets)


def both(
    op: str, feeds: dict[str, np.ndarray | None], opset: int, n_out: int = 1, domain: str = "", **attrs: Any
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(ours, onnxruntime's) outputs of a one-node model."""
    model = one_node_model(op, feeds, n_out, opset, domain, **attrs)
    given = {k: v for k, v in feeds.items() if v is not None and not _constant(v)}
    with np.errstate(all="ignore"):
        got = sealtrace.Session(model).run(None, given)
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return list(got), list(session.run(None, given))


def assert_same(got: list[np.ndarray], want: list[np.ndarray], rtol: float = 0.0, atol: float = 0.0) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        if g.dtype == object:
            assert g.tolist() == w.tolist()
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)
