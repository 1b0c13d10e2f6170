"""The audit recorder: a StepObserver that writes the hash-chained log as the run goes.

The executor's thread does as little as it can: it hands each step's output arrays to a worker
thread (:mod:`sealtrace.audit.pipeline`) and carries on. The worker hashes every output in full,
builds the record, chains it and writes it, flushing each line, so a crash leaves a valid prefix
that verification reports as truncated. The pipe between them is bounded in steps and bytes, so
the recorder never holds more tensors alive than the bound allows.

Holding references to outputs until they are hashed is safe: the executor never mutates an array
after producing it (kernels may return views of their inputs, which are equally immutable).
"""

from __future__ import annotations

import os
import threading
import uuid
import weakref
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sealtrace import __version__
from sealtrace.audit.errors import AuditLogExistsError, AuditWriteError
from sealtrace.audit.host import host_facts
from sealtrace.audit.linkage import model_reference
from sealtrace.audit.pipeline import (
    DEFAULT_PENDING_BYTES,
    DEFAULT_PENDING_ITEMS,
    BackgroundObserver,
    nbytes_of,
)
from sealtrace.audit.records import (
    AUDIT_FORMAT,
    DEFAULT_SAMPLE,
    GENESIS,
    digest_field,
    seal_record,
    value_digest,
    value_identity,
    value_summary,
)
from sealtrace.backends.base import Backend, StepEvent
from sealtrace.digest import canonical_json
from sealtrace.plan.model import Plan, Step
from sealtrace.signing import load_private_key, sign_digest

SignKey = str | os.PathLike[str] | Ed25519PrivateKey


def utc_now() -> str:
    """The current time as ISO 8601 UTC with microseconds ('2026-01-02T03:04:05.123456Z')."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _PlanFacts:
    """What the recorder derives once per Plan: weight digests and inputs it must hash itself."""

    def __init__(self, plan: Plan) -> None:
        walked = plan.walk()
        produced: set[str] = set(plan.input_names)
        formal: set[str] = set()  # subgraph inputs: fed by a control-flow kernel, never by a step
        initializers: dict[str, Any] = dict(plan.initializers)
        for _path, step in walked:
            produced.update(o for o in step.outputs if o)
            for sub in step.subgraphs.values():
                formal.update(sub.input_names)
                initializers.update(sub.initializers)
        produced.update(initializers)
        self.initializers = initializers
        # Per step (by identity): input positions whose digest no earlier record gives, so the
        # worker hashes the array itself (subgraph inputs; anything no step or feed produced).
        self.direct_inputs: dict[int, tuple[int, ...]] = {}
        for path, step in walked:
            positions = tuple(
                i
                for i, name in enumerate(step.inputs)
                if name and (name not in produced or (path and name in formal))
            )
            if positions:
                self.direct_inputs[id(step)] = positions
        self._weight_digests: dict[str, str | None] | None = None
        self._lock = threading.Lock()
        # Arrays the Plan owns (weights, constant attributes), by identity: a read-only view of
        # one (what a Constant step returns) has the same bytes in every run, like the weights.
        # Keyed by the object that owns the memory (NumPy points every view's base at it).
        self.owned: dict[int, Any] = {}
        arrays = [v for v in initializers.values() if isinstance(v, np.ndarray)]
        for _path, step in walked:
            for value in step.attributes.values():
                arrays.extend(a for a in (value if isinstance(value, tuple) else (value,)) if isinstance(a, np.ndarray))
        for array in arrays:
            root = array if array.base is None else array.base
            self.owned[id(root)] = root
        self._constant_summaries: dict[tuple[Any, ...], dict[str, Any]] = {}

    def constant_summary(self, value: Any, sample: int) -> dict[str, Any] | None:
        """The summary of a read-only view of an array the Plan owns, made once per Plan; None
        for any other value (fresh outputs are always hashed)."""
        if type(value) is not np.ndarray or value.flags.writeable:
            return None
        base = value.base
        if base is None or self.owned.get(id(base)) is not base:
            return None
        key = (id(base), value.__array_interface__["data"][0], value.shape, value.strides, value.dtype.str, sample)
        summary = self._constant_summaries.get(key)
        if summary is None:
            summary = self._constant_summaries[key] = value_summary(value, sample)
        return summary

    def weight_digests(self) -> dict[str, str | None]:
        """Digests of every initializer (subgraphs' included), computed once per Plan."""
        with self._lock:
            if self._weight_digests is None:
                self._weight_digests = {k: value_digest(v) for k, v in self.initializers.items()}
            return self._weight_digests


# Outputs at least this large are hashed on the pool; smaller ones on the writer thread.
PARALLEL_MIN_BYTES = 256 << 10

_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def default_hash_threads() -> int:
    """Pool threads for hashing large tensors: half the usable CPUs (the run needs the rest), 1-8."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus // 2))


def hash_pool(threads: int) -> ThreadPoolExecutor:
    """A process-wide pool of ``threads`` hashing threads, shared by every recorder (made once)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(threads)
        if pool is None:
            pool = _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="sealtrace-hash")
        return pool


