"""The audit recorder: a StepObserver that writes the hash-chained log as the run goes.

The executor's thread does as little as it can: it hands each step's output arrays to a worker
thread (:mod:`sealtrace.audit.pipeline`) and carries on; that hand-off takes no lock. The worker
hashes every output in full, summarizes it, writes the record's canonical JSON from a per-step
template (:mod:`sealtrace.audit.entries`), chains it, and writes the lines it has made whenever it
has caught up (at least every 50 ms once the run has gone on for 50 ms), flushing them, so a crash leaves a valid
prefix that verification reports as truncated. The pipe between them is bounded in steps and
bytes, so the recorder never holds more tensors alive than the bound allows.

The worker is woken only when the pipe is half full, at the end, or every 50 ms: much of its work
is Python, which takes turns with the executor for the GIL at a thread switch a turn. It is not
started at all before the pipe is half full or the run has gone on for 50 ms: a shorter run is
recorded on its own thread when it ends (:class:`~sealtrace.audit.pipeline.BackgroundObserver`).
When the worker still falls behind (:data:`AHEAD_BYTES` pending), the executor hands large outputs
(:data:`PARALLEL_MIN_BYTES`) to helper threads too; the worker takes back any the helpers have not
started, so no thread waits on another while there is hashing to do.

Holding references to outputs until they are hashed is safe: the executor never mutates an array
after producing it (kernels may return views of their inputs, which are equally immutable).
Outputs of steps a backend marks ``constant`` are the same read-only arrays on every run: their
entries are made once and found again by identity.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import uuid
import weakref
from collections.abc import Mapping
from datetime import UTC, datetime
from operator import is_
from pathlib import Path
from typing import IO, Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sealtrace import __version__
from sealtrace.audit.entries import Entry, StepTemplate, tensor_entry
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
    DEFAULT_SAMPLE,
    GENESIS,
    digest_field,
    format_for,
    seal_record,
    value_digest,
    value_identity,
    value_summary,
)
from sealtrace.backends.base import Backend
from sealtrace.digest import DIGEST_ALGORITHMS, SHA256, canonical_json, hasher
from sealtrace.hashpool import HashJob, default_helpers, helpers
from sealtrace.plan.events import StepEvent
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
        self._weight_digests: dict[str, dict[str, str | None]] = {}  # per digest algorithm
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
        self._owned_entries: dict[tuple[Any, ...], Entry] = {}
        # Entries of constant steps' outputs, by the array's identity; a weak reference tells
        # whether the id still names that array (the backend owns it; the cache keeps it not alive).
        self._constant_entries: dict[tuple[int, int, str], tuple[weakref.ref[Any], Entry]] = {}
        self._templates: dict[int, StepTemplate] = {}
        # Subgraph paths as canonical JSON, kept across runs (If branches and loop bodies run
        # under the same few paths every run); bounded, since a loop's paths count its iterations.
        self.paths: dict[tuple[str, ...], str] = {(): "[]"}
        # Per constant step: (its inputs' digests, (sample size, digest algorithm), weak references to its outputs,
        # its record's text up to its outputs (path, prev, seq and the template's rest follow), its digests).
        self.constant_records: dict[
            int,
            tuple[tuple[str | None, ...], tuple[int, str], tuple[Any, ...], str, tuple[tuple[str, str | None], ...]],
        ] = {}

    def template(self, step: Step) -> StepTemplate:
        """The step's record template (made once per Plan; the Plan keeps its steps alive)."""
        template = self._templates.get(id(step))
        if template is None:
            template = self._templates[id(step)] = StepTemplate(step)
        return template

    def owned_entry(self, value: np.ndarray, sample: int, algorithm: str = SHA256) -> Entry | None:
        """The entry of a read-only view of an array the Plan owns, made once per Plan; None for
        any other array (fresh outputs are always hashed)."""
        base = value.base
        if base is None or self.owned.get(id(base)) is not base:
            return None
        key = (id(base), value.__array_interface__["data"][0], value.shape, value.strides, value.dtype.str, sample, algorithm)
        entry = self._owned_entries.get(key)
        if entry is None:
            entry = self._owned_entries[key] = tensor_entry(value, sample, algorithm)
        return entry

    def constant_entry(self, value: Any, sample: int, algorithm: str = SHA256) -> Entry:
        """The entry of an output of a constant step: the same object, with the same bytes, on
        every run of the backend that made it, so its entry is made once."""
        if type(value) is not np.ndarray or value.flags.writeable:
            return tensor_entry(value, sample, algorithm)  # not the read-only array the contract promises
        key = (id(value), sample, algorithm)
        found = self._constant_entries.get(key)
        if found is not None and found[0]() is value:
            return found[1]
        entry = tensor_entry(value, sample, algorithm)
        entries = self._constant_entries

        def forget(_: Any, key: tuple[int, int, str] = key) -> None:
            entries.pop(key, None)

        entries[key] = (weakref.ref(value, forget), entry)
        return entry

    def weight_digests(self, algorithm: str = SHA256) -> dict[str, str | None]:
        """Digests of every initializer (subgraphs' included), computed once per Plan and algorithm."""
        with self._lock:
            found = self._weight_digests.get(algorithm)
            if found is None:
                found = self._weight_digests[algorithm] = {
                    k: value_digest(v, algorithm) for k, v in self.initializers.items()
                }
            return found


