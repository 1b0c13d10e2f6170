"""Ledger records: what one leaf of the tree says about one inference (or its replay).

A record is a JSON object (``sealtrace.ledger.record.v1``, schema ``schemas/ledger.schema.json``,
docs/ledger.md); the leaf the tree hashes is its canonical JSON (:func:`sealtrace.digest.canonical_json`).
Records hold strings, integers, booleans and nulls only, never floats, so that any implementation
reproduces and checks the same bytes. Values are named by the digest every sealtrace format uses
(:func:`sealtrace.audit.records.value_identity`), so a record ties a request to its stored inputs,
its outputs, its model (container and plan digests) and its per-op audit trail (the log's run digest).
"""

from __future__ import annotations

import datetime
import re
import uuid
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from sealtrace import __version__
from sealtrace.audit.records import value_identity
from sealtrace.digest import canonical_json, is_hex_digest
from sealtrace.fields import is_integer, is_text, missing_and_unknown
from sealtrace.jsonschemas import load_schema, validator
from sealtrace.ledger.errors import ProofFormatError, RecordError
from sealtrace.strictjson import loads_strict

RECORD_FORMAT = "sealtrace.ledger.record.v1"
SCHEMA_FILE = "ledger.schema.json"
MAX_RECORD_BYTES = 1 << 20
AUDIT_MODES = ("full", "deferred", "io")
VERDICTS = ("identical", "within-tolerance", "diverged", "failed")


def utc_now() -> str:
    """The current time as records write it: RFC 3339, UTC, microseconds ('2025-01-31T12:00:00.000000Z')."""
    now = datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_record_id() -> str:
    """A fresh record id: 32 lowercase hex digits (a random UUID)."""
    return uuid.uuid4().hex


def new_record(
    *,
    model_name: str,
    plan_digest: str,
    backend: str,
    backend_version: str,
    inputs: Mapping[str, Any],
    outputs: Mapping[str, Any],
    container_digest: str | None = None,
    principal: str | None = None,
    audit: str = "io",
    trail: str | None = None,
    kind: str = "inference",
    links: Iterable[Mapping[str, Any]] = (),
    record_id: str | None = None,
    time: str | None = None,
) -> dict[str, Any]:
    """The record of one run: ``inputs`` and ``outputs`` are the values themselves (arrays, sequences,
    maps) and are named by their digests here; ``trail`` is the audit log's run digest when one was
    recorded. The record is checked against the schema before it is returned."""
    record = {
        "format": RECORD_FORMAT,
        "id": record_id or new_record_id(),
        "kind": kind,
        "time": time or utc_now(),
        "principal": principal,
        "model": {"name": model_name, "container_digest": container_digest, "plan_digest": plan_digest},
        "backend": {"name": backend, "version": backend_version},
        "audit": audit,
        "inputs": {name: value_identity(value) for name, value in inputs.items()},
        "outputs": {name: value_identity(value) for name, value in outputs.items()},
        "trail": trail,
        "links": [dict(link) for link in links],
        "sealtrace_version": __version__,
    }
    record_leaf(record)
    return record


def replay_link(record_id: str, verdict: str, detail: str | None = None) -> dict[str, Any]:
    """A link from a replay record to the record it replays, with the parity verdict of the replay."""
    link = {"relation": "replays", "record": record_id, "verdict": verdict}
    if detail is not None:
        link["detail"] = detail
    return link


def record_leaf(record: Mapping[str, Any]) -> bytes:
    """The leaf bytes of ``record`` (its canonical JSON), after checking it against the format."""
    problem = record_problem(record)
    if problem is not None:
        name = str(record.get("id"))[:40] if isinstance(record, Mapping) else type(record).__name__
        raise RecordError(f"record {name!r}: {problem}")
    leaf = canonical_json(record)
    if len(leaf) > MAX_RECORD_BYTES:
        raise RecordError(f"record {record['id']}: {len(leaf)} bytes, more than a record may be ({MAX_RECORD_BYTES})")
    return leaf


