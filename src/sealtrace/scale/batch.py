"""``sealtrace batch``: audited inference over a dataset, every run's record appended to a ledger.

The driver (this process) reads the dataset a task at a time, ships each task's requests to a worker
(:mod:`sealtrace.scale.cluster`: this process, or Ray), and appends the records the workers return
through its one :class:`~sealtrace.ledger.Ledger` (group-committed, durable), **in the order of the
requests' positions in the dataset**: results that come back early wait for those before them. So
with or without Ray, with one worker or fifty, the ledger holds the same records in the same order.

**Records name their job.** A job is identified by what decides its records: the container and Plan
digests, the backend and its version, the audit mode, the principal, whether inputs are stored, and
the dataset's fingerprint (for a directory, the file names and sizes; for Parquet, its footer and row
count). Its *job id* is a digest of those, and the record of the request at position ``p`` has the id
``sha256("sealtrace.batch.record.v1", job id, p)`` (32 hex digits). So:

- the same job run again, with or without Ray, makes records with the same ids and digests (only
  their times differ, and the run digests of full-audit trails, whose headers name the run);
- ``--resume`` asks the ledger which of the job's record ids it holds and skips those positions;
- nothing can be appended twice: the ledger refuses a second record with an id it holds, so even two
  drivers of one job, or a resume racing the first run, cannot duplicate a record.

A worker runs each request of its task: the Session (verified once per worker process,
:mod:`sealtrace.scale.shipped`), the record (input and output digests; with ``--audit full`` the
per-op audit log, compressed in the worker as a :class:`~sealtrace.ledger.Trail`). A request that
fails (unreadable file, feeds the model refuses) is reported with its position and appends nothing;
the others go on.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sealtrace import __version__
from sealtrace.digest import canonical_json
from sealtrace.errors import InputError, SealtraceError
from sealtrace.ledger import Ledger, LedgerEntry, Trail, record_run
from sealtrace.outputs import check_output_directory
from sealtrace.provenance.attest import attest_record
from sealtrace.scale.cluster import Executor, worker_name
from sealtrace.scale.datasets import Dataset, Request, iter_positions, open_dataset
from sealtrace.scale.errors import JobError, JobInterrupted
from sealtrace.scale.ordered import Appended, Outcome, append_in_order
from sealtrace.scale.shipped import ShippedModel, ship_model
from sealtrace.signing import PrivateKey

JOB_FORMAT = "sealtrace.batch.job.v1"
RECORD_ID_TAG = b"sealtrace.batch.record.v1"
AUDIT_MODES = ("full", "io")
DEFAULT_TASK_SIZE = 32
DEFAULT_BACKEND = {"full": "reference", "io": "onnxruntime"}
ATTESTATION_SUFFIX = ".intoto.json"


def batch_record_id(job_id: str, position: int) -> str:
    """The id of the record of the request at ``position`` of job ``job_id``."""
    return hashlib.sha256(RECORD_ID_TAG + b"\0" + job_id.encode("ascii") + b"\0" + str(position).encode()).hexdigest()[:32]


def job_id_of(identity: dict[str, Any]) -> str:
    """A job's id: the digest of what decides its records (see the module docstring)."""
    return hashlib.sha256(canonical_json({"format": JOB_FORMAT, **identity})).hexdigest()[:32]


@dataclass(frozen=True)
class BatchTask:
    """One task: a run of requests, and how to record them."""

    job_id: str
    audit: str
    principal: str | None
    sample: int
    requests: list[Request]


RunOutcome = Outcome  # what a worker made of one request: its record and trail, or why it failed


def run_batch_task(model: ShippedModel, task: BatchTask) -> list[RunOutcome]:
    """Run every request of ``task`` on ``model`` and make its record (a worker's whole job; the
    same function in this process and in a Ray worker)."""
    from sealtrace.limits import memory_budget_of

    session = model.session()
    where = worker_name()
    outcomes = []
    with memory_budget_of(model.memory_budget):
        for request in task.requests:
            if request.feeds is None:
                outcomes.append(RunOutcome(request.position, request.name, None, None, request.error, where))
                continue
            try:
                record, trail = _run_one(model, session, task, request)
                outcomes.append(RunOutcome(request.position, request.name, record, trail, None, where))
            except SealtraceError as exc:
                outcomes.append(RunOutcome(request.position, request.name, None, None, str(exc), where))
    return outcomes


def _run_one(model: ShippedModel, session: Any, task: BatchTask, request: Request) -> tuple[dict[str, Any], Trail | None]:
    assert request.feeds is not None
    # One worker, one CPU: an audit log's hashing stays on the recorder's own thread.
    entry = LedgerEntry(model.name, audit=task.audit, principal=task.principal, sample=task.sample, hash_threads=0,
                        record_id=batch_record_id(task.job_id, request.position))  # fmt: skip
    run = record_run(session, request.feeds, entry)
    return run.record, Trail.of(run.trail) if run.trail is not None else None


