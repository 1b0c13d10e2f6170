"""The reference backend: executes a Plan step by step with the NumPy kernels in sealtrace.ops.

Weight-only steps (every input a weight or the output of another such step: Constant nodes, the
Cast and Mul that dequantize int8 weights, a Reshape of a weight, a subgraph step that reads only
the enclosing graph's weights) produce the same bytes on every run. The backend evaluates them once per Plan, with the same kernels, and keeps their read-only
outputs, as ONNX Runtime folds constants when it loads a model. They are still reported to
observers in Plan order (marked ``constant``), so an audit log or a parity report is the same as
if they had run again.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from sealtrace import __version__
from sealtrace.backends.base import ObservedRuns
from sealtrace.backends.threads import blas_threads
from sealtrace.errors import KernelError, SealtraceError, UnsupportedError
from sealtrace.limits import BudgetExceededError, format_size, memory_budget
from sealtrace.ops.numerics import (
    PORTABLE,
    SPEC_VERSION,
    canonical_nan_value,
    check_mode,
    is_native,
    numerics_mode,
)
from sealtrace.ops.registry import (
    NONDETERMINISTIC_OPS,
    VARIES,
    KernelFn,
    StandaloneContext,
    as_outputs,
    specialized,
    unquieted,
)
from sealtrace.plan.events import StepEvent, StepObserver
from sealtrace.plan.model import Plan, Step

# A folded output lives as long as the backend does. A step is folded only when the memory it
# allocates is at most FOLD_GROWTH times what it reads (int8 -> float32 is 4x) plus a small
# allowance, so a tiny shape fed to ConstantOfShape or Expand never pins a huge tensor.
FOLD_GROWTH = 4
FOLD_ALLOWANCE = 1 << 20
# How many subgraph paths (Loop iterations included) keep their folded steps' events cached.
FOLDED_EVENT_PATHS = 64


@dataclass(frozen=True)
class FoldedStep:
    """A weight-only step's inputs and outputs, computed once."""

    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]


class LiveStep(NamedTuple):
    """What the executor's inner loop unpacks for each step that runs, resolved once per Plan (on
    models whose steps take microseconds the loop's own bookkeeping is a visible part of the run)."""

    step: Step
    # The kernel function, or the kernel specialized for the step's constant inputs (which takes
    # no attributes); called inside the run's one np.errstate.
    fn: KernelFn
    inputs: tuple[str, ...]  # '' for an omitted optional input
    single: str | None  # the one output's name (None when the step has several or omits one)
    attributes: dict[str, Any]
    context: bool  # whether fn takes a KernelContext first
    release: tuple[str, ...]  # the values no later step reads


@dataclass(frozen=True)
class Program:
    """A Plan prepared for execution: the folded steps' values and the schedule of the rest."""

    # Weights, captured constants of the enclosing graph and folded outputs.
    constants: dict[str, Any]
    # The steps that run each time: all a run without observers iterates (see LiveStep).
    live: tuple[LiveStep, ...]
    # Identities of the constants: a graph output that is one is copied before it is handed out.
    constant_ids: frozenset[int]
    # The constants a run reads (live steps' inputs, their subgraphs' captures, graph outputs):
    # what each run's environment starts from. Most folded values feed only other folded steps,
    # and copying them into every run (every If branch, every Loop iteration) would cost more
    # than some steps.
    run_constants: dict[str, Any]
    # Every step in Plan order for a run with observers: (step, its LiveStep or None, its folded
    # values or None, release list).
    observed: tuple[tuple[Step, LiveStep | None, FoldedStep | None, tuple[str, ...]], ...]
    # The live steps as generated functions, made on the first run without observers (see
    # LiveSegment); runs with observers (audit, parity) never need them.
    compiled: list[LiveSegment] = field(default_factory=list)
    # The events of the folded steps by subgraph path, made on first report: they are the same
    # every run (same arrays), so observers are handed the same objects.
    folded_events: dict[tuple[str, ...], dict[int, StepEvent]] = field(default_factory=dict)

    @property
    def folded_count(self) -> int:
        return sum(1 for _, live, _, _ in self.observed if live is None)


