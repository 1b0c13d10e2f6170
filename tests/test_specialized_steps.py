"""Steps specialized for their constant inputs (sealtrace.ops.registry.specializes) give the
kernel's results bit for bit, on every input shape, and fail as the kernel does."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealtrace import Session
from sealtrace.backends.reference import ReferenceBackend
from sealtrace.errors import KernelError
from sealtrace.ops.registry import unquieted
from tests.conftest import make_model

RNG = np.random.default_rng(11)

# (op, constant operands in input order after the data, attributes, input shapes to run)
CASES: list[tuple[str, list[np.ndarray | None], dict[str, Any], list[tuple[int, ...]]]] = [
    ("Unsqueeze", [np.array([0, -1], np.int64)], {}, [(3, 4), (5,), (2, 1, 3)]),
    ("Squeeze", [np.array([1], np.int64)], {}, [(3, 1, 4), (2, 1)]),
    ("Squeeze", [None], {}, [(1, 3, 1, 4), (2, 5)]),  # no axes: every size-1 axis
    ("Reshape", [np.array([0, -1], np.int64)], {}, [(2, 3, 4), (5, 2, 2)]),
    ("Reshape", [np.array([-1], np.int64)], {"allowzero": 1}, [(2, 3), (0, 4)]),
    ("Slice", [np.array([1]), np.array([-1])], {}, [(6, 3), (2, 2)]),
    ("Slice", [np.array([-1, 0]), np.array([-100, 9]), np.array([1, 0]), np.array([-2, 3])], {}, [(7, 5), (4, 3)]),
    ("Slice", [np.array([2], np.int32), np.array([100], np.int32), np.array([-1], np.int32), None], {}, [(3, 8)]),
    ("Pad", [np.array([1, 2, 0, 3], np.int64), np.array(1.5, np.float32)], {"mode": "constant"}, [(2, 3), (4, 1)]),
    ("Pad", [np.array([2, 1, 2, 0], np.int64)], {"mode": "reflect"}, [(3, 4), (5, 3)]),
    ("Pad", [np.array([-1, 2, 0, -2], np.int64)], {"mode": "edge"}, [(3, 4), (4, 5)]),
    ("Pad", [np.array([3, 3], np.int64), None, np.array([-1], np.int64)], {"mode": "wrap"}, [(2, 3), (2, 5)]),
    ("Pad", [np.array([0, 4, 0, 4], np.int64)], {"mode": "reflect"}, [(2, 3)]),  # wider than one reflection
    ("Gather", [np.array(1, np.int64)], {"axis": 1}, [(2, 3, 4), (1, 2)]),
    ("Gather", [np.array(-1, np.int32)], {"axis": 0}, [(3,), (2, 5)]),  # a 0-d result stays an array
    ("Pow", [np.array(2, np.float32)], {}, [(3, 4), ()]),
    ("Pow", [np.array(2, np.int64)], {}, [(5,)]),
    (
        "BatchNormalization",
        [RNG.standard_normal(3).astype(np.float32), RNG.standard_normal(3).astype(np.float32),
         RNG.standard_normal(3).astype(np.float32), RNG.random(3).astype(np.float32)],
        {"epsilon": 1e-3},
        [(2, 3, 4, 5), (1, 3, 7), (1, 3)],
    ),
]


def _model(op: str, operands: list[np.ndarray | None], attrs: dict[str, Any], as_initializers: bool) -> Any:
    names = ["x"] + [f"c{i}" if value is not None else "" for i, value in enumerate(operands)]
    node = helper.make_node(op, names, ["y"], name="step", **attrs)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)]
    initializers = []
    for i, value in enumerate(operands):
        if value is None:
            continue
        if as_initializers:
            initializers.append(numpy_helper.from_array(value, f"c{i}"))
        else:
            dtype = helper.np_dtype_to_tensor_dtype(value.dtype)
            inputs.append(helper.make_tensor_value_info(f"c{i}", dtype, value.shape))
    return make_model([node], inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                      initializers, opset=19)


def _feeds(operands: list[np.ndarray | None], x: np.ndarray) -> dict[str, np.ndarray]:
    return {"x": x} | {f"c{i}": value for i, value in enumerate(operands) if value is not None}


@pytest.mark.parametrize(("op", "operands", "attrs", "shapes"), CASES)
def test_specialized_step_gives_the_kernels_bits(
    op: str, operands: list[np.ndarray | None], attrs: dict[str, Any], shapes: list[tuple[int, ...]]
) -> None:
    backend = ReferenceBackend()
    constant = Session(_model(op, operands, attrs, True), backend=backend)
    varying = Session(_model(op, operands, attrs, False), backend=ReferenceBackend())
    for shape in shapes * 2:  # twice: the second time from the specialized step's cache
        x = RNG.standard_normal(shape).astype(np.float32)
        (got,) = constant.run(None, {"x": x})
        (want,) = varying.run(None, _feeds(operands, x))
        assert got.shape == want.shape and got.tobytes() == want.tobytes(), (shape, got, want)
    # The step really ran specialized (with constant operands) and generic (with fed ones).
    (step_fn,) = [live.fn for live in backend.programs.get(constant.plan).live]
    assert step_fn is not unquieted(constant.plan.steps[0].kernel.fn)


@pytest.mark.parametrize(
    ("op", "operands", "attrs", "shape"),
    [
        ("Squeeze", [np.array([0], np.int64)], {}, (2, 3)),  # axis 0 is not of size 1
        ("Reshape", [np.array([4, -1], np.int64)], {}, (3, 3)),
        ("Unsqueeze", [np.array([0, 0], np.int64)], {}, (3,)),  # repeated axis
        ("Pad", [np.array([4, 4], np.int64)], {"mode": "reflect"}, (0, 3)),  # empty input
        ("Gather", [np.array(3, np.int64)], {"axis": 0}, (3, 2)),  # index out of range
    ],
)
def test_specialized_step_fails_like_the_kernel(
    op: str, operands: list[np.ndarray | None], attrs: dict[str, Any], shape: tuple[int, ...]
) -> None:
    x = np.zeros(shape, np.float32)
    messages = []
    for as_initializers in (True, False):
        session = Session(_model(op, operands, attrs, as_initializers), backend=ReferenceBackend())
        with pytest.raises(KernelError, match="'step'") as error:
            session.run(None, _feeds(operands, x) if not as_initializers else {"x": x})
        messages.append(str(error.value).split(": ", 1)[1])
    assert messages[0] == messages[1]
