"""``sealtrace serve``: audited serving over the Open Inference Protocol v2 (docs/serving.md), and
``sealtrace serve-token``, which makes the bearer tokens it accepts."""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from sealtrace.cli import app
from sealtrace.cli._device import device_options
from sealtrace.errors import InputError

if TYPE_CHECKING:
    from sealtrace.backends import Backend


@app.command()
@click.argument("models", nargs=-1, required=True, type=click.Path(dir_okay=False), metavar="MODEL.seal [MORE.seal ...]")
@click.option("--name", "names", multiple=True, metavar="N",
              help="The name a model is served under (default: its file stem); one per container, in order.")
@click.option("--trust", multiple=True, type=click.Path(dir_okay=False), metavar="K.pub",
              help="Serve only containers signed by one of these keys (repeatable).")
@click.option("--sign", "sign_key", type=click.Path(dir_okay=False), metavar="KEY.pem",
              help="The Ed25519 key that signs the ledger's tree heads (and full-audit trails).")
@click.option("--attest-key", type=click.Path(dir_okay=False), metavar="KEY.pem",
              help="Sign in-toto attestations of the records' runs with this key (Ed25519 or ECDSA), served at "
                   "/v2/ledger/records/{id}/attestation (docs/supply-chain.md).")
@click.option("--ledger", "ledger", metavar="PATH.db|postgresql://...",
              help="The ledger (default: sealtrace-ledger.db beside the first container).")
@click.option("--backend", type=click.Choice(["reference", "onnxruntime", "torch"]), default=None,
              help="What answers: reference for --audit full; onnxruntime by default for deferred and io.")
@click.option("--audit", type=click.Choice(["full", "deferred", "io"]), default="deferred", show_default=True,
              help="full: per-op audit on the critical path; deferred: replayed on the reference backend "
                   "behind the answer; io: input and output digests only.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port (0: any free one).")
@click.option("--token-file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Bearer tokens (hashed; see `sealtrace serve-token`) required on inference, metadata and ledger "
                   "endpoints; the token's name is recorded as the principal.")
@click.option("--metrics-auth", is_flag=True, help="Require a token on /metrics too.")
@click.option("--health-auth", is_flag=True, help="Require a token on the health endpoints too.")
@click.option("--max-body", default="64MiB", show_default=True, metavar="SIZE",
              help="Largest request body; larger ones are refused (413) before they are read.")
@click.option("--max-json", default="8MiB", show_default=True, metavar="SIZE",
              help="Largest JSON part of a request (parsed JSON takes about 16x its size; binary tensor data is "
                   "read as it lies, up to --max-body).")
@click.option("--max-response", default="64MiB", show_default=True, metavar="SIZE",
              help="Largest response body; a request whose outputs would be larger is refused (413), before the "
                   "run where the outputs' declared shapes show it, and nothing is recorded.")
@click.option("--replay-workers", type=click.IntRange(min=1, max=64), default=1, show_default=True,
              help="Processes replaying deferred requests on the reference backend (at nice 19).")
@click.option("--replay-atol", type=float, default=1e-4, show_default=True, help="Parity tolerance of replays (absolute).")
@click.option("--replay-rtol", type=float, default=1e-3, show_default=True, help="Parity tolerance of replays (relative).")
@click.option("--replay-drain", type=click.FloatRange(min=0), default=10.0, show_default=True, metavar="SECONDS",
              help="On shutdown, how long to keep replaying; the rest resumes from the ledger on the next start.")
@click.option("--store-inputs/--no-store-inputs", default=None,
              help="Keep each request's inputs in the ledger for replays (default: on for full and deferred).")
@click.option("--retention", type=click.FloatRange(min=1), default=None, metavar="SECONDS",
              help="Remove stored inputs and trails unused for this long (records and the tree stay).")
@click.option("--head-every", type=click.IntRange(min=1), default=1000, show_default=True, metavar="N",
              help="Sign a tree head every N records ...")
@click.option("--head-interval", type=click.FloatRange(min=0.01), default=10.0, show_default=True, metavar="SECONDS",
              help="... or this long after the first unsigned record.")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Threads per run (ORT intra-op; reference BLAS).")
@device_options
@click.option("--timeout-graceful-shutdown", type=click.IntRange(min=0), default=30, show_default=True, metavar="SECONDS",
              help="On SIGTERM/SIGINT, how long in-flight requests may take to finish.")
