"""The audited inference service: served models + a ledger + (deferred audit) a replay queue.

A request goes: body -> feeds checked against the model (``protocol.parse_request``) -> ``Session.run``
-> record -> queued for a durable, group-committed append -> response, sent only once the record is
durable. Nothing here knows HTTP; :mod:`sealtrace.serve.app` is the FastAPI shell around it.

Audit modes (``ServeConfig.audit``):

- ``full``: the reference backend with the per-op audit log on the critical path; the log (the
  trail) is stored compressed in the ledger and the record names its run digest;
- ``deferred``: a fast backend answers; its record is replayed on the reference backend with the full
  audit by :class:`~sealtrace.serve.replay.ReplayQueue`, which appends a linked replay record;
- ``io``: input and output digests only.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from sealtrace.backends import Backend
from sealtrace.errors import InputError
from sealtrace.ledger import Ledger, LedgerEntry, Receipt, record_run
from sealtrace.ledger.records import AUDIT_MODES
from sealtrace.parity.tolerance import Tolerance
from sealtrace.provenance.attest import Attestation, attest_record
from sealtrace.serve.models import ServedModel, model_name_of, open_served_model
from sealtrace.serve.protocol import (
    EncodedResponse,
    InferenceRequest,
    NotFoundError,
    ProtocolError,
    declared_response_bytes,
    encode_response,
    parse_request,
)
from sealtrace.serve.replay import ReplayJob, ReplayQueue, ReplayResult, ReplaySpec, served_model_of
from sealtrace.signing import PrivateKey, load_signing_key

log = logging.getLogger("sealtrace.serve")

RECORD_ID = "record_id"
DEFAULT_MAX_RESPONSE = 64 << 20
LEDGER_INDEX = "ledger_index"
DEFAULT_BACKEND = {"full": "reference", "deferred": "onnxruntime", "io": "onnxruntime"}


@dataclass
class ServeConfig:
    """Everything ``sealtrace serve`` is told (docs/serving.md)."""

    models: Sequence[str]
    ledger: str
    names: Sequence[str] = ()
    trust: Sequence[str] = ()
    sign_key: str | None = None
    audit: str = "deferred"
    backend: str | Backend | None = None  # None: the audit mode's default
    threads: int | None = None
    replay_workers: int = 1
    tolerance: Tolerance = field(default_factory=Tolerance)
    store_inputs: bool | None = None  # None: stored for full and deferred (replays need them), not for io
    head_every: int = 1000
    head_interval: float = 10.0
    retention: float | None = None
    replay_drain_seconds: float = 10.0
    sample: int = 8  # values of each tensor a full-audit trail shows
    max_response: int = DEFAULT_MAX_RESPONSE  # bytes of one response body (413 past it; nothing recorded)
    attest_key: str | None = None  # signs the records' in-toto attestations (docs/supply-chain.md)

    def backend_for_serving(self) -> str | Backend:
        return self.backend if self.backend is not None else DEFAULT_BACKEND[self.audit]


@dataclass
class Answer:
    """A request that ran: its record is queued; the response waits for ``durable``."""

    model: ServedModel
    record_id: str
    durable: Future[Receipt]
    response: EncodedResponse


class InferenceService:
    """Opens the models and the ledger; answers requests; replays them (deferred audit); closes cleanly."""

    def __init__(self, config: ServeConfig) -> None:
        if config.audit not in AUDIT_MODES:
            raise InputError(f"--audit {config.audit!r}: choose one of {', '.join(AUDIT_MODES)}")
        if not config.models:
            raise InputError("serve needs at least one sealed container (MODEL.seal)")
        if config.names and len(config.names) != len(config.models):
            raise InputError(f"--name given {len(config.names)} time(s) for {len(config.models)} model(s): "
                             "give one per container, in order, or none")
        backend = config.backend_for_serving()
        backend_name = backend if isinstance(backend, str) else str(backend.name)
        if config.audit == "full" and backend_name != "reference":
            raise InputError(f"--audit full runs on the reference backend (the per-op audit is the reference "
                             f"run); --backend {backend_name} serves with --audit deferred or io")
        if config.audit == "deferred" and backend_name == "reference":
            raise InputError("--audit deferred replays the reference backend's run behind a faster backend: "
                             "serve with --backend onnxruntime or torch, or use --audit full")
        if config.attest_key is not None and config.audit == "io":
            raise InputError("--attest-key: --audit io records keep input and output digests only, no audit log "
                             "to attest; serve with --audit full or deferred")
        self.config = config
        self.audit = config.audit
        self._attester: PrivateKey | None = None
        if config.attest_key is not None:
            self._attester = load_signing_key(config.attest_key)
        self.store_inputs = config.store_inputs if config.store_inputs is not None else config.audit != "io"
        if config.audit == "deferred" and not self.store_inputs:
            raise InputError("--audit deferred needs the inputs stored (replays read them after a restart)")
        self.models: dict[str, ServedModel] = {}
        names = list(config.names) or [model_name_of(path) for path in config.models]
        for path, name in zip(config.models, names, strict=True):
            if name in self.models:
                raise InputError(f"two models named {name!r} ({self.models[name].path}, {path}); name them with --name")
            # A backend named by a string is made per model; a Backend object is shared (it caches per Plan).
            self.models[name] = open_served_model(path, name, backend, config.trust, config.threads)
        self._signer = None
        if config.sign_key is not None:
            from sealtrace.signing import load_private_key

            self._signer = load_private_key(config.sign_key)
        self.ledger = Ledger.open(config.ledger, signer=self._signer, head_every=config.head_every,
                                  head_interval=config.head_interval, retention=config.retention)
        self.started = time.time()
        self._closed = False
        self.replay: ReplayQueue | None = None
        self.on_replay: list[Any] = []  # callbacks (job, result) once a replay record is durable
        if config.audit == "deferred":
            try:
                self.replay = self._replay_queue(backend_name if isinstance(backend, str) else None)
            except BaseException:
                self.ledger.close()
                raise

    def _replay_queue(self, serving_backend: str | None) -> ReplayQueue:
        config = self.config
        spec = ReplaySpec(
            models=tuple((name, os.path.abspath(model.path)) for name, model in self.models.items()),
            trust=tuple(os.path.abspath(k) for k in config.trust),
            serving_backend=serving_backend,
            tolerance=config.tolerance,
            sign_key=os.path.abspath(config.sign_key) if config.sign_key else None,
        )
        queue = ReplayQueue(self.ledger, spec, config.replay_workers, on_result=self._replayed)
        known = served_model_of([(m.name, m.container_digest, m.plan_digest) for m in self.models.values()])
        queue.resume(known, self.ledger.size)
        return queue

    def _replayed(self, job: ReplayJob, result: ReplayResult) -> None:
        for callback in self.on_replay:
            callback(job, result)

    # -- answering ----------------------------------------------------------------------------------
    def model(self, name: str) -> ServedModel | None:
        return self.models.get(name)

    def decode(self, model: ServedModel, body: bytes, header_length: str | None,
               max_json: int | None = None) -> InferenceRequest:
        """The request, checked against the model (ProtocolError naming the field otherwise); a
        JSON part over ``max_json`` bytes is refused before it is parsed."""
        return parse_request(body, header_length, model.inputs, model.outputs, max_json)

    def infer(self, model: ServedModel, request: InferenceRequest, principal: str | None) -> Answer:
        """Run ``request`` and queue its record; the caller answers once ``Answer.durable`` resolves.

        Blocking (it runs the model): call it from a worker thread, not the event loop.
        """
        limit = self.config.max_response
        if (declared := declared_response_bytes(request, model.inputs, model.outputs)) > limit:
            raise ProtocolError(f"response: the outputs' declared shapes take {declared} bytes for these inputs, more "
                                f"than the server sends ({limit}; see --max-response)", status=413)
        entry = LedgerEntry(model.name, audit=self.audit, principal=principal, sample=self.config.sample,
                            sign_key=self._signer)  # fmt: skip
        run = record_run(model.session, request.inputs, entry)
        record, outputs = run.record, run.outputs
        # The response is encoded before the record is submitted: a request that fails after its run
        # (an output that cannot be encoded, one past --max-response) appends nothing. Only the
        # ledger index is filled in once the record is durable.
        response = encode_response(model.name, model.version, request, outputs, model.outputs,
                                   {RECORD_ID: record["id"], "audit": self.audit}, LEDGER_INDEX, limit)
        durable = self.ledger.submit(record, inputs=request.inputs if self.store_inputs else None, trail=run.trail)
        if self.replay is not None:
            queue, job = self.replay, ReplayJob(record["id"], model.name, record, request.inputs, outputs)
            durable.add_done_callback(lambda f: queue.put(job) if f.exception() is None else None)
        return Answer(model, record["id"], durable, response)

    def attestation(self, record_id: str) -> Attestation:
        """The in-toto attestation of a record's run, from the audit log the ledger keeps for it
        (NotFoundError where the server signs none, NotAttestableError where the record keeps no log)."""
        if self._attester is None:
            raise NotFoundError("this server signs no attestations (start it with --attest-key KEY.pem)")
        return attest_record(self.ledger, record_id, self._attester)

    # -- state for /ledger, metrics and health ---------------------------------------------------------
    @property
    def replay_backlog(self) -> int:
        return self.replay.backlog if self.replay is not None else 0

    @property
    def replay_restarts(self) -> int:
        return self.replay.stats.restarts if self.replay is not None else 0

    def divergences(self) -> list[Any]:
        return list(self.replay.divergences) if self.replay is not None else []

    def summary(self) -> Mapping[str, Any]:
        head = self.ledger.latest_tree_head()
        return {
            "ledger": self.ledger.ledger_id,
            "records": self.ledger.size,
            "latest_tree_head": head.to_json() if head else None,
            "audit": self.audit,
            "replay_backlog": self.replay_backlog,
            "replay_waiting": self.replay.waiting() if self.replay else {},
            "replay_restarts": self.replay_restarts,
            "replays": dict(self.replay.stats.by_verdict) if self.replay else {},
            "divergences": self.replay.stats.by_verdict.get("diverged", 0) if self.replay else 0,
        }

    def close(self) -> None:
        """Drain the replay queue (for up to ``replay_drain_seconds``; the rest resumes from the ledger
        on the next start), then close the ledger, which appends what is queued and signs a final head.
        Closing twice does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.replay is not None:
                left = self.replay.backlog
                if left:
                    log.info("shutdown: draining %d replay(s) for up to %gs", left, self.config.replay_drain_seconds)
                self.replay.close(self.config.replay_drain_seconds)
                if self.replay.backlog:
                    log.info("shutdown: %d replay(s) left in the ledger; they resume on the next start",
                             self.replay.backlog)
        finally:
            self.ledger.close()
