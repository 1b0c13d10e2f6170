"""Replay: re-execute a logged run on the reference backend and compare every step's digests.

The log is verified first (a log whose chain is broken is not replayed). The model and the inputs
are then run again, with the numerics the log records (portable, docs/numerics.md, unless the log
says native or predates portable numerics), with an in-memory recorder taking the same sample size,
and the two logs are compared step by step. The outcome is either bit-identical (every output
digest of every step and of the graph outputs agrees) or the first step whose output differs, with
the numeric difference the logged samples show. A replay of another model or with other inputs
than the logged ones still runs and shows where the runs part, but it is not a replay of the log:
it fails.

A log of native numerics is bit-identical only on a host like the one that recorded it (the same
CPU kernels, BLAS and NumPy). Replayed elsewhere, the report says so plainly, names the facts that
differ, and gives each differing step's largest difference in ulps over the logged samples and
whether it is within the parity tolerances, rather than a bare "differs".

A log made on another backend or device than the replay's (ONNX Runtime, torch, a GPU; replayed on
the reference, or the other way round) cannot be bit-identical: its replay is a cross-backend
comparison, judged step by step with the parity tolerances over what the log holds of each value
(sealtrace.audit.replay_across says what that establishes and what it cannot). It passes when every
step is within them, and names the drift origin otherwise.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sealtrace.audit.errors import AuditCheckError
from sealtrace.audit.host import host_facts
from sealtrace.audit.linkage import logged_model_digest
from sealtrace.audit.log import read_lines
from sealtrace.audit.recorder import AuditRecorder
from sealtrace.audit.records import from_json_number, value_digest
from sealtrace.audit.replay_across import NOT_JUDGED, OVER, WITHIN, OutputVerdict, judge_steps
from sealtrace.audit.run import audited_run
from sealtrace.audit.verify import verify_lines
from sealtrace.errors import InputError
from sealtrace.ops.numerics import SPEC_VERSION
from sealtrace.parity.metrics import ulp_distance
from sealtrace.parity.tolerance import ToleranceTable, within
from sealtrace.session import Session


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


@dataclass(frozen=True)
class StepDeviation:
    """How far a replayed step output is from the logged one, over the logged sample."""

    line: int
    where: str
    op_type: str
    output: str
    max_ulps: int | None  # None: no float sample to compare
    within_tolerance: bool | None  # under the parity tolerances (docs/parity.md); None: no sample


# The host facts on which the bits of native numerics depend.
_NATIVE_FACTS = (
    ("CPU", ("cpu", "model")),
    ("CPU features", ("cpu", "flags")),
    ("machine", ("cpu", "machine")),
    ("NumPy", ("numpy",)),
    ("BLAS", ("blas",)),
)


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
    # The numerics the log records: "portable", or "native" (also for logs that predate the field).
    numerics: str = "portable"
    # For a native log: why its bits need not be reproduced here (the host facts that differ from
    # the recording host's, an earlier sealtrace); bit-identity is not expected when there are any.
    host_differences: list[str] = field(default_factory=list)
    deviations: list[StepDeviation] = field(default_factory=list)
    # Set for a replay on another backend or device than the log's: (logged, replayed), each as
    # 'backend on device'. The replay is then judged by tolerance (``verdicts``), not bit-identity.
    across: tuple[str, str] | None = None
    tolerances: ToleranceTable = field(default_factory=ToleranceTable)
    verdicts: list[OutputVerdict] = field(default_factory=list)

    @property
    def over_tolerance(self) -> list[OutputVerdict]:
        """Cross-backend: the step outputs over the parity tolerances, in Plan order."""
        return [v for v in self.verdicts if v.status == OVER]

    @property
    def bit_identity_expected(self) -> bool:
        """False for a log of native numerics replayed on a host whose recorded facts differ."""
        return self.numerics == "portable" or not self.host_differences

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
        """True when the logged model ran on the logged inputs and every digest is bit-identical;
        across backends, when every step is within the parity tolerances instead."""
        if self.across is not None:
            return (not self.over_tolerance and self.structure_difference is None and not self.not_logged
                    and self.steps_logged == self.steps_replayed)  # fmt: skip
        return self.identical and not self.not_logged

    def summary(self) -> str:
        if self.across is not None:
            return self.across_summary()
        if self.identical:
            text = f"bit-identical: {self.steps_replayed} step(s) and every graph output match the log"
            if self.not_logged:
                text += f", but the replay ran {' and '.join(self.not_logged)} other than the logged one"
            return text
        if self.first_difference is not None:
            text = (
                f"differs: first at {self.first_difference.describe()} "
                f"({self.steps_differing} of {self.steps_logged} step(s) differ)"
            )
            if not self.bit_identity_expected:
                text = f"{self.host_note()}; {text}; {self.deviation_summary()}"
            return text
        if self.structure_difference is not None:
            return f"differs: {self.structure_difference}"
        return f"differs: graph output(s) {', '.join(map(repr, self.outputs_differing))}"

    def across_summary(self) -> str:
        """The cross-backend verdict: said to be one, with the counts and the drift origin."""
        assert self.across is not None
        default = self.tolerances.default
        text = (
            f"cross-backend comparison, not a bit-identical replay (logged on {self.across[0]}, replayed on "
            f"{self.across[1]}; parity tolerances atol {default.atol:g} rtol {default.rtol:g}, over the logged "
            f"samples and statistics): "
        )
        if self.structure_difference is not None:
            return text + f"differs: {self.structure_difference}"
        counts = {status: sum(1 for v in self.verdicts if v.status == status) for status in (WITHIN, OVER, NOT_JUDGED)}
        identical = len(self.verdicts) - sum(counts.values())
        text += (
            f"{self.steps_replayed} step(s), {len(self.verdicts)} output(s): {identical} identical, "
            f"{counts[WITHIN]} within tolerance, {counts[OVER]} over"
        )
        if counts[NOT_JUDGED]:
            text += f", {counts[NOT_JUDGED]} not judged (sequences or maps: no numbers logged)"
        over = self.over_tolerance
        if over:
            born = [v for v in over if v.origin == "born-here"]
            text += f"; drift origin {over[0].describe()} ({over[0].origin})"
            if born and born[0] is not over[0]:
                text += f"; first born at {born[0].describe()}"
        return text

    def host_note(self) -> str:
        """Why bit-identity is not expected (a native log replayed on another host)."""
        return "recorded with native numerics (" + "; ".join(self.host_differences) + "), so bit-identity is not expected"

    def deviation_summary(self) -> str:
        """The differing steps' largest difference in ulps and the parity-tolerance verdict."""
        measured = [d for d in self.deviations if d.max_ulps is not None]
        if not measured:
            return "no logged sample to measure the differences with (record with --sample N)"
        worst = max(measured, key=lambda d: d.max_ulps or 0)
        outside = [d for d in measured if d.within_tolerance is False]
        text = f"largest difference {worst.max_ulps} ulp(s), at line {worst.line} ({worst.where}, {worst.op_type})"
        if outside:
            first = outside[0]
            return text + (
                f"; {len(outside)} step(s) outside the parity tolerances, first at line {first.line} "
                f"({first.where}, {first.op_type})"
            )
        unmeasured = len(self.deviations) - len(measured)
        text += "; every sampled step within the parity tolerances"
        return text + (f" ({unmeasured} differing step(s) without a float sample)" if unmeasured else "")

    def raise_if_different(self) -> None:
        """Raise :class:`AuditCheckError` (CLI exit 1) unless the replay is bit-identical and ran
        the logged model on the logged inputs."""
        if not self.passed:
            line = self.first_difference.line if self.first_difference is not None else None
            if self.across is not None:
                line = self.over_tolerance[0].line if self.over_tolerance else None
            other = (
                f" (the replay ran {' and '.join(self.not_logged)} other than the logged one)"
                if self.not_logged and not self.identical else ""
            )  # fmt: skip
            raise AuditCheckError(f"replay of {self.log} {self.summary()}{other}", line)


