"""MatMul, Gemm, Einsum, MatMulInteger, QLinearMatMul, Det against onnxruntime (old opsets included)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import sealtrace
from tests.conftest import make_model


def single_node(
    op: str, feeds: dict[str, np.ndarray | None], opset: int, n_outputs: int = 1, **attrs: Any
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A one-node model and the feeds it takes (``None`` feeds become omitted optional inputs)."""
    names = [n if v is not None else "" for n, v in feeds.items()]
    while names and not names[-1]:
        names.pop()
    given = {n: v for n, v in feeds.items() if v is not None}
    outputs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outputs, **attrs)
    model = make_model(
        [node],
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in given.items()],
        [helper.make_value_info(o, onnx.TypeProto()) for o in outputs],
        opset=opset,
    )
    return onnx.shape_inference.infer_shapes(model), given  # output types, as onnxruntime wants


def run_ours(
    op: str, feeds: dict[str, np.ndarray | None], opset: int, n_outputs: int = 1, **attrs: Any
) -> list[np.ndarray]:
    """Run a one-node model on the reference backend."""
    model, given = single_node(op, feeds, opset, n_outputs, **attrs)
    return sealtrace.Session(model).run(None, given)


def run_both(
    op: str, feeds: dict[str, np.ndarray | None], opset: int, n_outputs: int = 1, **attrs: Any
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Run a one-node model on the reference backend and on onnxruntime."""
    model, given = single_node(op, feeds, opset, n_outputs, **attrs)
    ours = sealtrace.Session(model).run(None, given)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return ours, session.run(None, given)


def assert_same(ours: list[np.ndarray], theirs: list[np.ndarray], rtol: float = 1e-5, atol: float = 1e-6) -> None:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        assert a.shape == b.shape, (a.shape, b.shape)
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol)


RNG = np.random.default_rng(0)


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 1, 3, 4), (5, 4, 6)), ((7, 3, 4), (4, 2))],
)
@pytest.mark.parametrize("opset", [8, 9, 13])
def test_matmul_shapes_match_onnxruntime(a_shape: tuple[int, ...], b_shape: tuple[int, ...], opset: int) -> None:
    a = RNG.standard_normal(a_shape).astype(np.float32)
    b = RNG.standard_normal(b_shape).astype(np.float32)
    assert_same(*run_both("MatMul", {"A": a, "B": b}, opset))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64, np.float16])
def test_matmul_keeps_dtype(dtype: type) -> None:
    a = RNG.integers(-5, 5, (3, 4)).astype(dtype)
    b = RNG.integers(-5, 5, (2, 4, 6)).astype(dtype)
    ours, theirs = run_both("MatMul", {"A": a, "B": b}, 13)
    assert ours[0].dtype == np.dtype(dtype)
    assert_same(ours, theirs, rtol=1e-3)


def test_matmul_float32_is_deterministic_and_stays_float32() -> None:
    a = RNG.standard_normal((64, 384)).astype(np.float32)
    b = RNG.standard_normal((384, 384)).astype(np.float32)
    first = run_both("MatMul", {"A": a, "B": b}, 13)[0][0]
    second = run_both("MatMul", {"A": a, "B": b}, 13)[0][0]
    assert first.dtype == np.float32
    assert first.tobytes() == second.tobytes()


@pytest.mark.parametrize("opset", [7, 9, 11, 13])
@pytest.mark.parametrize(("trans_a", "trans_b"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_transposes_and_scalars(opset: int, trans_a: int, trans_b: int) -> None:
    a = RNG.standard_normal((4, 3) if trans_a else (3, 4)).astype(np.float32)
    b = RNG.standard_normal((5, 4) if trans_b else (4, 5)).astype(np.float32)
    c = RNG.standard_normal((5,)).astype(np.float32)
    attrs = {"transA": trans_a, "transB": trans_b, "alpha": 0.5, "beta": 2.0}
    assert_same(*run_both("Gemm", {"A": a, "B": b, "C": c}, opset, **attrs))


@pytest.mark.parametrize(("broadcast", "c_shape"), [(1, (5,)), (0, (3, 5))])
def test_gemm_v6_broadcast_attribute(broadcast: int, c_shape: tuple[int, ...]) -> None:
    # onnxruntime has no Gemm-6 kernel; the spec is plain enough to check against numpy.
    a = RNG.standard_normal((4, 3)).astype(np.float32)
    b = RNG.standard_normal((4, 5)).astype(np.float32)
    c = RNG.standard_normal(c_shape).astype(np.float32)
    (y,) = run_ours("Gemm", {"A": a, "B": b, "C": c}, 6, transA=1, alpha=0.5, beta=2.0, broadcast=broadcast)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, 0.5 * a.T @ b + 2.0 * c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("c_shape", [None, (), (1,), (3, 1), (3, 5)])
def test_gemm_optional_and_broadcast_c(c_shape: tuple[int, ...] | None) -> None:
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    b = RNG.standard_normal((4, 5)).astype(np.float32)
    c = None if c_shape is None else RNG.standard_normal(c_shape).astype(np.float32)
    assert_same(*run_both("Gemm", {"A": a, "B": b, "C": c}, 13))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_gemm_integer_keeps_dtype(dtype: type) -> None:
    a = RNG.integers(-9, 9, (3, 4)).astype(dtype)
    b = RNG.integers(-9, 9, (4, 5)).astype(dtype)
    c = RNG.integers(-9, 9, (5,)).astype(dtype)
    # onnxruntime has no integer Gemm kernel: exact integer arithmetic is the reference.
    (y,) = run_ours("Gemm", {"A": a, "B": b, "C": c}, 13, transB=0)
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(y, a @ b + c)


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [
        ("ij,jk->ik", [(3, 4), (4, 5)]),
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("ii->i", [(4, 4)]),
        ("...ij->...ji", [(2, 3, 4)]),
        ("i,i", [(5,), (5,)]),
        ("bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)]),
    ],
)
def test_einsum_matches_onnxruntime(equation: str, shapes: list[tuple[int, ...]]) -> None:
    feeds: dict[str, np.ndarray | None] = {
        f"x{i}": RNG.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)
    }
    assert_same(*run_both("Einsum", feeds, 12, equation=equation), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("a_dtype", "b_dtype", "per_row"), [(np.uint8, np.uint8, False), (np.uint8, np.int8, True), (np.int8, np.int8, False)]
)
def test_matmul_integer_zero_points(a_dtype: type, b_dtype: type, per_row: bool) -> None:
    a = RNG.integers(0, 100, (3, 4)).astype(a_dtype)
    b = RNG.integers(0, 100, (4, 5)).astype(b_dtype)
    azp = RNG.integers(0, 10, (3,) if per_row else ()).astype(a_dtype)
    bzp = RNG.integers(0, 10, (5,) if per_row else ()).astype(b_dtype)
    feeds: dict[str, np.ndarray | None] = {"A": a, "B": b, "a_zero_point": azp, "b_zero_point": bzp}
    (y,) = run_ours("MatMulInteger", feeds, 10)
    assert y.dtype == np.int32
    # Per-row/per-column zero points are in the spec but not in onnxruntime's CPU kernel.
    rows = azp.reshape(-1, 1) if per_row else azp
    np.testing.assert_array_equal(y, (a.astype(np.int64) - rows) @ (b.astype(np.int64) - bzp))
    if not per_row:
        np.testing.assert_array_equal(y, run_both("MatMulInteger", feeds, 10)[1][0])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_matmul_matches_onnxruntime(dtype: type) -> None:
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, (2, 3, 8)).astype(dtype)
    b = RNG.integers(info.min, info.max, (8, 4)).astype(dtype)
    feeds: dict[str, np.ndarray | None] = {
        "a": a,
        "a_scale": np.array(0.02, np.float32),
        "a_zero_point": np.array(3, dtype),
        "b": b,
        "b_scale": np.array(0.03, np.float32),
        "b_zero_point": np.array(-2 if dtype == np.int8 else 5, dtype),
        "y_scale": np.array(0.5, np.float32),
        "y_zero_point": np.array(1, dtype),
    }
    ours, theirs = run_both("QLinearMatMul", feeds, 10)
    assert ours[0].dtype == np.dtype(dtype)
    # ORT requantizes with a fused float multiplier: allow one step of rounding difference.
    assert np.max(np.abs(ours[0].astype(np.int32) - theirs[0].astype(np.int32))) <= 1


def test_det_batched() -> None:
    x = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
    ours, theirs = run_both("Det", {"X": x}, 11)
    assert_same(ours, theirs, rtol=1e-4, atol=1e-5)
