"""Capture: every intermediate tensor of a run, written as .npy files for later comparison.

A capture directory holds one ``.npy`` file per value (``.npz`` for a map) and an ``index.json``
that maps each value's key to its files and its digest (the digest the audit log gives it). A key
is the value name, prefixed by the subgraph path for values produced inside subgraphs
('loop_1/body/3/acc'), because a loop produces the same name once per iteration. File names are the
keys made safe (letters, digits, '.', '_', '-'; bounded length; never hidden) with a short hash of
the key added whenever the safe name differs from the key or would collide.

Writing: tensors are written by a worker thread and released as soon as they are on disk; the pipe
to it is bounded, so memory stays bounded whatever the size of the model. Files go to a staging
directory inside the capture directory and are moved into place when the run ends (a killed run
leaves the previous capture as it was); overwriting removes only the files the previous index
lists, never a file sealtrace did not write.

Reading back trusts nothing in the directory: the index is checked before use
(:class:`CaptureIndexError`, exit 2), files are read with the bounded readers of
:mod:`sealtrace.arrayfiles`, and every value read is re-hashed against the digest its index records
(:class:`CaptureIntegrityError`, exit 1, naming the file and the key).

Exactness: ``np.save`` cannot describe ml_dtypes' types (bfloat16, float8, int4 ...: it writes raw
void, or a '<f1' NumPy cannot read back), and NumPy's unicode arrays drop trailing NUL characters.
Such values are stored in a form that reads back bit for bit, named per file in the entry's
``encodings`` (an index that uses one is format v2, which a v1 reader refuses rather than misreads):

- ``"bits:NAME"``: the file holds the raw bits as unsigned integers of the type's width; NAME is
  the ml_dtypes type (``bits:bfloat16``);
- ``"utf-8"``: the file is an ``.npz`` whose string arrays are stored as ``NAME_utf8`` (uint8, the
  strings' UTF-8 in C order) and ``NAME_lengths`` (int64, the array's shape: each string's bytes);
  NAME is ``tensor``, or ``keys``/``values`` of a map.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from sealtrace.arrayfiles import ArrayFileError, load_npy, load_npz
from sealtrace.audit.errors import AuditLogExistsError, AuditWriteError
from sealtrace.audit.pipeline import (
    DEFAULT_PENDING_BYTES,
    DEFAULT_PENDING_ITEMS,
    BackgroundObserver,
    nbytes_of,
)
from sealtrace.audit.records import sequence_digest, value_digest
from sealtrace.backends.base import Backend
from sealtrace.digest import DIGEST_ALGORITHMS, SHA256, canonical_dtype, is_hex_digest, tensor_digest
from sealtrace.errors import CheckFailedError, InputError
from sealtrace.limits import has_control_characters, memory_budget, read_regular_file
from sealtrace.plan.events import StepEvent
from sealtrace.plan.model import Plan
from sealtrace.strictjson import loads_strict

CAPTURE_FORMAT = "sealtrace.capture.v1"
CAPTURE_FORMAT_V2 = "sealtrace.capture.v2"  # v1 plus per-file "encodings"
CAPTURE_FORMAT_V3 = "sealtrace.capture.v3"  # v2 plus "digest_algorithm" (a BLAKE3 run's capture)
CAPTURE_FORMATS = (CAPTURE_FORMAT, CAPTURE_FORMAT_V2, CAPTURE_FORMAT_V3)
INDEX_FILE = "index.json"
STAGING_PREFIX = ".capture-staging-"
KINDS = ("tensor", "sequence", "map", "none")
UTF8 = "utf-8"
_MAX_STEM = 96
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
# ml_dtypes' types, by name: the only names a "bits:" encoding may give (the index is data, so
# nothing it says is looked up beyond this list).
_EXTENSION_NAMES = (
    "bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz",
    "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn",
    "int1", "uint1", "int2", "uint2", "int4", "uint4", "complex32", "bcomplex32",
)  # fmt: skip


class CaptureIndexError(InputError):
    """A capture's index.json is missing, unreadable or malformed (exit 2)."""


