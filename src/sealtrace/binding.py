"""Bound artifacts: every derived or compiled model carries its source container's digest.

A *binding record* (``sealtrace.binding.v1``, documented in docs/binding.md) says: this artifact, whose
digest is X, was made from the container whose digest is Y, by this transformation, with this backend
version and these options, at this time. Its digest is sha256 over its canonical JSON (signatures
excluded); optional Ed25519 signatures cover that digest, so editing any field (the container digest,
the artifact digest) breaks every signature.

The artifact digest commits to every byte that executes: for an ONNX artifact whose tensors live in
external data files, those files too (:func:`sealtrace.plan.modelfile.files_digest`, the same rule
that identifies an ONNX model in audit logs). The artifact is read once: the bytes that are hashed
are the bytes a :class:`~sealtrace.session.Session` then builds its Plan from.

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
from sealtrace.digest import canonical_json, is_hex_digest, json_digest
from sealtrace.errors import CheckFailedError, InputError, InvalidModelError, SealtraceError
from sealtrace.fields import missing_and_unknown
from sealtrace.limits import json_nesting_exceeds, read_regular_file
from sealtrace.outputs import atomic_output, check_output
from sealtrace.plan.modelfile import ExternalFile, external_tensors, files_digest, load_external_data
from sealtrace.protowire import BYTES, WireError, records
from sealtrace.signing import (
    Signature,
    load_private_key,
    load_public_key,
    sign_digest,
    verify_signature,
)
from sealtrace.strictjson import loads_strict

BINDING_FORMAT = "sealtrace.binding.v1"
METADATA_KEY = "sealtrace.binding"
SIDECAR_SUFFIX = ".binding.json"
MAX_RECORD_BYTES = 1 << 20
MAX_RECORD_DEPTH = 64  # lists and objects in a record (itself level 1); its own fields nest 3 deep

# What ``artifact.sha256`` is taken over (docs/binding.md). The '+external-data' scopes also cover
# every external data file of an ONNX artifact; the two older scopes are for artifacts without any.
SCOPE_FILE = "file"
SCOPE_ONNX = "onnx-without-binding"
EXTERNAL = "+external-data"
DIGEST_SCOPES = (SCOPE_FILE, SCOPE_ONNX, SCOPE_FILE + EXTERNAL, SCOPE_ONNX + EXTERNAL)


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
    artifact_digest_scope: str  # one of DIGEST_SCOPES
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
        """A record from parsed JSON; BindingError for anything but exactly the documented fields,
        each of its type (no null, number or list where a string or object belongs)."""
        if not isinstance(data, dict) or data.get("format") != BINDING_FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise BindingError(f"{where}: not a {BINDING_FORMAT} record (format {str(found)[:60]!r})")
        _exact_keys(data, cls._fields(), {"signatures"}, "binding record", where)
        artifact = _exact_keys(data["artifact"], {"name", "sha256", "digest_scope"}, set(), "artifact", where)
        backend = _exact_keys(data["backend"], {"name", "version"}, set(), "backend", where)
        options = data["options"]
        if not isinstance(options, dict):
            raise BindingError(f"{where}: options must be an object, not {_json_type(options)}")
        signatures = data.get("signatures", [])
        if not isinstance(signatures, list):
            raise BindingError(f"{where}: signatures must be a list, not {_json_type(signatures)}")
        scope = _text(artifact["digest_scope"], "artifact.digest_scope", where)
        if scope not in DIGEST_SCOPES:
            raise BindingError(f"{where}: unknown artifact digest scope {scope[:60]!r}")
        return cls(
            container_digest=_hex(data["container_digest"], "container_digest", where),
            artifact_name=_text(artifact["name"], "artifact.name", where),
            artifact_sha256=_hex(artifact["sha256"], "artifact.sha256", where),
            artifact_digest_scope=scope,
            transformation=_text(data["transformation"], "transformation", where),
            backend=_text(backend["name"], "backend.name", where),
            backend_version=_text(backend["version"], "backend.version", where),
            options=dict(options),
            created=_text(data["created"], "created", where),
            sealtrace_version=_text(data["sealtrace_version"], "sealtrace_version", where),
            signatures=tuple(_signature(s, i, where) for i, s in enumerate(signatures)),
        )

    @staticmethod
    def _fields() -> set[str]:
        return {"format", "container_digest", "artifact", "transformation", "backend", "options", "created",
                "sealtrace_version"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)  # fmt: skip


def _exact_keys(value: Any, required: set[str], optional: set[str], what: str, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BindingError(f"{where}: {what} must be an object, not {_json_type(value)}")
    missing, unknown = missing_and_unknown(value, required, optional)
    if missing:
        raise BindingError(f"{where}: {what}: missing field(s) {', '.join(missing)}")
    if unknown:
        raise BindingError(f"{where}: {what}: unknown field(s) {', '.join(k[:40] for k in unknown[:5])}")
    return value


def _text(value: Any, what: str, where: str) -> str:
    if not isinstance(value, str):
        raise BindingError(f"{where}: {what} must be a string, not {_json_type(value)}")
    return value


def _hex(value: Any, what: str, where: str) -> str:
    if not is_hex_digest(value):
        raise BindingError(f"{where}: {what} must be 64 lowercase hex digits")
    return value


def _signature(value: Any, index: int, where: str) -> Signature:
    entry = _exact_keys(value, {"algorithm", "key_id", "signature"}, set(), f"signature {index}", where)
    return Signature(*(_text(entry[k], f"signature {index} {k}", where) for k in ("algorithm", "key_id", "signature")))


def parse_record(text: str | bytes, where: str) -> BindingRecord:
    """A binding record from its JSON text. Not UTF-8 (a byte order mark included), not JSON, NaN
    or Infinity, a duplicate key, nesting deeper than MAX_RECORD_DEPTH, or any field of the wrong
    type: BindingError (exit 2)."""
    try:
        # Decoded strictly: json.loads would take UTF-16, UTF-32 and a BOM from bytes.
        data = loads_strict(text, encoding="utf-8")
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        # ValueError covers JSONDecodeError; RecursionError, deeply nested arrays or objects.
        raise BindingError(f"{where}: unreadable binding record ({type(exc).__name__}: {str(exc)[:80]})") from None
    if json_nesting_exceeds(data, MAX_RECORD_DEPTH):
        raise BindingError(f"{where}: unreadable binding record (nested more than {MAX_RECORD_DEPTH} levels deep)")
    return BindingRecord.from_json(data, where)


def sidecar_path(artifact: str | os.PathLike[str]) -> Path:
    path = Path(artifact)
    return path.with_name(path.name + SIDECAR_SUFFIX)


def _onnx_without_binding(model: onnx.ModelProto) -> onnx.ModelProto:
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    keep = [p for p in stripped.metadata_props if p.key != METADATA_KEY]
    del stripped.metadata_props[:]
    stripped.metadata_props.extend(keep)
    return stripped


class _Artifact:
    """An artifact read once: the digest of its bytes and, for an ONNX artifact, the parsed model
    whose external data are loaded (and hashed) from one read of each file.

    Digests are taken in the order that keeps them honest: the serialized model without its
    binding entry before its external data are filled in, then the external data files.
    """

    def __init__(self, path: Path, data: bytes | None = None) -> None:
        self.path = path
        if data is None:
            data = read_regular_file(path, "artifact", InputError)
        self.sha256 = hashlib.sha256(data).hexdigest()
        self.size = len(data)
        self.model = _as_onnx(data)
        # The onnx-without-binding digest is taken of these very bytes (docs/binding.md), now, so
        # that they need not be kept beside the parsed model.
        self._stripped_digest: tuple[str, int] | None = None
        if self.model is not None:
            try:
                kept = without_binding_entry(data)
            except WireError as exc:  # protobuf took the bytes; the stricter record reader did not
                raise InvalidModelError(f"{path}: not a well-formed protobuf message ({exc})") from None
            whole = len(kept) == 1 and kept[0] == slice(0, len(data))
            self._stripped_digest = (self.sha256, self.size) if whole else _digest_of(data, kept)
        del data
        self.stripped: onnx.ModelProto | None = None  # the model without its binding entry
        self.external: tuple[ExternalFile, ...] | None = None  # None: not loaded yet

    @property
    def refers_to_external_data(self) -> bool:
        if self.external is not None:
            return bool(self.external)
        return self.model is not None and next(external_tensors(self.model), None) is not None

    def embedded_record(self) -> str | None:
        if self.model is None:
            return None
        for prop in self.model.metadata_props:
            if prop.key == METADATA_KEY:
                return str(prop.value)
        return None

    def load_external(self) -> tuple[ExternalFile, ...]:
        """Fill the model's external tensors from their files (each read once); the files."""
        if self.external is None:
            assert self.model is not None
            if self.stripped is None:
                self.strip()  # before the tensors are filled: the stripped copy is what gets written
            self.external = load_external_data(self.model, self.path)
        return self.external

    def strip(self) -> onnx.ModelProto:
        """The model without its binding entry (what ``bind`` embeds a new record into)."""
        if self.stripped is None:
            assert self.model is not None and self.external is None
            self.stripped = _onnx_without_binding(self.model)
        return self.stripped

    def stripped_digest(self) -> tuple[str, int]:
        """sha256 and size of the artifact's bytes with its binding entry cut out (docs/binding.md,
        ``onnx-without-binding``): every other byte as it is, so no byte escapes the digest."""
        assert self._stripped_digest is not None  # taken when the artifact was read as ONNX
        return self._stripped_digest

    def digest(self, scope: str) -> str:
        """The artifact digest under ``scope``; InvalidModelError when it cannot be taken (not ONNX,
        external data missing or refused)."""
        where = str(self.path)
        if scope.startswith(SCOPE_ONNX) and self.model is None:
            raise InvalidModelError(f"{where}: no longer a readable ONNX model")
        sha256, size = self.stripped_digest() if scope.startswith(SCOPE_ONNX) else (self.sha256, self.size)
        if not scope.endswith(EXTERNAL):
            return sha256
        if self.model is None:
            raise InvalidModelError(f"{where}: no longer a readable ONNX model, so its external data cannot be found")
        return files_digest(sha256, size, self.load_external())

    @property
    def identity(self) -> str:
        """What identifies the artifact file as a model (the same rule as any ONNX file's)."""
        return files_digest(self.sha256, self.size, self.external or ())


