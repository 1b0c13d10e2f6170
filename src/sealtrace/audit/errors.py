"""Errors of the audit package (part of sealtrace's one exception hierarchy)."""

from __future__ import annotations

from sealtrace.errors import CheckFailedError, InputError, SealtraceError


class AuditLogExistsError(InputError):
    """The log (or capture) path exists and overwriting was not asked for."""


class AuditWriteError(SealtraceError):
    """The recorder could not write its log (disk full, permission) or summarize a value."""


class AuditFormatError(SealtraceError):
    """The file is not a sealtrace audit log of a format version this reader knows (exit 2)."""


class AuditCheckError(CheckFailedError):
    """Verification or replay found a problem; ``line`` is the 1-based line of the first bad record."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.line = line
        super().__init__(message)
