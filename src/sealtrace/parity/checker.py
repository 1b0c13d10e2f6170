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
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np

from sealtrace.backends import Backend, get_backend
from sealtrace.backends.reference import ReferenceBackend, standalone_context
from sealtrace.errors import InputError
from sealtrace.ops.registry import as_outputs, call_step, unquieted
from sealtrace.parity.metrics import BYTES_CHECK, ValueDiff, compare_values, identical_diff
from sealtrace.parity.precision import FullValues, PrecisionLoss, lower_feeds, lower_precision
from sealtrace.parity.tolerance import Tolerance, ToleranceTable
from sealtrace.plan import ModelSource, Plan, build_plan
from sealtrace.plan.events import StepEvent, StepObserver
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
    # With both sides in a lower precision (fp16, bf16): per step name, how far its values moved
    # from the float32 model's. The drift the precision itself causes, apart from the steps' drift.
    precision: str | None = None
    precision_loss: dict[str, tuple[ValueDiff, ...]] = field(default_factory=dict)

    @property
    def worst_step(self) -> StepComparison | None:
        """The compared step with the largest difference (over tolerance first)."""
        compared = [s for s in self.steps if s.worst is not None]
        return max(compared, key=lambda s: (s.exceeds, s.worst.max_abs), default=None)  # type: ignore[union-attr]

    @property
    def worst_precision_loss(self) -> tuple[str, ValueDiff] | None:
        """The step whose values the precision moved most, and that value's difference."""
        worst = [(name, max(diffs, key=lambda d: d.max_abs)) for name, diffs in self.precision_loss.items() if diffs]
        return max(worst, key=lambda item: item[1].max_abs, default=None)

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
        } | ({} if self.precision is None else {
            "precision": self.precision,
            "precision_loss": {name: [d.to_json() for d in diffs] for name, diffs in self.precision_loss.items()},
        })


def _step_ref(step: StepComparison) -> dict[str, Any]:
    return {"position": step.position, "name": step.name, "op_type": step.op_type, "path": list(step.path)}


class _Holder:
    """Observer that keeps backend B's step values until backend A has compared them.

    With a ``source`` (B's steps as an iterator, e.g. ONNX Runtime's segments), B's steps are pulled
    only as far as A has got, so B's values do not pile up ahead of the comparison. Top-level
    values are kept by name, values inside subgraphs by (path, name).
    """

    def __init__(self, source: Iterator[StepEvent] | None = None) -> None:
        self.values: dict[str, Any] = {}
        self.seen: set[int] = set()
        self.nested_values: dict[tuple[tuple[str, ...], str], Any] = {}
        self.nested_seen: set[tuple[tuple[str, ...], int]] = set()
        self.source = source

    def pull(self, index: int) -> None:
        """Take B's steps until top-level step ``index`` has been seen (or B has no more)."""
        source = self.source
        if source is None:
            return
        seen = self.seen
        while index not in seen:
            event = next(source, None)
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
        self.values.update(feeds)

    def on_step(self, event: StepEvent) -> None:
        step = event.step
        if event.path:
            self.nested_seen.add((event.path, step.index))
            for name, value in zip(step.outputs, event.outputs, strict=False):
                if name:
                    self.nested_values[(event.path, name)] = value
            return
        self.seen.add(step.index)
        values = self.values
        for name, value in zip(step.outputs, event.outputs, strict=False):
            if name:
                values[name] = value

    def on_run_end(self, outputs: Mapping[str, Any]) -> None:
        pass


class _StepInfo(NamedTuple):
    """What a top-level step's comparison needs, worked out once per Plan and tolerance table."""

    outputs: tuple[tuple[str, Tolerance], ...]  # the named outputs, in order, with their tolerance
    # For the re-run: per input, its name ("" when omitted) and the weight it reads (None if none).
    inputs: tuple[tuple[str, Any], ...]
    all_named: bool  # no output is omitted
    rerun: bool  # no subgraphs: the step can be re-run alone
    kernel: Callable[..., Any]  # the step's kernel without its own np.errstate (for quiet re-runs)
    release: tuple[str, ...]  # B's values no later step reads (graph outputs excepted)


# Per Plan (held weakly) and tolerance table: the steps' _StepInfo, so that repeated parity runs of
# one Plan (a benchmark, a service) do not redo them.
_INFOS: weakref.WeakKeyDictionary[Plan, dict[Any, dict[int, _StepInfo]]] = weakref.WeakKeyDictionary()


