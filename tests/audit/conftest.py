"""Small models and logs for the audit tests (kept tiny so exhaustive tamper tests stay fast)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealtrace.audit import audited_run
from sealtrace.session import Session
from tests.conftest import make_model, mlp_model


def loop_model() -> onnx.ModelProto:
    """A Loop of 3 iterations whose body adds x to a carried value, then an If on the result."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
            helper.make_node("Add", ["acc_in", "x"], ["acc_out"], name="accumulate"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [2]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2]),
        ],
    )
    then_branch = helper.make_graph(
        [helper.make_node("Neg", ["acc"], ["then_y"], name="negate")],
        "then",
        [],
        [helper.make_tensor_value_info("then_y", TensorProto.FLOAT, [2])],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Abs", ["acc"], ["else_y"], name="absolute")],
        "else",
        [],
        [helper.make_tensor_value_info("else_y", TensorProto.FLOAT, [2])],
    )
    nodes = [
        helper.make_node("Loop", ["trips", "cond", "zero"], ["acc"], name="loop", body=body),
        helper.make_node("ReduceSum", ["acc"], ["total"], name="sum", keepdims=0),
        helper.make_node("Greater", ["total", "zero_scalar"], ["positive"], name="is_positive"),
        helper.make_node("If", ["positive"], ["y"], name="branch", then_branch=then_branch, else_branch=else_branch),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [
            numpy_helper.from_array(np.array(3, np.int64), "trips"),
            numpy_helper.from_array(np.array(True), "cond"),
            numpy_helper.from_array(np.zeros(2, np.float32), "zero"),
            numpy_helper.from_array(np.array(0.0, np.float32), "zero_scalar"),
        ],
    )


MLP_INPUT = {"x": np.array([[0.5, -1.0, 2.0, 0.25]], np.float32)}


@pytest.fixture
def mlp_path(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), path)
    return path


@pytest.fixture
def record_log(tmp_path: Path) -> Callable[..., Path]:
    """Run a model with an audit log; returns the log's path."""
    counter = iter(range(1000))

    def record(model: Path | onnx.ModelProto, feeds: dict[str, np.ndarray] | None = None, **options: object) -> Path:
        log = tmp_path / f"run{next(counter)}.jsonl"
        audited_run(Session(model), feeds if feeds is not None else MLP_INPUT, audit=log, **options)
        return log

    return record


@pytest.fixture
def mlp_log(mlp_path: Path, record_log: Callable[..., Path]) -> Path:
    return record_log(mlp_path)
