"""``sealverify replay`` of YOLOv8n (issue 30, stage b): the data-movement, integer, boolean, Cast, Range and
Resize operators its graph needs and ConvTranspose, each in small models at its edges (stage_b_models.py),
and the real detectors (YOLOv8n, PP-OCRv4's) on a real image, recorded by sealtrace and replayed bit for bit by the Go verifier; a log with one
step's digest edited is named at that step by both replays."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from sealtrace import Session, zoo
from sealtrace.audit import audited_run
from sealtrace.container import seal_model
from tests.conftest import make_model, require_material
from tests.verifier.replay_corpus import compare, operator_model_cases, real_model_cases
from tests.verifier.stage_b_models import STAGE_B_SHAPE_OPERATORS, shape_op_cases


def test_shape_operators_replay_bit_identical_and_an_edited_step_is_caught(sealverify: Path, tmp_path: Path) -> None:
    cases = operator_model_cases(tmp_path, seeds=1, families=(shape_op_cases,))
    problems, _, _ = compare(sealverify, cases, tmp_path)
    assert not problems, "\n".join(problems)
    assert sum(c.differing_line is not None for c in cases) == len(cases) // 2
    covered = {n.op_type for _, model, _ in shape_op_cases(np.random.default_rng(0)) for n in model.graph.node}
    assert covered >= STAGE_B_SHAPE_OPERATORS


@pytest.mark.parametrize(("key", "steps"), [("yolov8n", 323), ("ppocr-det", 672)])
def test_real_detectors_replay_bit_identical_on_a_real_image(sealverify: Path, tmp_path: Path, key: str, steps: int) -> None:
    """YOLOv8n, and the PP-OCRv4 text detector (ConvTranspose, Resize, weights in unnamed Constant nodes)."""
    material = zoo.model(key)
    require_material(lambda: zoo.locate(material.package, material.path_in_package))
    require_material(lambda: zoo.image("chelsea"))
    # 160 x 160 (their height and width are dynamic) keeps the test to a few seconds; the corpus runs 320 x 320.
    case = real_model_cases(tmp_path, key, ("chelsea",), random_runs=0, side=160)[0]
    done = subprocess.run([str(sealverify), *(a for a in case.args() if a != "--json")], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert f"bit-identical: {steps} step(s)" in done.stdout


@pytest.mark.parametrize(("key", "steps"), [("ppocr-cls", 566), ("ppocr-rec", 860)])
def test_the_ppocr_classifier_and_recognizer_replay_bit_identical(sealverify: Path, tmp_path: Path, key: str,
                                                                  steps: int) -> None:
    """The other PP-OCR models, on a real image at their own input size: the orientation classifier (Conv,
    BatchNormalization, HardSigmoid) and the SVTR recognizer (MatMul, Softmax, LayerNorm from ReduceMean,
    Pow and Sqrt), which need no operator beyond stages (b) and (c)."""
    material = zoo.model(key)
    require_material(lambda: zoo.locate(material.package, material.path_in_package))
    require_material(lambda: zoo.image("text"))
    case = real_model_cases(tmp_path, key, ("text",), random_runs=0)[0]
    done = subprocess.run([str(sealverify), *(a for a in case.args() if a != "--json")], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert f"bit-identical: {steps} step(s)" in done.stdout


def test_modes_replay_does_not_define_are_refused_by_name(sealverify: Path, tmp_path: Path) -> None:
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 2, 4)
    for name, node, want in (
        ("linear", helper.make_node("Resize", ["x", "", "s"], ["y"], name="r", mode="linear"), "mode linear"),
        ("bfloat16", helper.make_node("Cast", ["x"], ["y"], name="c", to=TensorProto.BFLOAT16), "data type 16"),
    ):
        scales = helper.make_tensor("s", TensorProto.FLOAT, [4], [1, 1, 2, 2])
        model = make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 4])],
                           [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)], [scales])
        container, log, npz = tmp_path / f"{name}.seal", tmp_path / f"{name}.jsonl", tmp_path / f"{name}.npz"
        seal_model(model, container)
        audited_run(Session(str(container)), {"x": x}, audit=log)
        np.savez(npz, x=x)
        done = subprocess.run([str(sealverify), "replay", str(log), "--container", str(container), "--inputs", str(npz)],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 2 and want in done.stderr and "not supported" in done.stderr, done.stderr
