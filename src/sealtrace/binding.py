"""Bound artifacts: every derived or compiled model carries its source container's digest.

A *binding record* (``sealtrace.binding.v1``, documented in docs/binding.md) says: this artifact, whose
sha256 is X, was made from the container whose digest is Y, by this transformation, with this backend
version and these options, at this time. Its digest is sha256 over its canonical JSON (signatures
excluded); optional Ed25519 signatures cover that digest, so editing any field (the container digest,
the artifact digest) breaks every signature.

Where it lives: a sidecar file ``ARTIFACT.binding.json`` beside any artifact. ONNX artifacts
additionally carry the record in ``metadata_props['sealtrace.binding']``; their artifact digest is
then taken over the model *without* that entry (serialized deterministically), because a record
cannot cover a digest of bytes that contain the record itself. ONNX metadata alone would prove
nothing (anyone can edit it): what proves the link is the artifact digest inside the record and
the record's signature.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from sealtrace import __version__
from sealtrace.digest import canonical_json, json_digest
from sealtrace.errors import CheckFailedError, InputError, SealtraceError
from sealtrace.signing import (
    Signature,
    load_private_key,
    load_public_key,
    sign_digest,
    verify_signature,
)

BINDING_FORMAT = "sealtrace.binding.v1"
METADATA_KEY = "sealtrace.binding"
SIDECAR_SUFFIX = ".binding.json"
MAX_RECORD_BYTES = 1 << 20


class BindingError(SealtraceError):
    """A binding record is missing, unreadable or malformed (exit 2)."""


class BindingCheckError(CheckFailedError):
    """An artifact failed its binding check (exit 1); ``failures`` says which checks failed."""

    def __init__(self, artifact: str, failures: list[str]) -> None:
        self.failures = failures
        super().__init__(f"{artifact}: binding check failed: " + "; ".join(failures))


@dataclass(frozen=True)
class BindingRecord:
    """What a binding says: artifact X was derived from container Y by transformation Z."""

    container_digest: str
    artifact_name: str
    artifact_sha256: str
    artifact_digest_scope: str  # 'file' or 'onnx-without-binding'
    transformation: str
    backend: str
    backend_version: str
    options: Mapping[str, Any]
    created: str
    sealtrace_version: str = __version__
    signatures: tuple[Signature, ...] = field(default=())

    def body(self) -> dict[str, Any]:
        """The signed part: everything but the signatures."""
        return {
            "format": BINDING_FORMAT,
            "container_digest": self.container_digest,
            "artifact": {
                "name": self.artifact_name,
                "sha256": self.artifact_sha256,
                "digest_scope": self.artifact_digest_scope,
            },
            "transformation": self.transformation,
            "backend": {"name": self.backend, "version": self.backend_version},
            "options": dict(sorted(self.options.items())),
            "created": self.created,
            "sealtrace_version": self.sealtrace_version,
        }

    @property
    def digest(self) -> str:
        return json_digest(self.body())

    def to_json(self) -> dict[str, Any]:
        return {**self.body(), "signatures": [s.to_json() for s in self.signatures]}

    def signed(self, key_path: str | os.PathLike[str]) -> BindingRecord:
        signature = sign_digest(load_private_key(key_path), self.digest)
        return BindingRecord(**{**self.__dict__, "signatures": (*self.signatures, signature)})

    @classmethod
    def from_json(cls, data: Any, where: str) -> BindingRecord:
        try:
            if not isinstance(data, dict) or data.get("format") != BINDING_FORMAT:
                found = data.get("format") if isinstance(data, dict) else type(data).__name__
                raise BindingError(f"{where}: not a {BINDING_FORMAT} record (format {found!r})")
            extra = set(data) - {*cls._fields(), "signatures"}
            if extra:
                raise BindingError(f"{where}: unknown field(s) {', '.join(sorted(extra))}")
            artifact, backend = data["artifact"], data["backend"]
            record = cls(
                container_digest=_hex(data["container_digest"], "container_digest", where),
                artifact_name=str(artifact["name"]),
                artifact_sha256=_hex(artifact["sha256"], "artifact.sha256", where),
                artifact_digest_scope=str(artifact["digest_scope"]),
                transformation=str(data["transformation"]),
                backend=str(backend["name"]),
                backend_version=str(backend["version"]),
                options=dict(data["options"]),
                created=str(data["created"]),
                sealtrace_version=str(data["sealtrace_version"]),
                signatures=tuple(Signature.from_json(s) for s in data.get("signatures", [])),
            )
        except (KeyError, TypeError) as exc:
            raise BindingError(f"{where}: malformed binding record (missing or wrong field {exc})") from None
        if record.artifact_digest_scope not in ("file", "onnx-without-binding"):
            raise BindingError(f"{where}: unknown artifact digest scope {record.artifact_digest_scope!r}")
        return record

    @staticmethod
    def _fields() -> set[str]:
        return {"format", "container_digest", "artifact", "transformation", "backend", "options", "created",
                "sealtrace_version"}


def _hex(value: Any, what: str, where: str) -> str:
    if not isinstance(value, str) or len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise BindingError(f"{where}: {what} must be 64 lowercase hex digits")
    return value


def sidecar_path(artifact: str | os.PathLike[str]) -> Path:
    path = Path(artifact)
    return path.with_name(path.name + SIDECAR_SUFFIX)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    except OSError as exc:
        raise InputError(f"{path}: cannot read artifact ({exc.strerror})") from None
    return digest.hexdigest()


def _onnx_without_binding(model: onnx.ModelProto) -> onnx.ModelProto:
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    keep = [p for p in stripped.metadata_props if p.key != METADATA_KEY]
    del stripped.metadata_props[:]
    stripped.metadata_props.extend(keep)
    return stripped


def _onnx_digest(model: onnx.ModelProto) -> str:
    return hashlib.sha256(_onnx_without_binding(model).SerializeToString(deterministic=True)).hexdigest()


def _load_onnx(path: Path) -> onnx.ModelProto | None:
    """The artifact as an ONNX model, or None when it is some other kind of file."""
    if path.suffix != ".onnx":
        return None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(path.read_bytes())
    except Exception:  # a file that does not parse is simply not ONNX
        return None
    return model if model.HasField("graph") else None


def _write_atomically(path: Path, data: bytes, overwrite: bool) -> None:
    if path.exists() and not overwrite:
        raise InputError(f"{path}: file exists (use --force to overwrite)")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _container_digest(container: str | os.PathLike[str], trust: Sequence[Any] = ()) -> str:
    from sealtrace.container import verify_container

    report = verify_container(container, trust=trust)
    assert report.digest is not None
    return report.digest


def bind(
    artifact: str | os.PathLike[str],
    container: str | os.PathLike[str],
    *,
    transformation: str = "external",
    backend: str = "unknown",
    backend_version: str = "unknown",
    options: Mapping[str, Any] | None = None,
    sign_with: str | os.PathLike[str] | None = None,
    embed: bool = True,
    overwrite: bool = False,
) -> BindingRecord:
    """Bind ``artifact`` to the (verified) ``container``; write the sidecar (and embed into ONNX)."""
    path = Path(artifact)
    if not path.is_file():
        raise InputError(f"{path}: no such artifact file")
    container_digest = _container_digest(container)
    model = _load_onnx(path) if embed else None
    if model is not None:
        digest, scope = _onnx_digest(model), "onnx-without-binding"
    else:
        digest, scope = _file_sha256(path), "file"
    record = BindingRecord(
        container_digest=container_digest,
        artifact_name=path.name,
        artifact_sha256=digest,
        artifact_digest_scope=scope,
        transformation=transformation,
        backend=backend,
        backend_version=backend_version,
        options=dict(options or {}),
        created=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    if sign_with is not None:
        record = record.signed(sign_with)
    text = json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n"
    _write_atomically(sidecar_path(path), text.encode("utf-8"), overwrite)
    if model is not None:
        embedded = _onnx_without_binding(model)
        entry = embedded.metadata_props.add()
        entry.key, entry.value = METADATA_KEY, canonical_json(record.to_json()).decode("ascii")
        _write_atomically(path, embedded.SerializeToString(), overwrite=True)
    return record


def read_binding(artifact: str | os.PathLike[str]) -> BindingRecord:
    """The artifact's binding record: the sidecar, else the record embedded in an ONNX artifact."""
    path = Path(artifact)
    sidecar = sidecar_path(path)
    if sidecar.is_file():
        if sidecar.stat().st_size > MAX_RECORD_BYTES:
            raise BindingError(f"{sidecar}: larger than {MAX_RECORD_BYTES} bytes: not a binding record")
        try:
            data = json.loads(sidecar.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BindingError(f"{sidecar}: unreadable binding record ({exc})") from None
        return BindingRecord.from_json(data, str(sidecar))
    model = _load_onnx(path) if path.is_file() else None
    if model is not None:
        for prop in model.metadata_props:
            if prop.key == METADATA_KEY:
                try:
                    data = json.loads(prop.value)
                except ValueError as exc:
                    raise BindingError(f"{path}: unreadable embedded binding record ({exc})") from None
                return BindingRecord.from_json(data, f"{path} metadata_props[{METADATA_KEY!r}]")
    if not path.is_file():
        raise InputError(f"{path}: no such artifact file")
    raise BindingError(f"{path}: no binding record (expected the sidecar {sidecar.name} or an embedded record)")


@dataclass(frozen=True)
class BindingCheck:
    """The outcome of checking an artifact against a container."""

    artifact: str
    record: BindingRecord
    failures: list[str]
    warnings: list[str]

    @property
    def ok(self) -> bool:
        return not self.failures


def check_binding(
    artifact: str | os.PathLike[str],
    container: str | os.PathLike[str],
    *,
    trust: Sequence[str | os.PathLike[str]] = (),
    require_signature: bool = False,
    strict: bool = False,
    current_backend_version: str | None = None,
    raise_on_failure: bool = True,
) -> BindingCheck:
    """Check that ``artifact`` is unmodified and bound to ``container``; say which check failed.

    The version of the tool that made the artifact (the record's backend) is compared with the one
    installed here; ``current_backend_version`` overrides that lookup.
    """
    path = Path(artifact)
    record = read_binding(path)
    if current_backend_version is None:
        current_backend_version = installed_version(record.backend)
    failures: list[str] = []
    warnings: list[str] = []
    model = _load_onnx(path) if record.artifact_digest_scope == "onnx-without-binding" else None
    if record.artifact_digest_scope == "onnx-without-binding" and model is None:
        failures.append("artifact modified: it is no longer a readable ONNX model")
    else:
        actual = _onnx_digest(model) if model is not None else _file_sha256(path)
        if actual != record.artifact_sha256:
            failures.append(f"artifact modified: sha256 {actual[:16]}..., the binding says {record.artifact_sha256[:16]}...")
    expected = _container_digest(container)
    if record.container_digest != expected:
        failures.append(
            f"bound to another container: {record.container_digest[:16]}..., not {Path(container).name} "
            f"({expected[:16]}...)"
        )
    if trust or require_signature:
        keys = [load_public_key(k) for k in trust]
        valid = [s for s in record.signatures if any(verify_signature(k, record.digest, s) for k in keys)]
        if not record.signatures:
            failures.append("signature missing: the binding record is not signed")
        elif not valid:
            failures.append("signature untrusted or invalid: no signature verifies with a trusted key")
    if current_backend_version is not None and current_backend_version != record.backend_version:
        message = (
            f"backend version differs: made with {record.backend} {record.backend_version}, "
            f"loading with {current_backend_version}"
        )
        (failures if strict else warnings).append(message)
    check = BindingCheck(str(path), record, failures, warnings)
    if failures and raise_on_failure:
        raise BindingCheckError(str(path), failures)
    return check


def installed_version(tool: str) -> str | None:
    """The installed version of a tool that makes artifacts (None: a tool sealtrace cannot see)."""
    if tool == "onnxruntime":
        import onnxruntime

        return str(onnxruntime.__version__)
    if tool == "torch":
        try:
            import torch
        except ImportError:
            return "not installed"
        return str(torch.__version__)
    return None


def compile_onnxruntime(
    container: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    level: str = "all",
    sign_with: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
) -> BindingRecord:
    """Verify ``container``, write ONNX Runtime's optimized model to ``output``, and bind it."""
    import tempfile

    import onnxruntime as ort

    from sealtrace.container import load_verified_model

    levels = {
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    if level not in levels:
        raise InputError(f"--level {level}: choose one of {', '.join(levels)}")
    out = Path(output)
    if out.exists() and not overwrite:
        raise InputError(f"{out}: file exists (use --force to overwrite)")
    verified = load_verified_model(container)
    with tempfile.TemporaryDirectory(prefix="sealtrace-compile-") as tmp:
        optimized = Path(tmp) / out.name
        options = ort.SessionOptions()
        options.graph_optimization_level = levels[level]
        options.optimized_model_filepath = str(optimized)
        options.log_severity_level = 3
        try:
            ort.InferenceSession(verified.model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT raises its own exception types
            raise SealtraceError(f"onnxruntime cannot optimize the model: {str(exc).splitlines()[0]}") from None
        _write_atomically(out, optimized.read_bytes(), overwrite)
    return bind(
        out,
        container,
        transformation="onnxruntime-graph-optimization",
        backend="onnxruntime",
        backend_version=str(ort.__version__),
        options={"graph_optimization_level": level, "execution_provider": "CPUExecutionProvider"},
        sign_with=sign_with,
        overwrite=True,
    )
