"""Verdicts: the outcome of a check in one JSON shape (``schemas/verdict.schema.json``).

``sealtrace verify --json``, ``audit verify --json``, ``check-binding --json`` and ``ledger check-proof
--json`` print these fields beside their own, and the independent Go verifier (``verifier/``,
``sealverify --json``) prints the same, so that the two implementations can be compared field by field:
the exit code, and each failure's ``kind`` and ``where`` (a tensor or section name, a line number, a
field of a record or proof). ``what`` is prose and differs between implementations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sealtrace import __version__

VERDICT_FORMAT = "sealtrace.verdict.v1"

Failure = dict[str, Any]


def failure(kind: str, where: str | int | None, what: str) -> Failure:
    """One named failed check."""
    return {"kind": kind, "where": where, "what": what}


def verdict(
    check: str,
    subject: str,
    failures: Sequence[Failure],
    *,
    exit_code: int | None = None,
    digests: dict[str, str | None] | None = None,
    signers: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """A verdict; the exit code is 0 without failures, 1 with them, unless given (2: bad input)."""
    if exit_code is None:
        exit_code = 1 if failures else 0
    return {
        "verdict": VERDICT_FORMAT,
        "check": check,
        "subject": subject,
        "ok": exit_code == 0,
        "exit_code": exit_code,
        "failures": list(failures),
        "digests": {k: v for k, v in (digests or {}).items() if v is not None},
        "signers": list(signers),
        "verifier": {"name": "sealtrace", "version": __version__},
    }


def bad_input_verdict(check: str, subject: str, message: str) -> dict[str, Any]:
    """The verdict of a check that could not run (exit 2)."""
    return verdict(check, subject, [failure("input", None, message)], exit_code=2)


def container_verdict(subject: str, report: dict[str, Any]) -> dict[str, Any]:
    """From a container report's JSON (``ContainerReport.to_json``): every mismatch, by kind and name."""
    failures = [failure(m["kind"], m["name"], _describe_mismatch(m)) for m in report["mismatches"]]
    signers = [{"key_id": s["key_id"], "valid": s["valid"], "trusted": s["trusted"]} for s in report["signatures"]]
    return verdict("container", subject, failures, digests={"container": report["container_digest"]}, signers=signers)


def _describe_mismatch(m: dict[str, Any]) -> str:
    return f"expected {m['expected']}, found {m['actual']}"


def audit_verdict(subject: str, line: int | None, problem: str | None, run_digest: str | None,
                  signed_by: str | None, signature_valid: bool | None) -> dict[str, Any]:
    """An audit log's verdict: its first bad line (a log is checked up to the first one)."""
    failures = [failure("line", line, problem)] if problem is not None else []
    signers = (
        [{"key_id": signed_by, "valid": signature_valid, "trusted": bool(signature_valid)}] if signed_by else []
    )
    return verdict("audit", subject, failures, digests={"run": run_digest}, signers=signers)


# A binding check's failures are sentences; each starts with the name of the check that failed.
_BINDING_CHECKS = (
    ("artifact refers to external data", "artifact", "artifact"),
    ("artifact modified", "artifact", "artifact"),
    ("bound to another container", "container", "container_digest"),
    ("container fails its check", "container", "container"),
    ("signature missing", "signature", "signatures"),
    ("signature untrusted or invalid", "signature", "signatures"),
    ("backend version differs", "backend", "backend"),
)


def binding_failure(message: str) -> Failure:
    """A binding check's failure sentence, named by the check it comes from."""
    for prefix, kind, where in _BINDING_CHECKS:
        if message.startswith(prefix):
            return failure(kind, where, message)
    return failure("binding", None, message)


def binding_verdict(subject: str, failures: Sequence[str], record_digest: str, container_digest: str,
                    signatures: Sequence[str], trusted_by: Sequence[str] | None) -> dict[str, Any]:
    """A binding check's verdict; ``trusted_by`` is None when no trusted key was given (not checked)."""
    signers = [
        {"key_id": key_id, "valid": None if trusted_by is None else key_id in trusted_by,
         "trusted": trusted_by is not None and key_id in trusted_by}
        for key_id in signatures
    ]
    return verdict("binding", subject, [binding_failure(m) for m in failures],
                   digests={"record": record_digest, "container": container_digest}, signers=signers)


def proof_failure(subject: str, problem: str) -> Failure:
    """A proof check's failure (``LedgerCheckError`` problems are 'PATH[: part]: what')."""
    rest = problem.removeprefix(f"{subject}: ")
    for part in ("first", "second"):
        if rest.startswith(f"{part}: "):
            return failure("signature", part, rest.removeprefix(f"{part}: "))
    if "different ledgers" in rest:
        return failure("proof", "second", rest)
    if "does not extend" in rest or "is not leaf" in rest:
        return failure("proof", "proof", rest)
    return failure("signature", "tree_head", rest)


def proof_verdict(subject: str, document: Any, problems: Sequence[str]) -> dict[str, Any]:
    """A proof check's verdict: the tree heads' signers, and the first failure."""
    heads: list[dict[str, Any]] = []
    if isinstance(document, dict):
        heads = [h for h in (document.get(k) for k in ("tree_head", "first", "second")) if isinstance(h, dict)]
    signers = []
    for head in heads:
        signature = head.get("signature")
        key_id = signature.get("key_id") if isinstance(signature, dict) else None
        if isinstance(key_id, str):
            signers.append({"key_id": key_id, "valid": None if problems else True, "trusted": not problems})
    root = heads[-1].get("root_hash") if heads else None
    failures = [proof_failure(subject, problems[0])] if problems else []
    return verdict("proof", subject, failures, digests={"root": root if isinstance(root, str) else None},
                   signers=signers)
