"""Every file a verb reads or writes, given as a missing file, a directory, an empty file or /dev/zero
(and every output that exists, without --force): exit 2 and one line on stderr, never a traceback,
a hang or a usage screen. Covers keygen, manifest, falsify, falsify-bench, conformance and the
outputs of run, seal and unseal."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from sealtrace.cli import main
from tests.falsify.conftest import VIOLATED, toy_network

BAD = ["missing", "directory", "empty", "dev-zero"]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    onnx.save(toy_network(), tmp_path / "toy.onnx")
    (tmp_path / "p.vnnlib").write_text(VIOLATED)
    (tmp_path / "instances.csv").write_text("toy.onnx,p.vnnlib,1\n")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "a.txt").write_text("a")
    (tmp_path / "adir").mkdir()
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "exists.txt").write_text("mine\n")
    assert main(["manifest", "create", str(tmp_path / "ckpt"), "-o", str(tmp_path / "m.json")]) == 0
    assert main(["seal", str(tmp_path / "toy.onnx"), "-o", str(tmp_path / "toy.seal")]) == 0
    return tmp_path


def _bad(workdir: Path, kind: str) -> str:
    return {
        "missing": str(workdir / "missing.file"),
        "directory": str(workdir / "adir"),
        "empty": str(workdir / "empty"),
        "dev-zero": "/dev/zero",
    }[kind]


READS = {
    "falsify MODEL": lambda w, b: ["falsify", b, str(w / "p.vnnlib")],
    "falsify PROPERTY": lambda w, b: ["falsify", str(w / "toy.onnx"), b],
    "falsify-bench INSTANCES": lambda w, b: ["falsify-bench", b],
    "manifest verify MANIFEST": lambda w, b: ["manifest", "verify", str(w / "ckpt"), b],
    "manifest create --sign": lambda w, b: ["manifest", "create", str(w / "ckpt"), "-o", str(w / "new.json"), "--sign", b],
    "manifest verify --trust": lambda w, b: ["manifest", "verify", str(w / "ckpt"), str(w / "m.json"), "--trust", b],
}


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("verb", list(READS))
def test_bad_input_files(workdir: Path, capsys: pytest.CaptureFixture[str], verb: str, kind: str) -> None:
    code = main(READS[verb](workdir, _bad(workdir, kind)))
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("sealtrace: error: ") and err.count("\n") == 1, err


@pytest.mark.parametrize("kind", ["missing", "file", "dev-zero"])
@pytest.mark.parametrize("verb", ["verify", "create"])
def test_bad_manifest_directories(workdir: Path, capsys: pytest.CaptureFixture[str], verb: str, kind: str) -> None:
    directory = {"missing": str(workdir / "nowhere"), "file": str(workdir / "exists.txt"), "dev-zero": "/dev/zero"}[kind]
    args = [directory, str(workdir / "m.json")] if verb == "verify" else [directory, "-o", str(workdir / "new.json")]
    assert main(["manifest", verb, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sealtrace: error: ") and err.count("\n") == 1, err


WRITES = {
    "keygen -o": lambda w, o: ["keygen", "-o", o],
    "manifest create -o": lambda w, o: ["manifest", "create", str(w / "ckpt"), "-o", o],
    "seal -o": lambda w, o: ["seal", str(w / "toy.onnx"), "-o", o],
    "unseal -o": lambda w, o: ["unseal", str(w / "toy.seal"), "-o", o],
    "run --audit": lambda w, o: ["run", str(w / "toy.onnx"), "--random-inputs", "--audit", o],
    "falsify --result": lambda w, o: ["falsify", str(w / "toy.onnx"), str(w / "p.vnnlib"), "--result", o],
    "falsify --audit": lambda w, o: ["falsify", str(w / "toy.onnx"), str(w / "p.vnnlib"), "--audit", o],
}


@pytest.mark.parametrize("kind", ["exists", "directory", "missing-directory", "dev-zero"])
@pytest.mark.parametrize("verb", list(WRITES))
def test_bad_outputs(workdir: Path, capsys: pytest.CaptureFixture[str], verb: str, kind: str) -> None:
    out = {
        "exists": str(workdir / "exists.txt"),
        "directory": str(workdir / "adir"),
        "missing-directory": str(workdir / "nowhere" / "out.txt"),
        "dev-zero": "/dev/zero",
    }[kind]
    code = main(WRITES[verb](workdir, out))
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("sealtrace: error: ") and err.count("\n") == 1, err
    assert (workdir / "exists.txt").read_text() == "mine\n"


@pytest.mark.parametrize("suffix", [".csv", ".md"])
def test_falsify_bench_existing_out(workdir: Path, capsys: pytest.CaptureFixture[str], suffix: str) -> None:
    out = workdir / f"table{suffix}"
    out.write_text("mine\n")
    assert main(["falsify-bench", str(workdir / "instances.csv"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"sealtrace: error: --out 1 {out}: file exists (use --force to overwrite)\n"
    assert out.read_text() == "mine\n"
