"""``sealtrace diff A B``: compare two recorded runs (two captures, or two audit logs).

Neither side is trusted as it stands: an audit log is chain-verified first (a log that does not
verify is a failed check naming the line), and every value read from a capture is re-hashed against
its index digest (a file that does not match is a failed check naming the file and the key).

Values are matched by key: the value name, prefixed by its subgraph path for values made inside
subgraphs, with '#N' for the N-th repeat (the key scheme of captures); graph inputs come first.
Digests are compared for every value; numbers are compared where both sides hold them: whole
tensors for captures, the logged samples (the first N values) for audit logs. The drift origin is
the first value, in A's order, that differs beyond tolerance (or whose digests differ when no
numbers are there to judge).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sealtrace.audit.capture import CapturedRun
from sealtrace.audit.log import read_lines
from sealtrace.audit.records import from_json_number
from sealtrace.audit.verify import verify_lines
from sealtrace.errors import InputError
from sealtrace.parity.metrics import ValueDiff, compare_values
from sealtrace.parity.tolerance import Tolerance, ToleranceTable

DIFF_FORMAT = "sealtrace.diff.v1"


@dataclass(frozen=True)
class RecordedValue:
    """One value of a recorded run: where it came from, its digest, and numbers if recorded."""

    key: str
    step: str  # '' for a graph input
    op_type: str
    digest: str | None
    numbers: Any = None  # the logged sample (audit log)
    sampled: bool = False
    kind: str = "tensor"  # tensor | sequence | map | none
    load: Callable[[], Any] | None = field(default=None, repr=False, compare=False)  # a capture's value

    def read(self) -> Any:
        """The numbers to compare: a capture's whole value, read (and re-hashed) now, so that a
        diff holds two values at a time however large the runs; a log's sample."""
        return self.load() if self.load is not None else self.numbers


@dataclass(frozen=True)
class DiffEntry:
    position: int
    key: str
    step: str
    op_type: str
    status: str  # identical | within | exceeds | digest-differs | only-in-a | only-in-b
    diff: ValueDiff | None

    def where(self) -> str:
        """Where the value comes from, for people: 'graph input' or 'step NAME (OP)'."""
        return f"step {self.step} ({self.op_type})" if self.step else "graph input"

    def to_json(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "key": self.key,
            "step": self.step,
            "op_type": self.op_type,
            "status": self.status,
            "diff": None if self.diff is None else self.diff.to_json(),
        }


@dataclass(frozen=True)
class RecordedRun:
    """One side of a diff: what it is ('capture' or 'audit'), its values in recorded order, and
    whether it is complete (a capture of a run that failed is not)."""

    kind: str
    values: list[RecordedValue]
    complete: bool = True
    digest_algorithm: str = "sha256"  # the log's or capture's (docs/audit-log.md, "Digest algorithm")


@dataclass
class DiffReport:
    kinds: tuple[str, str]
    sources: tuple[str, str]
    tolerance: ToleranceTable
    entries: list[DiffEntry] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)  # sources whose capture is not complete

    @property
    def differing(self) -> list[DiffEntry]:
        return [e for e in self.entries if e.status not in ("identical", "within")]

    def count(self, status: str) -> int:
        """How many values have ``status`` ('identical', 'within', ...)."""
        return sum(1 for e in self.entries if e.status == status)

    def summary(self) -> str:
        """'N values (capture vs capture): I identical, W within tolerance, D differing'."""
        text = (
            f"{len(self.entries)} values ({self.kinds[0]} vs {self.kinds[1]}): {self.count('identical')} identical, "
            f"{self.count('within')} within tolerance, {len(self.differing)} differing"
        )
        for source in self.incomplete:
            text += f"; {source} is an incomplete capture (its run failed or a file could not be written)"
        return text

    @property
    def drift_origin(self) -> DiffEntry | None:
        return next((e for e in self.entries if e.status in ("exceeds", "digest-differs")), None)

    @property
    def passed(self) -> bool:
        """Every value matches, and both runs were recorded whole."""
        return not self.differing and not self.incomplete

    def to_json(self) -> dict[str, Any]:
        origin = self.drift_origin
        return {
            "format": DIFF_FORMAT,
            "kinds": list(self.kinds),
            "sources": list(self.sources),
            "tolerance": self.tolerance.to_json(),
            "summary": {
                "values": len(self.entries),
                "identical": self.count("identical"),
                "within": self.count("within"),
                "differing": len(self.differing),
                "drift_origin": None if origin is None else {"key": origin.key, "step": origin.step,
                                                              "op_type": origin.op_type},
                "incomplete": list(self.incomplete),
                "passed": self.passed,
            },
            "entries": [e.to_json() for e in self.entries],
        }