def replay_log(
    log: str | os.PathLike[str],
    model: str | os.PathLike[str],
    inputs: Mapping[str, Any] | None = None,
    *,
    backend: str = "reference",
    device: str | None = None,
    gpu_precision: str | None = None,
    tolerances: ToleranceTable | None = None,
    **session_options: Any,
) -> ReplayReport:
    """Re-run the logged run of ``model`` (container or ONNX file) on ``backend`` (and ``device``).

    ``inputs`` default to the logged ones where the log's sample holds a whole input. A model or
    input other than the logged one is noted and the replay goes on, so that the comparison shows
    where the runs part; the report then does not pass (``not_logged`` names what differs).
    On the log's own backend and device the replay must be bit-identical; on another it is judged
    with ``tolerances`` (default: parity's), see the module docstring.
    ``session_options`` go to :class:`sealtrace.session.Session` (trust=...). Trusted keys
    (``trust=``) apply to the log as well as to the model: a log not signed by one of them is refused,
    as ``--trust`` means everywhere.
    """
    from sealtrace.backends import make_backend
    from sealtrace.backends.reference import ReferenceBackend

    trust = session_options.get("trust")
    verification = verify_lines(read_lines(log), str(log), trust=trust or None)
    verification.raise_if_failed()
    header, footer = verification.records[0], verification.records[-1]
    report = ReplayReport(str(log))
    logged_backend = header["backend"]
    engine = make_backend(backend, device=device, gpu_precision=gpu_precision)
    if logged_backend["name"] == "reference" and isinstance(engine, ReferenceBackend):
        recorded = logged_backend.get("numerics")
        report.numerics = recorded["mode"] if recorded is not None else "native"
        if report.numerics == "native":
            if recorded is None:
                report.host_differences.append("by an earlier sealtrace, whose kernels rounded differently")
            report.host_differences.extend(host_differences(header.get("host") or {}, host_facts()))
            # native logs were recorded with the BLAS on one thread (the reference's default then)
            engine = ReferenceBackend(threads=1, numerics="native")
        elif recorded["spec"] != SPEC_VERSION:
            report.notes.append(
                f"the log was recorded with numerics specification {recorded['spec']}, this sealtrace "
                f"implements {SPEC_VERSION}"
            )
    logged_on, replayed_on = ran_on(logged_backend), ran_on(_backend_record(engine))
    if logged_on != replayed_on:
        report.across = (logged_on, replayed_on)
        report.tolerances = tolerances or ToleranceTable()
    session = Session(model, backend=engine, **session_options)
    report.model_origin = session.origin
    _note_linkage(report, header, session)
    algorithm = verification.digest_algorithm
    feeds = _replay_feeds(header, dict(inputs or {}), report, algorithm)
    # Re-recorded with the logged digest algorithm, so that digests compare with digests.
    recorder = AuditRecorder(None, sample=int(header["sample_size"]), origin=session.origin, digest=algorithm)
    audited_run(session, feeds, audit=recorder)
    report.replayed_records = recorder.records
    _compare(report, verification.records, recorder.records)
    if report.across is not None:
        logged_steps = [(i + 1, r) for i, r in enumerate(verification.records) if r["type"] == "step"]
        replayed_steps = [r for r in recorder.records if r["type"] == "step"]
        report.verdicts = judge_steps(logged_steps, replayed_steps, report.tolerances)
    else:
        _compare_outputs(report, footer, recorder.records[-1])
    return report


