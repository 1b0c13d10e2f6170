"""``sealtrace run`` and ``sealtrace conformance``."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sealtrace.backends import make_backend
from sealtrace.cli import app
from sealtrace.cli._device import device_options
from sealtrace.errors import BackendError, CheckFailedError, InputError
from sealtrace.inputs import gather_feeds, write_npz_atomically
from sealtrace.outputs import check_output, check_output_directory
from sealtrace.session import Session


def _summary(array: Any, count: int = 6) -> str:
    if isinstance(array, list):
        return f"sequence of {len(array)}"
    if array is None:
        return "none"
    flat = np.asarray(array).reshape(-1)[:count]
    values = ", ".join(np.format_float_positional(v, precision=6, trim="-") if flat.dtype.kind == "f" else str(v) for v in flat.tolist())
    more = ", ..." if np.asarray(array).size > count else ""
    return f"[{values}{more}]"


def _check_run_outputs(out_path: str | None, audit_path: str | None, capture_dir: str | None, force: bool) -> None:
    """Refuse, before any work, outputs that could not be written once the run is over."""
    if out_path:
        check_output(out_path, force, "--out")
    if audit_path:
        check_output(audit_path, force, "--audit")
        if out_path and os.path.realpath(out_path) == os.path.realpath(audit_path):
            raise InputError(f"--audit {audit_path}: the same file as --out")
    if capture_dir:
        check_output_directory(capture_dir, force, "--capture")


@app.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--input", "input_files", multiple=True, metavar="NAME=FILE.npy", help="One input from a .npy file.")
@click.option("--inputs", "npz_files", multiple=True, metavar="FILE.npz", help="Inputs from a .npz archive, by name.")
@click.option("--random-inputs", is_flag=True, help="Draw inputs not given by file at random.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for --random-inputs.")
@click.option("--dim", "dims", multiple=True, metavar="NAME=SIZE", help="Size of a named dynamic dimension.")
@click.option("--backend", default=None,
              help="reference | onnxruntime | torch | tvm (default: reference; tvm for a TVM engine run with --container).")
@click.option("--out", "out_path", type=click.Path(), help="Write the outputs to a .npz file.")
@click.option("--audit", "audit_path", type=click.Path(), metavar="LOG.jsonl", help="Record the run as a hash-chained audit log.")
@click.option("--sample", type=click.IntRange(min=0), default=None, metavar="N", help="Values of each tensor the audit log shows (default 8).")
@click.option("--sign-log", "sign_log", type=click.Path(dir_okay=False), metavar="KEY.pem", help="Sign the audit log's run digest with this key.")
@click.option("--capture", "capture_dir", type=click.Path(), metavar="DIR", help="Store every intermediate tensor in DIR (.npy files).")
@click.option("--digest", type=click.Choice(["sha256", "blake3"]), default=None,
              help="Digest algorithm of the audit log and capture (default sha256, FIPS 180-4; blake3 is faster, "
                   "docs/audit-log.md).")
@click.option("--trust", multiple=True, type=click.Path(dir_okay=False), metavar="KEY.pub",
              help="Run only what one of these keys signed: a sealed MODEL (or, with --container, the binding) "
                   "without a valid signature by one of them is refused (exit 1), and so is a plain ONNX MODEL.")
@click.option("--require-signature", is_flag=True,
              help="Refuse a MODEL that no trusted key signed (needs --trust; implied by --trust).")
@click.option("--container", "source_container", type=click.Path(dir_okay=False), metavar="MODEL.seal",
              help="MODEL is a derived artifact: run it only if bound to this container (docs/binding.md).")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="Threads: the reference backend's BLAS (default: the environment's, all cores), ORT's intra-op pool.")
@click.option("--numerics", type=click.Choice(["portable", "native"]), default="portable", show_default=True,
              help="The reference backend's numerics: portable (docs/numerics.md: the same bits on any machine) or "
                   "native (NumPy's and the BLAS's own rounding: faster, host-dependent; recorded in --audit).")
@device_options
@click.option("--force", is_flag=True, help="Overwrite an existing --out file, audit log or capture directory.")
@click.option("--ledger", "ledger_store", metavar="STORE", default=None,
              help="Record the run in this ledger (a SQLite path or postgresql://...; docs/ledger.md), with the "
                   "inputs and, with --audit, the audit log as its trail.")
@click.option("--ledger-key", "ledger_key", type=click.Path(dir_okay=False), metavar="KEY.pem", default=None,
              help="Sign the ledger's tree head with this key after the record (needs --ledger).")
@click.option("--attest", "attest_path", type=click.Path(), metavar="RUN.intoto.json", default=None,
              help="Also write the run as an in-toto attestation signed with the --sign-log key, with the ledger "
                   "index when --ledger (docs/supply-chain.md).")
def run(
    model: str,
    input_files: tuple[str, ...],
    npz_files: tuple[str, ...],
    random_inputs: bool,
    seed: int,
    dims: tuple[str, ...],
    backend: str | None,
    out_path: str | None,
    audit_path: str | None,
    sample: int | None,
    sign_log: str | None,
    capture_dir: str | None,
    digest: str | None,
    trust: tuple[str, ...],
    require_signature: bool,
    source_container: str | None,
    threads: int | None,
    numerics: str,
    device: str | None,
    gpu_precision: str | None,
    force: bool,
    ledger_store: str | None = None,
    ledger_key: str | None = None,
    attest_path: str | None = None,
) -> None:
    """Run MODEL (ONNX, a sealed .seal container, or a bound artifact) and summarize its outputs.

    A container is verified before a single op runs; a failing one exits 1 naming what changed, and
    so does a file named *.seal that is not a container. A plain ONNX file runs unverified, and
    says so on stderr. The last line says who signed the container (or the binding).
    """
    if (sample is not None or sign_log) and not audit_path:
        raise InputError("--sample and --sign-log need --audit LOG.jsonl")
    if digest and not (audit_path or capture_dir):
        raise InputError("--digest needs --audit LOG.jsonl or --capture DIR")
    if out_path and Path(out_path).suffix != ".npz":
        raise InputError(f"--out {out_path}: the file name must end in .npz")
    if ledger_key and not ledger_store:
        raise InputError("--ledger-key needs --ledger STORE")
    if attest_path and not sign_log:
        raise InputError("--attest needs --audit LOG.jsonl and --sign-log KEY.pem (the key that signs it)")
    if numerics != "portable" and backend not in (None, "reference"):
        raise InputError(f"--numerics {numerics}: only the reference backend has numerics to choose")
    _check_run_outputs(out_path, audit_path, capture_dir, force)  # before a byte of MODEL is read
    if attest_path:
        check_output(attest_path, force, "--attest")
    if backend is None:
        from sealtrace.engines.tvm import is_tvm_library

        # A compiled engine runs on the backend that compiled it; it is checked before it is loaded.
        backend = "tvm" if source_container and is_tvm_library(model) else "reference"
    engine = make_backend(backend, threads, numerics, device, gpu_precision)  # a device is checked before MODEL is read
    # The ledger is opened first too: a store that cannot be opened fails before the run, not after;
    # click closes it (signing a tree head) when the command ends, however it ends.
    ledger = None
    if ledger_store:
        from sealtrace.ledger import Ledger

        ledger = click.get_current_context().with_resource(Ledger.open(ledger_store, signer=ledger_key))
    session = Session(
        model, backend=engine, trust=trust, require_signature=require_signature,
        container=source_container,
    )
    feeds = gather_feeds(session.plan, input_files, npz_files, random_inputs, seed, dims)
    audit = capture = None
    if audit_path or capture_dir:
        # Made before the run: an existing log or capture is refused before any work is done.
        from sealtrace.audit import DEFAULT_SAMPLE, AuditRecorder, CaptureStore

        if audit_path:
            sample = DEFAULT_SAMPLE if sample is None else sample
            audit = AuditRecorder(audit_path, sample=sample, sign_key=sign_log, overwrite=force, digest=digest or "sha256")
        if capture_dir:
            capture = CaptureStore(capture_dir, overwrite=force, digest=digest or "sha256")
    from sealtrace.audit import audited_run
    from sealtrace.ledger import LedgerEntry, record_run

    if ledger is not None:
        entry = LedgerEntry(Path(session.origin.path or "model").stem, audit="full" if audit is not None else "io",
                            principal=_login_name())  # fmt: skip
        run = record_run(session, feeds, entry, audit=audit, capture=capture)
        outputs = run.values
    else:
        outputs = audited_run(session, feeds, audit=audit, capture=capture)
    where = f" ({device})" if device is not None else ""
    table = Table(title=f"{Path(model).name} on {backend}{where}", title_justify="left")
    for column in ("output", "dtype", "shape", "values"):
        table.add_column(column)
    for name, value in zip(session.plan.output_names, outputs, strict=True):
        dtype = str(value.dtype) if isinstance(value, np.ndarray) else type(value).__name__
        shape = str(list(value.shape)) if isinstance(value, np.ndarray) else "-"
        table.add_row(name, dtype, shape, _summary(value))
    Console(markup=False).print(table)  # output names come from the model: never markup
    if out_path:
        arrays = {n: v for n, v in zip(session.plan.output_names, outputs, strict=True) if isinstance(v, np.ndarray)}
        write_npz_atomically(Path(out_path), arrays, force=force)
        # .npz holds tensors only: sequences (ZipMap's maps among them) and empty optionals are left out.
        left_out = [n for n in session.plan.output_names if n not in arrays]
        note = f" (not tensors, left out: {', '.join(left_out)})" if left_out else ""
        click.echo(f"wrote {len(arrays)} output(s) to {out_path}{note}")
    if audit is not None:
        click.echo(f"audit log {audit_path}: {audit.steps} step(s), run digest {audit.run_digest}")
    if capture is not None:
        click.echo(f"captured {len(capture.entries)} value(s) in {capture_dir}")
    if ledger is not None:
        receipt = ledger.append(run.record, inputs=feeds, trail=run.trail)
        signed = " (a signed tree head follows)" if ledger.signer is not None else " (unsigned: give --ledger-key)"
        click.echo(f"ledger {ledger.store.location}: record {receipt.record_id} at index {receipt.index}{signed}")
    if attest_path and audit_path and sign_log:
        from sealtrace.provenance.attest import attest_log

        index, record_id = (receipt.index, receipt.record_id) if ledger is not None else (None, None)
        written = attest_log(audit_path, sign_log, attest_path, ledger_index=index, record_id=record_id, force=force)
        click.echo(f"attestation {attest_path}: run digest {written.run_digest}, signed by key {written.signed_by}")
    if session.origin.kind in ("container", "artifact"):
        click.echo(session.origin.provenance())
    else:
        # A plain ONNX file ran: said plainly, so it is never mistaken for a verified model (on
        # stderr, last, so that a run that fails, writing its outputs included, ends with one error line).
        click.echo(f"note: {session.origin.provenance()}", err=True)


def _login_name() -> str | None:
    """Who ran this, for the ledger record: the login name, or None (null) where there is none."""
    import getpass

    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return None


@app.command()
@click.option("--ops", default=None, metavar="A,B", help="Only the cases of these operators.")
@click.option("--backend", type=click.Choice(["reference", "onnxruntime", "torch"]), default="reference",
              show_default=True, help="torch: the torch bridge's translations (needs the torch extra).")
@click.option("--json", "as_json", is_flag=True, help="Print the full report as JSON.")
@click.option("--show-failures", is_flag=True, help="List every failed case with its reason.")
@device_options
def conformance(ops: str | None, backend: str, as_json: bool, show_failures: bool, device: str | None,
                gpu_precision: str | None) -> None:
    """Run ONNX's backend node test suite (regenerated from the installed onnx) on a backend."""
    from rich.progress import Progress

    from sealtrace.conformance import collect_cases, run_conformance
    from sealtrace.conformance.exclusions import excluded_cases

    wanted = [o.strip() for o in ops.split(",") if o.strip()] if ops is not None else None
    if wanted is not None and not wanted:
        raise InputError("--ops: no operator named (expected e.g. --ops Conv,Relu)")
    if backend == "torch" and importlib.util.find_spec("torch") is None:
        raise BackendError("--backend torch needs PyTorch: pip install 'sealtrace[torch]'")
    if device is not None or gpu_precision is not None:
        make_backend(backend, device=device, gpu_precision=gpu_precision)  # no such device: refused before any case
    cases = collect_cases(wanted)  # unknown op names are refused here, before anything runs
    with Progress(transient=True, disable=as_json) as progress:
        task = progress.add_task("conformance", total=len(cases))
        report = run_conformance(
            backend,
            on_case=lambda _r: progress.advance(task),
            excluded=excluded_cases(backend) if backend in ("reference", "torch") else None,
            cases=cases,
            device=device,
            gpu_precision=gpu_precision,
        )
    totals = report.totals()
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        table = Table(title=f"ONNX node conformance on {backend}", title_justify="left")
        for column in ("op", "passed", "failed", "unsupported", "excluded"):
            table.add_column(column, justify="right" if column != "op" else "left")
        for op, counts in report.per_op().items():
            table.add_row(op, *(str(counts.get(k, 0)) for k in ("passed", "failed", "unsupported", "excluded")))
        table.add_section()
        table.add_row("total", *(str(totals.get(k, 0)) for k in ("passed", "failed", "unsupported", "excluded")))
        console = Console(markup=False)
        console.print(table)
        if show_failures:
            for r in report.results:
                if r.status == "failed":
                    console.print(Text("FAILED ", style="red") + Text(f"{r.name}: {r.message}"), highlight=False)
    # The exit status does not depend on --json: a script reading the JSON gets the same verdict.
    if wanted and totals.get("failed", 0):
        raise CheckFailedError(f"{totals['failed']} case(s) failed")
    if wanted and not totals.get("passed", 0):
        # Every selected case was unsupported or excluded: nothing was checked, so nothing passed.
        raise CheckFailedError(
            f"none of the {len(report.results)} selected case(s) ran on {backend} "
            f"({totals.get('unsupported', 0)} unsupported, {totals.get('excluded', 0)} excluded)"
        )
