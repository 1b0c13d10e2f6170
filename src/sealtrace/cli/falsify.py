"""``sealtrace falsify`` and ``sealtrace falsify-bench``: thin shells over sealtrace.falsify."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sealtrace.cli import app
from sealtrace.errors import BackendError, CheckFailedError, InputError
from sealtrace.inputs import load_array, parse_assignments
from sealtrace.limits import format_size, open_regular_file
from sealtrace.outputs import atomic_output, check_output

if TYPE_CHECKING:  # the falsify package imports torch: only load it when a falsify verb runs
    from sealtrace.falsify import FalsifyResult
    from sealtrace.falsify.instances import BenchSummary, InstanceResult


def _require_torch(verb: str) -> None:
    """The falsify package searches on a torch module: without the torch extra, say so (exit 2)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise BackendError(
            f"{verb} needs PyTorch (the search runs on a torch module): pip install 'sealtrace[torch]'"
        ) from None


def _check_outputs(outputs: dict[str, str | None], force: bool) -> None:
    """Every file the verb will write, checked before any work: directory there, no clobbering, distinct."""
    seen: dict[str, str] = {}
    for option, path in outputs.items():
        if not path:
            continue
        check_output(path, force, option)
        key = os.path.realpath(path)
        if key in seen:
            raise InputError(f"{option} {path}: the same file as {seen[key]}")
        seen[key] = option


def _check_readable(path: str, what: str) -> None:
    """A file the verb reads later, refused now if it is missing, a directory or a device."""
    f, _size = open_regular_file(path, what)
    f.close()


# A counterexample with at most this many variables is printed in full; a larger one is summarized.
PRINT_ALL_VARIABLES = 32
# Constraints of the holding output set shown, the furthest past their bound first.
SHOWN_CONSTRAINTS = 8


@app.command()
@click.argument("model", type=click.Path())
@click.argument("property_file", metavar="PROPERTY.vnnlib", type=click.Path())
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
              metavar="S", help="Time budget in seconds (reading the property, search and certification).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every random choice.")
@click.option("--starts", type=click.IntRange(min=1), default=None, metavar="N",
              help="Budget of gradient starts (default: until the timeout).")
@click.option("--fix", "fixed_files", multiple=True, metavar="NAME=FILE.npy",
              help="Pin the model input NAME to the values of FILE.npy (the other inputs are searched); repeatable.")
@click.option("--counterexample", "counterexample_path", type=click.Path(), metavar="FILE.npz",
              help="Write the certified counterexample: every model input by name, as the reference run was fed.")
@click.option("--save-violation", "save_path", type=click.Path(), metavar="CEX.npy",
              help="Write the certified counterexample's input (.npy).")
@click.option("--result", "result_path", type=click.Path(), metavar="FILE",
              help="Write the VNN-COMP result file (sat and the assignment, or unknown).")
@click.option("--audit", "audit_path", type=click.Path(), metavar="LOG.jsonl",
              help="Keep the certifying run's audit log here.")
@click.option("--force", is_flag=True,
              help="Overwrite existing --result, --counterexample, --save-violation and --audit files.")
@click.option("--json", "as_json", is_flag=True, help="Print the full result as JSON.")
def falsify(
    model: str,
    property_file: str,
    timeout: float,
    seed: int,
    starts: int | None,
    fixed_files: tuple[str, ...],
    counterexample_path: str | None,
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
    started = time.perf_counter()
    deadline = started + timeout
    if save_path and Path(save_path).suffix != ".npy":
        raise InputError(f"--save-violation {save_path}: the file name must end in .npy")
    if counterexample_path and Path(counterexample_path).suffix != ".npz":
        raise InputError(f"--counterexample {counterexample_path}: the file name must end in .npz")
    _check_outputs({"--result": result_path, "--counterexample": counterexample_path,
                    "--save-violation": save_path, "--audit": audit_path}, force)
    _check_readable(model, "model")
    fixed = {name: load_array(path) for name, path in parse_assignments(fixed_files, "--fix").items()}
    _require_torch("falsify")
    from sealtrace.falsify import (
        PropertyReadTimeoutError,
        SearchSettings,
        load_vnnlib,
        save_counterexample,
        save_violation,
        unknown_before_search,
    )
    from sealtrace.falsify import falsify as run_falsify

    try:
        prop = load_vnnlib(property_file, deadline=deadline)
    except PropertyReadTimeoutError as exc:
        reason = f"the time ran out while reading the property ({format_size(exc.read)} of {format_size(exc.size)})"
        result = unknown_before_search(Path(property_file).name, model, reason, time.perf_counter() - started)
    else:
        settings = SearchSettings(seed=seed, timeout_s=timeout, max_starts=starts)
        # The certifying run's log replaces an existing one (--force) only once it is complete.
        result = run_falsify(model, prop, settings, audit=audit_path, overwrite=force, fixed_inputs=fixed,
                             deadline=deadline)
    if result_path:
        with atomic_output(result_path, force) as f:
            f.write(result.vnncomp_text().encode("utf-8"))
    if save_path and result.certified:
        save_violation(result, save_path, force=force)
    if counterexample_path and result.certified:
        save_counterexample(result, counterexample_path, force=force)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, sort_keys=True))
        return
    click.echo(result.status)
    if result.counterexample is not None:
        _print_counterexample(result, counterexample_path, save_path)
    else:
        stats = result.stats
        # The time since the command began: the budget covers reading the property, before the search.
        click.echo(f"no certified counterexample in {time.perf_counter() - started:.1f} s (stopped by "
                   f"{stats.stopped_by}): "
                   f"{stats.samples} samples, {stats.starts} starts, {stats.steps} gradient steps, "
                   f"best margin {stats.best_margin:.6g} (a counterexample needs < 0)")
        if result.reason:
            click.echo(f"why: {result.reason}")
        if stats.stopped_by == "no-region":
            click.echo("an input pinned by VNNLIB bounds must be pinned to a value of its type: pin it with "
                       "--fix NAME=FILE.npy, or write its bounds as that value's exact decimal")
    if result.rejected_count:
        click.echo(f"{result.rejected_count} candidate(s) the reference run did not confirm; first: "
                   f"{result.rejected[0].reason}")
    if result_path:
        click.echo(f"wrote the VNN-COMP result to {result_path}")


