"""The TVM backend: runs a whole model compiled by Apache TVM (docs/tvm.md).

TVM fuses operators, so there are no per-step values: observers see the run's start and its graph
outputs (``per_step`` is False, as for ONNX Runtime's optimized mode), an audit log of such a run
holds the input and output digests, and parity compares graph outputs only.

What runs is either a compiled library bound to a container, loaded with :meth:`TvmBackend.load`
(``Session("model.so", container="model.seal", backend="tvm")``: checked before it is loaded,
sealtrace.engines.tvm), or, for a Plan given without one, an engine compiled in memory on first use
for the feeds' shapes (every input axis fixed) and kept for later runs of the same shapes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sealtrace.backends.base import ObservedRuns
from sealtrace.engines.tvm import TvmEngine, compile_in_memory, load_tvm_library, tvm_version
from sealtrace.plan.events import StepObserver
from sealtrace.plan.model import Plan

GRAPH_OUTPUTS_ONLY = "graph outputs only: TVM fuses operators, so there are no per-step values"


class TvmBackend(ObservedRuns):
    """Apache TVM on the CPU (LLVM), whole-model runs; see the module docstring."""

    name = "tvm"
    # TVM imports the ONNX model itself: steps without a NumPy kernel are no obstacle.
    needs_kernels = False
    per_step = False
    # Parity compares this backend's graph outputs only (sealtrace.parity.check_parity).
    graph_outputs_only = True

    def __init__(self, threads: int | None = None, target: str = "llvm") -> None:
        self.threads = threads
        self.target = target
        # Loaded libraries, by the digest of the Plan they were checked against.
        self._engines: dict[str, TvmEngine] = {}
        # Engines compiled in memory: per Plan (held to check identity) and feed signature.
        self._compiled: dict[tuple[int, tuple[Any, ...]], tuple[Plan, TvmEngine]] = {}
        self._last: TvmEngine | None = None

    @property
    def version(self) -> str:
        return tvm_version()

    def load(
        self,
        library: str | os.PathLike[str],
        container: str | os.PathLike[str],
        *,
        trust: Sequence[Any] = (),
        require_signature: bool = False,
        strict: bool = False,
    ) -> tuple[Plan, TvmEngine]:
        """Check and load a compiled library bound to ``container`` (sealtrace.engines.tvm); later
        runs of the container's Plan on this backend run it."""
        plan, engine = load_tvm_library(library, container, trust=trust, require_signature=require_signature,
                                        strict=strict)  # fmt: skip
        self._engines[plan.digest] = engine
        return plan, engine

    def describe(self, per_op: bool = False) -> dict[str, Any]:
        """Settings that shape the numbers, for reports (``per_op`` is ignored: TVM has no steps)."""
        engine = self._last
        return {
            "mode": "compiled library" if engine is not None and engine.library else "compiled in memory",
            "steps": GRAPH_OUTPUTS_ONLY,
            "target": engine.stamp.target if engine is not None else self.target,
            "threads": self.threads or 1,
        }

    def engine_for(self, plan: Plan, feeds: Mapping[str, Any]) -> TvmEngine:
        """The loaded library for ``plan``, else an engine compiled in memory for these feeds' shapes."""
        engine = self._engines.get(plan.digest)
        if engine is not None:
            return engine
        signature = tuple((name, np.shape(value), np.asarray(value).dtype.str) for name, value in sorted(feeds.items()))
        key = (id(plan), signature)
        cached = self._compiled.get(key)
        if cached is None or cached[0] is not plan:
            shapes = {name: tuple(int(d) for d in np.shape(value)) for name, value in feeds.items()}
            cached = (plan, compile_in_memory(plan, shapes, self.target))
            if len(self._compiled) >= 8:
                self._compiled.clear()
            self._compiled[key] = cached
        return cached[1]

    def _prepare_run(self, plan: Plan, feeds: Mapping[str, Any], observers: Sequence[StepObserver]) -> Any:
        engine = self.engine_for(plan, feeds)
        self._last = engine
        return engine

    def _execute_run(
        self, plan: Plan, feeds: Mapping[str, Any], observers: Sequence[StepObserver], prepared: Any
    ) -> dict[str, Any]:
        outputs = prepared.run(feeds, self.threads or 1)
        return {name: outputs[name] for name in plan.output_names}
