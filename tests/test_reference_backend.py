"""The reference backend: folding of weight-only steps (same values, same reports, bounded memory), the
generated functions a run without observers executes, and the one error contract of both executors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealtrace import Session
from sealtrace.backends import reference
from sealtrace.backends.reference import ReferenceBackend
from sealtrace.errors import KernelError
from sealtrace.session import RunOptions
from tests.conftest import StepRecorder, make_model


def dequantized_matmul() -> onnx.ModelProto:
    """x @ ((int8 weight -> float) * scale): the pattern of MiniLM's int8 weights."""
    rng = np.random.default_rng(1)
    weight = numpy_helper.from_array(rng.integers(-128, 127, (8, 5), dtype=np.int8), "w_int8")
    scale = numpy_helper.from_array(np.float32(0.02), "scale")
    nodes = [
        helper.make_node("Cast", ["w_int8"], ["w_float"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Mul", ["w_float", "scale"], ["w"], name="dequant"),
        helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul"),
        helper.make_node("Identity", ["w"], ["w_out"], name="expose"),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5]), onnx.ValueInfoProto(name="w_out")],
        [weight, scale],
    )


def test_weight_only_steps_fold_without_changing_a_bit() -> None:
    model = dequantized_matmul()
    x = np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32)
    folded = Session(model, backend=ReferenceBackend())
    unfolded = Session(model, backend=ReferenceBackend(fold=False))
    flags = {name: value.flags.writeable for name, value in folded.plan.initializers.items()}
    program = folded.backend.programs.get(folded.plan)  # type: ignore[attr-defined]
    assert program.folded_count == 3  # cast, dequant, expose; the MatMul reads the feed
    assert [live.step.name for live in program.live] == ["matmul"]
    for _ in range(2):  # the second run reuses the folded values
        got = folded.run(None, {"x": x})
        want = unfolded.run(None, {"x": x})
        for a, b in zip(got, want, strict=True):
            assert a.tobytes() == b.tobytes()
    # A folded graph output is handed back as the caller's own, writable array.
    w_out = got[1]
    assert w_out.flags.writeable and w_out.flags.owndata
    w_out[...] = 0
    assert folded.run(None, {"x": x})[1].tobytes() == want[1].tobytes()
    # The Plan's weights keep their flags: folding never changes an array it does not own.
    assert {name: value.flags.writeable for name, value in folded.plan.initializers.items()} == flags


def test_observers_see_every_step_in_order_with_folded_ones_marked() -> None:
    model = dequantized_matmul()
    x = np.ones((2, 8), np.float32)
    folded, unfolded = StepRecorder(), StepRecorder()
    session = Session(model, backend=ReferenceBackend())
    session.run(None, {"x": x}, RunOptions(observers=[folded]))
    first = [out for event in folded.events for out in event.outputs]
    first_events = list(folded.events)
    session.run(None, {"x": x}, RunOptions(observers=[folded]))
    # A folded step's event is made once and handed out again (it is the same every run).
    assert [a is b for a, b in zip(first_events, folded.events, strict=True)] == [True, True, False, True]
    Session(model, backend=ReferenceBackend(fold=False)).run(None, {"x": x}, RunOptions(observers=[unfolded]))
    assert [e.step.name for e in folded.events] == [e.step.name for e in unfolded.events]
    assert [e.constant for e in folded.events] == [True, True, False, True]
    assert not any(e.constant for e in unfolded.events)
    for a, b in zip(folded.events, unfolded.events, strict=True):
        for x_a, x_b in zip([*a.inputs, *a.outputs], [*b.inputs, *b.outputs], strict=True):
            assert x_a.dtype == x_b.dtype and x_a.tobytes() == x_b.tobytes()
    # Constant steps hand the same read-only arrays to observers on every run.
    again = [out for event in folded.events for out in event.outputs]
    for event, before, after in zip(folded.events, first, again, strict=True):
        if event.constant:
            assert before is after and not after.flags.writeable


def test_random_and_growing_steps_are_not_folded() -> None:
    nodes = [
        # Dropout in training mode draws a new mask each run unless seeded: never folded.
        helper.make_node("Dropout", ["w", "ratio", "training"], ["noise"], name="noise"),
        # A 3-element shape expanded to 4 MiB: reading 24 bytes, folding would pin 4 MiB.
        helper.make_node("ConstantOfShape", ["shape"], ["big"], name="fill"),
        helper.make_node("ReduceSum", ["big"], ["total"], keepdims=0, name="sum"),
        helper.make_node("Add", ["x", "total"], ["y"], name="add"),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1]), onnx.ValueInfoProto(name="noise")],
        [
            numpy_helper.from_array(np.array([1024, 1024, 1], np.int64), "shape"),
            numpy_helper.from_array(np.ones((2, 2), np.float32), "w"),
            numpy_helper.from_array(np.array(0.5, np.float32), "ratio"),
            numpy_helper.from_array(np.array(True), "training"),
        ],
    )
    session = Session(model, backend=ReferenceBackend())
    session.run(None, {"x": np.zeros(1, np.float32)})
    program = session.backend.programs.get(session.plan)  # type: ignore[attr-defined]
    assert [live.step.name for live in program.live] == ["noise", "fill", "sum", "add"]


