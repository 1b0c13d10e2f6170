"""``sealverify replay`` of two more real models of the zoo on their real inputs: the Magika file-type classifier
(int32 bytes; Exp, Reciprocal, Max, GlobalMaxPool on a 3-D input) and the int8 all-MiniLM-L6-v2 (three int64
inputs; And, GatherND, GreaterOrEqual, IsNaN, Max on int64), each recorded by sealtrace and replayed bit for bit,
with a copy of each log with one step's digest edited, caught at that step."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from sealtrace import zoo
from tests.conftest import require_material
from tests.verifier.replay_corpus import replay_and_catch_an_edit


@pytest.mark.parametrize(("key", "steps", "edited_op"), [("magika", 95, "GlobalMaxPool"), ("minilm-int8", 385, "GatherND")])
def test_zoo_model_replays_bit_identical_and_an_edited_step_is_caught(
        sealverify: Path, tmp_path: Path, key: str, steps: int, edited_op: str) -> None:
    material = zoo.model(key)
    path = require_material(lambda: material.path)
    report = replay_and_catch_an_edit(sealverify, tmp_path, onnx.load(str(path)), material.inputs(), edited_op)
    assert f"bit-identical: {steps} step(s)" in report
