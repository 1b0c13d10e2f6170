"""``sealtrace parity``: compare every step of a model on two backends."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click
from rich.console import Console
from rich.progress import Progress, TaskID
from rich.table import Table

from sealtrace.backends import Backend, make_backend
from sealtrace.cli import app
from sealtrace.cli._device import device_options
from sealtrace.errors import CheckFailedError, InputError
from sealtrace.inputs import gather_feeds
from sealtrace.parity import Tolerance, ToleranceTable, check_parity
from sealtrace.parity.precision import PRECISIONS
from sealtrace.parity.report import check_report_paths, format_number, graph_outputs_only, write_reports
from sealtrace.plan import Plan
from sealtrace.plan.events import StepEvent
from sealtrace.session import open_model


class _Advance:
    """A step observer that advances a progress bar once per top-level step."""

    def __init__(self, progress: Progress, task: TaskID) -> None:
        self._progress = progress
        self._task = task

    def on_run_start(self, plan: Plan, feeds: Mapping[str, Any], backend: Backend) -> None:
        pass

    def on_step(self, event: StepEvent) -> None:
        if not event.path:
            self._progress.advance(self._task)

    def on_run_end(self, outputs: Mapping[str, Any]) -> None:
        pass


@app.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--backends", default="reference,onnxruntime", show_default=True, metavar="A,B")
@click.option("--input", "input_files", multiple=True, metavar="NAME=FILE.npy", help="One input from a .npy file.")
@click.option("--inputs", "npz_files", multiple=True, metavar="FILE.npz", help="Inputs from a .npz archive.")
@click.option("--random-inputs", is_flag=True, help="Draw inputs not given by file at random.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--dim", "dims", multiple=True, metavar="NAME=SIZE", help="Size of a named dynamic dimension.")
@click.option("--atol", type=float, default=None, help=f"Absolute tolerance (default {Tolerance().atol:g}).")
@click.option("--rtol", type=float, default=None, help=f"Relative tolerance (default {Tolerance().rtol:g}).")
@click.option("--tolerance-file", type=click.Path(dir_okay=False), help="TOML/JSON: default, per-op, per-value.")
@click.option("--report", "reports", multiple=True, metavar="OUT.json|.md|.html", help="Write a report (repeatable).")
@click.option("--optimized", is_flag=True, help="ONNX Runtime with graph optimizations: graph outputs only.")
@click.option("--no-local", is_flag=True, help="Skip the per-step local error re-runs.")
@click.option("--precision", type=click.Choice(PRECISIONS), default=None,
              help="Run both backends on the model in this precision; report each step's precision_loss against float32.")
@device_options
@click.option("--force", is_flag=True, help="Overwrite existing report files.")
def parity(
    model: str,
    backends: str,
    input_files: tuple[str, ...],
    npz_files: tuple[str, ...],
    random_inputs: bool,
    seed: int,
    dims: tuple[str, ...],
    atol: float | None,
    rtol: float | None,
    tolerance_file: str | None,
    reports: tuple[str, ...],
    optimized: bool,
    no_local: bool,
    precision: str | None,
    device: str | None,
    gpu_precision: str | None,
    force: bool,
) -> None:
    """Run MODEL on two backends and compare every step; name where drift starts and is born.

    --device places the torch side (e.g. --backends torch,onnxruntime --device cuda).

    Exit 0 when every value is within tolerance, 1 when not, 2 for bad input.
    """
    names = [b.strip() for b in backends.split(",") if b.strip()]
    if len(names) != 2:
        raise InputError(f"--backends {backends}: give exactly two, e.g. reference,onnxruntime")
    specs = _on_device(names, device, gpu_precision)
    # Every report path is checked before the run, not found taken after it.
    check_report_paths(reports, force)
    table = ToleranceTable.from_options(atol, rtol, tolerance_file)
    plan, _origin = open_model(model)
    feeds = gather_feeds(plan, input_files, npz_files, random_inputs, seed, dims)
    # A progress bar on stderr (shown on a terminal only) as the steps are compared: a large model
    # takes minutes. In optimized mode there are no steps to count.
    errors = Console(stderr=True)
    with Progress(transient=True, console=errors, disable=optimized or not errors.is_terminal) as progress:
        task = progress.add_task("comparing steps", total=len(plan.steps))
        report = check_parity(
            plan, feeds, specs, table, local=not no_local, optimized=optimized, observers=[_Advance(progress, task)],
            precision=precision,
        )
    write_reports([(report, path) for path in reports], overwrite=force)
    console = Console(markup=False)  # model and value names are text, not markup
    origin = report.drift_origin
    loss = report.worst_precision_loss
    if loss is not None:
        console.print(f"precision_loss ({precision} vs float32): largest at {loss[0]}: "
                      f"max abs {format_number(loss[1].max_abs)}, max rel {format_number(loss[1].max_rel)}")
    console.print(
        f"{len(report.steps)} steps compared ({names[0]} vs {names[1]}), "
        f"{len(report.exceeding)} over tolerance (atol {table.default.atol:g}, rtol {table.default.rtol:g})"
    )
    if not report.steps:
        over = sum(1 for d in report.graph_outputs if d.exceeds)
        console.print(f"{graph_outputs_only(report)}; {len(report.graph_outputs)} graph output(s) compared, {over} over tolerance")
    if origin is not None:
        console.print(f"drift origin: #{origin.position} {origin.name} ({origin.op_type}), {origin.status}", markup=False)
        for step in report.born_here[:5]:
            console.print(f"born here: #{step.position} {step.name} ({step.op_type})", markup=False)
        for step in report.steps:
            if step.layout is not None:
                console.print(f"layout: {step.name} matches after permuting axes {list(step.layout)}", markup=False)
    worst = sorted((s for s in report.steps if s.worst is not None), key=lambda s: -s.worst.max_abs)[:5]  # type: ignore[union-attr]
    if worst:
        table_out = Table(title="largest differences", title_justify="left")
        for column in ("#", "step", "op", "status", "max abs", "max rel", "max ulp"):
            table_out.add_column(column)
        for s in worst:
            w = s.worst
            assert w is not None
            table_out.add_row(str(s.position), s.name, s.op_type, s.status, format_number(w.max_abs), format_number(w.max_rel),
                              "-" if w.max_ulp is None else str(w.max_ulp))
        console.print(table_out)
    for path in reports:
        console.print(f"wrote {path}")
    if not report.passed:
        raise CheckFailedError(
            f"{len(report.exceeding)} step(s) exceed tolerance"
            + (f"; drift starts at {origin.name} ({origin.op_type})" if origin else "; graph outputs differ")
        )


def _on_device(names: list[str], device: str | None, gpu_precision: str | None) -> list[str | Backend]:
    """The two backends, torch made on ``device``; a device for two backends without one is refused."""
    if device is None and gpu_precision is None:
        return list(names)
    if "torch" not in names:
        make_backend(names[0], device=device, gpu_precision=gpu_precision)  # the refusal, naming what is wrong
        return list(names)
    return [make_backend(n, device=device, gpu_precision=gpu_precision) if n == "torch" else n for n in names]


@app.command()
@click.argument("run_a", type=click.Path(exists=False))
@click.argument("run_b", type=click.Path(exists=False))
@click.option("--atol", type=float, default=None, help=f"Absolute tolerance (default {Tolerance().atol:g}).")
@click.option("--rtol", type=float, default=None, help=f"Relative tolerance (default {Tolerance().rtol:g}).")
@click.option("--json", "as_json", is_flag=True, help="Print the full comparison as JSON.")
def diff(run_a: str, run_b: str, atol: float | None, rtol: float | None, as_json: bool) -> None:
    """Compare two recorded runs: two capture directories (--capture) or two audit logs.

    Exit 0 when every value matches (identical digests or numbers within tolerance), 1 when not.
    """
    from sealtrace.audit.diff import diff_json, diff_runs

    table = ToleranceTable.from_options(atol, rtol, None)
    report = diff_runs(run_a, run_b, table)
    if as_json:
        click.echo(diff_json(report), nl=False)
    else:
        console = Console(markup=False)  # value names are text, not markup
        console.print(report.summary(), markup=False)
        origin = report.drift_origin
        if origin is not None:
            console.print(f"drift origin: {origin.key} ({origin.where()}): {origin.status}", markup=False)
        shown = Table(title="differing values", title_justify="left")
        for column in ("#", "value", "step", "op", "status", "max abs", "max rel"):
            shown.add_column(column)
        for e in report.differing[:20]:
            shown.add_row(str(e.position), e.key, e.step, e.op_type, e.status,
                          format_number(e.diff.max_abs if e.diff else None), format_number(e.diff.max_rel if e.diff else None))
        if report.differing:
            console.print(shown)
    if not report.passed:
        if not report.differing:
            raise CheckFailedError(f"{' and '.join(report.incomplete)}: incomplete capture(s); the runs cannot match")
        raise CheckFailedError(f"{len(report.differing)} value(s) differ between {run_a} and {run_b}")
