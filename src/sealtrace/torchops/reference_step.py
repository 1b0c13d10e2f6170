"""A step that runs its NumPy reference kernel inside a torch module or the torch backend.

Used where torch has nothing to compute with (strings: torch has no string dtype, so every op on
strings, an Equal or a Reshape included, runs here) and for the operators registered with
:func:`~sealtrace.torchops.registry.register_reference_kernel`, whose outputs are piecewise
constant in their inputs (so there is no gradient to keep) and whose reference kernel is the
specification we check against. Tensors go in as NumPy arrays; numeric outputs come back as
tensors on the device of the step's tensor inputs, string outputs stay NumPy object arrays and
maps stay dicts. Nothing flows back through autograd.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from sealtrace.ops.registry import as_outputs, call_step
from sealtrace.plan.model import Step
from sealtrace.torchops.dtypes import from_numpy, to_numpy


def is_string_array(value: Any) -> bool:
    """Whether ``value`` is a NumPy array torch cannot hold (strings, objects)."""
    return isinstance(value, np.ndarray) and value.dtype.kind in "OSU"


def holds_strings(value: Any) -> bool:
    """Whether a step input (a tensor, a string array or a sequence of them) holds strings."""
    if isinstance(value, list):
        return any(holds_strings(v) for v in value)
    return is_string_array(value)


def as_torch_value(value: Any, device: torch.device | None = None) -> Any:
    """A reference kernel's output as the torch executors carry it: numeric arrays as tensors,
    strings as NumPy object arrays, sequences as lists, maps and empty optionals unchanged."""
    if isinstance(value, list):
        return [as_torch_value(v, device) for v in value]
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "OSU":
            return value
        tensor = from_numpy(value)
        return tensor.to(device) if device is not None and device.type != "cpu" else tensor
    if isinstance(value, np.generic):
        return as_torch_value(np.asarray(value), device)
    return value


def _device_of(args: Any) -> torch.device | None:
    for value in args:
        if isinstance(value, torch.Tensor):
            return value.device
        if isinstance(value, list):
            found = _device_of(value)
            if found is not None:
                return found
    return torch.get_default_device()


class ReferenceKernelStep:
    """Calls one step's NumPy kernel on torch values; ``constants`` are inputs known at conversion
    time (by position), kept here so that the fx graph's arguments hold only run-time values."""

    __module__ = __name__

    def __init__(self, step: Step, constants: Mapping[int, Any] | None = None) -> None:
        self.step = step
        self.constants = dict(constants or {})
        self.__name__ = f"reference_{step.op_type.lower()}"

    def __call__(self, *args: Any) -> Any:
        step = self.step
        supplied = iter(args)
        inputs = [self.constants[i] if i in self.constants else to_numpy(next(supplied))
                  for i in range(len(step.inputs))]
        with np.errstate(all="ignore"):
            result = call_step(step, inputs)
        device = _device_of(args)
        outputs = [as_torch_value(v, device) for v in as_outputs(result)]
        return outputs[0] if len(step.outputs) == 1 else tuple(outputs)

    def __repr__(self) -> str:
        return f"ReferenceKernelStep({self.step.name!r}, {self.step.op_type})"
