"""``sealtrace convert`` (ONNX -> torch.export .pt2) and ``sealtrace export-parity`` (PyTorch -> ONNX)."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import sys
from pathlib import Path

import click
import numpy as np

from sealtrace.cli import app
from sealtrace.errors import BackendError, CheckFailedError, InputError
from sealtrace.inputs import gather_feeds, parse_assignments
from sealtrace.limits import check_allocation


def _torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise BackendError("this command needs PyTorch: pip install 'sealtrace[torch]'") from None


@app.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False), metavar="OUT.pt2")
@click.option("--input", "input_files", multiple=True, metavar="NAME=FILE.npy", help="Example input from a .npy file.")
@click.option("--inputs", "npz_files", multiple=True, metavar="FILE.npz", help="Example inputs from a .npz archive.")
@click.option("--random-inputs", is_flag=True, help="Draw example inputs not given by file at random.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--dim", "dims", multiple=True, metavar="NAME=SIZE", help="Size of a named dynamic dimension.")
@click.option("--fix", "fixed", multiple=True, metavar="NAME=VALUE",
              help="Pin an input to a constant (a number or a .npy file); it leaves the program's signature.")
@click.option("--float64", "as_float64", is_flag=True, help="Convert float32 weights and values to float64.")
@click.option("--atol", type=float, default=1e-3, show_default=True,
              help="Largest |program - reference| allowed on the example inputs.")
@click.option("--sign", "sign_key", type=click.Path(dir_okay=False), metavar="KEY.pem",
              help="Sign the binding record (container sources only).")
@click.option("--force", is_flag=True, help="Overwrite an existing output.")
def convert(
    model: str,
    output: str,
    input_files: tuple[str, ...],
    npz_files: tuple[str, ...],
    random_inputs: bool,
    seed: int,
    dims: tuple[str, ...],
    fixed: tuple[str, ...],
    as_float64: bool,
    atol: float,
    sign_key: str | None,
    force: bool,
) -> None:
    """Convert MODEL (ONNX or .seal) to a torch.export program saved with torch.export.save.

    The program is traced on example inputs (files, or --random-inputs) and checked against the
    reference backend on them; a .seal source also gets OUT.pt2.binding.json binding the program to
    the container. Exit 1 when the program disagrees with the reference beyond --atol.
    """
    from sealtrace.container import is_container
    from sealtrace.outputs import check_output
    from sealtrace.session import open_model

    if importlib.util.find_spec("torch") is None:
        _torch()  # says how to install it
    # Everything that needs no torch is checked before importing it (some 10 s): the output
    # paths, the model, the pinned inputs and the example feeds (a missing --dim among them).
    out = Path(output)
    if out.suffix != ".pt2":
        raise InputError(f"-o {output}: the file name must end in .pt2")
    check_output(out, force, "-o")
    sealed = is_container(model)
    if sealed:
        check_output(f"{out}.binding.json", force, "binding record")
    elif sign_key:
        raise InputError("--sign applies to .seal sources (the binding record is what gets signed)")
    plan, _origin = open_model(model)
    pinned = _pinned(fixed, plan)
    # Pinned inputs are not asked for: gather feeds for the remaining inputs only.
    free = dataclasses.replace(plan, inputs=tuple(v for v in plan.inputs if v.name not in pinned))
    feeds = gather_feeds(free, input_files, npz_files, random_inputs, seed, dims)
    _torch()
    import torch

    from sealtrace.torchbridge.program import export_program, save_program

    result = export_program(plan, feeds, fixed_inputs=pinned, dtype=torch.float64 if as_float64 else None)
    save_program(result.program, out, overwrite=force)
    click.echo(f"wrote {out} (torch.export program; inputs: {', '.join(result.input_names)})")
    for name, diff in result.max_abs_diff.items():
        click.echo(f"  {name}: max |program - reference| = {diff:.3g}")
    if sealed:
        from sealtrace.binding import bind

        record = bind(out, model, transformation="torchbridge-torch-export", backend="torch",
                      backend_version=str(torch.__version__),
                      options={"dtype": "float64" if as_float64 else "float32",
                               "fixed_inputs": sorted(pinned)},
                      sign_with=sign_key, embed=False, overwrite=force)
        click.echo(f"bound to container {record.container_digest[:16]} ({out}.binding.json)")
    worst = max(result.max_abs_diff.values(), default=0.0)
    if not np.isfinite(worst) or worst > atol:
        raise CheckFailedError(f"the exported program differs from the reference by {worst:.3g} > --atol {atol:g}")


def _pinned(items: tuple[str, ...], plan: object) -> dict[str, np.ndarray]:
    pinned: dict[str, np.ndarray] = {}
    names = {v.name: v for v in plan.inputs}  # type: ignore[attr-defined]
    for name, text in parse_assignments(items, "--fix").items():
        if name not in names:
            raise InputError(f"--fix {name}: no such input; inputs: {', '.join(names)}")
        if text.endswith(".npy"):
            from sealtrace.inputs import load_array

            value = load_array(text)
        else:
            dtype = names[name].dtype or np.dtype(np.float32)
            try:
                value = np.asarray(float(text) if dtype.kind == "f" else int(text), dtype=dtype)
            except ValueError:
                raise InputError(f"--fix {name}={text}: not a number") from None
            except OverflowError:
                raise InputError(f"--fix {name}={text}: out of range for {dtype}") from None
            shape = names[name].shape
            if shape and all(isinstance(d, int) for d in shape):
                # The shape is the model's: checked against the memory budget before it is filled.
                check_allocation(math.prod(shape) * dtype.itemsize, f"--fix {name}: input {name!r} of shape {list(shape)}")
                value = np.full(shape, value, dtype=dtype)
        pinned[name] = value
    return pinned


def _per_backend(path: str, backend: str, backends: int) -> Path:
    """Where export-parity writes ``path``'s report of ``backend``: OUT.<backend>.md when several."""
    target = Path(path)
    return target.with_name(f"{target.stem}.{backend}{target.suffix}") if backends > 1 else target


