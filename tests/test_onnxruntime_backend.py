"""The ONNX Runtime backend's per-op mode: segments give the values of the one-piece per-op session."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealtrace import build_plan, zoo
from sealtrace.backends.onnxruntime import SEGMENT_STEPS, OnnxRuntimeBackend
from sealtrace.plan import Plan
from tests.conftest import StepRecorder, make_model, require_material


def long_model() -> onnx.ModelProto:
    """More steps than a few segments, with values crossing cuts: a Constant read by a MatMul
    three segments later (ORT treats a Constant as a weight), a value read by an If branch from
    the enclosing graph, and an initializer read in several segments."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    c = numpy_helper.from_array(np.float32([1.0001]), "c")
    nodes = [
        helper.make_node("Constant", [], ["k"], name="k",
                         value=numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32))),
        helper.make_node("MatMul", ["x", "w"], ["h0"], name="m0"),
    ]
    prev = "h0"
    for i in range(1, 3 * SEGMENT_STEPS):
        nodes.append(helper.make_node("Mul" if i % 2 else "Add", [prev, "c"], [f"h{i}"], name=f"s{i}"))
        prev = f"h{i}"
    nodes.append(helper.make_node("MatMul", [prev, "k"], ["mk"], name="mk"))
    nodes.append(helper.make_node("ReduceSum", ["mk"], ["total"], name="total", keepdims=0))
    nodes.append(helper.make_node("Greater", ["total", "zero"], ["positive"], name="positive"))
    nodes.append(helper.make_node("Constant", [], ["zero"], name="zero", value=numpy_helper.from_array(np.float32(0))))
    nodes.insert(-2, nodes.pop())  # the Constant "zero" before Greater
    then_graph = helper.make_graph([helper.make_node("Add", ["mk", "h1"], ["t"])], "then", [],
                                   [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    else_graph = helper.make_graph([helper.make_node("Sub", ["mk", "h1"], ["e"])], "else", [],
                                   [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    nodes.append(helper.make_node("If", ["positive"], ["y"], name="branch", then_branch=then_graph,
                                  else_branch=else_graph))
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [w, c],
    )


def per_op_values(plan: Plan, feeds: Mapping[str, Any]) -> dict[str, Any]:
    backend = OnnxRuntimeBackend(per_op=True)
    session = backend.session_for(plan, per_op=True)
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(feeds)), strict=True))


def assert_segments_match_one_piece(plan: Plan, feeds: Mapping[str, Any]) -> None:
    expected = per_op_values(plan, feeds)
    backend = OnnxRuntimeBackend(per_op=True)
    for _ in range(2):  # sessions are built on the first run and reused on the second
        recorder = StepRecorder()
        outputs = backend.run(plan, feeds, [recorder])
        assert [e.step.index for e in recorder.events] == [s.index for s in plan.steps]
        for event in recorder.events:
            for name, value in zip(event.step.outputs, event.outputs, strict=True):
                if name:
                    assert value.dtype == expected[name].dtype and value.shape == expected[name].shape, name
                    assert value.tobytes() == expected[name].tobytes(), f"{event.step.name}: {name} differs"
        for name in plan.output_names:
            assert outputs[name].tobytes() == expected[name].tobytes()
    segments = backend._segments[id(plan)][1]
    assert len(segments) > 1 and segments[0].start == 0 and segments[-1].stop == len(plan.steps)
    for segment, after in itertools.pairwise(segments):
        assert segment.stop == after.start
    for segment in segments:
        counted = [s for s in plan.steps[segment.start : segment.stop] if s.op_type != "Constant"]
        assert 0 < len(counted) <= SEGMENT_STEPS


def test_segments_give_the_one_piece_values() -> None:
    plan = build_plan(long_model())
    assert len(plan.steps) > 3 * SEGMENT_STEPS
    feeds = {"x": np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)}
    assert_segments_match_one_piece(plan, feeds)


@pytest.mark.slow
def test_segments_give_the_one_piece_values_on_a_real_model() -> None:
    # ppocr-cls ends in a MatMul whose weight is a Constant node several segments earlier.
    real = zoo.model("ppocr-cls")
    plan = build_plan(require_material(lambda: real.path))
    assert_segments_match_one_piece(plan, real.inputs())


