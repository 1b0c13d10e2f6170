"""Runs as in-toto attestations: an audit log restated as an in-toto Statement v1 in a DSSE envelope.

The Statement's subjects are the run's graph outputs with their digests; its predicate
(``PREDICATE_TYPE``, schema src/sealtrace/schemas/run-attestation.schema.json) names what ran
(container and Plan digests), on what (input digests), how (backend, device, numerics), where (host
facts), and the audit log's run digest that binds it all to the log. Only a log that verifies is
attested, and ``verify_attestation`` given the log checks the two still agree.

One builder, :func:`attest_run`, over a verified log however it was read: a file
(:func:`attest_log`: ``audit attest``, ``run --attest``) or the trail a ledger stores for a record
(:func:`attest_record`: ``batch --attest``, ``serve --attest-key``), which adds the record's index.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from sealtrace.audit.log import parse_lines
from sealtrace.audit.verify import AuditVerification, verify_lines, verify_log
from sealtrace.errors import CheckFailedError, InputError
from sealtrace.jsonschemas import load_schema, validator
from sealtrace.ledger import Ledger, LedgerCheckError, NotInLedgerError
from sealtrace.outputs import atomic_output, check_output
from sealtrace.provenance.dsse import (
    ProvenanceFormatError,
    envelope,
    open_envelope,
    read_json,
    statement_bytes,
    trusted,
)
from sealtrace.signing import PrivateKey, key_id, load_signing_key

PREDICATE_TYPE = "https://sealtrace.dev/attestation/run/v1"
SCHEMA = "run-attestation.schema.json"


class AttestationMismatchError(CheckFailedError):
    """An attestation that does not state what its audit log records (exit 1)."""


class NotAttestableError(NotInLedgerError):
    """A ledger record with no audit log to attest (an ``io`` or ``deferred`` record, or its trail
    removed by retention): there is no attestation of it (HTTP 404, exit 2)."""


def _tensor(entry: dict[str, Any], algorithm: str) -> dict[str, Any]:
    described = {"name": entry["name"], "digest": {algorithm: entry["digest"]}}
    return described | {k: entry[k] for k in ("kind", "dtype", "shape") if k in entry}


def _statement_parts(result: AuditVerification, ledger: dict[str, Any] | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The subjects and predicate that a verified log's records say (``ledger``: where it is recorded)."""
    header, footer = result.header or {}, result.footer or {}
    algorithm = result.digest_algorithm
    backend = header.get("backend", {})
    numerics = backend.get("numerics") or {}
    model = header.get("model", {})
    outputs = [_tensor(o, algorithm) for o in footer.get("outputs", [])]
    predicate: dict[str, Any] = {
        "model": {"container_digest": model.get("container_digest"), "plan_digest": header["plan_digest"]}
        | {k: model[k] for k in ("kind", "sha256") if k in model},
        "input": [_tensor(i, algorithm) for i in header.get("inputs", [])],
        "computation": {
            "backend": backend.get("name"),
            "backend_version": str(backend.get("version")),
            "device": backend.get("device"),
            "sealtrace_version": header.get("sealtrace_version"),
        },
        "profile": {"numerics_spec": numerics.get("spec"), "numerics_mode": numerics.get("mode")},
        "output": outputs,
        "host": header.get("host", {}),
        "audit_log": {
            "run_digest": result.run_digest,
            "digest_algorithm": algorithm,
            "run_id": header.get("run_id"),
            "format": header.get("format"),
            "records": len(result.records),
            "started": header.get("started"),
            "finished": footer.get("finished"),
        },
    }
    if ledger is not None:
        predicate["ledger"] = ledger
    subjects = [{"name": o["name"], "digest": o["digest"]} for o in outputs]
    return subjects, predicate


@dataclass(frozen=True)
class Attestation:
    """A run's signed in-toto attestation: the DSSE envelope and what it states."""

    envelope: dict[str, Any]
    run_digest: str
    subjects: int
    signed_by: str

    def document(self) -> bytes:
        """The envelope as written to a file or sent over HTTP (JSON, indent 2, its keys in order)."""
        return json.dumps(self.envelope, indent=2, sort_keys=True).encode("utf-8") + b"\n"

    def write(self, path: str | os.PathLike[str], force: bool = False) -> None:
        with atomic_output(path, force=force) as f:
            f.write(self.document())