def without_binding_entry(data: bytes) -> list[slice]:
    """The byte ranges of a serialized ModelProto that remain when every top-level
    ``metadata_props`` entry (field 14) keyed ``sealtrace.binding`` is cut out (docs/binding.md),
    adjacent ranges merged."""
    kept: list[slice] = []
    for record in records(data):
        start, end = record.start, record.end
        if record.number == 14 and record.wire == BYTES:
            entry = onnx.StringStringEntryProto()
            entry.ParseFromString(data[record.payload_start : end])
            if entry.key == METADATA_KEY:
                continue
        if kept and kept[-1].stop == start:
            kept[-1] = slice(kept[-1].start, end)
        else:
            kept.append(slice(start, end))
    return kept


def _digest_of(data: bytes, ranges: list[slice]) -> tuple[str, int]:
    """sha256 and size of the concatenated ranges, without copying them."""
    h, view = hashlib.sha256(), memoryview(data)
    for r in ranges:
        h.update(view[r])
    return h.hexdigest(), sum(r.stop - r.start for r in ranges)


def _as_onnx(data: bytes) -> onnx.ModelProto | None:
    """The bytes as an ONNX model, or None when they are some other kind of file."""
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:  # bytes that do not parse are simply not ONNX
        return None
    return model if model.HasField("graph") else None


