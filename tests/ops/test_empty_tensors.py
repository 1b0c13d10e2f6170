"""Empty tensors cost O(1) in every kernel (issue 27, item 5): a [2**40, 0] input must not make a
kernel step through 2**40 empty rows, and an output it declares beyond the memory budget is refused
(BudgetExceededError, exit 2) before it is allocated.

The per-op cases run in a worker process with a deadline: a kernel that loops over the huge dimension
(in C, where no signal reaches it) cannot hang the test run; the case still running at the deadline
fails, and a fresh worker takes the cases after it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import sealtrace
from sealtrace import zoo
from sealtrace.limits import BudgetExceededError
from tests.conftest import require_material

HUGE = 2**40
ROOT = Path(__file__).resolve().parents[2]


def _zeros(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return np.zeros(shape, dtype)


# (op, feeds (names starting "c_" become initializers), attributes, opset, outputs)
Case = tuple[str, dict[str, np.ndarray], dict[str, Any], int, int]

CASES: dict[str, Case] = {
    "MatMul": ("MatMul", {"a": _zeros(HUGE, 0, 4), "c_b": _zeros(4, 3)}, {}, 17, 1),
    "MatMul_batched": ("MatMul", {"a": _zeros(HUGE, 0, 4), "b": _zeros(HUGE, 4, 0)}, {}, 17, 1),
    "MatMulInteger": ("MatMulInteger", {"a": _zeros(HUGE, 0, 4, dtype=np.uint8), "c_b": _zeros(4, 3, dtype=np.uint8)}, {}, 17, 1),
    "Gemm": ("Gemm", {"a": _zeros(0, 4), "c_b": _zeros(3, 4)}, {"transB": 1}, 17, 1),
    "Einsum": ("Einsum", {"a": _zeros(HUGE, 0, 4), "c_b": _zeros(4, 3)}, {"equation": "bij,jk->bik"}, 17, 1),
    "Conv": ("Conv", {"x": _zeros(HUGE, 2, 0, 5), "c_w": _zeros(3, 2, 1, 1)}, {}, 17, 1),
    "ConvTranspose": ("ConvTranspose", {"x": _zeros(HUGE, 2, 0, 5), "c_w": _zeros(2, 3, 1, 1)}, {}, 17, 1),
    "MaxPool": ("MaxPool", {"x": _zeros(HUGE, 2, 0, 5)}, {"kernel_shape": [1, 1]}, 17, 1),
    "AveragePool": ("AveragePool", {"x": _zeros(HUGE, 2, 0, 5)}, {"kernel_shape": [1, 1]}, 17, 1),
    "GlobalAveragePool": ("GlobalAveragePool", {"x": _zeros(0, HUGE, 1, 1)}, {}, 17, 1),
    "GlobalMaxPool": ("GlobalMaxPool", {"x": _zeros(HUGE, 0, 1, 1)}, {}, 17, 1),
    "ReduceSum": ("ReduceSum", {"x": _zeros(HUGE, 0, 3), "c_axes": np.array([2], np.int64)}, {}, 17, 1),
    "ReduceMean": ("ReduceMean", {"x": _zeros(HUGE, 0, 3)}, {"axes": [2]}, 17, 1),
    "ReduceMax": ("ReduceMax", {"x": _zeros(HUGE, 0, 3)}, {"axes": [2]}, 17, 1),
    "ReduceL2": ("ReduceL2", {"x": _zeros(HUGE, 0, 3)}, {"axes": [2]}, 17, 1),
    "ReduceLogSumExp": ("ReduceLogSumExp", {"x": _zeros(HUGE, 0, 3)}, {"axes": [2]}, 17, 1),
    "ArgMax": ("ArgMax", {"x": _zeros(HUGE, 0, 3)}, {"axis": 2}, 17, 1),
    "Softmax": ("Softmax", {"x": _zeros(HUGE, 0, 3)}, {"axis": -1}, 17, 1),
    "LogSoftmax": ("LogSoftmax", {"x": _zeros(HUGE, 0, 3)}, {"axis": -1}, 17, 1),
    "Hardmax": ("Hardmax", {"x": _zeros(HUGE, 0, 3)}, {"axis": -1}, 17, 1),
    "LayerNormalization": ("LayerNormalization", {"x": _zeros(HUGE, 0, 3), "c_s": _zeros(3), "c_b": _zeros(3)}, {"axis": -1}, 17, 1),
    "InstanceNormalization": ("InstanceNormalization", {"x": _zeros(HUGE, 2, 0), "c_s": _zeros(2), "c_b": _zeros(2)}, {}, 17, 1),
    "BatchNormalization": ("BatchNormalization", {"x": _zeros(HUGE, 2, 0), "c_s": _zeros(2), "c_b": _zeros(2), "c_m": _zeros(2), "c_v": _zeros(2)}, {}, 15, 1),
    "LpNormalization": ("LpNormalization", {"x": _zeros(HUGE, 0, 3)}, {"axis": -1}, 17, 1),
    "MeanVarianceNormalization": ("MeanVarianceNormalization", {"x": _zeros(HUGE, 2, 0, 3)}, {}, 17, 1),
    "LRN": ("LRN", {"x": _zeros(HUGE, 2, 0, 3)}, {"size": 3}, 17, 1),
    "Gather": ("Gather", {"c_data": _zeros(10, 4), "i": _zeros(HUGE, 0, dtype=np.int64)}, {}, 17, 1),
    "CumSum": ("CumSum", {"x": _zeros(HUGE, 0, 3), "c_axis": np.array(2, np.int64)}, {}, 17, 1),
    "Transpose": ("Transpose", {"x": _zeros(HUGE, 0, 3)}, {"perm": [2, 1, 0]}, 17, 1),
    "Add": ("Add", {"x": _zeros(HUGE, 0, 3), "c_y": _zeros(3)}, {}, 17, 1),
    "Erf": ("Erf", {"x": _zeros(HUGE, 0, 3)}, {}, 17, 1),
    "Tanh": ("Tanh", {"x": _zeros(HUGE, 0, 3)}, {}, 17, 1),
    "Gelu": ("Gelu", {"x": _zeros(HUGE, 0, 3)}, {}, 20, 1),
    "Cast": ("Cast", {"x": _zeros(HUGE, 0, 3)}, {"to": TensorProto.FLOAT16}, 17, 1),
    "Concat": ("Concat", {"x": _zeros(HUGE, 0, 3), "y": _zeros(HUGE, 0, 2)}, {"axis": 2}, 17, 1),
    "Split": ("Split", {"x": _zeros(HUGE, 0, 4)}, {"axis": 2, "num_outputs": 2}, 18, 2),
    "Where": ("Where", {"c": _zeros(HUGE, 0, dtype=np.bool_), "x": _zeros(HUGE, 0), "y": _zeros(HUGE, 0)}, {}, 17, 1),
    "Pad": ("Pad", {"x": _zeros(HUGE, 0, 3), "c_p": np.array([0, 0, 1, 0, 0, 1], np.int64)}, {}, 17, 1),
    "Resize": ("Resize", {"x": _zeros(HUGE, 2, 0, 3), "c_roi": _zeros(0), "c_s": np.array([1, 1, 2, 2], np.float32)}, {}, 17, 1),
    "Trilu": ("Trilu", {"x": _zeros(HUGE, 0, 3)}, {}, 17, 1),
    "DepthToSpace": ("DepthToSpace", {"x": _zeros(HUGE, 4, 0, 3)}, {"blocksize": 2}, 17, 1),
    "Det": ("Det", {"x": _zeros(HUGE, 0, 3, 3)}, {}, 17, 1),
    "Attention": ("Attention", {"q": _zeros(HUGE, 2, 0, 4), "k": _zeros(HUGE, 2, 0, 4), "v": _zeros(HUGE, 2, 0, 4)}, {}, 23, 1),
    "GatherElements": ("GatherElements", {"x": _zeros(HUGE, 0), "i": _zeros(HUGE, 0, dtype=np.int64)}, {"axis": 1}, 17, 1),
    "GatherND": ("GatherND", {"x": _zeros(HUGE, 0, 3), "i": _zeros(HUGE, 0, 1, dtype=np.int64)}, {"batch_dims": 1}, 17, 1),
    "ScatterElements": ("ScatterElements", {"x": _zeros(HUGE, 0), "i": _zeros(HUGE, 0, dtype=np.int64), "u": _zeros(HUGE, 0)}, {"axis": 1}, 17, 1),
    "ScatterND": ("ScatterND", {"x": _zeros(HUGE, 0), "i": _zeros(0, 2, dtype=np.int64), "u": _zeros(0)}, {}, 17, 1),
    "TopK": ("TopK", {"x": _zeros(HUGE, 0, 3), "c_k": np.array([2], np.int64)}, {"axis": -1}, 17, 2),
    "NonZero": ("NonZero", {"x": _zeros(HUGE, 0)}, {}, 17, 1),
    "Unique": ("Unique", {"x": _zeros(HUGE, 0)}, {}, 17, 4),
    "Compress": ("Compress", {"x": _zeros(HUGE, 0), "c": _zeros(0, dtype=np.bool_)}, {"axis": 1}, 17, 1),
    "OneHot": ("OneHot", {"i": _zeros(HUGE, 0, dtype=np.int64), "c_d": np.array(3, np.int64), "c_v": np.array([0, 1], np.float32)}, {}, 17, 1),
    "ReverseSequence": ("ReverseSequence", {"x": _zeros(0, 3, HUGE), "c_l": _zeros(3, dtype=np.int64)}, {}, 17, 1),
    "SpaceToDepth": ("SpaceToDepth", {"x": _zeros(HUGE, 1, 0, 4)}, {"blocksize": 2}, 17, 1),
    "Tile": ("Tile", {"x": _zeros(HUGE, 0), "c_r": np.array([1, 3], np.int64)}, {}, 17, 1),
    "Expand": ("Expand", {"x": _zeros(HUGE, 0, 1), "c_s": np.array([1, 1, 3], np.int64)}, {}, 17, 1),
    "Slice": ("Slice", {"x": _zeros(HUGE, 0, 3), "c_s": np.array([1], np.int64), "c_e": np.array([3], np.int64), "c_a": np.array([2], np.int64)}, {}, 17, 1),
    "Flatten": ("Flatten", {"x": _zeros(HUGE, 0, 3)}, {"axis": 1}, 17, 1),
    "Reshape": ("Reshape", {"x": _zeros(HUGE, 0, 3), "c_s": np.array([0, 3, 0], np.int64)}, {"allowzero": 1}, 17, 1),
    "LpPool": ("LpPool", {"x": _zeros(HUGE, 2, 0, 5)}, {"kernel_shape": [1, 1]}, 17, 1),
    "GlobalLpPool": ("GlobalLpPool", {"x": _zeros(HUGE, 0, 2, 2)}, {}, 17, 1),
    "MaxUnpool": ("MaxUnpool", {"x": _zeros(HUGE, 0, 2, 2), "i": _zeros(HUGE, 0, 2, 2, dtype=np.int64)}, {"kernel_shape": [2, 2], "strides": [2, 2]}, 17, 1),
    "GroupNormalization": ("GroupNormalization", {"x": _zeros(HUGE, 2, 0), "c_s": _zeros(2), "c_b": _zeros(2)}, {"num_groups": 2}, 21, 1),
    "RMSNormalization": ("RMSNormalization", {"x": _zeros(HUGE, 0, 3), "c_s": _zeros(3)}, {"axis": -1}, 23, 1),
    "QuantizeLinear": ("QuantizeLinear", {"x": _zeros(HUGE, 0), "c_s": np.array(0.5, np.float32)}, {}, 17, 1),
    "DequantizeLinear": ("DequantizeLinear", {"x": _zeros(HUGE, 0, dtype=np.uint8), "c_s": np.array(0.5, np.float32)}, {}, 17, 1),
    "DynamicQuantizeLinear": ("DynamicQuantizeLinear", {"x": _zeros(HUGE, 0)}, {}, 17, 3),
    "QLinearMatMul": ("QLinearMatMul", {"a": _zeros(HUGE, 0, 4, dtype=np.uint8), "c_as": np.array(0.5, np.float32), "c_az": np.array(0, np.uint8), "c_b": _zeros(4, 3, dtype=np.uint8), "c_bs": np.array(0.5, np.float32), "c_bz": np.array(0, np.uint8), "c_ys": np.array(0.5, np.float32), "c_yz": np.array(0, np.uint8)}, {}, 17, 1),
    "ConvInteger": ("ConvInteger", {"x": _zeros(HUGE, 2, 0, 5, dtype=np.uint8), "c_w": _zeros(3, 2, 1, 1, dtype=np.uint8)}, {}, 17, 1),
    "CumProd": ("CumProd", {"x": _zeros(HUGE, 0, 3), "c_axis": np.array(2, np.int64)}, {}, 26, 1),
    "ReduceProd": ("ReduceProd", {"x": _zeros(HUGE, 0, 3)}, {"axes": [2]}, 17, 1),
    "ReduceMin": ("ReduceMin", {"x": _zeros(HUGE, 0, 3)}, {"axes": [2]}, 17, 1),
    "ReduceSumSquare": ("ReduceSumSquare", {"x": _zeros(HUGE, 0, 3)}, {"axes": [2]}, 17, 1),
    "ReduceL1": ("ReduceL1", {"x": _zeros(HUGE, 0, 3)}, {"axes": [2]}, 17, 1),
    "ReduceLogSum": ("ReduceLogSum", {"x": _zeros(HUGE, 0, 3)}, {"axes": [2]}, 17, 1),
    "ArgMin": ("ArgMin", {"x": _zeros(HUGE, 0, 3)}, {"axis": 2}, 17, 1),
    "Max": ("Max", {"x": _zeros(HUGE, 0, 3), "c_y": _zeros(3)}, {}, 17, 1),
    "Mean": ("Mean", {"x": _zeros(HUGE, 0, 3), "c_y": _zeros(3)}, {}, 17, 1),
    "Mod": ("Mod", {"x": _zeros(HUGE, 0, 3), "c_y": np.ones(3, np.float32)}, {"fmod": 1}, 17, 1),
    "Pow": ("Pow", {"x": _zeros(HUGE, 0, 3), "c_y": _zeros(3)}, {}, 17, 1),
    "PRelu": ("PRelu", {"x": _zeros(HUGE, 0, 3), "c_s": _zeros(3)}, {}, 17, 1),
    "Clip": ("Clip", {"x": _zeros(HUGE, 0, 3)}, {}, 17, 1),
    "Mish": ("Mish", {"x": _zeros(HUGE, 0, 3)}, {}, 18, 1),
    "HardSwish": ("HardSwish", {"x": _zeros(HUGE, 0, 3)}, {}, 17, 1),
    "Sqrt": ("Sqrt", {"x": _zeros(HUGE, 0, 3)}, {}, 17, 1),
    "Sin": ("Sin", {"x": _zeros(HUGE, 0, 3)}, {}, 17, 1),
    "Round": ("Round", {"x": _zeros(HUGE, 0, 3)}, {}, 17, 1),
    "IsNaN": ("IsNaN", {"x": _zeros(HUGE, 0, 3)}, {}, 17, 1),
    "Equal": ("Equal", {"x": _zeros(HUGE, 0, 3), "c_y": _zeros(3)}, {}, 17, 1),
    "EyeLike": ("EyeLike", {"x": _zeros(HUGE, 0)}, {}, 17, 1),
    "Dropout": ("Dropout", {"x": _zeros(HUGE, 0, 3)}, {}, 17, 1),
    "GridSample": ("GridSample", {"x": _zeros(HUGE, 2, 0, 3), "g": _zeros(HUGE, 0, 3, 2)}, {}, 20, 1),
    "RoiAlign": ("RoiAlign", {"x": _zeros(1, 2, 4, 4), "r": _zeros(0, 4), "b": _zeros(0, dtype=np.int64)}, {}, 17, 1),
    "MaxRoiPool": ("MaxRoiPool", {"x": _zeros(1, 2, 4, 4), "r": _zeros(0, 5)}, {"pooled_shape": [2, 2]}, 17, 1),
    "NonMaxSuppression": ("NonMaxSuppression", {"b": _zeros(HUGE, 0, 4), "s": _zeros(HUGE, 1, 0)}, {}, 17, 1),
    "SoftmaxCrossEntropyLoss": ("SoftmaxCrossEntropyLoss", {"x": _zeros(HUGE, 3, 0), "l": _zeros(HUGE, 0, dtype=np.int64)}, {"reduction": "none"}, 17, 1),
    "NegativeLogLikelihoodLoss": ("NegativeLogLikelihoodLoss", {"x": _zeros(HUGE, 3, 0), "l": _zeros(HUGE, 0, dtype=np.int64)}, {"reduction": "none"}, 17, 1),
    "DFT": ("DFT", {"x": _zeros(HUGE, 0, 1)}, {"axis": 1}, 17, 1),
    "RotaryEmbedding": ("RotaryEmbedding", {"x": _zeros(HUGE, 2, 0, 4), "c_cos": _zeros(8, 2), "c_sin": _zeros(8, 2), "p": _zeros(HUGE, 0, dtype=np.int64)}, {}, 23, 1),
    "Upsample": ("Upsample", {"x": _zeros(HUGE, 0, 2), "c_s": np.array([1, 1, 2], np.float32)}, {}, 9, 1),
    "CenterCropPad": ("CenterCropPad", {"x": _zeros(HUGE, 0, 3), "c_s": np.array([2], np.int64)}, {"axes": [2]}, 18, 1),
    "DeformConv": ("DeformConv", {"x": _zeros(HUGE, 2, 0, 5), "c_w": _zeros(3, 2, 1, 1), "o": _zeros(HUGE, 2, 0, 5)}, {}, 19, 1),
    "QLinearConv": ("QLinearConv", {"x": _zeros(HUGE, 2, 0, 5, dtype=np.uint8), "c_xs": np.array(0.5, np.float32), "c_xz": np.array(0, np.uint8), "c_w": _zeros(3, 2, 1, 1, dtype=np.uint8), "c_ws": np.array(0.5, np.float32), "c_wz": np.array(0, np.uint8), "c_ys": np.array(0.5, np.float32), "c_yz": np.array(0, np.uint8)}, {}, 17, 1),
    "Identity": ("Identity", {"x": _zeros(HUGE, 0)}, {}, 17, 1),
}  # fmt: skip

# Where ONNX Runtime refuses the case (or itself steps through the huge dimension: it does for
# InstanceNormalization, BatchNormalization and Trilu), the shape the op's definition gives.
DEFINED_SHAPES: dict[str, list[tuple[int, ...]]] = {
    "MatMul_batched": [(HUGE, 0, 0)],
    "Conv": [(HUGE, 3, 0, 5)],
    "ConvTranspose": [(HUGE, 3, 0, 5)],
    "MaxPool": [(HUGE, 2, 0, 5)],
    "AveragePool": [(HUGE, 2, 0, 5)],
    "GlobalMaxPool": [(HUGE, 0, 1, 1)],
    "InstanceNormalization": [(HUGE, 2, 0)],
    "BatchNormalization": [(HUGE, 2, 0)],
    "Trilu": [(HUGE, 0, 3)],
    "Tile": [(HUGE, 0)],
    "LpPool": [(HUGE, 2, 0, 5)],
    "GlobalLpPool": [(HUGE, 0, 1, 1)],
    "GroupNormalization": [(HUGE, 2, 0)],
    "GridSample": [(HUGE, 2, 0, 3)],
    "ConvInteger": [(HUGE, 3, 0, 5)],
    "QLinearConv": [(HUGE, 3, 0, 5)],
}

# Cases ONNX Runtime refuses as malformed (an attention over no keys, rotary embedding of no
# positions): the reference refuses them too, at once.
REFUSED = {"Attention", "RotaryEmbedding"}


def _model(case: Case) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    op, feeds, attributes, opset, n_out = case
    outputs = [f"out{i}" for i in range(n_out)]
    graph = helper.make_graph(
        [helper.make_node(op, list(feeds), outputs, **attributes)],
        "empty",
        [
            helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for k, v in feeds.items()
            if not k.startswith("c_")
        ],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in feeds.items() if k.startswith("c_")],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset)])
    return model, {k: v for k, v in feeds.items() if not k.startswith("c_")}


def _case(name: str) -> Case:
    return OVER_BUDGET[name][0] if name in OVER_BUDGET else CASES[name]


def _print_reference_results(names: list[str]) -> None:
    """The worker: each case's output shapes on the reference backend (or its error), one JSON line
    as the case ends."""
    for name in names:
        model, feeds = _model(_case(name))
        try:
            with np.errstate(all="ignore"):
                result: Any = [list(o.shape) for o in sealtrace.Session(model).run(None, feeds)]
        except Exception as exc:
            result = f"{type(exc).__name__}: {exc}"
        print(json.dumps({"case": name, "result": result}), flush=True)


@pytest.fixture(scope="module")
def reference_results() -> dict[str, Any]:
    """Every case's result in worker processes; a case still running at a worker's deadline is
    recorded as hung, and a new worker takes the cases after it."""
    results: dict[str, Any] = {}
    names = [*CASES, *OVER_BUDGET]
    while len(results) < len(names):
        pending = [name for name in names if name not in results]
        command = [sys.executable, "-m", "tests.ops.test_empty_tensors", *pending]
        try:
            stdout = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=30).stdout
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        for line in stdout.splitlines():
            record = json.loads(line)
            results[record["case"]] = record["result"]
        hung = next((name for name in pending if name not in results), None)
        if hung is not None:
            results[hung] = "still running after 30 s"
    return results


@pytest.mark.parametrize("name", list(CASES))
def test_an_empty_input_with_a_huge_dimension_returns_at_once(
    name: str, reference_results: dict[str, Any]
) -> None:
    got = reference_results[name]
    if name in REFUSED:
        assert isinstance(got, str) and got.startswith("KernelError"), got
        return
    assert isinstance(got, list), got
    if name in DEFINED_SHAPES:
        want = DEFINED_SHAPES[name]
    else:
        model, feeds = _model(CASES[name])
        options = ort.SessionOptions()
        options.log_severity_level = 4
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        want = [o.shape for o in session.run(None, feeds)]
    assert [tuple(shape) for shape in got] == want


# Empty inputs that declare an output beyond the (default 1 GiB) memory budget, and the words the
# refusal starts with.
OVER_BUDGET: dict[str, tuple[Case, str]] = {
    "MatMul over budget": (("MatMul", {"a": _zeros(HUGE, 2, 0), "c_b": _zeros(0, 3)}, {}, 17, 1), "MatMul of shapes"),
    "Gemm over budget": (("Gemm", {"a": _zeros(1 << 20, 0), "b": _zeros(0, 1 << 20)}, {}, 17, 1), "Gemm of shapes"),
    "Einsum over budget": (("Einsum", {"a": _zeros(1 << 20, 0), "b": _zeros(0, 1 << 20)}, {"equation": "ij,jk->ik"}, 17, 1), "Einsum"),
    "Conv over budget": (("Conv", {"x": _zeros(1 << 30, 1, 0, 0), "c_w": _zeros(1, 1, 1, 1)}, {"pads": [1, 1, 1, 1]}, 17, 1), "Conv of"),
    "Range over budget": (("Range", {"s": np.array(0, np.int64), "l": np.array(HUGE, np.int64), "d": np.array(1, np.int64)}, {}, 17, 1), "Range of"),
    "ConstantOfShape over budget": (("ConstantOfShape", {"s": np.array([HUGE, 4], np.int64)}, {}, 17, 1), "ConstantOfShape of shape"),
    # a broadcast view costs nothing, but the run's outputs (and any step reading it) pay its size
    "Expand over budget": (("Expand", {"x": _zeros(1, 1), "s": np.array([HUGE, 384], np.int64)}, {}, 17, 1), "Expand of (1, 1)"),
    "Unique over budget": (("Unique", {"x": _zeros(HUGE, 0)}, {"axis": 0}, 17, 4), "Unique of shape"),
    "SplitToSequence over budget": (("SplitToSequence", {"x": _zeros(HUGE, 0)}, {"axis": 0}, 17, 1), "SplitToSequence into"),
    # 2**40 steps of a body that only passes its (empty) slice through
    "Scan over budget": (("Scan", {"x": _zeros(HUGE, 0)}, {"num_scan_inputs": 1, "body": helper.make_graph(
        [helper.make_node("Identity", ["e"], ["e_out"])], "body",
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [0])],
        [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [0])],
    )}, 17, 1), "Scan of 1099511627776 steps"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(OVER_BUDGET))
def test_an_output_beyond_the_memory_budget_is_refused_before_it_is_made(
    name: str, reference_results: dict[str, Any]
) -> None:
    assert reference_results[name].startswith(f"BudgetExceededError: {OVER_BUDGET[name][1]}")


def test_an_allocation_numpy_refuses_is_a_budget_error_naming_the_step() -> None:
    # RNN over an empty sequence of 2**40 instances: Y_h alone would be [1, 2**40, 4]
    graph = helper.make_graph(
        [helper.make_node("RNN", ["x", "w", "r"], ["y", "y_h"], hidden_size=4)],
        "rnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, HUGE, 3])],
        [onnx.ValueInfoProto(name="y"), onnx.ValueInfoProto(name="y_h")],
        initializer=[numpy_helper.from_array(_zeros(1, 4, 3), "w"), numpy_helper.from_array(_zeros(1, 4, 4), "r")],
    )
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(BudgetExceededError, match=r"step 0 .*RNN"):
        sealtrace.Session(model).run(None, {"x": _zeros(0, HUGE, 3)})


def _minilm_empty_feeds() -> dict[str, np.ndarray]:
    return {name: np.zeros((HUGE, 0), np.int64) for name in ("input_ids", "attention_mask", "token_type_ids")}


def test_minilm_with_a_huge_empty_batch_is_refused_by_the_budget() -> None:
    real = require_material(lambda: zoo.model("minilm-int8"))
    with pytest.raises(BudgetExceededError, match="memory budget"):
        sealtrace.Session(str(real.path)).run(None, _minilm_empty_feeds())


def _sealtrace_run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "sealtrace", "run", *map(str, args)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_sealtrace_run_refuses_minilm_with_a_huge_empty_batch(tmp_path: Path) -> None:
    real = require_material(lambda: zoo.model("minilm-int8"))
    np.savez(tmp_path / "empty.npz", **_minilm_empty_feeds())
    done = _sealtrace_run(real.path, "--inputs", tmp_path / "empty.npz")
    assert done.returncode == 2, done.stderr
    assert "memory budget" in done.stderr


def test_sealtrace_run_with_an_audit_log_answers_an_empty_batched_product_at_once(tmp_path: Path) -> None:
    model, feeds = _model(CASES["MatMul_batched"])
    onnx.save(model, tmp_path / "matmul.onnx")
    np.savez(tmp_path / "empty.npz", **feeds)
    done = _sealtrace_run(
        tmp_path / "matmul.onnx", "--inputs", tmp_path / "empty.npz", "--out", tmp_path / "out.npz",
        "--audit", tmp_path / "audit.jsonl",  # (the observed run: the freeze was reported under --audit)
    )
    assert done.returncode == 0, done.stderr
    assert np.load(tmp_path / "out.npz")["out0"].shape == (HUGE, 0, 0)


if __name__ == "__main__":
    _print_reference_results(sys.argv[1:])
