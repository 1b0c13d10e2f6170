"""``sealtrace diff A B``: compare two recorded runs (two captures, or two audit logs).

Values are matched by key: the value name, prefixed by its subgraph path for values made inside
subgraphs, with '#N' for the N-th repeat (the key scheme of captures). Digests are compared for
every value; numbers are compared where both sides hold them: whole tensors for captures, the
logged samples (the first N values) for audit logs. The drift origin is the first value, in A's
order, that differs beyond tolerance (or whose digests differ when no numbers are there to judge).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sealtrace.errors import InputError
from sealtrace.parity.metrics import Tolerance, ToleranceTable, ValueDiff, compare_values

DIFF_FORMAT = "sealtrace.diff.v1"


@dataclass(frozen=True)
class RecordedValue:
    """One value of a recorded run: where it came from, its digest, and numbers if recorded."""

    key: str
    step: str
    op_type: str
    digest: str | None
    numbers: Any = None  # full tensor (capture) or the logged sample (audit log)
    sampled: bool = False


@dataclass(frozen=True)
class DiffEntry:
    position: int
    key: str
    step: str
    op_type: str
    status: str  # identical | within | exceeds | digest-differs | only-in-a | only-in-b
    diff: ValueDiff | None

    def to_json(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "key": self.key,
            "step": self.step,
            "op_type": self.op_type,
            "status": self.status,
            "diff": None if self.diff is None else self.diff.to_json(),
        }


@dataclass
class DiffReport:
    kinds: tuple[str, str]
    sources: tuple[str, str]
    tolerance: ToleranceTable
    entries: list[DiffEntry] = field(default_factory=list)

    @property
    def differing(self) -> list[DiffEntry]:
        return [e for e in self.entries if e.status not in ("identical", "within")]

    @property
    def drift_origin(self) -> DiffEntry | None:
        return next((e for e in self.entries if e.status in ("exceeds", "digest-differs")), None)

    @property
    def passed(self) -> bool:
        return not self.differing

    def to_json(self) -> dict[str, Any]:
        origin = self.drift_origin
        return {
            "format": DIFF_FORMAT,
            "kinds": list(self.kinds),
            "sources": list(self.sources),
            "tolerance": self.tolerance.to_json(),
            "summary": {
                "values": len(self.entries),
                "identical": sum(1 for e in self.entries if e.status == "identical"),
                "differing": len(self.differing),
                "drift_origin": None if origin is None else {"key": origin.key, "step": origin.step,
                                                              "op_type": origin.op_type},
                "passed": self.passed,
            },
            "entries": [e.to_json() for e in self.entries],
        }


def load_recorded(path: str | os.PathLike[str]) -> tuple[str, list[RecordedValue]]:
    """Read a capture directory or an audit log into its values, in recorded order."""
    source = Path(path)
    if source.is_dir():
        return "capture", _from_capture(source)
    if source.is_file():
        return "audit", _from_audit_log(source)
    raise InputError(f"{source}: no such capture directory or audit log")


def _from_capture(directory: Path) -> list[RecordedValue]:
    from sealtrace.audit.capture import CapturedRun

    run = CapturedRun.open(directory)
    values = []
    for key, entry in run.entries.items():
        values.append(
            RecordedValue(key, entry.get("step", ""), entry.get("op_type", ""), entry.get("digest"), run.load(key))
        )
    return values


def _from_audit_log(path: Path) -> list[RecordedValue]:
    from sealtrace.audit.log import read_records
    from sealtrace.audit.records import from_json_number

    records = read_records(path)
    if not records or records[0].get("type") != "header":
        raise InputError(f"{path}: not a sealtrace audit log (no header record)")
    values: list[RecordedValue] = []
    seen: dict[str, int] = {}
    for record in records:
        if record.get("type") != "step":
            continue
        for output in record.get("outputs", []):
            name = output.get("name")
            if not name:
                continue
            key = "/".join([*record.get("path", []), name])
            count = seen.get(key, 0)
            seen[key] = count + 1
            if count:
                key = f"{key}#{count}"
            numbers = None
            if output.get("kind") == "tensor" and output.get("sample"):
                try:
                    numbers = np.asarray([from_json_number(v) for v in output["sample"]], dtype=output.get("dtype"))
                except (TypeError, ValueError):
                    numbers = None
            values.append(
                RecordedValue(key, record.get("name", ""), record.get("op_type", ""), output.get("digest"),
                              numbers, sampled=True)
            )
    return values


def diff_runs(
    a: str | os.PathLike[str], b: str | os.PathLike[str], tolerance: ToleranceTable | None = None
) -> DiffReport:
    """Compare two recorded runs; see the module docstring."""
    tolerance = tolerance or ToleranceTable(Tolerance())
    kind_a, values_a = load_recorded(a)
    kind_b, values_b = load_recorded(b)
    by_key_b = {v.key: v for v in values_b}
    report = DiffReport((kind_a, kind_b), (str(a), str(b)), tolerance)
    for position, va in enumerate(values_a):
        vb = by_key_b.pop(va.key, None)
        if vb is None:
            report.entries.append(DiffEntry(position, va.key, va.step, va.op_type, "only-in-a", None))
            continue
        report.entries.append(_compare(position, va, vb, tolerance))
    for vb in by_key_b.values():
        report.entries.append(DiffEntry(len(report.entries), vb.key, vb.step, vb.op_type, "only-in-b", None))
    return report


def _compare(position: int, va: RecordedValue, vb: RecordedValue, tolerance: ToleranceTable) -> DiffEntry:
    if va.digest is not None and va.digest == vb.digest:
        return DiffEntry(position, va.key, va.step, va.op_type, "identical", None)
    if va.numbers is None or vb.numbers is None:
        return DiffEntry(position, va.key, va.step, va.op_type, "digest-differs", None)
    a_numbers, b_numbers = va.numbers, vb.numbers
    if va.sampled or vb.sampled:
        # Only the logged samples are there: compare the common prefix.
        count = min(np.size(a_numbers), np.size(b_numbers))
        a_numbers = np.asarray(a_numbers).reshape(-1)[:count]
        b_numbers = np.asarray(b_numbers).reshape(-1)[:count]
    diff = compare_values(va.key.split("/")[-1], a_numbers, b_numbers, tolerance.for_value(va.op_type, va.key))
    if va.sampled and not diff.exceeds:
        # The samples agree but the digests do not: the difference lies beyond the sample.
        return DiffEntry(position, va.key, va.step, va.op_type, "digest-differs", diff)
    return DiffEntry(position, va.key, va.step, va.op_type, "exceeds" if diff.exceeds else "within", diff)


def diff_json(report: DiffReport) -> str:
    return json.dumps(report.to_json(), sort_keys=True, indent=2, allow_nan=False) + "\n"