class CaptureIntegrityError(CheckFailedError):
    """A file of a capture does not read back as the value its index records (exit 1): it was
    altered, replaced, removed or damaged since the capture was written."""


@cache
def _extension_dtypes() -> dict[str, np.dtype[Any]]:
    import ml_dtypes

    return {name: np.dtype(getattr(ml_dtypes, name)) for name in _EXTENSION_NAMES if hasattr(ml_dtypes, name)}


def _extension_name(dtype: np.dtype[Any]) -> str | None:
    """The ml_dtypes name of ``dtype``, or None for NumPy's own types."""
    if dtype.type.__module__.split(".")[0] != "ml_dtypes":
        return None
    return next((name for name, known in _extension_dtypes().items() if known == dtype), None)


def safe_file_stem(key: str, taken: set[str]) -> str:
    """A file name stem for ``key`` that is safe on every common filesystem and unique in ``taken``
    (compared case-insensitively, for case-insensitive filesystems); adds it to ``taken``."""
    stem = _UNSAFE.sub("_", key)[:_MAX_STEM]
    if stem.startswith(".") or not stem:
        stem = "_" + stem
    if stem != key or stem.lower() in taken or stem.lower() == Path(INDEX_FILE).stem:
        stem = f"{stem}-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:12]}"
        counter = 1
        base = stem
        while stem.lower() in taken:
            stem = f"{base}-{counter}"
            counter += 1
    taken.add(stem.lower())
    return stem


def _plain_file_name(name: Any) -> bool:
    """A file an index may name: a plain name inside the capture directory (no separators, no
    "..", not hidden), as the writer makes them; so a crafted index cannot reach other files."""
    return (
        isinstance(name, str) and bool(name) and Path(name).name == name and not name.startswith(".")
        and not has_control_characters(name)
    )  # fmt: skip


def _string_items(array: np.ndarray) -> list[bytes]:
    # The bytes the tensor digest hashes for each string (sealtrace.digest.tensor_bytes).
    return [item if isinstance(item, bytes) else str(item).encode("utf-8") for item in array.reshape(-1).tolist()]


def _utf8_members(name: str, array: np.ndarray) -> dict[str, np.ndarray]:
    items = _string_items(array)
    lengths = np.array([len(item) for item in items], np.int64).reshape(array.shape)
    return {f"{name}_lengths": lengths, f"{name}_utf8": np.frombuffer(b"".join(items), np.uint8)}


def _plain_strings(array: np.ndarray) -> np.ndarray | None:
    """``array`` as a .npy can hold it (object strings as a unicode array), or None when that
    form would not read back with the same digest (trailing NULs, bytes that are not text)."""
    if array.dtype.kind != "O":
        plain = array
    else:
        try:
            plain = array.astype(str)
        except (TypeError, ValueError, UnicodeError):
            return None
    return plain if tensor_digest(plain) == tensor_digest(array) else None


def _map_column(items: list[Any]) -> np.ndarray:
    """A map's keys or values as one array; strings as objects, so that none is cut short (a
    unicode array drops trailing NULs) before :func:`_plain_strings` looks at them."""
    if any(isinstance(item, (str, bytes)) for item in items):
        column = np.empty(len(items), dtype=object)
        column[:] = items
        return column
    return np.asarray(items)


