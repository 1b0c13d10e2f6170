"""ai.onnx.preview.training optimizers (Adagrad, Adam, Momentum) beyond ONNX's node cases: several
tensors at once against the spec's formulas, and malformed input lists."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper

import sealtrace
from sealtrace.errors import KernelError

TRAINING = "ai.onnx.preview.training"


def _run(op: str, inputs: dict[str, np.ndarray], n_out: int, **attrs: Any) -> list[np.ndarray]:
    outputs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op, list(inputs), outputs, domain=TRAINING, **attrs)
    graph = helper.make_graph(
        [node], "optimizer",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
    )
    model = helper.make_model(
        graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(TRAINING, 1)]
    )
    return sealtrace.Session(model).run(None, inputs)


def test_adam_updates_two_tensors_of_different_dtypes_as_the_spec_says() -> None:
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(3).astype(np.float32), rng.standard_normal((2, 2))]
    gs, vs, hs = ([rng.standard_normal(x.shape).astype(x.dtype) for x in xs] for _ in range(3))
    hs = [np.abs(h) for h in hs]
    r, t = np.float32(0.05), np.int64(3)
    attrs = {"alpha": 0.8, "beta": 0.95, "epsilon": 1e-6, "norm_coefficient": 0.01, "norm_coefficient_post": 0.1}
    feeds = {"R": np.array(r), "T": np.array(t)}
    for kind, values in (("X", xs), ("G", gs), ("V", vs), ("H", hs)):
        feeds.update({f"{kind}{i}": v for i, v in enumerate(values)})
    got = _run("Adam", feeds, 6, **attrs)
    # Attributes are float32 in the model: the formulas use their float32 values.
    alpha, beta, eps, norm, post = (float(np.float32(attrs[k])) for k in
                                    ("alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"))
    rate = float(r) * np.sqrt(1 - beta**3) / (1 - alpha**3)
    for i, (x, g, v, h) in enumerate(zip(xs, gs, vs, hs, strict=True)):
        reg = norm * x + g
        v_new = alpha * v + (1 - alpha) * reg
        h_new = beta * h + (1 - beta) * reg * reg
        x_new = (1 - post) * (x - rate * v_new / (np.sqrt(h_new) + eps))
        for out, want in ((got[i], x_new), (got[2 + i], v_new), (got[4 + i], h_new)):
            assert out.dtype == x.dtype
            np.testing.assert_allclose(out, want, rtol=2e-6 if x.dtype == np.float32 else 1e-12)


@pytest.mark.parametrize(("op", "inputs", "attrs"), [
    ("Adagrad", 4, {}),
    ("Momentum", 2, {"alpha": 0.9, "beta": 0.1, "mode": "standard", "norm_coefficient": 0.0}),
    ("Momentum", 3, {"alpha": 0.9, "beta": 0.1, "mode": "sideways", "norm_coefficient": 0.0}),
])
def test_malformed_optimizer_steps_fail_naming_the_problem(op: str, inputs: int, attrs: dict[str, Any]) -> None:
    feeds = {"R": np.array(np.float32(0.1)), "T": np.array(np.int64(0))}
    feeds.update({f"v{i}": np.ones(2, np.float32) for i in range(inputs)})
    with pytest.raises(KernelError, match=r"per optimized tensor|mode must be"):
        _run(op, feeds, 2, **attrs)
