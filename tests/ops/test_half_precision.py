"""Every kernel whose ONNX schema allows float16 or bfloat16, run on such inputs (issue 28 item 2).

The reference MaxPool failed on bfloat16 (``np.iinfo`` of ml_dtypes' type) and GridSample truncated
bfloat16 results like integers; ONNX's conformance suite has few half-precision cases, so neither
was seen. Here each registered operator whose newest schema (the newest that is not deprecated and
has a kernel) admits tensor(float16) or tensor(bfloat16) is run in that type: on the operator's
conformance cases with their float32 inputs rounded to the half type, or on a small hand-built
model where the suite has no such case. Each run must be clean, give the half type where the
schema binds the output to the converted inputs' type, the right shape, and values close to ONNX
Runtime's (float16, where it runs the model) or to the same model run in float32 on the same
(rounded) inputs and rounded once. A new kernel that admits half types and has neither a case nor
a hand-built model fails :func:`test_every_half_precision_kernel_is_swept`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import cache
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from sealtrace.backends.reference import ReferenceBackend
from sealtrace.conformance.runner import NodeCase, collect_cases, to_value
from sealtrace.ops.registry import registered_ops
from sealtrace.plan import build_plan

HALF_TYPES = {
    "float16": (TensorProto.FLOAT16, np.dtype(np.float16)),
    "bfloat16": (TensorProto.BFLOAT16, np.dtype(ml_dtypes.bfloat16)),
}
# Relative to the largest output magnitude: a half-precision run rounds at every step (2**-11 and
# 2**-8 per step), far from the errors looked for (a crash, a truncation, a wrong type).
TOLERANCE = {"float16": 0.01, "bfloat16": 0.06}
CASES_PER_OP = 4
_BACKEND = ReferenceBackend()


def _schema(domain: str, op: str, versions: list[int]) -> onnx.defs.OpSchema | None:
    """The newest schema with a kernel that is not deprecated (Scatter-11 and Upsample-10 are)."""
    for version in reversed(versions):
        try:
            schema = onnx.defs.get_schema(op, version, domain)
        except onnx.defs.SchemaError:
            continue
        if schema.since_version == version and not schema.deprecated:
            return schema
    return None


def _allowed(schema: onnx.defs.OpSchema, type_str: str) -> set[str]:
    for constraint in schema.type_constraints:
        if constraint.type_param_str == type_str:
            return set(constraint.allowed_type_strs)
    return {type_str}


def _half_ops() -> list[tuple[str, str, str, onnx.defs.OpSchema]]:
    found = []
    for (domain, op), versions in registered_ops().items():
        schema = _schema(domain, op, versions)
        if schema is None:
            continue
        admitted = set().union(*(set(c.allowed_type_strs) for c in schema.type_constraints))
        for name in HALF_TYPES:
            if any(f"({name})" in t for t in admitted):
                found.append((domain, op, name, schema))
    return found


HALF_OPS = _half_ops()


@cache
def _cases_by_op() -> dict[str, list[NodeCase]]:
    by_op: dict[str, list[NodeCase]] = {}
    for case in collect_cases():
        by_op.setdefault(case.op_type, []).append(case)
    return by_op


def _opset(model: onnx.ModelProto, domain: str) -> int:
    return next(o.version for o in model.opset_import if o.domain in ({domain, "ai.onnx"} if not domain else {domain}))


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


Build = Callable[[int], tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto], list[str]]]
# A run: the model in the half type and its feeds; the same model in float32 with the same values.
Run = tuple[onnx.ModelProto, dict[str, Any], onnx.ModelProto, dict[str, Any], set[int]]


def _from_case(case: NodeCase, schema: onnx.defs.OpSchema, type_name: str, domain: str) -> Run | None:
    """The case with every float32 or float64 input the schema lets be ``type_name`` converted to it; None
    when it has no such input, more than one node, a subgraph, or another schema version."""
    if len(case.model.graph.node) != 1 or "_expanded" in case.name:
        return None
    node = case.model.graph.node[0]
    try:
        resolved = onnx.defs.get_schema(node.op_type, _opset(case.model, domain), domain).since_version
    except (StopIteration, onnx.defs.SchemaError):
        return None
    if resolved != schema.since_version or _has_subgraph(node):
        return None
    elem_type, dtype = HALF_TYPES[type_name]
    formal = list(schema.inputs)
    convertible = {
        name: formal[min(k, len(formal) - 1)].type_str
        for k, name in enumerate(node.input)
        if name and f"tensor({type_name})" in _allowed(schema, formal[min(k, len(formal) - 1)].type_str)
    }
    half = _untyped_outputs(case.model)
    single = _untyped_outputs(case.model)
    half_feeds: dict[str, Any] = {}
    single_feeds: dict[str, Any] = {}
    converted: set[str] = set()
    for info, value in zip(half.graph.input, (to_value(v) for v in case.data_sets[0][0]), strict=False):
        if info.name in convertible and isinstance(value, np.ndarray) and value.dtype in (np.float32, np.float64):
            info.type.tensor_type.elem_type = elem_type
            wide = value.dtype
            with np.errstate(over="ignore"):  # Cast's cases hold float32 values beyond float16's range
                value = value.astype(dtype)
            converted.add(convertible[info.name])
            single_feeds[info.name] = value.astype(wide)
        else:
            single_feeds[info.name] = value
        half_feeds[info.name] = value
    if not converted:
        return None
    outputs = list(schema.outputs)
    bound = {j for j in range(len(node.output)) if outputs[min(j, len(outputs) - 1)].type_str in converted}
    return half, half_feeds, single, single_feeds, bound


def _untyped_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for output in copy.graph.output:
        output.ClearField("type")
    return copy


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[str], opset: int = 22) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "half", inputs, [onnx.ValueInfoProto(name=o) for o in outputs])
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset)])


def _hand(build: Build, values: dict[str, np.ndarray], opset: int = 22) -> Callable[[str], Run]:
    """A run of a model ``build(elem_type)`` makes, fed ``values`` (float32 ones in the half type)."""

    def make(type_name: str) -> Run:
        elem_type, dtype = HALF_TYPES[type_name]
        half_feeds = {k: v.astype(dtype) if v.dtype == np.float32 else v for k, v in values.items()}
        single_feeds = {k: v.astype(np.float32) if v.dtype == dtype else v for k, v in half_feeds.items()}
        half = _model(*build(elem_type), opset=opset)
        single = _model(*build(TensorProto.FLOAT), opset=opset)
        return half, half_feeds, single, single_feeds, set(range(len(half.graph.output)))

    return make


def _tensor(name: str, elem_type: int, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, shape)


_RNG = np.random.default_rng(28)
_X = _RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
_ROIS = np.array([[0, 0, 0, 3, 3], [0, 1, 1, 2, 3]], np.float32)
_COND = np.array(True)


def _loop(t: int) -> tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto], list[str]]:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]), helper.make_node("Add", ["acc", "x"], ["acc_out"])],
        "body",
        [_tensor("i", TensorProto.INT64, []), _tensor("cond", TensorProto.BOOL, []), _tensor("acc", t, [4])],
        [_tensor("cond_out", TensorProto.BOOL, []), _tensor("acc_out", t, [4])],
    )
    trips = helper.make_node("Constant", [], ["trips"], value=helper.make_tensor("trips", TensorProto.INT64, [], [3]))
    loop = helper.make_node("Loop", ["trips", "", "x"], ["out"], body=body)
    return [trips, loop], [_tensor("x", t, [4])], ["out"]


def _scan(t: int) -> tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto], list[str]]:
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "row"], ["acc_out"]), helper.make_node("Identity", ["acc_out"], ["each"])],
        "body",
        [_tensor("acc", t, [4]), _tensor("row", t, [4])],
        [_tensor("acc_out", t, [4]), _tensor("each", t, [4])],
    )
    scan = helper.make_node("Scan", ["init", "rows"], ["total", "partials"], body=body, num_scan_inputs=1)
    return [scan], [_tensor("init", t, [4]), _tensor("rows", t, [3, 4])], ["total", "partials"]


def _if(t: int) -> tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto], list[str]]:
    def branch(op: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["x"], ["y"])], op, [], [_tensor("y", t, [4])])

    node = helper.make_node("If", ["cond"], ["out"], then_branch=branch("Neg"), else_branch=branch("Identity"))
    return [node], [_tensor("cond", TensorProto.BOOL, []), _tensor("x", t, [4])], ["out"]


def _sequences(t: int) -> tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto], list[str]]:
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b"], ["seq"]),
        helper.make_node("SequenceAt", ["seq", "one"], ["second"]),
        helper.make_node("ConcatFromSequence", ["seq"], ["joined"], axis=0),
        helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", TensorProto.INT64, [], [1])),
    ]
    return nodes, [_tensor("a", t, [4]), _tensor("b", t, [4])], ["seq", "second", "joined"]


def _sequence_map(t: int) -> tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto], list[str]]:
    body = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "body", [_tensor("x", t, [4])], [_tensor("y", t, [4])])
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["seq"]), helper.make_node("SequenceMap", ["seq"], ["out"], body=body)]
    return nodes, [_tensor("a", t, [4]), _tensor("b", t, [4])], ["out"]


def _optional(t: int) -> tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto], list[str]]:
    nodes = [helper.make_node("Optional", ["x"], ["opt"]), helper.make_node("OptionalGetElement", ["opt"], ["out"])]
    return nodes, [_tensor("x", t, [4])], ["out"]


def _single(op: str, names: list[str], shapes: list[list[int]], **attrs: Any) -> Build:
    def build(t: int) -> tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto], list[str]]:
        node = helper.make_node(op, names, ["out"], **attrs)
        return [node], [_tensor(n, t, s) for n, s in zip(names, shapes, strict=True)], ["out"]

    return build


_VEC = {"x": _X[0, 0, 0]}
HAND_RUNS: dict[str, Callable[[str], Run]] = {
    "GlobalLpPool": _hand(_single("GlobalLpPool", ["x"], [[1, 2, 4, 4]], p=2), {"x": _X}),
    "MaxRoiPool": _hand(
        _single("MaxRoiPool", ["x", "rois"], [[1, 2, 4, 4], [2, 5]], pooled_shape=[2, 2]), {"x": _X, "rois": _ROIS}
    ),
    "Loop": _hand(_loop, _VEC),
    "Scan": _hand(_scan, {"init": _X[0, 0, 0], "rows": _X[0, 0, 1:]}),
    "If": _hand(_if, {"cond": _COND, **_VEC}),
    "SequenceConstruct": _hand(_sequences, {"a": _X[0, 0, 0], "b": _X[0, 1, 0]}),
    "Optional": _hand(_optional, _VEC),
    "SequenceMap": _hand(_sequence_map, {"a": _X[0, 0, 0], "b": _X[0, 1, 0]}),
    "Scatter": _hand(
        lambda t: (
            [helper.make_node("Scatter", ["x", "i", "u"], ["out"], axis=1)],
            [_tensor("x", t, [2, 4]), _tensor("i", TensorProto.INT64, [2, 1]), _tensor("u", t, [2, 1])],
            ["out"],
        ),
        {"x": _X[0, 0, :2], "i": np.array([[1], [3]], np.int64), "u": _X[0, 1, 0, :2, None]},
        opset=10,
    ),
    "Upsample": _hand(
        lambda t: (
            [helper.make_node("Upsample", ["x", "scales"], ["out"], mode="nearest")],
            [_tensor("x", t, [1, 2, 4, 4]), _tensor("scales", TensorProto.FLOAT, [4])],
            ["out"],
        ),
        {"x": _X, "scales": np.array([1, 1, 2, 2], np.float32)},
        opset=9,
    ),
}
HAND_RUNS["SequenceAt"] = HAND_RUNS["ConcatFromSequence"] = HAND_RUNS["SequenceConstruct"]
for _window in ("BlackmanWindow", "HammingWindow", "HannWindow"):
    HAND_RUNS[_window] = _hand(
        lambda t, op=_window: ([helper.make_node(op, ["size"], ["out"], output_datatype=t)], [_tensor("size", TensorProto.INT64, [])], ["out"]),
        {"size": np.array(10, np.int64)},
    )
HAND_RUNS["Constant"] = _hand(
    lambda t: ([helper.make_node("Constant", [], ["out"], value=helper.make_tensor("v", t, [3], [0.5, -2.0, 3.0]))], [], ["out"]), {}
)
HAND_RUNS["ConstantOfShape"] = _hand(
    lambda t: (
        [helper.make_node("ConstantOfShape", ["shape"], ["out"], value=helper.make_tensor("v", t, [1], [1.5]))],
        [_tensor("shape", TensorProto.INT64, [2])],
        ["out"],
    ),
    {"shape": np.array([2, 3], np.int64)},
)
HAND_RUNS["EyeLike"] = _hand(_single("EyeLike", ["x"], [[3, 4]], k=1), {"x": _X[0, 0, :3]})
HAND_RUNS["Equal"] = _hand(_single("Equal", ["a", "b"], [[4], [4]]), {"a": _X[0, 0, 0], "b": np.where(np.arange(4) % 2 == 0, _X[0, 0, 0], 0)})
HAND_RUNS["NonZero"] = _hand(_single("NonZero", ["x"], [[4, 4]]), {"x": np.where(_X[0, 0] > 0, _X[0, 0], 0)})
HAND_RUNS["Trilu"] = _hand(_single("Trilu", ["x"], [[4, 4]], upper=0), {"x": _X[0, 0]})
HAND_RUNS["CumSum"] = _hand(_single("CumSum", ["x", "axis"], [[4, 4], []]), {"x": _X[0, 0], "axis": np.array(1, np.int64)})
HAND_RUNS["CumProd"] = _hand(_single("CumProd", ["x", "axis"], [[4, 4], []]), {"x": _X[0, 0], "axis": np.array(0, np.int64)}, opset=26)
HAND_RUNS["Einsum"] = _hand(_single("Einsum", ["a", "b"], [[2, 4], [4, 3]], equation="ij,jk->ik"), {"a": _X[0, 0, :2], "b": _X[0, 1, :, :3]})


def _sequence_edits(t: int) -> tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto], list[str]]:
    nodes = [
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=t),
        helper.make_node("SequenceInsert", ["empty", "a"], ["one"]),
        helper.make_node("SequenceInsert", ["one", "b"], ["two"]),
        helper.make_node("SequenceErase", ["two", "first"], ["seq"]),
        helper.make_node("SequenceLength", ["seq"], ["length"]),
        helper.make_node("Constant", [], ["first"], value=helper.make_tensor("first", TensorProto.INT64, [], [0])),
    ]
    return nodes, [_tensor("a", t, [4]), _tensor("b", t, [4])], ["seq", "length"]


HAND_RUNS["SequenceEmpty"] = HAND_RUNS["SequenceInsert"] = HAND_RUNS["SequenceErase"] = HAND_RUNS["SequenceLength"] = _hand(
    _sequence_edits, {"a": _X[0, 0, 0], "b": _X[0, 1, 0]}
)
# The float32 cases of BitCast change the bits' width; half values reinterpret as 16-bit integers.
BITCAST = "BitCast"


def _runs(domain: str, op: str, type_name: str, schema: onnx.defs.OpSchema) -> list[Run]:
    if op == BITCAST:
        return []
    runs = []
    for case in _cases_by_op().get(op, []):
        run = _from_case(case, schema, type_name, domain)
        if run is not None:
            runs.append(run)
        if len(runs) == CASES_PER_OP:
            break
    if not runs and op in HAND_RUNS:
        runs.append(HAND_RUNS[op](type_name))
    return runs


def _reference(model: onnx.ModelProto, feeds: dict[str, Any]) -> list[Any]:
    plan = build_plan(model)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outputs = _BACKEND.run(plan, feeds)
    return [outputs[n] for n in plan.output_names]


def _onnxruntime(model: onnx.ModelProto, feeds: dict[str, Any]) -> list[Any] | None:
    """ONNX Runtime's outputs, or None where it has no kernel for the model's types."""
    if any(isinstance(v, np.ndarray) and v.dtype.isbuiltin == 2 for v in feeds.values()):
        return None  # ml_dtypes arrays (bfloat16) cannot be fed to it
    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return list(session.run(None, feeds))
    except Exception:  # onnxruntime's errors share no base class; NOT_IMPLEMENTED is the usual one
        return None


def _agree(theirs: list[Any] | None, ours: list[Any]) -> bool:
    if theirs is None or len(theirs) != len(ours):
        return False
    return all(
        isinstance(t, np.ndarray) and t.shape == o.shape and np.allclose(t, o, 1e-5, 1e-6, equal_nan=True)
        for t, o in zip(theirs, ours, strict=True)
        if isinstance(o, np.ndarray) and o.dtype.kind == "f"
    )


def _check(got: Any, want: Any, single: Any, half_dtype: np.dtype[Any], bound: bool, tolerance: float, where: str) -> None:
    if isinstance(single, list):
        assert isinstance(got, list) and len(got) == len(single), where
        wants = want if isinstance(want, list) and len(want) == len(single) else [None] * len(single)
        for g, w, s in zip(got, wants, single, strict=True):
            _check(g, w, s, half_dtype, bound, tolerance, where)
        return
    if not isinstance(single, np.ndarray):
        assert got is None or not isinstance(got, np.ndarray), where
        return
    assert isinstance(got, np.ndarray), where
    assert got.shape == single.shape, f"{where}: shape {got.shape}, float32 gives {single.shape}"
    if single.dtype.kind != "f":
        assert got.dtype == single.dtype, f"{where}: dtype {got.dtype}, float32 run gives {single.dtype}"
        if single.dtype.kind in "biu":
            np.testing.assert_array_equal(got, single, err_msg=where)
        return
    # An output typed by an attribute or another type parameter may be either type.
    allowed = {half_dtype} if bound else {half_dtype, single.dtype}
    assert got.dtype in allowed, f"{where}: dtype {got.dtype}, expected {' or '.join(map(str, allowed))}"
    expected = (want if isinstance(want, np.ndarray) else single).astype(got.dtype).astype(np.float64)
    finite = np.abs(expected[np.isfinite(expected)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    np.testing.assert_allclose(
        got.astype(np.float64), expected, rtol=tolerance, atol=tolerance * scale, equal_nan=True, err_msg=where
    )


@pytest.mark.parametrize(
    ("domain", "op", "type_name", "schema"), HALF_OPS, ids=[f"{d or 'ai.onnx'}.{o}-{t}" for d, o, t, _ in HALF_OPS]
)
def test_kernel_runs_in_half_precision(domain: str, op: str, type_name: str, schema: onnx.defs.OpSchema) -> None:
    runs = _runs(domain, op, type_name, schema)
    if not runs:
        pytest.skip("no model exercises it here (test_every_half_precision_kernel_is_swept says why)")
    half_dtype = HALF_TYPES[type_name][1]
    for half, half_feeds, single, single_feeds, bound in runs:
        where = f"{op} in {type_name} ({half.graph.name})"
        got = _reference(half, half_feeds)
        single_out = _reference(single, single_feeds)
        theirs = _onnxruntime(half, half_feeds) if type_name == "float16" else None
        if theirs is not None and not _agree(_onnxruntime(single, single_feeds), single_out):
            theirs = None  # where ONNX Runtime departs from the spec in float32 too (MaxUnpool's output_shape)
        for j, (g, s) in enumerate(zip(got, single_out, strict=True)):
            w = theirs[j] if theirs is not None else None
            _check(g, w, s, half_dtype, j in bound, TOLERANCE[type_name], f"{where} output {j}")


@pytest.mark.parametrize("type_name", list(HALF_TYPES))
def test_bitcast_reinterprets_half_bits(type_name: str) -> None:
    elem_type, dtype = HALF_TYPES[type_name]
    x = _X.reshape(-1).astype(dtype)
    model = _model([helper.make_node("BitCast", ["x"], ["out"], to=TensorProto.INT16)], [_tensor("x", elem_type, [32])],
                   ["out"], opset=26)
    (got,) = _reference(model, {"x": x})
    np.testing.assert_array_equal(got, x.view(np.int16))


def test_every_half_precision_kernel_is_swept() -> None:
    unswept = [
        f"{domain or 'ai.onnx'}.{op} ({type_name})"
        for domain, op, type_name, schema in HALF_OPS
        if op != BITCAST and not _runs(domain, op, type_name, schema)
    ]
    assert not unswept, f"kernels admitting a half type with no model run in it here: {unswept}"
    assert len(HALF_OPS) > 200, len(HALF_OPS)


def test_maxpool_takes_bfloat16() -> None:
    """The failure export-parity met on a bfloat16 resnet: MaxPool padded with np.iinfo's lowest."""
    elem_type, dtype = HALF_TYPES["bfloat16"]

    def build(t: int) -> onnx.ModelProto:
        node = helper.make_node("MaxPool", ["x"], ["out"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
        return _model([node], [_tensor("x", t, [1, 2, 4, 4])], ["out"])

    x = _X.astype(dtype)
    (got,) = _reference(build(elem_type), {"x": x})
    (single,) = _reference(build(TensorProto.FLOAT), {"x": x.astype(np.float32)})
    assert got.dtype == dtype and got.shape == (1, 2, 2, 2)
    np.testing.assert_array_equal(got.astype(np.float32), single)  # a maximum is exact
