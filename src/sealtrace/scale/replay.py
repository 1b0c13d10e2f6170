"""``sealtrace ledger replay``: re-run stored requests and append replay records with parity verdicts.

For example after an ONNX Runtime upgrade: every inference record (from ``since`` on) whose model is
one of the given containers is re-run on its stored inputs on ``backend`` (the reference backend by
default, with the full per-op audit: its trail is stored beside the replay record), judged against
what the record says was answered (:func:`sealtrace.ledger.verdicts.judge`, the verdicts the server's
deferred replays give), and a replay record linked to it is appended (in the order of the records).

**Where runs part.** When the original record has a per-op trail (``--audit full``) and the replay
made one, the two are compared step by step (:func:`sealtrace.audit.replay.compare_runs`): the first
step whose outputs differ is named in the verdict's detail and in the summary of divergences by model
and step. An io-only record keeps no trail: the ledger only knows that the outputs differ, not where;
its divergences are listed under ``(io-only record: no trail)``; to find the step, run ``sealtrace
parity`` on its stored inputs (``ledger.inputs_of``) with the two backends.

**The served values.** A record keeps digests, not values. When the replay's outputs differ from them,
the tolerance comparison needs the served values: they are re-computed on the record's backend where
it is installed here (as the server does after a restart), noting when that no longer reproduces the
recorded digests (the upgrade changed them), and missing otherwise (verdict ``failed``: the digests
differ and nothing can say by how much).

Replay records are named like batch records: ``sha256("sealtrace.replay.record.v1", job id, record id)``,
the job being the replay backend and version, the tolerance and the containers. Replaying the same
records again is refused unless ``resume`` (then what is replayed is skipped): never twice.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sealtrace import __version__
from sealtrace.digest import canonical_json
from sealtrace.errors import InputError, SealtraceError
from sealtrace.ledger import Ledger, Trail
from sealtrace.ledger.verdicts import failed_record, judge, replay_record, reproduces
from sealtrace.parity.tolerance import Tolerance
from sealtrace.scale.cluster import Executor, worker_name
from sealtrace.scale.errors import JobError, JobInterrupted
from sealtrace.scale.ordered import Appended, Outcome, append_in_order
from sealtrace.scale.shipped import ShippedModel, ship_model

REPLAY_FORMAT = "sealtrace.replay.job.v1"
_TIME_PREFIX = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}(:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?)?Z?)?")
RECORD_ID_TAG = b"sealtrace.replay.record.v1"
NO_TRAIL = "(io-only record: no trail)"
DEFAULT_TASK_SIZE = 8


def replay_record_id(job_id: str, record_id: str) -> str:
    """The id of the replay record of ``record_id`` made by replay job ``job_id``."""
    return hashlib.sha256(RECORD_ID_TAG + b"\0" + job_id.encode("ascii") + b"\0" + record_id.encode("ascii")).hexdigest()[:32]


@dataclass
class ReplayItem:
    """One record to replay: its inputs (read from the ledger by the driver) and its trail if stored."""

    position: int
    record: dict[str, Any]
    feeds: dict[str, Any] | None
    trail: bytes | None
    error: str | None = None  # the inputs could not be read: the replay record says so


@dataclass
class ReplayTask:
    job_id: str
    tolerance: Tolerance
    sample: int
    items: list[ReplayItem]


@dataclass
class ModelPair:
    """A container opened twice: on the replay backend, and on a record's backend (the served values)."""

    replay: ShippedModel
    served: dict[str, ShippedModel] = field(default_factory=dict)  # backend name -> model


@dataclass
class ReplayOutcome(Outcome):
    verdict: str = "failed"
    model: str = ""
    step: str | None = None  # where the runs part (full-audit records), or NO_TRAIL
    original: str = ""  # the replayed record's id


