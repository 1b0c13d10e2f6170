"""Replay: re-execute a logged run on the reference backend and compare every step's digests.

The log is verified first (a log whose chain is broken is not replayed). The model and the inputs
are then run again with an in-memory recorder taking the same sample size, and the two logs are
compared step by step. The outcome is either bit-identical (every output digest of every step and
of the graph outputs agrees) or the first step whose output differs, with the numeric difference
the logged samples show. A replay of another model or with other inputs than the logged ones still
runs and shows where the runs part, but it is not a replay of the log: it fails.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sealtrace.audit.errors import AuditCheckError
from sealtrace.audit.linkage import logged_model_digest
from sealtrace.audit.log import read_lines
from sealtrace.audit.recorder import AuditRecorder
from sealtrace.audit.records import from_json_number, value_digest
from sealtrace.audit.verify import verify_lines
from sealtrace.errors import InputError


@dataclass(frozen=True)
class StepDifference:
    """The first step whose replayed output differs from the log."""

    line: int  # 1-based line of the step in the log
    seq: int
    path: tuple[str, ...]
    name: str
    op_type: str
    output: str
    logged_digest: str | None
    replayed_digest: str | None
    detail: str  # what differs, numerically where the samples allow
    differing_inputs: tuple[str, ...] = ()  # inputs whose digests differ too (a changed weight)

    def describe(self) -> str:
        where = "/".join((*self.path, self.name))
        text = f"line {self.line}: step {where!r} ({self.op_type}), output {self.output!r}: {self.detail}"
        if self.differing_inputs:
            text += f"; its input(s) {', '.join(map(repr, self.differing_inputs))} differ too"
        return text


@dataclass
class ReplayReport:
    """The outcome of :func:`replay_log`."""

    log: str
    steps_logged: int = 0
    steps_replayed: int = 0
    steps_differing: int = 0
    first_difference: StepDifference | None = None
    structure_difference: str | None = None  # the replay ran other steps than the log lists
    outputs_differing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    not_logged: list[str] = field(default_factory=list)  # what the replay ran that the log does not name
    replayed_records: list[dict[str, Any]] = field(default_factory=list, repr=False)
    model_origin: Any = field(default=None, repr=False)  # the replayed Session's ModelOrigin

    @property
    def identical(self) -> bool:
        """True when every step and graph output of the replay is bit-identical to the log."""
        return (
            self.first_difference is None
            and self.structure_difference is None
            and not self.outputs_differing
            and self.steps_logged == self.steps_replayed
        )

    @property
    def passed(self) -> bool:
        """True when the logged model ran on the logged inputs and every digest is bit-identical."""
        return self.identical and not self.not_logged

    def summary(self) -> str:
        if self.identical:
            text = f"bit-identical: {self.steps_replayed} step(s) and every graph output match the log"
            if self.not_logged:
                text += f", but the replay ran {' and '.join(self.not_logged)} other than the logged one"
            return text
        if self.first_difference is not None:
            return (
                f"differs: first at {self.first_difference.describe()} "
                f"({self.steps_differing} of {self.steps_logged} step(s) differ)"
            )
        if self.structure_difference is not None:
            return f"differs: {self.structure_difference}"
        return f"differs: graph output(s) {', '.join(map(repr, self.outputs_differing))}"

    def raise_if_different(self) -> None:
        """Raise :class:`AuditCheckError` (CLI exit 1) unless the replay is bit-identical and ran
        the logged model on the logged inputs."""
        if not self.passed:
            line = self.first_difference.line if self.first_difference is not None else None
            other = (
                f" (the replay ran {' and '.join(self.not_logged)} other than the logged one)"
                if self.not_logged and not self.identical else ""
            )  # fmt: skip
            raise AuditCheckError(f"replay of {self.log} {self.summary()}{other}", line)


def replay_log(
    log: str | os.PathLike[str],
    model: str | os.PathLike[str],
    inputs: Mapping[str, Any] | None = None,
    **session_options: Any,
) -> ReplayReport:
    """Re-run the logged run of ``model`` (container or ONNX file) on the reference backend.

    ``inputs`` default to the logged ones where the log's sample holds a whole input. A model or
    input other than the logged one is noted and the replay goes on, so that the comparison shows
    where the runs part; the report then does not pass (``not_logged`` names what differs).
    ``session_options`` go to :class:`sealtrace.session.Session` (trust=...). Trusted keys
    (``trust=``) apply to the log as well as to the model: a log not signed by one of them is refused,
    as ``--trust`` means everywhere.
    """
    from sealtrace.session import Session

    trust = session_options.get("trust")
    verification = verify_lines(read_lines(log), str(log), trust=trust or None)
    verification.raise_if_failed()
    header, footer = verification.records[0], verification.records[-1]
    report = ReplayReport(str(log))
    session = Session(model, backend="reference", **session_options)
    report.model_origin = session.origin
    _note_linkage(report, header, session)
    algorithm = verification.digest_algorithm
    feeds = _replay_feeds(header, dict(inputs or {}), report, algorithm)
    # Re-recorded with the logged digest algorithm, so that digests compare with digests.
    recorder = AuditRecorder(None, sample=int(header["sample_size"]), origin=session.origin, digest=algorithm)
    session.run(None, feeds, audit=recorder)
    report.replayed_records = recorder.records
    _compare(report, verification.records, recorder.records)
    _compare_outputs(report, footer, recorder.records[-1])
    return report


def _note_linkage(report: ReplayReport, header: dict[str, Any], session: Any) -> None:
    logged = logged_model_digest(header["model"])
    origin = session.origin
    if origin.kind == "container" and origin.container_digest:
        actual = ("container", origin.container_digest)
    else:
        actual = ("onnx", origin.sha256)
    same_plan = header["plan_digest"] == session.plan.digest
    if logged is None or (logged.kind, logged.digest) != actual:
        what = logged.describe() if logged is not None else "no model digest"
        report.notes.append(f"the log names {what}; the replayed model has {actual[0]} digest {actual[1]}")
        # A log that names no model digest (a run of a Plan object) is linked by its Plan digest.
        if logged is not None or not same_plan:
            report.not_logged.append("a model")
    if not same_plan:
        report.notes.append(
            f"the Plan differs from the logged one (plan digest {session.plan.digest[:16]}, logged "
            f"{header['plan_digest'][:16]})"
        )


def _replay_feeds(
    header: dict[str, Any], given: dict[str, Any], report: ReplayReport, algorithm: str
) -> dict[str, Any]:
    feeds: dict[str, Any] = {}
    for entry in header["inputs"]:
        name = entry["name"]
        if name in given:
            value = given.pop(name)
            logged = entry["digest"]
            if value_digest(value if isinstance(value, (list, Mapping)) else np.asarray(value), algorithm) != logged:
                report.notes.append(f"input {name!r} is not the logged input (its digest differs)")
                report.not_logged.append(f"input {name!r}")
            feeds[name] = value
            continue
        rebuilt = _from_sample(entry, algorithm)
        if rebuilt is None:
            raise InputError(
                f"input {name!r}: the log's sample does not hold the whole tensor; give it with --input"
            )
        feeds[name] = rebuilt
    if given:
        raise InputError(f"input(s) {', '.join(map(repr, given))} are not inputs of the logged run")
    return feeds


def _from_sample(entry: dict[str, Any], algorithm: str) -> np.ndarray | None:
    """The logged input rebuilt from its sample when the sample is the whole tensor, checked by digest."""
    if entry.get("kind") != "tensor" or entry["dtype"] == "str":
        return None
    shape = tuple(entry["shape"])
    # Python integers: a crafted shape cannot overflow into matching the sample's length.
    if len(entry["sample"]) != math.prod(shape):
        return None
    try:
        array = np.array([from_json_number(v) for v in entry["sample"]], dtype=np.dtype(entry["dtype"]))
    except (TypeError, ValueError):
        return None
    array = array.reshape(shape)
    return array if value_digest(array, algorithm) == entry["digest"] else None


def _step_key(record: dict[str, Any]) -> tuple[Any, ...]:
    return (tuple(record["path"]), record["name"], record["op_type"])


def _compare(report: ReplayReport, logged: list[dict[str, Any]], replayed: list[dict[str, Any]]) -> None:
    logged_steps = [(i + 1, r) for i, r in enumerate(logged) if r["type"] == "step"]
    replayed_steps = [r for r in replayed if r["type"] == "step"]
    report.steps_logged = len(logged_steps)
    report.steps_replayed = len(replayed_steps)
    for (line, old), new in zip(logged_steps, replayed_steps, strict=False):
        if _step_key(old) != _step_key(new):
            if report.structure_difference is None:
                report.structure_difference = (
                    f"line {line}: the log lists step {'/'.join((*old['path'], old['name']))!r} ({old['op_type']}), "
                    f"the replay ran {'/'.join((*new['path'], new['name']))!r} ({new['op_type']})"
                )
            break
        difference = _output_difference(line, old, new)
        if difference is not None:
            report.steps_differing += 1
            if report.first_difference is None:
                report.first_difference = difference
    if report.structure_difference is None and report.steps_logged != report.steps_replayed:
        report.structure_difference = (
            f"the log lists {report.steps_logged} step(s), the replay ran {report.steps_replayed}"
        )


def _output_difference(line: int, old: dict[str, Any], new: dict[str, Any]) -> StepDifference | None:
    for before, after in zip(old["outputs"], new["outputs"], strict=False):
        if before["digest"] == after["digest"]:
            continue
        differing_inputs = tuple(
            a["name"]
            for a, b in zip(old["inputs"], new["inputs"], strict=False)
            if a["name"] and a["digest"] != b["digest"]
        )
        return StepDifference(
            line=line,
            seq=old["seq"],
            path=tuple(old["path"]),
            name=old["name"],
            op_type=old["op_type"],
            output=before["name"],
            logged_digest=before["digest"],
            replayed_digest=after["digest"],
            detail=numeric_difference(before, after),
            differing_inputs=differing_inputs,
        )
    if len(old["outputs"]) != len(new["outputs"]):
        return StepDifference(
            line, old["seq"], tuple(old["path"]), old["name"], old["op_type"], "", None, None,
            f"the log lists {len(old['outputs'])} output(s), the replay produced {len(new['outputs'])}",
        )
    return None


def numeric_difference(logged: dict[str, Any], replayed: dict[str, Any]) -> str:
    """Describe how two summaries of one value differ, numerically where their samples allow."""
    if logged.get("kind") != replayed.get("kind"):
        return f"logged a {logged.get('kind')}, replayed a {replayed.get('kind')}"
    if logged.get("kind") != "tensor":
        return "digests differ"
    if logged["dtype"] != replayed["dtype"] or logged["shape"] != replayed["shape"]:
        return (
            f"logged {logged['dtype']}{logged['shape']}, replayed {replayed['dtype']}{replayed['shape']}"
        )
    a, b = logged.get("sample") or [], replayed.get("sample") or []
    n = min(len(a), len(b))
    text = "digests differ"
    try:
        x = np.array([from_json_number(v) for v in a[:n]], dtype=np.float64)
        y = np.array([from_json_number(v) for v in b[:n]], dtype=np.float64)
    except (TypeError, ValueError):
        return text
    if n == 0:
        return f"{text} (no sample logged)"
    differs = ~((x == y) | (np.isnan(x) & np.isnan(y)))
    if not differs.any():
        text += f"; the first {n} value(s) agree, the difference lies beyond the logged sample"
    else:
        first = int(np.argmax(differs))
        with np.errstate(invalid="ignore"):
            delta = np.abs(x - y)[differs]
        text += (
            f"; value [{first}] logged {float(x[first])!r}, replayed {float(y[first])!r}; "
            f"max |difference| over the {n} sampled value(s) {float(np.nanmax(delta)) if delta.size else 0.0:.6g}"
        )
    old_stats, new_stats = logged.get("stats"), replayed.get("stats")
    if old_stats and new_stats and old_stats.get("mean") != new_stats.get("mean"):
        text += f"; mean logged {old_stats['mean']}, replayed {new_stats['mean']}"
    return text


def _compare_outputs(report: ReplayReport, logged_footer: dict[str, Any], replayed_footer: dict[str, Any]) -> None:
    replayed = {entry["name"]: entry["digest"] for entry in replayed_footer["outputs"]}
    for entry in logged_footer["outputs"]:
        if replayed.get(entry["name"]) != entry["digest"]:
            report.outputs_differing.append(entry["name"])


def compare_runs(logged: list[dict[str, Any]], replayed: list[dict[str, Any]], where: str = "<audit log>") -> ReplayReport:
    """Compare two runs' audit records (header, steps, footer; the logged ones verified) step by step,
    as :func:`replay_log` does: the first step whose outputs differ, and the graph outputs that do.
    What a ledger replay uses to say where a full-audit replay and the record's trail part."""
    report = ReplayReport(where)
    _compare(report, logged, replayed)
    if logged and replayed and logged[-1].get("type") == "footer" and replayed[-1].get("type") == "footer":
        _compare_outputs(report, logged[-1], replayed[-1])
    return report
