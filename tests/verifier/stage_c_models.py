"""Small models of the float operators of transformers that sealverify replay runs (issue 30, stage c), each at
its hard places: subnormal, overflowing and underflowing results, signed zeros, NaN, infinities, a mean far from
the spread, float32 midpoints of pow. The replay tests and the replay corpus record them with sealtrace on seeded
inputs and replay them with sealverify."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import make_model
from tests.verifier.stage_b_models import ModelCase
from tests.verifier.test_replay_cnn import Case, hard_values, weight

STAGE_C_FLOAT_OPERATORS = {"LayerNormalization", "Erf", "Tanh", "Sqrt", "Neg", "Pow", "ReduceMean", "ReduceSum",
                           "ReduceMax", "ReduceMin", "Exp", "Reciprocal", "Max", "GlobalMaxPool", "IsNaN",
                           "GreaterOrEqual", "And", "GatherND"}


def function_edges(rng: np.random.Generator) -> np.ndarray:
    """Arguments where the correctly rounded functions are hard: subnormals, signed zeros, infinities, NaN,
    the thresholds where erf and tanh round to +-1, and random values of several scales."""
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3e-39, -1.2e-38, 1e-20, 2.0 ** -12,
                      3.9, 3.92, 3.95, 4.0, -3.93, 9.0, 9.01, 9.02, 10.0, -9.015, 0.5, 1.0, 88.0, -104.0],
                     dtype=np.float32)
    random = (rng.standard_normal(103) * rng.choice([1e-3, 0.3, 1.0, 3.0], size=103)).astype(np.float32)
    return np.concatenate([edges, random]).reshape(2, 4, 16)


def scalar(name: str, value: float | int, dtype: type = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def stage_c_cases(rng: np.random.Generator) -> list[Case]:
    x = hard_values(rng, (2, 3, 4, 8))
    smooth = hard_values(rng, (2, 3, 4, 8), specials=False)
    edges = function_edges(rng)
    # Long rows of zeros of both signs (NumPy's SIMD reductions keep whichever zero their lanes meet last).
    zeros = rng.choice(np.array([0.0, -0.0], dtype=np.float32), size=(8, 40))
    zeros[0], zeros[1, :3], zeros[2, 5] = -0.0, [-1e-45, np.nan, 1.0], -np.inf
    # GlobalMaxPool's planes hold one sign of zero each: of mixed zeros sealtrace keeps whichever its NumPy SIMD
    # lanes meet last, which depends on the plane's length (the ReduceMax issue, not yet settled for it).
    planes = np.full((2, 4, 40), -0.0, dtype=np.float32)
    planes[0, 1], planes[0, 2, :3], planes[1, 0, 5], planes[1, 1, 9] = 0.0, [-1e-45, np.nan, 1.0], -np.inf, 2.0
    far = (np.float32(1e4) + smooth).astype(np.float32)  # a mean large against the spread
    exponents = np.array([2.0, -2.0, 3.0, -1.0, 0.5, -0.5, 1.5, 0.0, -0.0, np.inf, -np.inf, np.nan, 7.0, 150.0,
                          -150.0, 0.25], dtype=np.float32)
    bases = np.array([[0.0], [-0.0], [-2.0], [2.0 ** -100], [-1.0], [1.0], [np.inf], [-np.inf], [np.nan],
                      [0.75], [16.0], [-3.0], [1e-20], [1.5], [2.0 ** -75], [65537.0]], dtype=np.float32)
    return [
        ("layernorm", [
            helper.make_node("LayerNormalization", ["x", "s", "b"], ["a"], name="ln_last", epsilon=1e-12),
            helper.make_node("LayerNormalization", ["a", "s2"], ["y", "mean", "inv_std"], name="ln_axis1", axis=1)],
         {"x": smooth}, [weight(rng, "s", (8,)), weight(rng, "b", (8,)), weight(rng, "s2", (3, 1, 8))]),
        ("layernorm_far_mean", [
            helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], name="ln", axis=-2)],
         {"x": far}, [weight(rng, "s", (4, 8)), weight(rng, "b", (8,))]),
        ("layernorm_specials", [helper.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln")],
         {"x": x}, [weight(rng, "s", (8,))]),
        ("erf_tanh", [
            helper.make_node("Erf", ["x"], ["a"], name="erf"),
            helper.make_node("Tanh", ["x"], ["b"], name="tanh"),
            helper.make_node("Mul", ["x", "big"], ["c"], name="spread"),
            helper.make_node("Erf", ["c"], ["d"], name="erf_wide"),
            helper.make_node("Tanh", ["c"], ["e"], name="tanh_wide"),
            helper.make_node("Add", ["d", "e"], ["y"], name="add")],
         {"x": edges}, [scalar("big", 4.0)]),
        ("sqrt_neg", [
            helper.make_node("Sqrt", ["x"], ["a"], name="sqrt"),
            helper.make_node("Neg", ["x"], ["b"], name="neg"),
            helper.make_node("Sqrt", ["b"], ["y"], name="sqrt_negated")],
         {"x": edges}, []),
        ("pow", [
            helper.make_node("Pow", ["x", "two"], ["a"], name="square"),
            helper.make_node("Pow", ["x", "half"], ["b"], name="root"),
            helper.make_node("Pow", ["x", "three"], ["c"], name="cube_int64"),
            helper.make_node("Pow", ["bases", "exponents"], ["d"], name="specials"),
            helper.make_node("Pow", ["x", "odd"], ["y"], name="odd_float64")],
         {"x": edges}, [scalar("two", 2.0), scalar("half", 0.5), scalar("three", 3, np.int64),
                        numpy_helper.from_array(bases, "bases"), numpy_helper.from_array(exponents, "exponents"),
                        scalar("odd", -3.0, np.float64)]),
        ("reduce", [
            helper.make_node("ReduceMean", ["x"], ["a"], name="mean_last", axes=[-1]),
            helper.make_node("ReduceMean", ["x"], ["b"], name="mean_all", keepdims=0),
            helper.make_node("ReduceSum", ["x", "axes"], ["c"], name="sum_inner"),
            helper.make_node("ReduceSum", ["x"], ["d"], name="sum_all"),
            helper.make_node("ReduceMax", ["x"], ["e"], name="max_outer", axes=[0, 2], keepdims=0),
            helper.make_node("ReduceMax", ["x"], ["y"], name="max_all")],
         {"x": x}, [numpy_helper.from_array(np.array([1, 3], dtype=np.int64), "axes")]),
        ("reduce_signed_zeros", [
            helper.make_node("ReduceMax", ["x"], ["a"], name="max_rows", axes=[1]),
            helper.make_node("ReduceMax", ["x"], ["b"], name="max_columns", axes=[0]),
            helper.make_node("ReduceMin", ["x"], ["m"], name="min_rows", axes=[1]),
            helper.make_node("ReduceMin", ["x"], ["n"], name="min_columns", axes=[0], keepdims=0),
            helper.make_node("ReduceSum", ["x", "axes"], ["c"], name="sum_rows"),
            helper.make_node("ReduceMean", ["x"], ["y"], name="mean_rows", axes=[1])],
         {"x": zeros}, [numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")]),
        ("reduce_smooth", [
            helper.make_node("ReduceMean", ["x"], ["a"], name="mean", axes=[1, 3]),
            helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="sum", keepdims=0)],
         {"x": smooth}, [numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes")]),
        # Magika's and the int8 MiniLM's operators: exp's overflow and subnormal results, 1 / +-0, a NaN or a
        # zero of either sign meeting another in Max (broadcast from three shapes) and in GlobalMaxPool's rows.
        ("exp_reciprocal_max", [
            helper.make_node("Exp", ["x"], ["e"], name="exp"),
            helper.make_node("Reciprocal", ["x"], ["r"], name="reciprocal"),
            helper.make_node("GlobalMaxPool", ["z"], ["g"], name="global_max"),
            helper.make_node("Max", ["x", "row", "zero"], ["y"], name="max")],
         {"x": edges, "z": planes},
         [numpy_helper.from_array(np.array([-0.0, 0.0, np.nan, -np.inf] * 4, dtype=np.float32), "row"),
          scalar("zero", -0.0)]),
        ("masks_gather_nd", [
            helper.make_node("IsNaN", ["x"], ["nan"], name="isnan"),
            helper.make_node("GreaterOrEqual", ["x", "zero"], ["ge"], name="ge"),
            helper.make_node("And", ["nan", "ge"], ["both"], name="and"),
            helper.make_node("GatherND", ["x", "pairs"], ["picked"], name="gather_nd", batch_dims=1),
            helper.make_node("GatherND", ["x", "triples"], ["one"], name="gather_nd_elements"),
            helper.make_node("Where", ["both", "x", "zero"], ["y"], name="where")],
         {"x": edges},
         [scalar("zero", -0.0),
          numpy_helper.from_array(np.array([[[3, -1], [0, 0]], [[-4, 15], [2, 7]]], dtype=np.int64), "pairs"),
          numpy_helper.from_array(np.array([[1, 3, -16], [0, 0, 4]], dtype=np.int64), "triples")]),
    ]


def gelu_edges(rng: np.random.Generator) -> np.ndarray:
    """Arguments where Gelu is hard: signed zeros, infinities, NaN, subnormal arguments (x / 2 a float32 midpoint
    at odd ones, which the x^2 term decides), the underflow to -0 (near -14.4 for approximate "none", -10.6 for
    "tanh") and subnormal results above it, the cutoff near 5.5 from which the result is x, random values."""
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 2.0 ** -149, -(2.0 ** -149), 2.0 ** -148, -(2.0 ** -148),
                      3 * 2.0 ** -149, -3 * 2.0 ** -149, 3e-39, -3e-39, 1e-20, -1e-20, -14.0, -14.3, -14.4, -14.5, -15.0,
                      -10.4, -10.5, -10.8, -11.0, 5.5, 5.99, 6.0, 1e30, -1e30, 1.0, -1.0, 0.5], dtype=np.float32)
    tails = rng.uniform(-15.0, -10.0, 48).astype(np.float32)
    signs = rng.choice(np.array([1.0, -1.0], dtype=np.float32), 16)
    subnormals = rng.integers(1, 2**23, 16).astype(np.uint32).view(np.float32) * signs
    random = (rng.standard_normal(32) * rng.choice([1e-3, 1.0, 3.0], size=32)).astype(np.float32)
    return np.concatenate([edges, tails, subnormals, random]).reshape(4, 32)


def gelu_cases(rng: np.random.Generator) -> list[ModelCase]:
    """Gelu (opset 20) in both modes, approximate "none" by default and by name."""
    nodes = [helper.make_node("Gelu", ["x"], ["a"], name="gelu"),
             helper.make_node("Gelu", ["x"], ["b"], name="gelu_tanh", approximate="tanh"),
             helper.make_node("Gelu", ["b"], ["y"], name="gelu_none_of_tanh", approximate="none")]
    x = gelu_edges(rng)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))]
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("a", "y")]
    return [("gelu", make_model(nodes, inputs, outputs, opset=20), {"x": x})]


def transformer_op_cases(rng: np.random.Generator) -> list[ModelCase]:
    """stage_c_cases and gelu_cases as models, for the replay corpus."""
    cases = []
    for name, nodes, feeds, weights in stage_c_cases(rng):
        inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in feeds.items()]
        output = helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)
        cases.append((name, make_model(nodes, inputs, [output], weights), feeds))
    return cases + gelu_cases(rng)