class CaptureStore(BackgroundObserver):
    """A StepObserver that writes every value a run produces (and its inputs) into ``directory``.

    The directory is created; an existing non-empty one is refused unless ``overwrite``, which
    replaces the capture it holds (the files its index lists) and leaves every other file alone.
    ``digest`` is the digest algorithm of the index (the audit log's, when both record one run).
    """

    what = "capture"

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        overwrite: bool = False,
        max_pending_bytes: int = DEFAULT_PENDING_BYTES,
        max_pending_steps: int = DEFAULT_PENDING_ITEMS,
        digest: str = SHA256,
    ) -> None:
        super().__init__(max_pending_bytes, max_pending_steps)
        if digest not in DIGEST_ALGORITHMS:
            raise ValueError(f"unknown digest algorithm {digest!r} (known: {', '.join(DIGEST_ALGORITHMS)})")
        self.digest = digest
        self.directory = Path(directory)
        if self.directory.exists():
            if not self.directory.is_dir():
                raise InputError(f"{self.directory}: exists and is not a directory")
            if any(self.directory.iterdir()) and not overwrite:
                raise AuditLogExistsError(f"{self.directory}: capture directory is not empty (use --force)")
        self._overwrite = overwrite
        self.entries: list[dict[str, Any]] = []
        self._taken: set[str] = set()
        self._keys: dict[str, int] = {}
        self._staging: Path | None = None
        self._previous: list[str] = []  # files of the capture this one replaces
        self._encoded = False

    def on_run_start(self, plan: Plan, feeds: Mapping[str, Any], backend: Backend) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=self.directory))
            present = [p.name for p in self.directory.iterdir() if p != self._staging]
        except OSError as exc:
            raise AuditWriteError(f"{self.directory}: cannot create capture directory ({exc.strerror})") from None
        if self._overwrite:
            self._previous = [name for name in _listed_files(self.directory) if name in present]
        # What is left belongs to someone else: new files never take those names.
        for name in present:
            if name not in self._previous and not name.startswith("."):
                self._taken.add(name.rsplit(".", 1)[0].lower())
        self._start()
        values = {info.name: feeds.get(info.name) for info in plan.inputs}
        self._submit(("input", (), "", "", values), nbytes_of(values.values()))

    def on_step(self, event: StepEvent) -> None:
        values = {name: value for name, value in zip(event.step.outputs, event.outputs, strict=True) if name}
        self._submit(("step", event.path, event.step.name, event.step.op_type, values), nbytes_of(values.values()))

    def on_run_end(self, outputs: Mapping[str, Any]) -> None:
        self._finish()

    def _handle(self, item: tuple[Any, ...]) -> None:
        source, path, step_name, op_type, values = item
        for name, value in values.items():
            key = "/".join((*path, name))
            count = self._keys.get(key, 0)
            self._keys[key] = count + 1
            if count:  # the same key again (a subgraph run twice in one call): keep both
                key = f"{key}#{count}"
            self._write(key, name, source, step_name, op_type, value)

    def _write(self, key: str, name: str, source: str, step: str, op_type: str, value: Any) -> None:
        entry: dict[str, Any] = {"key": key, "name": name, "source": source, "step": step, "op_type": op_type}
        encodings: dict[str, str] = {}
        if value is None:
            entry.update(kind="none", files=[])
        elif isinstance(value, list):
            files = [self._save(f"{key}[{i}]", element, encodings) for i, element in enumerate(value)]
            digests = [value_digest(element, self.digest) for element in value]
            # Element digests name the file that differs when a sequence does not re-hash.
            entry.update(
                kind="sequence", files=files, digest=sequence_digest(digests, self.digest), element_digests=digests
            )
        elif isinstance(value, Mapping):
            entry.update(kind="map", files=[self._save(key, value, encodings)], digest=value_digest(value, self.digest))
        else:
            array = np.asarray(value)
            entry.update(
                kind="tensor",
                files=[self._save(key, array, encodings)],
                dtype=canonical_dtype(array.dtype),
                shape=list(array.shape),
                digest=value_digest(array, self.digest),
            )
        if encodings:
            entry["encodings"] = encodings
            self._encoded = True
        self.entries.append(entry)

    def _save(self, key: str, value: Any, encodings: dict[str, str]) -> str:
        """Write one tensor or map to a new file; an encoding it needs goes to ``encodings``."""
        assert self._staging is not None
        if isinstance(value, Mapping):  # a map (a map input, ZipMap's elements): its keys and values, no pickle
            name = safe_file_stem(key, self._taken) + ".npz"
            members: dict[str, np.ndarray] = {}
            for part, array in (("keys", _map_column(list(value))), ("values", _map_column(list(value.values())))):
                plain = _plain_strings(array) if array.dtype.kind in "OUS" else array
                if plain is None:
                    members.update(_utf8_members(part, array))
                    encodings[name] = UTF8
                else:
                    members[part] = plain
            self._write_npz(name, members)
            return name
        array = np.asarray(value)
        extension = _extension_name(array.dtype)
        if extension is not None:
            # np.save cannot describe the type: its raw bits as unsigned integers of its width.
            name = safe_file_stem(key, self._taken) + ".npy"
            encodings[name] = f"bits:{extension}"
            array = array.view(np.dtype(f"u{array.dtype.itemsize}"))
        elif array.dtype.kind in "OUS":
            # .npy without pickles holds no object arrays: strings as a unicode array when that
            # reads back exactly, else as UTF-8 with lengths.
            plain = _plain_strings(array)
            if plain is None:
                name = safe_file_stem(key, self._taken) + ".npz"
                encodings[name] = UTF8
                self._write_npz(name, _utf8_members("tensor", array))
                return name
            array = plain
            name = safe_file_stem(key, self._taken) + ".npy"
        else:
            name = safe_file_stem(key, self._taken) + ".npy"
        with (self._staging / name).open("xb") as f:
            np.save(f, array, allow_pickle=False)
        return name

    def _write_npz(self, name: str, members: dict[str, np.ndarray]) -> None:
        assert self._staging is not None
        with (self._staging / name).open("xb") as f:
            np.savez(f, allow_pickle=False, **members)

    def _close(self, finished: bool) -> None:
        if self._staging is None:
            return
        # A worker that failed (disk full, a file in the way) leaves a capture that is not complete.
        complete = finished and self._error is None
        index: dict[str, Any] = {
            "format": CAPTURE_FORMAT_V2 if self._encoded else CAPTURE_FORMAT,
            "complete": complete,
            "values": self.entries,
        }
        if self.digest != SHA256:  # v1 and v2 are sha256; only v3 names another algorithm
            index.update(format=CAPTURE_FORMAT_V3, digest_algorithm=self.digest)
        self._move_into_place(json.dumps(index, indent=1, sort_keys=True))

    def _move_into_place(self, index: str) -> None:
        """Swap the staged capture in: the old index first (a directory caught between two
        captures holds no index rather than one that lies), the files it listed, then the new
        files, and the new index last."""
        assert self._staging is not None
        directory, staging = self.directory, self._staging
        if self._overwrite:
            (directory / INDEX_FILE).unlink(missing_ok=True)
            for name in self._previous:
                target = directory / name
                if target.is_symlink() or target.is_file():
                    target.unlink()
        for staged in sorted(staging.iterdir()):
            target = directory / staged.name
            try:
                os.link(staged, target)  # fails if the name exists: never over a file someone put there
            except FileExistsError:
                raise FileExistsError(
                    errno.EEXIST, f"appeared during the run; this capture's files are left in {staging}", str(target)
                ) from None
            except OSError:
                if target.exists() or target.is_symlink():
                    raise
                os.replace(staged, target)  # a filesystem without hard links
                continue
            staged.unlink()
        tmp = directory / f".{INDEX_FILE}.tmp"
        tmp.write_text(index, encoding="utf-8")
        os.replace(tmp, directory / INDEX_FILE)
        staging.rmdir()

    def _describe(self) -> str:
        return f"capture {self.directory}"


