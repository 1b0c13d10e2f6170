"""Verdicts (``schemas/verdict.schema.json``): sealtrace's --json outputs carry them, named as the docs
say, and sealverify's follow the same schema."""

from __future__ import annotations

import json
import subprocess
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from sealtrace.verdict import binding_failure, proof_failure
from tests.verifier.corpus import Material, sealtrace


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(resources.files("sealtrace").joinpath("schemas", "verdict.schema.json").read_text())
    return schema


def _flipped(path: Path, out: Path, position: int) -> Path:
    blob = bytearray(path.read_bytes())
    blob[position] ^= 1
    out.write_bytes(bytes(blob))
    return out


def _cases(material: Material, tmp_path: Path) -> list[tuple[list[str], int, Any]]:
    """(sealtrace arguments, exit code, the named failure expected) for each verb."""
    m = material
    seal, log = m.containers["signed"], m.logs["signed"]
    return [
        (["verify", str(seal), "--trust", str(m.pub)], 0, None),
        (["verify", str(_flipped(seal, tmp_path / "t.seal", seal.stat().st_size - 1))], 1, ("tensor", "k")),
        (["verify", str(seal), "--trust", str(m.other_pub)], 1, ("signature", "trusted signature")),
        (["audit", "verify", str(log), "--trust", str(m.pub)], 0, None),
        (["audit", "verify", str(_flipped(log, tmp_path / "l.jsonl", 500))], 1, ("line", 1)),
        (["check-binding", str(m.artifacts["file"]), "--container", str(seal), "--trust", str(m.pub)], 0, None),
        (["check-binding", str(m.artifacts["file"]), "--container", str(m.containers["branch"])], 1,
         ("container", "container_digest")),
        (["ledger", "check-proof", str(m.proofs["inclusion-2-7"]), "--trust", str(m.pub)], 0, None),
        (["ledger", "check-proof", str(m.proofs["consistency-3-7"]), "--trust", str(m.other_pub)], 1,
         ("signature", "first")),
    ]


def test_sealtrace_json_outputs_are_verdicts(material: Material, tmp_path: Path) -> None:
    validator = jsonschema.Draft202012Validator(_schema())
    for args, code, named in _cases(material, tmp_path):
        got, out, err = sealtrace(*args, "--json")
        document = json.loads(out)
        validator.validate(document)
        assert (got, document["exit_code"], document["ok"]) == (code, code, code == 0), (args, err)
        if named is not None:
            assert (document["failures"][0]["kind"], document["failures"][0]["where"]) == named, document["failures"]
            assert err.count("\n") == 1  # the error line is still printed, once


def test_sealverify_json_outputs_are_verdicts(sealverify: Path, material: Material, tmp_path: Path) -> None:
    validator = jsonschema.Draft202012Validator(_schema())
    verbs = {"verify": "container", "audit": "audit", "check-binding": "binding", "ledger": "proof"}
    for args, code, named in _cases(material, tmp_path):
        go_args = [verbs[args[0]], *(args[2:] if args[0] in ("audit", "ledger") else args[1:])]
        done = subprocess.run([str(sealverify), *go_args, "--json"], capture_output=True, text=True, check=False)
        document = json.loads(done.stdout)
        validator.validate(document)
        assert done.returncode == document["exit_code"] == code, (go_args, done.stderr)
        if named is not None:
            assert (document["failures"][0]["kind"], document["failures"][0]["where"]) == named


@pytest.mark.parametrize(
    ("message", "named"),
    [
        ("artifact modified: sha256 ab..., the binding says cd...", ("artifact", "artifact")),
        ("artifact refers to external data that its binding does not cover", ("artifact", "artifact")),
        ("bound to another container: 11..., not m.seal (22...)", ("container", "container_digest")),
        ("container fails its check: m.seal: integrity check failed", ("container", "container")),
        ("signature missing: the binding record is not signed", ("signature", "signatures")),
        ("signature untrusted or invalid: no signature verifies with a trusted key", ("signature", "signatures")),
        ("backend version differs: made with ort 1, loading with 2", ("backend", "backend")),
    ],
)
def test_every_binding_failure_is_named(message: str, named: tuple[str, str]) -> None:
    failure = binding_failure(message)
    assert (failure["kind"], failure["where"]) == named


def test_proof_failures_are_named_by_part() -> None:
    assert proof_failure("p.json", "p.json: first: tree head of size 3 is signed by key x")["where"] == "first"
    assert proof_failure("p.json", "p.json: record r is not leaf 2 of the tree")["where"] == "proof"
    assert proof_failure("p.json", "p.json: the tree heads are of different ledgers (a, b)")["where"] == "second"
    assert proof_failure("p.json", "p.json: tree head of size 7 is signed by key k, not by a trusted key")["where"] == "tree_head"
