"""Errors of the scale package (part of sealtrace's one exception hierarchy)."""

from __future__ import annotations

from typing import Any

from sealtrace.errors import InputError, SealtraceError


class ClusterError(SealtraceError):
    """Ray is not installed, the cluster cannot be reached, or a task failed past its retries (exit 2)."""


class JobError(InputError):
    """A job that cannot start as asked: its records are already in the ledger (resume it), or it
    names nothing to do (exit 2)."""


class JobInterrupted(KeyboardInterrupt):
    """A job stopped by Ctrl-C (a KeyboardInterrupt still): what it had made durable is in ``summary``."""

    def __init__(self, summary: Any) -> None:
        super().__init__("interrupted")
        self.summary = summary
