"""ONNX -> torch.export ExportedProgram (``.pt2``), checked against the reference backend.

The program is traced from the fx module of :func:`~sealtrace.torchbridge.to_torch` on example
inputs (the model's real inputs, or ones the user gives). Shapes are static in the program, as
torch.export specializes on the example shapes; values computed from shapes alone were already
folded into constants or run as host steps, so no data-dependent shapes remain. An If whose
condition depends on input data cannot be exported: pin that input with ``fixed_inputs``.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sealtrace.errors import InputError, SealtraceError
from sealtrace.torchbridge.convert import ModelLike, load_plan, to_torch


class ExportError(SealtraceError):
    """torch.export could not trace the converted module (names the reason)."""


@dataclass(frozen=True)
class ExportResult:
    """An exported program and how far its outputs are from the reference backend's."""

    program: Any  # torch.export.ExportedProgram
    input_names: list[str]
    output_names: list[str]
    max_abs_diff: dict[str, float]


def export_program(
    model: ModelLike,
    feeds: Mapping[str, np.ndarray],
    *,
    fixed_inputs: Mapping[str, Any] | None = None,
    dtype: torch.dtype | None = None,
) -> ExportResult:
    """Convert ``model``, export it with torch.export on ``feeds`` and compare with the reference."""
    from sealtrace.backends.reference import ReferenceBackend
    from sealtrace.plan.feeds import check_feeds

    plan = load_plan(model)
    module = to_torch(plan, dtype=dtype, fixed_inputs=fixed_inputs)
    checked = check_feeds(plan, {**dict(feeds), **{k: np.asarray(v) for k, v in (fixed_inputs or {}).items()}})
    # input_names is set by to_torch (GraphModule attributes are untyped).
    input_names: list[str] = list(module.input_names)  # type: ignore[arg-type]
    args = tuple(_tensor(checked[name], dtype) for name in input_names)
    try:
        # torch.export prints the partial graph when it fails; the one-line error below says it all.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            program = torch.export.export(module, args)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = " (an If on input data? pin that input with --fix NAME=VALUE)" if "data-dependent" in str(exc) or \
            "Data-dependent" in str(exc) else ""
        raise ExportError(f"torch.export failed: {type(exc).__name__}: {first[:300]}{hint}") from None
    with torch.no_grad():
        result = program.module()(*args)
    outputs = result if isinstance(result, tuple) else (result,)
    reference = ReferenceBackend().run(plan, checked)
    diffs = {}
    for name, value in zip(plan.output_names, outputs, strict=True):
        ours = value.detach().cpu().double().numpy()
        diffs[name] = float(np.max(np.abs(ours - reference[name].astype(np.float64)))) if ours.size else 0.0
    return ExportResult(program, input_names, list(plan.output_names), diffs)


def _tensor(array: np.ndarray, dtype: torch.dtype | None) -> torch.Tensor:
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if dtype is not None and tensor.dtype == torch.float32:
        tensor = tensor.to(dtype)
    return tensor


def save_program(program: Any, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """``torch.export.save`` to ``path`` through a temporary file and a rename; refuses to overwrite."""
    target = Path(path)
    if target.exists() and not overwrite:
        raise InputError(f"{target}: file exists (use --force to overwrite)")
    if target.suffix != ".pt2":
        raise InputError(f"{target}: the file name must end in .pt2")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=".pt2", dir=target.parent or ".")
    os.close(fd)
    try:
        torch.export.save(program, tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