def _print_counterexample(result: FalsifyResult, counterexample_path: str | None, save_path: str | None) -> None:
    """The certified counterexample: in full when small, else a summary (the VNN-COMP file and
    --counterexample hold every value)."""
    cex = result.counterexample
    assert cex is not None
    if len(cex.x) + len(cex.y) <= PRINT_ALL_VARIABLES:
        table = Table(title="counterexample, certified by the reference run", title_justify="left")
        for column in ("variable", "value (as run)"):
            table.add_column(column, no_wrap=True)
        for i, v in enumerate(cex.x):
            table.add_row(f"X_{i}", repr(float(v)))
        for j, v in enumerate(cex.y):
            table.add_row(f"Y_{j}", repr(float(v)))
        Console(highlight=False, markup=False, width=max(100, Console().width)).print(table)
    else:
        inputs = ", ".join(f"{name} {list(value.shape)}" for name, value in cex.feeds.items())
        click.echo(f"counterexample, certified by the reference run: {len(cex.x):,} input values (X), "
                   f"{len(cex.y):,} output values (Y); model inputs {inputs}")
    shown = sorted(cex.values, key=lambda v: v.value)[:SHOWN_CONSTRAINTS]
    click.echo(f"inside the input box of region {cex.region}; output set {cex.output_set} holds (exact values"
               + (f"; the {len(shown)} furthest past their bound of {len(cex.values)}" if len(shown) < len(cex.values)
                  else "") + "):")
    for value in shown:
        click.echo(f"  {value.constraint}: {value.value_text()}  [{value.source}]")
    click.echo(f"container {result.container_digest}")
    click.echo(f"audit run digest {cex.run_digest}" + (f" (log {cex.audit_log})" if cex.audit_log else ""))
    click.echo(f"time to the certified counterexample {result.time_to_counterexample_s:.3f} s "
               f"(setup {result.setup_s:.3f} s, {result.stats.samples} samples, {result.stats.starts} starts)")
    if counterexample_path:
        click.echo(f"wrote the counterexample (every model input, by name) to {counterexample_path}")
    if save_path:
        click.echo(f"wrote the counterexample's input to {save_path}")
    if not counterexample_path and len(cex.x) + len(cex.y) > PRINT_ALL_VARIABLES:
        click.echo("every value: --counterexample FILE.npz (model inputs by name) or --result FILE (VNN-COMP)")


@app.command("falsify-bench")
@click.argument("instances_file", metavar="INSTANCES.csv", type=click.Path())
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Cap each instance's time limit at S seconds (default: the file's limits).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every random choice.")
@click.option("--limit", type=click.IntRange(min=1), default=None, metavar="N", help="Only the first N instances.")
@click.option("--out", "out_paths", multiple=True, type=click.Path(), metavar="FILE",
              help="Write the table to FILE: .csv (every column) or .md (Markdown with a summary); repeatable.")
@click.option("--force", is_flag=True, help="Overwrite existing --out files.")
@click.option("--json", "as_json", is_flag=True, help="Print the results and summary as JSON.")
@click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
              help="Spread the instances over a Ray cluster (a Ray started here with --ray alone); each "
                   "counterexample is certified where it was found. Needs pip install 'sealtrace[ray]'.")
