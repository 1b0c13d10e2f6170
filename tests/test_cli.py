"""The command line: summaries, files, and one-line errors with documented exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from sealtrace.cli import main
from tests.conftest import make_model


@pytest.fixture
def mlp_file(tmp_path: Path, tiny_mlp: onnx.ModelProto) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save(tiny_mlp, path)
    return path


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_run_prints_outputs_and_writes_npz(mlp_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = tmp_path / "x.npy"
    np.save(x, np.ones((1, 4), np.float32))
    out = tmp_path / "out.npz"
    assert main(["run", str(mlp_file), "--input", f"x={x}", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "y" in printed and "float32" in printed and "[1, 3]" in printed
    with np.load(out) as saved:
        assert saved["y"].shape == (1, 3)
    # An existing output file is never overwritten without --force.
    assert main(["run", str(mlp_file), "--input", f"x={x}", "--out", str(out)]) == 2
    assert "exists" in _error_line(capsys)


def test_run_random_inputs_with_seed(mlp_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(mlp_file), "--random-inputs", "--seed", "3"]) == 0
    first = capsys.readouterr().out
    assert main(["run", str(mlp_file), "--random-inputs", "--seed", "3", "--backend", "onnxruntime"]) == 0
    assert "onnxruntime" in capsys.readouterr().out
    assert "y" in first


def test_dynamic_dims_need_dim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    path = tmp_path / "dyn.onnx"
    onnx.save(model, path)
    assert main(["run", str(path), "--random-inputs"]) == 2
    assert "--dim batch=SIZE" in _error_line(capsys)
    assert main(["run", str(path), "--random-inputs", "--dim", "batch=2"]) == 0


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["run", "{missing}"], "no such file"),
        (["run", "{junk}"], "not a valid ONNX model"),
        (["run", "{truncated}"], "not a valid ONNX model"),
        (["run", "{model}", "--input", "nope={x}"], "unknown input 'nope'"),
        (["run", "{model}", "--input", "x={x64}"], "dtype float64"),
        (["run", "{model}", "--input", "x={wrong_shape}"], "axis 1"),
        (["run", "{model}", "--input", "x"], "expected NAME=VALUE"),
        (["run", "{model}", "--input", "x={junk}"], "not a readable .npy"),
        (["run", "{unsupported}", "--random-inputs"], "unsupported node"),
        (["run", "{model}", "--backend", "nonsense", "--random-inputs"], "unknown backend"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    args: list[str], expect: str, mlp_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00garbage\xff" * 10)
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(mlp_file.read_bytes()[:-40])
    np.save(tmp_path / "x.npy", np.ones((1, 4), np.float32))
    np.save(tmp_path / "x64.npy", np.ones((1, 4), np.float64))
    np.save(tmp_path / "wrong.npy", np.ones((1, 7), np.float32))
    unsupported = tmp_path / "unsupported.onnx"
    nodes = [helper.make_node("NoSuchOp", ["x"], ["y"], name="mystery")]
    onnx.save(
        make_model(nodes, [helper.make_tensor_value_info("x", 1, [1])], [helper.make_tensor_value_info("y", 1, [1])]),
        unsupported,
    )
    names = {
        "missing": tmp_path / "missing.onnx",
        "junk": junk,
        "truncated": truncated,
        "model": mlp_file,
        "x": tmp_path / "x.npy",
        "x64": tmp_path / "x64.npy",
        "wrong_shape": tmp_path / "wrong.npy",
        "unsupported": unsupported,
    }
    argv = [a.format(**{k: str(v) for k, v in names.items()}) for a in args]
    assert main(argv) == 2
    assert expect in _error_line(capsys)


def test_usage_error_exit_2_without_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sealtrace", "run"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "Missing argument" in done.stderr


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["run"], "sealtrace run: Missing argument 'MODEL'"),
        (["run", "{dir}"], "sealtrace run: Invalid value for 'MODEL'"),
        (["verify", "x.seal", "--no-such-option"], "No such option '--no-such-option'"),
        (["no-such-verb"], "No such command 'no-such-verb'"),
        (["audit", "show", "log.jsonl", "--limit", "many"], "sealtrace audit show: Invalid value for '--limit'"),
    ],
)
def test_usage_errors_are_one_line_naming_the_verb(
    argv: list[str], expect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # click's own screen is four lines (usage, hint, blank, error); sealtrace's errors are one.
    assert main([a.format(dir=tmp_path) for a in argv]) == 2
    line = _error_line(capsys)
    assert line.startswith("sealtrace: error: ") and expect in line and "--help" in line


def test_names_from_the_model_are_printed_not_parsed_as_markup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An output named like rich markup ('[/y]') was an internal error (a MarkupError) after the run.
    model = make_model(
        [helper.make_node("Relu", ["x"], ["[/y]"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("[/y]", TensorProto.FLOAT, [1, 2])],
    )
    path = tmp_path / "[bold]m.onnx"
    onnx.save(model, path)
    assert main(["run", str(path), "--random-inputs"]) == 0
    assert "[/y]" in capsys.readouterr().out


def test_an_output_directory_gone_during_the_run_is_bad_input(
    mlp_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    from sealtrace.cli import run as run_module

    out_dir = tmp_path / "out"
    out_dir.mkdir()
    real = run_module.write_npz_atomically

    def remove_then_write(path: Path, arrays: object, force: bool = True) -> None:
        shutil.rmtree(out_dir)  # as if someone removed it while the model ran
        real(path, arrays, force=force)  # type: ignore[arg-type]

    monkeypatch.setattr(run_module, "write_npz_atomically", remove_then_write)
    assert main(["run", str(mlp_file), "--random-inputs", "--out", str(out_dir / "y.npz")]) == 2
    assert "does not exist" in _error_line(capsys)