def _listed_files(directory: Path) -> list[str]:
    """The files the capture index in ``directory`` lists (none when there is no readable index):
    what a capture that replaces it may remove. Only names the writer makes (.npy, .npz) count:
    an index edited to list someone's notes does not get them deleted."""
    try:
        run = CapturedRun.open(directory)
    except InputError:
        return []
    return [
        name
        for entry in run.entries.values()
        for name in entry["files"]
        if _plain_file_name(name) and name.endswith((".npy", ".npz"))
    ]


@dataclass(frozen=True)
class CapturedRun:
    """A capture directory read back: ``load(key)`` returns a captured value, checked against the
    digest its index records."""

    directory: Path
    entries: dict[str, dict[str, Any]]
    complete: bool
    digest_algorithm: str = SHA256

    @classmethod
    def open(cls, directory: str | os.PathLike[str]) -> CapturedRun:
        """Read and check the index of the capture in ``directory`` (files are read by ``load``)."""
        path = Path(directory) / INDEX_FILE
        if not Path(directory).is_dir():
            raise CaptureIndexError(f"{directory}: no such capture directory")
        if not (path.exists() or path.is_symlink()):
            raise CaptureIndexError(f"{path}: no such file (not a capture directory)")
        data = read_regular_file(path, "capture index", CaptureIndexError, max_bytes=memory_budget())
        try:
            index = loads_strict(data)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else " ".join(str(exc).split())[:120]
            raise CaptureIndexError(f"{path}: unreadable capture index (not valid JSON: {reason})") from None
        entries, complete = _checked_index(index, path)
        return cls(Path(directory), entries, complete, index.get("digest_algorithm", SHA256))

    def keys(self) -> list[str]:
        """Keys of the captured values, in the order the run produced them."""
        return list(self.entries)

    def __contains__(self, key: object) -> bool:
        return key in self.entries

    def load(self, key: str) -> Any:
        """The captured value of ``key``: an array, a map, a list of arrays or maps (a sequence), or None.

        Raises :class:`CaptureIntegrityError` when its files do not read back as the value whose
        digest the index records.
        """
        entry = self.entries.get(key)
        if entry is None:
            raise InputError(f"{self.directory}: no captured value {key!r}")
        if entry["kind"] == "none":
            return None
        encodings = entry.get("encodings", {})
        parts = [
            self._read_file(key, name, encodings.get(name) if _plain_file_name(name) else None)
            for name in entry["files"]
        ]
        value = parts if entry["kind"] == "sequence" else parts[0]
        if _digest(value, self.digest_algorithm) != entry["digest"]:
            raise CaptureIntegrityError(
                f"{self._culprit(entry, parts)}: value {key!r} does not match the digest its capture index "
                f"records (the file was altered or replaced since the capture was written)"
            )
        return value

    def _culprit(self, entry: dict[str, Any], parts: list[Any]) -> str:
        """The file (or files) to name when a value does not re-hash."""
        files = entry["files"]
        recorded = entry.get("element_digests")
        if entry["kind"] == "sequence" and isinstance(recorded, list) and len(recorded) == len(files):
            for name, part, digest in zip(files, parts, recorded, strict=True):
                if _digest(part, self.digest_algorithm) != digest:
                    return str(self.directory / name)
        if len(files) == 1:
            return str(self.directory / files[0])
        shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        return f"{self.directory} ({shown})"

    def _read_file(self, key: str, name: Any, encoding: str | None) -> Any:
        if not _plain_file_name(name):
            raise CaptureIndexError(f"{self.directory / INDEX_FILE}: names an invalid file {name!r} for {key!r}")
        path = self.directory / name
        try:
            if name.endswith(".npz"):
                return _from_members(load_npz(path), encoding, str(path))
            array = load_npy(path)
        except ArrayFileError as exc:
            # The index records what the file held: one that no longer reads back is a failed check.
            raise CaptureIntegrityError(f"capture value {key!r}: {exc}") from None
        if encoding is not None:
            dtype = _extension_dtypes()[encoding.removeprefix("bits:")]
            if array.dtype.kind != "u" or array.dtype.itemsize != dtype.itemsize:
                raise CaptureIntegrityError(
                    f"{path}: value {key!r} should hold {dtype.name} bits as {dtype.itemsize}-byte unsigned "
                    f"integers, it holds {array.dtype.str}"
                )
            return array.astype(array.dtype.newbyteorder("="), copy=False).view(dtype)
        if array.dtype.kind == "V":
            return _legacy_extension(array)
        return array


