"""Deferred audit: replay every served request on the reference backend, off the critical path.

``--audit deferred`` answers on a fast backend (ONNX Runtime, torch) and records the answer; this
module's :class:`ReplayQueue` then re-runs each request on the reference backend with the full per-op
audit, compares the outputs with what was served (the parity tolerance), and appends a *replay
record* linked to the request's record with the verdict (``identical``, ``within-tolerance``,
``diverged``, ``failed``). A replay is an ordinary audited run of stored inputs.

The replays run in worker *processes* at the lowest CPU priority (Linux's ``SCHED_IDLE``, else
``nice 19``): the reference
interpreter is Python and NumPy, and in the server's process it would take the GIL from the requests;
in a niced process the kernel gives the cores to serving first, and the backlog drains when the load
stops. The queue is the ledger itself: a deferred record no replay links to is unreplayed, so a
restart finds the backlog again (:meth:`ReplayQueue.resume`), and a shutdown loses nothing.

A worker process that dies (killed, out of memory) is replaced: the next replay finds the pool broken
and starts a new one, and the replays the death interrupted are queued again. A record whose replay
may have killed its worker is then replayed alone, so that a second death is its own; after
``WORKER_DEATHS`` deaths it gets a ``failed`` replay record instead of killing workers forever. The
workers die with the server, even when it is killed with SIGKILL (Linux: ``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import logging
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sealtrace.errors import SealtraceError
from sealtrace.ledger import Ledger
from sealtrace.ledger.values import Trail
from sealtrace.ledger.verdicts import failed_record, judge, replay_record, reproduces
from sealtrace.parity.tolerance import Tolerance

log = logging.getLogger("sealtrace.serve")

MAX_HELD = 256  # jobs that keep their tensors in memory; later ones reload inputs from the ledger
WORKER_DEATHS = 3  # a record whose replays kill the worker this often (the last times alone) is failed
PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass
class ReplayJob:
    """One request to replay: its record, and (while memory allows) its inputs and served outputs."""

    record_id: str
    model: str
    record: dict[str, Any]
    feeds: dict[str, np.ndarray] | None = None
    served: dict[str, Any] | None = None
    deaths: int = 0  # worker deaths while this job was being replayed (or queued in the worker beside it)


@dataclass(frozen=True)
class ReplaySpec:
    """What a worker process needs to open the served models on its own."""

    models: tuple[tuple[str, str], ...]  # (name, container path)
    trust: tuple[str, ...]
    serving_backend: str | None  # None: the serving backend has no name to re-create it by
    tolerance: Tolerance
    sign_key: str | None
    nice: int = 19


@dataclass
class ReplayResult:
    record: dict[str, Any]
    trail: Trail | None  # compressed in the worker: the server's process only stores it
    verdict: str


@dataclass
class Divergence:
    """A replay whose outputs differ from the served ones beyond the tolerance (shown on /ledger)."""

    record_id: str
    replay_id: str
    model: str
    detail: str
    time: str


# -- the worker process ----------------------------------------------------------------------------
_WORKER: dict[str, Any] = {}


def _die_with(server: int) -> None:
    """Have the kernel SIGKILL this worker when the server dies, however it dies (Linux).

    The signal is tied to the *thread* that started the worker: the queue's dispatcher, the only thread
    that submits (:class:`ProcessPoolExecutor` starts workers in ``submit``), and it outlives the pool.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            log.warning("replay worker: prctl(PR_SET_PDEATHSIG) failed (errno %d); it may outlive a killed server",
                        ctypes.get_errno())
    if os.getppid() != server:  # the server died before the signal was armed: nobody would ever stop us
        os._exit(0)


def _init_worker(spec: ReplaySpec, server: int) -> None:
    _die_with(server)
    # SCHED_IDLE (Linux): the kernel runs a replay only when no other task wants the CPU, and a
    # request that wakes up preempts it at once; elsewhere, the lowest nice level.
    idle = getattr(os, "SCHED_IDLE", None)
    try:
        if idle is None:
            raise OSError("no SCHED_IDLE")
        os.sched_setscheduler(0, idle, os.sched_param(0))
    except OSError:
        with contextlib.suppress(OSError):  # not permitted: replays still run, at normal priority
            os.nice(spec.nice)
    _WORKER.clear()
    _WORKER["spec"] = spec
    _WORKER["paths"] = dict(spec.models)
    _WORKER["sessions"] = {}