_PLAN_FACTS: weakref.WeakKeyDictionary[Plan, _PlanFacts] = weakref.WeakKeyDictionary()
_PLAN_FACTS_LOCK = threading.Lock()


def plan_facts(plan: Plan) -> _PlanFacts:
    """The recorder's per-Plan facts, derived once and kept as long as the Plan lives."""
    with _PLAN_FACTS_LOCK:
        facts = _PLAN_FACTS.get(plan)
        if facts is None:
            facts = _PLAN_FACTS[plan] = _PlanFacts(plan)
        return facts


class AuditRecorder(BackgroundObserver):
    """Records one run as a hash-chained audit log (a :class:`StepObserver`).

    ``target`` is a path (created; an existing file is refused unless ``overwrite``), a binary
    file object, or None to keep the records in memory only (``records``). ``sample`` is how many
    leading values of each tensor the log shows; ``sign_key`` (a PEM path or key) signs the run
    digest; ``origin`` is the Session's ModelOrigin, which links the log to the container or file
    (``Session.run(audit=...)`` fills it in). One recorder records one run.

    Memory: the recorder holds at most ``max_pending_bytes`` of tensors (and ``max_pending_steps``
    steps) not yet hashed; past that, the run waits for it. ``hash_threads`` threads (default:
    half the CPUs, at most 8; 0 for none) hash outputs of 256 KiB and more in parallel.
    """

    what = "audit"

    def __init__(
        self,
        target: str | os.PathLike[str] | IO[bytes] | None = None,
        *,
        sample: int = DEFAULT_SAMPLE,
        sign_key: SignKey | None = None,
        origin: Any = None,
        overwrite: bool = False,
        max_pending_bytes: int = DEFAULT_PENDING_BYTES,
        max_pending_steps: int = DEFAULT_PENDING_ITEMS,
        hash_threads: int | None = None,
    ) -> None:
        super().__init__(max_pending_bytes, max_pending_steps)
        if sample < 0:
            raise ValueError("sample must be >= 0")
        threads = default_hash_threads() if hash_threads is None else hash_threads
        self._pool = hash_pool(threads) if threads > 0 else None
        self.path: Path | None = None
        self._file: IO[bytes] | None = None
        self._owns_file = False
        if isinstance(target, (str, os.PathLike)):
            self.path = Path(target)
            if self.path.exists() and not overwrite:
                raise AuditLogExistsError(f"{self.path}: audit log exists (use --force to overwrite)")
        elif target is not None:
            self._file = target
        self._overwrite = overwrite
        self.sample = sample
        self._sign_key: Ed25519PrivateKey | None = (
            load_private_key(sign_key) if isinstance(sign_key, (str, os.PathLike)) else sign_key
        )
        self.origin = origin
        self.records: list[dict[str, Any]] = []
        self.run_digest: str | None = None
        self._keep = target is None
        # Worker-side state.
        self._seq = 0
        self._prev = GENESIS
        self._steps = 0
        self._digests: dict[str, str | None] = {}
        self._facts: _PlanFacts | None = None

    @property
    def steps(self) -> int:
        """Step records written so far (all of them once the run ended)."""
        return self._steps

    # -- StepObserver (executor thread) -------------------------------------------------------

    def on_run_start(self, plan: Plan, feeds: Mapping[str, Any], backend: Backend) -> None:
        if self._state != "new":
            raise AuditWriteError("an AuditRecorder records one run; make a new one for each run")
        if self.path is not None:
            try:
                self._file = self.path.open("wb" if self._overwrite else "xb")
            except FileExistsError:
                raise AuditLogExistsError(f"{self.path}: audit log exists (use --force to overwrite)") from None
            except OSError as exc:
                raise AuditWriteError(f"{self.path}: cannot create audit log ({exc.strerror})") from None
            self._owns_file = True
        self._facts = plan_facts(plan)
        self._start()
        backend_info = {
            "name": backend.name,
            "version": backend.version,
            "per_step": bool(getattr(backend, "per_step", False)),
        }
        feed_values = {info.name: feeds.get(info.name) for info in plan.inputs}
        self._submit(("header", plan, feed_values, backend_info, utc_now()), nbytes_of(feed_values.values()))

    def on_step(self, event: StepEvent) -> None:
        step = event.step
        assert self._facts is not None, "on_step before on_run_start"
        positions = self._facts.direct_inputs.get(id(step))
        direct = {i: event.inputs[i] for i in positions} if positions else None
        outputs = tuple(event.outputs)
        nbytes = nbytes_of(outputs)
        if self._pool is not None and nbytes >= PARALLEL_MIN_BYTES and self._state == "running":
            # Large tensors are summarized by the pool at once, in parallel with each other and
            # with the run; the writer collects the results in order. Small ones stay on the
            # writer, where a pool round trip would cost more than the hash. The pool gets them
            # only once the pipe has room: the bound covers tensors the pool holds too.
            self._pipe.wait_for_room(nbytes)
            outputs = tuple(
                self._pool.submit(value_summary, v, self.sample)
                if isinstance(v, np.ndarray) and v.nbytes >= PARALLEL_MIN_BYTES and v.flags.writeable
                else v
                for v in outputs
            )
        self._submit(("step", event.path, step, outputs, direct), nbytes)

    def on_run_end(self, outputs: Mapping[str, Any]) -> None:
        self._submit(("footer", dict(outputs)), nbytes_of(outputs.values()), flush=True)
        self._finish()

    # -- worker thread -----------------------------------------------------------------------

    def _close(self, finished: bool) -> None:
        if self._owns_file and self._file is not None:
            self._file.close()

    def _describe(self) -> str:
        return f"audit log {self.path}" if self.path is not None else "audit log"

    def _handle(self, item: tuple[Any, ...]) -> None:
        kind = item[0]
        if kind == "step":
            self._emit(self._step_record(*item[1:]))
        elif kind == "header":
            self._emit(self._header_record(*item[1:]))
        else:
            self._emit(self._footer_record(item[1]))

    def _header_record(
        self, plan: Plan, feeds: Mapping[str, Any], backend: dict[str, Any], started: str
    ) -> dict[str, Any]:
        assert self._facts is not None
        self._digests.update(self._facts.weight_digests())
        inputs = []
        for name, value in feeds.items():
            summary = value_summary(value, self.sample)
            self._digests[name] = summary["digest"]
            inputs.append({"name": name, **summary})
        return {
            "type": "header",
            "format": AUDIT_FORMAT,
            "run_id": uuid.uuid4().hex,
            "started": started,
            "sealtrace_version": __version__,
            "backend": backend,
            "host": host_facts(),
            "model": model_reference(self.origin),
            "plan_digest": plan.digest,
            "sample_size": self.sample,
            "inputs": inputs,
        }

    def _step_record(
        self,
        path: tuple[str, ...],
        step: Step,
        outputs: tuple[Any, ...],
        direct: dict[int, Any] | None,
    ) -> dict[str, Any]:
        inputs = []
        for i, name in enumerate(step.inputs):
            if not name:
                digest = None
            elif direct is not None and i in direct:
                digest = value_digest(direct[i])
            else:
                digest = self._digests.get(name)
            inputs.append({"name": name, "digest": digest})
        summaries = []
        facts = self._facts
        assert facts is not None
        for name, value in zip(step.outputs, outputs, strict=True):
            if isinstance(value, Future):
                summary = value.result()
            else:
                summary = facts.constant_summary(value, self.sample) or value_summary(value, self.sample)
            if name:
                self._digests[name] = summary["digest"]
            summaries.append({"name": name, **summary})
        self._steps += 1
        return {
            "type": "step",
            "path": list(path),
            "step": step.index,
            "name": step.name,
            "op_type": step.op_type,
            "domain": step.domain,
            "since_version": step.since_version,
            "inputs": inputs,
            "outputs": summaries,
        }

    def _footer_record(self, outputs: Mapping[str, Any]) -> dict[str, Any]:
        described = []
        for name, value in outputs.items():
            described.append({"name": name, **value_identity(value)})
        return {"type": "footer", "finished": utc_now(), "steps": self._steps, "outputs": described}

    def _emit(self, record: dict[str, Any]) -> None:
        line = seal_record(record, self._seq, self._prev)
        digest = record[digest_field(record)]
        if record["type"] == "footer":
            self.run_digest = digest
            if self._sign_key is not None:
                record["signature"] = sign_digest(self._sign_key, digest).to_json()
                line = canonical_json(record)
        line += b"\n"
        if self._file is not None:
            self._file.write(line)
            self._file.flush()  # each line reaches the OS at once: a crash leaves a valid prefix
        if self._keep:
            self.records.append(record)
        self._seq += 1
        self._prev = digest

