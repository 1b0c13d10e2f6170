"""Verifying an audit log: chain, schema, linkage to a model and inputs, signature.

Integrity is checked line by line, and the first bad line stops the check (nothing after it can be
trusted). For each line, in this order: it parses as a JSON object; it is in canonical form; its
own digest matches its content (catches edits); its ``seq`` is its position (catches removed,
duplicated, inserted and reordered records, each named as such); its ``prev`` is the digest of
the line before (catches a record altered and re-digested); it follows the JSON Schema; only the
first line is a header and only the last a footer. A log without a footer is truncated.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from sealtrace.audit.errors import AuditCheckError, AuditFormatError
from sealtrace.audit.linkage import identify_model, logged_model_identities
from sealtrace.audit.log import LogLine, read_lines, schema_problem
from sealtrace.audit.records import (
    AUDIT_FORMATS,
    GENESIS,
    digest_field,
    header_algorithm,
    record_digest,
    value_digest,
)
from sealtrace.digest import DIGEST_ALGORITHMS, SHA256, canonical_json
from sealtrace.errors import SealtraceError
from sealtrace.signing import Signature, load_public_key, verify_signature


@dataclass(frozen=True)
class LogProblem:
    """One thing wrong with a log: the 1-based line it concerns and what is wrong."""

    line: int | None
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line is not None else self.message


@dataclass
class AuditVerification:
    """The outcome of :func:`verify_log`: problems (empty when the log verifies) and facts."""

    path: str
    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[LogProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    chain_intact: bool = False
    run_digest: str | None = None
    signed_by: str | None = None  # key id of the signature, when the log carries one
    signature_valid: bool | None = None  # None: not checked
    digest_algorithm: str = SHA256  # what line 1 names (docs/audit-log.md, "Digest algorithm")

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def header(self) -> dict[str, Any] | None:
        return self.records[0] if self.records and self.records[0].get("type") == "header" else None

    @property
    def footer(self) -> dict[str, Any] | None:
        return self.records[-1] if self.records and self.records[-1].get("type") == "footer" else None

    @property
    def steps(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("type") == "step"]

    def raise_if_failed(self) -> None:
        """Raise :class:`AuditCheckError` naming the first problem (exit code 1 in the CLI)."""
        if self.problems:
            first = self.problems[0]
            more = f" (and {len(self.problems) - 1} more problem(s))" if len(self.problems) > 1 else ""
            raise AuditCheckError(f"{self.path} {first}{more}", first.line)


PublicKey = str | os.PathLike[str] | Ed25519PublicKey
# One trusted key, or several (the CLI's repeated --trust): the log must be signed by one of them.
TrustedKeys = PublicKey | Sequence[PublicKey]


def verify_log(
    path: str | os.PathLike[str],
    *,
    model: str | os.PathLike[str] | None = None,
    inputs: Mapping[str, Any] | None = None,
    trust: TrustedKeys | None = None,
) -> AuditVerification:
    """Verify the log at ``path``; optionally its link to ``model`` (a container or ONNX file),
    to ``inputs`` (name -> array) and its signature by ``trust`` (a public key or PEM path, or a
    sequence of them: then a valid signature by any one of them)."""
    return verify_lines(read_lines(path), str(path), model=model, inputs=inputs, trust=trust)


def verify_lines(
    lines: Sequence[LogLine],
    where: str = "<audit log>",
    *,
    model: str | os.PathLike[str] | None = None,
    inputs: Mapping[str, Any] | None = None,
    trust: TrustedKeys | None = None,
) -> AuditVerification:
    """:func:`verify_log` on lines already read (see :func:`sealtrace.audit.log.parse_lines`)."""
    if not lines:
        # Not a log cut short (that is a failed check, named by line) but no log at all.
        raise AuditFormatError(f"{where}: empty file, not an audit log")
    result = AuditVerification(where)
    problem = _check_chain(lines, result)
    if problem is not None:
        result.problems.append(problem)
        return result
    result.chain_intact = True
    footer = result.records[-1]
    result.run_digest = footer["chain_head"]
    result.problems.extend(_check_consistency(result.records))
    if model is not None:
        result.problems.extend(_check_model(result.records[0], Path(model)))
    if inputs is not None:
        result.problems.extend(_check_inputs(result.records[0], inputs, result.digest_algorithm))
    result.problems.extend(_check_signature(footer, len(result.records), trust, result))
    return result


def _check_chain(lines: Sequence[LogLine], result: AuditVerification) -> LogProblem | None:
    digests: list[str] = []
    for index, line in enumerate(lines):
        number = line.number
        record = line.record
        if record is None:
            if not line.complete:
                return LogProblem(number, "incomplete record: the log was cut off mid-line (truncated)")
            return LogProblem(number, f"{line.error}")
        if canonical_json(record) != line.raw:
            return LogProblem(number, "not in canonical JSON form (the line was edited)")
        if index == 0:
            algorithm = header_algorithm(record)
            if algorithm is None:
                raise AuditFormatError(
                    f"{result.path}: audit log digest algorithm {record.get('digest_algorithm')!r} is not one "
                    f"this sealtrace knows ({', '.join(DIGEST_ALGORITHMS)})"
                )
            result.digest_algorithm = algorithm
        own = digest_field(record)
        if record.get(own) != record_digest(record, result.digest_algorithm):
            return LogProblem(number, f"{own} does not match the record's content (the record was edited)")
        seq = record.get("seq")
        if seq != index:
            return _diagnose_seq(lines, index, record, digests)
        if record.get("prev") != (digests[-1] if digests else GENESIS):
            if index == 0:
                return LogProblem(number, "the header's prev is not the genesis digest")
            return LogProblem(
                number - 1,
                f"line {number} does not chain to this record (its prev is not this record's digest): "
                f"this record was altered and re-digested, or line {number}'s prev was changed",
            )
        kind = record.get("type")
        if result.records and result.records[-1].get("type") == "footer":
            return LogProblem(number, "a record after the footer (appended to a finished log)")
        if index == 0:
            if kind != "header":
                return LogProblem(number, f"the first record must be a header, found {kind!r}")
            if record.get("format") not in AUDIT_FORMATS:
                raise AuditFormatError(
                    f"{result.path}: audit log format {record.get('format')!r} is not one this "
                    f"sealtrace reads ({', '.join(AUDIT_FORMATS)})"
                )
        elif kind == "header":
            return LogProblem(number, "a second header inside the log")
        problem = schema_problem(record)
        if problem is not None:
            return LogProblem(number, f"does not follow the audit log schema: {problem}")
        if not line.complete:
            return LogProblem(number, "missing final newline (the log was cut off while writing)")
        digests.append(record[own])
        result.records.append(record)
    if result.records[-1].get("type") != "footer":
        last = len(lines)
        return LogProblem(
            last + 1, f"truncated after line {last}: no footer (the run did not finish, or the tail was removed)"
        )
    return None


def _diagnose_seq(
    lines: Sequence[LogLine], index: int, record: dict[str, Any], digests: list[str]
) -> LogProblem:
    """Name what a record out of place means: removed, duplicated, inserted or reordered records."""
    number = lines[index].number
    seq = record.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        return LogProblem(number, f"seq {seq!r} is not a record number")
    if seq < index:
        if digests[seq] == record.get(digest_field(record)):
            return LogProblem(number, f"duplicate of line {seq + 1} (record #{seq} appears twice)")
        chained_from = digests[seq - 1] if seq >= 1 else GENESIS
        if record.get("prev") == chained_from:
            span = f"line {seq + 1}" if index == seq + 1 else f"lines {seq + 1}-{index}"
            return LogProblem(
                seq + 1,
                f"inserted record(s): line {number} continues the chain from line {seq}, so {span} do not belong",
            )
        return LogProblem(number, f"record #{seq} is out of order here (expected #{index}): records were reordered")
    for later in lines[index + 1 :]:
        if later.record is not None and later.record.get("seq") == index:
            return LogProblem(
                number,
                f"records out of order: this is record #{seq}, and record #{index} is at line {later.number}",
            )
    missing = f"record #{index} is" if seq == index + 1 else f"records #{index}-#{seq - 1} are"
    return LogProblem(number, f"{missing} missing before this line (removed)")


def _check_consistency(records: list[dict[str, Any]]) -> list[LogProblem]:
    """Cross-checks between records: step count, and digests of top-level values by name.

    Only top-level steps are compared by name: a subgraph's inputs are fed by its control-flow
    kernel, so their names say nothing about which earlier record produced them.
    """
    problems: list[LogProblem] = []
    logged: dict[str, tuple[str | None, int]] = {}
    for entry in records[0]["inputs"]:
        logged[entry["name"]] = (entry["digest"], 1)
    steps = 0
    for number, record in enumerate(records[1:-1], start=2):
        steps += 1
        if record["path"]:
            continue
        for entry in record["inputs"]:
            known = logged.get(entry["name"]) if entry["name"] else None
            if known is not None and known[0] != entry["digest"]:
                problems.append(
                    LogProblem(number, f"input {entry['name']!r} has a digest other than line {known[1]} logged for it")
                )
        for entry in record["outputs"]:
            if entry["name"]:
                logged[entry["name"]] = (entry["digest"], number)
    footer = records[-1]
    footer_line = len(records)
    if footer["steps"] != steps:
        problems.append(LogProblem(footer_line, f"footer counts {footer['steps']} steps, the log has {steps}"))
    for entry in footer["outputs"]:
        known = logged.get(entry["name"])
        if known is not None and known[0] != entry["digest"]:
            problems.append(
                LogProblem(footer_line, f"output {entry['name']!r}: digest differs from line {known[1]}")
            )
    return problems


def _check_model(header: dict[str, Any], model: Path) -> list[LogProblem]:
    identity = identify_model(model)
    logged = logged_model_identities(header["model"])
    if not logged:
        return [LogProblem(1, f"the log names no model digest (recorded from a {header['model']['kind']})")]
    if identity not in logged:
        return [LogProblem(1, f"recorded from {logged[0].describe()}, but {model} has {identity.describe()}")]
    return []


def _check_inputs(header: dict[str, Any], inputs: Mapping[str, Any], algorithm: str) -> list[LogProblem]:
    problems = []
    logged = {entry["name"]: entry for entry in header["inputs"]}
    for name, value in inputs.items():
        entry = logged.get(name)
        if entry is None:
            problems.append(LogProblem(1, f"input {name!r} is not an input of the logged run ({', '.join(logged)})"))
            continue
        digest = value_digest(value if isinstance(value, (list, Mapping)) else np.asarray(value), algorithm)
        if digest != entry["digest"]:
            problems.append(
                LogProblem(1, f"input {name!r}: the given value (digest {str(digest)[:16]}) is not the one logged "
                f"(digest {str(entry['digest'])[:16]})")
            )
    return problems


def _trusted_keys(trust: TrustedKeys) -> list[Ed25519PublicKey]:
    if isinstance(trust, (str, os.PathLike, Ed25519PublicKey)):
        trust = [trust]
    return [key if isinstance(key, Ed25519PublicKey) else load_public_key(key) for key in trust]


def _check_signature(
    footer: dict[str, Any], footer_line: int, trust: TrustedKeys | None, result: AuditVerification
) -> list[LogProblem]:
    raw = footer.get("signature")
    signature = Signature.from_json(raw) if raw is not None else None
    if signature is not None:
        result.signed_by = signature.key_id
    if trust is None:
        if signature is not None:
            result.notes.append(f"signed by key {signature.key_id}; not checked (give --trust KEY.pub)")
        return []
    keys = _trusted_keys(trust)
    if signature is None:
        result.signature_valid = False
        return [LogProblem(footer_line, "the log is not signed, but a trusted key was given")]
    valid = False
    for key in keys:
        try:
            valid = verify_signature(key, footer["chain_head"], signature)
        except SealtraceError:
            valid = False
        if valid:
            break
    result.signature_valid = valid
    if not valid:
        which = "the trusted key" if len(keys) == 1 else f"any of the {len(keys)} trusted keys"
        return [LogProblem(footer_line, f"the signature over the run digest is not valid for {which} (signed by key {signature.key_id})")]
    return []