def prepare(plan: Plan, fold: bool = True, outer_constants: Mapping[str, Any] | None = None) -> Program:
    """Fold ``plan``'s weight-only steps (subgraph Plans are prepared when they first run).

    ``outer_constants`` are the enclosing Program's constants, for a subgraph: a value it captures
    from there (an LSTM's weights read inside an If branch) is as constant as its own weights.
    """
    constants: dict[str, Any] = dict(plan.initializers)
    if outer_constants:
        constants.update((c, outer_constants[c]) for c in plan.captures if c in outer_constants and c not in constants)
    schedule = tuple(
        (step, release, _fold(step, constants) if fold else None)
        for step, release in zip(plan.steps, plan.release_after, strict=True)
    )
    live = tuple(_live_step(step, release, constants) for step, release, folded in schedule if folded is None)
    constant_ids = frozenset(id(value) for value in constants.values())
    resolved = iter(live)
    observed = tuple(
        (step, next(resolved) if folded is None else None, folded, release) for step, release, folded in schedule
    )
    read = set(plan.output_names)
    for step, *_ in live:
        read.update(step.inputs)
        read.update(step.implicit_inputs)
    run_constants = {name: value for name, value in constants.items() if name in read}
    return Program(constants, live, constant_ids, run_constants, observed)


def _live_step(step: Step, release: tuple[str, ...], constants: Mapping[str, Any]) -> LiveStep:
    """How the executor calls ``step``: its kernel, or the kernel specialized for the step's
    constant inputs (see sealtrace.ops.registry.specializes), without its attributes."""
    fn = None
    if not step.kernel.context:
        known = tuple((constants.get(name, VARIES) if name else None) for name in step.inputs)
        fn = specialized(step.kernel, known, step.attributes)
    single = step.outputs[0] if len(step.outputs) == 1 and step.outputs[0] else None
    if fn is not None:
        return LiveStep(step, fn, step.inputs, single, {}, False, release)
    return LiveStep(step, unquieted(step.kernel.fn), step.inputs, single, dict(step.attributes), step.kernel.context, release)


# The run without observers executes each Program's live steps as generated Python functions,
# straight lines of kernel calls:
#
#     v3 = f7(env['x'], env['w'], **a7)          # a value only this function reads: a local
#     if type(v3) is not ndarray: v3 = one(s7, v3)
#     r = f8(v3)                                # a value a later function or the caller reads
#     if type(r) is ndarray: env['y'] = r
#     else: store(s8, r, env)
#     del v3                                    # released after its last reader
#     env.pop('x', None)
#
# On models whose steps take microseconds, a loop's unpacking and branching per step, and the
# environment's stores, lookups and pops for values made and freed within one function, are a
# large share of the run (bench_executors.py measures the two executors). A value stays in the environment when it is a graph output, is read after its
# function, is read by a control-flow step through its context (implicit inputs), or comes from a
# step with several outputs. Values keep their names only as string literals (repr), so any name
# is safe; kernels, steps and attributes are the functions' globals. One function per
# SEGMENT_STEPS steps: the compiler's working memory grows with the source it compiles at once,
# and the process keeps it (BENCHMARKS.md, "Measurements behind the code"). Line numbers map back to steps for errors.
SEGMENT_STEPS = 16
# False: runs without observers execute the loop of _run_program too (tests run the error
# contract on both executors; benchmarks/bench_executors.py measures what the generated path buys).
GENERATED_RUNS = True
LiveRun = Callable[[dict[str, Any], tuple[str, ...], "ProgramCache | None"], None]


class LiveSegment(NamedTuple):
    run: LiveRun  # run(env, path, programs)
    line_owners: tuple[int, ...]  # per source line, the index in Program.live of its step (-1: none)


_COMPILING = threading.Lock()


def _compiled(program: Program) -> list[LiveSegment]:
    if not program.compiled and program.live:
        with _COMPILING:  # threads sharing a Program compile it once
            if not program.compiled:
                live = program.live
                segments = [
                    _compile_live(live, start, min(start + SEGMENT_STEPS, len(live)), program.constants)
                    for start in range(0, len(live), SEGMENT_STEPS)
                ]
                # All at once: a thread that does not take the lock must never see a partial list.
                program.compiled.extend(segments)
    return program.compiled


