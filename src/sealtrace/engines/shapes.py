"""Shape folding: a model's shape computations evaluated once its input sizes are fixed.

Exported models compute shapes at run time: ``Shape`` of a value, then ``Gather``, ``Concat``,
``Cast`` ... into the new shape of a ``Reshape``, the bounds of a ``Range``, the pads of a ``Pad``.
Compilers want those as constants (TVM's ONNX frontend refuses a ``Reshape`` whose new shape is a
computed tensor). Once every input axis a computation depends on is fixed, they *are* constants:
:func:`fold_shapes` evaluates them with sealtrace's own NumPy kernels (the reference backend's) and
puts the results in the model as initializers, as the reference backend folds weight-only steps.

What is folded, and why that is sound:
- ``Shape`` and ``Size`` of a value whose shape ONNX shape inference (with data propagation) finds
  static: that shape is the same for every input of the fixed sizes (inference leaves the shape of
  a value that depends on input *values*, NonZero's for one, unknown);
- any other deterministic step without subgraphs whose inputs are all constants (weights or folded
  values) and whose outputs are small (at most FOLD_MAX_BYTES each: shape arithmetic, index grids;
  large weight transforms are left to the compiler's own constant folding).
Shape inference is run again on the folded model until nothing more folds: a folded ``Reshape``
shape makes the ``Reshape``'s output static, and with it the next ``Shape``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from sealtrace.errors import SealtraceError
from sealtrace.ops.registry import NONDETERMINISTIC_OPS, as_outputs, call_step
from sealtrace.plan import build_plan
from sealtrace.plan.model import Plan, Step

FOLD_MAX_BYTES = 1 << 16
MAX_PASSES = 64


def _static(info: Any) -> tuple[int, ...] | None:
    if info is None or info.kind != "tensor" or info.dtype is None or info.shape is None:
        return None
    if not all(isinstance(d, int) and d >= 0 for d in info.shape):
        return None
    return tuple(int(d) for d in info.shape)


def _fold(step: Step, constants: dict[str, Any], static: dict[str, tuple[tuple[int, ...], np.dtype[Any]]]) -> bool:
    """Evaluate ``step`` into ``constants`` if it can be (see the module docstring); whether it was."""
    if step.domain not in ("", "ai.onnx") or step.subgraphs or step.implicit_inputs or step.kernel is None:
        return False
    if step.kernel.context or step.op_type in NONDETERMINISTIC_OPS or not all(step.outputs):
        return False
    args: list[Any] = []
    for name in step.inputs:
        if not name:
            args.append(None)
        elif name in constants:
            args.append(constants[name])
        elif step.op_type in ("Shape", "Size") and name in static and len(args) == 0:
            shape, dtype = static[name]
            # A stand-in of that shape without its memory: Shape and Size read nothing else.
            args.append(np.broadcast_to(np.zeros((), dtype), shape))
        else:
            return False
    try:
        outputs = as_outputs(call_step(step, args))
    except Exception:  # it fails again at run time, where the error names its step
        return False
    if len(outputs) < len(step.outputs) or not all(type(o) is np.ndarray and o.nbytes <= FOLD_MAX_BYTES
                                                   for o in outputs[: len(step.outputs)]):  # fmt: skip
        return False
    for name, value in zip(step.outputs, outputs, strict=False):
        constants[name] = np.array(value, copy=True)
    return True


def _rebuilt(model: onnx.ModelProto, plan: Plan, folded: set[int], constants: dict[str, Any]) -> onnx.ModelProto:
    """``model`` without the folded steps, their outputs (those still read) as initializers."""
    kept = [step for step in plan.steps if step.index not in folded]
    read = {name for step in kept for name in (*step.inputs, *step.implicit_inputs) if name}
    read |= {o.name for o in model.graph.output}
    made = {name for step in plan.steps if step.index in folded for name in step.outputs if name}
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    del graph.node[:]
    graph.node.extend(step.node for step in kept)
    existing = [t for t in graph.initializer if t.name in read or t.name in {i.name for i in graph.input}]
    del graph.initializer[:]
    graph.initializer.extend(existing)
    graph.initializer.extend(numpy_helper.from_array(constants[name], name) for name in sorted(made & read))
    return result


def fold_shapes(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """``model`` with its shape computations folded for its inputs' declared (fixed) sizes, and the
    number of steps folded (0: the model as it was). Folding is best effort: a model sealtrace has
    no kernels for, or whose shapes inference cannot find, is handed back unchanged or part-folded."""
    current = model
    total = 0
    for _ in range(MAX_PASSES):
        try:
            plan = build_plan(current)
        except SealtraceError:
            return current, total
        if any(s.node is None for s in plan.steps):
            return current, total
        static: dict[str, tuple[tuple[int, ...], np.dtype[Any]]] = {}
        for info in (*plan.inputs, *(i for s in plan.steps for i in s.output_info if i is not None)):
            shape = _static(info)
            if shape is not None and info.dtype is not None:
                static[info.name] = (shape, info.dtype)
        constants: dict[str, Any] = dict(plan.initializers)
        folded = {step.index for step in plan.steps if _fold(step, constants, static)}
        if not folded:
            break
        current = _rebuilt(current, plan, folded, constants)
        total += len(folded)
    return current, total
