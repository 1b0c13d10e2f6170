"""Seal an ONNX model into one ``.seal`` file (format: sealtrace.container.format)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from onnx import ModelProto, TensorProto

from sealtrace import __version__
from sealtrace.container.chunks import chunk_ranges
from sealtrace.container.errors import SealingError
from sealtrace.container.format import (
    ALIGNMENT,
    DEFAULT_CHUNK_SIZE,
    FORMAT_NAME,
    FORMAT_VERSION,
    GRAPH_ENCODING,
    GRAPH_SECTION,
    MAGIC,
    MAX_CHUNK_SIZE,
    MAX_HEADER_SIZE,
    MIN_CHUNK_SIZE,
    PREAMBLE,
    PREAMBLE_SIZE,
    Entry,
    SignatureEntry,
    align,
    chunk_count,
)
from sealtrace.container.graphindex import graph_index
from sealtrace.container.signatures import KeySource, sign
from sealtrace.container.weights import Weight, model_tensors, strip_weights
from sealtrace.digest import canonical_json, json_digest
from sealtrace.errors import SealtraceError
from sealtrace.hashpool import hash_map
from sealtrace.outputs import OutputExistsError, atomic_output, check_output

if TYPE_CHECKING:
    from sealtrace.container.stream import ModelSource


@dataclass(frozen=True)
class ContainerInfo:
    """What :func:`seal_model` wrote."""

    path: str
    digest: str
    plan_digest: str
    tensors: int
    tensor_bytes: int
    size: int
    signed_by: tuple[str, ...]


def seal_model(
    model: str | os.PathLike[str] | ModelProto,
    out_path: str | os.PathLike[str],
    sign_with: KeySource | Sequence[KeySource] | None = None,
    *,
    force: bool = False,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    workers: int | None = None,
) -> ContainerInfo:
    """Seal an ONNX file (external data included) or ModelProto into ``out_path``.

    The Plan is built first: a model sealtrace cannot plan is refused with :class:`SealingError`,
    since a container promises that what it holds runs. ``sign_with`` takes one or more Ed25519
    private keys (PEM paths or key objects). The output is written atomically and an existing file
    is only replaced with ``force``.
    """
    if not MIN_CHUNK_SIZE <= chunk_size <= MAX_CHUNK_SIZE or chunk_size & (chunk_size - 1):
        raise SealingError(f"chunk size {chunk_size} must be a power of two in [{MIN_CHUNK_SIZE}, {MAX_CHUNK_SIZE}]")
    if Path(out_path).exists() and not force:
        # Checked again when the file is put in place; failing here saves the work before it.
        raise OutputExistsError(f"{out_path}: already exists (use --force to overwrite)")
    keys: list[KeySource] = [] if sign_with is None else (
        list(sign_with) if isinstance(sign_with, (list, tuple)) else [sign_with]  # type: ignore[list-item]
    )
    # The Plan builder is imported here, not with the package: `sealtrace verify` never needs it.
    from sealtrace.container.stream import open_model_source

    if isinstance(model, ModelProto):
        return _seal_loaded(model, _proto_source(model), model, out_path, keys, force, chunk_size, workers)
    try:
        source = open_model_source(model)
    except SealtraceError as exc:
        raise SealingError(str(exc)) from None
    try:
        if not source.files:
            # No external data: the model file's bytes are all there is, and they are read.
            record = {"file_name": source.path.name, "sha256": source.sha256, "size": source.size, "external_data": []}
            return _seal_loaded(source.model, record, None, out_path, keys, force, chunk_size, workers)
        return _seal_streamed(source, out_path, keys, force, chunk_size, workers)
    finally:
        source.close()


def _seal_loaded(
    proto: ModelProto,
    source: dict[str, Any],
    callers: ModelProto | None,
    out_path: str | os.PathLike[str],
    keys: list[KeySource],
    force: bool,
    chunk_size: int,
    workers: int | None,
) -> ContainerInfo:
    """Seal a model held in memory whole (``callers``: the caller's own proto, left untouched)."""
    name = source["file_name"] or "model"
    plan_digest = _plan_digest(proto, name, None)
    model_info = _model_info(proto)
    # A model read from a file is ours to strip in place; a caller's proto is left untouched.
    stripped, weights = strip_weights(proto, in_place=callers is None)
    graph = stripped.SerializeToString(deterministic=True)

    views = [memoryview(graph).cast("B"), *(memoryview(w.data).cast("B") for w in weights)]
    digests = _hash_regions(views, chunk_size, workers)
    entries = _layout(weights, len(graph), digests)
    digest, header, signatures = _header(entries, chunk_size, plan_digest, model_info, _index(graph), source, keys)
    with atomic_output(out_path, force=force) as f:
        f.write(PREAMBLE.pack(MAGIC, FORMAT_VERSION, len(header), bytes.fromhex(digest)))
        f.write(header)
        data_start = align(PREAMBLE_SIZE + len(header))
        position = _pad(f, PREAMBLE_SIZE + len(header), data_start)
        for entry, view in zip(entries, views, strict=True):
            position = _pad(f, position, data_start + entry.offset)
            f.write(view)
            position += len(view)
        size = position
    return ContainerInfo(
        path=str(out_path),
        digest=digest,
        plan_digest=plan_digest,
        tensors=len(weights),
        tensor_bytes=sum(len(v) for v in views[1:]),
        size=size,
        signed_by=tuple(s.key_id for s in signatures),
    )


def _seal_streamed(
    source: ModelSource,
    out_path: str | os.PathLike[str],
    keys: list[KeySource],
    force: bool,
    chunk_size: int,
    workers: int | None,
) -> ContainerInfo:
    """Seal a model file with external data in one pass over its bytes (sealtrace.container.stream).

    The header lists digests that only the pass computes, but its length is known before (every
    digest is 64 hex digits): the data area is written first, at its final place, and the header last.
    """
    from sealtrace.container.stream import sealed_plan_digest, stream_weights

    name = source.path.name
    plan = _plan_digest(source.model, name, source)
    model_info = _model_info(source.model)
    stripped, weights = strip_weights(source.model, in_place=True, external=source.weight_bytes)
    graph = stripped.SerializeToString(deterministic=True)
    streamed = [source.streamed_weight(w.data) for w in weights]
    in_memory = [memoryview(graph).cast("B")] + [
        memoryview(w.data).cast("B") for w, s in zip(weights, streamed, strict=True) if s is None
    ]
    entries = _layout(weights, len(graph), [
        tuple(_PLACEHOLDER for _ in range(chunk_count(n, chunk_size))) for n in (len(graph), *(len(w.data) for w in weights))
    ])  # fmt: skip
    record = {"file_name": name, "sha256": source.sha256, "size": source.size, "external_data": []}
    record["external_data"] = [{"path": f.location, "sha256": _PLACEHOLDER, "size": f.size} for f in source.files]
    index = _index(graph)
    _, header, _ = _header(entries, chunk_size, _PLACEHOLDER, model_info, index, record, keys)
    data_start = align(PREAMBLE_SIZE + len(header))
    size = data_start + entries[-1].offset + entries[-1].length
    with atomic_output(out_path, force=force) as f:
        f.flush()
        fd = f.fileno()
        in_memory_entries = [e for e, s in zip(entries, [None, *streamed], strict=True) if s is None]
        for entry, view in zip(in_memory_entries, in_memory, strict=True):
            _pwrite(fd, view, data_start + entry.offset, out_path)
        places = {id(s): data_start + e.offset for e, s in zip(entries[1:], streamed, strict=True) if s is not None}
        # The pass runs while the in-memory regions (the graph, small weights) are hashed here.
        hashed = _hash_regions(in_memory, chunk_size, workers)
        stream_weights(source, fd, places, chunk_size, str(source.path))
        found = iter(hashed)
        digests = [next(found) if s is None else tuple(s.chunk_digests) for s in [None, *streamed]]
        entries = _layout(weights, len(graph), digests)
        record["external_data"] = [f.to_json() for f in source.external_data]
        plan_digest = sealed_plan_digest(source, lambda: plan.digest)
        digest, header, signatures = _header(entries, chunk_size, plan_digest, model_info, index, record, keys)
        if align(PREAMBLE_SIZE + len(header)) != data_start:
            raise AssertionError("the header's length changed with its digests")
        head = PREAMBLE.pack(MAGIC, FORMAT_VERSION, len(header), bytes.fromhex(digest)) + header
        _pwrite(fd, memoryview(head + b"\0" * (data_start - len(head))), 0, out_path)
        os.ftruncate(fd, size)  # zero padding after a last entry of length 0
    return ContainerInfo(
        path=str(out_path),
        digest=digest,
        plan_digest=plan_digest,
        tensors=len(weights),
        tensor_bytes=sum(e.length for e in entries[1:]),
        size=size,
        signed_by=tuple(s.key_id for s in signatures),
    )


_PLACEHOLDER = "0" * 64


def _pwrite(fd: int, view: memoryview, offset: int, out_path: str | os.PathLike[str]) -> None:
    written = 0
    try:
        while written < len(view):
            written += os.pwrite(fd, view[written:], offset + written)
    except OSError as exc:
        raise SealingError(f"{out_path}: cannot write the container ({exc.strerror or exc})") from None


def _plan_digest(proto: ModelProto, name: str, source: ModelSource | None) -> Any:
    """Build the Plan (a model sealtrace cannot plan is refused): its digest, or with a streamed
    ``source`` the Plan itself, whose digest needs the pass's digests (sealed_plan_digest)."""
    from sealtrace.plan import build_plan
    from sealtrace.plan.builder import EXTERNAL_TENSORS

    token = EXTERNAL_TENSORS.set(source.stand_in if source is not None else None)
    try:
        plan = build_plan(proto)
    except SealtraceError as exc:
        raise SealingError(f"cannot seal {name}: its Plan cannot be built: {exc}") from None
    finally:
        EXTERNAL_TENSORS.reset(token)
    if source is not None:
        return plan
    try:
        return plan.digest
    except (TypeError, ValueError) as exc:
        raise SealingError(f"cannot seal {name}: its Plan digest cannot be computed ({exc})") from None


def _layout(weights: list[Weight], graph_length: int, digests: Sequence[tuple[str, ...]]) -> list[Entry]:
    """The data area's entries: the graph section, then each weight, at the next aligned offset."""
    entries: list[Entry] = []
    offset = 0
    lengths = [graph_length, *(len(w.data) for w in weights)]
    for i, (length, chunk_digests) in enumerate(zip(lengths, digests, strict=True)):
        offset = align(offset)
        if i == 0:
            entries.append(Entry("section", GRAPH_SECTION, offset, length, chunk_digests, encoding=GRAPH_ENCODING))
        else:
            w = weights[i - 1]
            entries.append(Entry("tensor", w.name, offset, length, chunk_digests, w.dtype, w.shape, w.storage))
        offset += length
    return entries


def _header(
    entries: list[Entry],
    chunk_size: int,
    plan_digest: str,
    model_info: dict[str, Any],
    graph_index: dict[str, Any],
    source: dict[str, Any],
    keys: list[KeySource],
) -> tuple[str, bytes, list[SignatureEntry]]:
    """The container digest, the header bytes and the signatures."""
    body: dict[str, Any] = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "sealtrace_version": __version__,
        "alignment": ALIGNMENT,
        "chunk_size": chunk_size,
        "plan_digest": plan_digest,
        "model": model_info,
        "source": source,
        "sections": [e.to_json() for e in entries if e.kind == "section"],
        "tensors": [e.to_json() for e in entries if e.kind == "tensor"],
        "graph_index": graph_index,
    }
    digest = json_digest(body)
    signatures = sign(digest, keys)
    header = canonical_json({"container": body, "signatures": [s.to_json() for s in signatures]})
    if len(header) > MAX_HEADER_SIZE:
        raise SealingError(f"header of {len(header)} bytes exceeds the format's limit of {MAX_HEADER_SIZE}")
    return digest, header, signatures