def _session(name: str, backend: str) -> Any:
    from sealtrace import Session

    sessions: dict[tuple[str, str], Any] = _WORKER["sessions"]
    key = (name, backend)
    if key not in sessions:
        spec: ReplaySpec = _WORKER["spec"]
        sessions[key] = Session(_WORKER["paths"][name], backend=backend, trust=spec.trust)
    return sessions[key]


def replay_in_worker(job: ReplayJob) -> ReplayResult:
    """Run ``job`` on the reference backend with the full audit and judge it (in a worker process)."""
    from sealtrace.audit import logged_run

    spec: ReplaySpec = _WORKER["spec"]
    original = job.record
    assert job.feeds is not None
    try:
        reference = _session(job.model, "reference")
        logged = logged_run(reference, job.feeds, sign_key=_signer(spec), hash_threads=0)
        outputs = logged.outputs
        served, note = _served_outputs(job, spec)
        verdict, detail = judge(outputs, served, original, spec.tolerance)
        if note:
            detail = f"{note}; {detail}" if detail else note
        record = replay_record(
            original, plan_digest=reference.plan.digest, container_digest=reference.origin.container_digest,
            backend="reference", backend_version=str(reference.backend.version), inputs=job.feeds,
            outputs=outputs, audit="full", trail=logged.run_digest, verdict=verdict, detail=detail,
        )
        return ReplayResult(record, Trail.of(logged.log), verdict)
    except SealtraceError as exc:
        return ReplayResult(failed_record(original, f"replay failed: {exc}"), None, "failed")


def _signer(spec: ReplaySpec) -> Any:
    if spec.sign_key is None:
        return None
    if "signer" not in _WORKER:
        from sealtrace.signing import load_private_key

        _WORKER["signer"] = load_private_key(spec.sign_key)
    return _WORKER["signer"]


def _served_outputs(job: ReplayJob, spec: ReplaySpec) -> tuple[dict[str, Any] | None, str | None]:
    """What was served: kept from the request, or (after a restart) re-computed on the serving
    backend and accepted only if it reproduces the record's output digests."""
    if job.served is not None:
        return job.served, None
    if spec.serving_backend is None:
        return None, "the served outputs were not kept and the serving backend cannot be re-created"
    session = _session(job.model, spec.serving_backend)
    values = dict(zip(session.plan.output_names, session.run(None, job.feeds), strict=True))
    if reproduces(values, job.record):
        return values, None
    return values, f"re-running {spec.serving_backend} did not reproduce the served outputs' digests"


# -- the queue in the server's process --------------------------------------------------------------
@dataclass
class ReplayStats:
    done: int = 0
    by_verdict: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    restarts: int = 0  # worker pools started after a worker died


