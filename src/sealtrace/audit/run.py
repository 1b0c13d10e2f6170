"""An audited run: ``Session.run`` with an audit recorder and a capture store attached.

The one way a run is recorded: the CLI, serving, the cluster, replays and certificates all come
through :func:`audited_run` (and the ledger's ``record_run``, built on it).
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sealtrace.audit.capture import CaptureStore
from sealtrace.audit.recorder import AuditRecorder, SignKey
from sealtrace.audit.records import DEFAULT_SAMPLE
from sealtrace.digest import SHA256
from sealtrace.errors import InputError
from sealtrace.plan.events import StepObserver
from sealtrace.session import RunOptions, Session

AuditTarget = str | os.PathLike[str] | AuditRecorder
CaptureTarget = str | os.PathLike[str] | CaptureStore


def _recording_observers(
    origin: Any,
    audit: AuditTarget | None = None,
    sample: int | None = None,
    sign_key: SignKey | None = None,
    capture: CaptureTarget | None = None,
    digest: str | None = None,
) -> list[AuditRecorder | CaptureStore]:
    """The recorder and capture store for one run, from paths or ready-made observers.

    A ready-made recorder keeps its own settings; it only learns the model's origin when it has
    none. ``sample`` and ``sign_key`` apply to a recorder made here from a path; ``digest`` (the
    digest algorithm, default sha256) to a recorder and a capture store made here from paths, and a
    capture store made here takes a ready-made recorder's algorithm, so that both name a value alike.
    """
    observers: list[AuditRecorder | CaptureStore] = []
    if isinstance(audit, AuditRecorder):
        if sample is not None or sign_key is not None or digest is not None:
            raise InputError(
                "sample=, sign_key= and digest= apply when audit= is a path; configure the AuditRecorder instead"
            )
        digest = audit.digest
        if audit.origin is None:
            audit.origin = origin
        observers.append(audit)
    elif audit is not None:
        observers.append(
            AuditRecorder(
                audit,
                sample=DEFAULT_SAMPLE if sample is None else sample,
                sign_key=sign_key,
                origin=origin,
                digest=digest or SHA256,
            )
        )
    elif sample is not None or sign_key is not None:
        raise InputError("sample= and sign_key= need audit=")
    if capture is not None:
        observers.append(capture if isinstance(capture, CaptureStore) else CaptureStore(capture, digest=digest or SHA256))
    return observers


def audited_run(
    session: Session,
    feeds: Mapping[str, Any],
    output_names: Sequence[str] | None = None,
    *,
    audit: AuditTarget | None = None,
    sample: int | None = None,
    sign_key: SignKey | None = None,
    capture: CaptureTarget | None = None,
    digest: str | None = None,
    observers: Sequence[StepObserver] = (),
) -> list[Any]:
    """Run ``session`` like ``Session.run``, recording it; return the requested outputs in order.

    ``audit`` (a log path or an AuditRecorder) records the run as a hash-chained audit log,
    showing the first ``sample`` values of each tensor and signed with ``sign_key`` (a PEM path) if
    given; ``capture`` (a directory or a CaptureStore) stores every intermediate tensor. ``digest``
    names the digest algorithm of both ("sha256", the default, or "blake3"). ``observers`` see the
    steps too. See docs/audit-log.md.
    """
    recording = _recording_observers(session.origin, audit, sample, sign_key, capture, digest)
    everyone: list[StepObserver] = [*observers, *recording]
    try:
        return session.run(output_names, feeds, RunOptions(observers=everyone))
    finally:
        # After a failure this keeps what was recorded so far (a log without footer reads as
        # truncated); after success it is a no-op.
        for observer in recording:
            observer.abort()


@dataclass(frozen=True)
class LoggedRun:
    """A run whose audit log was kept in memory: the outputs by name, the log's bytes and its run
    digest (the footer's chain head)."""

    outputs: dict[str, Any]
    log: bytes
    run_digest: str


def logged_run(
    session: Session,
    feeds: Mapping[str, Any],
    *,
    sample: int = DEFAULT_SAMPLE,
    sign_key: SignKey | None = None,
    hash_threads: int | None = None,
) -> LoggedRun:
    """Run ``session`` with the full audit, keeping the log in memory (a ledger's trail, a replay's
    evidence). ``hash_threads=0`` hashes on the recorder's own thread (a worker given one CPU)."""
    buffer = io.BytesIO()
    recorder = AuditRecorder(
        buffer, sample=sample, sign_key=sign_key, origin=session.origin, hash_threads=hash_threads
    )
    values = audited_run(session, feeds, audit=recorder)
    assert recorder.run_digest is not None  # a finished run's log has its footer
    return LoggedRun(
        dict(zip(session.plan.output_names, values, strict=True)), buffer.getvalue(), recorder.run_digest
    )
