"""``sealtrace convert`` (ONNX -> torch.export .pt2) and ``sealtrace export-parity`` (PyTorch -> ONNX)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
import numpy as np

from sealtrace.cli import app
from sealtrace.errors import BackendError, CheckFailedError, InputError
from sealtrace.inputs import gather_feeds, parse_assignments


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
    _torch()
    import torch

    from sealtrace.torchbridge.convert import load_plan
    from sealtrace.torchbridge.program import export_program, save_program

    out = Path(output)
    if out.suffix != ".pt2":
        raise InputError(f"-o {output}: the file name must end in .pt2")
    if out.exists() and not force:
        raise InputError(f"-o {output}: file exists (use --force to overwrite)")
    plan = load_plan(model)
    pinned = _pinned(fixed, plan)
    # Pinned inputs are not asked for: gather feeds for the remaining inputs only.
    free = dataclasses.replace(plan, inputs=tuple(v for v in plan.inputs if v.name not in pinned))
    feeds = gather_feeds(free, input_files, npz_files, random_inputs, seed, dims)
    result = export_program(plan, feeds, fixed_inputs=pinned, dtype=torch.float64 if as_float64 else None)
    save_program(result.program, out, overwrite=force)
    click.echo(f"wrote {out} (torch.export program; inputs: {', '.join(result.input_names)})")
    for name, diff in result.max_abs_diff.items():
        click.echo(f"  {name}: max |program - reference| = {diff:.3g}")
    from sealtrace.container import is_container

    if is_container(model):
        from sealtrace.binding import bind

        record = bind(out, model, transformation="torchbridge-torch-export", backend="torch",
                      backend_version=str(torch.__version__),
                      options={"dtype": "float64" if as_float64 else "float32",
                               "fixed_inputs": sorted(pinned)},
                      sign_with=sign_key, embed=False, overwrite=force)
        click.echo(f"bound to container {record.container_digest[:16]} ({out}.binding.json)")
    elif sign_key:
        raise InputError("--sign applies to .seal sources (the binding record is what gets signed)")
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
            shape = names[name].shape
            if shape and all(isinstance(d, int) for d in shape):
                value = np.full(shape, value, dtype=dtype)
        pinned[name] = value
    return pinned