class ReplayQueue:
    """Replays deferred records in ``workers`` processes; appends each replay record to ``ledger``.

    ``put`` takes a job whose record is durable; ``resume`` finds the records a previous run left
    unreplayed; ``close`` drains for up to ``drain_seconds`` and leaves the rest in the ledger.
    ``on_result(job, result)`` is called once each replay record is durable (metrics, logs).
    """

    def __init__(
        self,
        ledger: Ledger,
        spec: ReplaySpec,
        workers: int = 1,
        on_result: Callable[[ReplayJob, ReplayResult], None] | None = None,
    ) -> None:
        self.ledger = ledger
        self.spec = spec
        self.workers = max(1, workers)
        self.on_result = on_result
        self.stats = ReplayStats()
        self.divergences: deque[Divergence] = deque(maxlen=100)
        self._served_models = {name for name, _ in spec.models}
        self._queue: queue.SimpleQueue[ReplayJob | None] = queue.SimpleQueue()
        self._queued = 0
        self._held = 0
        self._in_flight = 0
        self._left = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._slots = threading.Semaphore(self.workers * 2)
        self._stopping = threading.Event()
        self._submitting = threading.Lock()  # the pool is replaced or shut down only between two submits
        self._pool = self._new_pool()
        self._dispatcher = threading.Thread(target=self._dispatch, name="sealtrace-replay", daemon=True)
        self._dispatcher.start()
        self._resumer: threading.Thread | None = None

    def _new_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        context = multiprocessing.get_context("spawn")  # no fork after threads have started
        return concurrent.futures.ProcessPoolExecutor(
            self.workers, mp_context=context, initializer=_init_worker, initargs=(self.spec, os.getpid())
        )

    @property
    def backlog(self) -> int:
        """Requests recorded and not replayed yet: queued, running, or left for the next start."""
        return self._queued + self._in_flight + self._left

    def waiting(self) -> dict[str, int]:
        """The backlog by state: ``queued``, ``running``, and ``left`` (this run gave up on them: they
        could not start, or their replay record could not be appended; the next start replays them)."""
        with self._lock:
            return {"queued": self._queued, "running": self._in_flight, "left": self._left}

    def put(self, job: ReplayJob) -> None:
        """Queue a job (its record is durable). Past ``MAX_HELD`` queued jobs, tensors are dropped:
        the inputs are in the ledger, and the served outputs are re-computed."""
        with self._lock:
            if self._held >= MAX_HELD:
                job.feeds = job.served = None
            elif job.feeds is not None:
                self._held += 1
            self._queued += 1
        self._queue.put(job)

    def resume(self, known: Callable[[Mapping[str, Any]], str | None], scan_to: int) -> None:
        """Queue, in the background, the deferred records of leaves 0..``scan_to`` that no replay
        links to. ``known(record)`` names the served model a record belongs to (None: not served now)."""

        def scan() -> None:
            try:
                pending: dict[str, tuple[str, dict[str, Any]]] = {}
                skipped = 0
                for _, record in self.ledger.records(0, scan_to):
                    if self._stopping.is_set():
                        return
                    if record["kind"] == "replay":
                        for link in record["links"]:
                            pending.pop(link["record"], None)
                    elif record["audit"] == "deferred":
                        name = known(record)
                        if name is None:
                            skipped += 1
                        else:
                            pending[record["id"]] = (name, record)
                if skipped:
                    log.warning("replay: %d unreplayed deferred record(s) are of models not served now; "
                                "serve those containers to replay them", skipped)
                if pending:
                    log.info("replay: resuming %d unreplayed record(s) from the ledger", len(pending))
                for record_id, (name, record) in pending.items():
                    self.put(ReplayJob(record_id, name, record))
            except Exception:  # a damaged ledger must not take the server down: it is logged
                log.exception("replay: could not scan the ledger for unreplayed records")

        self._resumer = threading.Thread(target=scan, name="sealtrace-replay-resume", daemon=True)
        self._resumer.start()

    def _dispatch(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            self._slots.acquire()
            with self._lock:
                self._queued -= 1
                self._in_flight += 1
                if job.feeds is not None:
                    self._held -= 1
                if job.deaths:  # it may have killed its worker: replayed alone, so that a death is its own
                    self._wait_for_in_flight(1)
            try:
                self._start(job)
            except Exception:
                log.exception("replay of record %s could not start; it is replayed after a restart", job.record_id)
                self._leave()
                self._release()
            if job.deaths:
                with self._lock:
                    self._wait_for_in_flight(0)

    def _wait_for_in_flight(self, count: int) -> None:
        """Wait (holding ``_lock``) until at most ``count`` replays are in flight, or the queue stops."""
        while self._in_flight > count and not self._stopping.is_set():
            self._idle.wait(0.1)

    def _start(self, job: ReplayJob) -> None:
        if job.feeds is None:
            try:
                job.feeds = self.ledger.inputs_of(job.record)
            except SealtraceError as exc:  # removed by retention, or damaged: the replay says so
                self._append(job, ReplayResult(failed_record(job.record, f"inputs not available: {exc}"), None, "failed"))
                self._release()
                return
        started = time.monotonic()
        with self._submitting:
            if self._stopping.is_set():  # the record stays unreplayed in the ledger
                self._leave()
                self._release()
                return
            try:
                future = self._pool.submit(replay_in_worker, job)
            except concurrent.futures.process.BrokenProcessPool:  # a worker died, idle or in an earlier replay
                self._restart_pool()
                future = self._pool.submit(replay_in_worker, job)
        future.add_done_callback(lambda f: self._finished(job, f, started))

    def _restart_pool(self) -> None:
        old, self._pool = self._pool, self._new_pool()
        self.stats.restarts += 1
        log.warning("replay: a worker process died; new worker(s) started (%d restart(s) so far)", self.stats.restarts)
        old.shutdown(wait=False, cancel_futures=True)

    def _finished(self, job: ReplayJob, future: concurrent.futures.Future[ReplayResult], started: float) -> None:
        try:
            if future.cancelled():  # shutting down: the record stays unreplayed in the ledger
                self._leave()
                return
            try:
                result = future.result()
            except concurrent.futures.process.BrokenProcessPool:
                self._worker_died(job)
                return
            except Exception as exc:
                result = ReplayResult(failed_record(job.record, f"replay failed: {type(exc).__name__}: {exc}"), None, "failed")
            self.stats.seconds += time.monotonic() - started
            self._append(job, result)
        finally:
            self._release()

    def _worker_died(self, job: ReplayJob) -> None:
        """The worker died while ``job`` was running or waiting in it: queue it again (alone), or, once
        it has been there at ``WORKER_DEATHS`` deaths, record the replay as failed."""
        job.deaths += 1
        if job.deaths >= WORKER_DEATHS:
            log.error("replay worker died %d times replaying record %s; its replay is recorded as failed",
                      job.deaths, job.record_id)
            detail = (f"replay failed: the replay worker process died {job.deaths} times replaying this record "
                      "(killed, e.g. out of memory)")
            self._append(job, ReplayResult(failed_record(job.record, detail), None, "failed"))
        elif self._stopping.is_set():
            self._leave()
        else:
            log.warning("replay worker died replaying record %s (or one beside it); it is replayed again, alone",
                        job.record_id)
            self.put(job)

    def _append(self, job: ReplayJob, result: ReplayResult) -> None:
        try:
            receipt = self.ledger.append(result.record, trail=result.trail)
        except SealtraceError as exc:
            log.error("replay record of %s not appended (%s); it is replayed after a restart", job.record_id, exc)
            self._leave()
            return
        with self._lock:
            self.stats.done += 1
            self.stats.by_verdict[result.verdict] = self.stats.by_verdict.get(result.verdict, 0) + 1
        if result.verdict == "diverged":
            link = result.record["links"][0]
            self.divergences.appendleft(Divergence(job.record_id, receipt.record_id, job.model,
                                                   str(link.get("detail", "")), result.record["time"]))
            log.warning("DIVERGENCE: record %s (model %s) replayed on the reference backend as %s: %s",
                        job.record_id, job.model, receipt.record_id, link.get("detail"))
        if self.on_result is not None:
            self.on_result(job, result)

    def _leave(self) -> None:
        """Count a record this run will not replay: it stays unreplayed in the ledger until a restart."""
        with self._lock:
            self._left += 1

    def _release(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self._idle.notify_all()
        self._slots.release()

    def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the queued and running replays (with what :meth:`resume`
        finds) to end; whether they did."""
        deadline = time.monotonic() + timeout
        if self._resumer is not None:
            self._resumer.join(timeout)
            if self._resumer.is_alive():
                return False
        with self._lock:
            while self._queued + self._in_flight > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(min(left, 0.1))
        return True

    def close(self, drain_seconds: float = 0.0) -> None:
        """Drain for up to ``drain_seconds``, then stop; what is left stays unreplayed in the ledger
        (found again by :meth:`resume` on the next start)."""
        if drain_seconds > 0:
            self.drain(drain_seconds)
        self._stopping.set()
        with self._submitting:
            pool = self._pool
        # Before the dispatcher ends: the workers are killed when the thread that started them ends.
        pool.shutdown(wait=True, cancel_futures=True)
        self._queue.put(None)
        self._dispatcher.join()
        if self._resumer is not None:
            self._resumer.join()


def served_model_of(models: Sequence[tuple[str, str | None, str]]) -> Callable[[Mapping[str, Any]], str | None]:
    """A lookup from a record to the served model it belongs to: same name and plan digest (and
    container digest) as one of ``models`` = (name, container digest, plan digest)."""
    index = {(name, container, plan): name for name, container, plan in models}

    def lookup(record: Mapping[str, Any]) -> str | None:
        model = record["model"]
        return index.get((model["name"], model["container_digest"], model["plan_digest"]))

    return lookup