def run_replay_task(models: dict[str, ModelPair], task: ReplayTask) -> list[ReplayOutcome]:
    """Replay every item of ``task`` (a worker's whole job; the same function in this process and on Ray)."""
    from sealtrace.limits import memory_budget_of

    where = worker_name()
    outcomes = []
    for item in task.items:
        record = item.record
        pair = models[_model_key(record)]
        record_id = replay_record_id(task.job_id, record["id"])
        model = record["model"]["name"]
        try:
            if item.feeds is None:
                raise InputError(f"inputs not available: {item.error}")
            with memory_budget_of(pair.replay.memory_budget):
                replayed, trail, verdict, step = _replay_one(pair, task, item, record_id)
            outcomes.append(ReplayOutcome(item.position, record["id"], replayed, trail, None, where, verdict, model,
                                          step, record["id"]))
        except SealtraceError as exc:
            failed = failed_record(record, f"replay failed: {exc}", record_id=record_id, backend=pair.replay.backend)
            outcomes.append(ReplayOutcome(item.position, record["id"], failed, None, str(exc), where, "failed",
                                          model, None, record["id"]))
    return outcomes


def _replay_one(pair: ModelPair, task: ReplayTask, item: ReplayItem,
                record_id: str) -> tuple[dict[str, Any], Trail | None, str, str | None]:
    record = item.record
    assert item.feeds is not None
    session = pair.replay.session()
    trail: Trail | None = None
    log: bytes | None = None
    if pair.replay.backend == "reference":
        from sealtrace.audit import logged_run

        logged = logged_run(session, item.feeds, sample=task.sample, hash_threads=0)
        outputs, log = logged.outputs, logged.log
        trail = Trail.of(log)
    else:
        outputs = dict(zip(session.plan.output_names, session.run(None, item.feeds), strict=True))
    served, note = _served(pair, record, item.feeds, outputs)
    verdict, detail = judge(outputs, served, record, task.tolerance)
    step = None
    if verdict != "identical":
        step = _parting_step(item.trail, log) if record["audit"] == "full" else NO_TRAIL
        if step is not None and step != NO_TRAIL:
            detail = f"{detail}; runs part at step {step}" if detail else f"runs part at step {step}"
    if note:
        detail = f"{note}; {detail}" if detail else note
    replayed = replay_record(
        record, plan_digest=session.plan.digest, container_digest=pair.replay.digest, backend=pair.replay.backend,
        backend_version=pair.replay.backend_version, inputs=item.feeds, outputs=outputs,
        audit="full" if trail is not None else "io", trail=trail.run_digest if trail else None, verdict=verdict,
        detail=detail, record_id=record_id,
    )
    return replayed, trail, verdict, step


