"""The audit verbs: exit 0 on success, 1 naming the first bad record, 2 on bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sealtrace.cli import main
from sealtrace.container import seal_model
from sealtrace.signing import generate_keypair
from tests.audit.conftest import MLP_INPUT


def test_run_verify_show_replay(mlp_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sealed = tmp_path / "mlp.seal"
    seal_model(mlp_path, sealed)
    private, public = generate_keypair(tmp_path / "k.pem")
    np.save(tmp_path / "x.npy", MLP_INPUT["x"])
    log, cap = tmp_path / "log.jsonl", tmp_path / "cap"
    x = f"x={tmp_path / 'x.npy'}"
    args = ["run", str(sealed), "--input", x, "--audit", str(log), "--sample", "3", "--sign-log", str(private)]
    assert main([*args, "--capture", str(cap)]) == 0
    assert "run digest" in capsys.readouterr().out
    assert (cap / "index.json").exists()
    # An existing log is refused unless --force.
    assert main(args) == 2
    assert "exists" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0
    capsys.readouterr()

    assert main(["audit", "verify", str(log), "--container", str(sealed), "--input", x, "--trust", str(public)]) == 0
    out = capsys.readouterr().out
    assert "verified" in out and "signature valid" in out
    assert main(["audit", "show", str(log)]) == 0
    out = capsys.readouterr().out
    assert "MatMul" in out and "chain intact" in out
    assert main(["replay", str(log), "--container", str(sealed), "--input", x]) == 0
    assert "bit-identical" in capsys.readouterr().out

    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join([lines[0], lines[2], lines[1], *lines[3:]]))
    assert main(["audit", "verify", str(log)]) == 1
    err = capsys.readouterr().err
    assert "line 2" in err and "out of order" in err and err.count("\n") == 1
    assert main(["replay", str(log), "--container", str(sealed)]) == 1


def test_verify_usage_errors_exit_2(mlp_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "verify", str(tmp_path / "absent.jsonl")]) == 2
    assert main(["audit", "verify", str(mlp_log), "--input", "x"]) == 2
    assert main(["replay", str(mlp_log)]) == 2
    assert main(["run", "m.onnx", "--sample", "3"]) == 2
    capsys.readouterr()


def test_wrong_input_exits_1(mlp_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "x.npy", MLP_INPUT["x"] * 2)
    assert main(["audit", "verify", str(mlp_log), "--input", f"x={tmp_path / 'x.npy'}"]) == 1
    assert "input 'x'" in capsys.readouterr().err


def test_show_on_a_damaged_log_shows_the_verified_prefix(mlp_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = mlp_log.read_bytes().splitlines(keepends=True)
    mlp_log.write_bytes(b"".join([*lines[:3], b'{"type":"step","foo":1}\n', b"garbage\n"]))
    assert main(["audit", "show", str(mlp_log)]) == 0
    out = capsys.readouterr().out
    assert "NOT VERIFIED: line 4" in out and "MatMul" in out and "Add" in out
