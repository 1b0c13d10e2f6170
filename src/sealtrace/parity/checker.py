"""Run one Plan on two backends and compare every value step by step.

Backend A runs with an observer that compares each step as it happens. Backend B's steps come from
its stream where it has one (ONNX Runtime's per-op segments, run only as A's run reaches them);
otherwise B runs first and its step values are held. Either way B's values are released once no
later step needs them.

Local error: each step is re-executed alone on the reference kernel with the *other* backend's
inputs, so that both sides see identical inputs. If that local error is within tolerance while the
step's output is not, the step only inherited its error; otherwise the error is born at that step.
Where B's inputs are A's bit for bit and A is the reference backend, the re-run would give A's
outputs again: the output comparison is the local one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sealtrace.backends import Backend, StepEvent, get_backend
from sealtrace.backends.reference import ReferenceBackend, StepContext
from sealtrace.errors import InputError
from sealtrace.ops.registry import as_outputs
from sealtrace.parity.metrics import ToleranceTable, ValueDiff, compare_values
from sealtrace.plan import ModelSource, Plan, build_plan
from sealtrace.plan.feeds import check_feeds
from sealtrace.plan.model import Step

REPORT_FORMAT = "sealtrace.parity.v1"


@dataclass(frozen=True)
class StepComparison:
    """One step compared across the two backends."""

    position: int  # order of execution on backend A (subgraph steps included)
    path: tuple[str, ...]
    index: int
    name: str
    op_type: str
    outputs: tuple[ValueDiff, ...]
    local: tuple[ValueDiff, ...] | None
    status: str  # ok | born-here | inherited | exceeds (no local check) | not-compared

    @property
    def exceeds(self) -> bool:
        return any(d.exceeds for d in self.outputs)

    @property
    def worst(self) -> ValueDiff | None:
        return max(self.outputs, key=lambda d: (d.exceeds, d.max_abs), default=None)

    @property
    def layout(self) -> tuple[int, ...] | None:
        return next((d.layout for d in self.outputs if d.layout is not None), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "path": list(self.path),
            "index": self.index,
            "name": self.name,
            "op_type": self.op_type,
            "status": self.status,
            "outputs": [d.to_json() for d in self.outputs],
            "local": None if self.local is None else [d.to_json() for d in self.local],
        }


@dataclass
class DriftReport:
    """The outcome of a parity run: every step compared, where drift starts and where it is born."""

    model: str
    plan_digest: str
    backends: tuple[str, str]
    backend_settings: dict[str, Any]
    tolerance: ToleranceTable
    steps: list[StepComparison] = field(default_factory=list)
    graph_outputs: list[ValueDiff] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def drift_origin(self) -> StepComparison | None:
        """The first step, in Plan order, whose output exceeds tolerance."""
        return next((s for s in self.steps if s.exceeds), None)

    @property
    def born_here(self) -> list[StepComparison]:
        """Steps whose own local error exceeds tolerance."""
        return [s for s in self.steps if s.status == "born-here"]

    @property
    def exceeding(self) -> list[StepComparison]:
        return [s for s in self.steps if s.exceeds]

    @property
    def passed(self) -> bool:
        return not self.exceeding and not any(d.exceeds for d in self.graph_outputs)

    def to_json(self) -> dict[str, Any]:
        origin = self.drift_origin
        return {
            "format": REPORT_FORMAT,
            "model": self.model,
            "plan_digest": self.plan_digest,
            "backends": list(self.backends),
            "backend_settings": self.backend_settings,
            "tolerance": self.tolerance.to_json(),
            "summary": {
                "steps_checked": sum(1 for s in self.steps if s.status != "not-compared"),
                "steps_not_compared": sum(1 for s in self.steps if s.status == "not-compared"),
                "steps_exceeding": len(self.exceeding),
                "drift_origin": None if origin is None else _step_ref(origin),
                "born_here": [_step_ref(s) for s in self.born_here],
                "layout_explained": [
                    {**_step_ref(s), "permutation": list(s.layout)} for s in self.steps if s.layout is not None
                ],
                "passed": self.passed,
            },
            "graph_outputs": [d.to_json() for d in self.graph_outputs],
            "steps": [s.to_json() for s in self.steps],
        }


def _step_ref(step: StepComparison) -> dict[str, Any]:
    return {"position": step.position, "name": step.name, "op_type": step.op_type, "path": list(step.path)}


class _Holder:
    """Observer that keeps backend B's step values until backend A has compared them.

    With a ``source`` (B's steps as an iterator, e.g. ONNX Runtime's segments), B's steps are pulled
    only as far as A has got, so B's values do not pile up ahead of the comparison.
    """

    def __init__(self, source: Iterator[StepEvent] | None = None) -> None:
        self.values: dict[tuple[tuple[str, ...], str], Any] = {}
        self.seen: set[tuple[tuple[str, ...], int]] = set()
        self.source = source

    def pull(self, index: int) -> None:
        """Take B's steps until top-level step ``index`` has been seen (or B has no more)."""
        if self.source is None:
            return
        while ((), index) not in self.seen:
            event = next(self.source, None)
            if event is None:
                self.source = None
                return
            self.on_step(event)

    def drain(self) -> None:
        if self.source is not None:
            for event in self.source:
                self.on_step(event)
            self.source = None

    def on_run_start(self, plan: Plan, feeds: Mapping[str, Any], backend: Backend) -> None:
        for name, value in feeds.items():
            self.values[((), name)] = value

    def on_step(self, event: StepEvent) -> None:
        self.seen.add((event.path, event.step.index))
        for name, value in zip(event.step.outputs, event.outputs, strict=False):
            if name:
                self.values[(event.path, name)] = value

    def on_run_end(self, outputs: Mapping[str, Any]) -> None:
        pass


