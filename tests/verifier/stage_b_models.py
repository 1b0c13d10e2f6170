"""Small models of the data-movement, integer, boolean, Cast, Range and Resize operators that sealverify
replay runs for YOLOv8n (issue 30, stage b), and of ConvTranspose (the PP-OCR detector's), each at its edges: NaN, infinities and values past an integer
type's range for Cast, integer overflow and division by zero, negative indices and axes, uneven splits,
every nearest mode of Resize. The replay tests and the replay corpus record them with sealtrace on seeded
inputs and replay them with sealverify."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import make_model
from tests.verifier.test_replay_cnn import stage_b_cases

# A model to record: its name, the model, and its inputs.
ModelCase = tuple[str, onnx.ModelProto, dict[str, np.ndarray]]

F32, F64, F16, I64, I32, U8, BOOL = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT64,
                                     TensorProto.INT32, TensorProto.UINT8, TensorProto.BOOL)
CAST_TARGETS = (TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16, TensorProto.INT16, TensorProto.UINT32,
                TensorProto.INT32, TensorProto.UINT64, TensorProto.INT64, BOOL, F16, F32, F64)

STAGE_B_SHAPE_OPERATORS = {"Split", "Gather", "Unsqueeze", "Squeeze", "Expand", "Where", "Equal", "Constant",
                           "ConstantOfShape", "Range", "Cast", "Resize", "Add", "Sub", "Mul", "Div", "ConvTranspose"}


def _model(nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray], outputs: dict[str, int],
           weights: list[onnx.TensorProto] | None = None, opset: int = 17) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
              for k, v in feeds.items()]
    declared = [helper.make_tensor_value_info(name, kind, None) for name, kind in outputs.items()]
    return make_model(nodes, inputs, declared, weights, opset=opset)


def _const(name: str, value: np.ndarray | list[int] | list[float], dtype: type = np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def cast_values(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Floats at Cast's edges (NaN, infinities, signed zeros, float16 ties and overflow, values past every
    integer type's range, [2^63, 2^64) for uint64), int64 values past 2^53 and at the type's ends, and
    uint64 values past 2^63; each followed by random ones."""
    floats = np.array([-2.2, 300, 255.9, np.nan, np.inf, -np.inf, -0.5, -0.0, 0.0, 3e9, -3e9, 1e19, 1.5e19, 2.0**63,
                       -2.0**63, 2.0**64, 65519, 65520, 2049, 2051, 1e-45, 2.0**-25, 3 * 2.0**-26, 127.5, -128.7, 2.5,
                       -1e30, 6e4], dtype=np.float32)
    floats = np.concatenate([floats, (rng.standard_normal(36) * 10.0 ** rng.integers(-8, 12, 36)).astype(np.float32)])
    ints = np.array([2**53 + 1, 2**60 + 2**36 + 1, -(2**63), 2**63 - 1, 200, -129, 0, 1, -1, 65519, 65520, 2049,
                     2051, 2**24 + 1, 2**31, -(2**31) - 1], dtype=np.int64)
    ints = np.concatenate([ints, rng.integers(-(2**63), 2**63 - 1, 16, dtype=np.int64, endpoint=True),
                           rng.integers(-70000, 70000, 16, dtype=np.int64)])
    unsigned = np.array([2**64 - 1, 2**63, 2**63 + 2**39 + 1, 2**53 + 1, 0], dtype=np.uint64)
    return floats, ints, np.concatenate([unsigned, rng.integers(0, 2**64 - 1, 11, dtype=np.uint64, endpoint=True)])


def cast_case(rng: np.random.Generator) -> ModelCase:
    floats, ints, unsigned = cast_values(rng)
    nodes, outputs = [], {}
    for source, kinds in (("x", CAST_TARGETS), ("k", CAST_TARGETS), ("u", (F32, F64, F16, TensorProto.INT8, BOOL))):
        for to in kinds:
            name = f"{source}_{TensorProto.DataType.Name(to).lower()}"
            nodes.append(helper.make_node("Cast", [source], [name], name=f"cast_{name}", to=to))
            outputs[name] = to
    for source in ("x_float16", "x_double", "x_bool", "k_bool", "x_int8", "k_uint32"):  # and back
        nodes.append(helper.make_node("Cast", [source], [f"{source}_back"], name=f"cast_{source}_back", to=F32))
        outputs[f"{source}_back"] = F32
    feeds = {"x": floats, "k": ints, "u": unsigned}
    return "cast", _model(nodes, feeds, outputs), feeds