def _index(graph: bytes) -> dict[str, Any]:
    index = graph_index(graph)
    if index is None:  # protobuf's own serializer wrote these bytes
        raise AssertionError("the serialized graph is not well-formed protobuf")
    return index


def _model_info(proto: ModelProto) -> dict[str, Any]:
    return {
        "ir_version": proto.ir_version,
        "producer_name": proto.producer_name,
        "producer_version": proto.producer_version,
        "domain": proto.domain,
        "model_version": proto.model_version,
        "graph_name": proto.graph.name,
        "opset_imports": [{"domain": o.domain, "version": o.version} for o in proto.opset_import],
    }


def _pad(f: BinaryIO, position: int, target: int) -> int:
    if target > position:
        f.write(b"\0" * (target - position))
    return target


def _hash_regions(views: list[memoryview], chunk_size: int, workers: int | None) -> list[tuple[str, ...]]:
    """Chunk digests of every region, all chunks of all regions spread over one thread pool."""
    jobs = [(i, span) for i, view in enumerate(views) for span in chunk_ranges(0, len(view), chunk_size)]

    def one(job: tuple[int, tuple[int, int]]) -> str:
        i, (start, end) = job
        return hashlib.sha256(views[i][start:end]).hexdigest()

    flat = hash_map(one, jobs, workers)
    grouped: list[list[str]] = [[] for _ in views]
    for (i, _), digest in zip(jobs, flat, strict=True):
        grouped[i].append(digest)
    return [tuple(g) for g in grouped]


