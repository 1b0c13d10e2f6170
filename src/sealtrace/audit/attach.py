"""What ``Session.run(audit=..., capture=...)`` attaches to a run."""

from __future__ import annotations

import os
from typing import Any

from sealtrace.audit.capture import CaptureStore
from sealtrace.audit.pipeline import BackgroundObserver
from sealtrace.audit.recorder import AuditRecorder, SignKey
from sealtrace.audit.records import DEFAULT_SAMPLE
from sealtrace.digest import SHA256
from sealtrace.errors import InputError

AuditTarget = str | os.PathLike[str] | AuditRecorder
CaptureTarget = str | os.PathLike[str] | CaptureStore


def observers_for_run(
    origin: Any,
    audit: AuditTarget | None = None,
    sample: int | None = None,
    sign_key: SignKey | None = None,
    capture: CaptureTarget | None = None,
    digest: str | None = None,
) -> list[BackgroundObserver]:
    """The recorder and capture store for one run, from paths or ready-made observers.

    A ready-made recorder keeps its own settings; it only learns the model's origin when it has
    none. ``sample`` and ``sign_key`` apply to a recorder made here from a path; ``digest`` (the
    digest algorithm, default sha256) to a recorder and a capture store made here from paths, and a
    capture store made here takes a ready-made recorder's algorithm, so that both name a value alike.
    """
    observers: list[BackgroundObserver] = []
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