def load_recorded(path: str | os.PathLike[str]) -> RecordedRun:
    """Read a capture directory or an audit log into its values, in recorded order, checked: a
    capture's values against their digests as they are read, a log's chain now (a failure is a
    CheckFailedError)."""
    source = Path(path)
    if not (source.exists() or source.is_symlink()):
        raise InputError(f"{source}: no such capture directory or audit log")
    if source.is_dir():
        return _from_capture(source)
    values, algorithm = _from_audit_log(source)  # read as a regular file only (no device, no FIFO)
    return RecordedRun("audit", values, digest_algorithm=algorithm)


def _from_capture(directory: Path) -> RecordedRun:

    run = CapturedRun.open(directory)
    values = [
        # run.load re-hashes the value against its index digest.
        RecordedValue(key, entry.get("step", ""), entry.get("op_type", ""), entry.get("digest"), kind=entry["kind"],
                      load=functools.partial(run.load, key))
        for key, entry in run.entries.items()
    ]
    return RecordedRun("capture", values, run.complete, run.digest_algorithm)


def _from_audit_log(path: Path) -> tuple[list[RecordedValue], str]:

    # Only a log whose chain verifies is compared: past a bad line nothing can be trusted.
    verification = verify_lines(read_lines(path), str(path))
    verification.raise_if_failed()
    records = verification.records
    values: list[RecordedValue] = [_logged_value(entry["name"], "", "", entry) for entry in records[0]["inputs"]]
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
            values.append(_logged_value(key, record.get("name", ""), record.get("op_type", ""), output))
    return values, verification.digest_algorithm


def _logged_value(key: str, step: str, op_type: str, entry: dict[str, Any]) -> RecordedValue:

    numbers = None
    if entry.get("kind") == "tensor" and entry.get("sample"):
        try:
            numbers = np.asarray([from_json_number(v) for v in entry["sample"]], dtype=entry.get("dtype"))
        except (TypeError, ValueError, OverflowError):
            numbers = None  # a sample NumPy cannot hold in the logged dtype (bfloat16, complex): digests only
    return RecordedValue(key, step, op_type, entry.get("digest"), numbers, sampled=True,
                         kind=str(entry.get("kind", "tensor")))


def diff_runs(
    a: str | os.PathLike[str], b: str | os.PathLike[str], tolerance: ToleranceTable | None = None
) -> DiffReport:
    """Compare two recorded runs; see the module docstring."""
    tolerance = tolerance or ToleranceTable(Tolerance())
    run_a, run_b = load_recorded(a), load_recorded(b)
    if run_a.digest_algorithm != run_b.digest_algorithm:
        # Digests of two algorithms never match: every value would read as differing.
        raise InputError(
            f"{a} has {run_a.digest_algorithm} digests and {b} has {run_b.digest_algorithm} digests, which cannot "
            "be compared: record both runs with the same --digest"
        )
    by_key_b = {v.key: v for v in run_b.values}
    report = DiffReport((run_a.kind, run_b.kind), (str(a), str(b)), tolerance)
    report.incomplete = [str(source) for source, run in ((a, run_a), (b, run_b)) if not run.complete]
    for position, va in enumerate(run_a.values):
        vb = by_key_b.pop(va.key, None)
        a_numbers = va.read()  # every captured value is read, and so checked, matched or not
        if vb is None:
            report.entries.append(DiffEntry(position, va.key, va.step, va.op_type, "only-in-a", None))
            continue
        report.entries.append(_compare(position, va, a_numbers, vb, vb.read(), tolerance))
    for vb in by_key_b.values():
        vb.read()
        report.entries.append(DiffEntry(len(report.entries), vb.key, vb.step, vb.op_type, "only-in-b", None))
    return report


def _compare(
    position: int, va: RecordedValue, a_numbers: Any, vb: RecordedValue, b_numbers: Any, tolerance: ToleranceTable
) -> DiffEntry:
    if va.digest == vb.digest and (va.digest is not None or va.kind == vb.kind == "none"):
        return DiffEntry(position, va.key, va.step, va.op_type, "identical", None)
    if a_numbers is None or b_numbers is None:
        return DiffEntry(position, va.key, va.step, va.op_type, "digest-differs", None)
    if va.sampled or vb.sampled:
        # Only the logged samples are there: compare the common prefix.
        count = min(np.size(a_numbers), np.size(b_numbers))
        a_numbers = np.asarray(a_numbers).reshape(-1)[:count]
        b_numbers = np.asarray(b_numbers).reshape(-1)[:count]
    diff = compare_values(va.key.split("/")[-1], a_numbers, b_numbers, tolerance.for_value(va.op_type, va.key))
    if (va.sampled or vb.sampled) and not diff.exceeds:
        # The samples agree but the digests do not: the difference lies beyond the sample.
        return DiffEntry(position, va.key, va.step, va.op_type, "digest-differs", diff)
    return DiffEntry(position, va.key, va.step, va.op_type, "exceeds" if diff.exceeds else "within", diff)


def diff_json(report: DiffReport) -> str:
    return json.dumps(report.to_json(), sort_keys=True, indent=2, allow_nan=False) + "\n"