@app.command("export-parity")
@click.argument("factory", metavar="PACKAGE.MODULE:FACTORY")
@click.option("--input-shape", "shapes", multiple=True, required=True, metavar="NAME=1x3x224x224",
              help="A keyword input of the module's forward and its shape (repeatable).")
@click.option("--input-dtype", "dtypes", multiple=True, metavar="NAME=int64", help="Dtype of an input (default float32).")
@click.option("--int-high", type=int, default=2, show_default=True, help="Integer inputs are drawn from [0, N).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--backends", default="reference,onnxruntime", show_default=True, metavar="A,B")
@click.option("--atol", type=float, default=None, help="Absolute tolerance (default 1e-4).")
@click.option("--rtol", type=float, default=None, help="Relative tolerance (default 1e-3).")
@click.option("--tolerance-file", type=click.Path(dir_okay=False), help="TOML/JSON: default, per-op, per-value.")
@click.option("--precision", type=click.Choice(["fp16", "bf16"]), default=None,
              help="Run PyTorch and the export in this precision; report each leaf's precision_loss against float32.")
@click.option("--optimize", is_flag=True, help="Check the exporter's optimized model (fuses some leaves away).")
@click.option("--report", "reports", multiple=True, metavar="OUT.json|.md|.html",
              help="Write a report per backend (OUT.<backend>.md when several backends).")
