"""Runs as in-toto attestations: `audit attest` writes a DSSE envelope that securesystemslib's DSSE
code verifies with the public key, and `audit verify-attestation` checks it against the log."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey

from sealtrace.cli import main
from sealtrace.jsonschemas import load_schema, validator
from sealtrace.provenance.attest import PREDICATE_TYPE, SCHEMA
from tests.container.conftest import tiny_model


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sealed model's audit log, an Ed25519 and an ECDSA key."""
    w = tmp_path_factory.mktemp("attest")
    onnx.save(tiny_model(), w / "m.onnx")
    np.save(w / "x.npy", np.ones((1, 2), np.float32))
    for argv in (
        ["seal", str(w / "m.onnx"), "-o", str(w / "m.seal")],
        ["run", str(w / "m.seal"), "--input", f"x={w / 'x.npy'}", "--audit", str(w / "run.jsonl")],
        ["keygen", "-o", str(w / "ed.pem")],
        ["keygen", "--algorithm", "ecdsa-p256", "-o", str(w / "ec.pem")],
    ):
        assert main(argv) == 0, argv
    return w


def _payload(envelope: dict) -> dict:
    return json.loads(base64.b64decode(envelope["payload"]))


@pytest.mark.parametrize("kind", ["ed", "ec"])
def test_securesystemslib_verifies_the_envelope(run: Path, tmp_path: Path, kind: str) -> None:
    out = tmp_path / "run.intoto.json"
    assert main(["audit", "attest", str(run / "run.jsonl"), "--key", str(run / f"{kind}.pem"), "-o", str(out),
                 "--ledger-index", "7"]) == 0  # fmt: skip
    document = json.loads(out.read_text())
    keyid = document["signatures"][0]["keyid"]
    key = SSlibKey.from_crypto(load_pem_public_key((run / f"{kind}.pub").read_bytes()), keyid=keyid)
    assert keyid in Envelope.from_dict(copy.deepcopy(document)).verify([key], 1)
    statement = _payload(document)
    assert statement["_type"] == "https://in-toto.io/Statement/v1" and statement["predicateType"] == PREDICATE_TYPE
    log = [json.loads(line) for line in (run / "run.jsonl").read_text().splitlines()]
    header, footer = log[0], log[-1]
    assert statement["subject"] == [{"name": o["name"], "digest": {"sha256": o["digest"]}} for o in footer["outputs"]]
    predicate = statement["predicate"]
    assert validator(load_schema(SCHEMA)).is_valid(predicate)
    assert predicate["audit_log"]["run_digest"] == footer["chain_head"]
    assert predicate["model"]["container_digest"] == header["model"]["container_digest"]
    assert predicate["model"]["plan_digest"] == header["plan_digest"]
    assert predicate["input"][0]["digest"] == {"sha256": header["inputs"][0]["digest"]}
    assert predicate["computation"]["backend"] == "reference" and predicate["profile"]["numerics_spec"] == "1"
    assert predicate["ledger"] == {"index": 7}
    # A changed statement is refused by the same code.
    statement["predicate"]["audit_log"]["run_digest"] = "0" * 64
    document["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    with pytest.raises(VerificationError):
        Envelope.from_dict(document).verify([key], 1)


def test_verify_attestation_against_its_log(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.intoto.json"
    assert main(["audit", "attest", str(run / "run.jsonl"), "--key", str(run / "ec.pem"), "-o", str(out)]) == 0
    argv = ["audit", "verify-attestation", str(out), "--trust", str(run / "ec.pub")]
    assert main([*argv, "--log", str(run / "run.jsonl")]) == 0
    assert "matches" in capsys.readouterr().out
    # Another run's log (same model, other input) is not the one attested: named, exit 1.
    other = tmp_path / "other.jsonl"
    np.save(tmp_path / "y.npy", np.full((1, 2), 2, np.float32))
    assert main(["run", str(run / "m.seal"), "--input", f"x={tmp_path / 'y.npy'}", "--audit", str(other)]) == 0
    capsys.readouterr()
    assert main([*argv, "--log", str(other)]) == 1
    err = _error_line(capsys)
    assert "does not record" in err and "audit_log" in err and "input" in err and "output" in err
    # A log whose chain is broken fails as `audit verify` fails it.
    broken = tmp_path / "broken.jsonl"
    lines = (run / "run.jsonl").read_text().splitlines()
    broken.write_text("\n".join(lines[:2] + lines[3:]) + "\n")
    assert main([*argv, "--log", str(broken)]) == 1
    _error_line(capsys)
    # The wrong key: exit 1; no key: exit 2.
    assert main(["audit", "verify-attestation", str(out), "--trust", str(run / "ed.pub")]) == 1
    assert "not valid for the trusted key" in _error_line(capsys)
    assert main(["audit", "verify-attestation", str(out)]) == 2
    assert "--trust" in _error_line(capsys)


def test_a_signed_statement_of_another_kind_is_bad_input(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = tmp_path / "model.sig"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    assert main(["manifest", "sign", str(tmp_path / "d"), "--key", str(run / "ec.pem"), "-o", str(bundle)]) == 0
    envelope = tmp_path / "envelope.json"
    envelope.write_text(json.dumps(json.loads(bundle.read_text())["dsseEnvelope"]))
    capsys.readouterr()
    assert main(["audit", "verify-attestation", str(envelope), "--trust", str(run / "ec.pub")]) == 2
    assert "predicate type" in _error_line(capsys)


def test_attesting_a_tampered_log_fails(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = (run / "run.jsonl").read_text().splitlines()
    tampered = tmp_path / "t.jsonl"
    tampered.write_text("\n".join([lines[0].replace('"sample_size":8', '"sample_size":9'), *lines[1:]]) + "\n")
    assert tampered.read_text() != (run / "run.jsonl").read_text()
    out = tmp_path / "run.intoto.json"
    assert main(["audit", "attest", str(tampered), "--key", str(run / "ec.pem"), "-o", str(out)]) == 1
    _error_line(capsys)
    assert not out.exists()
    assert main(["audit", "attest", str(run / "run.jsonl"), "--key", str(run / "ec.pem"), "-o", str(out),
                 "--ledger-index", "-1"]) == 2  # fmt: skip
    assert "--ledger-index" in _error_line(capsys)


def test_run_attest_writes_the_attestation_with_the_ledger_index(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log, out = tmp_path / "run.jsonl", tmp_path / "run.intoto.json"
    argv = ["run", str(run / "m.seal"), "--input", f"x={run / 'x.npy'}", "--audit", str(log), "--sign-log", str(run / "ed.pem")]
    assert main([*argv, "--ledger", str(tmp_path / "ledger.db"), "--attest", str(out)]) == 0
    assert "attestation" in capsys.readouterr().out
    from sealtrace.ledger import Ledger

    with Ledger.open(str(tmp_path / "ledger.db"), readonly=True) as ledger:
        ((index, record),) = ledger.records()
    assert _payload(json.loads(out.read_text()))["predicate"]["ledger"] == {"index": index, "record_id": record["id"]}
    assert main(["audit", "verify-attestation", str(out), "--trust", str(run / "ed.pub"), "--log", str(log)]) == 0
    # Without a key to sign it: bad input, before the run.
    assert main(["run", str(run / "m.seal"), "--random-inputs", "--audit", str(tmp_path / "b.jsonl"), "--attest", str(tmp_path / "b.json")]) == 2
    assert "--sign-log" in _error_line(capsys)
    assert not (tmp_path / "b.jsonl").exists()


def test_a_record_without_its_log_has_no_attestation(run: Path, tmp_path: Path) -> None:
    from sealtrace.ledger import Ledger
    from sealtrace.provenance.attest import NotAttestableError, attest_record
    from sealtrace.signing import load_signing_key

    store = tmp_path / "ledger.db"
    base = ["run", str(run / "m.seal"), "--input", f"x={run / 'x.npy'}", "--ledger", str(store)]
    assert main([*base, "--audit", str(tmp_path / "run.jsonl")]) == 0
    assert main(base) == 0  # an io record: digests only
    key = load_signing_key(run / "ed.pem")
    with Ledger.open(str(store)) as ledger:
        (_, full), (_, io) = ledger.records()
        assert attest_record(ledger, full["id"], key).run_digest == full["trail"]
        with pytest.raises(NotAttestableError, match="--audit io"):
            attest_record(ledger, io["id"], key)
        ledger.prune(older_than=-60)  # retention removed the trail
        with pytest.raises(NotAttestableError, match="audit log is gone"):
            attest_record(ledger, full["id"], key)
