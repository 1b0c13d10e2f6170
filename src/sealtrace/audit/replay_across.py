"""The verdict of a replay on another backend or device than the log's: parity, not bit-identity.

Two backends round differently, so their digests differ wherever a float differs in its last bit.
What a log holds of each step output besides its digest is judged instead, with the tolerances
``sealtrace parity`` uses (sealtrace.parity.tolerance): the logged sample (the first N values) and
the statistics over the whole tensor (min, max, mean over the finite values; NaN and Inf counts).

What this can establish: every sampled value and every statistic is within tolerance, or the first
step where one is not (the drift origin). What it cannot: values beyond the sample are not compared
one by one, only through the statistics, so a difference confined to them and too small to move
min, max or mean passes unseen; rerun both sides with ``parity`` (every value) for that. Integer and
boolean outputs compare exactly, as in parity: a digest that differs fails them. Sequences and maps
carry no numbers in a log: when their digests differ they are counted as not judged, and said so.

A step over tolerance is born here when none of its inputs is over tolerance (they agree, or are
within it over their samples and statistics); otherwise it inherited its error. Parity decides this
by re-running the step on the other side's inputs; a log holds no whole inputs to re-run with, so
here the inputs' own verdicts decide it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sealtrace.audit.records import from_json_number
from sealtrace.parity.metrics import ValueDiff, compare_values
from sealtrace.parity.tolerance import Tolerance, ToleranceTable

# A value's verdict: identical digests; within tolerance; over it; not judged (no numbers logged).
IDENTICAL, WITHIN, OVER, NOT_JUDGED = "identical", "within", "over", "not-judged"


@dataclass(frozen=True)
class OutputVerdict:
    """One step output of the replay judged against the log."""

    line: int  # 1-based line of the step in the log
    where: str
    op_type: str
    output: str
    status: str  # IDENTICAL | WITHIN | OVER | NOT_JUDGED
    detail: str = ""
    origin: str = ""  # for OVER: 'born-here' or 'inherited'

    def describe(self) -> str:
        text = f"line {self.line}: step {self.where!r} ({self.op_type}), output {self.output!r}"
        return f"{text}: {self.detail}" if self.detail else text


def judge_steps(
    logged: Sequence[tuple[int, dict[str, Any]]], replayed: Sequence[dict[str, Any]], tolerances: ToleranceTable
) -> list[OutputVerdict]:
    """Every output of the matched step pairs (logged with their line), judged in Plan order."""
    over: set[tuple[tuple[str, ...], str]] = set()  # values over tolerance, by subgraph path and name
    verdicts = []
    for (line, old), new in zip(logged, replayed, strict=False):
        path = tuple(old["path"])
        where = "/".join((*path, old["name"]))
        inherited = any((path, entry["name"]) in over or ((), entry["name"]) in over
                        for entry in old["inputs"] if entry.get("name"))  # fmt: skip
        for before, after in zip(old["outputs"], new["outputs"], strict=False):
            status, detail = judge_value(before, after, tolerances.for_value(old["op_type"], before["name"]))
            origin = ""
            if status == OVER:
                origin = "inherited" if inherited else "born-here"
                over.add((path, before["name"]))
            verdicts.append(OutputVerdict(line, where, old["op_type"], before["name"], status, detail, origin))
    return verdicts


def judge_value(logged: dict[str, Any], replayed: dict[str, Any], tolerance: Tolerance) -> tuple[str, str]:
    """The verdict on one value and, unless identical, what was compared."""
    if logged.get("digest") == replayed.get("digest"):
        return IDENTICAL, ""
    if logged.get("kind") != replayed.get("kind"):
        return OVER, f"logged a {logged.get('kind')}, replayed a {replayed.get('kind')}"
    if logged.get("kind") != "tensor":
        return NOT_JUDGED, f"{logged.get('kind')} digests differ; a log holds no numbers of it to judge"
    if logged["dtype"] != replayed["dtype"] or logged["shape"] != replayed["shape"]:
        return OVER, f"logged {logged['dtype']}{logged['shape']}, replayed {replayed['dtype']}{replayed['shape']}"
    dtype = np.dtype(logged["dtype"]) if logged["dtype"] != "str" else np.dtype(object)
    if dtype.kind != "f":
        # Integers, booleans and strings compare exactly: differing digests are differing values.
        return OVER, "the values differ (compared exactly, as parity does for this dtype)"
    try:
        sample = _sample_diff(logged, replayed, dtype, tolerance)
    except NotNumbersError as exc:
        return OVER, str(exc)
    stats = _stats_over(logged.get("stats"), replayed.get("stats"), tolerance)
    measured = "no sample logged" if sample is None else (
        f"max |difference| {sample.max_abs:.3g} over the {len(logged.get('sample') or [])} sampled value(s)")
    if sample is not None and sample.exceeds:
        return OVER, f"{measured}, over atol {tolerance.atol:g} rtol {tolerance.rtol:g}"
    if stats:
        return OVER, f"{measured}; statistics over tolerance: {stats}"
    return WITHIN, measured


def _sample_diff(logged: dict[str, Any], replayed: dict[str, Any], dtype: np.dtype[Any],
                 tolerance: Tolerance) -> ValueDiff | None:
    a, b = logged.get("sample") or [], replayed.get("sample") or []
    count = min(len(a), len(b))
    if count == 0:
        return None
    x = np.array(_numbers(a[:count]), dtype=np.float64).astype(dtype)
    y = np.array(_numbers(b[:count]), dtype=np.float64).astype(dtype)
    # Replayed as A, logged as B: the tolerance is relative to the log's values, as parity's is to B's.
    return compare_values(str(logged.get("name", "")), y, x, tolerance)


class NotNumbersError(ValueError):
    """A float tensor's logged sample holds something other than numbers (the schema allows strings and
    pairs for string and complex tensors; an unsigned log may put them anywhere)."""


def _numbers(values: Sequence[Any]) -> list[float]:
    numbers = [from_json_number(v) for v in values]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers):
        raise NotNumbersError("the logged sample of a float tensor holds values that are not numbers")
    return numbers


def _stats_over(logged: dict[str, Any] | None, replayed: dict[str, Any] | None, tolerance: Tolerance) -> str:
    """Which whole-tensor statistics differ beyond ``tolerance`` ('' when none do, or none are logged)."""
    if not logged or not replayed:
        return ""
    differing = [key for key in ("nan", "inf") if logged.get(key) != replayed.get(key)]
    for key in ("min", "max", "mean"):
        before, after = logged.get(key), replayed.get(key)
        if (before is None) != (after is None):
            differing.append(key)
        elif before is not None and not np.isclose(float(from_json_number(after)), float(from_json_number(before)),
                                                    atol=tolerance.atol, rtol=tolerance.rtol, equal_nan=True):
            differing.append(f"{key} logged {before}, replayed {after}")
    return "; ".join(differing)


__all__ = ["IDENTICAL", "NOT_JUDGED", "OVER", "WITHIN", "OutputVerdict", "judge_steps", "judge_value"]
