"""Directory manifests: the seal for checkpoint directories (orbax, safetensors shards, .npz ...).

A manifest records every regular file of a directory by relative path with its size and digest,
and for formats sealtrace can read (safetensors, .npy, .npz, ONNX external data) the digest of
each tensor's bytes, so a verification failure names the changed tensor, not just the file.
Verification reports changed, missing and extra files. Paths are relative, may not escape the
directory, and symbolic links are refused unless asked for (and even then must stay inside).

Format version 3 (written today; docs/container-format.md#directory-manifests) is format 2 plus the
array sets of :mod:`sealtrace.container.manifest_arrays`: each checkpoint array by name, dtype,
shape and value digest, so a re-save of identical values is told from a tamper.

Format version 2 hashes each byte
once: a file is cut into segments (each tensor whose byte range is known, and the bytes between
them), each segment into chunks of :data:`CHUNK_SIZE`, and every chunk is hashed once, on every
core; tensor digests and the file digest are composed from those chunk digests. Version 1 (the
sha256 of the whole file, then of each tensor again) is still read and verified::

    {"manifest": {"format": "sealtrace.manifest", "format_version": 3, "sealtrace_version": "...",
                  "files": [{"path", "size", "digest", "format",
                             "tensors": [{"name", "digest", "range": [start, end] | null}]}],
                  "arrays": [{"path", "kind", "files", "arrays": [{"name", "dtype", "shape", "digest"}]}]},
     "signatures": [...]}
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import stat
import struct
import threading
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from onnx import ModelProto, TensorProto

from sealtrace import __version__
from sealtrace.arrayfiles import NPY_MAGIC, ArrayFileError, NpyHeader, read_npy_header
from sealtrace.container.chunks import chunk_ranges
from sealtrace.container.errors import ContainerFormatError, IntegrityError, Mismatch
from sealtrace.container.format import parse_canonical_json, parse_signatures
from sealtrace.container.manifest_arrays import (
    check_set_records,
    compare_sets,
    find_array_sets,
    read_safetensors_header,
    split_relayout,
)
from sealtrace.container.signatures import (
    KeySource,
    SignatureCheck,
    TrustSource,
    check_signatures,
    sign,
    trusted_keys,
)
from sealtrace.container.weights import model_tensors
from sealtrace.digest import canonical_json, is_hex_digest, json_digest
from sealtrace.errors import InputError
from sealtrace.hashpool import hash_map
from sealtrace.limits import (
    BudgetExceededError,
    check_allocation,
    has_control_characters,
    open_regular_file,
    read_regular_file,
)
from sealtrace.outputs import atomic_output, check_output

FORMAT_NAME = "sealtrace.manifest"
FORMAT_VERSION = 3  # what create_manifest writes; 1 and 2 are still read and verified
SUPPORTED_VERSIONS = (1, 2, 3)
# Format 2 hashes in chunks of this many bytes: a byte string of at most one chunk has as digest its
# plain sha256 (so a small file's digest is what sha256sum prints); a longer one, the sha256 of the
# chunks' digests (see chunked_digest). Part of the format: changing it is a new format version.
CHUNK_SIZE = 64 << 20
# Bytes read per pread: one buffer per hashing thread, so memory stays flat whatever the file size.
_READ_BLOCK = 1 << 20
MAX_MANIFEST_SIZE = 256 << 20
_BLOCK = 4 << 20


class ManifestPathError(InputError):
    """A path in the directory or the manifest is refused: escaping, a symlink, not a regular file."""


def check_relative_path(path: Any, what: str = "path") -> str:
    """A manifest path: relative, '/'-separated, no '.', '..' or empty parts, no control characters."""
    if not isinstance(path, str) or not path or len(path) > 4096:
        raise ContainerFormatError(f"manifest {what} must be a non-empty string")
    if path.startswith("/") or "\\" in path or re.match(r"[A-Za-z]:", path):
        raise ContainerFormatError(f"manifest {what} {path[:80]!r} is absolute or not '/'-separated")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise ContainerFormatError(f"manifest {what} {path[:80]!r} has an empty, '.' or '..' component")
    if has_control_characters(path):
        raise ContainerFormatError(f"manifest {what} {path[:80]!r} contains control characters")
    return path


@dataclass(frozen=True)
class RefusedEntry:
    """Something in a directory that a manifest cannot record: a link not followed or leading
    outside, a device or pipe, a loop, an unlistable directory, a name a manifest path cannot hold."""

    path: str  # relative, as found (any character: shown with repr wherever it is printed)
    reason: str


def _recordable(rel: str) -> str | None:
    """Why ``rel`` cannot be a manifest path (None when it can)."""
    try:
        check_relative_path(rel)
        rel.encode("utf-8")  # a name that is not UTF-8 on disk comes back with lone surrogates
    except ContainerFormatError:
        return "a name a manifest path cannot hold (backslash, control character or empty part)"
    except UnicodeEncodeError:
        return "a file name that is not valid UTF-8"
    return None


def _walk(root: Path, follow_symlinks: bool, exclude: set[str]) -> tuple[list[tuple[str, Path]], list[RefusedEntry]]:
    """(relative path, real path) of every regular file under ``root``, sorted, links checked; and
    every entry that cannot be recorded, each with its reason (the walk goes on past them)."""
    if not root.is_dir():
        raise ManifestPathError(f"{root}: not a directory")
    real_root = root.resolve()
    visited: set[Path] = {real_root}
    files: list[tuple[str, Path]] = []
    refused: list[RefusedEntry] = []

    def inside(target: Path) -> bool:
        return target == real_root or real_root in target.parents

    def walk(directory: Path, prefix: str) -> None:
        try:
            names = sorted(os.listdir(directory))
        except OSError as exc:
            refused.append(RefusedEntry(prefix.rstrip("/") or ".", f"cannot list the directory ({exc.strerror})"))
            return
        for name in names:
            rel = f"{prefix}{name}"
            path = directory / name
            try:
                info = os.lstat(path)
                if stat.S_ISLNK(info.st_mode):
                    if not follow_symlinks:
                        refused.append(RefusedEntry(rel, "a symbolic link (not followed; use --follow-symlinks)"))
                        continue
                    target = path.resolve()
                    if not inside(target):
                        refused.append(RefusedEntry(rel, "a symbolic link leading outside the directory"))
                        continue
                    info = os.stat(target)
                    path = target
            except (OSError, RuntimeError) as exc:  # vanished meanwhile, or a link loop
                refused.append(RefusedEntry(rel, f"unreadable ({getattr(exc, 'strerror', None) or exc})"))
                continue
            if stat.S_ISDIR(info.st_mode):
                real = path.resolve()
                if real in visited:
                    refused.append(RefusedEntry(rel, "a directory link loop"))
                    continue
                visited.add(real)
                walk(path, rel + "/")
            elif not stat.S_ISREG(info.st_mode):
                refused.append(RefusedEntry(rel, "not a regular file (a device, socket or pipe)"))
            elif (why := _recordable(rel)) is not None:
                refused.append(RefusedEntry(rel, why))
            elif rel not in exclude:
                files.append((rel, path))

    walk(root, "")
    return files, refused


def _file_sha256(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    f, _declared = open_regular_file(path, "file", ManifestPathError)  # swapped for a FIFO: refused
    with f:
        while block := f.read(_BLOCK):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def _range_sha256(f: Any, offset: int, length: int) -> str:
    digest = hashlib.sha256()
    f.seek(offset)
    remaining = length
    while remaining > 0:
        block = f.read(min(_BLOCK, remaining))
        if not block:
            break  # a short file hashes short; the file digest already differs
        digest.update(block)
        remaining -= len(block)
    return digest.hexdigest()


def file_format(rel: str) -> str | None:
    """The per-tensor format sealtrace reads for this file name, if any."""
    suffix = rel.rsplit(".", 1)[-1].lower() if "." in rel else ""
    return {"safetensors": "safetensors", "npy": "npy", "npz": "npz"}.get(suffix)


def _safetensors_tensors(path: Path) -> list[dict[str, str]]:
    """Format 1: sha256 of each tensor's bytes in a safetensors file (header bounded, offsets checked)."""
    with path.open("rb") as f:
        return [{"name": name, "sha256": _range_sha256(f, start, end - start)} for name, start, end in _safetensors_ranges(path)]