def _step_infos(plan: Plan, tolerance: ToleranceTable) -> dict[int, _StepInfo]:
    key = (tolerance.default, tuple(sorted(tolerance.ops.items())), tuple(sorted(tolerance.values.items())))
    per_plan = _INFOS.setdefault(plan, {})
    infos = per_plan.get(key)
    if infos is None:
        keep = frozenset(plan.output_names)
        weights = plan.initializers
        infos = {
            step.index: _StepInfo(
                tuple((name, tolerance.for_value(step.op_type, name)) for name in step.outputs if name),
                tuple((name, weights.get(name) if name else None) for name in step.inputs),
                all(step.outputs),
                not step.subgraphs,
                unquieted(step.kernel.fn),
                tuple(name for name in release if name not in keep),
            )
            for step, release in zip(plan.steps, plan.release_after, strict=True)
        }
        if len(per_plan) >= 4:
            per_plan.clear()
        per_plan[key] = infos
    return infos


class _Comparer:
    """Observer on backend A: compares each step with B's values as the run goes."""

    def __init__(
        self, plan: Plan, held: _Holder, tolerance: ToleranceTable, local: bool, exact: bool, quiet: bool = False
    ):
        self.plan = plan
        self.held = held
        self.tolerance = tolerance
        self.local = local
        # A is the reference backend itself: its outputs are what the reference kernels give for
        # its inputs, so a step whose inputs are bit-identical on B needs no re-run (below).
        self.exact = exact
        # A runs its observers with floating-point warnings off (the reference backend does): the
        # metrics need not turn them off for every value.
        self.quiet = quiet
        self.steps: list[StepComparison] = []
        self._info = _step_infos(plan, tolerance)
        # Top-level values found bit-identical on both sides: name -> (A's array, B's array). A
        # later step reading both as inputs need not compare them again to skip its re-run.
        self._identical: dict[str, tuple[Any, Any]] = {}

    def on_run_start(self, plan: Plan, feeds: Mapping[str, Any], backend: Backend) -> None:
        pass

    def on_run_end(self, outputs: Mapping[str, Any]) -> None:
        pass

    def on_step(self, event: StepEvent) -> None:
        if event.path:
            self._nested(event)
            return
        step = event.step
        index = step.index
        held = self.held
        if index not in held.seen:
            held.pull(index)
            if index not in held.seen:
                self.steps.append(_not_compared(len(self.steps), (), step))
                return
        info = self._info[index]
        self.steps.append(self._compare_step(event, info))
        values = held.values
        identical = self._identical
        for name in info.release:
            values.pop(name, None)
            identical.pop(name, None)

    def _compare_step(self, event: StepEvent, info: _StepInfo) -> StepComparison:
        step = event.step
        values = self.held.values
        outputs = info.outputs
        mine = event.outputs if info.all_named else list(_named(step, event.outputs))
        theirs = [values.get(name) for name, _ in outputs[: len(mine)]]
        # The outputs first, then the re-run: their temporaries are not alive at the same time.
        diffs = self._compare_outputs(outputs, mine, theirs)
        local: tuple[ValueDiff, ...] | None = None
        if self.local and info.rerun:
            rerun = self._rerun(event, info)
            if rerun is True:
                local = diffs  # same inputs on both sides: the step's own error is its output's
            elif rerun is not None:
                local = self._compare_all(outputs, rerun, theirs)
        return _step_comparison(len(self.steps), (), step, diffs, local)

    def _compare_outputs(
        self, outputs: tuple[tuple[str, Tolerance], ...], mine: Sequence[Any], theirs: list[Any]
    ) -> tuple[ValueDiff, ...]:
        """_compare_all for a top-level step's outputs; outputs that are bit-identical on both
        sides (common: shape and indexing steps, weights) are found by _same_bits, remembered for
        the re-run test of the steps that read them, and given the figures of identical values."""
        if not self.quiet:
            with np.errstate(all="ignore"):
                return self._compare_outputs_quiet(outputs, mine, theirs)
        return self._compare_outputs_quiet(outputs, mine, theirs)

    def _compare_outputs_quiet(
        self, outputs: tuple[tuple[str, Tolerance], ...], mine: Sequence[Any], theirs: list[Any]
    ) -> tuple[ValueDiff, ...]:
        same = _same_bits
        identical = self._identical
        diffs = []
        for (name, tol), value, other in zip(outputs, mine, theirs, strict=False):
            if type(value) is np.ndarray and value.size and same(value, other):
                identical[name] = (value, other)
                diffs.append(identical_diff(name, value))
            else:
                diffs.append(compare_values(name, value, other, tol, True))
        return tuple(diffs)

    def _compare_all(
        self, outputs: tuple[tuple[str, Tolerance], ...], mine: Sequence[Any], theirs: list[Any]
    ) -> tuple[ValueDiff, ...]:
        pairs = zip(outputs, mine, theirs, strict=False)
        if self.quiet:
            return tuple(compare_values(name, value, other, tol, True) for (name, tol), value, other in pairs)
        with np.errstate(all="ignore"):
            return tuple(compare_values(name, value, other, tol, True) for (name, tol), value, other in pairs)

    def _rerun(self, event: StepEvent, info: _StepInfo) -> list[Any] | Literal[True] | None:
        """The step re-run on the reference kernel with B's inputs: its outputs, in the order of the
        step's named outputs; True when B's inputs are A's bit for bit (the re-run would give A's
        outputs), None when there is no local figure."""
        values = self.held.values
        their_inputs: list[Any] = []
        for name, weight in info.inputs:
            if weight is not None or not name:
                their_inputs.append(weight)
            else:
                value = values.get(name)
                if value is None:
                    return None
                their_inputs.append(value)
        if self.exact:
            same = _same_bits
            identical = self._identical
            for (name, _), x, y in zip(info.inputs, their_inputs, event.inputs, strict=True):
                pair = identical.get(name)
                if pair is not None and pair[0] is y and pair[1] is x:
                    continue  # compared bit for bit as an output already
                if not same(x, y):
                    break
            else:
                return True
        step = event.step
        # Inside A's run, warnings are off already: the kernel as the reference run calls it.
        fn = info.kernel if self.quiet else None
        try:
            context = standalone_context(step, event.path) if step.kernel.context else None
            outputs = as_outputs(call_step(step, their_inputs, context, fn=fn))
        except Exception:  # a kernel that rejects the other side's inputs gives no local figure
            return None
        return [outputs[i] for i, name in enumerate(step.outputs) if name and i < len(outputs)]

    def _nested(self, event: StepEvent) -> None:
        """A step inside a subgraph: its outputs are compared (no local figure, no release)."""
        step = event.step
        path = event.path
        position = len(self.steps)
        held = self.held
        if (path, step.index) not in held.nested_seen:
            self.steps.append(_not_compared(position, path, step))
            return
        tolerance = self.tolerance
        named = [(name, tolerance.for_value(step.op_type, name)) for name in step.outputs if name]
        mine = list(_named(step, event.outputs))
        theirs = [held.nested_values.get((path, name)) for name, _ in named[: len(mine)]]
        self.steps.append(_step_comparison(position, path, step, self._compare_all(tuple(named), mine, theirs), None))


