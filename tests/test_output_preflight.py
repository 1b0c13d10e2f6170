"""`run`'s outputs (--out, --audit, --capture) are checked before the model is even read: a typo in a
directory name fails at once (exit 2, one line), not after the whole run."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

import sealtrace.cli.run as run_verb
from sealtrace.cli import main


@pytest.fixture
def model(tmp_path: Path, tiny_mlp: onnx.ModelProto) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save(tiny_mlp, path)
    return path


@pytest.fixture
def no_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the model was opened before the outputs were checked")

    monkeypatch.setattr(run_verb, "Session", refuse)


@pytest.mark.parametrize(
    ("option", "name"), [("--out", "y.npz"), ("--audit", "log.jsonl"), ("--capture", "captured")]
)
def test_outputs_in_a_missing_directory(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_run: None, option: str, name: str
) -> None:
    missing = tmp_path / "no-such-dir" / name
    # --out was exit 3 after the whole run (FileNotFoundError); --capture created the directories.
    assert main(["run", str(model), "--random-inputs", option, str(missing)]) == 2
    assert capsys.readouterr().err == f"sealtrace: error: {option} {missing}: directory {missing.parent} does not exist\n"
    assert not missing.parent.exists()


@pytest.mark.parametrize(("option", "name"), [("--out", "y.npz"), ("--audit", "log.jsonl")])
def test_existing_outputs_and_directories(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_run: None, option: str, name: str
) -> None:
    existing = tmp_path / name
    existing.write_text("mine\n")
    assert main(["run", str(model), "--random-inputs", option, str(existing)]) == 2
    assert capsys.readouterr().err == f"sealtrace: error: {option} {existing}: file exists (use --force to overwrite)\n"
    assert existing.read_text() == "mine\n"
    directory = tmp_path / ("d.npz" if option == "--out" else "d")
    directory.mkdir()
    assert main(["run", str(model), "--random-inputs", option, str(directory)]) == 2
    # was click's four-line usage error
    assert capsys.readouterr().err == f"sealtrace: error: {option} {directory}: is a directory\n"


def test_capture_into_a_file_or_a_full_directory(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_run: None
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("mine\n")
    assert main(["run", str(model), "--random-inputs", "--capture", str(a_file)]) == 2
    assert capsys.readouterr().err == f"sealtrace: error: --capture {a_file}: exists and is not a directory\n"
    full = tmp_path / "full"
    full.mkdir()
    (full / "x.npy").write_text("mine")
    assert main(["run", str(model), "--random-inputs", "--capture", str(full)]) == 2
    err = capsys.readouterr().err
    assert err == f"sealtrace: error: --capture {full}: directory is not empty (use --force to overwrite)\n"


def test_out_and_audit_cannot_be_one_file(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_run: None) -> None:
    same = tmp_path / "same.npz"
    assert main(["run", str(model), "--random-inputs", "--out", str(same), "--audit", str(same)]) == 2
    assert capsys.readouterr().err == f"sealtrace: error: --audit {same}: the same file as --out\n"


def test_a_run_with_checked_outputs_writes_them(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, log, captured = tmp_path / "y.npz", tmp_path / "log.jsonl", tmp_path / "captured"
    args = ["run", str(model), "--random-inputs", "--out", str(out), "--audit", str(log), "--capture", str(captured)]
    assert main(args) == 0
    assert out.exists() and log.exists() and any(captured.iterdir())
    assert main(args) == 2  # all three exist now
    assert main([*args, "--force"]) == 0