def arithmetic_case(rng: np.random.Generator) -> ModelCase:
    """Integer Add, Sub, Mul, Div (overflow wraps; truncating division; x / 0; -2^63 / -1), in int64, int32
    and uint8; Equal and Where on integers and on floats with NaN and signed zeros, broadcast."""
    edges = [(-7, 2), (7, -2), (-7, -2), (5, 0), (-5, 0), (-(2**63), -1), (-(2**31), -1), (2**62, 4), (2**63 - 1, 1), (-(2**63), 1),
             (0, 0), (255, 3), (-1, 255)]
    a = np.array([p[0] for p in edges] + list(rng.integers(-(2**40), 2**40, 12)), dtype=np.int64)
    b = np.array([p[1] for p in edges] + list(rng.integers(-50, 50, 12)), dtype=np.int64)
    x = rng.standard_normal((2, 1, 6)).astype(np.float32)
    x.reshape(-1)[:4] = [np.nan, -0.0, 0.0, np.inf]
    y = rng.standard_normal((3, 6)).astype(np.float32)
    y.reshape(-1)[:4] = [np.nan, 0.0, -0.0, np.inf]
    nodes = [helper.make_node(op, ["a", "b"], [f"{op.lower()}64"], name=f"{op.lower()}_int64")
             for op in ("Add", "Sub", "Mul", "Div")]
    outputs = {f"{op.lower()}64": I64 for op in ("Add", "Sub", "Mul", "Div")}
    for t, dtype in ((I32, "int32"), (U8, "uint8")):
        nodes += [helper.make_node("Cast", ["a"], [f"a_{dtype}"], name=f"a_{dtype}", to=t),
                  helper.make_node("Cast", ["b"], [f"b_{dtype}"], name=f"b_{dtype}", to=t)]
        for op in ("Add", "Sub", "Mul", "Div"):
            nodes.append(helper.make_node(op, [f"a_{dtype}", f"b_{dtype}"], [f"{op.lower()}_{dtype}"], name=f"{op.lower()}_{dtype}"))
            outputs[f"{op.lower()}_{dtype}"] = t
    nodes += [
        helper.make_node("Equal", ["a", "b"], ["same"], name="equal_int64"),
        helper.make_node("Where", ["same", "a", "div64"], ["picked"], name="where_int64"),
        helper.make_node("Equal", ["x", "y"], ["fsame"], name="equal_float"),
        helper.make_node("Where", ["fsame", "y", "x"], ["fpicked"], name="where_float_broadcast"),
        helper.make_node("Where", ["fsame", "x", "zero"], ["fzero"], name="where_scalar")]
    outputs |= {"same": BOOL, "picked": I64, "fsame": BOOL, "fpicked": F32, "fzero": F32}
    feeds = {"a": a, "b": b, "x": x, "y": y}
    return "int_arithmetic", _model(nodes, feeds, outputs, [_const("zero", -0.0, np.float32)]), feeds


def gather_case(rng: np.random.Generator) -> ModelCase:
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["x", "i2d"], ["g1"], name="gather_axis1_negative", axis=1),
        helper.make_node("Gather", ["x", "i32"], ["g2"], name="gather_int32_last_axis", axis=-1),
        helper.make_node("Gather", ["x", "scalar"], ["g3"], name="gather_scalar_index"),
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "scalar"], ["g4"], name="gather_int64_data"),
        helper.make_node("Equal", ["x", "x"], ["not_nan"], name="not_nan"),
        helper.make_node("Gather", ["not_nan", "i2d"], ["g5"], name="gather_bool", axis=2)]
    weights = [_const("i2d", [[-1, 0], [2, -3]]), _const("i32", [-5, 4, 0], np.int32), _const("scalar", -3)]
    outputs = {"g1": F32, "g2": F32, "g3": F32, "g4": I64, "g5": BOOL}
    return "gather", _model(nodes, {"x": x}, outputs, weights), {"x": x}