def _named(step: Step, values: Sequence[Any]) -> Iterator[Any]:
    """The values of the step's named outputs (as many as ``values`` has)."""
    return (value for name, value in zip(step.outputs, values, strict=False) if name)


def _not_compared(position: int, path: tuple[str, ...], step: Step) -> StepComparison:
    return StepComparison(position, path, step.index, step.name, step.op_type, (), None, "not-compared")


def _step_comparison(
    position: int, path: tuple[str, ...], step: Step, diffs: tuple[ValueDiff, ...], local: tuple[ValueDiff, ...] | None
) -> StepComparison:
    """The StepComparison of a compared step, without the frozen dataclass's __init__."""
    status = comparison_status(diffs, local)
    comparison: StepComparison = object.__new__(StepComparison)
    comparison.__dict__.update(
        position=position, path=path, index=step.index, name=step.name, op_type=step.op_type, outputs=diffs,
        local=local, status=status,
    )
    return comparison


def comparison_status(diffs: Sequence[ValueDiff], local: Sequence[ValueDiff] | None) -> str:
    """ok; or, for outputs over tolerance, born-here / inherited by their local error (exceeds without one)."""
    if not any(d.exceeds for d in diffs):
        return "ok"
    if local is None:
        return "exceeds"
    return "born-here" if any(d.exceeds for d in local) else "inherited"


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _same_bits(x: Any, y: Any) -> bool:
    """Whether two inputs are the same bytes (-0.0 and +0.0 differ, as a kernel may tell them apart)."""
    if x is y:
        return True
    if type(x) is not np.ndarray or type(y) is not np.ndarray or x.shape != y.shape:
        return False
    dtype = x.dtype
    if dtype != y.dtype or dtype.kind not in "biuf":
        return False
    unsigned = _UNSIGNED.get(dtype.itemsize)
    if unsigned is None:
        return False
    size = x.size
    if size <= BYTES_CHECK:
        return x.tobytes() == y.tobytes()
    if x.flags.c_contiguous and y.flags.c_contiguous:
        # Inputs that differ (after the first rounding difference, most do) differ in a sample.
        step = size // 16
        if x.reshape(-1)[::step].tobytes() != y.reshape(-1)[::step].tobytes():
            return False
    return bool((x.view(unsigned) == y.view(unsigned)).all())


