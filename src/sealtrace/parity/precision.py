"""Precision drift: a model run in a lower precision against its float32 self.

``lower_precision`` rewrites a float32 ONNX model in float16 or bfloat16 (weights, constants, casts,
declared types), or quantizes it with ONNX Runtime's dynamic int8 quantization. ``PrecisionLoss``
watches the lower-precision run and compares each step's values with the float32 run's: the drift
the precision itself causes (``precision_loss``, as export-validator calls it), apart from the drift
between two backends running the same lower-precision model.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from sealtrace.errors import InputError
from sealtrace.parity.metrics import ValueDiff, compare_values
from sealtrace.parity.tolerance import ToleranceTable
from sealtrace.plan import Plan
from sealtrace.plan.events import StepEvent

FLOATS = {"fp16": (TensorProto.FLOAT16, np.dtype(np.float16)), "bf16": (TensorProto.BFLOAT16, np.dtype(ml_dtypes.bfloat16))}
PRECISIONS = (*FLOATS, "int8-dynamic")


def lower_precision(model: onnx.ModelProto, precision: str) -> onnx.ModelProto:
    """A copy of ``model`` in ``precision`` (fp16, bf16: every float32 tensor and type; int8-dynamic:
    ONNX Runtime's quantize_dynamic, int8 weights and dynamically quantized activations)."""
    if precision == "int8-dynamic":
        return _quantized(model)
    if precision not in FLOATS:
        raise InputError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    low = onnx.ModelProto()
    low.CopyFrom(model)
    _lower_graph(low.graph, *FLOATS[precision])
    return low


def lower_feeds(feeds: Mapping[str, Any], precision: str) -> dict[str, Any]:
    """Float32 inputs in ``precision``'s float type (a quantized model keeps float32 inputs)."""
    if precision not in FLOATS:
        return dict(feeds)
    dtype = FLOATS[precision][1]
    return {k: v.astype(dtype) if isinstance(v, np.ndarray) and v.dtype == np.float32 else v for k, v in feeds.items()}


def widened(value: Any) -> Any:
    """A float16 or bfloat16 array as float32 (exactly), to be compared with float32 values."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "fV" and value.dtype.itemsize < 4:
        return value.astype(np.float32)
    return value


def precision_diff(name: str, low: Any, full: Any, tolerance: ToleranceTable, op_type: str = "") -> ValueDiff:
    """How far a value computed in the lower precision is from its float32 counterpart."""
    return compare_values(name, widened(low), full, tolerance.for_value(op_type, name))


def _lower_graph(graph: onnx.GraphProto, elem: int, dtype: np.dtype) -> None:
    for info in [*graph.input, *graph.output, *graph.value_info]:
        if info.type.tensor_type.elem_type == TensorProto.FLOAT:
            info.type.tensor_type.elem_type = elem
    for i, tensor in enumerate(graph.initializer):
        graph.initializer[i].CopyFrom(_lower_tensor(tensor, dtype))
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.TENSOR:
                attribute.t.CopyFrom(_lower_tensor(attribute.t, dtype))
            elif attribute.type == onnx.AttributeProto.GRAPH:
                _lower_graph(attribute.g, elem, dtype)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    _lower_graph(sub, elem, dtype)
            elif attribute.name in ("to", "dtype") and attribute.i == TensorProto.FLOAT:
                attribute.i = elem  # Cast(to=FLOAT), RandomNormal(dtype=FLOAT) ...
        if node.op_type == "Constant":
            # value_float(s) would make a float32 constant: made a tensor of the lower type.
            scalar = next((a for a in node.attribute if a.name in ("value_float", "value_floats")), None)
            if scalar is not None:
                array = np.array(scalar.f if scalar.name == "value_float" else list(scalar.floats), dtype=np.float32)
                node.attribute.remove(scalar)
                node.attribute.append(onnx.helper.make_attribute("value", numpy_helper.from_array(array.astype(dtype))))


def _lower_tensor(tensor: onnx.TensorProto, dtype: np.dtype) -> onnx.TensorProto:
    if tensor.data_type != TensorProto.FLOAT or tensor.data_location == TensorProto.EXTERNAL:
        return tensor
    return numpy_helper.from_array(numpy_helper.to_array(tensor).astype(dtype), tensor.name)


def _quantized(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        raise InputError("--precision int8-dynamic needs onnxruntime's quantization tools") from None
    with tempfile.TemporaryDirectory(prefix="sealtrace-int8-") as folder:
        target = Path(folder) / "int8.onnx"
        logging.disable(logging.WARNING)  # its advice to pre-process the model, on the root logger
        try:
            quantize_dynamic(model, target, weight_type=QuantType.QInt8)
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise InputError(f"onnxruntime could not quantize the model: {type(exc).__name__}: {first}") from None
        finally:
            logging.disable(logging.NOTSET)
        return onnx.load(target)


class PrecisionLoss:
    """Observer on the lower-precision run: each step's values against the float32 run's (``full``,
    by value name; a value the float32 model does not have, a quantizer's own, is not compared).
    A float32 value is let go once compared."""

    def __init__(self, full: dict[str, Any], tolerance: ToleranceTable) -> None:
        self.full = full
        self.tolerance = tolerance
        self.loss: dict[str, tuple[ValueDiff, ...]] = {}

    def on_run_start(self, plan: Plan, feeds: Mapping[str, Any], backend: Any) -> None:
        pass

    def on_step(self, event: StepEvent) -> None:
        if event.path:
            return
        step = event.step
        diffs = tuple(
            precision_diff(name, value, self.full.pop(name), self.tolerance, step.op_type)
            for name, value in zip(step.outputs, event.outputs, strict=False)
            if name in self.full
        )
        if diffs:
            self.loss[step.name] = diffs

    def on_run_end(self, outputs: Mapping[str, Any]) -> None:
        pass


class FullValues:
    """Observer on the float32 run keeping every top-level step's values by name."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def on_run_start(self, plan: Plan, feeds: Mapping[str, Any], backend: Any) -> None:
        pass

    def on_step(self, event: StepEvent) -> None:
        if not event.path:
            for name, value in zip(event.step.outputs, event.outputs, strict=False):
                if name:
                    self.values[name] = np.array(value, copy=True) if isinstance(value, np.ndarray) else value

    def on_run_end(self, outputs: Mapping[str, Any]) -> None:
        pass
