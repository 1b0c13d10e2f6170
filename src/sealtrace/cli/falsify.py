"""``sealtrace falsify`` and ``sealtrace falsify-bench``: thin shells over sealtrace.falsify."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

from sealtrace.cli import app
from sealtrace.errors import InputError

if TYPE_CHECKING:  # the falsify package imports torch: only load it when a falsify verb runs
    from sealtrace.falsify.instances import BenchSummary


@app.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.argument("property_file", metavar="PROPERTY.vnnlib", type=click.Path(dir_okay=False))
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
              metavar="S", help="Time budget in seconds (search and certification).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every random choice.")
@click.option("--starts", type=click.IntRange(min=1), default=None, metavar="N",
              help="Budget of gradient starts (default: until the timeout).")
@click.option("--save-violation", "save_path", type=click.Path(dir_okay=False), metavar="CEX.npy",
              help="Write the certified counterexample's input (.npy).")
@click.option("--result", "result_path", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the VNN-COMP result file (sat and the assignment, or unknown).")
@click.option("--audit", "audit_path", type=click.Path(dir_okay=False), metavar="LOG.jsonl",
              help="Keep the certifying run's audit log here.")
@click.option("--force", is_flag=True, help="Overwrite an existing audit log.")
@click.option("--json", "as_json", is_flag=True, help="Print the full result as JSON.")
def falsify(
    model: str,
    property_file: str,
    timeout: float,
    seed: int,
    starts: int | None,
    save_path: str | None,
    result_path: str | None,
    audit_path: str | None,
    force: bool,
    as_json: bool,
) -> None:
    """Search MODEL for a counterexample to PROPERTY; print sat (certified) or unknown.

    Every counterexample is confirmed by running the sealed container (an ONNX MODEL is sealed
    first) on the reference interpreter with an audit log. Never prints unsat: a search that finds
    nothing proves nothing.
    """
    from sealtrace.falsify import SearchSettings, load_vnnlib, save_violation
    from sealtrace.falsify import falsify as run_falsify

    if save_path and Path(save_path).suffix != ".npy":
        raise InputError(f"--save-violation {save_path}: the file name must end in .npy")
    if audit_path and Path(audit_path).exists():
        if not force:
            raise InputError(f"--audit {audit_path}: file exists (use --force to overwrite)")
        Path(audit_path).unlink()
    if not Path(model).is_file():
        raise InputError(f"{model}: no such file")
    prop = load_vnnlib(property_file)
    settings = SearchSettings(seed=seed, timeout_s=timeout, max_starts=starts)
    result = run_falsify(model, prop, settings, audit=audit_path)
    if result_path:
        Path(result_path).write_text(result.vnncomp_text(), encoding="utf-8")
    if save_path and result.certified:
        save_violation(result, save_path)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, sort_keys=True))
        return
    click.echo(result.status)
    cex = result.counterexample
    if cex is not None:
        table = Table(title="counterexample, certified by the reference run", title_justify="left")
        for column in ("variable", "value (as run)"):
            table.add_column(column, no_wrap=True)
        for i, v in enumerate(cex.x):
            table.add_row(f"X_{i}", repr(float(v)))
        for j, v in enumerate(cex.y):
            table.add_row(f"Y_{j}", repr(float(v)))
        Console(highlight=False, width=max(100, Console().width)).print(table)
        click.echo(f"inside the input box of region {cex.region}; output set {cex.output_set} holds (exact values):")
        for value in cex.values:
            click.echo(f"  {value.constraint}: {value.value_text()}  [{value.source}]")
        click.echo(f"container {result.container_digest}")
        click.echo(f"audit run digest {cex.run_digest}" + (f" (log {cex.audit_log})" if cex.audit_log else ""))
        click.echo(f"time to the certified counterexample {result.time_to_counterexample_s:.3f} s "
                   f"(setup {result.setup_s:.3f} s, {result.stats.samples} samples, {result.stats.starts} starts)")
        if save_path:
            click.echo(f"wrote the counterexample's input to {save_path}")
    else:
        stats = result.stats
        click.echo(f"no certified counterexample in {result.total_s:.1f} s (stopped by {stats.stopped_by}): "
                   f"{stats.samples} samples, {stats.starts} starts, {stats.steps} gradient steps, "
                   f"best margin {stats.best_margin:.6g} (a counterexample needs < 0)")
    if result.rejected_count:
        click.echo(f"{result.rejected_count} candidate(s) the reference run did not confirm; first: "
                   f"{result.rejected[0].reason}")
    if result_path:
        click.echo(f"wrote the VNN-COMP result to {result_path}")


@app.command("falsify-bench")
@click.argument("instances_file", metavar="INSTANCES.csv", type=click.Path(dir_okay=False))
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Cap each instance's time limit at S seconds (default: the file's limits).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every random choice.")
@click.option("--limit", type=click.IntRange(min=1), default=None, metavar="N", help="Only the first N instances.")
@click.option("--out", "out_paths", multiple=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the table to FILE: .csv (every column) or .md (Markdown with a summary); repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the results and summary as JSON.")
def falsify_bench(
    instances_file: str, timeout: float | None, seed: int, limit: int | None, out_paths: tuple[str, ...],
    as_json: bool,
) -> None:
    """Falsify every instance of a VNN-COMP instances file (network,property,timeout[,expected])."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from sealtrace.falsify import SearchSettings
    from sealtrace.falsify.instances import (
        Instance,
        InstanceResult,
        markdown_table,
        read_instances,
        run_instances,
        summarize,
        write_csv,
    )

    for out in out_paths:
        if Path(out).suffix not in (".csv", ".md"):
            raise InputError(f"--out {out}: the file name must end in .csv or .md")
    instances = read_instances(instances_file)[:limit]
    found = {"sat": 0}
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("sat {task.fields[sat]}"), transient=True, disable=as_json,
    ) as progress:
        task = progress.add_task("falsify", total=len(instances), sat=0)

        def started(instance: Instance) -> None:
            progress.update(task, description=instance.name)

        def finished(result: InstanceResult) -> None:
            if result.result == "sat":
                found["sat"] += 1
            progress.update(task, advance=1, sat=found["sat"])

        results = run_instances(instances, timeout_s=timeout, settings=SearchSettings(seed=seed),
                                on_start=started, on_result=finished)
    summary = summarize(results)
    for out in out_paths:
        if out.endswith(".csv"):
            write_csv(results, out)
        else:
            Path(out).write_text(_summary_markdown(summary) + "\n" + markdown_table(results), encoding="utf-8")
    if as_json:
        click.echo(json.dumps({"summary": summary.to_json(), "results": [r.to_row() for r in results]},
                              indent=2, sort_keys=True))
        return
    table = Table(title=f"falsify {Path(instances_file).name}", title_justify="left")
    for column in ("instance", "result", "time (s)", "certified"):
        table.add_column(column, justify="right" if column == "time (s)" else "left")
    for r in results:
        table.add_row(r.instance.name, r.result + (" (WRONG)" if r.wrong else ""), f"{r.time_s:.2f}",
                      "yes" if r.certified else "no")
    console = Console(highlight=False)
    console.print(table)
    console.print(_summary_markdown(summary).strip().splitlines()[-1])
    for r in results:
        if r.error:
            console.print(f"[red]error[/red] {r.instance.name}: {r.error}", markup=True)


def _summary_markdown(summary: BenchSummary) -> str:
    of = f" of {summary.expected_sat} expected" if summary.expected_sat is not None else ""
    median = f"{summary.median_sat_s:.2f} s" if summary.median_sat_s is not None else "-"
    worst = f"{summary.max_sat_s:.2f} s" if summary.max_sat_s is not None else "-"
    return (
        f"{summary.instances} instances: sat {summary.sat}{of}, certified {summary.certified}, "
        f"wrong {summary.wrong}, errors {summary.errors}; time to a certified counterexample: "
        f"median {median}, max {worst}\n"
    )