@click.option("--force", is_flag=True, help="Overwrite existing report files.")
def export_parity(
    factory: str,
    shapes: tuple[str, ...],
    dtypes: tuple[str, ...],
    int_high: int,
    seed: int,
    backends: str,
    atol: float | None,
    rtol: float | None,
    tolerance_file: str | None,
    precision: str | None,
    optimize: bool,
    reports: tuple[str, ...],
    force: bool,
) -> None:
    """Export a PyTorch module (FACTORY() builds it) to ONNX and compare it leaf module call by call.

    Exit 0 when every leaf call and graph output is within tolerance on every backend, 1 when not
    (or when no leaf call could be compared), 2 for bad input.
    """
    from sealtrace.parity import ToleranceTable
    from sealtrace.parity.report import check_report_paths, format_number, write_reports

    names = list(dict.fromkeys(b.strip() for b in backends.split(",") if b.strip()))
    # Every report path is checked before the export and the runs (minutes), not after them.
    targets = {
        (backend, path): _per_backend(path, backend, len(names)) for path in reports for backend in names
    }
    check_report_paths(list(targets.values()), force)
    table = ToleranceTable.from_options(atol, rtol, tolerance_file)
    _torch()

    import torch
    from rich.console import Console

    from sealtrace.torchbridge.export_parity import check_export

    model = _build(factory)
    if not isinstance(model, torch.nn.Module):
        raise InputError(f"{factory}() returned {type(model).__name__}, not a torch.nn.Module")
    if int_high < 1:
        raise InputError(f"--int-high {int_high}: integers are drawn from [0, N), N must be at least 1")
    kinds = parse_assignments(dtypes, "--input-dtype")
    generator = torch.Generator().manual_seed(seed)
    kwargs = {}
    for name, text in parse_assignments(shapes, "--input-shape").items():
        try:
            shape = [int(d) for d in text.lower().split("x")]
        except ValueError:
            raise InputError(f"--input-shape {name}={text}: expected sizes like 1x3x224x224") from None
        if any(d < 0 for d in shape):
            raise InputError(f"--input-shape {name}={text}: sizes must not be negative")
        dtype = getattr(torch, kinds.pop(name, "float32"), None)
        if not isinstance(dtype, torch.dtype):
            raise InputError(f"--input-dtype {name}: unknown torch dtype")
        check_allocation(math.prod(shape) * dtype.itemsize, f"--input-shape {name}={text}")
        if dtype.is_floating_point:
            kwargs[name] = torch.randn(shape, generator=generator).to(dtype)
        else:
            kwargs[name] = torch.randint(0, int_high, shape, generator=generator).to(dtype)
    if kinds:
        raise InputError(f"--input-dtype for input(s) without --input-shape: {', '.join(kinds)}")
    result = check_export(model, (), kwargs=kwargs, backends=names, tolerance=table, optimize=optimize,
                          precision=precision)
    console = Console(markup=False)  # model and value names are text, not markup
    for backend, report in result.reports.items():
        worst = report.worst_step
        if worst is not None and worst.worst is not None:
            # What export-validator's report leads with: the worst leaf and its difference.
            console.print(f"{backend}: worst leaf {worst.name} ({worst.op_type}): max abs "
                          f"{format_number(worst.worst.max_abs)} at {worst.worst.name}, {worst.status}")
    console.print(f"{len(result.calls)} leaf module calls, {len(result.unmapped)} without an ONNX value")
    for backend, report in result.reports.items():
        origin = report.drift_origin
        console.print(
            f"{backend}: {len(report.exceeding)} leaf call(s) over tolerance"
            + (f"; drift starts at {origin.name} ({origin.op_type}), {origin.status}" if origin else "")
        )
        for step in report.born_here[:5]:
            console.print(f"{backend}: born here: {step.name} ({step.op_type})")
    loss = next(iter(result.reports.values())).worst_precision_loss if result.reports else None
    if loss is not None:
        console.print(f"precision_loss ({precision} vs float32 PyTorch): largest at {loss[0]}: "
                      f"max abs {format_number(loss[1].max_abs)}, max rel {format_number(loss[1].max_rel)}")
    written = write_reports(
        [(result.reports[backend], target) for (backend, _), target in targets.items() if backend in result.reports],
        overwrite=force,
    )
    for target in written:
        console.print(f"wrote {target}", markup=False)
    if result.nothing_compared:
        raise CheckFailedError(f"nothing was compared: {result.nothing_compared}")
    if not result.passed:
        raise CheckFailedError("the ONNX export differs from PyTorch beyond tolerance")


def _build(factory: str) -> object:
    """FACTORY() of PACKAGE.MODULE:FACTORY, imported as `python -m` would: the current folder first."""
    module_name, sep, attr = factory.partition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"{factory}: expected PACKAGE.MODULE:FACTORY")
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    try:
        build = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"{factory}: cannot import ({exc})") from None
    try:
        return build()
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise InputError(f"{factory}() raised {type(exc).__name__}: {first}") from None
