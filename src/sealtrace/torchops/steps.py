"""What the fx converter and the torch backend share: finding each step's translation up front.

Every unsupported step of a Plan (subgraphs included) is found before anything runs and reported
together in one :class:`~sealtrace.errors.UnsupportedError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
import torch

import sealtrace.torchops.translations  # noqa: F401  (registers every translation)
from sealtrace.errors import UnsupportedError
from sealtrace.plan.model import Plan, Step
from sealtrace.torchops.dtypes import from_numpy
from sealtrace.torchops.reference_step import ReferenceKernelStep, holds_strings
from sealtrace.torchops.registry import Translation, lookup

# Control flow is handled by the executors themselves, not by a translation.
CONTROL_FLOW = ("If", "Loop", "Scan")


def translation_for(step: Step) -> Translation | None:
    """The translation registered for the step's op at its resolved schema version."""
    return lookup(step.domain, step.op_type, step.since_version)


def unsupported_steps(plan: Plan) -> list[str]:
    """A description of every step (subgraphs included) that has no torch translation."""
    problems: list[str] = []
    for path, step in plan.walk():
        where = "/".join((*path, step.name))
        if step.op_type in CONTROL_FLOW and step.domain in ("", "ai.onnx"):
            continue
        elif translation_for(step) is None:
            op = f"{step.domain}::{step.op_type}" if step.domain not in ("", "ai.onnx") else step.op_type
            problems.append(f"{where!r} ({op}-{step.since_version}): no torch translation")
    return problems


def check_supported(plan: Plan) -> None:
    """Raise one UnsupportedError listing every step the torch bridge cannot translate."""
    problems = unsupported_steps(plan)
    if problems:
        raise UnsupportedError(problems)


def tensor_attributes(step: Step, device: torch.device | None = None) -> dict[str, Any]:
    """The step's attributes as a translation takes them: tensor attributes as torch tensors,
    subgraphs dropped (the executors run them)."""
    attrs: dict[str, Any] = {}
    for key, value in step.attributes.items():
        if isinstance(value, Plan) or (isinstance(value, tuple) and value and isinstance(value[0], Plan)):
            continue
        if isinstance(value, onnx.TypeProto) or (isinstance(value, tuple) and value and
                                                 isinstance(value[0], onnx.TypeProto)):
            continue  # types (Optional's) are carried by the values themselves
        if isinstance(value, np.ndarray) and value.dtype.kind not in "OSU":  # strings stay NumPy
            tensor = from_numpy(value)
            attrs[key] = tensor.to(device) if device is not None else tensor
        else:
            attrs[key] = value
    return attrs


def call_translation(translation: Translation, step: Step, args: list[Any], attrs: Mapping[str, Any]) -> list[Any]:
    """Run one translation and return its outputs as a list, one entry per declared output.

    A step registered to run its reference kernel, or any step given strings (torch has no string
    dtype), runs the NumPy kernel instead (:class:`ReferenceKernelStep`)."""
    if translation.reference_kernel or any(holds_strings(a) for a in args):
        result = ReferenceKernelStep(step)(*args)
        return list(result) if len(step.outputs) != 1 else [result]
    extra = {"n_outputs": len(step.outputs)} if translation.n_outputs else {}
    result = translation.fn(*args, **attrs, **extra)
    # Several outputs are a tuple; a list is one sequence value.
    if isinstance(result, tuple):
        return list(result)
    return [result]
