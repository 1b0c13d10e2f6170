"""Sharded safetensors: a set of ``model-0000K-of-0000N.safetensors`` files and the
``model.safetensors.index.json`` whose ``weight_map`` says which file holds each tensor.

A model-signing bundle that sealtrace writes records each index's weight_map in its ``sealtrace``
field (beside each file's tensors), so that where a file of the set changed, verifying names the
tensor across the set: a tensor moved from one shard to another, an index entry that changed, and
an index that disagrees with the files it indexes.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sealtrace.container.errors import Mismatch
from sealtrace.provenance.dsse import ProvenanceFormatError, read_json

INDEX_SUFFIX = ".safetensors.index.json"


def read_weight_map(rel: str, path: Path) -> dict[str, str] | None:
    """The weight_map of the index at ``path`` (named ``rel`` in the directory), each file as a
    path in the directory; None when it is not an index sealtrace can read."""
    try:
        index = read_json(path, "safetensors index")
    except (ProvenanceFormatError, OSError):
        return None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        return None
    base = posixpath.dirname(rel)
    return {tensor: posixpath.normpath(posixpath.join(base, file)) for tensor, file in weight_map.items()}


def safetensors_sets(files: list[tuple[str, Path]]) -> list[dict[str, Any]]:
    """Each safetensors index of the directory with its weight_map, for the bundle."""
    found = [(rel, read_weight_map(rel, path)) for rel, path in files if rel.endswith(INDEX_SUFFIX)]
    return [{"index": rel, "weight_map": weight_map} for rel, weight_map in found if weight_map is not None]


def _tensor_change(m: Mismatch, shards: set[str]) -> tuple[str, str, str, str] | None:
    """(file, tensor, expected digest, actual digest) of a tensor mismatch inside one of ``shards``."""
    for shard in shards:
        if m.kind == "tensor" and m.name.startswith(shard + ":"):
            return shard, m.name[len(shard) + 1 :], m.expected.removeprefix("sha256 "), m.actual.removeprefix("sha256 ")
    return None


def moved_tensors(mismatches: list[Mismatch], shards: set[str]) -> list[Mismatch]:
    """``mismatches`` with each tensor that left one file of a set and appeared in another named once,
    as moved, instead of as absent from one and new in the other."""
    changes = {id(m): change for m in mismatches if (change := _tensor_change(m, shards))}
    gone = {c[1]: m for m in mismatches if (c := changes.get(id(m))) and c[3] == "absent"}
    arrived = {c[1]: m for m in mismatches if (c := changes.get(id(m))) and c[2] == "absent"}
    moved = set(gone) & set(arrived)
    if not moved:
        return mismatches
    out: list[Mismatch] = []
    for m in mismatches:
        change = changes.get(id(m))
        if change is None or change[1] not in moved:
            out.append(m)
        elif change[3] == "absent":  # reported once, where it was
            new_file, _, _, digest = changes[id(arrived[change[1]])]
            same = " (values unchanged)" if digest == change[2] else ""
            out.append(Mismatch("tensor", m.name, f"in {change[0]}, sha256 {change[2]}", f"moved to {new_file}, sha256 {digest}{same}"))
    return out


def set_mismatches(
    extra: Any,
    mismatches: list[Mismatch],
    weight_map_now: Callable[[str], dict[str, str] | None],
    tensors_now: Callable[[str], set[str]],
    present: set[str],
) -> list[Mismatch]:
    """``mismatches`` with, for each signed set one of whose files changed: its tensors that moved
    between shards, its index entries that changed, and where the index on disk and the files
    disagree. ``tensors_now`` gives the tensor names of a changed file as it is now."""
    sets = extra.get("safetensors_sets", []) if isinstance(extra, dict) else []
    signed = {
        f["name"]: {str(t.get("name")) for t in f.get("tensors", []) if isinstance(t, dict)}
        for f in (extra.get("files", []) if isinstance(extra, dict) else []) if isinstance(f, dict)
    }  # fmt: skip
    changed = {m.name for m in mismatches if m.kind == "file"}

    def names(file: str) -> set[str]:
        return tensors_now(file) if file in changed else signed.get(file, set())

    found: list[Mismatch] = []
    for recorded in sets:
        index, signed_map = recorded.get("index"), recorded.get("weight_map")
        if not isinstance(index, str) or not isinstance(signed_map, dict):
            continue
        shards = set(signed_map.values())
        if not changed & (shards | {index}):
            continue
        mismatches = moved_tensors(mismatches, shards)
        current = weight_map_now(index) if index in present else None
        if current is None:
            found.append(Mismatch("weight_map", index, "a safetensors index", "missing or unreadable"))
            continue
        for tensor in sorted(set(signed_map) | set(current)):
            if signed_map.get(tensor) != current.get(tensor):
                found.append(Mismatch("weight_map", f"{index}:{tensor}", f"in {signed_map.get(tensor, 'no file (not listed)')}",
                                      f"in {current.get(tensor, 'no file (not listed)')}"))  # fmt: skip
        files = sorted((shards | set(current.values())) & present)
        for tensor, file in sorted(current.items()):
            if file in present and tensor not in names(file):
                holders = ", ".join(f for f in files if tensor in names(f)) or "no file of the set"
                found.append(Mismatch("weight_map", f"{index}:{tensor}", f"in {file}, as the index says", f"held by {holders}"))
        for file in files:
            found += [Mismatch("weight_map", f"{index}:{tensor}", "listed in the index", f"in {file}, not listed")
                      for tensor in sorted(names(file) - set(current))]  # fmt: skip
    return mismatches + found