# Outputs at least this large go to the helper threads when the worker is AHEAD_BYTES behind
# (half the default bound: the worker is woken at half full, so when it alone is not keeping up).
# On models whose audit one spare core can carry, a third busy thread on two cores and its GIL
# turns cost more than they give; where hashing outruns a core, both cores hash.
PARALLEL_MIN_BYTES = 256 << 10
AHEAD_BYTES = 4 << 20
_PATHS_KEPT = 4096  # subgraph paths whose JSON a Plan's facts keep


def _no_ref() -> None:
    """Stands for the weak reference of an omitted (None) output."""


def _call(ref: Any) -> Any:
    """What a weak reference (or :func:`_no_ref`) refers to now."""
    return ref()


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
    (``audited_run`` fills it in). ``digest`` is the log's digest algorithm: "sha256"
    (the default, FIPS 180-4; a v1 log) or "blake3" (a v2 log naming it; docs/audit-log.md). One
    recorder records one run.

    Memory: the recorder holds at most ``max_pending_bytes`` of tensors (and ``max_pending_steps``
    steps) not yet hashed; past that, the run waits for it. ``hash_threads`` helper threads
    (default: half the CPUs, at most 8; 0 for none) hash outputs of 256 KiB and more in parallel
    with the worker whenever it is 4 MiB behind.
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
        digest: str = SHA256,
    ) -> None:
        # The worker is woken when the pipe is half full, at the end, or every 50 ms, not for every
        # few steps: what it does besides claiming the helpers' results is mostly Python, which on
        # models of small steps only takes turns with the executor for the GIL, each turn costing
        # a thread switch; done in one stretch it costs no switch at all.
        super().__init__(
            max_pending_bytes, max_pending_steps, batch_items=1 << 30, batch_bytes=max(1, max_pending_bytes // 2)
        )
        if sample < 0:
            raise ValueError("sample must be >= 0")
        if digest not in DIGEST_ALGORITHMS:
            raise ValueError(f"unknown digest algorithm {digest!r} (known: {', '.join(DIGEST_ALGORITHMS)})")
        self._new_hash = hasher(digest)  # a missing package fails here, before the run, not on the worker
        self.digest = digest
        threads = default_helpers() if hash_threads is None else hash_threads
        self._helpers = helpers(threads) if threads > 0 else None
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
        self._direct: dict[int, tuple[int, ...]] = {}
        self._lines: list[str] = []  # made, not yet written

    @property
    def steps(self) -> int:
        """Step records written so far (all of them once the run ended)."""
        return self._steps

    # -- StepObserver (executor thread) -------------------------------------------------------

    def on_run_start(self, plan: Plan, feeds: Mapping[str, Any], backend: Backend) -> None:
        if self._state != "new":
            raise AuditWriteError("an AuditRecorder records one run; make a new one for each run")
        self._facts = plan_facts(plan)
        self._direct = self._facts.direct_inputs
        self._start()
        backend_info = {
            "name": backend.name,
            "version": backend.version,
            "per_step": bool(getattr(backend, "per_step", False)),
        }
        numerics = getattr(backend, "numerics_info", None)
        if numerics is not None:
            backend_info["numerics"] = dict(numerics)
        device = getattr(backend, "device_info", None)  # read now: the settings in force for this run
        if device is not None:
            backend_info["device"] = dict(device)
        feed_values = {info.name: feeds.get(info.name) for info in plan.inputs}
        self._submit(("header", plan, feed_values, backend_info, utc_now()), nbytes_of(feed_values.values()))

    def on_step(self, event: StepEvent) -> None:
        # The executor waits for this: hand over references and the byte count, nothing more.
        step = event.step
        outputs = event.outputs
        positions = self._direct.get(id(step))
        direct = {i: event.inputs[i] for i in positions} if positions else None
        if getattr(event, "constant", False):
            # The backend keeps these arrays for as long as it lives: they cost no memory here.
            self._pipe.put((event.path, step, outputs, direct, True), nbytes_of(direct.values()) if direct else 0)
            return
        nbytes = 0
        for value in outputs:
            if type(value) is np.ndarray:
                nbytes += value.nbytes
            elif type(value) is list:
                nbytes += nbytes_of(value)
        if direct:
            nbytes += nbytes_of(direct.values())
        helpers = self._helpers
        if helpers is not None and nbytes >= PARALLEL_MIN_BYTES and self._pipe.pending_bytes >= AHEAD_BYTES:
            # The worker is behind: large outputs go to the helpers as well. The pipe's bound
            # covers them (they are counted until the worker is done with the step).
            self._pipe.wait_for_room(nbytes)
            jobs = []
            for value in outputs:
                if type(value) is np.ndarray and value.nbytes >= PARALLEL_MIN_BYTES and value.flags.writeable:
                    job = HashJob(functools.partial(tensor_entry, value, self.sample, self.digest))
                    helpers.submit(job)
                    jobs.append(job)
                else:
                    jobs.append(value)
            outputs = jobs
        self._pipe.put((event.path, step, outputs, direct, False), nbytes)

    def on_run_end(self, outputs: Mapping[str, Any]) -> None:
        # No flush: waking the worker here would only make it contend for the GIL with _finish,
        # which finishes the records on this thread when the worker is idle, and wakes it when not.
        self._submit(("footer", dict(outputs)), nbytes_of(outputs.values()))
        self._finish()

    # -- worker thread -----------------------------------------------------------------------

    def _close(self, finished: bool) -> None:
        if self._owns_file and self._file is not None:
            self._file.close()

    def _describe(self) -> str:
        return f"audit log {self.path}" if self.path is not None else "audit log"

    def _handle(self, item: tuple[Any, ...]) -> None:
        if type(item[0]) is tuple:  # a step: (path, step, outputs, direct inputs, constant)
            self._step_line(*item)
        elif item[0] == "header":
            self._emit(self._header_record(*item[1:]))
        else:
            self._emit(self._footer_record(item[1]))

    def _drained(self) -> None:
        # One write for every line made since the last: a crash leaves whole lines up to here.
        if self._lines:
            data = "".join(self._lines).encode("ascii")
            self._lines.clear()
            if self._file is not None:
                self._file.write(data)
                self._file.flush()

    def _open(self) -> None:
        # On the worker: creating a file costs a noticeable part of a small model's run. A
        # failure ends the recording and is raised, as it is, when the run ends.
        if self.path is None:
            return
        try:
            self._file = self.path.open("wb" if self._overwrite else "xb")
        except FileExistsError:
            raise AuditLogExistsError(f"{self.path}: audit log exists (use --force to overwrite)") from None
        except OSError as exc:
            raise AuditWriteError(f"{self.path}: cannot create audit log ({exc.strerror})") from None
        self._owns_file = True

    def _header_record(
        self, plan: Plan, feeds: Mapping[str, Any], backend: dict[str, Any], started: str
    ) -> dict[str, Any]:
        assert self._facts is not None
        self._open()
        self._digests.update(self._facts.weight_digests(self.digest))
        inputs = []
        for name, value in feeds.items():
            summary = value_summary(value, self.sample, self.digest)
            self._digests[name] = summary["digest"]
            inputs.append({"name": name, **summary})
        header: dict[str, Any] = {"type": "header", "format": format_for(self.digest)}
        if self.digest != SHA256:
            header["digest_algorithm"] = self.digest
        return {
            **header,
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

    def _step_line(
        self,
        path: tuple[str, ...],
        step: Step,
        outputs: Any,
        direct: dict[int, Any] | None,
        constant: bool,
    ) -> None:
        # The worker's Python per step is what an audited run of small steps pays for (it shares
        # the GIL with the executor): lookups go through C-level map() where they can.
        facts = self._facts
        assert facts is not None
        template = facts._templates.get(id(step)) or facts.template(step)
        digests = self._digests
        if direct is None:
            known = tuple(map(digests.get, template.input_names))
        else:
            known = tuple(
                value_digest(direct[i], self.digest) if i in direct else digests.get(name)
                for i, name in enumerate(template.input_names)
            )
        sample = self.sample
        algorithm = self.digest
        where = facts.paths.get(path)
        if where is None:
            where = canonical_json(list(path)).decode("ascii")
            if len(facts.paths) < _PATHS_KEPT:
                facts.paths[path] = where
        if constant:
            # The record of a constant step is the same every run but for path, prev and seq.
            cached = facts.constant_records.get(id(step))
            if (
                cached is not None
                and cached[0] == known
                and cached[1] == (sample, algorithm)
                and all(map(is_, map(_call, cached[2]), outputs))
            ):
                digests.update(cached[4])
                self._add_line(f'{cached[3]},"path":{where},"prev":"{self._prev}","seq":{self._seq}{template.rest}')
                return
        inputs = ",".join(
            [
                null if d is None else '{"digest":"' + d + rest
                for d, (_, rest, null) in zip(known, template.inputs, strict=True)
            ]
        )
        entries = []
        for (name, name_json), value in zip(template.outputs, outputs, strict=True):
            if constant:
                head, tail, digest = facts.constant_entry(value, sample, algorithm)
            elif type(value) is HashJob:
                assert self._helpers is not None
                head, tail, digest = self._helpers.claim(value)
            elif type(value) is np.ndarray and not value.flags.writeable:
                head, tail, digest = facts.owned_entry(value, sample, algorithm) or tensor_entry(
                    value, sample, algorithm
                )
            else:
                head, tail, digest = tensor_entry(value, sample, algorithm)
            if name:
                digests[name] = digest
            entries.append(head + name_json + tail)
        outputs_json = ",".join(entries)
        if constant and all(v is None or (type(v) is np.ndarray and not v.flags.writeable) for v in outputs):
            text = template.head % (inputs, outputs_json)
            refs = tuple(_no_ref if v is None else weakref.ref(v) for v in outputs)
            produced = tuple((name, digests[name]) for name, _ in template.outputs if name)
            facts.constant_records[id(step)] = (known, (sample, algorithm), refs, text, produced)
        self._add_line(template.fmt % (inputs, outputs_json, where, self._prev, self._seq))

    def _add_line(self, body: str) -> None:
        """Chain a step record's body (its canonical JSON without its digest) and queue its line."""
        self._prev = digest = self._new_hash(body.encode("ascii")).hexdigest()
        line = '{"digest":"' + digest + '",' + body[1:] + "\n"
        self._lines.append(line)
        if self._keep:
            self.records.append(json.loads(line))
        self._steps += 1
        self._seq += 1

    def _footer_record(self, outputs: Mapping[str, Any]) -> dict[str, Any]:
        described = []
        for name, value in outputs.items():
            described.append({"name": name, **value_identity(value, self.digest)})
        return {"type": "footer", "finished": utc_now(), "steps": self._steps, "outputs": described}

    def _emit(self, record: dict[str, Any]) -> None:
        line = seal_record(record, self._seq, self._prev, self.digest)
        digest = record[digest_field(record)]
        if record["type"] == "footer":
            self.run_digest = digest
            if self._sign_key is not None:
                record["signature"] = sign_digest(self._sign_key, digest).to_json()
                line = canonical_json(record)
        self._lines.append(line.decode("ascii") + "\n")
        if record["type"] == "header":
            self._drained()  # the header reaches the file at once
        if self._keep:
            self.records.append(record)
        self._seq += 1
        self._prev = digest