class _Comparer:
    """Observer on backend A: compares each step with B's values as the run goes."""

    def __init__(self, plan: Plan, held: _Holder, tolerance: ToleranceTable, local: bool, exact: bool):
        self.plan = plan
        self.held = held
        self.tolerance = tolerance
        self.local = local
        # A is the reference backend itself: its outputs are what the reference kernels give for
        # its inputs, so a step whose inputs are bit-identical on B needs no re-run (below).
        self.exact = exact
        self.steps: list[StepComparison] = []
        self._release = {step.index: release for step, release in zip(plan.steps, plan.release_after, strict=True)}
        self._keep = frozenset(plan.output_names)

    def on_run_start(self, plan: Plan, feeds: Mapping[str, Any], backend: Backend) -> None:
        pass

    def on_run_end(self, outputs: Mapping[str, Any]) -> None:
        pass

    def on_step(self, event: StepEvent) -> None:
        step = event.step
        position = len(self.steps)
        if not event.path:
            self.held.pull(step.index)
        if (event.path, step.index) not in self.held.seen:
            self.steps.append(
                StepComparison(position, event.path, step.index, step.name, step.op_type, (), None, "not-compared")
            )
            return
        pairs = [
            (name, mine, self.held.values.get((event.path, name)))
            for name, mine in zip(step.outputs, event.outputs, strict=False)
            if name
        ]
        rerun = self._rerun(event) if self.local else None
        self.steps.append(self._compare(position, event.path, step, pairs, rerun))
        del pairs, rerun
        if not event.path:
            for name in self._release.get(step.index, ()):
                if name not in self._keep:
                    self.held.values.pop(((), name), None)

    def _compare(
        self, position: int, path: tuple[str, ...], step: Step, pairs: list[tuple[str, Any, Any]],
        rerun: Sequence[Any] | bool | None,
    ) -> StepComparison:
        tolerance = self.tolerance
        diffs = tuple(compare_values(name, mine, theirs, tolerance.for_value(step.op_type, name))
                      for name, mine, theirs in pairs)
        local: tuple[ValueDiff, ...] | None
        if rerun is True:
            local = diffs  # same inputs on both sides: the step's own error is its output's
        elif rerun is None or rerun is False:
            local = None
        else:
            local = tuple(
                compare_values(name, rerun[i], theirs, tolerance.for_value(step.op_type, name))
                for i, (name, _, theirs) in enumerate(pairs)
                if i < len(rerun)
            )
        if not any(d.exceeds for d in diffs):
            status = "ok"
        elif local is None:
            status = "exceeds"
        else:
            status = "born-here" if any(d.exceeds for d in local) else "inherited"
        return StepComparison(position, path, step.index, step.name, step.op_type, diffs, local, status)

    def _rerun(self, event: StepEvent) -> list[Any] | bool | None:
        """The step re-run on the reference kernel with B's inputs: its outputs, in the order of the
        step's named outputs; True when B's inputs are A's bit for bit (the re-run would give A's
        outputs), None when there is no local figure."""
        step = event.step
        if event.path or step.subgraphs:
            return None  # control flow: its inner steps are compared one by one instead
        their_inputs: list[Any] = []
        for name in step.inputs:
            if not name:
                their_inputs.append(None)
            elif name in self.plan.initializers:
                their_inputs.append(self.plan.initializers[name])
            else:
                value = self.held.values.get((event.path, name))
                if value is None:
                    return None
                their_inputs.append(value)
        if self.exact and all(_same_bits(x, y) for x, y in zip(their_inputs, event.inputs, strict=True)):
            return True
        try:
            if step.kernel.context:
                context = StepContext({}, (), event.path, step)
                outputs = as_outputs(step.kernel.fn(context, *their_inputs, **step.attributes))
            else:
                outputs = as_outputs(step.kernel.fn(*their_inputs, **step.attributes))
        except Exception:  # a kernel that rejects the other side's inputs gives no local figure
            return None
        return [outputs[i] for i, name in enumerate(step.outputs) if name and i < len(outputs)]


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _same_bits(x: Any, y: Any) -> bool:
    """Whether two inputs are the same bytes (-0.0 and +0.0 differ, as a kernel may tell them apart)."""
    if x is y:
        return True
    if type(x) is not np.ndarray or type(y) is not np.ndarray or x.dtype != y.dtype or x.shape != y.shape:
        return False
    unsigned = _UNSIGNED.get(x.dtype.itemsize)
    if unsigned is None or x.dtype.kind not in "biuf":
        return False
    return bool((x.view(unsigned) == y.view(unsigned)).all())


