"""``sealtrace audit verify | audit show`` and ``sealtrace replay`` (record with ``run --audit``)."""

from __future__ import annotations

import json
import os
from typing import Any

import click
from rich.console import Console

from sealtrace.cli import app
from sealtrace.cli._device import device_options
from sealtrace.inputs import load_array, load_npz, parse_assignments

_model = click.option(
    "--container", "--model", "model", type=click.Path(dir_okay=False), metavar="MODEL.seal",
    help="The sealed container (or ONNX file) the run used.",
)  # fmt: skip
_input = click.option(
    "--input", "input_files", multiple=True, metavar="NAME=FILE.npy", help="One input of the run, from a .npy file."
)
_inputs = click.option(
    "--inputs", "npz_files", multiple=True, metavar="FILE.npz", help="Inputs of the run from a .npz archive."
)


def _read_inputs(input_files: tuple[str, ...], npz_files: tuple[str, ...]) -> dict[str, Any]:
    feeds: dict[str, Any] = {}
    for npz in npz_files:
        feeds.update(load_npz(npz))
    for name, path in parse_assignments(input_files, "--input").items():
        feeds[name] = load_array(path)
    return feeds


@app.group()
def audit() -> None:
    """Check and read audit logs (record one with `sealtrace run MODEL --audit LOG.jsonl`)."""


@audit.command("verify")
@click.argument("log", type=click.Path(dir_okay=False))
@_model
@_input
@_inputs
@click.option(
    "--trust", "trust", multiple=True, type=click.Path(dir_okay=False), metavar="KEY.pub",
    help="A trusted public key; repeat for several. Refuses (exit 1) a log not validly signed by one of them.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON (docs/cli.md, 'Verdicts').")
def verify(
    log: str, model: str | None, input_files: tuple[str, ...], npz_files: tuple[str, ...], trust: tuple[str, ...],
    as_json: bool,
) -> None:
    """Check LOG's hash chain and schema, and its link to a container, inputs and signer.

    Exit 1 names the first bad record (line number and what is wrong).
    """
    from sealtrace.audit.verify import verify_log
    from sealtrace.verdict import audit_verdict

    feeds = _read_inputs(input_files, npz_files)
    result = verify_log(log, model=model, inputs=feeds or None, trust=list(trust) or None)
    if as_json:
        first = result.problems[0] if result.problems else None
        shared = audit_verdict(
            log, first.line if first else None, first.message if first else None,
            result.run_digest if result.chain_intact else None, result.signed_by, result.signature_valid,
        )
        facts = {"records": len(result.records), "steps": len(result.steps), "notes": result.notes}
        click.echo(json.dumps({**facts, **shared}, indent=2, sort_keys=True))
    result.raise_if_failed()
    if as_json:
        return
    header = result.header or {}
    steps = len(result.steps)
    click.echo(f"verified {log}: {len(result.records)} records, {steps} step(s), run digest {result.run_digest}")
    if model is not None:
        click.echo(f"linked to {model}")
    for name in feeds:
        click.echo(f"input {name!r} matches the logged digest")
    if result.signature_valid:
        click.echo(f"signature valid (key {result.signed_by})")
    for note in result.notes:
        click.echo(note)
    if header and not steps:
        click.echo(f"note: backend {header['backend']['name']!r} reported graph outputs only (no step records)")


@audit.command("attest")
@click.argument("log", type=click.Path(dir_okay=False))
@click.option("--key", "key", required=True, type=click.Path(dir_okay=False), metavar="KEY.pem", help="The private key to sign with (Ed25519 or ECDSA).")
@click.option("-o", "--output", "output", required=True, type=click.Path(), help="The attestation to write (RUN.intoto.json).")
@click.option("--ledger-index", type=int, metavar="N", help="The run's index in a transparency ledger, to state it.")
@click.option("--force", is_flag=True, help="Replace the output file if it exists.")
def attest(log: str, key: str, output: str, ledger_index: int | None, force: bool) -> None:
    """Write LOG's run as an in-toto attestation (a DSSE envelope); LOG must verify (docs/supply-chain.md)."""
    from sealtrace.provenance.attest import attest_log

    written = attest_log(log, key, output, ledger_index=ledger_index, force=force)
    click.echo(
        f"wrote {output}: {written.subjects} output(s) attested, run digest {written.run_digest}, "
        f"signed by key {written.signed_by}"
    )


@audit.command("verify-attestation")
@click.argument("attestation", type=click.Path(dir_okay=False))
@click.option(
    "--trust", "trust", multiple=True, type=click.Path(dir_okay=False), metavar="KEY.pub",
    help="A trusted public key (Ed25519 or ECDSA); repeat for several. Required.",
)  # fmt: skip
@click.option("--log", "log", type=click.Path(dir_okay=False), help="The audit log it attests: check that the two agree.")
def verify_attestation_command(attestation: str, trust: tuple[str, ...], log: str | None) -> None:
    """Check ATTESTATION's signature and predicate, and with --log that LOG verifies and matches it."""
    from sealtrace.provenance.attest import verify_attestation

    checked = verify_attestation(attestation, trust, log=log)
    against = f"; matches {log}" if checked.log_checked else ""
    click.echo(
        f"verified {attestation}: run digest {checked.run_digest}, output(s) {', '.join(checked.outputs)}, "
        f"signed by key {checked.signed_by}{against}"
    )