def parse_record(leaf: bytes, where: str) -> dict[str, Any]:
    """The record a leaf holds; it must be the canonical JSON of a record that follows the format."""
    document = parse_json(leaf, where, RecordError, MAX_RECORD_BYTES)
    problem = record_problem(document)
    if problem is not None:
        raise RecordError(f"{where}: {problem}")
    if canonical_json(document) != leaf:
        raise RecordError(f"{where}: not in canonical JSON form (sorted keys, no spaces, ASCII)")
    return document


# The record format's rules, as code: the JSON Schema (schemas/ledger.schema.json) says the same, and
# tests check that both accept and refuse the same documents. jsonschema costs more per record than
# appends and full-ledger verification can afford; a few dict lookups do not.
_ID = re.compile(r"[0-9a-f]{32}")
_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")
_RECORD_KEYS = frozenset(
    ("format", "id", "kind", "time", "principal", "model", "backend", "audit", "inputs", "outputs", "trail",
     "links", "sealtrace_version")
)
_VALUE_KEYS = {
    "tensor": frozenset(("kind", "dtype", "shape", "digest")),
    "sequence": frozenset(("kind", "length", "digest")),
    "map": frozenset(("kind", "size", "digest")),
    "none": frozenset(("kind", "digest")),
}
_LINK_KEYS = frozenset(("relation", "record", "verdict", "detail"))
TEXT_LIMIT = 1024  # characters of a name, version, principal or detail


def _object(value: Any, keys: frozenset[str], where: str, optional: frozenset[str] = frozenset()) -> str | None:
    if not isinstance(value, dict):
        return f"{where}: must be an object"
    missing, unknown = missing_and_unknown(value, keys - optional, optional)
    if missing:
        return f"{where}: missing {', '.join(missing)}"
    if unknown:
        return f"{where}: unknown field(s) {', '.join(unknown)[:200]}"
    return None


def _value_problem(value: Any, where: str) -> str | None:
    kind = value.get("kind") if isinstance(value, dict) else None
    if not isinstance(kind, str) or kind not in _VALUE_KEYS:
        return f"{where}/kind: must be one of tensor, sequence, map, none"
    problem = _object(value, _VALUE_KEYS[kind], where)
    if problem:
        return problem
    digest = value["digest"]
    if not (digest is None if kind == "none" else is_hex_digest(digest)):
        return f"{where}/digest: must be {'null' if kind == 'none' else '64 lowercase hex digits'}"
    if kind == "tensor":
        if not is_text(value["dtype"], 64):
            return f"{where}/dtype: must be a string of at most 64 characters"
        shape = value["shape"]
        if not (isinstance(shape, list) and len(shape) <= 64 and all(is_integer(d) for d in shape)):
            return f"{where}/shape: must be a list of at most 64 non-negative integers"
    elif kind != "none" and not is_integer(value["length" if kind == "sequence" else "size"]):
        return f"{where}/{'length' if kind == 'sequence' else 'size'}: must be a non-negative integer"
    return None


def _values_problem(values: Any, where: str) -> str | None:
    if not isinstance(values, dict) or len(values) > 4096:
        return f"{where}: must be an object of at most 4096 values"
    for name, value in values.items():
        if not (isinstance(name, str) and 1 <= len(name) <= 1024):
            return f"{where}: names must be 1 to 1024 characters"
        problem = _value_problem(value, f"{where}/{name[:80]}")
        if problem:
            return problem
    return None


def _link_problem(link: Any, where: str) -> str | None:
    problem = _object(link, _LINK_KEYS, where, frozenset(("verdict", "detail")))
    if problem:
        return problem
    if link["relation"] != "replays":
        return f"{where}/relation: must be 'replays'"
    if not (isinstance(link["record"], str) and _ID.fullmatch(link["record"])):
        return f"{where}/record: must be a record id (32 lowercase hex digits)"
    if link.get("verdict") not in VERDICTS:
        return f"{where}/verdict: a 'replays' link needs one of {', '.join(VERDICTS)}"
    if "detail" in link and not is_text(link["detail"], TEXT_LIMIT):
        return f"{where}/detail: must be a string of at most 1024 characters"
    return None


