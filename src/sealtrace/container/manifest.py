"""Directory manifests: the seal for checkpoint directories (orbax, safetensors shards, .npz ...).

A manifest records every regular file of a directory by relative path with its size and sha256,
and for formats sealtrace can read (safetensors, .npy, .npz, ONNX external data) the sha256 of
each tensor's bytes, so a verification failure names the changed tensor, not just the file.
Verification reports changed, missing and extra files. Paths are relative, may not escape the
directory, and symbolic links are refused unless asked for (and even then must stay inside).

Format (canonical JSON; digest = sha256 of the canonical "manifest" object)::

    {"manifest": {"format": "sealtrace.manifest", "format_version": 1, "sealtrace_version": "...",
                  "files": [{"path", "size", "sha256", "format", "tensors": [{"name", "sha256"}]}]},
     "signatures": [...]}
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from onnx import ModelProto, TensorProto

from sealtrace import __version__
from sealtrace.arrayfiles import NPY_MAGIC, ArrayFileError, NpyHeader, read_npy_header
from sealtrace.container.chunks import default_workers
from sealtrace.container.errors import ContainerFormatError, IntegrityError, Mismatch
from sealtrace.container.format import parse_canonical_json, parse_signatures
from sealtrace.container.signatures import (
    KeySource,
    SignatureCheck,
    TrustSource,
    check_signatures,
    sign,
    trusted_keys,
)
from sealtrace.container.weights import model_tensors
from sealtrace.digest import canonical_json, json_digest
from sealtrace.errors import InputError
from sealtrace.limits import BudgetExceededError, check_allocation, open_regular_file, read_regular_file
from sealtrace.outputs import atomic_output, check_output

FORMAT_NAME = "sealtrace.manifest"
FORMAT_VERSION = 1
MAX_MANIFEST_SIZE = 256 << 20
# safetensors bounds its own header to 100 MB; so do we when reading one.
MAX_SAFETENSORS_HEADER = 100_000_000
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
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
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
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
    """sha256 of each tensor's bytes in a safetensors file (header bounded, offsets checked)."""
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) != 8:
            raise ValueError("too short for a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > min(MAX_SAFETENSORS_HEADER, size - 8):
            raise ValueError("safetensors header length out of range")
        header = json.loads(f.read(n))
        if not isinstance(header, dict):
            raise ValueError("safetensors header is not an object")
        found = []
        for name in sorted(header):
            if name == "__metadata__":
                continue
            info = header[name]
            start, end = info["data_offsets"]
            if not (isinstance(start, int) and isinstance(end, int) and 0 <= start <= end <= size - 8 - n):
                raise ValueError(f"tensor {name!r} offsets out of range")
            found.append({"name": str(name), "sha256": _range_sha256(f, 8 + n + start, end - start)})
        return found


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


def _npz_tensors(path: Path, rel: str) -> list[dict[str, str]]:
    f, _size = open_regular_file(path, ".npz archive", ArrayFileError)
    with f, zipfile.ZipFile(f) as archive:
        found = []
        for info in archive.infolist():
            name = info.filename[: -len(".npy")] if info.filename.endswith(".npy") else info.filename
            with archive.open(info) as member:
                if member.read(len(NPY_MAGIC)) != NPY_MAGIC:
                    digest = _raw_member_sha256(archive, info)
                else:
                    member.seek(0)
                    where = f"{rel}: array {name[:80]!r}"
                    header = read_npy_header(member, where)
                    if header.data_offset + header.nbytes > info.file_size:
                        raise ArrayFileError(f"{where}: header declares more data than the member holds")
                    digest = _data_sha256(member, header, where)
            found.append({"name": name, "sha256": digest})
        return sorted(found, key=lambda t: t["name"])


def _raw_member_sha256(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> str:
    """A member that is not a .npy array (NumPy's loader returns its bytes): sha256 of those bytes."""
    digest = hashlib.sha256()
    with archive.open(info) as member:
        while block := member.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _data_sha256(stream: Any, header: NpyHeader, where: str) -> str:
    """sha256 of the C-order bytes of the array whose checked header was just read from ``stream``."""
    nbytes = header.nbytes
    digest = hashlib.sha256()
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


def _external_data_tensors(files: dict[str, Path], verifying: bool = False) -> dict[str, list[dict[str, str]]]:
    """Per-tensor digests of ONNX external data files, found through the .onnx files that name them.

    Each .onnx file is read whole to parse it, within the memory budget: over it, creating a
    manifest is refused and verifying goes on without that file's tensor names."""
    found: dict[str, list[dict[str, str]]] = {}
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
                if offset < 0 or length < 0:
                    continue
                with files[location].open("rb") as f:
                    digest = _range_sha256(f, offset, length)
            except (ValueError, OSError):
                continue  # a malformed reference: the data file is still hashed as a whole
            found.setdefault(location, []).append({"name": scope_name, "sha256": digest})
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


def _exclusions(root: Path, paths: Sequence[str | os.PathLike[str]]) -> set[str]:
    real_root = root.resolve()
    found = set()
    for p in paths:
        real = Path(p).resolve()
        if real_root in real.parents:
            found.add(real.relative_to(real_root).as_posix())
    return found


def scan_directory(
    directory: str | os.PathLike[str], follow_symlinks: bool = False, exclude: Sequence[str | os.PathLike[str]] = ()
) -> list[dict[str, Any]]:
    """File records (path, size, sha256, format, tensors) for every file of ``directory``.

    Anything that cannot be recorded (see :class:`RefusedEntry`) is refused with a
    :class:`ManifestPathError` naming it."""
    records, refused = _scan(directory, follow_symlinks, exclude)
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
) -> tuple[list[dict[str, Any]], list[RefusedEntry]]:
    """File records and refused entries of ``directory``; ``recorded`` (a manifest's entries by path)
    means verifying (see :func:`_describe_file`)."""
    root = Path(directory)
    found, refused = _walk(root, follow_symlinks, _exclusions(root, exclude))
    files = dict(found)
    verifying = recorded is not None
    external = _external_data_tensors(files, verifying)

    def describe(item: tuple[str, Path]) -> dict[str, Any]:
        rel, path = item
        return _describe_file(
            rel, path, external.get(rel), verifying=verifying, recorded=(recorded or {}).get(rel)
        )

    with ThreadPoolExecutor(max_workers=default_workers()) as pool:
        records = list(pool.map(describe, files.items()))
    return records, refused


@dataclass(frozen=True)
class ManifestInfo:
    """What :func:`create_manifest` wrote."""

    path: str
    digest: str
    files: int
    tensors: int


def create_manifest(
    directory: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    *,
    sign_with: Sequence[KeySource] = (),
    follow_symlinks: bool = False,
    force: bool = False,
) -> ManifestInfo:
    """Write a manifest of ``directory`` to ``out_path`` (atomically; existing file kept unless ``force``)."""
    check_output(out_path, force, "manifest")  # before the directory is hashed, which may take long
    files = scan_directory(directory, follow_symlinks, exclude=[out_path])
    body = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "sealtrace_version": __version__,
        "files": files,
    }
    digest = json_digest(body)
    signatures = sign(digest, list(sign_with))
    with atomic_output(out_path, force=force) as f:
        f.write(canonical_json({"manifest": body, "signatures": [s.to_json() for s in signatures]}))
    return ManifestInfo(str(out_path), digest, len(files), sum(len(f["tensors"]) for f in files))