def _container_digest(container: str | os.PathLike[str]) -> str:
    from sealtrace.container import verify_container

    report = verify_container(container)
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
    """Bind ``artifact`` to the (verified) ``container``; write the sidecar (and embed into ONNX).

    The artifact digest covers its external data files when it has any (docs/binding.md). An
    existing sidecar is refused before any work unless ``overwrite``.
    """
    check_output(sidecar_path(artifact), overwrite, "binding sidecar")
    return _bind(
        _Artifact(Path(artifact)), _container_digest(container), transformation=transformation, backend=backend,
        backend_version=backend_version, options=options, sign_with=sign_with, embed=embed, overwrite=overwrite,
    )  # fmt: skip


def bind_written(
    artifact: str | os.PathLike[str],
    data: bytes,
    container_digest: str,
    *,
    transformation: str,
    backend: str,
    backend_version: str,
    options: Mapping[str, Any] | None = None,
    sign_with: str | os.PathLike[str] | None = None,
    embed: bool = False,
    overwrite: bool = False,
) -> BindingRecord:
    """Bind an artifact that the caller has just written from ``data`` to the container whose
    (verified) digest is ``container_digest``; writes the sidecar (and with ``embed``, embeds the
    record into an ONNX artifact). The artifact digest is taken of ``data``, not of a second read
    that a file swapped in meanwhile could change."""
    return _bind(
        _Artifact(Path(artifact), data), container_digest, transformation=transformation, backend=backend,
        backend_version=backend_version, options=options, sign_with=sign_with, embed=embed, overwrite=overwrite,
    )  # fmt: skip


