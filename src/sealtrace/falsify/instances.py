"""VNN-COMP instance lists: read ``network,property,timeout[,expected]`` rows, falsify each, tabulate.

Paths in the file are relative to the file's folder (as in the VNN-COMP repositories). A header row
is recognised by its timeout column not being a number. A fourth column (``sat``/``unsat``, as in a
ground-truth file) lets the summary count wrong answers: ``sat`` reported where the truth is ``unsat``.
"""

from __future__ import annotations

import csv
import io
import os
import platform
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sealtrace.errors import InputError, SealtraceError
from sealtrace.falsify.errors import PropertyReadTimeoutError
from sealtrace.falsify.falsifier import falsify
from sealtrace.falsify.search import SearchSettings
from sealtrace.falsify.vnnlib import load_vnnlib, read_text_input
from sealtrace.outputs import atomic_output


@dataclass(frozen=True)
class Instance:
    """One benchmark instance: a network, a property, its time limit, and the expected answer if known."""

    network: Path
    vnnlib: Path
    timeout_s: float
    expected: str | None = None

    @property
    def name(self) -> str:
        return f"{self.network.stem} {self.vnnlib.stem}"


@dataclass(frozen=True)
class InstanceResult:
    """The outcome of one instance: 'sat', 'unknown' or 'error' (with ``error``), and how long it took."""

    instance: Instance
    result: str
    time_s: float
    certified: bool
    budget_s: float
    time_to_counterexample_s: float | None = None
    run_digest: str | None = None
    rejected: int = 0
    error: str | None = None
    error_exit_code: int | None = None  # the error's CLI exit code: 2 bad input, 1 a failed check
    counterexample: tuple[float, ...] | None = None  # the certified input, flat, as run

    @property
    def wrong(self) -> bool:
        """Reported sat where the expected answer is unsat (a falsifier's only possible wrong answer)."""
        return self.result == "sat" and self.instance.expected == "unsat"

    def to_row(self) -> dict[str, Any]:
        return {
            "instance": self.instance.name,
            "network": self.instance.network.name,
            "property": self.instance.vnnlib.name,
            "result": self.result,
            "time_s": f"{self.time_s:.3f}",
            "certified": "yes" if self.certified else "no",
            "expected": self.instance.expected or "",
            "budget_s": f"{self.budget_s:g}",
            "audit_run_digest": self.run_digest or "",
            "rejected": self.rejected,
            "error": self.error or "",
        }


def read_instances(path: str | os.PathLike[str]) -> list[Instance]:
    """The instances of a VNN-COMP CSV (``network,property,timeout`` and optionally ``expected``)."""
    path = Path(path)
    text = read_text_input(path, "VNN-COMP instances file")
    base = path.parent
    instances = []
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        cells = [c.strip() for c in row]
        if not cells or not any(cells):
            continue
        if len(cells) < 3:
            raise InputError(f"{path}:{number}: expected network,property,timeout[,expected], got {row}")
        try:
            timeout = float(cells[2])
        except ValueError:
            if number == 1:
                continue  # a header row
            raise InputError(f"{path}:{number}: timeout {cells[2]!r} is not a number") from None
        expected = cells[3].lower() if len(cells) > 3 and cells[3] else None
        if expected is not None and expected not in ("sat", "unsat", "unknown", "violated", "holds"):
            raise InputError(f"{path}:{number}: expected answer {cells[3]!r} is not sat or unsat")
        expected = {"violated": "sat", "holds": "unsat"}.get(expected or "", expected)
        instances.append(Instance(base / cells[0], base / cells[1], timeout, expected))
    if not instances:
        raise InputError(f"{path}: no instances")
    return instances


