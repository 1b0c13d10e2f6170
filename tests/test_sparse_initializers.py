"""Sparse initializers (and Constant's sparse_value): densified only when every index is valid and
the dense size fits the memory budget; anything else is bad input naming the tensor (exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealtrace.cli import main
from sealtrace.errors import InvalidModelError, PlanError
from sealtrace.limits import BudgetExceededError, memory_budget_of
from sealtrace.plan import build_plan
from sealtrace.session import Session


def _sparse(values: Any, indices: Any, dims: list[int], name: str = "w") -> onnx.SparseTensorProto:
    return helper.make_sparse_tensor(
        numpy_helper.from_array(np.asarray(values, np.float32), name),
        numpy_helper.from_array(np.asarray(indices, np.int64), f"{name}_indices"),
        dims,
    )


def _model(sparse: onnx.SparseTensorProto, shape: list[int] | None = None) -> onnx.ModelProto:
    shape = shape if shape is not None else [2, 3]
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", sparse.values.name], ["y"])], "sparse",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        sparse_initializer=[sparse],
    )  # fmt: skip
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("values", "indices", "expected"),
    [
        ([1.5, -2.0], [1, 4], {(0, 1): 1.5, (1, 1): -2.0}),
        ([1.5, -2.0], [[0, 1], [1, 1]], {(0, 1): 1.5, (1, 1): -2.0}),
        ([7.0], [5], {(1, 2): 7.0}),
        ([], np.zeros(0, np.int64), {}),
    ],
    ids=["linear", "coordinates", "last", "empty"],
)
def test_well_formed_sparse_initializers_agree_with_onnxruntime(values: Any, indices: Any, expected: dict) -> None:
    model = _model(_sparse(values, indices, [2, 3]))
    weights = build_plan(model).initializers["w"]
    dense = np.zeros((2, 3), np.float32)
    for where, v in expected.items():
        dense[where] = v
    np.testing.assert_array_equal(weights, dense)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (ours,) = Session(model).run(None, {"x": x})
    (theirs,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize(
    ("values", "indices", "dims", "message"),
    [
        ([1, 2], [-1, 4], [2, 3], "linear index -1 is outside the dense shape"),
        ([1, 2], [1, 6], [2, 3], "linear index 6 is outside"),
        ([1, 2], [[0, -1], [1, 1]], [2, 3], "index -1 on axis 1"),
        ([1, 2], [[0, 1], [2, 1]], [2, 3], "index 2 on axis 0"),
        ([1, 2, 3], [1, 4], [2, 3], r"indices of shape \[2\] fit neither"),
        ([1, 2], [[0, 1, 0], [1, 1, 0]], [2, 3], r"indices of shape \[2, 3\] fit neither"),
        ([1, 2], [[[0, 1]], [[1, 1]]], [2, 3], r"indices of shape \[2, 1, 2\] fit neither"),
        ([[1, 2]], [1, 4], [2, 3], "values must be one-dimensional"),
        ([1, 2], [4, 1], [2, 3], "indices are not in ascending order without duplicates"),
        ([1, 2], [4, 4], [2, 3], "indices are not in ascending order without duplicates"),
        ([1], [0], [-2, 3], "negative dimension"),
    ],
    ids=["negative", "out-of-range", "negative-coordinate", "coordinate-out-of-range", "count-mismatch",
         "wrong-rank-coordinates", "3-d-indices", "2-d-values", "unsorted", "duplicate", "negative-dims"],
)  # fmt: skip
def test_malformed_sparse_initializers_are_refused_by_name(
    values: Any, indices: Any, dims: list[int], message: str
) -> None:
    with pytest.raises(InvalidModelError, match=f"sparse initializer 'w': {message}"):
        build_plan(_model(_sparse(values, indices, dims)))


def test_a_huge_declared_dense_size_is_checked_against_the_budget_before_allocating() -> None:
    # 10^12 dense elements in a few bytes of protobuf: refused before np.zeros is asked for 4 TB.
    model = _model(_sparse([1.0], [5], [10**6, 10**6]), shape=[10**6, 10**6])
    with pytest.raises(BudgetExceededError, match=r"sparse initializer 'w' declares 3.6 TiB"):
        build_plan(model)
    small = _model(_sparse([1.0], [5], [64, 64]), shape=[64, 64])
    with memory_budget_of(1024), pytest.raises(BudgetExceededError, match="16 KiB"):
        build_plan(small)
    assert build_plan(small).initializers["w"].shape == (64, 64)


def test_a_sparse_initializer_cannot_shadow_another() -> None:
    model = _model(_sparse([1.0], [1], [2, 3]))
    model.graph.initializer.append(numpy_helper.from_array(np.zeros((2, 3), np.float32), "w"))
    with pytest.raises(PlanError, match="'w' is defined twice"):
        build_plan(model)


def test_constant_sparse_value_is_checked_too() -> None:
    node = helper.make_node("Constant", [], ["c"], sparse_value=_sparse([1.0], [9], [2, 3], name="cv"))
    graph = helper.make_graph(
        [node], "constant", [], [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 3])]
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(InvalidModelError, match="attribute 'sparse_value' of node 'Constant_0': linear index 9"):
        build_plan(model)


@pytest.mark.parametrize("dims", [[2, 3], [10**6, 10**6]], ids=["out-of-range", "huge"])
def test_cli_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], dims: list[int]) -> None:
    path = tmp_path / "sparse.onnx"
    onnx.save(_model(_sparse([1.0, 2.0], [1, 7], dims), shape=dims), path)
    assert main(["run", str(path), "--random-inputs"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sealtrace: error: sparse initializer 'w'") and err.count("\n") == 1
