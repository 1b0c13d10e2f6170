"""ONNX -> PyTorch: an fx module built from a Plan, and export parity.

- :func:`to_torch` converts a model (Plan, ONNX file, ModelProto or .seal container) into a
  ``torch.fx.GraphModule`` with the weights as parameters, built from the torch translations of
  :mod:`sealtrace.torchops` (which the ``torch`` backend, :mod:`sealtrace.backends.torch`, runs step
  by step);
- :func:`check_export` compares a PyTorch module with its ONNX export, leaf module call by call.
"""

from __future__ import annotations

from typing import Any

from sealtrace.torchbridge.convert import IfModule, LoopModule, ScanModule, load_plan, to_torch
from sealtrace.torchops.registry import (
    conformance_exclusions,
    reference_kernel_ops,
    registered_translations,
)
from sealtrace.torchops.steps import unsupported_steps


def __getattr__(name: str) -> Any:
    # Export parity pulls in torch.onnx and onnxscript; load it only when asked for.
    if name in ("check_export", "ExportParityReport", "LeafCall"):
        from sealtrace.torchbridge import export_parity

        return getattr(export_parity, name)
    raise AttributeError(name)


__all__ = [
    "IfModule",
    "LoopModule",
    "ScanModule",
    "conformance_exclusions",
    "load_plan",
    "reference_kernel_ops",
    "registered_translations",
    "to_torch",
    "unsupported_steps",
]