def run_instances(
    instances: Sequence[Instance],
    *,
    timeout_s: float | None = None,
    settings: SearchSettings | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    on_start: Callable[[Instance], None] | None = None,
    on_result: Callable[[InstanceResult], None] | None = None,
) -> list[InstanceResult]:
    """Falsify every instance; ``timeout_s`` caps each instance's own limit. Errors are recorded, not raised."""
    results = []
    for instance in instances:
        if on_start is not None:
            on_start(instance)
        result = run_instance(instance, timeout_s=timeout_s, settings=settings, cache_dir=cache_dir)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def run_instance(
    instance: Instance,
    *,
    timeout_s: float | None = None,
    settings: SearchSettings | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> InstanceResult:
    """Falsify one instance (its counterexample certified here); an error is the result, not raised.
    What :func:`run_instances` does for each, and a cluster's task for one (sealtrace.scale.sweep)."""
    import time

    base = settings or SearchSettings()
    budget = instance.timeout_s if timeout_s is None else min(instance.timeout_s, timeout_s)
    started = time.perf_counter()
    # The instance's time limit covers reading its property, as VNN-COMP's covers everything.
    deadline = started + budget
    try:
        prop = load_vnnlib(instance.vnnlib, deadline=deadline)
        run_settings = SearchSettings(**{**base.__dict__, "timeout_s": budget})
        outcome = falsify(instance.network, prop, run_settings, cache_dir=cache_dir, deadline=deadline)
        cex = outcome.counterexample
        return InstanceResult(
            instance, outcome.status, time.perf_counter() - started, outcome.certified, budget,
            outcome.time_to_counterexample_s, cex.run_digest if cex else None, outcome.rejected_count,
            counterexample=tuple(float(v) for v in cex.x) if cex is not None and outcome.certified else None,
        )
    except PropertyReadTimeoutError:
        return InstanceResult(instance, "unknown", time.perf_counter() - started, False, budget)
    except SealtraceError as exc:
        return InstanceResult(instance, "error", time.perf_counter() - started, False, budget,
                              error=str(exc), error_exit_code=exc.exit_code)


@dataclass(frozen=True)
class BenchSummary:
    """Totals of a benchmark run (times are in-process wall seconds per instance, start-up excluded)."""

    instances: int
    sat: int
    certified: int
    wrong: int
    errors: int
    expected_sat: int | None
    median_sat_s: float | None
    max_sat_s: float | None
    mean_sat_s: float | None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def summarize(results: Sequence[InstanceResult]) -> BenchSummary:
    """Counts and times to a certified counterexample."""
    sat_times = [r.time_s for r in results if r.result == "sat" and r.certified]
    known = [r for r in results if r.instance.expected is not None]
    return BenchSummary(
        instances=len(results),
        sat=sum(r.result == "sat" for r in results),
        certified=sum(r.certified for r in results),
        wrong=sum(r.wrong for r in results),
        errors=sum(r.result == "error" for r in results),
        expected_sat=sum(r.instance.expected == "sat" for r in known) if known else None,
        median_sat_s=statistics.median(sat_times) if sat_times else None,
        max_sat_s=max(sat_times) if sat_times else None,
        mean_sat_s=statistics.fmean(sat_times) if sat_times else None,
    )


def machine_line() -> str:
    """The machine the numbers come from, in one line."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return f"{model}, {cpus} CPU(s) usable, Python {platform.python_version()}, torch {torch.__version__}"


def write_csv(results: Sequence[InstanceResult], path: str | os.PathLike[str], *, force: bool = False) -> None:
    """One row per instance (see :meth:`InstanceResult.to_row`); written whole, an existing file kept
    unless ``force``."""
    rows = [r.to_row() for r in results]
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=list(rows[0]) if rows else ["instance"])
    writer.writeheader()
    writer.writerows(rows)
    with atomic_output(path, force) as f:
        f.write(text.getvalue().encode("utf-8"))


def markdown_table(results: Sequence[InstanceResult]) -> str:
    """The per-instance table in Markdown: instance, result, time, certified (and expected, and the
    error, when there are any)."""
    with_expected = any(r.instance.expected for r in results)
    with_errors = any(r.error for r in results)
    header = (["instance", "result", "time (s)", "certified"] + (["expected"] if with_expected else [])
              + (["error"] if with_errors else []))
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in results:
        cells = [r.instance.name, r.result if not r.wrong else f"**{r.result} (WRONG)**", f"{r.time_s:.2f}",
                 "yes" if r.certified else "no"]
        if with_expected:
            cells.append(r.instance.expected or "")
        if with_errors:
            cells.append(" ".join((r.error or "").split()).replace("|", "\\|"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
