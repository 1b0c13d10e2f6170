"""``sealtrace batch`` and ``sealtrace ledger replay``: thin shells over sealtrace.scale.

Both run in this process, or with ``--ray [ADDRESS]`` as Ray tasks (a Ray started here without an
address); the records are the same either way (docs/scale.md). Progress goes to stderr: a bar with
throughput and an ETA on a terminal, a plain line every few seconds otherwise.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from sealtrace.cli import app
from sealtrace.cli._device import device_options
from sealtrace.cli.ledger import ledger as ledger_group
from sealtrace.errors import CheckFailedError, InputError

ray_option = click.option(
    "--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
    help="Run as Ray tasks: on a Ray started here (--ray alone), or on the cluster at ADDRESS "
         "(host:port, ray://host:10001, or auto). Needs pip install 'sealtrace[ray]'.",
)
workers_option = click.option("--workers", type=click.IntRange(min=1), default=None, metavar="N",
                              help="Tasks at a time with --ray (default: the cluster's CPUs).")
threads_option = click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
                              help="Threads per run (each worker's backend).")


class JobProgress:
    """Progress of a job on stderr: a rich bar (throughput, ETA) on a terminal, else a line every 5 s."""

    def __init__(self, what: str, unit: str, bad: str, enabled: bool = True) -> None:
        self.what, self.unit, self.bad = what, unit, bad
        self.enabled = enabled
        self.started = time.monotonic()
        self._last_line = 0.0
        self._bar: Any = None
        self._task: Any = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn(what), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                TextColumn("ETA"), TimeRemainingColumn(), TimeElapsedColumn(), TextColumn("{task.fields[bad]}"),
                console=Console(stderr=True), transient=True,
            )
            self._bar.start()

    def __call__(self, done: int, total: int, bad: int) -> None:
        if not self.enabled:
            return
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = done / elapsed
        if self._bar is not None:
            fields = {"rate": f"{rate:.1f} {self.unit}/s", "bad": f"{bad} {self.bad}" if bad else ""}
            if self._task is None:
                self._task = self._bar.add_task(self.what, total=total, **fields)
            self._bar.update(self._task, completed=done, total=total, **fields)
            return
        now = time.monotonic()
        if done < total and now - self._last_line < 5.0:
            return
        self._last_line = now
        eta = f", ETA {(total - done) / rate:.0f} s" if 0 < done < total and rate > 0 else ""
        percent = f" ({100 * done // total}%)" if total else ""
        click.echo(f"{self.what}: {done}/{total} {self.unit}{percent}, {rate:.1f} {self.unit}/s{eta}, "
                   f"{bad} {self.bad}", err=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _executor(ray_address: str | None, workers: int | None) -> Any:
    from sealtrace.scale import executor_for

    if workers is not None and ray_address is None:
        raise InputError("--workers is for --ray (without it, the job runs in this process)")
    return executor_for(ray_address, workers)


@app.command()
@click.argument("model", metavar="MODEL.seal", type=click.Path(dir_okay=False))
@click.argument("inputs", metavar="INPUTS", type=click.Path())
@click.option("--ledger", "ledger_location", required=True, metavar="STORE",
              help="The ledger the records go to: a SQLite path (created when missing) or postgresql://...")
@click.option("--audit", type=click.Choice(["full", "io"]), default="io", show_default=True,
              help="full: the per-op audit trail of every run (reference backend), stored in the ledger; "
                   "io: input and output digests.")
@click.option("--backend", type=click.Choice(["reference", "onnxruntime", "torch"]), default=None,
              help="Backend (default: reference for --audit full, onnxruntime for io).")
@threads_option
@device_options
@ray_option
@workers_option
@click.option("--resume", is_flag=True, help="Finish a job the ledger already holds part of: skip what it recorded.")
@click.option("--sign", "sign_key", type=click.Path(dir_okay=False), metavar="KEY.pem",
              help="The ledger's key: signs tree heads.")
@click.option("--trust", multiple=True, type=click.Path(dir_okay=False), metavar="KEY.pub",
              help="Run the container only if signed by one of these keys (repeatable).")
@click.option("--principal", default=None, metavar="NAME", help="Who the records say asked (default: none).")
@click.option("--name", default=None, metavar="NAME", help="The model's name in records (default: the file stem).")
@click.option("--task-size", type=click.IntRange(min=1, max=1 << 20), default=32, show_default=True, metavar="N",
              help="Requests per task.")
@click.option("--store-inputs/--no-store-inputs", default=True, show_default=True,
              help="Store each request's inputs in the ledger (what `ledger replay` re-runs).")
@click.option("--attest", "attest_dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Write each record's run as an in-toto attestation, DIR/REQUEST.intoto.json (with --audit full "
                   "and --attest-key; docs/supply-chain.md).")
@click.option("--attest-key", type=click.Path(dir_okay=False), metavar="KEY.pem",
              help="The key that signs the attestations (Ed25519 or ECDSA).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def batch(model: str, inputs: str, ledger_location: str, audit: str, backend: str | None, threads: int,
          device: str | None, gpu_precision: str | None, ray_address: str | None, workers: int | None, resume: bool, sign_key: str | None,
          trust: tuple[str, ...], principal: str | None, name: str | None, task_size: int, store_inputs: bool,
          attest_dir: str | None, attest_key: str | None, as_json: bool) -> None:
    """Run every request of INPUTS (a directory of .npz feeds, or a Parquet file with one row per
    request) through the sealed MODEL, and append each run's record to the ledger, in the order of the
    requests. Exit 1 when some requests failed (the others are recorded); 130 when interrupted
    (--resume finishes the job)."""
    from sealtrace.scale import BatchJob, run_batch
    from sealtrace.scale.errors import JobInterrupted

    job = BatchJob(model, inputs, ledger_location, audit=audit, backend=backend, threads=threads,
                   principal=principal, name=name, trust=trust, sign_key=sign_key, resume=resume,
                   task_size=task_size, store_inputs=store_inputs, device=device, gpu_precision=gpu_precision,
                   attest_dir=attest_dir, attest_key=attest_key)
    job.checked_backend()  # a bad combination is refused before Ray starts
    executor = _executor(ray_address, workers)
    progress = JobProgress("batch", "requests", "failed", enabled=not as_json)
    try:
        summary = run_batch(job, executor, progress)
    except JobInterrupted as stop:
        progress.close()
        done = stop.summary
        click.echo(f"sealtrace: interrupted: job {done.job_id}: {done.recorded} record(s) appended by this run, "
                   f"{done.recorded + done.skipped} of {done.requests} in the ledger; run again with --resume "
                   "to finish it", err=True)
        raise click.exceptions.Exit(130) from None
    finally:
        progress.close()
        executor.close()
    if as_json:
        click.echo(json.dumps(summary.to_json(), indent=2, sort_keys=True))
    else:
        click.echo(f"batch {summary.job_id}: {summary.requests} request(s): {summary.recorded} recorded, "
                   f"{summary.skipped} already in the ledger, {len(summary.failures)} failed; "
                   f"{summary.rate:.1f} requests/s ({summary.seconds:.1f} s, {summary.where})")
        first = f", from index {summary.first_index}" if summary.first_index is not None else ""
        click.echo(f"ledger {ledger_location}: {summary.ledger_size} record(s){first}")
        if attest_dir is not None:
            click.echo(f"attestations {attest_dir}: {summary.attested} written")
        for failure in summary.failures[:10]:
            click.echo(f"failed: request {failure.position} ({failure.name}): {failure.error}")
        if len(summary.failures) > 10:
            click.echo(f"... and {len(summary.failures) - 10} more failed request(s)")
    _outcome(len(summary.failures), summary.requests, summary.recorded + summary.skipped,
             summary.failures[0].error if summary.failures else "", "request")


def _outcome(failed: int, total: int, done: int, first: str, what: str) -> None:
    if not failed:
        return
    if done == 0:
        raise InputError(f"no {what} ran: all {failed} failed; first: {first}")
    raise CheckFailedError(f"{failed} of {total} {what}(s) failed; first: {first}")


@ledger_group.command("replay")
@click.argument("store")
@click.option("--container", "containers", multiple=True, required=True, type=click.Path(dir_okay=False),
              metavar="MODEL.seal", help="A container whose records are replayed (repeatable).")
@click.option("--since", default=None, metavar="INDEX|TIME",
              help="Records from this leaf index, or from this time on (2025-01-31, 2025-01-31T12:00:00Z).")
@click.option("--backend", type=click.Choice(["reference", "onnxruntime", "torch"]), default="reference",
              show_default=True, help="Backend to replay on (reference: with the full per-op audit).")
@threads_option
@click.option("--atol", type=click.FloatRange(min=0), default=1e-4, show_default=True, help="Absolute tolerance.")
@click.option("--rtol", type=click.FloatRange(min=0), default=1e-3, show_default=True, help="Relative tolerance.")
@ray_option
@workers_option
@click.option("--resume", is_flag=True, help="Skip records this replay job already replayed.")
@click.option("--sign", "sign_key", type=click.Path(dir_okay=False), metavar="KEY.pem",
              help="The ledger's key: signs tree heads.")
@click.option("--trust", multiple=True, type=click.Path(dir_okay=False), metavar="KEY.pub",
              help="Use a container only if signed by one of these keys (repeatable).")
@click.option("--task-size", type=click.IntRange(min=1, max=1 << 16), default=8, show_default=True, metavar="N",
              help="Records per task.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def replay(store: str, containers: tuple[str, ...], since: str | None, backend: str, threads: int, atol: float,
           rtol: float, ray_address: str | None, workers: int | None, resume: bool, sign_key: str | None,
           trust: tuple[str, ...], task_size: int, as_json: bool) -> None:
    """Re-run the stored requests of STORE (for example after an ONNX Runtime upgrade) and append a
    replay record with its parity verdict for each; summarize divergences by model and step. Exit 1
    when a replay diverged or failed."""
    from rich.console import Console
    from rich.table import Table

    from sealtrace.parity.tolerance import Tolerance
    from sealtrace.scale.errors import JobInterrupted
    from sealtrace.scale.replay import LedgerReplay, replay_ledger

    job = LedgerReplay(store, containers, since=since, backend=backend, threads=threads,
                       tolerance=Tolerance(atol, rtol), trust=trust, sign_key=sign_key, resume=resume,
                       task_size=task_size)
    executor = _executor(ray_address, workers)
    progress = JobProgress("replay", "records", "diverged", enabled=not as_json)
    try:
        summary = replay_ledger(job, executor, progress)
    except JobInterrupted as stop:
        progress.close()
        click.echo(f"sealtrace: interrupted: replay job {stop.summary.job_id}: {stop.summary.replayed} replay "
                   "record(s) appended; run again with --resume to finish it", err=True)
        raise click.exceptions.Exit(130) from None
    finally:
        progress.close()
        executor.close()
    if as_json:
        click.echo(json.dumps(summary.to_json(), indent=2, sort_keys=True))
    else:
        verdicts = ", ".join(f"{v} {summary.verdicts.get(v, 0)}" for v in ("identical", "within-tolerance", "diverged", "failed"))
        click.echo(f"replay {summary.job_id}: {summary.replayed} record(s) replayed of {summary.selected} selected "
                   f"({summary.skipped} already replayed); {verdicts}; {summary.seconds:.1f} s, {summary.where}")
        for model_name, count in sorted(summary.unmatched.items()):
            click.echo(f"not replayed: {count} record(s) of model {model_name!r}: give its container (--container)")
        if summary.divergences:
            table = Table(title="divergences by model and step (where the replay's trail and the record's part)",
                          title_justify="left")
            for column in ("model", "step", "records"):
                table.add_column(column, justify="right" if column == "records" else "left")
            for (model_name, step), count in sorted(summary.divergences.items()):
                table.add_row(model_name, step, str(count))
            Console(highlight=False, markup=False).print(table)
        for record_id, error in summary.failures[:10]:
            click.echo(f"failed: record {record_id}: {error}")
    bad = summary.verdicts.get("diverged", 0) + summary.verdicts.get("failed", 0)
    if bad:
        raise CheckFailedError(f"{bad} of {summary.replayed} replay(s) diverged or failed (see the replay records' "
                               "links and the table above)")