def check_parity(
    model: ModelSource | Plan,
    feeds: Mapping[str, Any],
    backends: Sequence[str | Backend] = ("reference", "onnxruntime"),
    tolerance: ToleranceTable | None = None,
    local: bool = True,
    optimized: bool = False,
    observers: Sequence[StepObserver] = (),
    precision: str | None = None,
) -> DriftReport:
    """Compare every value of ``model`` on two backends; see the module docstring.

    ``optimized=True`` runs ONNX Runtime with its graph optimizations (what users deploy); only
    graph outputs are compared then, because fused graphs no longer have the intermediate values.
    The same holds whenever one backend has no per-step values at all (``graph_outputs_only``: the
    tvm backend, which runs a whole compiled model).
    ``observers`` also watch the run of the backend that is compared against the other as it goes
    (the reference backend, when it is one of the two): a progress display, an audit log.
    ``precision`` ("fp16", "bf16", "int8-dynamic") runs both backends on the model in that precision
    (``precision.lower_precision``) and the reference backend on the float32 model too: the
    report's ``precision_loss`` holds, per step, how far its values moved from the float32 run's.
    """
    if len(backends) != 2:
        raise InputError(f"parity needs exactly two backends, got {len(backends)}")
    plan = model if isinstance(model, Plan) else build_plan(model)
    tolerance = tolerance or ToleranceTable()
    loss = None
    if precision is not None:
        plan, feeds, loss = _in_precision(plan, feeds, precision, tolerance)
        observers = [*observers, loss]
    specs = [get_backend(x) if isinstance(x, str) and x != "onnxruntime" else x for x in backends]
    optimized = optimized or any(getattr(x, "graph_outputs_only", False) for x in specs)
    a, b = (_backend(x, optimized) for x in specs)
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
        # The holder reads only outputs: the stream leaves the inputs out (see Backend.stream).
        b_steps = stream(plan, checked, inputs=False)
        held = _Holder(iter(b_steps))
        held.on_run_start(plan, checked, b)
    else:
        held = _Holder()
        out_b = b.run(plan, checked, [] if optimized else [held])
    seconds[b.name] = time.perf_counter() - start
    # With A the reference backend itself, a step whose inputs are bit-identical on B needs no re-run;
    # and its run has floating-point warnings off while observers see the steps.
    reference = type(a) is ReferenceBackend
    comparer = _Comparer(plan, held, tolerance, local, reference, quiet=reference)
    start = time.perf_counter()
    out_a = a.run(plan, checked, [*observers] if optimized else [comparer, *observers])
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
        precision=precision,
        precision_loss={} if loss is None else loss.loss,
    )


def _in_precision(plan: Plan, feeds: Mapping[str, Any], precision: str, tolerance: ToleranceTable
                  ) -> tuple[Plan, dict[str, Any], PrecisionLoss]:
    """The Plan and feeds in ``precision``, and an observer comparing its run with the float32 run."""
    if plan.source is None:
        raise InputError("a precision run needs the ONNX model the Plan was built from")
    full = FullValues()
    ReferenceBackend().run(plan, check_feeds(plan, feeds), [full])
    low = build_plan(lower_precision(plan.source, precision))
    return low, lower_feeds(feeds, precision), PrecisionLoss(full.values, tolerance)


def _backend(spec: str | Backend, optimized: bool) -> Backend:
    if not isinstance(spec, str):
        return spec
    if spec == "onnxruntime":
        from sealtrace.backends.onnxruntime import OnnxRuntimeBackend

        return OnnxRuntimeBackend(per_op=not optimized)
    return get_backend(spec)
