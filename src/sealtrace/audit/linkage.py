"""Linkage: which model and which inputs a log says it ran, and checking that against files.

A log from a sealed container names the container digest; a log from a plain ONNX file names the
file's sha256. Inputs are named by their tensor digests.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sealtrace.errors import InputError


def model_reference(origin: Any) -> dict[str, Any]:
    """The header's ``model`` block from a Session's ModelOrigin (or None: unknown origin)."""
    return {
        "kind": getattr(origin, "kind", None) or "unknown",
        "path": getattr(origin, "path", None),
        "sha256": getattr(origin, "sha256", None),
        "container_digest": getattr(origin, "container_digest", None),
    }


@dataclass(frozen=True)
class ModelIdentity:
    """What a model file is, as a log names it: a container digest or an ONNX file's sha256."""

    kind: str  # 'container' or 'onnx'
    digest: str

    def describe(self) -> str:
        what = "container digest" if self.kind == "container" else "ONNX file sha256"
        return f"{what} {self.digest}"


def identify_model(path: str | os.PathLike[str]) -> ModelIdentity:
    """Identify a model file: a verified container by its digest, anything else by its sha256."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    container_digest = _container_digest(path)
    if container_digest is not None:
        return ModelIdentity("container", container_digest)
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return ModelIdentity("onnx", digest.hexdigest())


def _container_digest(path: Path) -> str | None:
    """The digest of the sealed container at ``path`` (verified in full), or None for other files.

    A container that fails verification raises its IntegrityError: a log cannot be linked to a
    container whose bytes no longer match its digest.
    """
    from sealtrace.container import is_container, verify_container

    if not is_container(path):
        return None
    return verify_container(path).digest


def logged_model_digest(model: dict[str, Any]) -> ModelIdentity | None:
    """The identity a header's ``model`` block names (None when it names none)."""
    if model.get("kind") == "container" and model.get("container_digest"):
        return ModelIdentity("container", str(model["container_digest"]))
    if model.get("sha256"):
        return ModelIdentity("onnx", str(model["sha256"]))
    return None