def read_manifest(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[Any], str]:
    """Parse a manifest strictly; (body, signatures, digest)."""
    where = os.fspath(path)
    # A regular file only (never /dev/zero), and no larger than a manifest may be.
    raw = read_regular_file(path, "manifest", ContainerFormatError, max_bytes=MAX_MANIFEST_SIZE)
    document = parse_canonical_json(raw, f"{where}")
    if not isinstance(document, dict) or set(document) != {"manifest", "signatures"}:
        raise ContainerFormatError(f"{where}: a manifest has exactly the keys 'manifest' and 'signatures'")
    body = document["manifest"]
    if not isinstance(body, dict) or set(body) != {"format", "format_version", "sealtrace_version", "files"}:
        raise ContainerFormatError(f"{where}: malformed manifest object")
    if body["format"] != FORMAT_NAME:
        raise ContainerFormatError(f"{where}: not a sealtrace manifest")
    if body["format_version"] != FORMAT_VERSION or isinstance(body["format_version"], bool):
        raise ContainerFormatError(f"{where}: manifest format_version {str(body['format_version'])[:20]} is not supported")
    if not isinstance(body["files"], list):
        raise ContainerFormatError(f"{where}: 'files' must be a list")
    seen: set[str] = set()
    for item in body["files"]:
        if not isinstance(item, dict) or set(item) != {"path", "size", "sha256", "format", "tensors"}:
            raise ContainerFormatError(f"{where}: malformed file entry")
        rel = check_relative_path(item["path"])
        if rel in seen:
            raise ContainerFormatError(f"{where}: {rel!r} listed twice")
        seen.add(rel)
        if not isinstance(item["sha256"], str) or not _HEX64.match(item["sha256"]):
            raise ContainerFormatError(f"{where}: {rel!r}: malformed sha256")
        if isinstance(item["size"], bool) or not isinstance(item["size"], int) or item["size"] < 0:
            raise ContainerFormatError(f"{where}: {rel!r}: malformed size")
        if item["format"] not in (None, "safetensors", "npy", "npz", "onnx-external-data"):
            raise ContainerFormatError(f"{where}: {rel!r}: unknown format")
        if not isinstance(item["tensors"], list) or not all(
            isinstance(t, dict) and set(t) == {"name", "sha256"} and isinstance(t["name"], str)
            and isinstance(t["sha256"], str) and _HEX64.match(t["sha256"])
            for t in item["tensors"]
        ):  # fmt: skip
            raise ContainerFormatError(f"{where}: {rel!r}: malformed tensor list")
    signatures = parse_signatures(document["signatures"], where)
    return body, signatures, json_digest(body)


