"""Audit log records: what one line of a log holds, and how records are chained.

A log is JSON Lines: a header, one record per executed step, a footer. Every record is written as
its canonical JSON (:func:`sealtrace.digest.canonical_json`) and carries

- ``seq``: its position in the log (0 for the header),
- ``prev``: the digest of the record before it (:data:`GENESIS` for the header),
- its own digest: ``digest`` in header and step records, ``chain_head`` in the footer.

A record's digest is the log's digest algorithm (sha256, or BLAKE3 in a v2 log that names it) over
the canonical JSON of the record without its digest field and without ``signature``. Because each record commits to the one before it, the footer's digest, the
chain head, commits to the whole run: it is the run digest, and the optional signature covers it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from sealtrace.digest import DIGEST_ALGORITHMS, SHA256, canonical_dtype, canonical_json, hasher, tensor_digest

AUDIT_FORMAT = "sealtrace.audit.v1"  # sha256 only: what a sha256 log is written as
AUDIT_FORMAT_V2 = "sealtrace.audit.v2"  # names its digest algorithm in the header
AUDIT_FORMATS = (AUDIT_FORMAT, AUDIT_FORMAT_V2)
GENESIS = "0" * 64
DEFAULT_SAMPLE = 8
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FLOAT64_HUGE = 1e307

# The fields a record's digest leaves out: the digest itself and the signature over the run digest.
_UNHASHED = ("digest", "chain_head", "signature")


def digest_field(record: Mapping[str, Any]) -> str:
    """The name of the field holding a record's own digest ('chain_head' in the footer)."""
    return "chain_head" if record.get("type") == "footer" else "digest"


def format_for(algorithm: str) -> str:
    """The format a log of ``algorithm`` is written as: v1 for sha256 (readable by every reader), v2 else."""
    return AUDIT_FORMAT if algorithm == SHA256 else AUDIT_FORMAT_V2


def header_algorithm(record: Any) -> str | None:
    """The digest algorithm line 1 names (docs/audit-log.md, check 2): a header's
    ``digest_algorithm``, sha256 when it has none or is no header; None for a value not known."""
    if not isinstance(record, dict) or record.get("type") != "header" or "digest_algorithm" not in record:
        return SHA256
    named = record["digest_algorithm"]
    return named if isinstance(named, str) and named in DIGEST_ALGORITHMS else None


def record_digest(record: Mapping[str, Any], algorithm: str = SHA256) -> str:
    """The digest (sha256 or ``algorithm``) over the canonical JSON of ``record`` without its digest field and signature."""
    body = {k: v for k, v in record.items() if k not in _UNHASHED}
    return hasher(algorithm)(canonical_json(body)).hexdigest()


def seal_record(record: dict[str, Any], seq: int, prev: str, algorithm: str = SHA256) -> bytes:
    """Give ``record`` its place in the chain (seq, prev) and its own digest; return its line.

    The line is the record's canonical JSON: the hashed body with the digest spliced in at its
    sorted place, so the record (the header's host facts are kilobytes) is encoded once, not twice.
    """
    record["seq"] = seq
    record["prev"] = prev
    own = digest_field(record)
    body = canonical_json({k: v for k, v in record.items() if k not in _UNHASHED})
    digest = hasher(algorithm)(body).hexdigest()
    record[own] = digest
    if "signature" in record or not any(k > own for k in record):
        return canonical_json(record)
    field = b'"' + own.encode("ascii") + b'":"' + digest.encode("ascii") + b'"'
    before = {k: v for k, v in record.items() if k < own}
    if not before:
        return b"{" + field + b"," + body[1:]
    # The keys that sort before the digest field open the body exactly as they open their own JSON.
    cut = len(canonical_json(before)) - 1
    return body[:cut] + b"," + field + body[cut:]