def check_parity(
    model: ModelSource | Plan,
    feeds: Mapping[str, Any],
    backends: Sequence[str | Backend] = ("reference", "onnxruntime"),
    tolerance: ToleranceTable | None = None,
    local: bool = True,
    optimized: bool = False,
) -> DriftReport:
    """Compare every value of ``model`` on two backends; see the module docstring.

    ``optimized=True`` runs ONNX Runtime with its graph optimizations (what users deploy); only
    graph outputs are compared then, because fused graphs no longer have the intermediate values.
    """
    if len(backends) != 2:
        raise InputError(f"parity needs exactly two backends, got {len(backends)}")
    plan = model if isinstance(model, Plan) else build_plan(model)
    tolerance = tolerance or ToleranceTable()
    a, b = (_backend(x, optimized) for x in backends)
    if a.name == b.name and type(a) is type(b) and not optimized:
        raise InputError(f"parity needs two different backends, got {a.name!r} twice")
    checked = check_feeds(plan, feeds)
    # Hold the backend that cannot stream (ORT per-op returns everything at once); stream the other.
    if isinstance(b, ReferenceBackend) and not isinstance(a, ReferenceBackend):
        a, b = b, a
        swapped = True
    else:
        swapped = False
    if not isinstance(a, ReferenceBackend) and not isinstance(b, ReferenceBackend):
        local = False  # no reference kernel side to re-run steps on
    seconds: dict[str, float] = {}
    # A backend set to optimized mode (per_op=False) has no steps to stream: it runs as it is set.
    stream = None if optimized or getattr(b, "per_op", None) is False else getattr(b, "stream", None)
    start = time.perf_counter()
    if stream is not None:
        # B streams its steps: they are pulled as A's run reaches them (timings then overlap).
        b_steps = stream(plan, checked)
        held = _Holder(iter(b_steps))
        held.on_run_start(plan, checked, b)
    else:
        held = _Holder()
        out_b = b.run(plan, checked, [] if optimized else [held])
    seconds[b.name] = time.perf_counter() - start
    # With A the reference backend itself, a step whose inputs are bit-identical on B needs no re-run.
    comparer = _Comparer(plan, held, tolerance, local, type(a) is ReferenceBackend)
    start = time.perf_counter()
    out_a = a.run(plan, checked, [] if optimized else [comparer])
    seconds[a.name] = time.perf_counter() - start
    if stream is not None:
        held.drain()
        out_b = b_steps.outputs
    names = (b.name, a.name) if swapped else (a.name, b.name)
    first, second = (out_b, out_a) if swapped else (out_a, out_b)
    graph_outputs = [
        compare_values(name, first[name], second[name], tolerance.for_value("", name)) for name in plan.output_names
    ]
    settings: dict[str, Any] = {}
    for backend in (a, b):
        describe = getattr(backend, "describe", None)
        settings[backend.name] = {"version": backend.version}
        if describe is not None:
            settings[backend.name].update(describe(not optimized))
    origin = plan.source
    model_name = origin.graph.name if origin is not None else plan.name
    return DriftReport(
        model=model_name,
        plan_digest=plan.digest,
        backends=names,
        backend_settings=dict(sorted(settings.items())),
        tolerance=tolerance,
        steps=comparer.steps,
        graph_outputs=graph_outputs,
        seconds=seconds,
    )


def _backend(spec: str | Backend, optimized: bool) -> Backend:
    if not isinstance(spec, str):
        return spec
    if spec == "onnxruntime":
        from sealtrace.backends.onnxruntime import OnnxRuntimeBackend

        return OnnxRuntimeBackend(per_op=not optimized)
    return get_backend(spec)