def _bind(
    artifact: _Artifact,
    container_digest: str,
    *,
    transformation: str,
    backend: str,
    backend_version: str,
    options: Mapping[str, Any] | None,
    sign_with: str | os.PathLike[str] | None,
    embed: bool,
    overwrite: bool,
) -> BindingRecord:
    path = artifact.path
    embedded = embed and artifact.model is not None and path.suffix == ".onnx"
    scope = (SCOPE_ONNX if embedded else SCOPE_FILE) + (EXTERNAL if artifact.refers_to_external_data else "")
    try:
        if embedded:
            # The artifact is rewritten below as this serialization plus the new entry, so the digest
            # of its bytes without the entry is the digest of this serialization.
            written = artifact.strip().SerializeToString(deterministic=True)
            digest = hashlib.sha256(written).hexdigest()
            if scope.endswith(EXTERNAL):
                digest = files_digest(digest, len(written), artifact.load_external())
        else:
            digest = artifact.digest(scope)
    except InvalidModelError as exc:
        raise InputError(f"cannot bind {path}: {exc}") from None
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
    with atomic_output(sidecar_path(path), force=overwrite) as f:
        f.write(text.encode("utf-8"))
    if embedded:
        stripped = artifact.strip()
        entry = stripped.metadata_props.add()
        entry.key, entry.value = METADATA_KEY, canonical_json(record.to_json()).decode("ascii")
        # The artifact is rewritten from the bytes that were hashed (its external data untouched).
        with atomic_output(path, force=True) as f:
            f.write(stripped.SerializeToString(deterministic=True))
    return record


def read_binding(artifact: str | os.PathLike[str]) -> BindingRecord:
    """The artifact's binding record: the sidecar, else the record embedded in an ONNX artifact."""
    path = Path(artifact)
    sidecar = sidecar_path(path)
    if sidecar.exists() or sidecar.is_symlink():
        return _read_sidecar(sidecar)
    return _record_of(_Artifact(path))


def _read_sidecar(sidecar: Path) -> BindingRecord:
    data = read_regular_file(sidecar, "binding record", BindingError, max_bytes=MAX_RECORD_BYTES)
    return parse_record(data, str(sidecar))


def _record_of(artifact: _Artifact) -> BindingRecord:
    sidecar = sidecar_path(artifact.path)
    if sidecar.exists() or sidecar.is_symlink():
        return _read_sidecar(sidecar)
    text = artifact.embedded_record()
    if text is not None:
        return parse_record(text, f"{artifact.path} metadata_props[{METADATA_KEY!r}]")
    raise BindingError(
        f"{artifact.path}: no binding record (expected the sidecar {sidecar.name} or an embedded record)"
    )


