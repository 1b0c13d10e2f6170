"""Audit trail: a hash-chained, per-step log of every run, verifiable and replayable.

See docs/audit-log.md for the format. The recorder and the capture store are StepObservers;
the verifier and replay read logs back.
"""

from __future__ import annotations

from sealtrace.audit.capture import CapturedRun, CaptureStore
from sealtrace.audit.errors import AuditCheckError, AuditFormatError, AuditLogExistsError, AuditWriteError
from sealtrace.audit.recorder import AuditRecorder
from sealtrace.audit.records import AUDIT_FORMAT, DEFAULT_SAMPLE
from sealtrace.audit.replay import ReplayReport, replay_log
from sealtrace.audit.run import LoggedRun, audited_run, logged_run
from sealtrace.audit.verify import AuditVerification, verify_log

__all__ = [
    "AUDIT_FORMAT",
    "DEFAULT_SAMPLE",
    "AuditCheckError",
    "AuditFormatError",
    "AuditLogExistsError",
    "AuditRecorder",
    "AuditVerification",
    "AuditWriteError",
    "CaptureStore",
    "CapturedRun",
    "LoggedRun",
    "ReplayReport",
    "audited_run",
    "logged_run",
    "replay_log",
    "verify_log",
]