@click.option("--workers", type=click.IntRange(min=1), default=None, metavar="N",
              help="Instances at a time with --ray (default: the cluster's CPUs).")
def falsify_bench(
    instances_file: str, timeout: float | None, seed: int, limit: int | None, out_paths: tuple[str, ...],
    force: bool, as_json: bool, ray_address: str | None, workers: int | None,
) -> None:
    """Falsify every instance of a VNN-COMP instances file (network,property,timeout[,expected]).

    Exit 0 when every instance ran (sat or unknown); 1 when some instances errored (the others ran:
    table and files are still written) or an answer contradicts the expected one; 2 when the file is
    bad input, or when every instance errored on bad input (nothing ran).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    for out in out_paths:
        if Path(out).suffix not in (".csv", ".md"):
            raise InputError(f"--out {out}: the file name must end in .csv or .md")
    _check_outputs({f"--out {i + 1}": out for i, out in enumerate(out_paths)}, force)
    _check_readable(instances_file, "VNN-COMP instances file")
    _require_torch("falsify-bench")
    from sealtrace.falsify import SearchSettings
    from sealtrace.falsify.instances import (
        Instance,
        markdown_table,
        read_instances,
        run_instances,
        summarize,
        write_csv,
    )

    instances = read_instances(instances_file)[:limit]
    if workers is not None and ray_address is None:
        raise InputError("--workers is for --ray (without it, the instances run in this process)")
    executor = None
    if ray_address is not None:
        from sealtrace.scale import executor_for

        executor = executor_for(ray_address, workers)
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

        if executor is None:
            results = run_instances(instances, timeout_s=timeout, settings=SearchSettings(seed=seed),
                                    on_start=started, on_result=finished)
        else:
            from sealtrace.scale.sweep import sweep_instances

            progress.update(task, description=f"falsify on {executor.description}")
            try:
                results = sweep_instances(instances, executor, timeout_s=timeout, settings=SearchSettings(seed=seed),
                                          on_result=finished)
            finally:
                executor.close()
    summary = summarize(results)
    for out in out_paths:
        if out.endswith(".csv"):
            write_csv(results, out, force=force)
        else:
            with atomic_output(out, force) as f:
                f.write((_summary_markdown(summary) + "\n" + markdown_table(results)).encode("utf-8"))
    if as_json:
        click.echo(json.dumps({"summary": summary.to_json(), "results": [r.to_row() for r in results]},
                              indent=2, sort_keys=True))
    else:
        table = Table(title=f"falsify {Path(instances_file).name}", title_justify="left")
        for column in ("instance", "result", "time (s)", "certified"):
            table.add_column(column, justify="right" if column == "time (s)" else "left")
        for r in results:
            table.add_row(r.instance.name, r.result + (" (WRONG)" if r.wrong else ""), f"{r.time_s:.2f}",
                          "yes" if r.certified else "no")
        console = Console(highlight=False, markup=False)
        console.print(table)
        console.print(_summary_markdown(summary).strip().splitlines()[-1])
        for r in results:
            if r.error:
                console.print(Text("error ", style="red") + Text(f"{r.instance.name}: {r.error}"))
    _bench_outcome(results)


def _bench_outcome(results: list[InstanceResult]) -> None:
    """The exit status of a benchmark run (docs/cli.md): errors and wrong answers are not a pass."""
    errored = [r for r in results if r.error is not None]
    wrong = [r for r in results if r.wrong]
    if errored and len(errored) == len(results):
        first = errored[0]
        message = f"no instance ran: all {len(results)} errored; first: {first.instance.name}: {first.error}"
        if all(r.error_exit_code == 2 for r in errored):
            raise InputError(message)
        raise CheckFailedError(message)
    if errored or wrong:
        parts = [f"{len(errored)} of {len(results)} instance(s) errored"] if errored else []
        parts += [f"{len(wrong)} answer(s) contradict the expected one"] if wrong else []
        first = (errored or wrong)[0]
        raise CheckFailedError(f"{'; '.join(parts)}; first: {first.instance.name}: {first.error or 'sat, expected unsat'}")


def _summary_markdown(summary: BenchSummary) -> str:
    of = f" of {summary.expected_sat} expected" if summary.expected_sat is not None else ""
    median = f"{summary.median_sat_s:.2f} s" if summary.median_sat_s is not None else "-"
    worst = f"{summary.max_sat_s:.2f} s" if summary.max_sat_s is not None else "-"
    errors = f"ERRORS {summary.errors} (not run: see the error column)" if summary.errors else "errors 0"
    return (
        f"{summary.instances} instances: sat {summary.sat}{of}, certified {summary.certified}, "
        f"wrong {summary.wrong}, {errors}; time to a certified counterexample: "
        f"median {median}, max {worst}\n"
    )
