"""Reading audit logs back: lines, records, and the JSON Schema they follow."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from typing import Any

from sealtrace.errors import InputError
from sealtrace.jsonschemas import load_schema, validator
from sealtrace.limits import json_nesting_exceeds, memory_budget, read_regular_file
from sealtrace.strictjson import loads_strict

SCHEMA_FILE = "audit-log.schema.json"
MAX_DEPTH = 32  # lists and objects in one record; the schema's records nest a few levels


@dataclass(frozen=True)
class LogLine:
    """One line of a log file: its 1-based number, raw bytes, and the record when it parses."""

    number: int
    raw: bytes
    record: dict[str, Any] | None
    error: str | None = None  # why the line is not a JSON object, when it is not
    complete: bool = True  # False for a last line without its newline (cut off mid-write)


def read_lines(path: str | os.PathLike[str]) -> list[LogLine]:
    """Every line of the log at ``path``, parsed where it parses (no check beyond JSON).

    Only a regular file is read (``/dev/zero`` or a FIFO would be a read without end), and no
    larger than the memory budget (``sealtrace.limits``).
    """
    return parse_lines(read_regular_file(path, "audit log", max_bytes=memory_budget()))


def parse_lines(data: bytes) -> list[LogLine]:
    """Split log bytes into :class:`LogLine` objects (a trailing newline ends the last record)."""
    if not data:
        return []
    parts = data.split(b"\n")
    complete_last = parts[-1] == b""
    if complete_last:
        parts.pop()
    lines = []
    for i, raw in enumerate(parts):
        record, error = _parse(raw)
        complete = complete_last or i < len(parts) - 1
        lines.append(LogLine(i + 1, raw, record, error, complete))
    return lines


def _parse(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    try:
        # A key given twice makes a line that is not in canonical form: that check names it.
        value = loads_strict(raw, duplicate_keys=True)
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"not valid JSON ({exc})"
    except RecursionError:
        # Reported as any other line that is not a record: no record nests this deep.
        return None, "not valid JSON (nested too deeply)"
    if not isinstance(value, dict):
        return None, f"not a JSON object (found {type(value).__name__})"
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and json_nesting_exceeds(value, MAX_DEPTH):
        # No record nests this deep; refused here, before re-encoding, hashing or schema checks
        # recurse into it.
        return None, f"not a record (nested more than {MAX_DEPTH} levels deep)"
    return value, None


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a log, without verification (``audit show`` uses this; verify first)."""
    records = []
    for line in read_lines(path):
        if line.record is None:
            raise InputError(f"{path} line {line.number}: {line.error}")
        records.append(line.record)
    return records


def audit_schema() -> dict[str, Any]:
    """The JSON Schema of one audit log record (src/sealtrace/schemas/audit-log.schema.json)."""
    return load_schema(SCHEMA_FILE)


@cache
def _validators() -> dict[str, Any]:
    schema = audit_schema()
    validators = {}
    for kind in ("header", "step", "footer"):
        # One validator per record type gives errors about that type, not about a oneOf; with
        # every $ref inlined, a log of a thousand steps validates in a fraction of the time.
        sub = {"$schema": schema["$schema"], **_inline(schema["$defs"][kind], schema["$defs"])}
        validators[kind] = validator(sub)
    return validators


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """``node`` with every local ``{"$ref": "#/$defs/NAME"}`` replaced by its definition."""
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/") and len(node) == 1:
        return _inline(defs[ref[len("#/$defs/") :]], defs)
    return {key: _inline(value, defs) for key, value in node.items()}


def schema_problem(record: dict[str, Any]) -> str | None:
    """What is wrong with ``record`` by the JSON Schema, or None when it conforms."""
    kind = record.get("type")
    validator = _validators().get(kind) if isinstance(kind, str) else None
    if validator is None:
        return f"unknown record type {kind!r} (expected header, step or footer)"
    from jsonschema.exceptions import best_match

    try:
        error = best_match(validator.iter_errors(record))
    except RecursionError:
        return "nested too deeply"
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "record"
    return f"{where}: {error.message}"