def _proto_source(model: ModelProto) -> dict[str, Any]:
    """The source record of a model given as a proto (its weights must be in it)."""
    for name, tensor in model_tensors(model):
        if tensor.data_location == TensorProto.EXTERNAL:
            raise SealingError(f"tensor {name!r} refers to external data; seal the file, or load the data first")
    data = model.SerializeToString()
    return {"file_name": None, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "external_data": []}


def add_signatures(
    source: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    sign_with: KeySource | Sequence[KeySource],
    *,
    force: bool = False,
) -> tuple[str, ...]:
    """Verify ``source``, then write it to ``out_path`` with one more signature per key (a key that
    already signed is not added twice). The data area is copied unchanged; the container digest,
    which the signatures cover, stays the same. Returns the key ids of all signatures."""
    from sealtrace.container.format import open_container
    from sealtrace.container.verify import verify_container

    keys: list[KeySource] = list(sign_with) if isinstance(sign_with, (list, tuple)) else [sign_with]  # type: ignore[list-item]
    check_output(out_path, force, "-o")  # before the container is read and hashed
    with open_container(source) as container:
        verify_container(container)
        present = {s.key_id for s in container.signatures}
        added = [s for s in sign(container.digest, keys) if s.key_id not in present]
        signatures: list[SignatureEntry] = [*container.signatures, *added]
        header = canonical_json({"container": container.body, "signatures": [s.to_json() for s in signatures]})
        with atomic_output(out_path, force=force) as f:
            # A version 1 container stays version 1: its digest, which the signatures cover, is kept.
            f.write(PREAMBLE.pack(MAGIC, container.format_version, len(header), bytes.fromhex(container.digest)))
            f.write(header)
            _pad(f, PREAMBLE_SIZE + len(header), align(PREAMBLE_SIZE + len(header)))
            # Copied as read (a file truncated meanwhile is an IntegrityError and nothing is written);
            # a byte changed between the check and the copy fails every later verification, since
            # the signatures cover the digest, which covers every chunk.
            for start in range(container.data_start, container.size, 16 << 20):
                f.write(container.source.read(start, min(16 << 20, container.size - start)))
    return tuple(s.key_id for s in signatures)