def record_problem(record: Any) -> str | None:
    """What is wrong with ``record`` by the record format, or None when it conforms."""
    problem = _object(record, _RECORD_KEYS, "record")
    if problem:
        return problem
    checks: list[tuple[bool, str]] = [
        (record["format"] == RECORD_FORMAT, f"format: must be {RECORD_FORMAT!r}"),
        (isinstance(record["id"], str) and _ID.fullmatch(record["id"]) is not None, "id: must be 32 lowercase hex digits"),
        (record["kind"] in ("inference", "replay"), "kind: must be 'inference' or 'replay'"),
        (isinstance(record["time"], str) and _TIME.fullmatch(record["time"]) is not None,
         "time: must be UTC with microseconds, e.g. 2025-01-31T12:00:00.000000Z"),
        (record["principal"] is None or is_text(record["principal"], TEXT_LIMIT), "principal: must be null or a string"),
        (record["audit"] in AUDIT_MODES, f"audit: must be one of {', '.join(AUDIT_MODES)}"),
        (record["trail"] is None or is_hex_digest(record["trail"]), "trail: must be null or 64 lowercase hex digits"),
        (is_text(record["sealtrace_version"], 64), "sealtrace_version: must be a string"),
    ]
    for ok, message in checks:
        if not ok:
            return message
    model = record["model"]
    problem = _object(model, frozenset(("name", "container_digest", "plan_digest")), "model")
    if problem:
        return problem
    if not is_text(model["name"], TEXT_LIMIT):
        return "model/name: must be a string of at most 1024 characters"
    if not (model["container_digest"] is None or is_hex_digest(model["container_digest"])):
        return "model/container_digest: must be null or 64 lowercase hex digits"
    if not is_hex_digest(model["plan_digest"]):
        return "model/plan_digest: must be 64 lowercase hex digits"
    backend = record["backend"]
    problem = _object(backend, frozenset(("name", "version")), "backend")
    if problem:
        return problem
    if not (is_text(backend["name"], TEXT_LIMIT) and is_text(backend["version"], TEXT_LIMIT)):
        return "backend: name and version must be strings of at most 1024 characters"
    problem = _values_problem(record["inputs"], "inputs") or _values_problem(record["outputs"], "outputs")
    if problem:
        return problem
    links = record["links"]
    if not isinstance(links, list) or len(links) > 16:
        return "links: must be a list of at most 16 links"
    for i, link in enumerate(links):
        problem = _link_problem(link, f"links/{i}")
        if problem:
            return problem
    if record["kind"] == "replay" and not any(link["relation"] == "replays" for link in links):
        return "links: a replay record needs a 'replays' link to the record it replays"
    return None


def parse_json(data: bytes | str, where: str, error: type[Exception] = ProofFormatError, max_bytes: int = 4 << 20) -> Any:
    """JSON from outside: bounded in size, NaN/Infinity refused, deep nesting a typed error."""
    if len(data) > max_bytes:
        raise error(f"{where}: {len(data)} bytes, more than {max_bytes} allowed")
    try:
        return loads_strict(data)
    except RecursionError:
        raise error(f"{where}: JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(f"{where}: not valid JSON ({' '.join(str(exc).split())[:120]})") from None


def ledger_schema() -> dict[str, Any]:
    """The JSON Schema of the ledger's documents (src/sealtrace/schemas/ledger.schema.json)."""
    return load_schema(SCHEMA_FILE)


@cache
def _validator(kind: str) -> Any:
    schema = ledger_schema()
    return validator({"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": f"#/$defs/{kind}"})


def schema_problem(document: Any, kind: str) -> str | None:
    """What is wrong with ``document`` as a ``kind`` ('record', 'tree_head', 'inclusion_proof',
    'consistency_proof') by the JSON Schema, or None when it conforms."""
    from jsonschema.exceptions import best_match

    try:
        error = best_match(_validator(kind).iter_errors(document))
    except RecursionError:
        return "nested too deeply"
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or kind.replace("_", " ")
    return f"{where}: {' '.join(error.message.split())[:200]}"
