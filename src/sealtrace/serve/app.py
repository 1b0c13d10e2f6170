"""The HTTP shell: a FastAPI app speaking the Open Inference Protocol v2 over an InferenceService.

Endpoints (docs/serving.md): health, server and model metadata, Triton's model configuration and
statistics, inference (JSON tensors, the binary tensor data extension, gzip and deflate bodies both
ways), ledger proofs, Prometheus metrics, and the ``/ledger`` page. Every error is
``{"error": "..."}`` with a 4xx status naming what was wrong (5xx only for the server's own failures:
503 when the ledger cannot make a record durable, 500 for a bug). A 200 to an inference request is
sent only once its record is durable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from sealtrace import __version__
from sealtrace.errors import SealtraceError
from sealtrace.ledger import LedgerError, LedgerUnavailableError, NotCoveredError, NotInLedgerError
from sealtrace.serve.encoding import decode_content, encode_content, request_coding, response_coding
from sealtrace.serve.metrics import InferenceStatistics, RequestTimer, ServeMetrics
from sealtrace.serve.page import ledger_page
from sealtrace.serve.protocol import (
    HEADER_LENGTH,
    NotFoundError,
    PayloadTooLargeError,
    ProtocolError,
    error_body,
    json_too_large,
)
from sealtrace.serve.replay import ReplayJob, ReplayResult
from sealtrace.serve.service import InferenceService
from sealtrace.serve.tokens import TokenTable

log = logging.getLogger("sealtrace.serve")

DEFAULT_MAX_BODY = 64 << 20
# Parsed JSON takes up to about 16 times its size (a Python float per number, then the array), so a
# JSON part has a smaller limit than binary tensor data, which is read as it lies.
DEFAULT_MAX_JSON = 8 << 20
SERVER_NAME = "sealtrace"
INFER_THREADS = "sealtrace-infer"  # the name prefix of the threads that run requests
EXTENSIONS = ["binary_tensor_data", "model_configuration", "statistics", "sealtrace_ledger"]
T = TypeVar("T")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class AuthError(ProtocolError):
    status = 401


class BodyLimit:
    """ASGI middleware: a body whose Content-Length exceeds the limit is answered 413 before one byte
    of it is read (the JSON limit for a body that is all JSON, without the binary extension's
    header); a body without one (chunked) is cut off at the limit by :func:`read_body`."""

    def __init__(self, app: ASGIApp, limit: int, json_limit: int) -> None:
        self.app = app
        self.limit = limit
        self.json_limit = json_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            length = headers.get(b"content-length", b"")
            message = None
            if length.isdigit() and int(length) > self.limit:
                message = f"body: {int(length)} bytes, more than the server accepts ({self.limit}; see --max-body)"
            elif length.isdigit() and int(length) > self.json_limit and HEADER_LENGTH.lower().encode() not in headers:
                message = json_too_large(int(length), self.json_limit)
            if message is not None:
                body = error_body(message)
                await send({"type": "http.response.start", "status": 413, "headers": [
                    (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


async def read_body(request: Request, limit: int, json_limit: int) -> bytes:
    """The request body, refused (413) as soon as it grows past ``limit`` bytes, or past
    ``json_limit`` for a body that is all JSON (no binary extension header)."""
    binary = request.headers.get(HEADER_LENGTH) is not None
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if not binary and size > json_limit:
            raise PayloadTooLargeError(json_too_large(f"more than {json_limit}", json_limit))
        if size > limit:
            raise PayloadTooLargeError(f"body: more than the server accepts ({limit} bytes; see --max-body)")
        parts.append(chunk)
    return b"".join(parts)


def _json(document: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(document), status_code=status, media_type="application/json")


def _document(document: Any) -> Response:
    """A ledger document in exactly the bytes `sealtrace ledger prove` writes (sorted keys, indent 2)."""
    text = json.dumps(document, indent=2, sort_keys=True).encode("ascii") + b"\n"
    return Response(text, media_type="application/json")


def _error(message: str, status: int, headers: dict[str, str] | None = None) -> Response:
    return Response(error_body(message), status_code=status, media_type="application/json", headers=headers)


# -- the OpenAPI description of the inference request (the route reads the raw body itself) ---------
_PARAMETERS = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}
_TENSOR_SCHEMA = {
    "type": "object",
    "required": ["name", "shape", "datatype"],
    "properties": {
        "name": {"type": "string"},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "datatype": {"type": "string", "enum": ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16",
                                                "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES", "BF16"]},
        "parameters": _PARAMETERS,
        "data": {"type": "array"},
    },
}
_INFER_REQUEST = {
    "type": "object",
    "required": ["inputs"],
    "properties": {
        "id": {"type": "string"},
        "parameters": _PARAMETERS,
        "inputs": {"type": "array", "items": _TENSOR_SCHEMA},
        "outputs": {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}, "parameters": _PARAMETERS}}},
    },
}
_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}
_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"description": what, "content": {"application/json": {"schema": _ERROR}}}
    for status, what in ((400, "Bad request (names the field)"), (401, "Missing or unknown bearer token"),
                         (404, "Unknown model"), (413, "Body too large"), (503, "Ledger unavailable"))
}
_INFER_OPENAPI = {
    "requestBody": {"required": True, "content": {
        "application/json": {"schema": _INFER_REQUEST},
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
    }},
}


_LEDGER_STATUS: tuple[tuple[type[LedgerError], int], ...] = (
    (LedgerUnavailableError, 503),  # the server's failure: the record could not be made durable
    (NotCoveredError, 409),
    (NotInLedgerError, 404),
)


def error_status(exc: SealtraceError) -> int:
    """The HTTP status of an error a request met (docs/serving.md): the protocol's own, the ledger's
    (``_LEDGER_STATUS``), else 400 for bad input (exit code 2) and 422 for a check that failed (exit 1).
    The error responses and the ``sealtrace_requests_total`` metric both take it from here."""
    if isinstance(exc, ProtocolError):
        return exc.status
    for kind, status in _LEDGER_STATUS:
        if isinstance(exc, kind):
            return status
    # Feeds the model refuses (InputError), a kernel that fails on these values: the request's fault.
    return 400 if exc.exit_code == 2 else 422


# -- the error mapping: every error is {"error": "..."} with error_status's status -----------------------
async def _protocol_error(_: Request, exc: ProtocolError) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, AuthError) else None
    return _error(str(exc), error_status(exc), headers)


async def _ledger_error(_: Request, exc: LedgerError) -> Response:
    if isinstance(exc, LedgerUnavailableError):
        log.error("ledger unavailable: %s", exc)
        return _error(f"ledger unavailable: {exc}", error_status(exc))
    return _error(str(exc), error_status(exc))


async def _sealtrace_error(_: Request, exc: SealtraceError) -> Response:
    return _error(" ".join(str(exc).split()), error_status(exc))


async def _http_error(_: Request, exc: StarletteHTTPException) -> Response:
    return _error(str(exc.detail), exc.status_code)


async def _validation_error(_: Request, exc: RequestValidationError) -> Response:
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()))
    return _error(f"{where}: {first.get('msg', 'invalid')}", 400)


async def _internal_error(_: Request, exc: Exception) -> Response:
    log.exception("internal error")
    return _error(f"internal error: {type(exc).__name__}", 500)


class _Endpoints:
    """What the routes share (the service, its metrics, the executor that runs their blocking calls,
    the bearer tokens), with one method per route."""

    def __init__(self, service: InferenceService, tokens: TokenTable | None, max_body: int, max_json: int,
                 metrics_auth: bool, health_auth: bool, threads: int | None, close_service: bool) -> None:
        self.service = service
        self.ledger = service.ledger
        self.tokens = tokens
        self.max_body = max_body
        self.max_json = max_json
        self.metrics_auth = metrics_auth
        self.health_auth = health_auth
        self.close_service = close_service
        self.metrics = ServeMetrics(service)
        self.statistics = {name: InferenceStatistics(name, model.version) for name, model in service.models.items()}
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix=INFER_THREADS)
        self.is_ready = True
        service.on_replay.append(self.replayed)

    def replayed(self, job: ReplayJob, result: ReplayResult) -> None:
        self.metrics.replayed(job.model, result.verdict)

    @contextlib.asynccontextmanager
    async def lifespan(self, _: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            self.is_ready = False
            # uvicorn has waited --timeout-graceful-shutdown for in-flight requests: a run still going
            # is abandoned (its request is not answered, so not recorded) rather than waited for.
            self.executor.shutdown(wait=False, cancel_futures=True)
            if self.close_service:
                await asyncio.get_running_loop().run_in_executor(None, self.service.close)
                log.info("shutdown: ledger closed (final tree head signed)")

    async def blocking(self, function: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, function, *args)

    def principal(self, request: Request, required: bool = True) -> str | None:
        if self.tokens is None or not required:
            return None
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        name = self.tokens.principal(token.strip()) if scheme.lower() == "bearer" else None
        if name is None:
            raise AuthError("authorization: a valid bearer token is required (Authorization: Bearer TOKEN)")
        return name

    def served(self, name: str, version: str | None = None) -> Any:
        model = self.service.model(name)
        if model is None:
            raise NotFoundError(f"model {name[:128]!r} is not served; served models: {', '.join(self.service.models)}")
        if version is not None and version != model.version:
            raise NotFoundError(f"model {name!r} has no version {version[:40]!r} (its version is {model.version})")
        return model

    # -- health and metadata --------------------------------------------------------------------------
    async def live(self, request: Request) -> Response:
        self.principal(request, self.health_auth)
        return _json({"live": True})

    async def ready(self, request: Request) -> Response:
        self.principal(request, self.health_auth)
        return _json({"ready": True}) if self.is_ready else _error("shutting down", 503)

    async def server_metadata(self, request: Request) -> Response:
        self.principal(request)
        return _json({"name": SERVER_NAME, "version": __version__, "extensions": EXTENSIONS})

    async def model_metadata(self, request: Request, name: str, version: str | None = None) -> Response:
        self.principal(request)
        return _json(self.served(name, version).metadata(self.service.audit))

    async def model_ready(self, request: Request, name: str, version: str | None = None) -> Response:
        self.principal(request, self.health_auth)
        model = self.served(name, version)
        return _json({"name": model.name, "ready": self.is_ready}, 200 if self.is_ready else 503)

    async def model_config(self, request: Request, name: str, version: str | None = None) -> Response:
        self.principal(request)
        return _json(self.served(name, version).config(self.service.audit))

    async def model_statistics(self, request: Request, name: str | None = None, version: str | None = None) -> Response:
        """Triton's statistics extension: every model's, or one model's (of its one version)."""
        self.principal(request)
        names = list(self.statistics) if name is None else [self.served(name, version).name]
        return _json({"model_stats": [self.statistics[n].to_json() for n in names]})

    async def repository_index(self, request: Request) -> Response:
        self.principal(request)
        return _json([{"name": m.name, "version": m.version, "state": "READY"} for m in self.service.models.values()])

    # -- inference --------------------------------------------------------------------------------------
    async def infer(self, request: Request, name: str, version: str | None = None) -> Response:
        started = time.perf_counter()
        timer = RequestTimer()
        label = name if name in self.service.models else "_unknown"
        statistics = None  # the model's, once the request is known to be for a served model
        status = 500
        self.metrics.in_flight.inc()
        try:
            who = self.principal(request)
            model = self.served(name, version)
            statistics = self.statistics[model.name]
            coding = request_coding(request.headers.get("content-encoding"))
            body = await read_body(request, self.max_body, self.max_json)
            timer.lap("receive")
            answer = await self.blocking(self.decode_and_infer, model, body, coding,
                                         request.headers.get(HEADER_LENGTH), who, timer)
            receipt = await asyncio.wrap_future(answer.durable)
            content, headers = answer.response.body(receipt.index)
            binary = HEADER_LENGTH in headers
            accepted = response_coding(request.headers.get("accept-encoding"))
            if accepted is not None:
                content = await self.blocking(encode_content, content, accepted)
                headers["Content-Encoding"] = accepted
            headers["Vary"] = "Accept-Encoding"
            timer.lap("compute_output")
            status = 200
            return Response(content, media_type="application/octet-stream" if binary else "application/json",
                            headers=headers)
        except SealtraceError as exc:
            status = error_status(exc)
            raise
        finally:
            self.metrics.in_flight.dec()
            self.metrics.requests.labels(label, str(status)).inc()
            if status == 200:
                self.metrics.latency.labels(label).observe(time.perf_counter() - started)
            if statistics is not None:
                statistics.finished(timer, status == 200)

    def decode_and_infer(self, model: Any, body: bytes, coding: str | None, header_length: str | None,
                         who: str | None, timer: RequestTimer) -> Any:
        timer.lap("queue")
        request = self.service.decode(model, decode_content(body, coding, self.max_body), header_length, self.max_json)
        timer.lap("compute_input")
        answer = self.service.infer(model, request, who)
        timer.lap("compute_infer")
        return answer

    # -- the ledger -------------------------------------------------------------------------------------
    async def tree_head(self, request: Request, tree_size: int | None = Query(None, ge=1, lt=1 << 63)) -> Response:
        self.principal(request)
        head = await self.blocking(self.ledger.tree_head, tree_size)
        return _document(head.to_json())

    async def record(self, request: Request, record_id: str) -> Response:
        self.principal(request)
        index, body = await self.blocking(self.ledger.record, _record_id(record_id))
        return _document({"index": index, "record": body})

    async def attestation(self, request: Request, record_id: str) -> Response:
        self.principal(request)
        attested = await self.blocking(self.service.attestation, _record_id(record_id))
        return Response(attested.document(), media_type="application/json")

    async def inclusion(self, request: Request, record_id: str,
                        tree_size: int | None = Query(None, ge=1, lt=1 << 63)) -> Response:
        self.principal(request)
        return _document(await self.blocking(self.ledger.prove, _record_id(record_id), tree_size))

    async def consistency(self, request: Request, first: int = Query(..., ge=1, lt=1 << 63),
                          second: int | None = Query(None, ge=1, lt=1 << 63)) -> Response:
        self.principal(request)
        return _document(await self.blocking(self.ledger.prove_consistency, first, second))

    async def page(self, request: Request) -> Response:
        self.principal(request)
        html = await self.blocking(self.page_html)
        return HTMLResponse(html)

    def page_html(self) -> str:
        size = self.ledger.size
        recent = list(self.ledger.records(max(0, size - 25), size))[::-1]
        return ledger_page(self.service.summary(), recent, self.service.divergences(), list(self.service.models))

    # -- metrics ------------------------------------------------------------------------------------------
    async def prometheus(self, request: Request) -> Response:
        self.principal(request, self.metrics_auth)
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(await self.blocking(generate_latest, self.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def create_app(
    service: InferenceService,
    *,
    tokens: TokenTable | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    max_json: int = DEFAULT_MAX_JSON,
    metrics_auth: bool = False,
    health_auth: bool = False,
    threads: int | None = None,
    close_service: bool = True,
) -> FastAPI:
    """The app over ``service``. ``tokens``: bearer tokens required on inference, metadata and ledger
    endpoints (and on /metrics with ``metrics_auth``, on health with ``health_auth``). The app's
    lifespan closes the service on shutdown (drains replays, signs a final tree head) unless
    ``close_service`` is False."""
    endpoints = _Endpoints(service, tokens, max_body, min(max_json, max_body), metrics_auth, health_auth, threads,
                           close_service)
    app = FastAPI(title="sealtrace serve", version=__version__, lifespan=endpoints.lifespan,
                  description="Open Inference Protocol v2 with every answer recorded in a transparency ledger.",
                  docs_url=None, redoc_url=None)
    for kind, handler in ((ProtocolError, _protocol_error), (LedgerError, _ledger_error),
                          (SealtraceError, _sealtrace_error), (StarletteHTTPException, _http_error),
                          (RequestValidationError, _validation_error), (Exception, _internal_error)):
        app.exception_handler(kind)(handler)

    get, post = app.get, app.post
    get("/v2/health/live", tags=["health"])(endpoints.live)
    get("/v2/health/ready", tags=["health"], responses={503: _ERROR_RESPONSES[503]})(endpoints.ready)
    get("/v2", tags=["metadata"])(endpoints.server_metadata)
    # Every model route is there with and without a version (the order is the OpenAPI schema's).
    models = ("/v2/models/{name}/versions/{version}", "/v2/models/{name}")
    # Every model's statistics, before /v2/models/{name} would take "stats" for a model's name.
    get("/v2/models/stats", tags=["metadata"], responses=_ERROR_RESPONSES)(endpoints.model_statistics)
    for model in models:
        get(model, tags=["metadata"], responses=_ERROR_RESPONSES)(endpoints.model_metadata)
    for suffix, tag, endpoint in (("ready", "health", endpoints.model_ready),
                                  ("config", "metadata", endpoints.model_config),
                                  ("stats", "metadata", endpoints.model_statistics)):
        for model in models:
            get(f"{model}/{suffix}", tags=[tag], responses=_ERROR_RESPONSES)(endpoint)
    post("/v2/repository/index", tags=["metadata"])(endpoints.repository_index)
    for model in models:
        post(f"{model}/infer", tags=["inference"], openapi_extra=_INFER_OPENAPI, responses=_ERROR_RESPONSES)(endpoints.infer)
    get("/v2/ledger/tree-head", tags=["ledger"], responses=_ERROR_RESPONSES)(endpoints.tree_head)
    get("/v2/ledger/records/{record_id}", tags=["ledger"], responses=_ERROR_RESPONSES)(endpoints.record)
    get("/v2/ledger/records/{record_id}/attestation", tags=["ledger"], responses=_ERROR_RESPONSES)(endpoints.attestation)
    get("/v2/ledger/records/{record_id}/proof/inclusion", tags=["ledger"],
        responses=_ERROR_RESPONSES)(endpoints.inclusion)
    get("/v2/ledger/proof/consistency", tags=["ledger"], responses=_ERROR_RESPONSES)(endpoints.consistency)
    get("/ledger", tags=["ledger"], response_class=HTMLResponse)(endpoints.page)
    get("/metrics", tags=["metrics"])(endpoints.prometheus)

    app.state.service = service
    app.state.metrics = endpoints.metrics
    app.add_middleware(BodyLimit, limit=max_body, json_limit=endpoints.max_json)
    return app


def _record_id(value: str) -> str:
    if len(value) != 32 or not all(c in "0123456789abcdef" for c in value):
        raise NotFoundError(f"record id {value[:64]!r}: a record id is 32 lowercase hex digits")
    return value