@pytest.fixture(params=["generated", "loop"])
def executor(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each of the reference's two ways to execute a run without observers: its generated
    functions, and the loop a run with observers executes. Both keep one error contract."""
    if request.param == "loop":
        monkeypatch.setattr(reference, "GENERATED_RUNS", False)
    return str(request.param)


def test_a_failing_weight_only_step_fails_at_run_time_naming_its_step(executor: str) -> None:
    nodes = [
        helper.make_node("Reshape", ["w", "bad_shape"], ["w2"], name="bad_reshape"),
        helper.make_node("Add", ["x", "w2"], ["y"], name="add"),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.ones(6, np.float32), "w"),
            numpy_helper.from_array(np.array([4], np.int64), "bad_shape"),
        ],
    )
    session = Session(model, backend=ReferenceBackend())
    with pytest.raises(KernelError, match="bad_reshape"):
        session.run(None, {"x": np.zeros(3, np.float32)})


def test_subgraph_steps_on_captured_weights_fold() -> None:
    """A branch that slices a weight of the enclosing graph (Silero's LSTM weights inside If)."""
    weight = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "w")
    starts, ends = (numpy_helper.from_array(np.array([v], np.int64), n) for v, n in ((1, "starts"), (3, "ends")))

    def branch(name: str, op: str) -> onnx.GraphProto:
        nodes = [
            helper.make_node("Slice", ["w", "starts", "ends"], [f"{name}_rows"], name=f"{name}_slice"),
            helper.make_node(op, ["x", f"{name}_rows"], [f"{name}_out"], name=f"{name}_combine"),
        ]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, None)])

    nodes = [
        helper.make_node("If", ["flag"], ["y"], then_branch=branch("then", "Add"), else_branch=branch("else", "Mul")),
    ]
    model = make_model(
        nodes,
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [weight, starts, ends],
    )
    x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
    session = Session(model, backend=ReferenceBackend())
    unfolded = Session(model, backend=ReferenceBackend(fold=False))
    for flag in (True, False, True):
        feeds = {"x": x, "flag": np.array(flag)}
        events = StepRecorder()
        got = session.run(None, feeds, RunOptions(observers=[events]))[0]
        assert got.tobytes() == unfolded.run(None, feeds)[0].tobytes()
        # The branch's Slice reads only the enclosing graph's weights: reported as constant.
        assert [(e.step.name, e.constant) for e in events.events if e.path] == [
            (f"{'then' if flag else 'else'}_slice", True),
            (f"{'then' if flag else 'else'}_combine", False),
        ]


@pytest.mark.parametrize("segment_steps", [16, 2, 1])
def test_generated_run_handles_any_value_name_and_names_the_failing_step(
    monkeypatch: pytest.MonkeyPatch, segment_steps: int, executor: str
) -> None:
    # The run without observers is generated functions (segment_steps steps each): value names
    # only ever appear in them as string literals, and an error is traced back to its step by line.
    monkeypatch.setattr(reference, "SEGMENT_STEPS", segment_steps)
    odd = ["x'\"\\", "a\nb", "é ü)", "def", "{0}"]
    nodes = [
        helper.make_node("Relu", ["x"], [odd[0]], name="first"),
        helper.make_node("Neg", [odd[0]], [odd[1]], name="second"),
        helper.make_node("Reshape", [odd[1], "shape"], [odd[2]], name="reshape"),
        helper.make_node("Abs", [odd[2]], [odd[3]], name="last"),
        helper.make_node("Identity", [odd[3]], [odd[4]], name="out"),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info(odd[4], TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([2, -1], np.int64), "shape")],
    )
    session = Session(model, backend=ReferenceBackend())
    x = np.arange(-3, 3, dtype=np.float32)
    (y,) = session.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.abs(-np.maximum(x, 0)).reshape(2, 3))
    with pytest.raises(KernelError, match=r"step 2 'reshape' \(Reshape\)"):
        session.run(None, {"x": np.arange(5, dtype=np.float32)})