@click.option("--ssl-keyfile", type=click.Path(dir_okay=False), help="TLS private key (uvicorn's option).")
@click.option("--ssl-certfile", type=click.Path(dir_okay=False), help="TLS certificate chain (uvicorn's option).")
@click.option("--ssl-keyfile-password", default=None, help="Password of the TLS key.")
@click.option("--ssl-ca-certs", type=click.Path(dir_okay=False), help="CA certificates to check client certificates with.")
@click.option("--ssl-cert-reqs", type=click.IntRange(0, 2), default=0, show_default=True,
              help="Client certificates: 0 none, 1 optional, 2 required (with --ssl-ca-certs).")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info",
              show_default=True)
def serve(
    models: tuple[str, ...], names: tuple[str, ...], trust: tuple[str, ...], sign_key: str | None,
    attest_key: str | None, ledger: str | None, backend: str | None, audit: str, host: str, port: int, token_file: str | None,
    metrics_auth: bool, health_auth: bool, max_body: str, max_json: str, max_response: str, replay_workers: int, replay_atol: float,
    replay_rtol: float, replay_drain: float, store_inputs: bool | None, retention: float | None,
    head_every: int, head_interval: float, threads: int | None, device: str | None, gpu_precision: str | None,
    timeout_graceful_shutdown: int, ssl_keyfile: str | None, ssl_certfile: str | None, ssl_keyfile_password: str | None,
    ssl_ca_certs: str | None, ssl_cert_reqs: int, log_level: str,
) -> None:
    """Serve sealed MODELs over the Open Inference Protocol v2 (the KServe/Triton REST protocol), with
    every answer recorded in a transparency ledger before it is sent (docs/serving.md).

    SIGTERM or SIGINT stops it gracefully: in-flight requests finish, replays drain (or resume on the
    next start), a final tree head is signed, and the exit code is 0. A second signal stops at once.
    """
    try:
        import uvicorn

        from sealtrace.parity.tolerance import Tolerance
        from sealtrace.serve import InferenceService, ServeConfig, create_app
        from sealtrace.serve.app import INFER_THREADS
        from sealtrace.serve.tokens import TokenTable
    except ImportError as exc:
        raise InputError(f"serve needs its extra ({exc.name} is missing): pip install 'sealtrace[serve]'") from None
    from sealtrace.limits import parse_size

    if (ssl_keyfile is None) != (ssl_certfile is None):
        raise InputError("TLS needs both --ssl-certfile and --ssl-keyfile")
    if ssl_certfile and ssl_keyfile:
        _check_tls(ssl_certfile, ssl_keyfile, ssl_keyfile_password, ssl_ca_certs)
    limit = parse_size(max_body, "--max-body")
    json_limit = parse_size(max_json, "--max-json")
    response_limit = parse_size(max_response, "--max-response")
    tokens = TokenTable.load(token_file) if token_file else None
    logging.basicConfig(level=getattr(logging, log_level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serving: str | Backend | None = backend
    if device is not None or gpu_precision is not None:
        from sealtrace.backends import make_backend
        from sealtrace.serve.service import DEFAULT_BACKEND

        chosen = backend or DEFAULT_BACKEND[audit]
        made = make_backend(chosen, threads, device=device, gpu_precision=gpu_precision)  # refused here if it cannot be
        # Torch: one backend on the device, shared by the models (it keeps each Plan's weights there).
        # Others run on the CPU anyway and stay named, so deferred replays can re-create them.
        serving = made if chosen == "torch" else backend
    listener = _listen(host, port)  # before the models load: a taken port fails at once
    location = ledger or str(Path(models[0]).resolve().parent / "sealtrace-ledger.db")
    config = ServeConfig(
        models=list(models), names=list(names), ledger=location, trust=list(trust), sign_key=sign_key,
        audit=audit, backend=serving, threads=threads, replay_workers=replay_workers,
        tolerance=Tolerance(replay_atol, replay_rtol), store_inputs=store_inputs, head_every=head_every,
        head_interval=head_interval, retention=retention, replay_drain_seconds=replay_drain,
        max_response=response_limit, attest_key=attest_key,
    )
    try:
        service = InferenceService(config)
    except BaseException:
        listener.close()
        raise
    try:
        web = create_app(service, tokens=tokens, max_body=limit, max_json=json_limit, metrics_auth=metrics_auth,
                         health_auth=health_auth)
        bound = listener.getsockname()
        scheme = "https" if ssl_certfile else "http"
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        for model in service.models.values():
            click.echo(f"model {model.name}: {model.session.origin.provenance()}; on {model.backend_name}, "
                       f"audit {audit}", err=True)
        if sign_key is None:
            click.echo("note: no --sign key: tree heads are not signed, so nothing can be proven yet", err=True)
        if tokens is None and host not in ("127.0.0.1", "localhost", "::1"):
            click.echo(f"warning: listening on {host} without --token-file: anyone who reaches it may infer", err=True)
        click.echo(f"ledger {location}: {service.ledger.size} records", err=True)
        click.echo(f"serving on {scheme}://{shown}:{bound[1]}", err=True)
        server = _graceful_server(uvicorn.Config(
            web, log_level=log_level, timeout_graceful_shutdown=timeout_graceful_shutdown, lifespan="on",
            ssl_keyfile=ssl_keyfile, ssl_certfile=ssl_certfile, ssl_keyfile_password=ssl_keyfile_password,
            ssl_ca_certs=ssl_ca_certs, ssl_cert_reqs=ssl_cert_reqs, access_log=False, server_header=False,
        ))
        server.run(sockets=[listener])
    finally:
        service.close()  # a no-op after the app's lifespan closed it; here for a start-up that failed
        listener.close()
    click.echo("stopped: ledger closed with a final signed tree head" if sign_key else "stopped", err=True)
    abandoned = [t for t in threading.enumerate() if t.name.startswith(INFER_THREADS) and t.is_alive()]
    if abandoned:
        # A run past the grace period cannot be interrupted, and Python would wait for its thread at
        # exit: its request was never answered, and the ledger is closed, so nothing is lost by going.
        click.echo(f"stopped with {len(abandoned)} run(s) still going past --timeout-graceful-shutdown "
                   "(not answered, not recorded)", err=True)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(0)


def _graceful_server(config: Any) -> Any:
    """uvicorn's server, save that a stop by SIGTERM or SIGINT is a normal exit (0, with the
    `stopped` line): uvicorn re-raises the signal once it has shut down, which makes a graceful stop
    look like a kill (exit 143) to systemd, Kubernetes and shells. A second signal stops at once."""
    import uvicorn

    class GracefulServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self.should_exit:
                self.force_exit = True
            self.should_exit = True

    return GracefulServer(config)


# PEM certificate chains and keys are kilobytes; a larger file is not one.
MAX_TLS_FILE = 1 << 20


def _check_tls(certfile: str, keyfile: str, password: str | None, ca_certs: str | None) -> None:
    """Load the TLS files as uvicorn will, before anything starts: a missing, unreadable or
    mismatched certificate or key is bad input (exit 2), not an error inside the server."""
    import ssl

    from sealtrace.limits import read_regular_file

    for option, path in (("--ssl-certfile", certfile), ("--ssl-keyfile", keyfile), ("--ssl-ca-certs", ca_certs)):
        if path is not None:  # regular files of bounded size: /dev/zero would make OpenSSL read forever
            read_regular_file(path, f"{option} PEM file", max_bytes=MAX_TLS_FILE)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(certfile, keyfile, password)
        if ca_certs is not None:
            context.load_verify_locations(ca_certs)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise InputError(f"--ssl-certfile {certfile} / --ssl-keyfile {keyfile}: not a usable PEM certificate "
                         f"and key ({exc})") from None


def _listen(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        listener = socket.socket(family, kind, proto)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(2048)
    except OSError as exc:
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    listener.set_inheritable(True)
    return listener


@app.command("serve-token")
@click.argument("name")
@click.option("--token-file", required=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="The token file `serve --token-file` reads (created 0600 when missing; only hashes are stored).")
def serve_token(name: str, token_file: str) -> None:
    """Make a bearer token for NAME (the principal its requests are recorded under); print it once."""
    from sealtrace.serve.tokens import add_token

    token = add_token(token_file, name)
    click.echo(token)
    click.echo(f"added {name!r} to {token_file} (only its SHA-256 is stored: keep the token now)", err=True)