def _safetensors_ranges(path: Path) -> list[tuple[str, int, int]]:
    """(name, start, end) of each tensor's bytes in a safetensors file, as file offsets, sorted by
    name (header bounded, offsets checked against the file)."""
    return [(t.name, t.start, t.end) for t in read_safetensors_header(path, ManifestPathError)]


# Per-tensor digests of .npy and .npz files are sha256 over the array's bytes in C order (what
# ``np.ascontiguousarray(a).tobytes()`` gives, in the dtype as stored; b"" for an empty array). They
# are computed from the file in blocks: a C-order array's data region is exactly those bytes, so a
# forged header (10^12 elements in 145 bytes) or a zip bomb never becomes an allocation. Only a
# Fortran-order array is read whole (its C order is a transpose), after the memory-budget check.


def _npy_tensors(path: Path, rel: str) -> list[dict[str, str]]:
    f, size = open_regular_file(path, ".npy file", ArrayFileError)
    with f:
        header = read_npy_header(f, rel)
        if header.data_offset + header.nbytes > size:
            raise ArrayFileError(f"{rel}: header declares {header.nbytes} bytes of data, the file holds fewer")
        digest = _data_sha256(f, header, rel)
    return [{"name": rel.rsplit("/", 1)[-1], "sha256": digest}]


def _npz_tensors(path: Path, rel: str, new_hash: Any = hashlib.sha256, key: str = "sha256") -> list[dict[str, Any]]:
    """The digest of each member of an .npz archive (``new_hash``: the digest of the format
    version written, under ``key``); each member is decompressed as a stream, never whole."""
    f, _size = open_regular_file(path, ".npz archive", ArrayFileError)
    with f, zipfile.ZipFile(f) as archive:
        found = []
        for info in archive.infolist():
            name = info.filename[: -len(".npy")] if info.filename.endswith(".npy") else info.filename
            with archive.open(info) as member:
                if member.read(len(NPY_MAGIC)) != NPY_MAGIC:
                    digest = _raw_member_sha256(archive, info, new_hash)
                else:
                    member.seek(0)
                    where = f"{rel}: array {name[:80]!r}"
                    header = read_npy_header(member, where)
                    if header.data_offset + header.nbytes > info.file_size:
                        raise ArrayFileError(f"{where}: header declares more data than the member holds")
                    digest = _data_sha256(member, header, where, new_hash)
            found.append({"name": name, key: digest})
        return sorted(found, key=lambda t: t["name"])


