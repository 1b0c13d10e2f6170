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


def stand_in_network(n_inputs: int, seed: int = 0) -> onnx.ModelProto:
    """A driving-model stand-in at real input size: x[1, n] -> Gemm(16) -> Relu -> Gemm(8) -> Split into
    plan[1, 3] and meta[1, 5]. Nonnegative weights make every output grow with every input."""
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array((rng.random((n_inputs, 16)) / n_inputs).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.random((16, 8)).astype(np.float32), "w2")
    split = numpy_helper.from_array(np.array([3, 5], np.int64), "split")
    nodes = [
        helper.make_node("Gemm", ["x", "w1"], ["h"], name="gemm1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Gemm", ["r", "w2"], ["y"], name="gemm2"),
        helper.make_node("Split", ["y", "split"], ["plan", "meta"], axis=1, name="split"),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n_inputs])],
        [helper.make_tensor_value_info("plan", TensorProto.FLOAT, [1, 3]),
         helper.make_tensor_value_info("meta", TensorProto.FLOAT, [1, 5])],
        [w1, w2, split],
    )


def write_box_property(path: Path, lower: np.ndarray, upper: np.ndarray, n_outputs: int, unsafe: str) -> None:
    """A VNN-COMP-style property: one declaration and two bounds per input (shortest decimals), then ``unsafe``."""
    with path.open("w") as f:
        f.writelines(f"(declare-const X_{i} Real)\n" for i in range(len(lower)))
        f.writelines(f"(declare-const Y_{j} Real)\n" for j in range(n_outputs))
        for i, (lo, hi) in enumerate(zip(lower.tolist(), upper.tolist(), strict=True)):
            f.write(f"(assert (>= X_{i} {lo!r}))\n(assert (<= X_{i} {hi!r}))\n")
        f.write(f"(assert {unsafe})\n")