def _from_members(members: dict[str, np.ndarray], encoding: str | None, where: str) -> Any:
    """A map, or a string tensor stored as UTF-8, from the members of an .npz file."""
    if encoding not in (None, UTF8):
        raise ArrayFileError(f"{where}: an .npz file cannot have the encoding {encoding!r}")
    if {"keys", "values"} <= {m.split("_")[0] for m in members} and not any(m.startswith("tensor") for m in members):
        keys = _member(members, "keys", where)
        values = _member(members, "values", where)
        if keys.ndim != 1 or values.ndim != 1 or len(keys) != len(values):
            raise ArrayFileError(f"{where}: a map's keys and values must be two arrays of one length")
        expected = {"keys", "values"} if encoding is None else set()
        if expected and set(members) != expected:
            raise ArrayFileError(f"{where}: members {sorted(members)} are not a map's keys and values")
        return dict(zip(keys.tolist(), values.tolist(), strict=True))
    if encoding == UTF8 and set(members) == {"tensor_lengths", "tensor_utf8"}:
        return _member(members, "tensor", where)
    raise ArrayFileError(f"{where}: members {sorted(members)[:6]} are neither a map nor a string tensor")


def _member(members: dict[str, np.ndarray], name: str, where: str) -> np.ndarray:
    if name in members:
        return members[name]
    lengths, data = members.get(f"{name}_lengths"), members.get(f"{name}_utf8")
    if lengths is None or data is None:
        raise ArrayFileError(f"{where}: no array {name!r}")
    if lengths.dtype.kind not in "iu" or data.dtype != np.uint8 or data.ndim != 1:
        raise ArrayFileError(f"{where}: {name!r} is not UTF-8 with lengths")
    if lengths.size and (int(lengths.min()) < 0 or int(lengths.sum()) != data.size):
        raise ArrayFileError(f"{where}: the lengths of {name!r} do not add up to its bytes")
    if not lengths.size and data.size:
        raise ArrayFileError(f"{where}: the lengths of {name!r} do not add up to its bytes")
    raw, offset = data.tobytes(), 0
    items: list[str | bytes] = []
    for length in lengths.reshape(-1).tolist():
        chunk = raw[offset : offset + length]
        offset += length
        try:
            items.append(chunk.decode("utf-8"))
        except UnicodeDecodeError:
            items.append(chunk)  # bytes that are not text hash as themselves
    strings = np.empty(lengths.shape, dtype=object)
    strings.reshape(-1)[:] = items
    return strings