@dataclass(frozen=True)
class Failure:
    """A request that ran into an error: nothing was appended for it."""

    position: int
    name: str
    error: str


@dataclass
class BatchSummary:
    """The outcome of a batch job."""

    job_id: str
    requests: int
    recorded: int = 0  # appended by this run (durable)
    skipped: int = 0  # already in the ledger (--resume)
    failures: list[Failure] = field(default_factory=list)
    seconds: float = 0.0
    workers: Counter[str] = field(default_factory=Counter)  # requests per worker
    where: str = ""
    first_index: int | None = None  # the ledger index of the first record appended
    ledger_size: int = 0
    attested: int = 0  # attestations written (--attest)

    @property
    def rate(self) -> float:
        """Requests run per second by this run (recorded or failed)."""
        done = self.recorded + len(self.failures)
        return done / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "requests": self.requests, "recorded": self.recorded, "skipped": self.skipped,
            "failed": len(self.failures),
            "failures": [{"position": f.position, "name": f.name, "error": f.error} for f in self.failures[:100]],
            "seconds": round(self.seconds, 3), "requests_per_second": round(self.rate, 2),
            "workers": dict(self.workers), "where": self.where, "ledger_size": self.ledger_size,
            "attested": self.attested,
        }


@dataclass
class BatchJob:
    """Everything ``sealtrace batch`` is told (docs/scale.md)."""

    model: str
    dataset: str
    ledger: str
    audit: str = "io"
    backend: str | None = None  # None: reference for full, onnxruntime for io
    threads: int = 1
    principal: str | None = None
    name: str | None = None
    trust: tuple[str, ...] = ()
    sign_key: str | None = None
    resume: bool = False
    task_size: int = DEFAULT_TASK_SIZE
    store_inputs: bool = True
    sample: int = 8
    head_every: int = 1000
    head_interval: float = 10.0
    device: str | None = None  # the torch backend's device (--device); None: the CPU
    gpu_precision: str | None = None
    attest_dir: str | None = None  # one in-toto attestation per record, named after its request (--attest)
    attest_key: str | None = None

    def device_identity(self) -> dict[str, Any]:
        """What of the device decides a record's bits, for the job's id: nothing on the CPU (the
        backend's version does), the GPU, its software stack and the precision on CUDA; so a job
        resumed on another GPU or precision is another job, not one whose records were computed on two."""
        from sealtrace.backends.devices import check_precision, parse_device

        device = parse_device(self.device or "cpu")
        if device == "cpu":
            return {}
        import torch

        from sealtrace.backends.torch import gpu_facts

        return {"device": {"gpu": gpu_facts(torch.device(device)),
                           "precision": check_precision(self.gpu_precision, device)}}

    def checked_backend(self) -> str:
        if self.audit not in AUDIT_MODES:
            raise InputError(f"--audit {self.audit!r}: choose full or io")
        backend = self.backend or DEFAULT_BACKEND[self.audit]
        if self.audit == "full" and backend != "reference":
            raise InputError(f"--audit full runs on the reference backend (the per-op audit is the reference run); "
                             f"--backend {backend} runs with --audit io")
        if (self.attest_dir is None) != (self.attest_key is None):
            raise InputError("--attest DIR and --attest-key KEY.pem go together: where the attestations go, "
                             "and the key that signs them")
        if self.attest_dir is not None and self.audit != "full":
            raise InputError("--attest needs --audit full: an io record keeps input and output digests only, "
                             "no audit log whose run an attestation could state")
        if self.task_size < 1 or self.threads < 1:
            raise InputError("--task-size and --threads must be at least 1")
        if self.device is not None or self.gpu_precision is not None:
            from sealtrace.backends.devices import check_device, check_precision

            check_precision(self.gpu_precision, check_device(self.device or "cpu", backend))
        return backend


Progress = Callable[[int, int, int], None]  # (requests done by this run, requests to do, failures)