def test_optimized_mode_reports_no_steps() -> None:
    plan = build_plan(long_model())
    feeds = {"x": np.ones((4, 8), np.float32)}
    recorder = StepRecorder()
    backend = OnnxRuntimeBackend(per_op=False)
    out = backend.run(plan, feeds, [recorder])
    assert recorder.events == [] and out["y"].shape == (4, 8) and not backend.per_step


@pytest.mark.parametrize("types", ["missing", "wrong"])
def test_segment_inputs_typed_from_values_when_inference_fails(monkeypatch: pytest.MonkeyPatch, types: str) -> None:
    # Segment sessions are built before the first run from shape inference's element types; where
    # those are missing the session is built at run time from the values, and where one is wrong
    # (ORT rejects the feed) the session is rebuilt from the values once.
    import sealtrace.backends.onnxruntime as backend_module

    real_static_types = backend_module._static_types

    def static_types(plan: Plan, feeds: Mapping[str, Any]) -> dict[str, onnx.TypeProto]:
        found = real_static_types(plan, feeds)
        if types == "missing":
            return {name: t for name, t in found.items() if name in feeds}
        wrong = helper.make_tensor_type_proto(TensorProto.DOUBLE, None)
        return {name: (t if name in feeds else wrong) for name, t in found.items()}

    monkeypatch.setattr(backend_module, "_static_types", static_types)
    feeds = {"x": np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)}
    assert_segments_match_one_piece(build_plan(long_model()), feeds)
    # Here the wrong types load (Identity and Add take doubles as well), so only the run rejects them.
    nodes = [helper.make_node("Relu", ["x"], ["i0"]), helper.make_node("Neg", ["x"], ["n"])]
    nodes += [helper.make_node("Identity", [f"i{i}"], [f"i{i + 1}"]) for i in range(SEGMENT_STEPS)]
    nodes.append(helper.make_node("Add", [f"i{SEGMENT_STEPS}", "n"], ["y"]))
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    assert_segments_match_one_piece(build_plan(model), feeds)


def test_stream_without_inputs_gives_the_same_outputs() -> None:
    # The parity holder reads only outputs: stream(inputs=False) leaves the inputs out, nothing else.
    plan = build_plan(long_model())
    feeds = {"x": np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)}
    backend = OnnxRuntimeBackend(per_op=True)
    full = backend.stream(plan, feeds)
    full_events = [(e.step.index, [None if v is None else v.tobytes() for v in e.outputs], len(e.inputs)) for e in full]
    lean = backend.stream(plan, feeds, inputs=False)
    lean_events = [(e.step.index, [None if v is None else v.tobytes() for v in e.outputs], len(e.inputs)) for e in lean]
    assert [e[:2] for e in lean_events] == [e[:2] for e in full_events]
    assert all(count == 0 for *_, count in lean_events) and any(count > 0 for *_, count in full_events)
    assert {k: v.tobytes() for k, v in lean.outputs.items()} == {k: v.tobytes() for k, v in full.outputs.items()}


def test_segment_sessions_read_the_plans_weight_arrays() -> None:
    # No copy of the weights per session: they are the Plan's arrays (the values are still those
    # of the one-piece session: test_segments_give_the_one_piece_values).
    plan = build_plan(long_model())
    feeds = {"x": np.ones((4, 8), np.float32)}
    backend = OnnxRuntimeBackend(per_op=True)
    sum(1 for _ in backend.stream(plan, feeds))
    segments = backend._segments[id(plan)][1]
    shared = {name: value for s in segments for name, value in (s.shared or {}).items()}
    # "k": the Constant read three segments later, an initializer over the Plan's array of its value.
    assert set(shared) == {"w", "c", "k"}
    arrays = {**plan.initializers, "k": next(s for s in plan.steps if s.name == "k").attributes["value"]}
    for name, value in shared.items():
        assert value.data_ptr() == arrays[name].ctypes.data
