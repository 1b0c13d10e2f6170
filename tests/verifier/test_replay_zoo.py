"""``sealverify replay`` of two more real models of the zoo on their real inputs: the Magika file-type classifier
(int32 bytes; Exp, Reciprocal, Max, GlobalMaxPool on a 3-D input) and the int8 all-MiniLM-L6-v2 (three int64
inputs; And, GatherND, GreaterOrEqual, IsNaN, Max on int64), each recorded by sealtrace and replayed bit for bit,
with a copy of each log with one step's digest edited, caught at that step."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from sealtrace import Session, zoo
from sealtrace.audit import audited_run
from sealtrace.container import seal_model
from tests.conftest import require_material
from tests.verifier.replay_corpus import edit_step_digest


@pytest.mark.parametrize(("key", "steps", "edited_op"), [("magika", 95, "GlobalMaxPool"), ("minilm-int8", 385, "GatherND")])
def test_zoo_model_replays_bit_identical_and_an_edited_step_is_caught(
        sealverify: Path, tmp_path: Path, key: str, steps: int, edited_op: str) -> None:
    material = zoo.model(key)
    path = require_material(lambda: material.path)
    container, log, npz = tmp_path / "model.seal", tmp_path / "run.jsonl", tmp_path / "feeds.npz"
    seal_model(path, container)
    feeds = material.inputs()
    audited_run(Session(str(container)), feeds, audit=log)
    np.savez(npz, **feeds)
    command = [str(sealverify), "replay", str(log), "--container", str(container), "--inputs", str(npz)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert f"bit-identical: {steps} step(s)" in done.stdout
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    step_line = next(i for i, r in enumerate(lines, 1) if r.get("op_type") == edited_op)
    edited = tmp_path / "edited.jsonl"
    edit_step_digest(log, edited, step_line)
    command[2] = str(edited)
    caught = subprocess.run([*command, "--json"], capture_output=True, text=True, check=False)
    assert caught.returncode == 1, caught.stderr
    assert json.loads(caught.stdout)["failures"][0]["where"] == step_line
