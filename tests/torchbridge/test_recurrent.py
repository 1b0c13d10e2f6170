"""LSTM, GRU and RNN on torch: every configuration against the reference kernels, and the fused
path (torch's own recurrent kernels) against the step-by-step translation: same values, same
gradients, and gradcheck in float64."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from sealtrace.backends import get_backend  # noqa: E402
from sealtrace.plan import build_plan  # noqa: E402
from sealtrace.torchbridge import to_torch  # noqa: E402
from sealtrace.torchops.translations import rnn as rnn_ops  # noqa: E402

SEQ, BATCH, FEATURES, HIDDEN = 5, 3, 4, 6
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def recurrent_model(op: str, attrs: dict[str, Any], *, bias: bool = True, initial: bool = True,
                    sequence_lens: list[int] | None = None, peepholes: bool = False, seed: int = 0) -> Any:
    """One recurrent node with random weights; graph inputs X (and its initial states)."""
    rng = np.random.default_rng(seed)
    directions = 2 if attrs.get("direction") == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    gates = GATES[op]
    weights = {
        "W": rng.standard_normal((directions, gates * HIDDEN, FEATURES)).astype(np.float32) * 0.5,
        "R": rng.standard_normal((directions, gates * HIDDEN, HIDDEN)).astype(np.float32) * 0.5,
    }
    if bias:
        weights["B"] = rng.standard_normal((directions, 2 * gates * HIDDEN)).astype(np.float32) * 0.5
    if sequence_lens is not None:
        weights["lens"] = np.asarray(sequence_lens, dtype=np.int32)
    if peepholes:
        weights["P"] = rng.standard_normal((directions, 3 * HIDDEN)).astype(np.float32) * 0.5
    x_shape = [BATCH, SEQ, FEATURES] if layout else [SEQ, BATCH, FEATURES]
    state_shape = [BATCH, directions, HIDDEN] if layout else [directions, BATCH, HIDDEN]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    names = ["X", "W", "R", "B" if bias else "", "lens" if sequence_lens is not None else ""]
    states = ["h0", "c0"] if op == "LSTM" else ["h0"]
    for state in states:
        if initial:
            inputs.append(helper.make_tensor_value_info(state, TensorProto.FLOAT, state_shape))
        names.append(state if initial else "")
    if op == "LSTM":
        names.append("P" if peepholes else "")
    outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    node = helper.make_node(op, names, outputs, hidden_size=HIDDEN, **attrs)
    graph = helper.make_graph([node], "recurrent", inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


def feeds_of(model: Any, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


CONFIGS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("LSTM", {}, {}),
    ("LSTM", {"direction": "bidirectional"}, {}),
    ("LSTM", {"direction": "reverse", "layout": 1}, {"initial": False}),
    ("LSTM", {}, {"bias": False}),
    ("LSTM", {"direction": "bidirectional"}, {"sequence_lens": [5, 2, 0]}),
    ("LSTM", {}, {"peepholes": True}),
    ("LSTM", {"input_forget": 1, "clip": 1.5}, {}),
    ("LSTM", {"activations": ["HardSigmoid", "Tanh", "Softsign"], "activation_alpha": [0.3],
              "activation_beta": [0.4]}, {}),
    ("GRU", {"linear_before_reset": 1}, {}),
    ("GRU", {"linear_before_reset": 1, "direction": "bidirectional", "layout": 1}, {}),
    ("GRU", {"linear_before_reset": 1, "direction": "reverse"}, {"sequence_lens": [3, 5, 1]}),
    ("GRU", {}, {}),
    ("GRU", {"direction": "bidirectional", "clip": 0.5}, {"initial": False}),
    ("RNN", {}, {}),
    ("RNN", {"activations": ["Relu", "Relu"], "direction": "bidirectional"}, {}),
    ("RNN", {"activations": ["Sigmoid"], "direction": "reverse"}, {"sequence_lens": [1, 5, 4]}),
]


def _fused_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    original = rnn_ops._fused

    def spy(kind: str, *args: Any) -> Any:
        calls.append(kind)
        return original(kind, *args)

    monkeypatch.setattr(rnn_ops, "_fused", spy)
    return calls


@pytest.mark.parametrize(("op", "attrs", "options"), CONFIGS, ids=[f"{c[0]}-{i}" for i, c in enumerate(CONFIGS)])
def test_recurrent_ops_match_the_reference(op: str, attrs: dict[str, Any], options: dict[str, Any],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fused_calls(monkeypatch)
    model = recurrent_model(op, attrs, **options)
    feeds = feeds_of(model)
    plan = build_plan(model)
    expected = get_backend("reference").run(plan, feeds)
    backend = get_backend("torch").run(plan, feeds)
    module = to_torch(plan)
    with torch.no_grad():
        result = module(*(torch.from_numpy(feeds[n]) for n in module.input_names))
    for k, name in enumerate(plan.output_names):
        np.testing.assert_allclose(backend[name], expected[name], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(result[k].numpy(), expected[name], rtol=1e-5, atol=1e-6)
    fusable = not options.get("sequence_lens") and not options.get("peepholes") and "clip" not in attrs \
        and "input_forget" not in attrs and (op != "GRU" or attrs.get("linear_before_reset")) \
        and (op != "LSTM" or "activations" not in attrs) and attrs.get("activations") != ["Sigmoid"]
    assert bool(calls) == bool(fusable), calls  # the configurations torch has a fused cell for use it


FUSED: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("LSTM", {"direction": "bidirectional"}, {}),
    ("LSTM", {"direction": "reverse", "layout": 1}, {}),
    ("GRU", {"linear_before_reset": 1, "direction": "bidirectional"}, {}),
    ("RNN", {"activations": ["Relu"], "direction": "reverse"}, {}),
    ("RNN", {"direction": "bidirectional", "layout": 1}, {"bias": False}),
]


def _inputs64(op: str, attrs: dict[str, Any], options: dict[str, Any]) -> tuple[Any, list[torch.Tensor]]:
    model = recurrent_model(op, attrs, **options)
    weights = {t.name: torch.from_numpy(numpy_helper.to_array(t).astype(np.float64)) for t in model.graph.initializer}
    feeds = {k: torch.from_numpy(v.astype(np.float64)) for k, v in feeds_of(model).items()}
    names = [n for n in model.graph.node[0].input]
    values = [feeds.get(n, weights.get(n)) if n else None for n in names]
    return model.graph.node[0], values


def _run(op: str, attrs: dict[str, Any], values: list[Any], fused: bool) -> tuple[torch.Tensor, ...]:
    kwargs = dict(attrs)
    s = rnn_ops._Setup(values[0], values[1], values[2], values[4], values[5:7] if op == "LSTM" else values[5:6],
                       kwargs.get("direction", "forward"), kwargs.get("layout", 0))
    if fused:
        gates, order, kind = {"LSTM": (4, rnn_ops._LSTM_ORDER, "lstm"), "GRU": (3, rnn_ops._GRU_ORDER, "gru"),
                              "RNN": (1, (0,), "rnn_relu" if kwargs.get("activations") == ["Relu"] else "rnn_tanh")}[op]
        y, finals = rnn_ops._fused(kind, s, values[1], values[2], values[3], gates, order)
        return s.arrange(y, list(finals))
    if op == "LSTM":
        return rnn_ops.lstm_steps(s, values[1], values[2], values[3], None, None, None, None, None, 0)
    if op == "GRU":
        return rnn_ops.gru_steps(s, values[1], values[2], values[3], None, None, None, None, 1)
    return rnn_ops.rnn_steps(s, values[1], values[2], values[3], kwargs.get("activations"), None, None, None)


@pytest.mark.parametrize(("op", "attrs", "options"), FUSED, ids=[f"{c[0]}-{i}" for i, c in enumerate(FUSED)])
def test_fused_gradients_equal_the_step_by_step_translation(op: str, attrs: dict[str, Any],
                                                            options: dict[str, Any]) -> None:
    _node, values = _inputs64(op, attrs, options)
    leaves = [v.clone().requires_grad_(True) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
              for v in values]
    grads = {}
    for fused in (True, False):
        outputs = _run(op, attrs, leaves, fused)
        weights = [torch.linspace(-1, 1, o.numel(), dtype=torch.float64).reshape(o.shape) for o in outputs]
        loss = sum((o * w).sum() for o, w in zip(outputs, weights, strict=True))
        tensors = [v for v in leaves if isinstance(v, torch.Tensor) and v.requires_grad]
        grads[fused] = ([o.detach() for o in outputs], torch.autograd.grad(loss, tensors))
    for a, b in zip(grads[True][0], grads[False][0], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    for a, b in zip(grads[True][1], grads[False][1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_fused_path_passes_gradcheck(op: str) -> None:
    attrs = {"direction": "bidirectional", **({"linear_before_reset": 1} if op == "GRU" else {})}
    _node, values = _inputs64(op, attrs, {})
    positions = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]

    def f(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        full = list(values)
        for i, t in zip(positions, tensors, strict=True):
            full[i] = t
        return _run(op, attrs, full, fused=True)

    inputs = tuple(values[i].clone().requires_grad_(True) for i in positions)
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-6, fast_mode=True)