def _widths() -> dict[int, list[np.dtype[Any]]]:
    by_width: dict[int, list[np.dtype[Any]]] = {}
    for dtype in _extension_dtypes().values():
        if canonical_dtype(dtype) == f"<V{dtype.itemsize}":
            by_width.setdefault(dtype.itemsize, []).append(dtype)
    return by_width


def _legacy_extension(array: np.ndarray) -> np.ndarray:
    """A raw void array of a v1 capture: np.save wrote an ml_dtypes value that way. When one type
    has that width (bfloat16) it is that type; else (float8, int4 ...: one byte) the raw bytes stay,
    and :func:`_digest` re-hashes them (the digest of such a type names its width only)."""
    candidates = _widths().get(array.dtype.itemsize, [])
    return array.view(candidates[0]) if len(candidates) == 1 else array


def _digest(value: Any, algorithm: str) -> str | None:
    """:func:`value_digest`, with raw void arrays (see :func:`_legacy_extension`) hashed as the
    ml_dtypes type of their width that the digest names."""
    if isinstance(value, list):
        return sequence_digest([_digest(v, algorithm) for v in value], algorithm)
    if isinstance(value, np.ndarray) and value.dtype.kind == "V" and value.dtype.names is None:
        candidates = _widths().get(value.dtype.itemsize)
        if candidates:
            return value_digest(value.view(candidates[0]), algorithm)
    return value_digest(value, algorithm)


