"""Chunked sha256 over memory, in parallel threads (hashlib releases the GIL while it hashes).

An entry of ``length`` bytes is cut into ``chunk_size`` pieces; its digest list holds the sha256
of each piece, so a 1 GB tensor is hashed on every core and a change is located to one chunk.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

PAGE = mmap.PAGESIZE


def chunk_ranges(start: int, length: int, chunk_size: int) -> list[tuple[int, int]]:
    """(start, end) of each chunk of a region; one empty range for an empty region."""
    if length == 0:
        return [(start, start)]
    return [(s, min(s + chunk_size, start + length)) for s in range(start, start + length, chunk_size)]


def default_workers() -> int:
    """Threads to hash with: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def hash_ranges(
    buffer: memoryview,
    ranges: Sequence[tuple[int, int]],
    workers: int | None = None,
    mapped: mmap.mmap | None = None,
) -> list[str]:
    """Hex sha256 of ``buffer[start:end]`` for each range, hashed on ``workers`` threads.

    With ``mapped`` (the mmap behind ``buffer``), pages are dropped from this process once hashed,
    so resident memory stays flat however large the file is (the page cache keeps them).
    """

    def one(span: tuple[int, int]) -> str:
        start, end = span
        digest = hashlib.sha256(buffer[start:end]).hexdigest()
        if mapped is not None and end - start >= PAGE:
            first = -(-start // PAGE) * PAGE
            last = end // PAGE * PAGE
            if last > first:
                mapped.madvise(mmap.MADV_DONTNEED, first, last - first)
        return digest

    count = workers or default_workers()
    if count == 1 or len(ranges) <= 1:
        return [one(r) for r in ranges]
    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="sealtrace-hash") as pool:
        return list(pool.map(one, ranges))
