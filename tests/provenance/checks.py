"""How the tests of batch and serve attestations check one: securesystemslib's DSSE verification with
the public key (code nobody here wrote), then `sealtrace audit verify-attestation` against the log."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.serialization import load_pem_public_key
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from sealtrace.cli import main
from sealtrace.provenance.attest import PREDICATE_TYPE


def checked_statement(document: bytes, public_key: Path, log: bytes, where: Path) -> dict[str, Any]:
    """The in-toto Statement of ``document`` (a DSSE envelope), once both verifiers accepted it with
    ``log``, the audit log it attests (written beside it under ``where``)."""
    envelope = json.loads(document)
    keyid = envelope["signatures"][0]["keyid"]
    key = SSlibKey.from_crypto(load_pem_public_key(public_key.read_bytes()), keyid=keyid)
    assert keyid in Envelope.from_dict(envelope).verify([key], 1)
    where.mkdir(parents=True, exist_ok=True)
    (where / "attestation.json").write_bytes(document)
    (where / "run.jsonl").write_bytes(log)
    argv = ["audit", "verify-attestation", str(where / "attestation.json"), "--trust", str(public_key)]
    assert main([*argv, "--log", str(where / "run.jsonl")]) == 0
    statement: dict[str, Any] = json.loads(base64.b64decode(json.loads(document)["payload"]))
    assert statement["predicateType"] == PREDICATE_TYPE
    return statement
