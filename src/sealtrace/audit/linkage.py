"""Linkage: which model and which inputs a log says it ran, and checking that against files.

A log from a sealed container names the container digest; a log from a plain ONNX file names the
file's sha256, or, for a model with external data, the digest of the file and every external data
file (the same identity a Session records, so editing a ``.data`` file breaks the link). A bound
artifact's log names the artifact's identity and the container it was bound to. Inputs are named by
their tensor digests.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sealtrace.errors import InputError, InvalidModelError


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
    """What a model file is, as a log names it: a container digest, or an ONNX model's identity
    (the sha256 of the file; with external data, the digest of the file and its external data files,
    sealtrace.plan.modelfile.files_digest)."""

    kind: str  # 'container' or 'onnx'
    digest: str

    def describe(self) -> str:
        what = "container digest" if self.kind == "container" else "ONNX file sha256"
        return f"{what} {self.digest}"


def identify_model(path: str | os.PathLike[str]) -> ModelIdentity:
    """Identify a model file: a verified container by its digest, an ONNX model by the digest of the
    file and its external data (the same rule a Session records), anything else by its sha256."""
    from sealtrace.container import is_container, verify_container
    from sealtrace.plan.modelfile import model_file_digest

    path = Path(path)
    if is_container(path):
        # A container that fails verification raises its IntegrityError: a log cannot be linked to
        # a container whose bytes no longer match its digest (nor to a *.seal that is not one).
        digest = verify_container(path).digest
        assert digest is not None
        return ModelIdentity("container", digest)
    try:
        return ModelIdentity("onnx", model_file_digest(path))
    except InvalidModelError as exc:
        raise InputError(str(exc)) from None


def logged_model_digest(model: dict[str, Any]) -> ModelIdentity | None:
    """The identity a header's ``model`` block names (None when it names none)."""
    if model.get("kind") == "container" and model.get("container_digest"):
        return ModelIdentity("container", str(model["container_digest"]))
    if model.get("sha256"):
        return ModelIdentity("onnx", str(model["sha256"]))
    return None


def logged_model_identities(model: dict[str, Any]) -> list[ModelIdentity]:
    """Every model a header's ``model`` block links the run to: its own identity and, for a bound
    artifact (kind 'artifact'), also the container it was bound to."""
    found = [identity for identity in [logged_model_digest(model)] if identity is not None]
    if model.get("kind") == "artifact" and model.get("container_digest"):
        found.append(ModelIdentity("container", str(model["container_digest"])))
    return found
