"""Replay: an honest log replays bit-identical; a changed model names the first differing step."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from sealtrace.audit import AuditCheckError, replay_log
from sealtrace.container import seal_model
from sealtrace.errors import InputError
from tests.audit.conftest import MLP_INPUT, loop_model, mlp_model


def changed(model: onnx.ModelProto, tensor: str, factor: float) -> onnx.ModelProto:
    """``model`` with one initializer scaled by ``factor``."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for init in model.graph.initializer:
        if init.name == tensor:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(factor), tensor))
    return model


def test_honest_replay_is_bit_identical(mlp_path: Path, mlp_log: Path) -> None:
    report = replay_log(mlp_log, mlp_path)  # the input comes back from the log's sample
    assert report.identical, report.summary()
    assert report.steps_logged == report.steps_replayed == 3
    assert report.notes == []
    assert replay_log(mlp_log, mlp_path, MLP_INPUT).identical


def test_honest_replay_with_subgraphs(record_log: Callable[..., Path], tmp_path: Path) -> None:
    onnx.save(loop_model(), tmp_path / "loop.onnx")
    log = record_log(tmp_path / "loop.onnx", {"x": np.array([1.0, -2.0], np.float32)})
    report = replay_log(log, tmp_path / "loop.onnx")
    assert report.identical and report.steps_replayed == 11


@pytest.mark.parametrize(("tensor", "step", "line"), [("w", "matmul", 2), ("b", "add", 3)])
def test_replay_against_changed_onnx_names_first_differing_step(
    mlp_log: Path, tmp_path: Path, tensor: str, step: str, line: int
) -> None:
    other = tmp_path / "changed.onnx"
    onnx.save(changed(mlp_model(), tensor, 1.5), other)
    report = replay_log(mlp_log, other)
    assert not report.identical
    first = report.first_difference
    assert first is not None and (first.name, first.line) == (step, line)
    assert first.differing_inputs == (tensor,)
    assert "value [0] logged" in first.detail and "max |difference|" in first.detail
    assert any("the log names ONNX file sha256" in note for note in report.notes)
    with pytest.raises(AuditCheckError, match=f"line {line}: step '{step}'"):
        report.raise_if_different()


def test_replay_against_resealed_container_names_first_differing_step(
    mlp_path: Path, record_log: Callable[..., Path], tmp_path: Path
) -> None:
    sealed = tmp_path / "mlp.seal"
    seal_model(mlp_path, sealed)
    log = record_log(sealed)
    assert replay_log(log, sealed).identical
    onnx.save(changed(mlp_model(), "b", -1.0), tmp_path / "changed.onnx")
    resealed = tmp_path / "resealed.seal"
    seal_model(tmp_path / "changed.onnx", resealed)
    report = replay_log(log, resealed)
    assert not report.identical
    assert report.first_difference is not None
    assert (report.first_difference.name, report.first_difference.op_type) == ("add", "Add")
    assert report.steps_differing >= 1
    assert any("container digest" in note for note in report.notes)


def test_replay_needs_inputs_the_log_cannot_rebuild(mlp_path: Path, record_log: Callable[..., Path]) -> None:
    log = record_log(mlp_path, sample=2)
    with pytest.raises(InputError, match="give it with --input"):
        replay_log(log, mlp_path)
    assert replay_log(log, mlp_path, MLP_INPUT).identical
    with pytest.raises(InputError, match="not inputs of the logged run"):
        replay_log(log, mlp_path, {**MLP_INPUT, "extra": MLP_INPUT["x"]})


def test_replay_with_other_input_notes_it(mlp_path: Path, mlp_log: Path) -> None:
    report = replay_log(mlp_log, mlp_path, {"x": MLP_INPUT["x"] * 2})
    assert not report.identical
    assert any("not the logged input" in note for note in report.notes)


def test_tampered_log_is_not_replayed(mlp_path: Path, mlp_log: Path) -> None:
    lines = mlp_log.read_bytes().splitlines(keepends=True)
    mlp_log.write_bytes(b"".join(lines[:2] + lines[3:]))
    with pytest.raises(AuditCheckError, match="line 3"):
        replay_log(mlp_log, mlp_path)


def test_replay_of_another_model_file_fails_even_when_bit_identical(
    mlp_path: Path, mlp_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Same weights and graph, another file (a doc string differs): every step matches, but it is not
    # the logged model, so it is no replay of the log (exit 0 before).
    from sealtrace.cli import main

    other = mlp_model()
    other.doc_string = "re-exported"
    onnx.save(other, tmp_path / "other.onnx")
    report = replay_log(mlp_log, tmp_path / "other.onnx")
    assert report.identical and not report.passed and report.not_logged == ["a model"]
    with pytest.raises(AuditCheckError, match="other than the logged one"):
        report.raise_if_different()
    assert main(["replay", str(mlp_log), "--container", str(tmp_path / "other.onnx")]) == 1
    captured = capsys.readouterr()
    assert "note: the log names ONNX file sha256" in captured.out
    assert "bit-identical" in captured.err and "other than the logged one" in captured.err
    assert main(["replay", str(mlp_log), "--container", str(mlp_path)]) == 0


def test_replay_with_another_input_fails_even_when_every_step_matches(mlp_path: Path, record_log: Callable[..., Path]) -> None:
    # +0.0 and -0.0 hash differently but multiply alike: every step output matches the log.
    x = np.array([[0.0, -1.0, 2.0, 0.25]], np.float32)
    log = record_log(mlp_path, {"x": x})
    report = replay_log(log, mlp_path, {"x": np.array([[-0.0, -1.0, 2.0, 0.25]], np.float32)})
    assert report.identical and not report.passed and report.not_logged == ["input 'x'"]
    with pytest.raises(AuditCheckError, match="input 'x'"):
        report.raise_if_different()


def test_replay_of_a_changed_model_says_so_in_its_error(mlp_log: Path, tmp_path: Path) -> None:
    onnx.save(changed(mlp_model(), "w", 1.5), tmp_path / "changed.onnx")
    with pytest.raises(AuditCheckError, match=r"line 2: step 'matmul'.*a model other than the logged one"):
        replay_log(mlp_log, tmp_path / "changed.onnx").raise_if_different()


def test_a_rechained_log_with_a_huge_input_shape_is_bad_input(mlp_path: Path, mlp_log: Path) -> None:
    # Unsigned logs can be rebuilt whole; a shape whose product overflows int64 to 0 matched an
    # empty sample and made the rebuild fail with an internal error.
    import json

    from sealtrace.audit.records import seal_record

    records = [json.loads(line) for line in mlp_log.read_bytes().splitlines()]
    records[0]["inputs"][0].update(shape=[2**32, 2**32], sample=[])
    lines, prev = [], "0" * 64
    for seq, record in enumerate(records):
        lines.append(seal_record(record, seq, prev) + b"\n")
        prev = record["chain_head" if record["type"] == "footer" else "digest"]
    mlp_log.write_bytes(b"".join(lines))
    with pytest.raises(InputError, match="give it with --input"):
        replay_log(mlp_log, mlp_path)