def _served(pair: ModelPair, record: dict[str, Any], feeds: dict[str, Any],
            outputs: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The served values to compare with when the digests differ (see the module docstring)."""
    name, version = record["backend"]["name"], record["backend"]["version"]
    if reproduces(outputs, record):
        return outputs, None
    if name == pair.replay.backend:
        if version == pair.replay.backend_version:
            return None, f"{name} {version} gives other outputs than it recorded for the same inputs"
        return None, f"recorded by {name} {version}, replayed on {pair.replay.backend_version}: the recorded values cannot be re-computed"
    served_model = pair.served.get(name)
    if served_model is None:
        return None, f"{name} (the record's backend) is not available here: the served values cannot be re-computed"
    session = served_model.session()
    values = dict(zip(session.plan.output_names, session.run(None, feeds), strict=True))
    if reproduces(values, record):
        return values, None
    return values, (f"re-running {name} {served_model.backend_version} did not reproduce the recorded outputs' "
                    f"digests (recorded by {version})")


def _parting_step(original: bytes | None, replay: bytes | None) -> str | None:
    """Where the record's trail and the replay's part: the first step whose outputs differ."""
    if original is None or replay is None:
        return None
    from sealtrace.audit.log import parse_lines
    from sealtrace.audit.replay import compare_runs
    from sealtrace.audit.verify import verify_lines

    verification = verify_lines(parse_lines(original), "stored trail")
    if not verification.ok:
        return "(the stored trail does not verify)"
    replayed = [line.record for line in parse_lines(replay) if line.record is not None]
    report = compare_runs(verification.records, replayed)
    first = report.first_difference
    if first is not None:
        return "/".join((*first.path, first.name)) + f" ({first.op_type})"
    if report.structure_difference is not None:
        return f"(structure: {report.structure_difference[:200]})"
    return None


def _model_key(record: dict[str, Any]) -> str:
    return f"{record['model']['container_digest']}:{record['model']['plan_digest']}"


@dataclass
class ReplaySummary:
    """The outcome of a ledger replay."""

    job_id: str
    selected: int = 0  # inference records from ``since`` on
    replayed: int = 0  # replay records appended by this run
    skipped: int = 0  # already replayed by this job (--resume)
    unmatched: Counter[str] = field(default_factory=Counter)  # records of models not given, by model name
    verdicts: Counter[str] = field(default_factory=Counter)
    divergences: Counter[tuple[str, str]] = field(default_factory=Counter)  # (model, step) -> count
    failures: list[tuple[str, str]] = field(default_factory=list)  # (record id, why)
    seconds: float = 0.0
    where: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "selected": self.selected, "replayed": self.replayed, "skipped": self.skipped,
            "unmatched": dict(self.unmatched), "verdicts": dict(self.verdicts),
            "divergences": [{"model": m, "step": s, "count": n} for (m, s), n in sorted(self.divergences.items())],
            "failures": [{"record": r, "error": e} for r, e in self.failures[:100]],
            "seconds": round(self.seconds, 3), "where": self.where,
        }


@dataclass
class LedgerReplay:
    """Everything ``sealtrace ledger replay`` is told (docs/scale.md)."""

    ledger: str
    containers: tuple[str, ...]
    since: str | None = None  # a leaf index, or a time (records at or after it; a prefix such as 2025-01-31)
    backend: str = "reference"
    threads: int = 1
    tolerance: Tolerance = field(default_factory=Tolerance)
    trust: tuple[str, ...] = ()
    sign_key: str | None = None
    resume: bool = False
    task_size: int = DEFAULT_TASK_SIZE
    sample: int = 8


Progress = Callable[[int, int, int], None]  # (records replayed by this run, to replay, divergences)


def replay_ledger(job: LedgerReplay, executor: Executor, on_progress: Progress | None = None) -> ReplaySummary:
    """Replay the selected records of ``job.ledger`` on ``executor``; every replay record durable
    before this returns (interrupted: a prefix, which ``resume=True`` completes)."""
    started = time.monotonic()
    if not job.containers:
        raise InputError("ledger replay needs the containers of the recorded models (--container MODEL.seal)")
    signer = None
    if job.sign_key is not None:
        from sealtrace.signing import load_private_key

        signer = load_private_key(job.sign_key)
    models: dict[str, ModelPair] = {}
    for path in job.containers:
        shipped, session = ship_model(path, executor, backend=job.backend, threads=job.threads, trust=job.trust)
        key = f"{shipped.digest}:{session.plan.digest}"
        models[key] = ModelPair(shipped)
    job_id = hashlib.sha256(canonical_json({
        "format": REPLAY_FORMAT, "backend": {"name": job.backend, "version": next(iter(models.values())).replay.backend_version},
        # Canonical JSON holds no floats: the tolerances by their exact hex form.
        "tolerance": {"atol": float(job.tolerance.atol).hex(), "rtol": float(job.tolerance.rtol).hex()}, "containers": sorted(models), "sample": job.sample,
        "sealtrace_version": __version__,
    })).hexdigest()[:32]
    summary = ReplaySummary(job_id, where=executor.description)
    Ledger.open(job.ledger, readonly=True).close()  # a ledger there already: replay creates none
    ledger = Ledger.open(job.ledger, signer=signer)
    try:
        selected = _select(ledger, job.since, models, summary)
        for pair in models.values():  # only the backends the selected records name are opened
            pair.served = _served_models(pair.replay, {r["backend"]["name"] for _, r in selected
                                                       if r["model"]["container_digest"] == pair.replay.digest})
        held = _replayed(ledger, job_id, selected)
        if held and not job.resume:
            raise JobError(f"{job.ledger}: {len(held)} of the {len(selected)} selected records were already replayed "
                           f"by this replay job ({job_id}: same backend, version and tolerance): give --resume "
                           "to replay the others")
        todo = [(index, record) for index, record in selected if record["id"] not in held]
        summary.skipped = len(held)
        done = 0
        if on_progress is not None:
            on_progress(0, len(todo), 0)

        def outcome(result: ReplayOutcome) -> None:
            summary.verdicts[result.verdict] += 1
            if result.verdict == "diverged" or (result.verdict == "failed" and result.error is None):
                # Diverged, or outputs that differ with nothing to say by how much: where runs part.
                summary.divergences[(result.model, result.step or "(not located)")] += 1
            if result.error is not None:
                summary.failures.append((result.original, result.error))

        def task_done(count: int) -> None:
            nonlocal done
            done += count
            if on_progress is not None:
                on_progress(done, len(todo), summary.verdicts["diverged"])

        appended = Appended()
        try:
            append_in_order(ledger, executor, run_replay_task, models, _tasks(ledger, job, job_id, todo),
                            on_outcome=outcome, on_task=task_done, appended=appended)
        except KeyboardInterrupt:
            raise JobInterrupted(summary) from None
        finally:
            summary.replayed, summary.skipped = appended.recorded, summary.skipped + appended.already
        ledger.sign_tree_head()
    finally:
        ledger.close()
        summary.seconds = time.monotonic() - started
    return summary


def _served_models(shipped: ShippedModel, names: set[str]) -> dict[str, ShippedModel]:
    """The container on each of the records' other backends installed here (to re-compute their
    served values)."""
    from sealtrace.backends import BACKENDS, make_backend

    served = {}
    for name in sorted(names):
        if name == shipped.backend or name not in BACKENDS:
            continue
        try:
            version = str(make_backend(name).version)
        except SealtraceError:
            continue  # not installed: records of this backend cannot have their served values re-computed
        served[name] = dataclasses.replace(shipped, backend=name, backend_version=version)
    return served


def _select(ledger: Ledger, since: str | None, models: dict[str, ModelPair],
            summary: ReplaySummary) -> list[tuple[int, dict[str, Any]]]:
    """The inference records from ``since`` on whose model is one of ``models``."""
    start, after_time = 0, None
    if since is not None:
        if since.isdigit():
            start = int(since)
        elif _TIME_PREFIX.fullmatch(since):
            # Records' times are RFC 3339 UTC strings of one width: a prefix (without its Z) compares as a time.
            after_time = since.removesuffix("Z")
        else:
            raise InputError(f"--since {since[:80]!r}: give a leaf index (1200) or a UTC time (2025-01-31, "
                             "2025-01-31T12:00:00Z)")
    selected = []
    for index, record in ledger.records(start):
        if record["kind"] != "inference" or (after_time is not None and record["time"] < after_time):
            continue
        summary.selected += 1
        if _model_key(record) not in models:
            summary.unmatched[record["model"]["name"]] += 1
            continue
        selected.append((index, record))
    return selected


def _replayed(ledger: Ledger, job_id: str, selected: list[tuple[int, dict[str, Any]]]) -> set[str]:
    """Ids of the selected records this replay job already replayed."""
    held: set[str] = set()
    for start in range(0, len(selected), 4096):
        ids = {replay_record_id(job_id, r["id"]): r["id"] for _, r in selected[start : start + 4096]}
        held.update(ids[i] for i in ledger.holding(ids))
    return held


def _tasks(ledger: Ledger, job: LedgerReplay, job_id: str,
           todo: list[tuple[int, dict[str, Any]]]) -> Iterator[ReplayTask]:
    """Tasks of ``task_size`` records, their inputs (and full-audit trails) read from the ledger here."""
    for start in range(0, len(todo), job.task_size):
        items = []
        for index, record in todo[start : start + job.task_size]:
            try:
                feeds: dict[str, Any] | None = ledger.inputs_of(record)
                error = None
            except SealtraceError as exc:  # removed by retention, or damaged: the replay record says so
                feeds, error = None, str(exc)
            trail = None
            if record["audit"] == "full" and record["trail"] is not None:
                try:
                    trail = ledger.trail(record["trail"])
                except SealtraceError:
                    trail = None  # removed by retention: the verdict still stands, the step is not located
            items.append(ReplayItem(index, record, feeds, trail, error))
        yield ReplayTask(job_id, job.tolerance, job.sample, items)
