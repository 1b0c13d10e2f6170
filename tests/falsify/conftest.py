"""Toy networks with known answers, written as ONNX files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import make_model


def toy_network() -> onnx.ModelProto:
    """x[1,2] -> y[1,2] = relu(x @ W) with W = [[1, 1], [1, -1]]: y0 = x0 + x1, y1 = relu(x0 - x1)."""
    w = numpy_helper.from_array(np.array([[1, 1], [1, -1]], dtype=np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [w],
    )


def two_input_network() -> onnx.ModelProto:
    """x[1,2], shift[1,1] -> y[1,2] = x + shift (broadcast)."""
    nodes = [helper.make_node("Add", ["x", "shift"], ["y"], name="add")]
    return make_model(
        nodes,
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2]),
            helper.make_tensor_value_info("shift", TensorProto.FLOAT, [1, 1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
    )


@pytest.fixture
def toy_file(tmp_path: Path) -> Path:
    path = tmp_path / "toy.onnx"
    onnx.save(toy_network(), path)
    return path


# Inside [0,1]^2, y1 = relu(x0 - x1) reaches 1: "y1 >= 0.75" is violated near x = (1, 0).
VIOLATED = """
(declare-const X_0 Real)
(declare-const X_1 Real)
(declare-const Y_0 Real)
(declare-const Y_1 Real)
(assert (>= X_0 0.0))
(assert (<= X_0 1.0))
(assert (>= X_1 0.0))
(assert (<= X_1 1.0))
(assert (>= Y_1 0.75))
"""

# y0 = x0 + x1 <= 2 inside the box: "y0 > 2.5" has no counterexample.
SAFE = VIOLATED.replace("(assert (>= Y_1 0.75))", "(assert (> Y_0 2.5))")


@pytest.fixture
def violated_file(tmp_path: Path) -> Path:
    path = tmp_path / "violated.vnnlib"
    path.write_text(VIOLATED)
    return path


@pytest.fixture
def safe_file(tmp_path: Path) -> Path:
    path = tmp_path / "safe.vnnlib"
    path.write_text(SAFE)
    return path