def _compile_live(live: tuple[LiveStep, ...], start: int, stop: int, constants: Mapping[str, Any]) -> LiveSegment:
    """Live steps ``start:stop`` as one function ``run(env, path, programs)``."""
    names: dict[str, Any] = {"StepContext": StepContext, "ndarray": np.ndarray, "store": _store_outputs,
                             "one": _single_output, "constants": constants}
    local = _segment_locals(live, start, stop)
    lines = ["def run(env, path, programs):"]
    owners = [-1]
    for i in range(start, stop):
        step, fn, inputs, single, attributes, context, release = live[i]
        names[f"f{i}"], names[f"s{i}"] = fn, step
        arguments = [local.get(name, f"env[{name!r}]") for name in inputs]
        if context:
            arguments.insert(0, f"StepContext(env, (), path, s{i}, programs, constants)")
        if attributes:
            names[f"a{i}"] = attributes
            arguments.append(f"**a{i}")
        call = f"f{i}({', '.join(arguments)})"
        if single is not None and single in local:
            variable = local[single]
            body = [f"{variable} = {call}", f"if type({variable}) is not ndarray: {variable} = one(s{i}, {variable})"]
        elif single is not None:
            body = [f"r = {call}", f"if type(r) is ndarray: env[{single!r}] = r", f"else: store(s{i}, r, env)"]
            if single in release:
                body.append("r = None")  # an output nothing reads is freed now, not one step later
        else:
            body = [f"store(s{i}, {call}, env)"]
        body.extend(f"del {local[name]}" if name in local else f"env.pop({name!r}, None)" for name in release)
        lines.extend(f"    {line}" for line in body)
        owners.extend([i] * len(body))
    code = compile("\n".join(lines), "<sealtrace live steps>", "exec")
    exec(code, names)  # the source above: the Plan's names only as repr literals
    return LiveSegment(names["run"], tuple(owners))


def _segment_locals(live: tuple[LiveStep, ...], start: int, stop: int) -> dict[str, str]:
    """The values of live steps ``start:stop`` that can be local variables of their function, by
    name: single outputs released within the segment (so neither graph outputs nor read later)
    that no step of the segment reads through its context."""
    through_context = {name for i in range(start, stop) for name in live[i].step.implicit_inputs}
    released = {name for i in range(start, stop) for name in live[i].release}
    local: dict[str, str] = {}
    for i in range(start, stop):
        single = live[i].single
        if single is not None and single in released and single not in through_context:
            local[single] = f"v{i}"
    return local


def _single_output(step: Step, result: Any) -> Any:
    """A single-output kernel's result that is not an array (a scalar, a one-tuple), as the value
    _store_outputs would store."""
    outputs = as_outputs(result)
    if not outputs:
        raise _missing_output(step, 0)
    return outputs[0]


def _fold(step: Step, constants: dict[str, Any]) -> FoldedStep | None:
    """Evaluate ``step`` now if all it reads is constant and its outputs are safe to keep."""
    if (
        step.kernel.context
        or step.implicit_inputs
        or step.op_type in NONDETERMINISTIC_OPS
        or any(name and name not in constants for name in step.inputs)
    ):
        return None
    args = tuple(constants[name] if name else None for name in step.inputs)
    try:
        result = step.kernel.fn(*args, **step.attributes)
        outputs = as_outputs(result if is_native() else _canonical_result(result))
    except Exception:  # it fails again at run time, where the error names its step
        return None
    named = [(out, name) for out, name in zip(outputs, step.outputs, strict=False) if name]
    if len(named) < sum(1 for name in step.outputs if name):
        return None
    if not all(type(out) is np.ndarray for out, _ in named):
        return None  # sequences are mutable lists: made afresh every run
    read = sum(a.nbytes for a in args if isinstance(a, np.ndarray))
    allocated = sum(out.nbytes for out, _ in named if out.base is None)
    if allocated > FOLD_GROWTH * read + FOLD_ALLOWANCE:
        return None
    kept: list[Any] = [None] * len(step.outputs)
    for i, name in enumerate(step.outputs):
        if not name:
            continue
        out = outputs[i]
        if any(out is a for a in args):
            out = out.view()  # a new read-only view: never change the flags of a weight the Plan owns
        out.setflags(write=False)
        constants[name] = kept[i] = out
    return FoldedStep(args, tuple(kept))


