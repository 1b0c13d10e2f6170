"""A run recorded for the ledger: the one place a run's record (and its audit trail) is made.

``run --ledger``, the server and the cluster's workers all call :func:`record_run`; what each does
with the record differs (append it now, submit it for a group commit, hand it to the driver), so
appending stays with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sealtrace.audit import DEFAULT_SAMPLE, AuditRecorder, audited_run, logged_run
from sealtrace.audit.recorder import SignKey
from sealtrace.errors import InputError
from sealtrace.ledger.records import new_record
from sealtrace.limits import read_regular_file
from sealtrace.session import Session


@dataclass(frozen=True)
class LedgerEntry:
    """What a record says besides the run itself: the model's name, who asked, how the run was
    audited (``full``: the per-op audit log is the record's trail; ``deferred`` and ``io``: input
    and output digests only) and, for records whose id is fixed in advance, that id. ``sample``,
    ``sign_key`` and ``hash_threads`` apply to an audit log made in memory for a ``full`` record
    (``hash_threads=0``: hashed on the recorder's own thread)."""

    model_name: str
    audit: str = "io"
    principal: str | None = None
    record_id: str | None = None
    sample: int = DEFAULT_SAMPLE
    sign_key: SignKey | None = None
    hash_threads: int | None = None


@dataclass(frozen=True)
class RecordedRun:
    """A run and its record: the outputs by name, the record, and the audit log (the trail) of a
    ``full`` run, as the bytes the ledger stores."""

    outputs: dict[str, Any]
    record: dict[str, Any]
    trail: bytes | None

    @property
    def values(self) -> list[Any]:
        """The outputs in the Plan's order, as ``Session.run`` returns them."""
        return list(self.outputs.values())


def record_run(
    session: Session,
    feeds: Mapping[str, Any],
    entry: LedgerEntry,
    *,
    audit: AuditRecorder | None = None,
    capture: Any = None,
) -> RecordedRun:
    """Run ``session`` on ``feeds`` and make its ledger record (not yet appended).

    A ``full`` entry records the per-op audit log: into ``audit`` when given (a recorder writing a
    file, whose bytes become the trail), else in memory. ``capture`` (a directory or a
    CaptureStore) stores every intermediate value as well.
    """
    trail: bytes | None = None
    run_digest: str | None = None
    if entry.audit == "full" and audit is None and capture is None:
        logged = logged_run(session, feeds, sample=entry.sample, sign_key=entry.sign_key,
                            hash_threads=entry.hash_threads)  # fmt: skip
        outputs, trail, run_digest = logged.outputs, logged.log, logged.run_digest
    else:
        if entry.audit == "full" and (audit is None or audit.path is None):
            raise InputError(
                "a full record needs its audit log: a recorder writing a file, or none (made in memory)"
            )
        values = audited_run(session, feeds, audit=audit, capture=capture)
        outputs = dict(zip(session.plan.output_names, values, strict=True))
        if entry.audit == "full" and audit is not None and audit.path is not None:
            trail, run_digest = read_regular_file(audit.path, "audit log"), audit.run_digest
    record = new_record(
        model_name=entry.model_name, plan_digest=session.plan.digest,
        container_digest=session.origin.container_digest, backend=str(session.backend.name),
        backend_version=str(session.backend.version), inputs=feeds, outputs=outputs, principal=entry.principal,
        audit=entry.audit, trail=run_digest, record_id=entry.record_id,
    )  # fmt: skip
    return RecordedRun(outputs, record, trail)