@audit.command("show")
@click.argument("log", type=click.Path(dir_okay=False))
@click.option("--limit", type=click.IntRange(min=0), default=None, metavar="N", help="Show the first N step outputs only.")
def show(log: str, limit: int | None) -> None:
    """Print LOG's run facts and its steps (op, shapes, digests cut short, stats), fitted to the width.

    Only the verified part of a log is shown; a log that does not verify exits 1 after it, naming
    the first bad line.
    """
    from sealtrace.audit.log import read_lines
    from sealtrace.audit.show import (
        describe_device,
        describe_numerics,
        format_stats,
        step_rows,
        steps_renderable,
    )
    from sealtrace.audit.verify import verify_lines

    result = verify_lines(read_lines(log), log)
    # Only the verified prefix is shown: past the first bad line nothing can be trusted (or parsed).
    records = result.records
    console = Console(highlight=False, markup=False)  # names from the log are text, not markup
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=200, highlight=False, markup=False)  # piped to a file: room for the whole table
    if result.ok:
        status = "verified (chain intact)"
    elif result.chain_intact:
        status = f"NOT VERIFIED: chain intact, but {result.problems[0]}"
    else:
        status = f"NOT VERIFIED: {result.problems[0]}; showing the {len(records)} record(s) before it"
    header = records[0] if records and records[0].get("type") == "header" else None
    if header is not None:
        model = header["model"]
        backend = header["backend"]
        console.print(f"run {header['run_id']} started {header['started']} on {backend['name']} {backend['version']}")
        console.print(f"numerics: {describe_numerics(backend)}")
        if backend.get("device") is not None:
            console.print(f"device: {describe_device(backend['device'])}")
        linked = (
            f"container digest {model['container_digest']}" if model.get("container_digest")
            else f"sha256 {model['sha256']}" if model.get("sha256") else "no digest"
        )  # fmt: skip
        console.print(f"model: {model['kind']} {model.get('path') or '-'}")
        console.print(f"  {linked}")
        console.print(f"plan {header['plan_digest'][:16]}; {status}")
        for entry in header["inputs"]:
            console.print(
                f"input {entry['name']}: {entry.get('dtype', entry['kind'])} {entry.get('shape', '')} "
                f"{(entry['digest'] or '-')[:16]} {format_stats(entry.get('stats'))}"
            )
    else:
        console.print(status)
    rows = step_rows(records)
    shown = rows[:limit] if limit is not None else rows
    console.print(steps_renderable(shown, f"{log}: {len(rows)} step output(s)", console.width))
    footer = records[-1] if records and records[-1].get("type") == "footer" else None
    if footer is not None:
        # The key id is the signature's claim: only a key checks it (show takes none), so it is not shown as fact.
        console.print(f"{footer['steps']} step(s); run digest {footer['chain_head']}")
        if footer.get("signature"):
            console.print(f"signature claims key {footer['signature']['key_id']}, not checked (audit verify --trust)")
    result.raise_if_failed()


@app.command()
@click.argument("log", type=click.Path(dir_okay=False))
@_model
@_input
@_inputs
@click.option(
    "--trust", "trust", multiple=True, type=click.Path(dir_okay=False), metavar="KEY.pub",
    help="A trusted public key; repeat for several. Refuses (exit 1) a model or a log not validly signed by one of them.",
)  # fmt: skip
@click.option("--backend", type=click.Choice(["reference", "onnxruntime", "torch"]), default="reference",
              show_default=True, help="The backend to replay on; another than the log's is a cross-backend comparison.")
@device_options
@click.option("--atol", type=float, default=None, help="Cross-backend: absolute tolerance (default parity's).")
@click.option("--rtol", type=float, default=None, help="Cross-backend: relative tolerance (default parity's).")
@click.option("--tolerance-file", type=click.Path(dir_okay=False), help="Cross-backend: TOML/JSON, as parity takes.")
def replay(
    log: str, model: str | None, input_files: tuple[str, ...], npz_files: tuple[str, ...], trust: tuple[str, ...],
    backend: str, device: str | None, gpu_precision: str | None, atol: float | None, rtol: float | None,
    tolerance_file: str | None,
) -> None:
    """Re-run LOG's run and compare every step with the log.

    On the log's backend and device (the reference by default) the replay must be bit-identical:
    exit 1 names the first step whose output differs, with the numeric difference the logged
    samples show. On another backend or device it is a cross-backend comparison: every step within
    parity's tolerances over the logged samples and statistics (exit 0), or exit 1 naming the drift
    origin. Inputs default to the logged ones where the log's sample holds them whole.
    """
    from sealtrace.audit.replay import replay_log
    from sealtrace.errors import InputError
    from sealtrace.parity.tolerance import ToleranceTable

    if model is None:
        raise InputError("replay needs the model: --container MODEL.seal (or an ONNX file)")
    options: dict[str, Any] = {"trust": list(trust)} if trust else {}
    tolerances = ToleranceTable.from_options(atol, rtol, tolerance_file)
    report = replay_log(log, model, _read_inputs(input_files, npz_files), backend=backend, device=device,
                        gpu_precision=gpu_precision, tolerances=tolerances, **options)  # fmt: skip
    if report.across is None and (atol is not None or rtol is not None or tolerance_file):
        report.notes.append("--atol, --rtol and --tolerance-file apply across backends only: this replay "
                            "is on the log's backend and device, and must be bit-identical")
    for note in report.notes:
        click.echo(f"note: {note}")
    report.raise_if_different()
    click.echo(f"replay of {log}: {report.summary()}")
    if report.model_origin is not None:
        click.echo(report.model_origin.provenance())
