"""to_torch on small graphs: Split in all its forms against onnxruntime, control flow, errors,
the input model left untouched, dtype conversion, parameters."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from sealtrace.backends import get_backend  # noqa: E402
from sealtrace.errors import UnsupportedError  # noqa: E402
from sealtrace.plan import build_plan  # noqa: E402
from sealtrace.torchbridge import IfModule, to_torch  # noqa: E402
from tests.conftest import make_model  # noqa: E402


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def torch_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    module = to_torch(model)
    with torch.no_grad():
        result = module(*(torch.from_numpy(feeds[n]) for n in module.input_names))
    return [r.numpy() for r in (result if isinstance(result, tuple) else (result,))]


def backend_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    plan = build_plan(model)
    out = get_backend("torch").run(plan, feeds)
    return [out[n] for n in plan.output_names]


def float_info(name: str, shape: list[int | str | None] | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def split_case(form: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Split of x[2, 7] along axis 1 in one of its forms; output 'a' is also a graph output
    while another node reads it."""
    x = np.arange(14, dtype=np.float32).reshape(2, 7) - 5
    inits: list[onnx.TensorProto] = []
    if form == "attribute":  # Split-11: sizes as an attribute, uneven
        opset, node = 11, helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, split=[2, 4, 1])
    elif form == "input":  # Split-13: sizes as an input
        opset = 13
        inits.append(numpy_helper.from_array(np.array([3, 1, 3], dtype=np.int64), "sizes"))
        node = helper.make_node("Split", ["x", "sizes"], ["a", "b", "c"], axis=1)
    elif form == "num_outputs":  # Split-18: ceil(7/3) = 3, 3, 1
        opset, node = 18, helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)
    elif form == "equal":  # Split-13 without sizes: equal parts of an even axis (axis 0)
        opset, node = 13, helper.make_node("Split", ["x"], ["a", "b"], axis=0)
    elif form == "negative_axis":
        opset, node = 18, helper.make_node("Split", ["x"], ["a", "b", "c"], axis=-1, num_outputs=3)
    else:
        raise AssertionError(form)
    extra = [helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Neg", ["b"], ["n"])]
    outputs = [float_info("a"), float_info("r"), float_info("n"), float_info("b")]
    if len(node.output) == 3:
        outputs.append(float_info("c"))
    model = make_model([node, *extra], [float_info("x", [2, 7])], outputs, inits, opset=opset)
    return model, {"x": x}


@pytest.mark.parametrize("form", ["attribute", "input", "num_outputs", "equal", "negative_axis"])
def test_split_forms_match_onnxruntime(form: str) -> None:
    model, feeds = split_case(form)
    expected = ort_run(model, feeds)
    for run in (torch_run, backend_run):
        got = run(model, feeds)
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_array_equal(g, e)


def test_split_output_that_is_a_graph_output_is_not_lost_in_a_real_graph() -> None:
    # The Split output 'a' leaves the graph and feeds Relu; both must be right, and distinct.
    model, feeds = split_case("num_outputs")
    a, r, *_ = torch_run(model, feeds)
    np.testing.assert_array_equal(a, feeds["x"][:, :3])
    np.testing.assert_array_equal(r, np.maximum(feeds["x"][:, :3], 0))


def test_input_model_is_not_modified() -> None:
    model, _ = split_case("input")
    before = model.SerializeToString()
    to_torch(model)
    build_plan(model)
    assert model.SerializeToString() == before


def test_input_model_file_is_not_modified(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model, _ = split_case("attribute")
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    before = path.read_bytes()
    to_torch(path)
    assert path.read_bytes() == before


def test_all_unsupported_ops_are_listed_in_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ops the reference interpreter runs but torch has no translation for, one inside an If branch.
    # Every op the reference runs is translated now: two translations are taken away for the test.
    from sealtrace.torchops import registry

    for key in [k for k in registry._TRANSLATIONS if k[1] in ("MaxRoiPool", "NonMaxSuppression")]:
        monkeypatch.delitem(registry._TRANSLATIONS, key)
    branch = helper.make_graph(
        [helper.make_node("MaxRoiPool", ["img", "rois"], ["u"], name="roipool_in_branch", pooled_shape=[1, 1])],
        "then", [], [float_info("u")],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="fine"),
        helper.make_node("NonZero", ["y"], ["nz"], name="fine_too"),
        helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["selected"], name="nms"),
        helper.make_node("If", ["c"], ["z"], name="branching", then_branch=branch, else_branch=branch),
    ]
    model = make_model(
        nodes,
        [float_info("x", [4]), float_info("boxes", [1, 3, 4]), float_info("scores", [1, 1, 3]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []), float_info("img", [1, 1, 4, 4]),
         float_info("rois", [1, 5])],
        [float_info("z"), helper.make_tensor_value_info("selected", TensorProto.INT64, None),
         helper.make_tensor_value_info("nz", TensorProto.INT64, None)],
    )
    build_plan(model)  # the reference runs it
    with pytest.raises(UnsupportedError) as info:
        to_torch(model)
    problems = info.value.problems
    assert len(problems) == 3  # both branches hold an unsupported node
    assert any("'nms' (NonMaxSuppression-11)" in p for p in problems)
    assert any("branching/then_branch/roipool_in_branch" in p for p in problems)
    with pytest.raises(UnsupportedError):
        get_backend("torch").run(build_plan(model), {})


