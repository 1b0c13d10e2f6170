"""A local cache of file digests keyed by ``stat``, so that re-signing or re-verifying a large model
directory re-reads only the files that changed (``manifest sign|verify --cache FILE``).

What a hit rests on (docs/supply-chain.md, "Incremental signing and verification"): a file's content
cannot change without its ctime changing, and ctime cannot be set back by an unprivileged process
(``utime`` and ``touch -d`` set mtime, and move ctime to now). An entry is reused only when the
file's device, inode, size, mtime_ns and ctime_ns are all what they were when it was hashed. The
cache maps that stat to the digests of the bytes read then; it never records a verdict, so a hit
says what the file holds, never that it matched a signature.

A change within the filesystem's timestamp granularity of the hashing leaves ctime unchanged (the
"racy" case git's index knows): a file whose ctime is within ``RACY_NS`` of the time hashing began
is not cached. The cache is trusted like the signing key's host: it must be a regular file of the
user's, writable by that user alone, and is written with mode 0600.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sealtrace.errors import InputError
from sealtrace.outputs import atomic_output
from sealtrace.provenance.dsse import read_json

CACHE_FORMAT = "sealtrace-hash-cache"
# Two seconds: the coarsest timestamps of a common filesystem (FAT); a tick of the kernel's coarse
# clock, with which Linux stamps ctime, is at most 10 ms.
RACY_NS = 2_000_000_000


def stat_key(path: Path) -> list[int]:
    st = os.stat(path)
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _check_private(path: Path) -> None:
    st = os.lstat(path)
    mine = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    if not stat.S_ISREG(st.st_mode) or not mine or st.st_mode & 0o022:
        raise InputError(f"{path}: a hash cache must be a regular file of yours that no one else can write "
                         "(its entries decide which files are not re-read)")  # fmt: skip


@dataclass
class HashCache:
    """The digests of one directory's files by stat, as :func:`open_cache` read them; ``reused``
    counts the files this run took from it rather than read."""

    path: Path
    root: str
    entries: dict[str, dict[str, Any]]
    started_ns: int = field(default_factory=time.time_ns)
    reused: int = 0

    def lookup(self, rel: str, key: list[int], needs: list[str], external: Any) -> dict[str, Any] | None:
        """The cached fields of ``rel`` when its stat is ``key`` and the entry holds ``needs``."""
        entry = self.entries.get(rel)
        if entry is None or entry.get("stat") != key or entry.get("external") != external or not all(n in entry for n in needs):
            return None
        return entry

    def store(self, rel: str, key: list[int], path: Path, fields: dict[str, Any], external: Any) -> None:
        """Record what was read of ``rel`` (stat ``key`` before reading), unless its ctime is too
        close to this run's start to tell a later change apart, or it changed while being read."""
        if key[4] >= self.started_ns - RACY_NS or stat_key(path) != key:
            self.entries.pop(rel, None)
            return
        old = self.entries.get(rel, {})
        same = old.get("stat") == key and old.get("external") == external
        self.entries[rel] = {**(old if same else {}), **fields, "stat": key, "external": external}

    def save(self, present: set[str]) -> None:
        """Write the cache back (mode 0600), without the entries of files no longer there."""
        entries = {rel: entry for rel, entry in sorted(self.entries.items()) if rel in present}
        document = {"format": CACHE_FORMAT, "version": 1, "directory": self.root, "entries": entries}
        with atomic_output(self.path, force=True) as f:
            f.write(json.dumps(document, separators=(",", ":")).encode("utf-8"))
        os.chmod(self.path, 0o600)


def _well_formed(entry: Any) -> bool:
    """An entry of the shape ``store`` writes: its stat, and a size and sha256 that could be the file's
    (a damaged entry is dropped, and its file read again, rather than written into a bundle)."""
    key = entry.get("stat") if isinstance(entry, dict) else None
    if not (isinstance(key, list) and len(key) == 5 and all(isinstance(v, int) and not isinstance(v, bool) for v in key)):
        return False
    digest = entry.get("sha256")
    return entry.get("size") == key[2] and isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest) is not None


def open_cache(path: str | os.PathLike[str], directory: Path) -> HashCache:
    """The cache at ``path`` for ``directory`` (empty when the file does not exist yet)."""
    cache_path, root = Path(path), str(directory.resolve())
    if not os.path.lexists(cache_path):
        return HashCache(cache_path, root, {})
    _check_private(cache_path)
    document = read_json(cache_path, "hash cache")
    if not isinstance(document, dict) or document.get("format") != CACHE_FORMAT or not isinstance(document.get("entries"), dict):
        raise InputError(f"{cache_path}: not a sealtrace hash cache (delete it to start a new one)")
    if document.get("directory") != root:
        raise InputError(f"{cache_path}: the hash cache of {document.get('directory')}, not of {root} (use one cache per directory)")
    entries = {rel: e for rel, e in document["entries"].items() if _well_formed(e)}
    return HashCache(cache_path, root, entries)
