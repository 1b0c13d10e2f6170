"""``audit show``: a log's steps as rows a person can read (op, shapes, short digests, stats)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

DIGEST_CHARS = 12


@dataclass(frozen=True)
class StepRow:
    """One output of one step, ready to print."""

    line: int
    step: str  # 'name' or 'subgraph/path/name'
    op_type: str
    output: str
    dtype: str
    shape: str
    digest: str
    stats: str


def _number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_stats(stats: dict[str, Any] | None) -> str:
    """'min .. max, mean m' plus NaN/Inf counts when there are any."""
    if not stats:
        return "-"
    text = f"{_number(stats['min'])} .. {_number(stats['max'])}, mean {_number(stats['mean'])}"
    extra = [f"{stats[k]} {k.upper() if k == 'nan' else 'Inf'}" for k in ("nan", "inf") if stats.get(k)]
    return text + (" (" + ", ".join(extra) + ")" if extra else "")


def describe_value(entry: dict[str, Any]) -> tuple[str, str, str]:
    """(dtype, shape, short digest) of a value entry of a record."""
    kind = entry.get("kind")
    digest = (entry.get("digest") or "-")[:DIGEST_CHARS]
    if kind == "tensor":
        return entry["dtype"], "[" + ",".join(map(str, entry["shape"])) + "]", digest
    if kind == "sequence":
        return "sequence", f"len {entry['length']}", digest
    if kind == "map":
        return "map", f"size {entry['size']}", digest
    return "none", "-", digest


def step_rows(records: Iterable[dict[str, Any]]) -> list[StepRow]:
    """One row per output of every step record, in log order (line numbers are the log's)."""
    rows = []
    for line, record in enumerate(records, start=1):
        if record.get("type") != "step":
            continue
        where = "/".join((*record["path"], record["name"]))
        for entry in record["outputs"]:
            dtype, shape, digest = describe_value(entry)
            rows.append(
                StepRow(line, where, record["op_type"], entry["name"], dtype, shape, digest, format_stats(entry.get("stats")))
            )
    return rows
