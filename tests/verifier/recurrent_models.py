"""Small models of Pad and LSTM, the operators the Silero VAD sequence model adds to sealverify replay (issue 30),
each at its edges: every Pad mode with pads longer than the axis, negative pads, axes, constants of several
dtypes; LSTM forward, reverse, bidirectional and batch-first, with and without biases, initial states,
peepholes, clip, input_forget and sequence lengths (0 among them), on inputs with infinities and signed zeros.
The replay tests and the replay corpus record them with sealtrace on seeded inputs and replay them with
sealverify."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tests.conftest import make_model
from tests.verifier.stage_b_models import ModelCase

RECURRENT_OPERATORS = {"Pad", "LSTM"}


def _model(node: onnx.NodeProto, feeds: dict[str, np.ndarray], weights: list[onnx.TensorProto],
           opset: int) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
              for k, v in feeds.items()]
    dtype = helper.np_dtype_to_tensor_dtype(next(iter(feeds.values())).dtype)
    outputs = [helper.make_tensor_value_info(name, dtype, None) for name in node.output if name]
    return make_model([node], inputs, outputs, weights, opset=opset)


def pad_cases(rng: np.random.Generator) -> list[ModelCase]:
    """Pad in every mode of its opset (wrap from 19), reflect past the axis's length (periodic) and of a single
    element, negative pads, the axes input (18), constant values of float32 and int64, opset 2's attributes."""
    x = (rng.standard_normal((2, 3, 5)) * 3).astype(np.float32)
    x.reshape(-1)[:3] = [np.nan, -0.0, np.inf]
    ints = rng.integers(-(2**40), 2**40, (3, 4), dtype=np.int64)
    cases = []
    for name, mode, pads, opset, extra in (
            ("pad_reflect", "reflect", [0, 1, 2, 0, 1, 3], 16, None),
            ("pad_reflect_long", "reflect", [0, 2, 7, 0, 1, 9], 16, None),
            ("pad_reflect_negative", "reflect", [0, -1, 3, 0, 1, -2], 16, None),
            ("pad_edge", "edge", [1, 0, -3, 2, 1, 4], 16, None),
            ("pad_wrap", "wrap", [0, 2, 3, 0, 1, 11], 19, None),
            ("pad_constant", "constant", [1, -1, 2, 0, 2, 3], 16, np.float32(-0.0)),
            ("pad_axes", "reflect", [1, 2, 2, 1], 18, [1, -1])):
        weights = [numpy_helper.from_array(np.array(pads, dtype=np.int64), "pads")]
        inputs = ["x", "pads"]
        if extra is not None and mode == "constant":
            weights.append(numpy_helper.from_array(np.array(extra, dtype=np.float32), "value"))
            inputs.append("value")
        elif extra is not None:
            weights.append(numpy_helper.from_array(np.array(extra, dtype=np.int64), "axes"))
            inputs += ["", "axes"]
        node = helper.make_node("Pad", inputs, ["y"], name=name, mode=mode)
        cases.append((name, _model(node, {"x": x}, weights, opset), {"x": x}))
    single = x[:, :, :1].copy()
    node = helper.make_node("Pad", ["x", "pads"], ["y"], name="pad_reflect_one", mode="reflect")
    cases.append(("pad_reflect_one", _model(node, {"x": single}, [numpy_helper.from_array(
        np.array([0, 0, 3, 0, 0, 2], dtype=np.int64), "pads")], 16), {"x": single}))
    node = helper.make_node("Pad", ["x", "pads", "value"], ["y"], name="pad_int64", mode="constant")
    cases.append(("pad_int64", _model(node, {"x": ints}, [
        numpy_helper.from_array(np.array([2, 0, 1, 3], dtype=np.int64), "pads"),
        numpy_helper.from_array(np.array(-(2**62), dtype=np.int64), "value")], 16), {"x": ints}))
    node = helper.make_node("Pad", ["x"], ["y"], name="pad_opset2", mode="constant", pads=[0, 1, 0, 1, 0, 2],
                            value=2.5)
    cases.append(("pad_opset2", _model(node, {"x": x}, [], 2), {"x": x}))
    return cases


def lstm_cases(rng: np.random.Generator) -> list[ModelCase]:
    """LSTM (opset 14 for layout) in each direction and layout, with every optional input and attribute replay
    runs, on inputs with an infinity, signed zeros and values large enough to saturate the gates."""
    seq, batch, size, hidden = 5, 3, 4, 6
    x = (rng.standard_normal((seq, batch, size)) * rng.choice([0.1, 1.0, 30.0], (seq, batch, size))).astype(np.float32)
    x[0, 0, 0], x[1, 1, 1], x[2, 2, 2] = np.inf, -0.0, 0.0
    cases = []
    for name, attrs, optional in (
            ("lstm", {}, ()),
            ("lstm_bias_states", {}, ("B", "initial_h", "initial_c")),
            ("lstm_peepholes", {}, ("B", "initial_h", "initial_c", "P")),
            ("lstm_reverse_clip", {"direction": "reverse", "clip": 0.75}, ("B", "initial_c")),
            ("lstm_bidirectional_lengths", {"direction": "bidirectional"}, ("B", "sequence_lens", "initial_h")),
            ("lstm_input_forget", {"input_forget": 1}, ("initial_h", "initial_c", "P")),
            ("lstm_batch_first", {"layout": 1, "direction": "bidirectional"}, ("B", "initial_h", "initial_c"))):
        directions = 2 if attrs.get("direction") == "bidirectional" else 1
        batch_first = attrs.get("layout") == 1
        state = (batch, directions, hidden) if batch_first else (directions, batch, hidden)
        values = {"W": (directions, 4 * hidden, size), "R": (directions, 4 * hidden, hidden), "B": (directions, 8 * hidden),
                  "P": (directions, 3 * hidden)}
        weights = [numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(np.float32), key)
                   for key, shape in values.items() if key in ("W", "R") or key in optional]
        if "sequence_lens" in optional:
            weights.append(numpy_helper.from_array(np.array([seq, 2, 0], dtype=np.int32), "sequence_lens"))
        feeds = {"x": np.swapaxes(x, 0, 1).copy() if batch_first else x}
        for key in ("initial_h", "initial_c"):
            if key in optional:
                feeds[key] = (rng.standard_normal(state) * 2).astype(np.float32)
        inputs = ["x", "W", "R", *(k if k in optional else "" for k in ("B", "sequence_lens", "initial_h", "initial_c",
                                                                         "P"))]
        while not inputs[-1]:
            inputs.pop()
        node = helper.make_node("LSTM", inputs, ["y", "y_h", "y_c"], name=name, hidden_size=hidden, **attrs)
        cases.append((name, _model(node, feeds, weights, 14), feeds))
    return cases


def recurrent_op_cases(rng: np.random.Generator) -> list[ModelCase]:
    """pad_cases and lstm_cases, for the replay tests and the replay corpus."""
    return pad_cases(rng) + lstm_cases(rng)