def _checked_index(index: Any, path: Path) -> tuple[dict[str, dict[str, Any]], bool]:
    """The entries of a parsed index by key, and its ``complete`` flag; every field a reader uses
    is checked here, so a malformed index is one typed error naming it."""
    if not isinstance(index, dict) or index.get("format") not in CAPTURE_FORMATS:
        found = index.get("format") if isinstance(index, dict) else type(index).__name__
        raise CaptureIndexError(f"{path}: not a capture index ({', '.join(CAPTURE_FORMATS)}; found {found!r:.80})")
    complete, values = index.get("complete"), index.get("values")
    algorithm = index.get("digest_algorithm")
    if (index["format"] == CAPTURE_FORMAT_V3) != ("digest_algorithm" in index) or (
        algorithm is not None and algorithm not in DIGEST_ALGORITHMS
    ):
        raise CaptureIndexError(
            f"{path}: 'digest_algorithm' must be one of {', '.join(DIGEST_ALGORITHMS)} in a v3 index, and only there"
        )
    if not isinstance(complete, bool):
        raise CaptureIndexError(f"{path}: 'complete' must be true or false")
    if not isinstance(values, list):
        raise CaptureIndexError(f"{path}: 'values' must be a list of value entries")
    entries: dict[str, dict[str, Any]] = {}
    for position, entry in enumerate(values):
        problem = _entry_problem(entry, index["format"])
        if problem is None and entry["key"] in entries:
            problem = "appears twice"
        if problem is not None:
            key = entry.get("key") if isinstance(entry, dict) else None
            named = f" ({key!r:.80})" if isinstance(key, str) else ""
            raise CaptureIndexError(f"{path}: values[{position}]{named}: {problem}")
        entries[entry["key"]] = entry
    return entries, complete


def _entry_problem(entry: Any, version: str) -> str | None:
    if not isinstance(entry, dict):
        return f"not a value entry (found {type(entry).__name__})"
    if not isinstance(entry.get("key"), str):
        return "'key' must be a string"
    for name in ("name", "source", "step", "op_type"):
        if not isinstance(entry.get(name, ""), str):
            return f"{name!r} must be a string"
    kind, files, digest = entry.get("kind"), entry.get("files"), entry.get("digest")
    if kind not in KINDS:
        return f"'kind' must be one of {', '.join(KINDS)}"
    if not isinstance(files, list):
        return "'files' must be a list of file names"
    if kind == "none":
        return None if not files and digest is None else "a 'none' value has no files and no digest"
    if kind in ("tensor", "map") and len(files) != 1:
        return f"a {kind} is one file, the entry lists {len(files)}"
    if not is_hex_digest(digest):
        return "'digest' must be 64 hex digits"
    if "dtype" in entry and not isinstance(entry["dtype"], str):
        return "'dtype' must be a string"
    shape = entry.get("shape", [])
    if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        return "'shape' must be a list of sizes"
    elements = entry.get("element_digests")
    if elements is not None and not (isinstance(elements, list) and all(isinstance(d, str) or d is None for d in elements)):
        return "'element_digests' must be a list of digests"
    encodings = entry.get("encodings")
    if encodings is None:
        return None
    if version == CAPTURE_FORMAT:
        return "'encodings' needs format v2"
    if not isinstance(encodings, dict):
        return "'encodings' must map file names to encodings"
    for name, encoding in encodings.items():
        if name not in files:
            return f"'encodings' names a file the entry does not list ({name!r:.80})"
        extension = encoding.removeprefix("bits:") if isinstance(encoding, str) else None
        if encoding != UTF8 and not (encoding != extension and extension in _extension_dtypes()):
            return f"unknown encoding {encoding!r:.80} (expected utf-8 or bits:<ml_dtypes type>)"
        if not name.endswith(".npz" if encoding == UTF8 else ".npy"):
            return f"encoding {encoding!r} does not fit the file {name!r:.80}"
    return None
