"""``sealverify replay`` of stage (c) of issue 30: the float operators of transformers, each in small models at
its hard places (subnormal, overflowing and underflowing results, signed zeros, NaN, infinities, a mean far
from the spread), and all-MiniLM-L6-v2 in float32 on real sentences, recorded by sealtrace and replayed bit
for bit by the Go verifier's own kernels."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from sealtrace import Session, zoo
from tests.conftest import make_model, require_material
from tests.verifier.minilm_fp32 import minilm_fp32_path
from tests.verifier.replay_corpus import compare, operator_model_cases, replay_and_catch_an_edit
from tests.verifier.stage_b_models import ModelCase
from tests.verifier.stage_c_models import STAGE_C_FLOAT_OPERATORS, gelu_cases, scalar, stage_c_cases
from tests.verifier.test_replay_cnn import replay_cases


def test_stage_c_operators_replay_bit_identical(sealverify: Path, tmp_path: Path) -> None:
    assert replay_cases(sealverify, tmp_path, stage_c_cases) >= STAGE_C_FLOAT_OPERATORS


def test_gelu_in_both_modes_replays_bit_identical_and_an_edited_step_is_caught(sealverify: Path, tmp_path: Path) -> None:
    """Gelu, approximate "none" and "tanh", each correctly rounded as a whole function: subnormal results, the
    underflow to -0, -inf (NaN), the cutoff from which the result is x; on two seeds, a log of each with a
    step's digest edited, which both replays name at its line."""
    cases = operator_model_cases(tmp_path, seeds=2, families=(gelu_cases,))
    problems, _, _ = compare(sealverify, cases, tmp_path)
    assert not problems, "\n".join(problems)
    assert [c.differing_line is not None for c in cases] == [False, True, False]


def test_gelu_on_other_float_types_is_refused_by_name(sealverify: Path, tmp_path: Path) -> None:
    """numerics.md defines Gelu in every float type; sealverify replay runs float32 and names the others."""
    def other_types(_: np.random.Generator) -> list[ModelCase]:
        cases = []
        for dtype, proto in ((np.float64, TensorProto.DOUBLE), (np.float16, TensorProto.FLOAT16)):
            model = make_model([helper.make_node("Gelu", ["x"], ["y"], name="gelu")],
                               [helper.make_tensor_value_info("x", proto, [3])],
                               [helper.make_tensor_value_info("y", proto, None)], opset=20)
            cases.append((np.dtype(dtype).name, model, {"x": np.array([-1.0, 0.5, 3.0], dtype=dtype)}))
        return cases

    recorded = [c for c in operator_model_cases(tmp_path, seeds=1, families=(other_types,)) if c.differing_line is None]
    for case, dtype in zip(recorded, ("<f8", "<f2"), strict=True):
        done = subprocess.run([str(sealverify), *case.args()], capture_output=True, text=True, check=False)
        assert done.returncode == 2 and f"Gelu on {dtype}" in done.stderr, done.stderr


def test_pow_with_a_constant_exponent_of_one_half_keeps_ieee_special_cases(tmp_path: Path) -> None:
    """pow(-0, 0.5) = +0 and pow(-inf, 0.5) = +inf (IEEE 754, numerics.md 3.3), also where the exponent is one
    value broadcast: NumPy's power takes a stride-0 exponent of 0.5 as sqrt (-0 and NaN there), which
    sealverify's replay of stage (c) found."""
    x = np.array([-0.0, -np.inf, 0.0, 4.0, -4.0], dtype=np.float32)
    nodes = [helper.make_node("Pow", ["x", "half"], ["y"], name="root")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [scalar("half", 0.5)])
    path = tmp_path / "pow.onnx"
    onnx.save(model, str(path))
    (y,) = Session(str(path)).run(None, {"x": x})
    expected = np.array([0.0, np.inf, 0.0, 2.0, np.nan], dtype=np.float32)
    assert y.tobytes() == expected.tobytes()


def test_reduce_max_and_min_of_signed_zeros_do_not_depend_on_the_row_length(tmp_path: Path) -> None:
    """Of zeros, ReduceMax gives +0 where the slice holds one and ReduceMin -0 (IEEE 754-2019's maximum and
    minimum), whatever zero NumPy's SIMD lanes meet last: sealverify's replay of stage (c) found rows of 16
    and more that gave the other zero."""
    rows = np.random.default_rng(0).choice(np.array([0.0, -0.0], dtype=np.float32), size=(64, 24))
    nodes = [helper.make_node("ReduceMax", ["x"], ["hi"], axes=[1]), helper.make_node("ReduceMin", ["x"], ["lo"], axes=[1])]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(rows.shape))],
                       [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("hi", "lo")])
    path = tmp_path / "reduce.onnx"
    onnx.save(model, str(path))
    hi, lo = Session(str(path)).run(None, {"x": rows})
    assert np.array_equal(np.signbit(hi.reshape(-1)), np.signbit(rows).all(axis=1))
    assert np.array_equal(np.signbit(lo.reshape(-1)), np.signbit(rows).any(axis=1))


@pytest.mark.parametrize("length", [1, 16, 17, 18, 33, 34, 49, 65, 66, 257])
def test_global_max_pool_of_signed_zeros_does_not_depend_on_the_plane_length(tmp_path: Path, length: int) -> None:
    """GlobalMaxPool orders -0 below +0 as ReduceMax does (+0 where the plane holds one): sealverify's replay
    of magika found planes of these lengths where the reference kept whichever zero NumPy met last."""
    planes = np.random.default_rng(length).choice(np.array([0.0, -0.0], dtype=np.float32), size=(8, 4, length))
    planes[0] = -0.0  # a plane of -0 alone stays -0
    model = make_model([helper.make_node("GlobalMaxPool", ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(planes.shape))],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "pool.onnx"
    onnx.save(model, str(path))
    (y,) = Session(str(path)).run(None, {"x": planes})
    assert np.array_equal(np.signbit(y.reshape(8, 4)), np.signbit(planes).all(axis=2))
    assert not y.any()


def test_minilm_in_float32_replays_bit_identical_and_an_edited_step_is_caught(sealverify: Path, tmp_path: Path) -> None:
    """all-MiniLM-L6-v2 in float32 (exported from the int8 model's dequantized weights) on real sentences: 220
    steps (embeddings Gather, LayerNormalization, MatMul, Softmax, Erf, the shape subgraph), and a copy of the
    log with the first Erf step's digest edited, caught at that step."""
    model = onnx.load(str(require_material(minilm_fp32_path)))
    out = replay_and_catch_an_edit(sealverify, tmp_path, model, zoo.minilm_inputs(), "Erf")
    assert "bit-identical: 220 step(s)" in out


def test_the_float32_minilm_agrees_with_the_int8_model_and_onnxruntime() -> None:
    """The export computes what the int8 model computes (which dequantizes its weights to float32 in the graph:
    the same values up to float32 rounding order), and sealtrace's reference agrees with ONNX Runtime."""
    path = require_material(minilm_fp32_path)
    feeds = zoo.minilm_inputs()
    ours = onnxruntime.InferenceSession(str(path)).run(None, feeds)[0]
    int8 = onnxruntime.InferenceSession(str(zoo.model("minilm-int8").path)).run(None, feeds)[0]
    (reference,) = Session(str(path)).run(None, feeds)
    assert ours.shape == int8.shape == (2, 15, 384)
    scale = max(1.0, float(np.abs(ours).max()))
    assert float(np.abs(ours - int8).max()) / scale < 1e-4
    assert float(np.abs(reference - ours).max()) / scale < 1e-4
