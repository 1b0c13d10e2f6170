"""RNN, GRU and LSTM against onnxruntime: directions, layouts, sequence_lens, clip, peepholes, activations."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import sealtrace
from tests.conftest import make_model

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
SEQ, BATCH, INPUT, HIDDEN = 5, 3, 4, 6


def _model(
    op: str, feeds: dict[str, np.ndarray], opset: int, n_outputs: int, **attrs: Any
) -> onnx.ModelProto:
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
    inputs = [n if n in feeds else "" for n in names]
    while inputs and not inputs[-1]:
        inputs.pop()
    outputs = ["Y", "Y_h", "Y_c"][:n_outputs]
    node = helper.make_node(op, inputs, outputs, hidden_size=HIDDEN, **attrs)
    elem = helper.np_dtype_to_tensor_dtype(feeds["X"].dtype)
    return make_model(
        [node],
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in feeds.items()
        ],
        [helper.make_tensor_value_info(o, elem, None) for o in outputs],
        opset=opset,
    )


def _feeds(
    op: str,
    directions: int = 1,
    layout: int = 0,
    dtype: type = np.float32,
    lengths: list[int] | None = None,
    initial: bool = False,
    peepholes: bool = False,
    seed: int = 0,
    seq: int = SEQ,
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    g = GATES[op]
    x_shape = (BATCH, seq, INPUT) if layout else (seq, BATCH, INPUT)
    feeds = {
        "X": rng.standard_normal(x_shape),
        "W": rng.standard_normal((directions, g * HIDDEN, INPUT)) * 0.5,
        "R": rng.standard_normal((directions, g * HIDDEN, HIDDEN)) * 0.5,
        "B": rng.standard_normal((directions, 2 * g * HIDDEN)) * 0.5,
    }
    if lengths is not None:
        feeds["sequence_lens"] = np.array(lengths, dtype=np.int32)
    state_shape = (BATCH, directions, HIDDEN) if layout else (directions, BATCH, HIDDEN)
    if initial:
        feeds["initial_h"] = rng.standard_normal(state_shape)
        if op == "LSTM":
            feeds["initial_c"] = rng.standard_normal(state_shape)
    if peepholes:
        feeds["P"] = rng.standard_normal((directions, 3 * HIDDEN)) * 0.5
    return {k: (v if v.dtype == np.int32 else v.astype(dtype)) for k, v in feeds.items()}


def _both(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[list[Any], list[Any]]:
    got = sealtrace.Session(model).run(None, feeds)
    layout = next((a.i for a in model.graph.node[0].attribute if a.name == "layout"), 0)
    if layout == 1:
        # onnxruntime only runs layout 0: ask it the time-major question and transpose its answer.
        model = onnx.ModelProto.FromString(model.SerializeToString())
        node = model.graph.node[0]
        for a in node.attribute:
            if a.name == "layout":
                a.i = 0
        feeds = {
            k: np.swapaxes(v, 0, 1) if k in ("X", "initial_h", "initial_c") else v for k, v in feeds.items()
        }
        for vi in model.graph.input:
            vi.CopyFrom(
                helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, feeds[vi.name].shape)
            )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    if layout == 1:
        want = [np.transpose(want[0], (2, 0, 1, 3)), *(np.swapaxes(w, 0, 1) for w in want[1:])]
    return want, got


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], atol: float = 2e-5) -> list[Any]:
    want, got = _both(model, feeds)
    for w, g in zip(want, got, strict=True):
        assert g.dtype == w.dtype
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=atol)
    return got


CASES = [
    {},
    {"direction": "reverse"},
    {"direction": "bidirectional"},
    {"layout": 1},
    {"layout": 1, "direction": "bidirectional", "initial": True},
    {"lengths": [5, 2, 3]},
    {"lengths": [5, 0, 3], "direction": "reverse", "initial": True},
    {"lengths": [1, 4, 3], "direction": "bidirectional", "layout": 1, "initial": True},
    {"clip": 0.7, "initial": True},
]


def _split_case(case: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    feed_args = {k: case[k] for k in ("lengths", "initial", "layout") if k in case}
    if case.get("direction") == "bidirectional":
        feed_args["directions"] = 2
    attrs = {k: case[k] for k in ("direction", "layout", "clip") if k in case}
    return feed_args, attrs


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default")
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_matches_onnxruntime(op: str, case: dict[str, Any]) -> None:
    feed_args, attrs = _split_case(case)
    feeds = _feeds(op, **feed_args)
    _check(_model(op, feeds, 14, 3 if op == "LSTM" else 2, **attrs), feeds)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_long_sequences_match_onnxruntime(op: str, direction: str) -> None:
    """Seventy steps: the whole-sequence input projection and the per-step products stay in step."""
    feeds = _feeds(op, directions=2 if direction == "bidirectional" else 1, seq=70)
    _check(_model(op, feeds, 14, 3 if op == "LSTM" else 2, direction=direction), feeds)


@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_gru_linear_before_reset(linear_before_reset: int, direction: str) -> None:
    feeds = _feeds(
        "GRU", directions=2 if direction == "bidirectional" else 1, initial=True, lengths=[5, 3, 1]
    )
    model = _model("GRU", feeds, 14, 2, direction=direction, linear_before_reset=linear_before_reset)
    _check(model, feeds)


@pytest.mark.parametrize("input_forget", [0, 1])
def test_lstm_peepholes_and_input_forget(input_forget: int) -> None:
    feeds = _feeds("LSTM", directions=2, initial=True, peepholes=True, lengths=[2, 5, 4])
    model = _model("LSTM", feeds, 14, 3, direction="bidirectional", input_forget=input_forget, clip=1.5)
    _check(model, feeds)


ACTIVATIONS = [
    (["Relu"], [], []),
    (["LeakyRelu"], [], []),  # the defaults: 0.01, (0.2, 0.5), 1.0
    (["HardSigmoid"], [], []),
    (["Elu"], [], []),
    (["LeakyRelu"], [0.3], []),
    (["ThresholdedRelu"], [0.2], []),
    (["ScaledTanh"], [0.8], [1.3]),
    (["HardSigmoid"], [0.3], [0.4]),
    (["Elu"], [0.7], []),
    (["Softsign"], [], []),
    (["Softplus"], [], []),
    (["Affine"], [0.6], [0.1]),
]


@pytest.mark.parametrize(("names", "alphas", "betas"), ACTIVATIONS, ids=lambda v: str(v))
def test_rnn_activations(names: list[str], alphas: list[float], betas: list[float]) -> None:
    feeds = _feeds("RNN", initial=True)
    attrs: dict[str, Any] = {"activations": names}
    if alphas:
        attrs["activation_alpha"] = alphas
    if betas:
        attrs["activation_beta"] = betas
    _check(_model("RNN", feeds, 14, 2, **attrs), feeds)


def test_lstm_activations_consume_alpha_beta_in_order() -> None:
    # Per direction (f, g, h); only functions that take a parameter consume from the lists.
    feeds = _feeds("LSTM", directions=2, initial=True)
    attrs = {
        "direction": "bidirectional",
        "activations": ["HardSigmoid", "Tanh", "ScaledTanh", "Sigmoid", "LeakyRelu", "Softsign"],
        "activation_alpha": [0.25, 0.9, 0.05],
        "activation_beta": [0.45, 1.1],
    }
    _check(_model("LSTM", feeds, 14, 3, **attrs), feeds)


def test_gru_activations_leaky_and_affine() -> None:
    feeds = _feeds("GRU", initial=True)
    attrs = {
        "activations": ["HardSigmoid", "Affine"],
        "activation_alpha": [0.2, 0.5],
        "activation_beta": [0.5, 0.1],
    }
    _check(_model("GRU", feeds, 14, 2, **attrs), feeds)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_float64_stays_float64(op: str) -> None:
    # onnxruntime's CPU kernels have no double RNN/GRU/LSTM: compare with the float32 result instead.
    feeds = _feeds(op, dtype=np.float64, initial=True, lengths=[5, 4, 2])
    n = 3 if op == "LSTM" else 2
    got = sealtrace.Session(_model(op, feeds, 14, n)).run(None, feeds)
    feeds32 = {k: v.astype(np.float32) if v.dtype == np.float64 else v for k, v in feeds.items()}
    want = sealtrace.Session(_model(op, feeds32, 14, n)).run(None, feeds32)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, w, atol=1e-5)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_float16_stays_float16(op: str) -> None:
    feeds = _feeds(op, dtype=np.float16, initial=True)
    got = sealtrace.Session(_model(op, feeds, 14, 3 if op == "LSTM" else 2)).run(None, feeds)
    want = sealtrace.Session(
        _model(op, {k: v.astype(np.float32) for k, v in feeds.items()}, 14, 3 if op == "LSTM" else 2)
    ).run(None, {k: v.astype(np.float32) for k, v in feeds.items()})
    # Every step rounds to float16 (docs/numerics.md: composites run in T), so the states drift a
    # few float16 ulps from the float32 computation's over the sequence.
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.float16
        np.testing.assert_allclose(g.astype(np.float32), w, rtol=4e-3, atol=4e-3)


@pytest.mark.parametrize(("op", "old"), [("RNN", 7), ("GRU", 7), ("LSTM", 7), ("GRU", 3)])
def test_older_opsets_match_onnxruntime(op: str, old: int) -> None:
    feeds = _feeds(op, directions=2, initial=True, lengths=[3, 5, 4])
    if old == 3:
        # onnxruntime has no GRU-3: it must equal GRU-7 (the versions differ only in type support).
        model3 = _model(op, feeds, 3, 2, direction="bidirectional", linear_before_reset=1)
        model7 = _model(op, feeds, 7, 2, direction="bidirectional", linear_before_reset=1)
        got3 = sealtrace.Session(model3).run(None, feeds)
        want = _check(model7, feeds)
        for g, w in zip(got3, want, strict=True):
            np.testing.assert_array_equal(g, w)
        return
    _check(_model(op, feeds, old, 3 if op == "LSTM" else 2, direction="bidirectional"), feeds)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_opset_1_with_output_sequence(op: str) -> None:
    feeds = _feeds(op, initial=True)
    n = 3 if op == "LSTM" else 2
    old = sealtrace.Session(_model(op, feeds, 1, n, output_sequence=1)).run(None, feeds)
    new = sealtrace.Session(_model(op, feeds, 7, n)).run(None, feeds)
    for a, b in zip(old, new, strict=True):
        np.testing.assert_array_equal(a, b)


def test_only_final_state_requested() -> None:
    feeds = _feeds("LSTM", initial=True)
    node = helper.make_node(
        "LSTM", ["X", "W", "R", "B", "", "initial_h", "initial_c"], ["", "Y_h"], hidden_size=HIDDEN
    )
    model = make_model(
        [node],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, None)],
        opset=14,
    )
    _check(model, feeds)


def test_deterministic() -> None:
    feeds = _feeds("LSTM", directions=2, lengths=[5, 1, 3])
    model = _model("LSTM", feeds, 14, 3, direction="bidirectional")
    first = sealtrace.Session(model).run(None, feeds)
    second = sealtrace.Session(model).run(None, feeds)
    for a, b in zip(first, second, strict=True):
        assert a.tobytes() == b.tobytes()
