"""Chunked sha256 over a container's bytes, in parallel threads (hashlib and pread release the GIL).

An entry of ``length`` bytes is cut into ``chunk_size`` pieces; its digest list holds the sha256
of each piece, so a 1 GB tensor is hashed on every core and a change is located to one chunk.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sealtrace.hashpool import hash_map

if TYPE_CHECKING:
    from sealtrace.container.format import ContainerBytes

# Bytes read per pread when hashing a file: large enough that the syscall costs little next to
# sha256, small enough that the copy is still in the CPU cache when it is hashed, and that one
# buffer per thread keeps memory flat.
READ_BLOCK = 1 << 20


def chunk_ranges(start: int, length: int, chunk_size: int) -> list[tuple[int, int]]:
    """(start, end) of each chunk of a region; one empty range for an empty region."""
    if length == 0:
        return [(start, start)]
    return [(s, min(s + chunk_size, start + length)) for s in range(start, start + length, chunk_size)]


def hash_ranges(
    source: ContainerBytes,
    ranges: Sequence[tuple[int, int]],
    workers: int | None = None,
) -> list[str]:
    """Hex sha256 of the bytes ``[start, end)`` of ``source`` for each range, on ``workers`` threads.

    A file is read with ``pread`` in blocks of :data:`READ_BLOCK` into one buffer per thread, so
    resident memory stays flat however large the file is, and a file truncated meanwhile is an
    IntegrityError, not a SIGBUS. Both ``pread`` and sha256 release the GIL.
    """
    local = threading.local()

    def one(span: tuple[int, int]) -> str:
        start, end = span
        if source.in_memory:
            return hashlib.sha256(source.read(start, end - start)).hexdigest()
        buffer = getattr(local, "buffer", None)
        if buffer is None:
            buffer = local.buffer = memoryview(bytearray(READ_BLOCK))
        digest = hashlib.sha256()
        position = start
        while position < end:
            block = buffer[: min(READ_BLOCK, end - position)]
            source.read_into(block, position)
            digest.update(block)
            position += len(block)
        return digest.hexdigest()

    return hash_map(one, ranges, workers)


def file_sha256(source: ContainerBytes) -> str:
    """sha256 of every byte of ``source`` (one thread, blocks of :data:`READ_BLOCK`)."""
    if source.in_memory:
        return hashlib.sha256(source.read(0, source.size)).hexdigest()
    return hash_ranges(source, [(0, source.size)], workers=1)[0]