@dataclass
class ManifestReport:
    """The outcome of checking a directory against a manifest."""

    directory: str
    digest: str
    files: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    signatures: list[SignatureCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "ok": self.ok,
            "manifest_digest": self.digest,
            "files": self.files,
            "mismatches": [m.to_json() for m in self.mismatches],
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
) -> ManifestReport:
    """Check ``directory`` against a manifest; name every changed, missing or extra file and every
    changed tensor. Raises :class:`IntegrityError` on any mismatch unless ``raise_on_failure`` is False."""
    if require_signature and not trust:
        raise InputError("--require-signature needs at least one trusted public key (--trust KEY.pub)")
    body, signatures, digest = read_manifest(manifest_path)
    report = ManifestReport(os.fspath(directory), digest)
    checks, problems = check_signatures(digest, signatures, trusted_keys(trust), require_signature)
    report.signatures = checks
    report.mismatches.extend(problems)
    expected = {item["path"]: item for item in body["files"]}
    # A missing DIRECTORY is bad input (ManifestPathError, exit 2); what cannot be recorded inside
    # it is reported entry by entry, and every other file is still compared.
    records, refused = _scan(directory, follow_symlinks, exclude=[manifest_path], recorded=expected)
    actual = {item["path"]: item for item in records}
    report.files = len(actual)
    refused_at = {entry.path: entry for entry in refused}
    for rel in sorted(set(expected) | set(actual) | set(refused_at)):
        want, got = expected.get(rel), actual.get(rel)
        if rel in refused_at:
            recorded = f"sha256 {want['sha256']}" if want else "no such file (not in the manifest)"
            report.mismatches.append(Mismatch("file", rel, recorded, refused_at[rel].reason))
            continue
        if got is None:
            report.mismatches.append(Mismatch("file", rel, f"sha256 {want['sha256'] if want else '?'}", "missing"))
            continue
        if want is None:
            report.mismatches.append(Mismatch("file", rel, "no such file (not in the manifest)", f"extra file, sha256 {got['sha256']}"))
            continue
        if want["sha256"] == got["sha256"] and want["size"] == got["size"]:
            continue
        found = f"sha256 {got['sha256']} ({got['size']} bytes)"
        if "tensors_skipped" in got:
            report.mismatches.append(
                Mismatch("file", rel, f"sha256 {want['sha256']} ({want['size']} bytes)",
                         f"{found}; its tensors are not listed: {got['tensors_skipped']}")
            )  # fmt: skip
            continue
        report.mismatches.append(Mismatch("file", rel, f"sha256 {want['sha256']} ({want['size']} bytes)", found))
        before = {t["name"]: t["sha256"] for t in want["tensors"]}
        after = {t["name"]: t["sha256"] for t in got["tensors"]}
        for name in sorted(set(before) | set(after)):
            if before.get(name) != after.get(name):
                report.mismatches.append(
                    Mismatch("tensor", f"{rel}:{name}", f"sha256 {before.get(name, 'absent')}", f"sha256 {after.get(name, 'absent')}")
                )
    if raise_on_failure and report.mismatches:
        raise IntegrityError(os.fspath(directory), report.mismatches)
    return report
