"""`sealtrace inspect MODEL.seal --cyclonedx`: a CycloneDX 1.6 ML-BOM that cyclonedx-python-lib's
strict JSON schema validation accepts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import onnx
import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from sealtrace.cli import main
from tests.container.conftest import tiny_model


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A signed container, an artifact compiled (and bound) from it, and another container."""
    w = tmp_path_factory.mktemp("bom")
    onnx.save(tiny_model(), w / "m.onnx")
    other = tiny_model()
    other.graph.name = "other"
    onnx.save(other, w / "other.onnx")
    for argv in (
        ["keygen", "-o", str(w / "k.pem")],
        ["seal", str(w / "m.onnx"), "-o", str(w / "m.seal"), "--sign", str(w / "k.pem")],
        ["seal", str(w / "other.onnx"), "-o", str(w / "other.seal")],
        ["compile", str(w / "m.seal"), "--level", "basic", "-o", str(w / "m.opt.onnx")],
    ):
        assert main(argv) == 0, argv
    return w


def _bom(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    capsys.readouterr()
    assert main(["inspect", *argv, "--cyclonedx"]) == 0
    text = capsys.readouterr().out
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    return json.loads(text)


def _output(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def _properties(component: dict) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for p in component["properties"]:
        found.setdefault(p["name"], []).append(p["value"])
    return found


def test_the_bom_passes_cyclonedx_validation(sealed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seal = sealed / "m.seal"
    bom = _bom(capsys, str(seal), "--trust", str(sealed / "k.pub"), "--artifact", str(sealed / "m.opt.onnx"))
    assert bom["specVersion"] == "1.6"
    model = bom["metadata"]["component"]
    assert model["type"] == "machine-learning-model"
    assert model["hashes"] == [{"alg": "SHA-256", "content": hashlib.sha256(seal.read_bytes()).hexdigest()}]
    header = json.loads(_output(capsys, "inspect", str(seal), "--json"))
    props = _properties(model)
    assert props["sealtrace:container_digest"] == [header["container_digest"]]
    assert props["sealtrace:plan_digest"] == [header["plan_digest"]]
    assert props["sealtrace:opset:ai.onnx"] == ["17"]
    assert props["sealtrace:signer_key_id"] == [s["key_id"] for s in header["signatures"]]
    assert model["modelCard"]["modelParameters"] == {"inputs": [{"format": "x: float [1, 2]"}],
                                                     "outputs": [{"format": "out: float [1, 3]"}]}  # fmt: skip
    (artifact,) = bom["components"]
    assert artifact["name"] == "m.opt.onnx"
    assert {"ref": artifact["bom-ref"], "dependsOn": [model["bom-ref"]]} in bom["dependencies"]
    # Deterministic: the same container and artifacts give the same document.
    again = _bom(capsys, str(seal), "--trust", str(sealed / "k.pub"), "--artifact", str(sealed / "m.opt.onnx"))
    assert again == bom


def test_what_the_bom_cannot_vouch_for_is_refused(sealed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # An artifact bound to another container: exit 1, named.
    assert main(["inspect", str(sealed / "other.seal"), "--cyclonedx", "--artifact", str(sealed / "m.opt.onnx")]) == 1
    assert "bound to container" in capsys.readouterr().err
    # A damaged container: exit 1 (the BOM states verified hashes only).
    damaged = tmp_path / "d.seal"
    data = bytearray((sealed / "m.seal").read_bytes())
    data[-20] ^= 1
    damaged.write_bytes(bytes(data))
    assert main(["inspect", str(damaged), "--cyclonedx"]) == 1
    assert capsys.readouterr().out == ""
    # --artifact without --cyclonedx: bad input.
    assert main(["inspect", str(sealed / "m.seal"), "--artifact", str(sealed / "m.opt.onnx")]) == 2
    assert "--cyclonedx" in capsys.readouterr().err