def split_case(rng: np.random.Generator) -> ModelCase:
    x = rng.standard_normal((2, 6, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Split", ["x", "parts"], ["s1", "s2", "s3"], name="split_sizes_with_empty", axis=1),
        helper.make_node("Split", ["x"], ["e1", "e2", "e3"], name="split_equal_last_axis", axis=-1),
        helper.make_node("Unsqueeze", ["s3", "axes"], ["u"], name="unsqueeze_negative"),
        helper.make_node("Squeeze", ["u", "first"], ["q1"], name="squeeze_axes"),
        helper.make_node("Squeeze", ["e1"], ["q2"], name="squeeze_all")]
    weights = [_const("parts", [1, 0, 5]), _const("axes", [-1, 0]), _const("first", [0])]
    outputs = {n: F32 for n in ("s1", "s2", "e2", "e3", "q1", "q2")}
    return "split_squeeze", _model(nodes, {"x": x}, outputs, weights), {"x": x}


def split_opset_cases(rng: np.random.Generator) -> list[ModelCase]:
    """Split's num_outputs (opset 18: the last part smaller); Split, Unsqueeze and Squeeze with attributes
    (opset 11)."""
    x = rng.standard_normal((2, 7)).astype(np.float32)
    uneven = [helper.make_node("Split", ["x"], ["p1", "p2", "p3", "p4"], name="split_num_outputs", axis=1, num_outputs=4)]
    old = [helper.make_node("Split", ["x"], ["o1", "o2"], name="split_attribute", axis=1, split=[3, 4]),
           helper.make_node("Unsqueeze", ["o1"], ["ou"], name="unsqueeze_attribute", axes=[1, -1]),
           helper.make_node("Squeeze", ["ou"], ["os"], name="squeeze_attribute", axes=[-1])]
    return [("split_opset18", _model(uneven, {"x": x}, {f"p{i}": F32 for i in range(1, 5)}, opset=18), {"x": x}),
            ("split_opset11", _model(old, {"x": x}, {"o2": F32, "os": F32}, opset=11), {"x": x})]


def fill_case(rng: np.random.Generator) -> ModelCase:
    """Expand (both ways), ConstantOfShape (default, int64, -0), Constant, Range in float32 (a delta float32
    does not hold), float64, int64 and int32 (counting down)."""
    x = rng.standard_normal((3, 1)).astype(np.float32)
    start = np.float32(rng.uniform(-1, 1))
    nodes = [
        helper.make_node("Expand", ["x", "to"], ["ex"], name="expand_both_ways"),
        helper.make_node("Expand", ["big", "to"], ["ei"], name="expand_int64"),
        helper.make_node("ConstantOfShape", ["dims"], ["c0"], name="fill_default"),
        helper.make_node("ConstantOfShape", ["dims"], ["c1"], name="fill_int64",
                         value=helper.make_tensor("v", I64, [1], [-7])),
        helper.make_node("ConstantOfShape", ["empty"], ["c2"], name="fill_scalar_negative_zero",
                         value=helper.make_tensor("v", F32, [1], [-0.0])),
        helper.make_node("Constant", [], ["k1"], name="constant_tensor",
                         value=numpy_helper.from_array(rng.standard_normal((2, 2)).astype(np.float32), "k")),
        helper.make_node("Constant", [], ["k2"], name="constant_ints", value_ints=[3, -1, 2]),
        helper.make_node("Constant", [], ["k3"], name="constant_float", value_float=0.1),
        helper.make_node("Add", ["k1", "k3"], ["k4"], name="add_constants"),
        helper.make_node("Range", ["r0", "r1", "rd"], ["r"], name="range_float32"),
        helper.make_node("Range", ["r1", "r0", "rn"], ["rdown"], name="range_float32_down"),
        helper.make_node("Range", ["d0", "d1", "dd"], ["rd64"], name="range_float64"),
        helper.make_node("Range", ["i0", "i1", "idelta"], ["ri"], name="range_int64_down"),
        helper.make_node("Range", ["j0", "j1", "jd"], ["rj"], name="range_int32")]
    weights = [_const("to", [2, 1, 4]), _const("big", [[2**62], [-(2**63)], [5]]), _const("dims", [2, 3]),
               _const("empty", np.zeros(0)), _const("r0", start, np.float32), _const("r1", 7.1, np.float32),
               _const("rd", 0.7, np.float32), _const("rn", -0.3, np.float32), _const("d0", -1.0, np.float64),
               _const("d1", 2.0, np.float64), _const("dd", 0.1, np.float64), _const("i0", 10), _const("i1", -7),
               _const("idelta", -3), _const("j0", -5, np.int32), _const("j1", 6, np.int32), _const("jd", 4, np.int32)]
    outputs = {"ex": F32, "ei": I64, "c0": F32, "c1": I64, "c2": F32, "k2": I64, "k4": F32, "r": F32, "rdown": F32,
               "rd64": F64, "ri": I64, "rj": I32}
    return "fill_range", _model(nodes, {"x": x}, outputs, weights), {"x": x}


def resize_case(rng: np.random.Generator) -> ModelCase:
    """Resize's nearest mode with every coordinate transformation and rounding, by scales (not whole
    numbers, an output length float32 rounds up to a whole number) and by sizes."""
    x = rng.standard_normal((1, 2, 5, 96)).astype(np.float32)
    nodes, outputs = [], {}
    for transform in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"):
        for rounding in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
            for by, inputs in (("scales", ["x", "", "scales"]), ("sizes", ["x", "", "", "sizes"])):
                name = f"{transform}_{rounding}_{by}"
                nodes.append(helper.make_node("Resize", inputs, [name], name=name, mode="nearest",
                                              coordinate_transformation_mode=transform, nearest_mode=rounding))
                outputs[name] = F32
    weights = [_const("scales", [1, 1, 1.7, 3.1979165], np.float32), _const("sizes", [1, 3, 9, 37])]
    return "resize_nearest", _model(nodes, {"x": x}, outputs, weights, opset=13), {"x": x}


def conv_transpose_case(rng: np.random.Generator) -> ModelCase:
    """ConvTranspose with strides, dilations, pads on one side, output_padding, groups, output_shape and
    SAME padding, on values with signed zeros, ties and NaN; the nodes unnamed (a log names them
    OP_TYPE_INDEX)."""
    x = (rng.standard_normal((2, 4, 5, 4)) * rng.choice([1e-3, 1.0, 30.0], (2, 4, 5, 4))).astype(np.float32)
    x.reshape(-1)[:6] = [0.0, -0.0, 0.5, -2.5, 3.0, np.nan]
    nodes = [
        helper.make_node("ConvTranspose", ["x", "w", "b"], ["a"], strides=[2, 3], dilations=[1, 2], pads=[1, 0, 0, 2],
                         output_padding=[1, 0]),
        helper.make_node("ConvTranspose", ["x", "wg"], ["c"], group=2, strides=[2, 2], output_shape=[10, 9]),
        helper.make_node("ConvTranspose", ["x", "wg"], ["d"], group=2, strides=[3, 2], auto_pad="SAME_UPPER"),
        helper.make_node("ConvTranspose", ["x", "wg"], ["e"], group=2, strides=[3, 2], auto_pad="SAME_LOWER")]
    weights = [numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(np.float32), name)
               for name, shape in (("w", (4, 3, 2, 3)), ("b", (3,)), ("wg", (4, 1, 3, 3)))]
    return "conv_transpose", _model(nodes, {"x": x}, {"a": F32, "c": F32, "d": F32, "e": F32}, weights), {"x": x}


def shape_op_cases(rng: np.random.Generator) -> list[ModelCase]:
    """Every model above, on inputs drawn from rng."""
    return [cast_case(rng), arithmetic_case(rng), gather_case(rng), split_case(rng), *split_opset_cases(rng),
            fill_case(rng), resize_case(rng), conv_transpose_case(rng)]


def cnn_op_cases(rng: np.random.Generator) -> list[ModelCase]:
    """The convolutional operators' small models of test_replay_cnn.py, as models."""
    cases = []
    for name, nodes, feeds, weights in stage_b_cases(rng):
        cases.append((name, _model(nodes, feeds, {nodes[-1].output[0]: F32}, weights), feeds))
    return cases