def test_a_kernel_failure_names_its_step_and_keeps_its_cause(executor: str) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["y"], name="reshape"),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("shape", TensorProto.INT64, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    session = Session(model, backend=ReferenceBackend())
    with pytest.raises(KernelError, match=r"^step 1 'reshape' \(Reshape\) failed: ") as failure:
        session.run(None, {"x": np.ones(6, np.float32), "shape": np.array([4], np.int64)})
    assert failure.value.__cause__ is not None


def test_a_failing_step_inside_a_subgraph_is_named_with_its_path(executor: str) -> None:
    def branch(flag: bool) -> onnx.GraphProto:
        name = "then" if flag else "else"
        node = helper.make_node("Reshape", ["x", "shape"], [f"{name}_y"], name=f"{name}_reshape")
        outputs = [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)]
        return helper.make_graph([node], name, [], outputs)

    nodes = [helper.make_node("If", ["c"], ["y"], name="choose", then_branch=branch(True), else_branch=branch(False))]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("shape", TensorProto.INT64, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    session = Session(model, backend=ReferenceBackend())
    feeds = {"c": np.array(True), "x": np.ones(6, np.float32), "shape": np.array([2, 3], np.int64)}
    assert session.run(None, feeds)[0].shape == (2, 3)
    with pytest.raises(KernelError, match=r"^step 0 'choose/then_branch/0/then_reshape' \(Reshape\) failed: "):
        session.run(None, {**feeds, "shape": np.array([4], np.int64)})


def test_threads_sharing_a_session_get_the_same_bits() -> None:
    # The generated functions are compiled on a Program's first run without observers, once, whichever
    # thread gets there first; every thread then runs the same code.
    from concurrent.futures import ThreadPoolExecutor

    model = dequantized_matmul()
    session = Session(model, backend=ReferenceBackend())
    inputs = [np.random.default_rng(i).standard_normal((2, 8)).astype(np.float32) for i in range(16)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda x: session.run(None, {"x": x})[0], inputs))
    for x, got in zip(inputs, results, strict=True):
        assert got.tobytes() == Session(model, backend=ReferenceBackend()).run(None, {"x": x})[0].tobytes()


@pytest.mark.parametrize("segment_steps", [16, 2, 1])
def test_generated_locals_keep_what_others_read_in_the_environment(
    monkeypatch: pytest.MonkeyPatch, segment_steps: int
) -> None:
    # Values made and freed within one generated function are its local variables; a value an If
    # branch captures (read through the step's context), a graph output, or one read by a later
    # function stays in the environment. Either way the run gives the step loop's bits.
    monkeypatch.setattr(reference, "SEGMENT_STEPS", segment_steps)
    then_branch = helper.make_graph(
        [helper.make_node("Mul", ["b", "b"], ["then_out"], name="square")],
        "then", [], [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, None)],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["b"], ["else_out"], name="negate")],
        "else", [], [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, None)],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Sin", ["a"], ["b"], name="sin"),
        helper.make_node("If", ["flag"], ["c"], then_branch=then_branch, else_branch=else_branch, name="branch"),
        helper.make_node("Add", ["c", "a"], ["d"], name="add"),
        helper.make_node("Abs", ["d"], ["y"], name="abs"),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("a", TensorProto.FLOAT, None)],
    )
    session = Session(model, backend=ReferenceBackend())
    program = session.backend.programs.get(session.plan)  # type: ignore[attr-defined]
    every = reference._segment_locals(program.live, 0, len(program.live))
    assert set(every) == {"c", "d"}  # not a (a graph output), nor b (the branches capture it)
    x = np.linspace(-2, 2, 7, dtype=np.float32)
    for flag in (True, False):
        feeds = {"x": x, "flag": np.array(flag)}
        generated = session.run(None, feeds)
        looped = session.run(None, feeds, RunOptions(observers=[StepRecorder()]))
        assert [v.tobytes() for v in generated] == [v.tobytes() for v in looped]


def test_a_local_value_that_is_not_an_array_is_stored_as_the_environment_would() -> None:
    step = Session(dequantized_matmul()).plan.steps[2]
    assert reference._single_output(step, np.float32(2)).shape == ()
    assert reference._single_output(step, (np.ones(2),)).tolist() == [1.0, 1.0]
    with pytest.raises(KernelError, match="does not produce it"):
        reference._single_output(step, ())


def test_a_value_captured_two_subgraphs_down_stays_in_the_environment() -> None:
    # w is read inside an If branch inside a Loop body: the Loop step lists it as an implicit input,
    # so the generated function keeps it in the environment where the branch looks it up.
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["w", "acc_in"], ["then_out"])], "then", [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, None)],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Sub", ["acc_in", "w"], ["else_out"])], "else", [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, None)],
    )
    body = helper.make_graph(
        [
            helper.make_node("If", ["cond_in"], ["acc_out"], then_branch=then_branch, else_branch=else_branch),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, None),
        ],
    )
    nodes = [
        helper.make_node("Neg", ["x"], ["w"]),
        helper.make_node("Loop", ["trips", "cond", "x"], ["y"], body=body),
        helper.make_node("Abs", ["y"], ["z"]),
    ]
    model = make_model(
        nodes,
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
            helper.make_tensor_value_info("trips", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
    )
    session = Session(model, backend=ReferenceBackend())
    assert session.plan.steps[1].implicit_inputs == ("w",)
    feeds = {"x": np.float32([1, 2, 3]), "trips": np.array(3), "cond": np.array(True)}
    (z,) = session.run(None, feeds)
    np.testing.assert_array_equal(z, np.float32([2, 4, 6]))  # x + 3 * (-x), in absolute value