@dataclass(frozen=True)
class BindingCheck:
    """The outcome of checking an artifact against a container."""

    artifact: str
    record: BindingRecord
    failures: list[str]
    warnings: list[str]
    # Key ids of the record's signatures that verify with a trusted key (only when trust was given).
    trusted_by: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def signed_by(self) -> tuple[str, ...]:
        """Key ids the record's signatures name (checked against keys only when trust was given)."""
        return tuple(s.key_id for s in self.record.signatures)


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

    ``trust`` (public keys) means the record must carry a valid signature by one of them
    (``require_signature`` is implied). The version of the tool that made the artifact (the
    record's backend) is compared with the one installed here; ``current_backend_version``
    overrides that lookup.
    """
    return _check(
        _Artifact(Path(artifact)), container, trust=trust, require_signature=require_signature, strict=strict,
        current_backend_version=current_backend_version, raise_on_failure=raise_on_failure,
    )  # fmt: skip


def check_bound_bytes(
    artifact: str | os.PathLike[str],
    data: bytes,
    container: str | os.PathLike[str],
    *,
    container_digest: str | None = None,
    trust: Sequence[str | os.PathLike[str]] = (),
    require_signature: bool = False,
    strict: bool = False,
) -> BindingCheck:
    """:func:`check_binding` of an artifact that the caller has already read (``data``, the bytes of
    ``artifact``), for a caller that then loads those very bytes (a compiled library: loading one
    runs native code, so it must be the copy that was checked). ``container_digest``: the digest of
    ``container`` when the caller has verified it already. Raises BindingCheckError on any failure."""
    return _check(
        _Artifact(Path(artifact), data), container, trust=trust, require_signature=require_signature, strict=strict,
        container_digest=container_digest,
    )  # fmt: skip


@dataclass(frozen=True)
class BoundModel:
    """A bound artifact that passed its check: the model (external data filled in from the bytes
    that were hashed), the check, and the artifact's identity as a model file."""

    model: onnx.ModelProto
    check: BindingCheck
    identity: str


def load_bound_model(
    artifact: str | os.PathLike[str],
    container: str | os.PathLike[str],
    *,
    trust: Sequence[str | os.PathLike[str]] = (),
    require_signature: bool = False,
    strict: bool = False,
) -> BoundModel:
    """Check a bound ONNX artifact and give back its model, built from the very bytes that were
    checked (one read of the artifact and of each external data file): what
    ``Session(artifact, container=...)`` runs. Raises BindingCheckError on any failed check."""
    read = _Artifact(Path(artifact))
    check = _check(read, container, trust=trust, require_signature=require_signature, strict=strict)
    if read.model is None:
        raise InvalidModelError(f"{artifact}: the bound artifact is not an ONNX model, so sealtrace cannot run it")
    if read.external is None and read.refers_to_external_data:
        read.load_external()  # unreachable after a passing check; kept so nothing runs unloaded
    return BoundModel(read.model, check, read.identity)


def _check(
    artifact: _Artifact,
    container: str | os.PathLike[str],
    *,
    trust: Sequence[str | os.PathLike[str]] = (),
    require_signature: bool = False,
    strict: bool = False,
    current_backend_version: str | None = None,
    raise_on_failure: bool = True,
    container_digest: str | None = None,
) -> BindingCheck:
    record = _record_of(artifact)
    if current_backend_version is None:
        current_backend_version = installed_version(record.backend)
    failures: list[str] = []
    warnings: list[str] = []
    scope = record.artifact_digest_scope
    if not scope.endswith(EXTERNAL) and artifact.refers_to_external_data:
        failures.append(
            f"artifact refers to external data that its binding does not cover (digest scope {scope!r}): "
            "bind it again with this sealtrace"
        )
    else:
        try:
            actual = artifact.digest(scope)
        except InvalidModelError as exc:
            failures.append(f"artifact modified: {str(exc).removeprefix(str(artifact.path) + ': ')}")
        else:
            if actual != record.artifact_sha256:
                failures.append(
                    f"artifact modified: sha256 {actual[:16]}..., the binding says {record.artifact_sha256[:16]}..."
                )
    expected = container_digest if container_digest is not None else _container_digest(container)
    if record.container_digest != expected:
        failures.append(
            f"bound to another container: {record.container_digest[:16]}..., not {Path(container).name} "
            f"({expected[:16]}...)"
        )
    trusted_by: tuple[str, ...] = ()
    if trust or require_signature:
        keys = [load_public_key(k) for k in trust]
        valid = [s for s in record.signatures if any(verify_signature(k, record.digest, s) for k in keys)]
        trusted_by = tuple(s.key_id for s in valid)
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
    check = BindingCheck(str(artifact.path), record, failures, warnings, trusted_by)
    if failures and raise_on_failure:
        raise BindingCheckError(str(artifact.path), failures)
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
    if tool == "tvm":
        try:
            import tvm
        except ImportError:
            return "not installed"
        return str(tvm.__version__)
    return None
