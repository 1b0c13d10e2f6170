"""Steps specialized for their constant inputs (sealtrace.ops.registry.specializes) give the
kernel's results bit for bit, on every input shape, and fail as the kernel does."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
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


def _kernel(op: str, version: int) -> Any:
    from sealtrace.ops.registry import lookup

    kernel = lookup("", op, version)
    assert kernel is not None
    return kernel


def _same_outcome(kernel: Any, inputs: list[Any], attributes: dict[str, Any]) -> None:
    """The specialized function (all inputs but the first constant) and the kernel agree: the same
    bits and shape, or both raise."""
    from sealtrace.ops.registry import VARIES, specialized

    fn = specialized(kernel, (VARIES, *inputs[1:]), attributes)
    assert fn is not None
    try:
        want = kernel.fn(*inputs, **attributes)
    except Exception:
        with pytest.raises(Exception):  # noqa: B017 - any error: the kernel's own is raised
            fn(*inputs)
        return
    for _ in range(2):  # the second call comes from the specialized step's cache
        got = fn(*inputs)
        got_first = got[0] if isinstance(got, tuple) else got
        want_first = want[0] if isinstance(want, tuple) else want
        assert np.asarray(got_first).shape == np.asarray(want_first).shape
        assert np.asarray(got_first).tobytes() == np.asarray(want_first).tobytes()


dims = st.lists(st.integers(0, 5), min_size=1, max_size=4)
bounds = st.integers(-8, 8) | st.sampled_from([np.iinfo(np.int64).max, np.iinfo(np.int64).min])


@settings(max_examples=150, deadline=None)
@given(shape=dims, data=st.data())
def test_slice_specialized_like_kernel(shape: list[int], data: st.DataObject) -> None:
    rank = len(shape)
    count = data.draw(st.integers(1, rank))
    axes = data.draw(st.lists(st.integers(-rank, rank - 1), min_size=count, max_size=count, unique=True))
    starts = data.draw(st.lists(bounds, min_size=count, max_size=count))
    ends = data.draw(st.lists(bounds, min_size=count, max_size=count))
    steps = data.draw(st.lists(st.sampled_from([-3, -1, 1, 2]), min_size=count, max_size=count))
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    operands = [np.array(v, np.int64) for v in (starts, ends, axes, steps)]
    _same_outcome(_kernel("Slice", 13), [x, *operands], {})


@settings(max_examples=150, deadline=None)
@given(shape=dims, data=st.data())
def test_pad_specialized_like_kernel(shape: list[int], data: st.DataObject) -> None:
    rank = len(shape)
    pads = data.draw(st.lists(st.integers(-2, 4), min_size=2 * rank, max_size=2 * rank))
    mode = data.draw(st.sampled_from(["constant", "reflect", "edge", "wrap"]))
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    _same_outcome(_kernel("Pad", 19), [x, np.array(pads, np.int64), np.array(-1.5, np.float32)], {"mode": mode})


@settings(max_examples=150, deadline=None)
@given(shape=dims, data=st.data())
def test_reshape_squeeze_unsqueeze_specialized_like_kernel(shape: list[int], data: st.DataObject) -> None:
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    target = data.draw(st.lists(st.integers(-1, 6), min_size=1, max_size=4))
    allowzero = data.draw(st.integers(0, 1))
    _same_outcome(_kernel("Reshape", 14), [x, np.array(target, np.int64)], {"allowzero": allowzero})
    rank = len(shape)
    axes = data.draw(st.lists(st.integers(-rank, rank - 1), max_size=rank))
    _same_outcome(_kernel("Squeeze", 13), [x, np.array(axes, np.int64)], {})
    new_axes = data.draw(st.lists(st.integers(-rank - 2, rank + 1), min_size=1, max_size=2))
    _same_outcome(_kernel("Unsqueeze", 13), [x, np.array(new_axes, np.int64)], {})
    index = data.draw(st.integers(-6, 6))
    axis = data.draw(st.integers(-rank, rank - 1))
    _same_outcome(_kernel("Gather", 13), [x, np.array(index, np.int64)], {"axis": axis})