class ProgramCache:
    """Programs by Plan, built on first use and dropped with their Plan."""

    def __init__(self, fold: bool = True) -> None:
        self.fold = fold
        self._programs: weakref.WeakKeyDictionary[Plan, Program] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def get(self, plan: Plan, outer_constants: Mapping[str, Any] | None = None) -> Program:
        """``plan``'s Program; a subgraph Plan has one enclosing step, so ``outer_constants`` (its
        Program's constants) are the same on every call."""
        program = self._programs.get(plan)
        if program is None:
            with self._lock:
                program = self._programs.get(plan)
                if program is None:
                    program = self._programs[plan] = prepare(plan, self.fold, outer_constants)
        return program


class ReferenceBackend(ObservedRuns):
    """Faithful, deterministic NumPy execution of a Plan, reporting every step to observers.

    ``numerics``: "portable" (the default) computes every result as docs/numerics.md defines it,
    the same bits on any CPU, BLAS, thread count and NumPy version; "native" lets NumPy and the
    BLAS round as the host's kernels do (faster, host-dependent; see sealtrace.ops.numerics).
    ``threads`` is how many threads NumPy's BLAS may use during a run (None, the default: as the
    environment sets it, all cores unless OPENBLAS_NUM_THREADS says otherwise). Portable results
    do not depend on it; native ones do (see :mod:`sealtrace.backends.threads`).
    ``fold=False`` runs weight-only steps on every run instead of once (see the module docstring).
    """

    name = "reference"
    per_step = True

    def __init__(self, threads: int | None = None, fold: bool = True, numerics: str = PORTABLE) -> None:
        self.numerics = check_mode(numerics)
        self.threads = threads
        self.programs = ProgramCache(fold)

    @property
    def version(self) -> str:
        return __version__

    @property
    def numerics_info(self) -> dict[str, str]:
        """What an audit log's header records of the numerics a run used."""
        return {"mode": self.numerics, "spec": SPEC_VERSION}

    def _prepare_run(self, plan: Plan, feeds: Mapping[str, Any], observers: Sequence[StepObserver]) -> Any:
        if plan.unsupported:
            raise UnsupportedError(list(plan.unsupported))

    def _execute_run(
        self, plan: Plan, feeds: Mapping[str, Any], observers: Sequence[StepObserver], prepared: Any
    ) -> dict[str, Any]:
        with blas_threads(self.threads), numerics_mode(self.numerics):
            outputs = execute(plan, feeds, observers, (), self.programs)
        if self.numerics == PORTABLE:
            outputs = [canonical_nan_value(value) for value in outputs]
        constant_ids = self.programs.get(plan).constant_ids
        feed_ids = {id(v) for v in feeds.values()}
        outputs = [_owned(value, constant_ids, feed_ids) for value in outputs]
        return dict(zip(plan.output_names, outputs, strict=True))


def _owned(value: Any, constant_ids: frozenset[int], feed_ids: set[int]) -> Any:
    """A graph output the caller may keep and modify: views (Expand's broadcast, a Reshape of a
    weight), folded constants and the caller's own arrays (Identity of an input) are copied, as
    ONNX Runtime hands back fresh arrays."""
    if isinstance(value, np.ndarray) and (
        id(value) in constant_ids or id(value) in feed_ids or not (value.flags.owndata and value.flags.writeable)
    ):
        return value.copy()
    if isinstance(value, list):
        return [_owned(v, constant_ids, feed_ids) for v in value]
    return value


