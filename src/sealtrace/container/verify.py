"""Verify a container: every chunk of every section and tensor, the padding, the references from
graph to tensor table, the signatures; then give back the model only if all of it holds."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from onnx import ModelProto

from sealtrace import __version__
from sealtrace.container import chunks
from sealtrace.container.chunks import chunk_ranges, hash_ranges
from sealtrace.container.errors import ContainerDamagedError, ContainerFormatError, IntegrityError, Mismatch
from sealtrace.container.format import GRAPH_SECTION, Container, open_container
from sealtrace.container.graphindex import compare as compare_indexes
from sealtrace.container.graphindex import graph_index
from sealtrace.container.signatures import SignatureCheck, TrustSource, check_signatures, trusted_keys
from sealtrace.container.weights import (
    MARKER,
    dtype_name,
    external_references,
    model_tensors,
    restore_weights,
    storage_holds,
)
from sealtrace.digest import HEX_DIGEST
from sealtrace.errors import InputError


@dataclass
class VerifyReport:
    """The outcome of verifying one container; ``ok`` only when nothing mismatched."""

    where: str
    digest: str | None = None
    plan_digest: str | None = None
    tensors: int = 0
    tensor_bytes: int = 0  # bytes of tensor data (what ``seal`` reports)
    bytes_hashed: int = 0  # bytes hashed: the graph section and the tensors
    seconds: float = 0.0
    file_sha256: str | None = None
    mismatches: list[Mismatch] = field(default_factory=list)
    signatures: list[SignatureCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.where,
            "ok": self.ok,
            "container_digest": self.digest,
            "plan_digest": self.plan_digest,
            "tensors": self.tensors,
            "tensor_bytes": self.tensor_bytes,
            "bytes_hashed": self.bytes_hashed,
            "seconds": round(self.seconds, 6),
            "file_sha256": self.file_sha256,
            "mismatches": [m.to_json() for m in self.mismatches],
            "signatures": [s.to_json() for s in self.signatures],
        }

    def raise_for_failure(self) -> None:
        if self.mismatches:
            raise IntegrityError(self.where, self.mismatches)


def verify_container(
    source: str | os.PathLike[str] | bytes | Container,
    *,
    trust: Sequence[TrustSource] = (),
    require_signature: bool = False,
    expect_digest: str | None = None,
    workers: int | None = None,
    file_sha256: bool = False,
    raise_on_failure: bool = True,
) -> VerifyReport:
    """Check every byte of a container against its header; name every part that differs.

    Raises :class:`ContainerFormatError` (exit 2) for a file that is not a container (no magic, not
    named ``*.seal``), and (unless ``raise_on_failure`` is False) :class:`IntegrityError` (exit 1)
    listing every mismatch of a file that claims to be one, a malformed header included. ``trust``
    (public keys) demands a valid signature by one of them (``require_signature`` is implied by
    ``trust``). ``expect_digest`` pins the container digest (what a signature would vouch for).
    """
    if require_signature and not trust:
        raise InputError("--require-signature needs at least one trusted public key (--trust KEY.pub)")
    if expect_digest is not None and not HEX_DIGEST.fullmatch(expect_digest.lower()):
        raise InputError(f"--expect-digest {expect_digest[:80]!r}: a container digest is 64 hex digits")
    keys = trusted_keys(trust)
    started = time.perf_counter()
    where = source.where if isinstance(source, Container) else (
        "<bytes>" if isinstance(source, bytes) else os.fspath(source)
    )
    report = VerifyReport(str(where))
    try:
        container = source if isinstance(source, Container) else open_container(source)
    except IntegrityError as exc:
        report.mismatches.extend(exc.mismatches)
        report.seconds = time.perf_counter() - started
        if raise_on_failure:
            raise  # the reader's own error: a damaged container stays a ContainerDamagedError
        return report
    try:
        _check(container, report, keys, require_signature, expect_digest, workers, file_sha256)
    except IntegrityError as exc:
        # A file truncated while it was read, a graph that does not parse or does not match the
        # table: failed checks, reported with the rest.
        report.mismatches.extend(exc.mismatches)
        if raise_on_failure and isinstance(exc, ContainerDamagedError):
            raise
    finally:
        if not isinstance(source, Container):
            container.close()
    report.seconds = time.perf_counter() - started
    if raise_on_failure:
        report.raise_for_failure()
    return report


def _check(
    container: Container,
    report: VerifyReport,
    keys: dict[str, Any],
    require_signature: bool,
    expect_digest: str | None,
    workers: int | None,
    file_sha256: bool,
) -> None:
    report.digest = container.digest
    report.plan_digest = container.plan_digest
    report.tensors = len(container.tensors)
    if expect_digest is not None and expect_digest.lower() != container.digest:
        report.mismatches.append(Mismatch("header", "container digest", expect_digest.lower(), container.digest))

    checks, problems = check_signatures(container.digest, container.signatures, keys, require_signature)
    report.signatures = checks
    report.mismatches.extend(problems)

    source = container.source
    graph_entry = container.entry(GRAPH_SECTION, "section")
    # The graph section is read once and both hashed and parsed from that read (it is small: the
    # weights are elsewhere); tensors are hashed chunk by chunk straight from the file.
    graph_bytes = container.data(graph_entry)
    graph_ranges = chunk_ranges(0, graph_entry.length, container.chunk_size)
    graph_digests = [hashlib.sha256(graph_bytes[a:b]).hexdigest() for a, b in graph_ranges]
    ranges: list[tuple[int, int]] = []
    for entry in container.tensors:
        ranges.extend(chunk_ranges(container.data_start + entry.offset, entry.length, container.chunk_size))
    whole = None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sealtrace-file") as side:
        if file_sha256:
            # The file digest (what a session records as the model's origin) on its own thread.
            whole = side.submit(chunks.file_sha256, source)
        digests = [*graph_digests, *hash_ranges(source, ranges, workers=workers)]
        if whole is not None:
            report.file_sha256 = whole.result()
    report.bytes_hashed = sum(e.length for e in container.entries)
    report.tensor_bytes = sum(e.length for e in container.tensors)

    position = 0
    for entry in [graph_entry, *container.tensors]:
        actual = digests[position : position + len(entry.sha256)]
        position += len(entry.sha256)
        bad = [k for k, (want, got) in enumerate(zip(entry.sha256, actual, strict=True)) if want != got]
        if not bad:
            continue
        start = container.data_start + entry.offset + bad[0] * container.chunk_size
        span = min(container.chunk_size, entry.length - bad[0] * container.chunk_size)
        if len(entry.sha256) == 1:
            expected, found = f"sha256 {entry.sha256[0]}", f"sha256 {actual[0]}"
        else:
            expected = f"sha256 {entry.sha256[bad[0]]} for chunk {bad[0]} of {len(entry.sha256)}"
            found = f"sha256 {actual[bad[0]]} ({len(bad)} chunk(s) differ)"
        report.mismatches.append(Mismatch(entry.kind, entry.name, expected, found, offset=start, length=span))

    for what, start, end in container.padding():
        run = bytes(source.read(start, end - start))
        nonzero = next((i for i, b in enumerate(run) if b), None)
        if nonzero is not None:
            report.mismatches.append(
                Mismatch("padding", f"before {what}", "zero bytes", f"byte {run[nonzero]:#04x}", offset=start + nonzero)
            )

    recorded = container.graph_index
    if not any(m.kind == "section" for m in report.mismatches):
        if recorded is not None and graph_index(graph_bytes) != recorded:
            raise ContainerDamagedError(container.where, "the header's graph index does not match the graph section")
        _check_references(_parse_graph(graph_bytes, container.where), container)
    elif recorded is not None:
        # The section changed: say which nodes, attributes or opset imports (when it still splits
        # into wire records; the section mismatch above is the failure either way).
        changed = graph_index(graph_bytes)
        if changed is not None:
            report.mismatches.extend(compare_indexes(recorded, changed))


def _graph(container: Container) -> ModelProto:
    return _parse_graph(container.data(container.entry(GRAPH_SECTION, "section")), container.where)


def _parse_graph(data: memoryview, where: str) -> ModelProto:
    model = ModelProto()
    try:
        model.ParseFromString(bytes(data))
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise ContainerDamagedError(where, f"graph section is not an ONNX model ({exc})") from None
    return model


def _check_references(stripped: ModelProto, container: Container) -> None:
    """Each table entry is used by exactly one graph tensor of the same dtype and shape, and no
    tensor of the graph refers to data outside the container."""
    foreign = external_references(stripped)
    if foreign:
        raise ContainerDamagedError(
            container.where, f"graph tensor(s) refer to external data: {', '.join(f[:80] for f in foreign[:5])}"
        )
    table = {e.name: e for e in container.tensors}
    seen: set[str] = set()
    for scope_name, tensor in model_tensors(stripped):
        names = [e.value for e in tensor.external_data if e.key == MARKER]
        if not names and not tensor.external_data:
            continue
        if len(names) != 1 or len(tensor.external_data) != 1 or names[0] not in table or names[0] in seen:
            raise ContainerDamagedError(container.where, f"graph tensor {scope_name[:80]!r} has a bad tensor-table reference")
        entry = table[names[0]]
        seen.add(entry.name)
        if dtype_name(tensor.data_type) != entry.dtype or tuple(tensor.dims) != entry.shape:
            raise ContainerDamagedError(container.where, f"tensor {entry.name!r}: graph and table disagree on dtype or shape")
        if not storage_holds(entry.storage or "", entry.dtype or ""):
            # Loading would refuse it: verify must not say OK to what run refuses.
            raise ContainerDamagedError(container.where, f"tensor {entry.name!r}: storage {entry.storage} cannot hold {entry.dtype}")
    unused = sorted(set(table) - seen)
    if unused:
        raise ContainerDamagedError(container.where, f"tensor table entries the graph never uses: {', '.join(unused[:5])}")


@dataclass(frozen=True)
class VerifiedModel:
    """A model read back from a container that passed verification."""

    model: ModelProto
    report: VerifyReport
    source: dict[str, Any]
    sealtrace_version: str


def load_verified_model(
    source: str | os.PathLike[str] | bytes,
    *,
    trust: Sequence[TrustSource] = (),
    require_signature: bool = False,
    expect_digest: str | None = None,
    file_sha256: bool = False,
    workers: int | None = None,
) -> VerifiedModel:
    """Verify a container, then rebuild its ONNX model (weights bit-exact). Raises on any mismatch.

    The file is read once into private memory and that copy is verified and used: a file
    rewritten between the check and the use (a memory map would show the change) cannot slip in.
    """
    container = open_container(source, private_copy=True)
    try:
        report = verify_container(
            container,
            trust=trust,
            require_signature=require_signature,
            expect_digest=expect_digest,
            workers=workers,
            file_sha256=file_sha256,
        )
        model = _graph(container)
        fetch = {e.name: (e.storage or "raw_data", e.dtype or "", e.shape or (), container.data(e)) for e in container.tensors}
        try:
            restore_weights(model, fetch)
        except ContainerFormatError as exc:
            raise ContainerDamagedError(container.where, str(exc)) from None
        del fetch
        return VerifiedModel(model, report, dict(container.body["source"]), str(container.body["sealtrace_version"]))
    finally:
        container.close()


def load_sealed_plan(
    path: str | os.PathLike[str],
    *,
    trust: Sequence[TrustSource] = (),
    require_signature: bool = False,
) -> tuple[Any, VerifyReport]:
    """Verify a container and build the Plan of its model: what ``Session("x.seal")`` runs.

    A container sealed by this same sealtrace version must give back the Plan digest its header
    records; a difference means the container is not what was sealed and it is refused.
    """
    from sealtrace.plan import build_plan

    verified = load_verified_model(path, trust=trust, require_signature=require_signature, file_sha256=True)
    plan = build_plan(verified.model)
    recorded = verified.report.plan_digest
    if verified.sealtrace_version == __version__ and plan.digest != recorded:
        raise IntegrityError(
            os.fspath(path), [Mismatch("header", "plan digest", str(recorded), plan.digest)]
        )
    return plan, verified.report
