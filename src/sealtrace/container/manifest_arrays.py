"""Array sets of a directory manifest (format 3): each array of a checkpoint by its name, dtype,
shape and a digest of its values, so a verification names the changed array, and tells a re-save
of identical values (other files, other names) from a tamper.

An array set is a group of files that together hold named arrays:

- ``orbax-ocdbt``: an orbax checkpoint directory (``_METADATA`` beside ``manifest.ocdbt``); its
  arrays are read with tensorstore (the library orbax writes them with), never by parsing OCDBT
  here. Its layout files are the OCDBT database (``manifest.ocdbt``, ``d/``, ``ocdbt.process_*/``)
  and the bookkeeping orbax rewrites at every save (``_CHECKPOINT_METADATA``, ``commit_success.txt``,
  in the directory and, for a CheckpointManager step's item directory, in the step directory);
  ``_METADATA`` (the tree orbax restores) is not layout: a change to it is a change.
- ``safetensors``: every ``.safetensors`` file of one directory (shards of one model) and the
  ``*.safetensors.index.json`` beside them; each tensor name must occur once.
- ``npz``: one ``.npz`` archive whose members are all arrays.

An array's digest is format 2's chunked sha256 (manifest.ChunkedSha256) of its values' bytes in
C order, in the recorded dtype. ``dtype`` is the format's own spelling (safetensors ``F32``, NumPy's
``<f4`` in .npz, tensorstore's ``float32``). Set records::

    {"path": "" | "dir" | "file.npz", "kind": "orbax-ocdbt" | "safetensors" | "npz",
     "files": [relative paths], "arrays": [{"name", "dtype", "shape": [int], "digest"}]}
"""

from __future__ import annotations

import re
import struct
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from sealtrace.arrayfiles import NPY_MAGIC, ArrayFileError, read_npy_header
from sealtrace.container.errors import ContainerFormatError, Mismatch
from sealtrace.errors import InputError, SealtraceError
from sealtrace.limits import BudgetExceededError, check_allocation, open_regular_file
from sealtrace.strictjson import loads_strict

SET_KINDS = ("orbax-ocdbt", "safetensors", "npz")
# safetensors bounds its own header to 100 MB; so do we when reading one.
MAX_SAFETENSORS_HEADER = 100_000_000
# Bytes of an array read from tensorstore at a time (besides the one decoded chunk it caches).
_SLAB = 16 << 20
_ORBAX_LAYOUT = re.compile(r"(manifest\.ocdbt|_CHECKPOINT_METADATA|commit_success\.txt|d/.+|ocdbt\.process_\d+/.+)\Z")
_ORBAX_BOOKKEEPING = ("_CHECKPOINT_METADATA", "commit_success.txt")  # rewritten at every save (timestamps)
_ZARR_DRIVERS = (("/.zarray", "zarr"), ("/zarr.json", "zarr3"))

NewHash = Callable[[], Any]


class ArraySetError(InputError):
    """A checkpoint's arrays cannot be read: tensorstore is missing (exit 2, creating or verifying)."""


class UnreadableArraysError(ArraySetError):
    """A checkpoint's arrays cannot be read from its files: creating, the manifest is refused;
    verifying, the set is reported as a mismatch that says why."""


@dataclass(frozen=True)
class SafetensorsEntry:
    name: str
    dtype: str
    shape: list[int]
    start: int  # file offsets of the tensor's bytes
    end: int