def attest_run(
    result: AuditVerification, key: PrivateKey, *, ledger_index: int | None = None, record_id: str | None = None
) -> Attestation:
    """The attestation of a verified audit log (``result``: :func:`~sealtrace.audit.verify.verify_log`
    or ``verify_lines`` on a log's bytes), with the ledger index and record id where it is recorded.
    Raises :class:`~sealtrace.audit.errors.AuditCheckError` (exit 1) when the log did not verify:
    what is attested is only ever a log that verifies."""
    result.raise_if_failed()
    ledger = None if ledger_index is None else {"index": ledger_index} | ({"record_id": record_id} if record_id else {})
    subjects, predicate = _statement_parts(result, ledger)
    if not subjects:
        raise InputError(f"{result.path}: the run has no graph outputs to attest")
    signed = envelope(statement_bytes(subjects, PREDICATE_TYPE, predicate), key)
    return Attestation(signed, str(result.run_digest), len(subjects), key_id(key.public_key()))


def attest_log(
    log: str | os.PathLike[str],
    key_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    *,
    ledger_index: int | None = None,
    record_id: str | None = None,
    force: bool = False,
) -> Attestation:
    """Verify the log file ``log`` (exit 1 if it does not) and write its run as a signed in-toto
    attestation at ``out_path``."""
    check_output(out_path, force, "-o")
    if ledger_index is not None and ledger_index < 0:
        raise InputError(f"--ledger-index {ledger_index}: must be 0 or more")
    key = load_signing_key(key_path)
    attestation = attest_run(verify_log(log), key, ledger_index=ledger_index, record_id=record_id)
    attestation.write(out_path, force)
    return attestation


def attest_record(ledger: Ledger, record_id: str, key: PrivateKey) -> Attestation:
    """The attestation of a ledger record's run, from the audit log the ledger stores as its trail,
    with the record's index. Raises :class:`NotAttestableError` for a record that keeps no audit log
    (``io`` and ``deferred`` records: their evidence is digests, not a log), and for one whose trail
    retention removed."""
    index, record = ledger.record(record_id)
    if record["trail"] is None:
        raise NotAttestableError(f"record {record_id} has no audit log to attest: {_why_no_log(record)}")
    try:
        log = ledger.trail(record["trail"])
    except NotInLedgerError as exc:
        raise NotAttestableError(f"record {record_id}: its audit log is gone ({exc})") from None
    result = verify_lines(parse_lines(log), f"{ledger.store.location}: trail of record {record_id}")
    if result.ok and result.run_digest != record["trail"]:
        raise LedgerCheckError([f"{result.path}: run digest {result.run_digest}, the record names {record['trail']}"])
    return attest_run(result, key, ledger_index=index, record_id=record_id)


def _why_no_log(record: dict[str, Any]) -> str:
    if record["kind"] == "replay":
        return "it records a replay that could not be made"
    if record["audit"] == "deferred":
        return (f"its answer came from {record['backend']['name']} with input and output digests only "
                "(--audit deferred); the replay record that links to it attests the reference run of its inputs")
    return f"it was recorded with --audit {record['audit']} (input and output digests only)"


@dataclass(frozen=True)
class VerifiedAttestation:
    run_digest: str
    outputs: list[str]
    signed_by: str
    log_checked: bool


def verify_attestation(
    path: str | os.PathLike[str], trust: tuple[str, ...] | list[str], *, log: str | os.PathLike[str] | None = None
) -> VerifiedAttestation:
    """Check the envelope's signature by a trusted key and the predicate's schema; given ``log``,
    that the log verifies and that the attestation states what it records."""
    where = os.fspath(path)
    keys = trusted(trust, "checking an attestation")
    opened = open_envelope(read_json(path, "DSSE envelope"), keys, where)
    statement = opened.statement
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise ProvenanceFormatError(f"{where}: predicate type {statement.get('predicateType')!r}, not {PREDICATE_TYPE}")
    errors = sorted(validator(load_schema(SCHEMA)).iter_errors(statement["predicate"]), key=lambda e: list(e.path))
    if errors:
        at = "/".join(str(p) for p in errors[0].path) or "(top)"
        raise ProvenanceFormatError(f"{where}: the predicate does not follow its schema at {at}: {errors[0].message}")
    predicate = statement["predicate"]
    if log is not None:
        result = verify_log(log)
        result.raise_if_failed()
        subjects, recorded = _statement_parts(result, predicate.get("ledger"))
        differing = [k for k in ("model", "input", "computation", "profile", "output", "host") if predicate[k] != recorded[k]]
        if predicate["audit_log"] != recorded["audit_log"]:
            differing.insert(0, "audit_log (run digest " + str(predicate["audit_log"].get("run_digest")) + ")")
        if statement["subject"] != subjects:
            differing.append("subject")
        if differing:
            raise AttestationMismatchError(f"{where}: states what {log} does not record: {', '.join(differing)}")
    return VerifiedAttestation(
        predicate["audit_log"]["run_digest"], [str(s.get("name")) for s in statement["subject"] if isinstance(s, dict)],
        opened.signed_by, log is not None,
    )  # fmt: skip
