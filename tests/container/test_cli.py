"""``sealtrace seal | verify | inspect | unseal | keygen | run`` on containers: outputs and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sealtrace.cli import main


def test_cli_story(tiny_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = str(tmp_path / "k.pem")
    seal = str(tmp_path / "t.seal")
    assert main(["keygen", "-o", key]) == 0
    assert (tmp_path / "k.pub").exists()
    assert main(["keygen", "-o", key]) == 2  # never overwrites a key
    assert main(["seal", str(tiny_onnx), "-o", seal, "--sign", key]) == 0
    assert main(["seal", str(tiny_onnx), "-o", seal]) == 2  # exists
    assert main(["seal", str(tiny_onnx), "-o", seal, "--sign", key, "--force"]) == 0
    capsys.readouterr()
    assert main(["verify", seal, "--trust", str(tmp_path / "k.pub"), "--require-signature"]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["verify", seal, "--require-signature"]) == 2  # needs --trust
    assert main(["inspect", seal, "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in described["tensors"]] == ["W", "B"]
    assert main(["inspect", seal]) == 0
    assert main(["unseal", seal, "-o", str(tmp_path / "back.onnx")]) == 0
    assert (tmp_path / "back.onnx").read_bytes() == tiny_onnx.read_bytes()
    assert main(["run", seal, "--random-inputs"]) == 0


def test_cli_tampered_container(tiny_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seal = tmp_path / "t.seal"
    assert main(["seal", str(tiny_onnx), "-o", str(seal)]) == 0
    data = bytearray(seal.read_bytes())
    data[-1] ^= 1
    bad = tmp_path / "bad.seal"
    bad.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["verify", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "tensor 'B'" in err and "expected sha256" in err
    assert main(["verify", str(bad), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and [m["name"] for m in report["mismatches"]] == ["B"]
    assert main(["run", str(bad), "--random-inputs"]) == 1  # refused before anything runs
    assert main(["unseal", str(bad), "-o", str(tmp_path / "x.onnx")]) == 1
    assert not (tmp_path / "x.onnx").exists()
    (tmp_path / "junk.seal").write_bytes(b"\x89SEAL\r\n\x1a" + b"\0" * 100)
    assert main(["verify", str(tmp_path / "junk.seal")]) == 2
    assert main(["inspect", str(tiny_onnx)]) == 2  # an ONNX file is not a container