def _raw_member_sha256(archive: zipfile.ZipFile, info: zipfile.ZipInfo, new_hash: Any = hashlib.sha256) -> str:
    """A member that is not a .npy array (NumPy's loader returns its bytes): the digest of those bytes."""
    digest = new_hash()
    with archive.open(info) as member:
        while block := member.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _data_sha256(stream: Any, header: NpyHeader, where: str, new_hash: Any = hashlib.sha256) -> str:
    """The digest (``new_hash``: sha256, or format 2's :class:`ChunkedSha256`) of the C-order bytes
    of the array whose checked header was just read from ``stream``."""
    nbytes = header.nbytes
    digest = new_hash()
    if nbytes == 0:
        return digest.hexdigest()
    if header.fortran_order and sum(d > 1 for d in header.shape) > 1:
        check_allocation(nbytes, f"{where}: Fortran-order array (read whole to hash it in C order)")
        data = _read_exactly(stream, nbytes, where)
        array = np.frombuffer(data, header.dtype).reshape(header.shape[::-1]).transpose()
        for part in _c_order_parts(array):
            digest.update(part)
        return digest.hexdigest()
    remaining = nbytes  # C order (or one axis only): the data region is the C-order bytes
    while remaining:
        block = stream.read(min(_BLOCK, remaining))
        if not block:
            raise ArrayFileError(f"{where}: data ends early")
        digest.update(block)
        remaining -= len(block)
    return digest.hexdigest()


def _read_exactly(stream: Any, nbytes: int, where: str) -> bytearray:
    buffer = bytearray(nbytes)
    view = memoryview(buffer)
    filled = 0
    while filled < nbytes:
        n = stream.readinto(view[filled : filled + _BLOCK])
        if not n:
            raise ArrayFileError(f"{where}: data ends early")
        filled += n
    return buffer


def _c_order_parts(array: np.ndarray) -> Iterator[bytes]:
    """The C-order bytes of ``array`` in consecutive parts of at most about _BLOCK bytes (ranges of
    one axis under fixed leading indices), so hashing it costs no second copy of the whole."""
    shape = array.shape
    if array.nbytes <= _BLOCK or array.ndim == 0:
        yield array.tobytes()
        return
    axis, inner = 0, array.nbytes  # inner: bytes under one index of the axes before `axis`
    while axis < array.ndim - 1 and inner // shape[axis] > _BLOCK:
        inner //= shape[axis]
        axis += 1
    step = max(1, _BLOCK // max(inner // shape[axis], 1))
    for index in np.ndindex(*shape[:axis]):
        sub = array[index]
        for start in range(0, shape[axis], step):
            yield sub[start : start + step].tobytes()  # tobytes() is C order whatever the layout


def _external_data_ranges(files: dict[str, Path], verifying: bool = False) -> dict[str, list[tuple[str, int, int]]]:
    """(tensor name, offset, length) of each tensor stored in ONNX external data files, by data
    file, found through the .onnx files of the directory that name them.

    Each .onnx file is read whole to parse it, within the memory budget: over it, creating a
    manifest is refused and verifying goes on without that file's tensor names."""
    found: dict[str, list[tuple[str, int, int]]] = {}
    for rel, path in files.items():
        if not rel.lower().endswith(".onnx"):
            continue
        model = ModelProto()
        try:
            f, size = open_regular_file(path, "ONNX file", ManifestPathError)
            with f:
                check_allocation(size, f"{rel}: ONNX file (read whole to find its external data)")
                data = f.read(size)
        except BudgetExceededError:
            if not verifying:
                raise
            continue
        try:
            model.ParseFromString(data)
        except Exception:  # protobuf raises assorted errors; an unparsable .onnx is a plain file
            continue
        base = rel.rsplit("/", 1)[0] + "/" if "/" in rel else ""
        for scope_name, tensor in model_tensors(model):
            if tensor.data_location != TensorProto.EXTERNAL:
                continue
            info = {e.key: e.value for e in tensor.external_data}
            location = os.path.normpath(base + info.get("location", "")).replace(os.sep, "/")
            if location not in files:
                continue  # missing or outside the directory: the file listing reports what matters
            try:
                offset = int(info.get("offset", 0) or 0)
                length = int(info["length"]) if info.get("length") else files[location].stat().st_size - offset
            except (ValueError, OSError):
                continue  # a malformed reference: the data file is still hashed as a whole
            if offset < 0 or length < 0:
                continue
            found.setdefault(location, []).append((scope_name, offset, length))
    return found


def _external_data_tensors(files: dict[str, Path], verifying: bool = False) -> dict[str, list[dict[str, str]]]:
    """Format 1: the sha256 of each ONNX external data tensor's range, by data file."""
    found = {location: _range_tensors(files[location], ranges) for location, ranges in _external_data_ranges(files, verifying).items()}
    return {location: tensors for location, tensors in found.items() if tensors}


def _range_tensors(path: Path, ranges: list[tuple[str, int, int]]) -> list[dict[str, str]]:
    """The sha256 of each (name, offset, length) range of ``path`` that can be read."""
    found = []
    for name, offset, length in ranges:
        try:
            with path.open("rb") as f:
                digest = _range_sha256(f, offset, length)
        except OSError:
            continue
        found.append({"name": name, "sha256": digest})
    return found


def _describe_file(
    rel: str,
    path: Path,
    external: list[dict[str, str]] | None,
    *,
    verifying: bool = False,
    recorded: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The file record of ``rel``.

    When ``verifying``, per-tensor digests are computed only for a file that differs from its
    ``recorded`` entry (or has none), and one whose tensors would take more than the memory budget
    is listed without them (key "tensors_skipped" says why): a changed file is a failed check
    whatever its tensors cost. When creating, that budget error stands (exit 2): a manifest's
    content must not depend on the budget it was made with.
    """
    digest, size = _file_sha256(path)
    kind = file_format(rel)
    tensors: list[dict[str, str]] = []
    skipped: str | None = None
    if verifying and recorded is not None and recorded["sha256"] == digest and recorded["size"] == size:
        kind = None  # unchanged: its tensors are the recorded ones, nothing to list
    try:
        if kind == "safetensors":
            tensors = _safetensors_tensors(path)
        elif kind == "npy":
            tensors = _npy_tensors(path, rel)
        elif kind == "npz":
            tensors = _npz_tensors(path, rel)
    except BudgetExceededError as exc:
        if not verifying:
            raise
        kind, tensors, skipped = None, [], str(exc)
    except (OSError, ValueError, KeyError, TypeError, EOFError, RecursionError, ArrayFileError, zipfile.BadZipFile,
            zipfile.LargeZipFile, zlib.error, NotImplementedError, RuntimeError, struct.error):
        kind, tensors = None, []  # unreadable as that format: recorded as a plain file
    if external:
        kind, tensors = "onnx-external-data", sorted(external, key=lambda t: t["name"])
    record = {"path": rel, "size": size, "sha256": digest, "format": kind, "tensors": tensors}
    if skipped is not None:
        record["tensors_skipped"] = skipped
    return record


# ---- Format 2: each byte hashed once, in chunks spread over every core ----------------------------


def chunked_digest(length: int, chunk_digests: Sequence[bytes]) -> str:
    """Format 2's digest of ``length`` bytes from the raw sha256 of each of their chunks of
    :data:`CHUNK_SIZE` (the last one shorter; one empty chunk for no bytes): the plain sha256 when
    there is one chunk, else sha256 over a domain tag, the chunk size, the length and the chunk digests."""
    if length <= CHUNK_SIZE:
        return chunk_digests[0].hex()
    head = b"sealtrace.chunked-sha256\0" + struct.pack("<QQ", CHUNK_SIZE, length)
    return hashlib.sha256(head + b"".join(chunk_digests)).hexdigest()


def file_digest(size: int, segments: Sequence[tuple[int, str]]) -> str:
    """Format 2's digest of a file of ``size`` bytes cut into ``segments`` ((length, chunked digest)
    in file order, covering it): the one segment's digest when there is one (a file without tensor
    ranges), else sha256 over a domain tag, the size, the count and each segment's length and digest."""
    if len(segments) == 1:
        return segments[0][1]
    digest = hashlib.sha256(b"sealtrace.file-segments\0" + struct.pack("<QQ", size, len(segments)))
    for length, hexdigest in segments:
        digest.update(struct.pack("<Q", length) + bytes.fromhex(hexdigest))
    return digest.hexdigest()