def run_batch(job: BatchJob, executor: Executor, on_progress: Progress | None = None,
              on_outcome: Callable[[RunOutcome], None] | None = None) -> BatchSummary:
    """Run ``job`` on ``executor``; every record durable in the job's ledger before this returns.
    ``on_progress(done, to do, failed)`` is called as tasks finish; ``on_outcome`` sees each request's
    outcome (record or failure, and the worker that ran it) in position order, before its append.

    Interrupted (KeyboardInterrupt, a failed task), it stops submitting, appends nothing more, and
    closes the ledger with everything already submitted durable: the ledger then holds a prefix of
    the job in position order, which ``resume=True`` completes.
    """
    started = time.monotonic()
    backend = job.checked_backend()
    signer = attester = None
    if job.sign_key is not None:
        from sealtrace.signing import load_private_key

        signer = load_private_key(job.sign_key)
    if job.attest_dir is not None and job.attest_key is not None:
        from sealtrace.signing import load_signing_key

        check_output_directory(job.attest_dir, job.resume, "--attest",
                               "give a new or empty one; --resume adds what an earlier run of the job left out")
        attester = load_signing_key(job.attest_key)
    model, session = ship_model(job.model, executor, backend=backend, threads=job.threads, trust=job.trust,
                                name=job.name, device=job.device, gpu_precision=job.gpu_precision)
    dataset = open_dataset(job.dataset, session.plan.inputs)
    job_id = job_id_of({
        "model": {"name": model.name, "container_digest": model.digest, "plan_digest": session.plan.digest},
        "backend": {"name": backend, "version": model.backend_version, **job.device_identity()}, "audit": job.audit,
        "principal": job.principal, "store_inputs": job.store_inputs, "sample": job.sample,
        "dataset": dataset.fingerprint(), "sealtrace_version": __version__,
    })
    summary = BatchSummary(job_id, dataset.size, where=executor.description)
    ledger = Ledger.open(job.ledger, signer=signer, head_every=job.head_every, head_interval=job.head_interval)
    try:
        held = _recorded_positions(ledger, job_id, dataset.size)
        if held and not job.resume:
            raise JobError(f"{job.ledger} already holds {len(held)} of the {dataset.size} records of this job "
                           f"({job_id}: same model, backend, audit mode and dataset): give --resume to finish it")
        summary.skipped = len(held)
        todo = dataset.size - len(held)
        if on_progress is not None:
            on_progress(0, todo, 0)
        tasks = (BatchTask(job_id, job.audit, job.principal, job.sample, dataset.read(positions))
                 for positions in iter_positions(dataset.size, held, job.task_size))
        done = 0

        def outcome(result: RunOutcome) -> None:
            if on_outcome is not None:
                on_outcome(result)
            summary.workers[result.worker] += 1
            if result.record is None:
                summary.failures.append(Failure(result.position, result.name, result.error or "failed"))

        def task_done(count: int) -> None:
            nonlocal done
            done += count
            if on_progress is not None:
                on_progress(done, todo, len(summary.failures))

        def inputs_of(task: BatchTask) -> dict[int, Any]:
            return {r.position: r.feeds for r in task.requests} if job.store_inputs else {}

        appended = Appended()
        try:
            append_in_order(ledger, executor, run_batch_task, model, tasks, inputs_of=inputs_of,
                            on_outcome=outcome, on_task=task_done, appended=appended)
        except KeyboardInterrupt:
            raise JobInterrupted(summary) from None
        finally:
            summary.recorded, summary.first_index = appended.recorded, appended.first_index
            summary.skipped += appended.already
        if attester is not None and job.attest_dir is not None:
            summary.attested = _attest_records(ledger, dataset, job_id, Path(job.attest_dir), attester)
        ledger.sign_tree_head()
        summary.ledger_size = ledger.size
    finally:
        ledger.close()  # appends what was submitted (a prefix in position order) and signs a last head
        summary.seconds = time.monotonic() - started
    return summary


def _recorded_positions(ledger: Ledger, job_id: str, size: int) -> set[int]:
    """Positions of the job whose records the ledger holds (asked 4096 ids at a time)."""
    held: set[int] = set()
    for start in range(0, size, 4096):
        ids = {batch_record_id(job_id, p): p for p in range(start, min(size, start + 4096))}
        held.update(ids[record_id] for record_id in ledger.holding(ids))
    return held


def _attest_records(ledger: Ledger, dataset: Dataset, job_id: str, folder: Path, key: PrivateKey) -> int:
    """Write the attestation of each of the job's records that ``folder`` lacks (those this run
    appended, and those an interrupted earlier run did); how many were written."""
    folder.mkdir(exist_ok=True)
    written = 0
    for position in sorted(_recorded_positions(ledger, job_id, dataset.size)):
        target = folder / f"{dataset.stem(position)}{ATTESTATION_SUFFIX}"
        if not target.exists():
            attest_record(ledger, batch_record_id(job_id, position), key).write(target)
            written += 1
    return written


__all__: Sequence[str] = ["BatchJob", "BatchSummary", "BatchTask", "Failure", "RunOutcome", "batch_record_id",
                          "job_id_of", "run_batch", "run_batch_task"]