def json_number(value: float | int | bool) -> float | int | bool | str:
    """A JSON-safe scalar: non-finite floats become the strings 'nan', 'inf', '-inf'."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def from_json_number(value: Any) -> Any:
    """Inverse of :func:`json_number`."""
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return value


def sample_of(array: np.ndarray, count: int) -> list[Any]:
    """The first ``count`` values in C order, as JSON-safe scalars (exact for floats)."""
    if count <= 0 or array.size == 0:
        return []
    # .flat slicing reads only the first values, even of a non-contiguous view.
    head = np.asarray(array.flat[:count])
    if head.dtype.kind in "iub" or (head.dtype.kind == "f" and np.isfinite(head).all()):
        return head.tolist()
    if head.dtype.kind in "OUS":
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in head.tolist()]
    if head.dtype.kind == "c":
        return [[json_number(float(v.real)), json_number(float(v.imag))] for v in head.tolist()]
    return [json_number(v) for v in head.tolist()]


def float_stats(array: np.ndarray) -> tuple[Any, Any, float | None, int, int]:
    """(min, max, mean, NaN count, Inf count) of a non-empty float tensor; min, max and mean
    over the finite values (None when there are none).

    Three passes when every value is finite (min, max, sum): min and max propagate NaN, so
    finite ends mean there is no NaN and no Inf, and only then are the counting passes skipped.
    """
    # The ufuncs' own reduce skips the Python wrappers of ndarray.min/max: cheaper on small tensors.
    lo = np.minimum.reduce(array, axis=None)
    hi = np.maximum.reduce(array, axis=None)
    nan = inf = 0
    if not (math.isfinite(lo) and math.isfinite(hi)):
        # Rare: only now pay for full passes.
        nan = int(np.count_nonzero(np.isnan(array)))
        inf = int(np.count_nonzero(np.isinf(array)))
        # min, max and mean then describe the finite values; the counts say what was left out.
        array = array[np.isfinite(array)]
        if array.size == 0:
            return None, None, None, nan, inf
        lo, hi = np.minimum.reduce(array, axis=None), np.maximum.reduce(array, axis=None)
    # Pairwise summation in the tensor's own precision (float16 widened): fast and stable enough
    # for a summary; the digest, not the mean, is what identifies the tensor. Where the sum
    # could overflow that precision (masks of -3.4e38), it is taken in float64 instead.
    bound = max(-float(lo), float(hi)) * array.size
    wide = array.itemsize < 8 and bound >= _FLOAT32_MAX
    accumulate = np.float64 if wide else (np.float32 if array.itemsize < 4 else None)
    if bound < _FLOAT64_HUGE:
        mean = float(np.add.reduce(array, axis=None, dtype=accumulate)) / array.size
    else:  # only a float64 sum near 1.8e308 can overflow (np.errstate costs a microsecond: not always)
        with np.errstate(over="ignore"):
            mean = float(np.add.reduce(array, axis=None, dtype=accumulate)) / array.size
    return lo, hi, mean, nan, inf


def stats_of(array: np.ndarray) -> dict[str, Any] | None:
    """min, max, mean and NaN/Inf counts of a numeric tensor; None for strings or empty tensors.

    min, max and mean are taken over the finite values; ``nan`` and ``inf`` count the others.
    """
    kind = array.dtype.kind
    if array.size == 0 or kind not in "biuf":
        return None
    if kind == "f":
        lo, hi, mean, nan, inf = float_stats(array)
        if lo is None:
            return {"min": None, "max": None, "mean": None, "nan": nan, "inf": inf}
        return {
            "min": json_number(float(lo)),
            "max": json_number(float(hi)),
            "mean": json_number(mean),  # type: ignore[arg-type]
            "nan": nan,
            "inf": inf,
        }
    if kind == "b":
        array = array.view(np.uint8)
    lo = np.minimum.reduce(array, axis=None)
    hi = np.maximum.reduce(array, axis=None)
    mean = float(np.add.reduce(array, axis=None, dtype=np.float64)) / array.size
    return {"min": int(lo), "max": int(hi), "mean": json_number(mean), "nan": 0, "inf": 0}


def sequence_digest(digests: list[str | None], algorithm: str = SHA256) -> str:
    """Digest of a sequence value: sha256 (or ``algorithm``) over the canonical JSON list of its elements' digests."""
    return hasher(algorithm)(canonical_json({"sequence": digests})).hexdigest()


def map_digest(value: Mapping[Any, Any], algorithm: str = SHA256) -> str:
    """Digest of a map value: sha256 over the canonical JSON list of its (key, value) pairs in key
    order. Keys and values are tagged with their kind (["i", int], ["s", str], ["f", float.hex()],
    ["tensor", digest]), so that equal maps give equal digests whatever their order, floats count
    exactly, and no value of one kind can pass for another."""
    pairs = sorted((_map_item(k, algorithm), _map_item(v, algorithm)) for k, v in value.items())
    document = canonical_json({"map": [[k, v] for k, v in pairs]})
    return hasher(algorithm)(document).hexdigest()


def _map_item(item: Any, algorithm: str) -> tuple[str, Any]:
    if isinstance(item, str):
        return ("s", item)
    if isinstance(item, np.ndarray):
        return ("tensor", tensor_digest(item, algorithm))
    if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
        return ("i", int(item))
    return ("f", float(item).hex())


def value_identity(value: Any, algorithm: str = SHA256) -> dict[str, Any]:
    """What identifies one value: kind, dtype, shape and digest (no sample, no stats)."""
    if value is None:
        return {"kind": "none", "digest": None}
    if isinstance(value, list):
        return {"kind": "sequence", "length": len(value), "digest": value_digest(value, algorithm)}
    if isinstance(value, Mapping):
        return {"kind": "map", "size": len(value), "digest": map_digest(value, algorithm)}
    array = np.asarray(value)
    return {
        "kind": "tensor",
        "dtype": canonical_dtype(array.dtype),
        "shape": [int(d) for d in array.shape],
        "digest": tensor_digest(array, algorithm),
    }


def value_summary(value: Any, sample: int, algorithm: str = SHA256) -> dict[str, Any]:
    """What a step record says of one value: its identity, a sample and stats.

    Tensors are hashed in full with :func:`sealtrace.digest.tensor_digest`: nothing is elided.
    """
    summary = value_identity(value, algorithm)
    if summary["kind"] == "tensor":
        array = np.asarray(value)
        summary["sample"] = sample_of(array, sample)
        summary["stats"] = stats_of(array)
    return summary


def value_digest(value: Any, algorithm: str = SHA256) -> str | None:
    """The digest a record gives ``value`` (tensor, sequence or map digest, or None)."""
    if value is None:
        return None
    if isinstance(value, list):
        return sequence_digest([value_digest(v, algorithm) for v in value], algorithm)
    if isinstance(value, Mapping):
        return map_digest(value, algorithm)
    return tensor_digest(np.asarray(value), algorithm)
