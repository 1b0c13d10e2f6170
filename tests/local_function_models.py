"""Exporter-made models with model-local functions (onnxscript, torch's dynamo exporter).

onnxscript's @script needs the functions' source, so they live in a module rather than in a test.
Importing this module needs onnxscript (the torch extra); torch is imported only by the function
that needs it.
"""

from __future__ import annotations

import inspect

import onnx
import onnxscript
import pytest
from onnxscript import FLOAT, script
from onnxscript import opset18 as op

_LOCAL = onnxscript.values.Opset("sealtrace.local", 1)


@script(_LOCAL)
def ScaledLeaky(x, alpha: float = 0.1):  # type: ignore[no-untyped-def]
    return op.LeakyRelu(x, alpha=alpha)


@script(_LOCAL)
def Block(x, w, b):  # type: ignore[no-untyped-def]
    return ScaledLeaky(op.Add(op.MatMul(x, w), b), alpha=0.2)


@script(default_opset=op)
def _two_blocks(x: FLOAT[2, 4], w: FLOAT[4, 4], b: FLOAT[4]) -> FLOAT[2, 4]:
    return Block(Block(x, w, b), w, b)


def onnxscript_two_blocks() -> onnx.ModelProto:
    """x, w, b -> Block(Block(x)): two local functions, one calling the other with an attribute."""
    return _two_blocks.to_model_proto()  # type: ignore[no-any-return]


def torch_cond_export() -> onnx.ModelProto:
    """A module with torch.cond, exported by the dynamo exporter keeping its local functions.

    The exporter makes each branch a function in domain pkg.torch.__subgraph__; the public
    ``torch.onnx.export`` then inlines them while converting the opset, so this calls the
    exporter's core with no target opset (skipped where that internal entry point has moved).
    """
    import torch

    try:
        from torch.onnx._internal.exporter import _core
    except ImportError:
        pytest.skip("torch's dynamo exporter core is not where torch 2.13 has it")
    if "opset_version" not in inspect.signature(_core.export).parameters:
        pytest.skip("torch's dynamo exporter core takes no opset_version")

    class Branches(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            def positive(x: torch.Tensor) -> torch.Tensor:
                return torch.relu(self.fc(x)) * 2

            def negative(x: torch.Tensor) -> torch.Tensor:
                return torch.sigmoid(x) - 1

            return torch.cond(x.sum() > 0, positive, negative, (x,))

    torch.manual_seed(0)
    program = _core.export(Branches().eval(), (torch.randn(2, 4),), optimize=False, opset_version=None)
    return program.model_proto  # type: ignore[no-any-return]
