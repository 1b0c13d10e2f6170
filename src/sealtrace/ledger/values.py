"""What a ledger keeps beside its records: inputs by digest (for replays) and compressed audit trails.

Inputs are stored content-addressed: the key is the tensor digest the record names
(:func:`sealtrace.digest.tensor_digest`), the row its canonical encoding (dtype name, shape, C-order
little-endian bytes; strings length-prefixed UTF-8), never a pickle. Reading one back recomputes the
digest, so a damaged or substituted row is an error, not an input. Trails (audit logs) are stored
zlib-compressed under their run digest.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from sealtrace.digest import canonical_dtype, tensor_bytes, tensor_digest
from sealtrace.ledger.errors import LedgerError, RecordError
from sealtrace.limits import check_allocation
from sealtrace.strictjson import loads_strict


def encode_tensor(array: np.ndarray) -> tuple[str, str, bytes]:
    """(dtype name, shape as JSON, canonical bytes) of a tensor, for the inputs table (keyed by its digest)."""
    array = np.asarray(array)
    # Extension types (bfloat16, float8 ...) have no portable type string; their NumPy name does.
    dtype = array.dtype.name if array.dtype.kind == "V" else canonical_dtype(array.dtype)
    return dtype, json.dumps([int(d) for d in array.shape]), bytes(tensor_bytes(array))


def decode_tensor(digest: str, dtype_name: str, shape_text: str, data: bytes, where: str) -> np.ndarray:
    """The tensor a stored row holds; its digest must be ``digest``."""
    try:
        shape = loads_strict(shape_text)
        if not (isinstance(shape, list) and len(shape) <= 64 and all(type(d) is int and d >= 0 for d in shape)):
            raise ValueError("shape is not a list of non-negative integers")
        count = int(np.prod(shape, dtype=object)) if shape else 1
        if dtype_name == "str":
            array = _decode_strings(data, count).reshape(shape)
        else:
            dtype = _dtype(dtype_name)
            check_allocation(count * dtype.itemsize, where)
            if count * dtype.itemsize != len(data):
                raise ValueError(f"{dtype_name}{shape} needs {count * dtype.itemsize} bytes, the row holds {len(data)}")
            array = np.frombuffer(data, dtype).reshape(shape)
    except (ValueError, TypeError, struct.error) as exc:
        raise LedgerError(f"{where}: stored input is malformed ({exc})") from None
    if tensor_digest(array) != digest:
        raise LedgerError(f"{where}: stored input does not match its digest {digest[:16]}... (damaged or replaced)")
    return array


def _dtype(name: str) -> np.dtype[Any]:
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # noqa: F401  (registers bfloat16, float8 ... with NumPy)

        return np.dtype(name)


def _decode_strings(data: bytes, count: int) -> np.ndarray:
    items, offset = [], 0
    for _ in range(count):
        (length,) = struct.unpack_from("<Q", data, offset)
        offset += 8
        if length > len(data) - offset:
            raise ValueError("a string runs past the end of the row")
        items.append(data[offset : offset + length].decode("utf-8"))
        offset += length
    if offset != len(data):
        raise ValueError("bytes left after the last string")
    return np.array(items, dtype=object)


@dataclass(frozen=True)
class Trail:
    """An audit log ready to store: its run digest, its size and its zlib-compressed bytes.

    Made with :meth:`of` wherever the log is (a replay worker process makes it there, so the server's
    process neither compresses nor copies the log); :meth:`Ledger.append` takes one or the raw bytes.
    """

    run_digest: str
    size: int
    compressed: bytes

    @classmethod
    def of(cls, log: bytes) -> Trail:
        return cls(trail_run_digest(log), len(log), zlib.compress(log, 6))


def decompress_trail(data: bytes, size: int, where: str) -> bytes:
    """The audit log a trail row holds; ``size`` is what the row says it inflates to."""
    check_allocation(size, where)
    inflater = zlib.decompressobj()
    try:
        log = inflater.decompress(data, size)
    except zlib.error as exc:
        raise LedgerError(f"{where}: stored trail is damaged ({exc})") from None
    if len(log) != size or not inflater.eof or inflater.unconsumed_tail:
        raise LedgerError(f"{where}: stored trail does not inflate to the {size} bytes it declares")
    return log


def trail_run_digest(log: bytes) -> str:
    """The run digest of an audit log: its footer's ``chain_head`` (the last line's)."""
    last = log.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    try:
        footer = loads_strict(last)
    except (ValueError, RecursionError):
        footer = None
    digest = footer.get("chain_head") if isinstance(footer, dict) and footer.get("type") == "footer" else None
    if not isinstance(digest, str):
        raise RecordError("trail: not a complete audit log (its last line is not a footer with a chain_head)")
    return digest