def if_model(cond_is_constant: bool) -> onnx.ModelProto:
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t"])], "then", [], [float_info("t")],
                               [numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [float_info("e")])
    nodes = []
    inputs = [float_info("x", [3])]
    if cond_is_constant:
        nodes.append(helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(True))))
    else:
        inputs.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    nodes.append(helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g))
    return make_model(nodes, inputs, [float_info("y")])


def test_if_with_a_constant_condition_is_inlined() -> None:
    module = to_torch(if_model(True))
    assert not any(isinstance(m, IfModule) for m in module.modules())
    x = torch.tensor([1.0, -2.0, 3.0])
    torch.testing.assert_close(module(x), x * 2)


def test_if_with_a_runtime_condition_picks_its_branch_at_run_time() -> None:
    model = if_model(False)
    module = to_torch(model)
    assert any(isinstance(m, IfModule) for m in module.modules())
    x = np.array([1.0, -2.0, 3.0], dtype=np.float32)
    for cond in (True, False):
        feeds = {"x": x, "c": np.array(cond)}
        (expected,) = ort_run(model, feeds)
        np.testing.assert_array_equal(module(torch.from_numpy(x), torch.tensor(cond)).detach().numpy(), expected)
        np.testing.assert_array_equal(backend_run(model, feeds)[0], expected)
    # Pinning the condition inlines the branch.
    pinned = to_torch(model, fixed_inputs={"c": np.array(False)})
    assert pinned.input_names == ["x"]
    torch.testing.assert_close(pinned(torch.from_numpy(x)), -torch.from_numpy(x))


def test_loop_with_a_constant_trip_count() -> None:
    # y = x * 2**3 by a Loop of 3 iterations that doubles its carried value and scans it.
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", "v_in"], ["v_out"]),
         helper.make_node("Identity", ["v_out"], ["scan"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), float_info("v_in", [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), float_info("v_out", [2]),
         float_info("scan", [2])],
    )
    nodes = [
        helper.make_node("Constant", [], ["m"], value=numpy_helper.from_array(np.array(3, dtype=np.int64))),
        helper.make_node("Loop", ["m", "", "x"], ["y", "scans"], body=body),
    ]
    model = make_model(nodes, [float_info("x", [2])], [float_info("y"), float_info("scans")])
    x = np.array([1.0, -0.5], dtype=np.float32)
    expected = ort_run(model, {"x": x})
    module = to_torch(model)
    got = module(torch.from_numpy(x))
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g.detach().numpy(), e)
    for g, e in zip(backend_run(model, {"x": x}), expected, strict=True):
        np.testing.assert_array_equal(g, e)
    exported = torch.export.export(module, (torch.from_numpy(x),))
    torch.testing.assert_close(exported.module()(torch.from_numpy(x))[0], got[0])


def test_parameters_can_be_frozen_and_trained(tiny_mlp: onnx.ModelProto) -> None:
    module = to_torch(tiny_mlp)
    params = dict(module.named_parameters())
    assert set(module.onnx_names[k] for k in params) == {"w", "b"}
    x = torch.ones(1, 4)
    module(x).sum().backward()
    assert all(p.grad is not None for p in params.values())
    for p in params.values():
        p.requires_grad_(False)
    assert not module(x).requires_grad


def test_float64_conversion(tiny_mlp: onnx.ModelProto) -> None:
    module = to_torch(tiny_mlp, dtype=torch.float64)
    assert all(p.dtype == torch.float64 for p in module.parameters())
    y64 = module(torch.ones(1, 4, dtype=torch.float64))
    y32 = to_torch(tiny_mlp)(torch.ones(1, 4))
    assert y64.dtype == torch.float64
    torch.testing.assert_close(y64.float(), y32)


def test_shape_ops_fold_and_still_follow_a_dynamic_batch() -> None:
    # Reshape(x, Concat(Shape(x)[0:1], [-1])) on a dynamic batch: works for any batch size.
    inits = [numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
             numpy_helper.from_array(np.array([1], dtype=np.int64), "one"),
             numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus_one")]
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "one"], ["batch"]),
        helper.make_node("Concat", ["batch", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    model = make_model(nodes, [float_info("x", ["n", 2, 3])], [float_info("y")], inits)
    module = to_torch(model)
    for n in (1, 4):
        x = torch.randn(n, 2, 3)
        assert module(x).shape == (n, 6)
    torch.export.export(module, (torch.randn(2, 2, 3),))


@pytest.mark.parametrize("value", [[3.0], 3.0], ids=["one-element", "0-d"])
def test_a_random_step_on_constants_is_never_folded(value: list[float] | float) -> None:
    # Dropout in training mode on a Constant: every input is known at conversion (such constants
    # fold), but the step is in ops.registry.NONDETERMINISTIC_OPS, so the module runs it (as the
    # reference backend does) instead of keeping one draw as a constant.
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "ratio"),
             numpy_helper.from_array(np.array(True), "training")]
    nodes = [helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(np.array(value, np.float32))),
             helper.make_node("Dropout", ["w", "ratio", "training"], ["noise"], name="noise"),
             helper.make_node("Add", ["x", "noise"], ["y"], name="add")]
    model = make_model(nodes, [float_info("x", [1])], [float_info("y")], inits)
    module = to_torch(model)
    assert "noise" in [n.meta.get("onnx_node") for n in module.graph.nodes if n.op == "call_function"]
    x = np.zeros(1, np.float32)
    expected = get_backend("reference").run(build_plan(model), {"x": x})["y"]
    np.testing.assert_array_equal(module(torch.from_numpy(x)).detach().numpy(), expected)