class StepContext(StandaloneContext):
    """The KernelContext handed to control-flow kernels inside a run: subgraphs run in the run's
    environment (captured outer values), with its observers and its Programs."""

    __slots__ = ("_constants", "_env", "_observers", "_programs")

    def __init__(
        self,
        env: dict[str, Any],
        observers: Sequence[StepObserver],
        path: tuple[str, ...],
        step: Step,
        programs: ProgramCache | None = None,
        constants: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(step, path)
        self._env = env
        self._observers = observers
        self._programs = programs
        self._constants = constants  # the running Program's: what its subgraphs may fold

    def run_subgraph(self, name: str, plan: Plan, feeds: Sequence[Any]) -> list[Any]:
        call = self._calls.get(name, 0)
        self._calls[name] = call + 1
        path = (*self._path, self._step.name, name, str(call))
        programs = self._programs
        if programs is None:  # inside a Plan run without a ProgramCache (standalone_context)
            outer = {c: self._env[c] for c in plan.captures}
            outer.update(zip(plan.input_names, feeds, strict=False))
            return execute(plan, outer, self._observers, path)
        # Inside a run: the body runs in the enclosing run's np.errstate, its environment made
        # straight from the Program's constants (a model may run several If steps per call).
        program = programs.get(plan, self._constants)
        env = program.run_constants.copy()
        if plan.captures:
            outer_env = self._env
            env.update((c, outer_env[c]) for c in plan.captures)
        if feeds:
            env.update(zip(plan.input_names, feeds, strict=False))
        env[""] = None
        _run_program(program, env, path, self._observers, programs)
        return [env[name] for name in plan.output_names]


def execute(
    plan: Plan,
    feeds: Mapping[str, Any],
    observers: Sequence[StepObserver],
    path: tuple[str, ...],
    programs: ProgramCache | None = None,
) -> list[Any]:
    """Run ``plan`` on ``feeds`` (which may also carry captured outer values); return its outputs.

    With ``programs``, weight-only steps come from its cache; without, every step runs.
    """
    program = programs.get(plan) if programs is not None else prepare(plan, fold=False)
    env: dict[str, Any] = program.run_constants.copy()
    env.update(feeds)
    env[""] = None  # an omitted optional input reads as None without a test per input
    # Floating-point warnings are off for the whole run (IEEE results are the spec), once here
    # rather than once per kernel call.
    with np.errstate(all="ignore"):
        _run_program(program, env, path, observers, programs)
    return [env[name] for name in plan.output_names]


def standalone_context(step: Step, path: tuple[str, ...] = ()) -> StandaloneContext:
    """The KernelContext of ``step`` called outside a run (sealtrace.ops.registry.call_step): its
    subgraphs run here, unobserved."""
    return StandaloneContext(step, path, _execute_unobserved)


def _execute_unobserved(plan: Plan, feeds: Mapping[str, Any], path: tuple[str, ...]) -> list[Any]:
    return execute(plan, feeds, (), path)


def _run_program(
    program: Program,
    env: dict[str, Any],
    path: tuple[str, ...],
    observers: Sequence[StepObserver],
    programs: ProgramCache | None,
) -> None:
    """Run ``program``'s steps in ``env``: without observers, its generated functions (see
    LiveSegment; GENERATED_RUNS); with observers, the loop below, every step in Plan order and the
    folded ones reported from the cache. Without a ProgramCache (a control-flow kernel called
    outside a run: the torch bridge) the Program lives for this one call, and generating its code
    would cost more than it saves: the loop runs it."""
    if GENERATED_RUNS and not observers and programs is not None:
        _run_live(program, env, path, programs)
        return
    report = [observer.on_step for observer in observers]
    folded_events = _folded_events(program, path) if report else {}
    # The digests observers take see canonical NaNs. A run without observers makes only its
    # outputs canonical (ReferenceBackend.run), as the generated functions do; a Program run
    # without a ProgramCache hands its outputs straight back to a kernel, so its steps' are made
    # canonical as they run.
    canonical = not is_native() and (bool(report) or programs is None)
    constants = program.constants
    for step, live, folded, release in program.observed:
        if live is not None:
            _, fn, inputs, single, attributes, context, _ = live
            args = [env[name] for name in inputs]
            try:
                if context:
                    result = fn(StepContext(env, observers, path, step, programs, constants), *args, **attributes)
                else:
                    result = fn(*args, **attributes)
            except SealtraceError:
                raise
            except Exception as exc:  # any kernel failure is reported with its step
                raise _kernel_error(step, path, exc) from exc
            if canonical:
                result = _canonical_result(result)
            if single is not None and type(result) is np.ndarray:
                env[single] = result
                outputs: list[Any] = [result]
            else:
                _store_outputs(step, result, env)
                outputs = [env[n] if n else None for n in step.outputs] if report else []
            if report:
                event = StepEvent(path, step, args, outputs)
                for on_step in report:
                    on_step(event)
                del event
            del args, outputs, result  # nothing here holds a released value past its last reader
        elif report:
            assert folded is not None
            cached = folded_events.get(step.index)
            if cached is None:
                cached = folded_events[step.index] = StepEvent(path, step, folded.inputs, folded.outputs, True)
            for on_step in report:
                on_step(cached)
        for name in release:
            env.pop(name, None)


def _folded_events(program: Program, path: tuple[str, ...]) -> dict[int, StepEvent]:
    """The cached events of ``program``'s folded steps under ``path``, by step index. Loop bodies
    run under a new path each iteration: the cache keeps a bounded number of paths."""
    folded_events = program.folded_events.get(path)
    if folded_events is None:
        folded_events = {}
        if len(program.folded_events) < FOLDED_EVENT_PATHS:
            program.folded_events[path] = folded_events
    return folded_events


def _canonical_result(result: Any) -> Any:
    """A kernel's result with every NaN of its float outputs canonical (docs/numerics.md, "NaN")."""
    if type(result) is tuple:
        return tuple(canonical_nan_value(value) for value in result)
    return canonical_nan_value(result)


def _run_live(program: Program, env: dict[str, Any], path: tuple[str, ...], programs: ProgramCache | None) -> None:
    """The run without observers: the Program's generated functions (see LiveSegment)."""
    segment = None
    try:
        for segment in _compiled(program):
            segment.run(env, path, programs)
    except SealtraceError:
        raise
    except Exception as exc:  # any kernel failure is reported with its step
        assert segment is not None
        raise _kernel_error(program.live[_failed_step(segment, exc)].step, path, exc) from exc


def _failed_step(segment: LiveSegment, exc: Exception) -> int:
    """Which live step raised ``exc``: the line of the generated function its traceback passed."""
    code = segment.run.__code__
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return segment.line_owners[tb.tb_lineno - 1]
        tb = tb.tb_next
    raise AssertionError("a live step's error has no line in its generated function") from exc


# NumPy's ValueErrors for a shape whose byte count does not fit in an address space.
_TOO_BIG = re.compile(r"array is too big|Maximum allowed (size|dimension) exceeded")


def _kernel_error(step: Step, path: tuple[str, ...], exc: Exception) -> KernelError | BudgetExceededError:
    where = "/".join((*path, step.name))
    if isinstance(exc, MemoryError) or (isinstance(exc, ValueError) and _TOO_BIG.search(str(exc))):
        # NumPy refused an allocation its inputs declared (an empty [2**40, 0] feed can declare
        # terabytes): bad input, as the memory budget's own refusals are.
        return BudgetExceededError(
            f"step {step.index} {where!r} ({step.op_type}): its result would need more memory than "
            f"there is ({type(exc).__name__}: {exc}); the memory budget is {format_size(memory_budget())}"
        )
    return KernelError(f"step {step.index} {where!r} ({step.op_type}) failed: {type(exc).__name__}: {exc}")


def _store_outputs(step: Step, result: Any, env: dict[str, Any]) -> None:
    """Put a kernel's outputs into ``env`` under the step's output names (omitted ones skipped)."""
    outputs = as_outputs(result)
    for i, name in enumerate(step.outputs):
        if name:
            if i >= len(outputs):
                raise _missing_output(step, i)
            env[name] = outputs[i]


def _missing_output(step: Step, i: int) -> KernelError:
    return KernelError(
        f"step {step.index} {step.name!r} ({step.op_type}): output {i} ({step.outputs[i]!r}) "
        "was asked for but the kernel does not produce it"
    )
