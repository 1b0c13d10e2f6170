"""Plan building: every problem found before any op runs, and a stable digest."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealtrace import Session, build_plan
from sealtrace.errors import InputError, InvalidModelError, PlanError, UnsupportedError
from tests.conftest import make_model

X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])


def test_plan_is_topological_with_resolved_kernels(tiny_mlp: onnx.ModelProto) -> None:
    # Shuffle the node order: the Plan must still come out in dependency order.
    nodes = list(tiny_mlp.graph.node)
    del tiny_mlp.graph.node[:]
    tiny_mlp.graph.node.extend(reversed(nodes))
    plan = build_plan(tiny_mlp)
    assert [s.op_type for s in plan.steps] == ["MatMul", "Add", "Relu"]
    assert [s.index for s in plan.steps] == [0, 1, 2]
    assert plan.steps[0].since_version == 13
    assert plan.input_names == ["x"] and plan.output_names == ["y"]
    assert plan.steps[2].output_info[0] is not None
    assert plan.steps[2].output_info[0].shape == (1, 3)


def test_all_unsupported_ops_listed_in_one_error() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok"),
        helper.make_node("NoSuchOp", ["a"], ["b"], name="first_bad"),
        helper.make_node("AlsoMissing", ["b"], ["y"], name="second_bad"),
    ]
    with pytest.raises(UnsupportedError) as info:
        build_plan(make_model(nodes, [X], [Y]))
    assert len(info.value.problems) == 2
    assert "first_bad" in str(info.value) and "second_bad" in str(info.value)


def test_unknown_domain_is_reported() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.example")]
    with pytest.raises(UnsupportedError, match=r"com\.example"):
        build_plan(make_model(nodes, [X], [Y]))


def test_dangling_input_is_reported() -> None:
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")]
    with pytest.raises(PlanError, match="ghost"):
        build_plan(make_model(nodes, [X], [Y]))


def test_cycle_is_reported() -> None:
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="one"),
        helper.make_node("Relu", ["a"], ["b"], name="two"),
        helper.make_node("Relu", ["a"], ["y"], name="three"),
    ]
    with pytest.raises(PlanError, match="cycle"):
        build_plan(make_model(nodes, [X], [Y]))


def test_value_produced_twice_is_reported() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Relu", ["x"], ["y"], name="b")]
    with pytest.raises(PlanError, match="produced by both"):
        build_plan(make_model(nodes, [X], [Y]))


def test_unknown_attribute_is_reported() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r", bogus=1)]
    with pytest.raises(PlanError, match="bogus"):
        build_plan(make_model(nodes, [X], [Y]))


def test_ir3_initializers_listed_as_inputs_are_weights_not_feeds() -> None:
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    nodes = [helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    model = make_model(nodes, [X, helper.make_tensor_value_info("w", TensorProto.FLOAT, [2, 3])], [Y], [w])
    model.ir_version = 3
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", 8))
    session = Session(model)
    assert [i.name for i in session.get_inputs()] == ["x"]
    (y,) = session.run(None, {"x": np.zeros((2, 3), np.float32)})
    assert np.array_equal(y, np.ones((2, 3), np.float32))
    with pytest.raises(InputError, match="weight"):
        session.run(None, {"x": np.zeros((2, 3), np.float32), "w": np.zeros((2, 3), np.float32)})


def test_feeds_are_checked_before_running(tiny_mlp: onnx.ModelProto) -> None:
    session = Session(tiny_mlp)
    good = np.zeros((1, 4), np.float32)
    with pytest.raises(InputError, match="missing input 'x'"):
        session.run(None, {})
    with pytest.raises(InputError, match="unknown input 'z'"):
        session.run(None, {"x": good, "z": good})
    with pytest.raises(InputError, match="dtype float64"):
        session.run(None, {"x": good.astype(np.float64)})
    with pytest.raises(InputError, match="axis 1 is 5"):
        session.run(None, {"x": np.zeros((1, 5), np.float32)})
    with pytest.raises(InputError, match="rank 1"):
        session.run(None, {"x": np.zeros(4, np.float32)})
    with pytest.raises(InputError, match="unknown output"):
        session.run(["nope"], {"x": good})


def test_session_mirrors_onnxruntime_api(tiny_mlp: onnx.ModelProto) -> None:
    import onnxruntime as ort

    ours = Session(tiny_mlp)
    theirs = ort.InferenceSession(tiny_mlp.SerializeToString(), providers=["CPUExecutionProvider"])
    for a, b in zip(ours.get_inputs() + ours.get_outputs(), theirs.get_inputs() + theirs.get_outputs(), strict=True):
        assert (a.name, a.type, list(a.shape or ())) == (b.name, b.type, list(b.shape))
    x = np.random.default_rng(1).standard_normal((1, 4)).astype(np.float32)
    np.testing.assert_allclose(ours.run(["y"], {"x": x})[0], theirs.run(["y"], {"x": x})[0], rtol=1e-6)


def test_digest_is_stable_and_commits_to_weights(tiny_mlp: onnx.ModelProto) -> None:
    first = build_plan(tiny_mlp).digest
    assert first == build_plan(tiny_mlp.SerializeToString()).digest
    assert len(first) == 64
    changed = onnx.ModelProto()
    changed.CopyFrom(tiny_mlp)
    w = numpy_helper.to_array(changed.graph.initializer[0]).copy()
    w[0, 0] += 1.0
    changed.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    assert build_plan(changed).digest != first
    renamed = onnx.ModelProto()
    renamed.CopyFrom(tiny_mlp)
    renamed.graph.node[2].name = "other"
    assert build_plan(renamed).digest != first


def test_not_onnx_and_truncated_files(tmp_path, tiny_mlp: onnx.ModelProto) -> None:  # type: ignore[no-untyped-def]
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a model")
    with pytest.raises(InvalidModelError):
        build_plan(junk)
    data = tiny_mlp.SerializeToString()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidModelError):
        build_plan(cut)
    with pytest.raises(InvalidModelError, match="no such file"):
        build_plan(tmp_path / "missing.onnx")


def test_outputs_never_alias_inputs_or_weights() -> None:
    nodes = [helper.make_node("Identity", ["x"], ["y"], name="same")]
    model = make_model(nodes, [X], [Y])
    x = np.ones((2, 3), np.float32)
    (y,) = Session(model).run(None, {"x": x})
    y[0, 0] = 5.0
    assert x[0, 0] == 1.0 and y.flags.writeable


def test_plan_weights_are_read_only_however_stored() -> None:
    """raw_data, float_data lists and sparse initializers alike: no kernel or caller edits a weight."""
    dense_list = helper.make_tensor("listed", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])  # float_data
    dense_raw = numpy_helper.from_array(np.ones(3, np.float32), "raw")  # raw_data
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([5.0], np.float32), "sparse"),
        numpy_helper.from_array(np.array([1], np.int64), "sparse_indices"),
        [3],
    )
    nodes = [
        helper.make_node("Add", ["x", "listed"], ["a"]),
        helper.make_node("Add", ["a", "raw"], ["b"]),
        helper.make_node("Add", ["b", "sparse"], ["y"]),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [dense_list, dense_raw],
    )
    model.graph.sparse_initializer.append(sparse)
    plan = build_plan(model)
    assert set(plan.initializers) == {"listed", "raw", "sparse"}
    for name, value in plan.initializers.items():
        assert not value.flags.writeable, name
        with pytest.raises(ValueError):
            value[0] = 0
    y = Session(plan).run(None, {"x": np.zeros(3, np.float32)})[0]
    assert y.tolist() == [2.0, 8.0, 4.0]


def test_schema_defaults_and_unknown_attributes_per_node_of_one_op_type() -> None:
    # The builder looks a schema and its defaults up once per op type: every node still gets its
    # own attributes over the defaults, and an attribute the schema lacks is refused on any node.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [
        helper.make_node("LeakyRelu", ["x"], ["a"], name="first"),
        helper.make_node("LeakyRelu", ["a"], ["y"], name="second", alpha=0.5),
    ]
    plan = build_plan(make_model(nodes, [x], [y]))
    assert [s.attributes["alpha"] for s in plan.steps] == [pytest.approx(0.01), 0.5]
    nodes.append(helper.make_node("LeakyRelu", ["y"], ["z"], name="third", beta=1.0))
    with pytest.raises(PlanError, match="node 'third' \\(LeakyRelu\\) has unknown attribute 'beta'"):
        build_plan(make_model(nodes, [x], [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])]))