class ChunkedSha256:
    """Format 2's digest of a byte stream fed in parts (a decompressed .npz member, the C order of a
    Fortran array): the same value :func:`chunked_digest` gives over the stream's chunks."""

    def __init__(self) -> None:
        self._done: list[bytes] = []
        self._current = hashlib.sha256()
        self._filled = 0
        self._length = 0

    def update(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        while len(view):
            take = min(len(view), CHUNK_SIZE - self._filled)
            self._current.update(view[:take])
            self._filled += take
            self._length += take
            view = view[take:]
            if self._filled == CHUNK_SIZE:
                self._done.append(self._current.digest())
                self._current, self._filled = hashlib.sha256(), 0

    def hexdigest(self) -> str:
        chunks = self._done + ([self._current.digest()] if self._filled or not self._done else [])
        return chunked_digest(self._length, chunks)


def file_segments(size: int, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The segments of a file of ``size`` bytes: each of ``ranges`` (sorted, not overlapping, inside
    the file) and each non-empty run of bytes between them; the whole file when there are none."""
    if not ranges:
        return [(0, size)]
    segments: list[tuple[int, int]] = []
    position = 0
    for start, end in ranges:
        if start > position:
            segments.append((position, start))
        segments.append((start, end))
        position = end
    if position < size:
        segments.append((position, size))
    return segments


@dataclass
class _FilePlan:
    """How one file is hashed in format 2, and what its record holds besides the digests."""

    rel: str
    path: Path
    size: int
    kind: str | None
    ranged: list[tuple[str, int, int]]  # tensors whose ranges are segments: (name, start, end)
    extra: list[tuple[str, int, int]] = field(default_factory=list)  # ranges overlapping a segment: hashed apart
    streamed: list[dict[str, Any]] = field(default_factory=list)  # digests already computed (npz, Fortran)
    skipped: str | None = None
    recorded: dict[str, Any] | None = None  # verifying against this entry's own ranges


@dataclass(frozen=True)
class _ChunkJob:
    """Contiguous chunks of one file, hashed by one thread with one open file and one read pass."""

    rel: str
    path: Path
    size: int
    chunks: list[tuple[int, int]]


def _split_overlaps(tensors: list[tuple[str, int, int]]) -> tuple[list[tuple[str, int, int]], list[tuple[str, int, int]]]:
    """Tensors whose ranges become segments (in file order, none overlapping the one before) and
    the rest (ranges that overlap: two tensors sharing bytes), whose bytes are hashed apart."""
    segments: list[tuple[str, int, int]] = []
    others: list[tuple[str, int, int]] = []
    position = 0
    for name, start, end in sorted(tensors, key=lambda t: (t[1], t[2], t[0])):
        (segments if start >= position else others).append((name, start, end))
        if start >= position:
            position = end
    return segments, others


def _plan_file(
    rel: str, path: Path, external: list[tuple[str, int, int]] | None, verifying: bool
) -> _FilePlan:
    """Read what a file's format says about its layout (never its tensor data, but for an .npz
    member or a Fortran-order array, whose digests are computed here from a stream)."""
    f, size = open_regular_file(path, "file", ManifestPathError)  # swapped for a FIFO: refused
    f.close()
    kind = file_format(rel)
    tensors: list[tuple[str, int, int]] = []
    streamed: list[dict[str, Any]] = []
    skipped: str | None = None
    try:
        if kind == "safetensors":
            tensors = _safetensors_ranges(path)
        elif kind == "npy":
            tensors, streamed = _npy_layout(path, rel)
        elif kind == "npz":
            streamed = [{**t, "range": None} for t in _npz_tensors(path, rel, ChunkedSha256, "digest")]
    except BudgetExceededError as exc:
        if not verifying:
            raise
        kind, tensors, streamed, skipped = None, [], [], str(exc)
    except (OSError, ValueError, KeyError, TypeError, EOFError, RecursionError, ArrayFileError, zipfile.BadZipFile,
            zipfile.LargeZipFile, zlib.error, NotImplementedError, RuntimeError, struct.error):
        kind, tensors, streamed = None, [], []  # unreadable as that format: recorded as a plain file
    if external:
        kind, streamed = "onnx-external-data", []
        # A range past the end hashes the bytes there are (as format 1 did), so it ends at the end.
        tensors = [(name, min(offset, size), min(offset + length, size)) for name, offset, length in external]
    ranged, extra = _split_overlaps(tensors)
    return _FilePlan(rel, path, size, kind, ranged, extra, streamed, skipped)


def _npy_layout(path: Path, rel: str) -> tuple[list[tuple[str, int, int]], list[dict[str, Any]]]:
    """An .npy file's array: its data range when the file holds its C-order bytes, else (a
    Fortran-order array) its digest computed from the C order, within the memory budget."""
    f, size = open_regular_file(path, ".npy file", ArrayFileError)
    name = rel.rsplit("/", 1)[-1]
    with f:
        header = read_npy_header(f, rel)
        if header.data_offset + header.nbytes > size:
            raise ArrayFileError(f"{rel}: header declares {header.nbytes} bytes of data, the file holds fewer")
        if header.fortran_order and sum(d > 1 for d in header.shape) > 1:
            return [], [{"name": name, "digest": _data_sha256(f, header, rel, ChunkedSha256), "range": None}]
    return [(name, header.data_offset, header.data_offset + header.nbytes)], []


def _recorded_plan(rel: str, path: Path, entry: dict[str, Any]) -> _FilePlan:
    """Verifying a file of the recorded size: hash it along the recorded ranges, parse nothing."""
    ranged = [(t["name"], *t["range"]) for t in entry["tensors"] if t["range"] is not None]
    ranged.sort(key=lambda t: (t[1], t[2], t[0]))
    return _FilePlan(rel, path, entry["size"], entry["format"], ranged, recorded=entry)


def _jobs(rel: str, path: Path, size: int, chunks: list[tuple[int, int]]) -> list[_ChunkJob]:
    """Consecutive chunks packed into jobs of at most :data:`CHUNK_SIZE` bytes (a job per chunk of
    a large tensor; many small tensors of one file in one job, one open and one read pass)."""
    jobs: list[_ChunkJob] = []
    batch: list[tuple[int, int]] = []
    filled = 0
    for chunk in chunks:
        length = chunk[1] - chunk[0]
        if batch and (filled + length > CHUNK_SIZE or chunk[0] != batch[-1][1]):
            jobs.append(_ChunkJob(rel, path, size, batch))
            batch, filled = [], 0
        batch.append(chunk)
        filled += length
    if batch:
        jobs.append(_ChunkJob(rel, path, size, batch))
    return jobs


def _chunks(start: int, end: int) -> list[tuple[int, int]]:
    return chunk_ranges(start, end - start, CHUNK_SIZE)


_buffers = threading.local()


def _hash_job(job: _ChunkJob) -> list[bytes]:
    """The raw sha256 of each chunk of ``job``: one pass of pread into this thread's buffer (pread
    and sha256 release the GIL, so jobs run on every core; no memory map, so a file truncated
    meanwhile is an error, not a SIGBUS)."""
    f, size = open_regular_file(job.path, "file", ManifestPathError)
    with f:
        if size != job.size:
            raise ManifestPathError(f"{job.rel!r}: changed while it was read ({job.size} bytes, then {size})")
        buffer = getattr(_buffers, "buffer", None)
        if buffer is None:
            buffer = _buffers.buffer = memoryview(bytearray(_READ_BLOCK))
        fd = f.fileno()
        digests: list[bytes] = []
        chunks = job.chunks
        index, digest = 0, hashlib.sha256()
        position, end = chunks[0][0], chunks[-1][1]
        while True:
            while index < len(chunks) and chunks[index][1] == position:  # chunks that end here
                digests.append(digest.digest())
                digest = hashlib.sha256()
                index += 1
            if position >= end:
                return digests
            got = os.preadv(fd, [buffer[: min(_READ_BLOCK, end - position)]], position)
            if got <= 0:
                raise ManifestPathError(f"{job.rel!r}: changed while it was read (ends at byte {position})")
            offset = 0
            while offset < got:
                take = min(got - offset, chunks[index][1] - position)
                digest.update(buffer[offset : offset + take])
                offset += take
                position += take
                while index < len(chunks) and chunks[index][1] == position:
                    digests.append(digest.digest())
                    digest = hashlib.sha256()
                    index += 1


def _hash_plans(plans: list[_FilePlan]) -> list[dict[str, Any]]:
    """Hash every chunk of every planned file once, all files' chunks spread over the hashing
    threads; the records."""
    jobs: list[_ChunkJob] = []
    layout: list[tuple[list[tuple[int, int]], int, list[int]]] = []  # segments, jobs, jobs per extra range
    for plan in plans:
        segments = file_segments(plan.size, [(s, e) for _, s, e in plan.ranged])
        own = _jobs(plan.rel, plan.path, plan.size, [c for s, e in segments for c in _chunks(s, e)])
        extra_jobs = [_jobs(plan.rel, plan.path, plan.size, _chunks(s, e)) for _, s, e in plan.extra]
        layout.append((segments, len(own), [len(j) for j in extra_jobs]))
        jobs += own
        for group in extra_jobs:
            jobs += group
    results = iter(hash_map(_hash_job, jobs))
    records = []
    for plan, (segments, own_jobs, extra_counts) in zip(plans, layout, strict=True):
        chunk_digests = [d for _ in range(own_jobs) for d in next(results)]
        position = 0
        by_range: dict[tuple[int, int], str] = {}
        summary = []
        for start, end in segments:
            count = len(_chunks(start, end))
            by_range[(start, end)] = chunked_digest(end - start, chunk_digests[position : position + count])
            summary.append((end - start, by_range[(start, end)]))
            position += count
        tensors: list[dict[str, Any]] = [{"name": n, "digest": by_range[(s, e)], "range": [s, e]} for n, s, e in plan.ranged]
        for (name, start, end), count in zip(plan.extra, extra_counts, strict=True):
            digests = [d for _ in range(count) for d in next(results)]
            tensors.append({"name": name, "digest": chunked_digest(end - start, digests), "range": None})
        record: dict[str, Any] = {"path": plan.rel, "size": plan.size, "digest": file_digest(plan.size, summary)}
        if plan.recorded is not None:
            record.update(format=plan.recorded["format"], tensors=plan.recorded["tensors"])
        else:
            tensors += plan.streamed
            record.update(format=plan.kind, tensors=sorted(tensors, key=_tensor_order))
            if plan.skipped is not None:
                record["tensors_skipped"] = plan.skipped
        records.append(record)
    return records


def _tensor_order(tensor: dict[str, Any]) -> tuple[str, list[int]]:
    return tensor["name"], tensor["range"] or []


def _scan_v2(
    found: list[tuple[str, Path]],
    recorded: dict[str, dict[str, Any]] | None,
) -> list[dict[str, Any]]:
    """Format 2 records of ``found``. Verifying (``recorded`` given), a file of its recorded size is
    hashed along its recorded ranges, and only a file whose digest then differs, or that has no
    entry or another size, is parsed for its own tensors (and so, when changed, read twice)."""
    files = dict(found)
    verifying = recorded is not None
    external: dict[str, list[tuple[str, int, int]]] = {}

    def fresh(item: tuple[str, Path]) -> _FilePlan:
        rel, path = item
        return _plan_file(rel, path, external.get(rel), verifying)

    if not verifying:
        external.update(_external_data_ranges(files, verifying))
        return _hash_plans(hash_map(fresh, found))
    assert recorded is not None
    first: list[_FilePlan] = []
    unrecorded: list[tuple[str, Path]] = []
    for rel, path in found:
        entry = recorded.get(rel)
        try:
            size = path.stat().st_size
        except OSError:
            size = -1  # gone meanwhile: planning it afresh names it
        if entry is not None and entry["size"] == size:
            first.append(_recorded_plan(rel, path, entry))
        else:
            unrecorded.append((rel, path))
    records = {r["path"]: r for r in _hash_plans(first)}
    changed = [(rel, files[rel]) for rel, r in records.items() if r["digest"] != recorded[rel]["digest"]]
    again = changed + unrecorded
    if again:  # parse the .onnx files only now: an unchanged directory needs none of them
        external.update(_external_data_ranges(files, verifying))
        records.update((r["path"], r) for r in _hash_plans(hash_map(fresh, again)))
    return [records[rel] for rel, _ in found]


def _exclusions(root: Path, paths: Sequence[str | os.PathLike[str]]) -> set[str]:
    real_root = root.resolve()
    found = set()
    for p in paths:
        real = Path(p).resolve()
        if real_root in real.parents:
            found.add(real.relative_to(real_root).as_posix())
    return found


def scan_directory(
    directory: str | os.PathLike[str],
    follow_symlinks: bool = False,
    exclude: Sequence[str | os.PathLike[str]] = (),
    format_version: int = FORMAT_VERSION,
) -> list[dict[str, Any]]:
    """File records (path, size, digest, format, tensors; in format 1 the digest key is "sha256")
    for every file of ``directory``.

    Anything that cannot be recorded (see :class:`RefusedEntry`) is refused with a
    :class:`ManifestPathError` naming it."""
    return _refuse_unrecordable(*_scan(directory, follow_symlinks, exclude, format_version=format_version))


def _refuse_unrecordable(records: list[dict[str, Any]], refused: list[RefusedEntry]) -> list[dict[str, Any]]:
    if refused:
        first = refused[0]
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise ManifestPathError(f"{first.path!r}: {first.reason}, refused{more}")
    return records


def _scan(
    directory: str | os.PathLike[str],
    follow_symlinks: bool,
    exclude: Sequence[str | os.PathLike[str]],
    recorded: dict[str, dict[str, Any]] | None = None,
    format_version: int = FORMAT_VERSION,
) -> tuple[list[dict[str, Any]], list[RefusedEntry]]:
    """File records and refused entries of ``directory``; ``recorded`` (a manifest's entries by path)
    means verifying (see :func:`_describe_file` and :func:`_scan_v2`)."""
    root = Path(directory)
    found, refused = _walk(root, follow_symlinks, _exclusions(root, exclude))
    if format_version >= 2:
        return _scan_v2(found, recorded), refused
    files = dict(found)
    verifying = recorded is not None
    external = _external_data_tensors(files, verifying)

    def describe(item: tuple[str, Path]) -> dict[str, Any]:
        rel, path = item
        return _describe_file(
            rel, path, external.get(rel), verifying=verifying, recorded=(recorded or {}).get(rel)
        )

    records = hash_map(describe, files.items())
    return records, refused


@dataclass(frozen=True)
class ManifestInfo:
    """What :func:`create_manifest` wrote."""

    path: str
    digest: str
    files: int
    tensors: int
    arrays: int = 0  # in the array sets (format 3)


def create_manifest(
    directory: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    *,
    sign_with: Sequence[KeySource] = (),
    follow_symlinks: bool = False,
    force: bool = False,
    format_version: int = FORMAT_VERSION,
) -> ManifestInfo:
    """Write a manifest of ``directory`` to ``out_path`` (atomically; existing file kept unless ``force``).

    ``format_version`` 1 writes the former format (whole-file sha256, each byte hashed twice), for
    readers that know no other."""
    if format_version not in SUPPORTED_VERSIONS:
        raise InputError(f"manifest format_version {format_version} is not supported (one of {SUPPORTED_VERSIONS})")
    check_output(out_path, force, "manifest")  # before the directory is hashed, which may take long
    files = _refuse_unrecordable(*_scan(directory, follow_symlinks, [out_path], format_version=format_version))
    body: dict[str, Any] = {
        "format": FORMAT_NAME,
        "format_version": format_version,
        "sealtrace_version": __version__,
        "files": files,
    }
    if format_version >= 3:
        body["arrays"] = find_array_sets(Path(directory), files, ChunkedSha256)
    digest = json_digest(body)
    signatures = sign(digest, list(sign_with))
    with atomic_output(out_path, force=force) as f:
        f.write(canonical_json({"manifest": body, "signatures": [s.to_json() for s in signatures]}))
    arrays = sum(len(s["arrays"]) for s in body.get("arrays", []))
    return ManifestInfo(str(out_path), digest, len(files), sum(len(f["tensors"]) for f in files), arrays)


def read_manifest(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[Any], str]:
    """Parse a manifest strictly; (body, signatures, digest)."""
    where = os.fspath(path)
    # A regular file only (never /dev/zero), and no larger than a manifest may be.
    raw = read_regular_file(path, "manifest", ContainerFormatError, max_bytes=MAX_MANIFEST_SIZE)
    document = parse_canonical_json(raw, f"{where}")
    if not isinstance(document, dict) or set(document) != {"manifest", "signatures"}:
        raise ContainerFormatError(f"{where}: a manifest has exactly the keys 'manifest' and 'signatures'")
    body = document["manifest"]
    if not isinstance(body, dict) or body.get("format") != FORMAT_NAME:
        raise ContainerFormatError(f"{where}: not a sealtrace manifest")
    version = body.get("format_version")
    if isinstance(version, bool) or version not in SUPPORTED_VERSIONS:
        raise ContainerFormatError(f"{where}: manifest format_version {str(version)[:20]} is not supported")
    keys = {"format", "format_version", "sealtrace_version", "files"} | ({"arrays"} if version >= 3 else set())
    if set(body) != keys:
        raise ContainerFormatError(f"{where}: malformed manifest object")
    if not isinstance(body["files"], list):
        raise ContainerFormatError(f"{where}: 'files' must be a list")
    key = digest_key(version)
    tensor_keys = {"name", "sha256"} if version == 1 else {"name", "digest", "range"}
    seen: set[str] = set()
    for item in body["files"]:
        if not isinstance(item, dict) or set(item) != {"path", "size", key, "format", "tensors"}:
            raise ContainerFormatError(f"{where}: malformed file entry")
        rel = check_relative_path(item["path"])
        if rel in seen:
            raise ContainerFormatError(f"{where}: {rel!r} listed twice")
        seen.add(rel)
        if not is_hex_digest(item[key]):
            raise ContainerFormatError(f"{where}: {rel!r}: malformed {key}")
        if isinstance(item["size"], bool) or not isinstance(item["size"], int) or item["size"] < 0:
            raise ContainerFormatError(f"{where}: {rel!r}: malformed size")
        if item["format"] not in (None, "safetensors", "npy", "npz", "onnx-external-data"):
            raise ContainerFormatError(f"{where}: {rel!r}: unknown format")
        if not isinstance(item["tensors"], list) or not all(
            isinstance(t, dict) and set(t) == tensor_keys and isinstance(t["name"], str)
            and is_hex_digest(t[key])
            for t in item["tensors"]
        ):  # fmt: skip
            raise ContainerFormatError(f"{where}: {rel!r}: malformed tensor list")
        if version >= 2:
            _check_ranges(item, f"{where}: {rel!r}")
    if version >= 3:
        check_set_records(body["arrays"], where, check_relative_path, is_hex_digest)
    signatures = parse_signatures(document["signatures"], where)
    return body, signatures, json_digest(body)


def digest_key(format_version: int) -> str:
    """The key of a file's and a tensor's digest in a manifest of this format version."""
    return "sha256" if format_version == 1 else "digest"


def _check_ranges(item: dict[str, Any], where: str) -> None:
    """Format 2: tensor ranges are [start, end] inside the file, and the ranged ones do not overlap
    (they are the segments a verifier hashes the file along)."""
    ranges = []
    for tensor in item["tensors"]:
        span = tensor["range"]
        if span is None:
            continue
        if not (
            isinstance(span, list) and len(span) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in span)
            and 0 <= span[0] <= span[1] <= item["size"]
        ):  # fmt: skip
            raise ContainerFormatError(f"{where}: malformed tensor range")
        ranges.append((span[0], span[1]))
    ranges.sort()
    if any(after[0] < before[1] for before, after in itertools.pairwise(ranges)):
        raise ContainerFormatError(f"{where}: tensor ranges overlap")


@dataclass
class ManifestReport:
    """The outcome of checking a directory against a manifest."""

    directory: str
    digest: str
    files: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    signatures: list[SignatureCheck] = field(default_factory=list)
    arrays: int = 0  # arrays checked (format 3)
    # Files (and their tensors) that changed inside checkpoints whose every array is unchanged:
    # a re-layout (a re-save, a re-shard), not a failure unless verifying with exact_files.
    relaid_out: list[Mismatch] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "ok": self.ok,
            "manifest_digest": self.digest,
            "files": self.files,
            "arrays": self.arrays,
            "mismatches": [m.to_json() for m in self.mismatches],
            "relaid_out": [m.to_json() for m in self.relaid_out],
            "signatures": [s.to_json() for s in self.signatures],
        }


def verify_manifest(
    directory: str | os.PathLike[str],
    manifest_path: str | os.PathLike[str],
    *,
    trust: Sequence[TrustSource] = (),
    require_signature: bool = False,
    follow_symlinks: bool = False,
    raise_on_failure: bool = True,
    exact_files: bool = False,
) -> ManifestReport:
    """Check ``directory`` against a manifest; name every changed array (format 3), and every
    changed, missing or extra file and changed tensor. Raises :class:`IntegrityError` on any
    mismatch unless ``raise_on_failure`` is False.

    In format 3, the changed files of a checkpoint whose every array (name, dtype, shape, values)
    is unchanged are a re-layout (``report.relaid_out``), not a mismatch, unless ``exact_files``."""
    if require_signature and not trust:
        raise InputError("--require-signature needs at least one trusted public key (--trust KEY.pub)")
    body, signatures, digest = read_manifest(manifest_path)
    report = ManifestReport(os.fspath(directory), digest)
    checks, problems = check_signatures(digest, signatures, trusted_keys(trust), require_signature)
    report.signatures = checks
    report.mismatches.extend(problems)
    expected = {item["path"]: item for item in body["files"]}
    version = body["format_version"]
    key = digest_key(version)
    # A missing DIRECTORY is bad input (ManifestPathError, exit 2); what cannot be recorded inside
    # it is reported entry by entry, and every other file is still compared.
    records, refused = _scan(
        directory, follow_symlinks, exclude=[manifest_path], recorded=expected, format_version=version
    )
    actual = {item["path"]: item for item in records}
    report.files = len(actual)
    refused_at = {entry.path: entry for entry in refused}
    for rel in sorted(set(expected) | set(actual) | set(refused_at)):
        want, got = expected.get(rel), actual.get(rel)
        if rel in refused_at:
            recorded = f"{key} {want[key]}" if want else "no such file (not in the manifest)"
            report.mismatches.append(Mismatch("file", rel, recorded, refused_at[rel].reason))
            continue
        if got is None:
            report.mismatches.append(Mismatch("file", rel, f"{key} {want[key] if want else '?'}", "missing"))
            continue
        if want is None:
            report.mismatches.append(Mismatch("file", rel, "no such file (not in the manifest)", f"extra file, {key} {got[key]}"))
            continue
        if want[key] == got[key] and want["size"] == got["size"]:
            continue
        found = f"{key} {got[key]} ({got['size']} bytes)"
        if "tensors_skipped" in got:
            report.mismatches.append(
                Mismatch("file", rel, f"{key} {want[key]} ({want['size']} bytes)",
                         f"{found}; its tensors are not listed: {got['tensors_skipped']}")
            )  # fmt: skip
            continue
        report.mismatches.append(Mismatch("file", rel, f"{key} {want[key]} ({want['size']} bytes)", found))
        before = {t["name"]: t[key] for t in want["tensors"]}
        after = {t["name"]: t[key] for t in got["tensors"]}
        for name in sorted(set(before) | set(after)):
            if before.get(name) != after.get(name):
                report.mismatches.append(
                    Mismatch("tensor", f"{rel}:{name}", f"{key} {before.get(name, 'absent')}", f"{key} {after.get(name, 'absent')}")
                )
    if version >= 3:
        _check_arrays(report, Path(directory), body["arrays"], records, expected, exact_files)
    if raise_on_failure and report.mismatches:
        raise IntegrityError(os.fspath(directory), report.mismatches)
    return report


def _check_arrays(
    report: ManifestReport,
    directory: Path,
    recorded: list[dict[str, Any]],
    records: list[dict[str, Any]],
    expected: dict[str, dict[str, Any]],
    exact_files: bool,
) -> None:
    """Format 3: report each changed array first, and move the file changes of checkpoints whose
    arrays are all unchanged from the mismatches to the re-layout."""
    current = find_array_sets(directory, records, ChunkedSha256, {(s["path"], s["kind"]): s for s in recorded}, expected)
    report.arrays = sum(len(s["arrays"]) for s in current)
    differences, relaid = compare_sets(recorded, current)
    kept, report.relaid_out = split_relayout(report.mismatches, set() if exact_files else relaid)
    report.mismatches = differences + kept
