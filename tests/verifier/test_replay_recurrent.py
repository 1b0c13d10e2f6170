"""``sealverify replay`` of the Silero VAD sequence model (issue 30): its Pad (reflect) and LSTM, each in small
models at its edges, and the model itself on its real input, recorded by sealtrace and replayed bit for bit by
the Go verifier's own kernels."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from sealtrace import Session, zoo
from sealtrace.audit import audited_run
from sealtrace.container import seal_model
from tests.conftest import make_model, require_material
from tests.verifier.recurrent_models import RECURRENT_OPERATORS, recurrent_op_cases
from tests.verifier.replay_corpus import compare, operator_model_cases, replay_and_catch_an_edit


def test_pad_and_lstm_replay_bit_identical_and_an_edited_step_is_caught(sealverify: Path, tmp_path: Path) -> None:
    """Every Pad mode and LSTM variant on two seeds bit-identical; for each model a log with its step's digest
    edited, which both replays name at its line."""
    cases = operator_model_cases(tmp_path, seeds=2, families=(recurrent_op_cases,))
    problems, _, _ = compare(sealverify, cases, tmp_path)
    assert not problems, "\n".join(problems)
    models = recurrent_op_cases(np.random.default_rng(0))
    assert {node.op_type for _, model, _ in models for node in model.graph.node} == RECURRENT_OPERATORS
    assert sum(c.differing_line is not None for c in cases) == len(models)


def test_silero_vad_sequence_replays_bit_identical_and_an_edited_lstm_step_is_caught(sealverify: Path,
                                                                                     tmp_path: Path) -> None:
    """The Silero VAD sequence model on its real input (speech): 63 steps (the STFT's reflect Pad and Conv, the
    LSTM, the shape subgraph); a copy of the log with the LSTM step's digest edited is caught at that step."""
    material = zoo.model("silero-vad-sequence")
    model = onnx.load(str(require_material(lambda: material.path)))
    out = replay_and_catch_an_edit(sealverify, tmp_path, model, material.inputs(), "LSTM")
    assert "bit-identical: 63 step(s)" in out


def test_lstm_with_other_activations_is_refused_by_name(sealverify: Path, tmp_path: Path) -> None:
    """numerics.md defines every activation; sealverify replay runs Sigmoid and Tanh and names the others."""
    x = np.ones((2, 1, 1), dtype=np.float32)
    weights = [helper.make_tensor(name, onnx.TensorProto.FLOAT, [1, 4, 1], [0.5] * 4) for name in ("W", "R")]
    node = helper.make_node("LSTM", ["x", "W", "R"], ["y"], name="lstm", hidden_size=1,
                            activations=["Relu", "Tanh", "Tanh"])
    model = make_model([node], [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 1, 1])],
                       [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], weights)
    container, log, npz = tmp_path / "m.seal", tmp_path / "m.jsonl", tmp_path / "m.npz"
    seal_model(model, container)
    audited_run(Session(str(container)), {"x": x}, audit=log)
    np.savez(npz, x=x)
    done = subprocess.run([str(sealverify), "replay", str(log), "--container", str(container), "--inputs", str(npz)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "activation Relu" in done.stderr, done.stderr
