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
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from onnx import ModelProto, TensorProto

from sealtrace import __version__
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
from sealtrace.outputs import atomic_output

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


def _walk(root: Path, follow_symlinks: bool, exclude: set[str]) -> Iterator[tuple[str, Path]]:
    """(relative path, real path) of every regular file under ``root``, sorted, links checked."""
    real_root = root.resolve()
    visited: set[Path] = {real_root}

    def inside(target: Path) -> bool:
        return target == real_root or real_root in target.parents

    def walk(directory: Path, prefix: str) -> Iterator[tuple[str, Path]]:
        try:
            names = sorted(os.listdir(directory))
        except OSError as exc:
            raise ManifestPathError(f"{directory}: cannot list ({exc.strerror})") from None
        for name in names:
            rel = f"{prefix}{name}"
            path = directory / name
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                if not follow_symlinks:
                    raise ManifestPathError(f"{rel}: is a symbolic link (refused; use --follow-symlinks)")
                target = path.resolve()
                if not inside(target):
                    raise ManifestPathError(f"{rel}: symbolic link leads outside the directory (refused)")
                info = os.stat(target)
                path = target
            if stat.S_ISDIR(info.st_mode):
                real = path.resolve()
                if real in visited:
                    raise ManifestPathError(f"{rel}: directory link loop (refused)")
                visited.add(real)
                yield from walk(path, rel + "/")
            elif stat.S_ISREG(info.st_mode):
                check_relative_path(rel)
                if rel not in exclude:
                    yield rel, path
            else:
                raise ManifestPathError(f"{rel}: not a regular file (device, socket or pipe refused)")

    if not root.is_dir():
        raise ManifestPathError(f"{root}: not a directory")
    yield from walk(root, "")


def _file_sha256(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
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


def _array_sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes() if array.size else b"").hexdigest()


def _npy_tensors(path: Path, rel: str) -> list[dict[str, str]]:
    array = np.load(path, mmap_mode="r", allow_pickle=False)
    return [{"name": rel.rsplit("/", 1)[-1], "sha256": _array_sha256(np.asarray(array))}]


def _npz_tensors(path: Path) -> list[dict[str, str]]:
    with np.load(path, allow_pickle=False) as archive:
        return [{"name": name, "sha256": _array_sha256(archive[name])} for name in sorted(archive.files)]


def _external_data_tensors(files: dict[str, Path]) -> dict[str, list[dict[str, str]]]:
    """Per-tensor digests of ONNX external data files, found through the .onnx files that name them."""
    found: dict[str, list[dict[str, str]]] = {}
    for rel, path in files.items():
        if not rel.lower().endswith(".onnx"):
            continue
        model = ModelProto()
        try:
            model.ParseFromString(path.read_bytes())
        except Exception:
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


def _describe_file(rel: str, path: Path, external: list[dict[str, str]] | None) -> dict[str, Any]:
    digest, size = _file_sha256(path)
    kind = file_format(rel)
    tensors: list[dict[str, str]] = []
    try:
        if kind == "safetensors":
            tensors = _safetensors_tensors(path)
        elif kind == "npy":
            tensors = _npy_tensors(path, rel)
        elif kind == "npz":
            tensors = _npz_tensors(path)
    except (OSError, ValueError, KeyError, TypeError, EOFError, RecursionError, zipfile.BadZipFile):
        kind, tensors = None, []  # unreadable as that format: recorded as a plain file
    if external:
        kind, tensors = "onnx-external-data", sorted(external, key=lambda t: t["name"])
    return {"path": rel, "size": size, "sha256": digest, "format": kind, "tensors": tensors}


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
    """File records (path, size, sha256, format, tensors) for every file of ``directory``."""
    root = Path(directory)
    files = dict(_walk(root, follow_symlinks, _exclusions(root, exclude)))
    external = _external_data_tensors(files)
    with ThreadPoolExecutor(max_workers=default_workers()) as pool:
        return list(pool.map(lambda item: _describe_file(item[0], item[1], external.get(item[0])), files.items()))


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
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_MANIFEST_SIZE + 1)
    except OSError as exc:
        raise ContainerFormatError(f"{where}: cannot read manifest ({exc.strerror})") from None
    if len(raw) > MAX_MANIFEST_SIZE:
        raise ContainerFormatError(f"{where}: manifest larger than {MAX_MANIFEST_SIZE} bytes")
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
    try:
        actual = {item["path"]: item for item in scan_directory(directory, follow_symlinks, exclude=[manifest_path])}
    except ManifestPathError as exc:
        report.mismatches.append(Mismatch("directory", os.fspath(directory), "regular files only", str(exc)))
        actual = {}
    report.files = len(actual)
    for rel in sorted(set(expected) | set(actual)):
        want, got = expected.get(rel), actual.get(rel)
        if got is None:
            report.mismatches.append(Mismatch("file", rel, f"sha256 {want['sha256'] if want else '?'}", "missing"))
            continue
        if want is None:
            report.mismatches.append(Mismatch("file", rel, "no such file (not in the manifest)", f"extra file, sha256 {got['sha256']}"))
            continue
        if want["sha256"] == got["sha256"] and want["size"] == got["size"]:
            continue
        report.mismatches.append(
            Mismatch("file", rel, f"sha256 {want['sha256']} ({want['size']} bytes)", f"sha256 {got['sha256']} ({got['size']} bytes)")
        )
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
