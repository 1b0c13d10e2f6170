"""The one place that hashes tensors, bytes and JSON documents.

A tensor digest is sha256 over a canonical encoding: a domain tag, the dtype as a little-endian
NumPy type string, the shape, then the C-order little-endian bytes. The same array therefore has
the same digest whatever its memory layout or the host's byte order.

Audit logs may name another digest algorithm (docs/audit-log.md, "Digest algorithm"): BLAKE3 over the
very same bytes. Everything else (containers, manifests, bindings, Plans, ledgers) is sha256.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

TENSOR_DIGEST_TAG = b"sealtrace.tensor.v1\0"
SHA256 = "sha256"
BLAKE3 = "blake3"
DIGEST_ALGORITHMS = (SHA256, BLAKE3)
# A digest as sealtrace writes it (sha256 or BLAKE3): 64 lowercase hex digits, nothing around them.
HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


def hasher(algorithm: str = SHA256) -> Callable[..., Any]:
    """The constructor of ``algorithm``'s hash objects (``hashlib.sha256`` or ``blake3.blake3``):
    called with optional bytes, it returns an object with update, copy, digest and hexdigest."""
    if algorithm == SHA256:
        return hashlib.sha256
    if algorithm == BLAKE3:
        # Imported on first use: only logs that ask for BLAKE3 need the package.
        from blake3 import blake3

        return blake3
    raise ValueError(f"unknown digest algorithm {algorithm!r} (known: {', '.join(DIGEST_ALGORITHMS)})")


def is_hex_digest(value: Any) -> bool:
    """Whether ``value`` is a string of exactly 64 lowercase hex digits (:data:`HEX_DIGEST`)."""
    return isinstance(value, str) and HEX_DIGEST.fullmatch(value) is not None


def canonical_dtype(dtype: np.dtype[Any]) -> str:
    """A stable dtype name: the little-endian NumPy type string ('<f4'), or 'str' for strings."""
    if dtype.kind in "OUS":
        return "str"
    if dtype.byteorder in ("=", "|", ">", "<") and dtype.itemsize > 1:
        return dtype.newbyteorder("<").str
    return dtype.str


def tensor_bytes(array: np.ndarray) -> bytes | memoryview:
    """The canonical payload of a tensor: C-order, little-endian; strings as length-prefixed UTF-8."""
    if array.dtype.kind in "OUS":
        parts = []
        for item in array.reshape(-1).tolist():
            data = item if isinstance(item, bytes) else str(item).encode("utf-8")
            parts.append(struct.pack("<Q", len(data)) + data)
        return b"".join(parts)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    array = np.ascontiguousarray(array)
    if not array.size:
        return b""
    # A uint8 view works for every fixed-size dtype, ml_dtypes' bfloat16/float8/int4 included,
    # which the buffer protocol cannot describe.
    return memoryview(array.reshape(-1).view(np.uint8))  # type: ignore[arg-type]


def tensor_digest_prefix(dtype: np.dtype[Any], shape: tuple[int, ...]) -> bytes:
    """What the canonical encoding holds before a tensor's bytes: tag, dtype name, rank, shape.

    Callers that digest many tensors of one dtype and shape (the audit recorder) hash this once
    and copy the hash state; :func:`tensor_digest` is the definition either way.
    """
    return (
        TENSOR_DIGEST_TAG
        + canonical_dtype(dtype).encode("ascii")
        + b"\0"
        + struct.pack("<Q", len(shape))
        + struct.pack(f"<{len(shape)}Q", *shape)
    )


def tensor_digest(array: np.ndarray, algorithm: str = SHA256) -> str:
    """Hex sha256 (or ``algorithm``) of the canonical encoding of ``array`` (dtype, shape, C-order LE bytes)."""
    array = np.asarray(array)
    h = hasher(algorithm)(tensor_digest_prefix(array.dtype, array.shape))
    h.update(tensor_bytes(array))
    return h.hexdigest()


def bytes_digest(data: bytes | memoryview) -> str:
    """Hex sha256 of raw bytes."""
    return hashlib.sha256(data).hexdigest()


def canonical_json(document: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no whitespace, ASCII only; what sealtrace hashes and signs."""
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def json_digest(document: Any) -> str:
    """Hex sha256 of :func:`canonical_json` of ``document``."""
    return hashlib.sha256(canonical_json(document)).hexdigest()