def ran_on(backend: Mapping[str, Any]) -> str:
    """'NAME on DEVICE' (with a GPU's precision) from a header's backend record: what decides the bits."""
    device = backend.get("device") or {}
    precision = f" ({device['precision']})" if device.get("precision") else ""
    return f"{backend['name']} on {device.get('name', 'cpu')}{precision}"


def _backend_record(backend: Any) -> dict[str, Any]:
    device = getattr(backend, "device_info", None)
    return {"name": backend.name, **({"device": device} if device is not None else {})}


def host_differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The facts native numerics depend on that differ between the recording host and this one."""
    differing = []
    for label, path in _NATIVE_FACTS:
        before: Any = recorded
        after: Any = current
        for key in path:
            before = before.get(key) if isinstance(before, dict) else None
            after = after.get(key) if isinstance(after, dict) else None
        if before != after:
            if isinstance(before, str) and isinstance(after, str):
                differing.append(f"{label} {before} -> {after}")
            else:
                differing.append(f"{label} differ")
    return differing


def _note_linkage(report: ReplayReport, header: dict[str, Any], session: Session) -> None:
    logged = logged_model_digest(header["model"])
    origin = session.origin
    actual: tuple[str, str | None]
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
            report.deviations.extend(_deviations(line, old, new))
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


def _deviations(line: int, old: dict[str, Any], new: dict[str, Any]) -> list[StepDeviation]:
    """Each differing output's largest ulp distance and tolerance verdict over the logged sample."""
    tolerances = ToleranceTable()
    where = "/".join((*old["path"], old["name"]))
    found = []
    for before, after in zip(old["outputs"], new["outputs"], strict=False):
        if before["digest"] == after["digest"]:
            continue
        pair = _float_samples(before, after)
        if pair is None:
            found.append(StepDeviation(line, where, old["op_type"], before["name"], None, None))
            continue
        x, y = pair
        ulps = ulp_distance(x, y)
        ok = within(y.astype(np.float64), x.astype(np.float64), tolerances.for_value(old["op_type"], before["name"]))
        found.append(StepDeviation(line, where, old["op_type"], before["name"], ulps, ok))
    return found


def _float_samples(logged: dict[str, Any], replayed: dict[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """The logged and replayed samples of one float tensor output, in its dtype (None: none to compare)."""
    if logged.get("kind") != "tensor" or replayed.get("kind") != "tensor" or logged["dtype"] != replayed["dtype"]:
        return None
    try:
        dtype = np.dtype(logged["dtype"])
    except TypeError:
        return None
    if dtype.kind != "f":
        return None
    a, b = logged.get("sample") or [], replayed.get("sample") or []
    n = min(len(a), len(b))
    if n == 0:
        return None
    try:
        x = np.array([from_json_number(v) for v in a[:n]], dtype=np.float64).astype(dtype)
        y = np.array([from_json_number(v) for v in b[:n]], dtype=np.float64).astype(dtype)
    except (TypeError, ValueError):
        return None
    return x, y


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