def read_safetensors_header(path: Path, opened_as: type[SealtraceError]) -> list[SafetensorsEntry]:
    """Every tensor of a safetensors file, sorted by name (header bounded, offsets checked against
    the file); ValueError when it is not one."""
    f, size = open_regular_file(path, "safetensors file", opened_as)
    with f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError("too short for a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > min(MAX_SAFETENSORS_HEADER, size - 8):
            raise ValueError("safetensors header length out of range")
        header = loads_strict(f.read(n))
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
        shape = info.get("shape")
        if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
            raise ValueError(f"tensor {name!r} has a malformed shape")
        found.append(SafetensorsEntry(str(name), str(info.get("dtype")), shape, 8 + n + start, 8 + n + end))
    return found


def display_name(set_path: str, name: str) -> str:
    """How an array is named in a report: ``w`` at the top of the directory, else ``path:w``."""
    return f"{set_path}:{name}" if set_path else name


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


def _parent(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def _inside(rel: str, directory: str) -> str | None:
    """``rel`` relative to ``directory`` ('' the top), or None when it is not under it."""
    if not directory:
        return rel
    return rel[len(directory) + 1 :] if rel.startswith(directory + "/") else None


def find_array_sets(
    root: Path,
    records: list[dict[str, Any]],
    new_hash: NewHash,
    recorded: dict[tuple[str, str], dict[str, Any]] | None = None,
    recorded_files: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The array sets of a directory whose format 2 file ``records`` are given. Verifying
    (``recorded`` sets and ``recorded_files`` given), an orbax set whose files are all unchanged
    keeps its recorded arrays instead of being read again."""
    by_path = {r["path"]: r for r in records}
    sets = _safetensors_sets(root, records) + _npz_sets(root, records)
    for meta in sorted(p for p in by_path if p == "_METADATA" or p.endswith("/_METADATA")):
        directory = _parent(meta)
        if _join(directory, "manifest.ocdbt") not in by_path:
            continue
        files = sorted(p for p in by_path if (inner := _inside(p, directory)) is not None and _ORBAX_LAYOUT.match(inner))
        if directory:  # a CheckpointManager step: its own bookkeeping, beside the item directories
            files = sorted(files + [p for name in _ORBAX_BOOKKEEPING if (p := _join(_parent(directory), name)) in by_path])
        before = (recorded or {}).get((directory, "orbax-ocdbt"))
        unchanged = before is not None and before["files"] == files and all(
            (recorded_files or {}).get(p, {}).get("digest") == by_path[p]["digest"] for p in files
        )
        entry: dict[str, Any] = {"path": directory, "kind": "orbax-ocdbt", "files": files}
        try:
            entry["arrays"] = before["arrays"] if unchanged and before else _orbax_arrays(root / directory, new_hash)
        except (UnreadableArraysError, BudgetExceededError) as exc:
            if recorded is None:
                raise
            entry.update(arrays=[], unreadable=str(exc))  # verifying: reported, never written
        sets.append(entry)
    return sorted(sets, key=lambda s: (s["path"], s["kind"]))


def _safetensors_sets(root: Path, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One set per directory holding safetensors files, when each tensor name occurs once in it."""
    by_directory: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if record["format"] == "safetensors":
            by_directory.setdefault(_parent(record["path"]), []).append(record)
    sets = []
    for directory, shards in sorted(by_directory.items()):
        arrays: dict[str, dict[str, Any]] = {}
        unique = True
        for record in shards:
            digests = {t["name"]: t["digest"] for t in record["tensors"]}
            try:
                entries = read_safetensors_header(root / record["path"], ArrayFileError)
            except (OSError, ValueError, KeyError, TypeError, RecursionError, ArrayFileError):
                entries = []  # changed since it was hashed: its file digest already says so
            for entry in entries:
                unique = unique and entry.name not in arrays and entry.name in digests
                arrays[entry.name] = {"name": entry.name, "dtype": entry.dtype, "shape": entry.shape,
                                      "digest": digests.get(entry.name, "")}  # fmt: skip
        if not unique:
            continue
        index = [r["path"] for r in records if _parent(r["path"]) == directory and r["path"].endswith(".safetensors.index.json")]
        files = sorted([r["path"] for r in shards] + index)
        sets.append({"path": directory, "kind": "safetensors", "files": files, "arrays": [arrays[n] for n in sorted(arrays)]})
    return sets


def _npz_sets(root: Path, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One set per .npz archive whose members are all arrays; the digests are its record's."""
    sets = []
    for record in records:
        if record["format"] != "npz":
            continue
        try:
            headers = _npz_headers(root / record["path"], record["path"])
        except (OSError, ValueError, ArrayFileError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError):
            continue  # changed since it was hashed: its file digest already says so
        digests = {t["name"]: t["digest"] for t in record["tensors"]}
        if headers is None or set(headers) != set(digests):
            continue
        arrays = [{"name": n, "dtype": d, "shape": s, "digest": digests[n]} for n, (d, s) in sorted(headers.items())]
        sets.append({"path": record["path"], "kind": "npz", "files": [record["path"]], "arrays": arrays})
    return sets


def _npz_headers(path: Path, rel: str) -> dict[str, tuple[str, list[int]]] | None:
    """dtype and shape of each member of an .npz archive (only their headers are decompressed);
    None when a member is not an array."""
    f, _size = open_regular_file(path, ".npz archive", ArrayFileError)
    found: dict[str, tuple[str, list[int]]] = {}
    with f, zipfile.ZipFile(f) as archive:
        for info in archive.infolist():
            name = info.filename[: -len(".npy")] if info.filename.endswith(".npy") else info.filename
            with archive.open(info) as member:
                if member.read(len(NPY_MAGIC)) != NPY_MAGIC:
                    return None
                member.seek(0)
                header = read_npy_header(member, f"{rel}: array {name[:80]!r}")
            found[name] = (header.dtype.str, list(header.shape))
    return found


def _tensorstore() -> Any:
    try:
        import tensorstore
    except ImportError:
        raise ArraySetError(
            "an orbax checkpoint's arrays are read with tensorstore, which is not installed "
            "(pip install 'sealtrace[checkpoints]')"
        ) from None
    return tensorstore


def _orbax_arrays(directory: Path, new_hash: NewHash) -> list[dict[str, Any]]:
    """Each zarr array of the OCDBT database in ``directory``: name (its key, orbax's pytree path
    joined by '.'), dtype, shape and digest, read through tensorstore within the memory budget."""
    ts = _tensorstore()
    base = {"driver": "ocdbt", "base": {"driver": "file", "path": str(directory.resolve()) + "/"}}
    try:
        keys = ts.KvStore.open(base).result().list().result()
    except ValueError as exc:  # tensorstore reports a malformed database as ValueError
        raise UnreadableArraysError(f"{directory}: the OCDBT database cannot be read: {exc}") from None
    arrays = []
    for raw in sorted(keys):
        key = raw.decode("utf-8", "replace")
        for suffix, driver in _ZARR_DRIVERS:
            if key.endswith(suffix):
                name = key[: -len(suffix)]
                arrays.append(_orbax_array(ts, {"driver": driver, "kvstore": {**base, "path": name + "/"}}, name, new_hash))
    return arrays


def _orbax_array(ts: Any, spec: dict[str, Any], name: str, new_hash: NewHash) -> dict[str, Any]:
    """One array's record: its metadata is read first, and its values one slab at a time with at
    most one decoded chunk cached, each checked against the memory budget before it is read."""
    try:
        store = ts.open(spec, open=True, read=True, context=ts.Context({"cache_pool": {"total_bytes_limit": 0}})).result()
        dtype = np.dtype(store.dtype.numpy_dtype)
        shape = [int(d) for d in store.shape]
        chunk = prod(int(d) for d in store.chunk_layout.read_chunk.shape or shape) * dtype.itemsize
        check_allocation(chunk + min(_SLAB, prod(shape) * dtype.itemsize), f"array {name!r}: one decoded chunk and one slab")
        # Cache one decoded chunk, so slabs smaller than a chunk decode it once, not once per slab.
        context = ts.Context({"cache_pool": {"total_bytes_limit": chunk}})
        store = ts.open(spec, open=True, read=True, context=context).result()
        store = store[ts.d[:].translate_to[0]]
        digest = new_hash()
        for index in _slabs(shape, dtype.itemsize):
            digest.update(np.ascontiguousarray(store[index].read().result()).tobytes())
    except ValueError as exc:  # tensorstore reports unreadable metadata or data as ValueError
        raise UnreadableArraysError(f"array {name!r}: {exc}") from None
    return {"name": name, "dtype": dtype.name, "shape": shape, "digest": digest.hexdigest()}


def _slabs(shape: list[int], itemsize: int) -> Iterator[tuple[Any, ...]]:
    """Indices of consecutive C-order slabs of an array of ``shape``, each of at most about
    :data:`_SLAB` bytes (a range of one axis under fixed leading indices)."""
    nbytes = prod(shape) * itemsize
    if nbytes <= _SLAB or not shape:
        yield ()
        return
    axis, inner = 0, nbytes  # inner: bytes under one index of the axes before `axis`
    while axis < len(shape) - 1 and inner // shape[axis] > _SLAB:
        inner //= shape[axis]
        axis += 1
    step = max(1, _SLAB // max(inner // shape[axis], 1))
    for leading in np.ndindex(*shape[:axis]):
        for start in range(0, shape[axis], step):
            yield (*leading, slice(start, min(start + step, shape[axis])))  # tensorstore does not clip


def compare_sets(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> tuple[list[Mismatch], set[str]]:
    """A mismatch for each array that differs between the recorded sets and the current ones (or
    each recorded set not found or unreadable), and the files of the recorded sets found again with every array unchanged
    (their own changes are a re-layout, not a change of what the manifest vouches for)."""
    found = {(s["path"], s["kind"]): s for s in after}
    differences: list[Mismatch] = []
    relaid: set[str] = set()
    for recorded in before:
        current = found.get((recorded["path"], recorded["kind"]))
        where = recorded["path"] or "."
        if current is None or "unreadable" in current:
            found_instead = "not found" if current is None else f"unreadable: {current['unreadable']}"
            differences.append(Mismatch("arrays", where, f"{recorded['kind']} arrays ({len(recorded['arrays'])})", found_instead))
            continue
        was = {a["name"]: a for a in recorded["arrays"]}
        now = {a["name"]: a for a in current["arrays"]}
        changed = [
            Mismatch("array", display_name(recorded["path"], name), _describe(was.get(name)), _describe(now.get(name)))
            for name in sorted(set(was) | set(now))
            if was.get(name) != now.get(name)
        ]
        differences += changed
        if not changed:
            relaid.update(recorded["files"], current["files"])
    return differences, relaid


def split_relayout(mismatches: list[Mismatch], relaid: set[str]) -> tuple[list[Mismatch], list[Mismatch]]:
    """The mismatches kept, and those of ``relaid`` files: the file's own, and its tensors' (named
    "file:tensor")."""

    def relaid_file(m: Mismatch) -> bool:
        if m.kind == "file":
            return m.name in relaid
        return m.kind == "tensor" and any(m.name.startswith(f"{rel}:") for rel in relaid)

    return [m for m in mismatches if not relaid_file(m)], [m for m in mismatches if relaid_file(m)]


def _describe(array: dict[str, Any] | None) -> str:
    if array is None:
        return "absent"
    return f"{array['dtype']} {array['shape']} digest {array['digest']}"


def check_set_records(sets: Any, where: str, check_path: Callable[[Any, str], str], is_digest: Callable[[Any], bool]) -> None:
    """Format 3's "arrays" list is well formed (ContainerFormatError naming what is not)."""
    if not isinstance(sets, list):
        raise ContainerFormatError(f"{where}: 'arrays' must be a list")
    for entry in sets:
        if not isinstance(entry, dict) or set(entry) != {"path", "kind", "files", "arrays"} or entry["kind"] not in SET_KINDS:
            raise ContainerFormatError(f"{where}: malformed array set")
        if entry["path"] != "":
            check_path(entry["path"], "array set path")
        if not isinstance(entry["files"], list) or not isinstance(entry["arrays"], list):
            raise ContainerFormatError(f"{where}: malformed array set")
        for rel in entry["files"]:
            check_path(rel, "array set file")
        for array in entry["arrays"]:
            if not (
                isinstance(array, dict) and set(array) == {"name", "dtype", "shape", "digest"}
                and isinstance(array["name"], str) and isinstance(array["dtype"], str) and is_digest(array["digest"])
                and isinstance(array["shape"], list)
                and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in array["shape"])
            ):  # fmt: skip
                raise ContainerFormatError(f"{where}: malformed array in set {str(entry['path'])[:80]!r}")
