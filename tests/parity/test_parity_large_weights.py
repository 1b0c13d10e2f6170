"""Parity on models of large weights: ONNX Runtime's per-op segment sessions built as the run reaches
them and dropped after them (their prepacked weight copies with them), with the values, verdicts and
worst step of sessions kept from run to run."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import sealtrace.backends.onnxruntime as ort_backend
from sealtrace import build_plan
from sealtrace.backends.onnxruntime import SEGMENT_STEPS, OnnxRuntimeBackend
from sealtrace.backends.reference import ReferenceBackend
from sealtrace.parity import check_parity
from sealtrace.plan import Plan
from tests.conftest import make_model

WIDTH = 160  # 160 x 160 float32 = 100 KiB per weight: over the size declared without bytes


def dense_stack(layers: int = 3 * SEGMENT_STEPS // 4) -> onnx.ModelProto:
    """MatMul + Add + Reshape + Tanh layers: several segments, a MatMul weight (prepacked by ORT) in
    each, and a Reshape whose shape ORT's shape inference reads from its initializer."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(np.array([4, WIDTH], np.int64), "shape")]
    nodes = []
    prev = "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) * 0.1, f"w{i}"))
        inits.append(numpy_helper.from_array(rng.standard_normal(WIDTH).astype(np.float32) * 0.1, f"b{i}"))
        nodes += [
            helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"matmul{i}"),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
            helper.make_node("Reshape", [f"a{i}", "shape"], [f"r{i}"], name=f"reshape{i}"),
            helper.make_node("Tanh", [f"r{i}"], [f"t{i}"], name=f"tanh{i}"),
        ]
        prev = f"t{i}"
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, WIDTH])],
                      [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [4, WIDTH])], inits)


def feeds_for() -> dict[str, Any]:
    return {"x": np.random.default_rng(4).standard_normal((4, WIDTH)).astype(np.float32)}


def stream_values(backend: OnnxRuntimeBackend, plan: Plan, feeds: dict[str, Any]) -> tuple[dict[str, bytes], int]:
    """Every value of a per-op run (bytes), and the most segment sessions alive as a step is handed on."""
    values: dict[str, bytes] = {}
    most = 0
    for event in backend.stream(plan, feeds, inputs=False):
        segments = backend._segments[id(plan)].segments
        most = max(most, sum(s.session is not None for s in segments))
        for name, value in zip(event.step.outputs, event.outputs, strict=True):
            values[name] = value.tobytes()
    return values, most


def test_dropped_sessions_give_the_kept_sessions_values() -> None:
    plan = build_plan(dense_stack())
    feeds = feeds_for()
    kept = OnnxRuntimeBackend(per_op=True, keep_sessions=True)
    dropped = OnnxRuntimeBackend(per_op=True, keep_sessions=False)
    expected, alive_kept = stream_values(kept, plan, feeds)
    segments = kept._segments[id(plan)].segments
    assert len(segments) > 2 and alive_kept == len(segments)
    built: list[int] = []
    make = dropped._session

    def counted(*args: Any, **kwargs: Any) -> Any:
        # When a segment's session is built, no other segment's is alive.
        built.append(sum(s.session is not None for s in dropped._segments[id(plan)].segments))
        return make(*args, **kwargs)

    dropped._session = counted  # type: ignore[method-assign]
    for run in range(1, 3):  # built again on the second run
        values, alive = stream_values(dropped, plan, feeds)
        assert values == expected
        assert alive == 0  # dropped once its segment has run, before its steps are handed on
        assert len(built) == run * len(segments) and set(built) == {0}
        assert all(s.session is None and s.shared is None for s in dropped._segments[id(plan)].segments)


def test_large_weights_choose_dropped_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = build_plan(dense_stack())
    feeds = feeds_for()
    weights = sum(w.nbytes for w in plan.initializers.values())
    backend = OnnxRuntimeBackend(per_op=True)
    stream_values(backend, plan, feeds)
    assert weights < ort_backend.LARGE_WEIGHTS and backend._segments[id(plan)].keep_sessions
    monkeypatch.setattr(ort_backend, "LARGE_WEIGHTS", weights)
    backend = OnnxRuntimeBackend(per_op=True)
    _, alive = stream_values(backend, plan, feeds)
    assert not backend._segments[id(plan)].keep_sessions and alive == 0


def test_dropped_sessions_declare_large_weights_without_bytes() -> None:
    plan = build_plan(dense_stack())
    segment = ort_backend._cut(plan, SEGMENT_STEPS)[0]
    types = ort_backend._static_types(plan, feeds_for())
    large = {name for name in segment.weights if plan.initializers[name].nbytes >= ort_backend._STUB_BYTES}
    assert large and all(name.startswith("w") for name in large)
    model = ort_backend._segment_model(plan, segment, types, large)
    declared = {t.name: t for t in model.graph.initializer}
    assert set(declared) == set(segment.weights)
    for name, tensor in declared.items():
        if name in large:
            assert tensor.data_location == TensorProto.EXTERNAL and not tensor.raw_data
            assert list(tensor.dims) == list(plan.initializers[name].shape)
        else:
            assert tensor.data_location == TensorProto.DEFAULT


def test_weights_ort_must_read_keep_their_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    # Declared without bytes, the Reshape's shape cannot be read by ORT's shape inference: the
    # segment falls back to the model with the weights' bytes, and the values are the same.
    plan = build_plan(dense_stack())
    feeds = feeds_for()
    expected, _ = stream_values(OnnxRuntimeBackend(per_op=True, keep_sessions=True), plan, feeds)
    monkeypatch.setattr(ort_backend, "_STUB_BYTES", 0)
    values, _ = stream_values(OnnxRuntimeBackend(per_op=True, keep_sessions=False), plan, feeds)
    assert values == expected


def test_parity_report_is_the_same_with_dropped_sessions() -> None:
    plan = build_plan(dense_stack())
    feeds = feeds_for()
    reports = []
    for keep in (True, False):
        report = check_parity(plan, feeds, [ReferenceBackend(), OnnxRuntimeBackend(per_op=True, keep_sessions=keep)])
        data = report.to_json()
        data.pop("backend_settings")
        reports.append((json.dumps(data, sort_keys=True), report))
    assert reports[0][0] == reports[1][0]
    kept, dropped = reports[0][1], reports[1][1]
    assert len(kept.steps) == len(plan.steps) and all(s.status != "not-compared" for s in dropped.steps)
    worst = [max(r.steps, key=lambda s: s.worst.max_abs if s.worst else -1.0).name for r in (kept, dropped)]
    assert worst[0] == worst[1]


def test_sessions_keep_no_serialized_model() -> None:
    # onnxruntime's wrapper would keep every session's serialized model (a second copy of its
    # embedded weights and repeated Constants) for the session's life; the backend lets it go, and
    # the sessions still run (optimized and per-op).
    plan = build_plan(dense_stack())
    feeds = feeds_for()
    backend = OnnxRuntimeBackend(per_op=True, keep_sessions=True)
    values, _ = stream_values(backend, plan, feeds)
    segments = backend._segments[id(plan)].segments
    assert all(getattr(s.session, "_model_bytes", None) is None for s in segments)
    optimized = OnnxRuntimeBackend(per_op=False)
    outputs = optimized.run(plan, feeds)
    assert getattr(optimized.session_for(plan), "_model_bytes", None) is None
    last = plan.output_names[0]
    np.testing.assert_allclose(outputs[last], np.frombuffer(values[last], np.float32).reshape(4, WIDTH), rtol=1e-5,
                               atol=1e-6)
