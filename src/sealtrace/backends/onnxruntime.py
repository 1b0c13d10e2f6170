"""The ONNX Runtime backend: runs the Plan's source model in an onnxruntime.InferenceSession.

Two modes:
- optimized (what users deploy): ORT's graph optimizations on; only graph outputs come back, so
  observers see the run's start and end but no steps.
- per-op: every intermediate value of the top-level graph is exposed as a graph output and graph
  optimizations are disabled (fusions would remove the very values we compare). Each top-level step
  is reported to observers in Plan order with its inputs and outputs, exactly as the reference
  backend reports them. Steps inside subgraphs (If/Loop/Scan bodies) are not visible to ORT's outputs
  and are not reported; their enclosing step is.
  A session that outputs every value hands them all back at once: the whole run's intermediates
  alive together. So the Plan is cut into segments of consecutive steps (SEGMENT_STEPS each), one
  session per segment, built on the first run and cached per Plan; a segment's inputs are the values
  live at its cut. Segments run one after another as the steps are consumed (:meth:`stream`), so
  only one segment's outputs and the values still needed later are alive at a time. Each node
  still runs on its own ORT kernel with its own inputs, so the values are those of one session.
  The segment sessions read the Plan's own weight arrays (SessionOptions.add_initializer) rather
  than copies of their own, so the weights are in memory once for them and the reference backend.
  But ORT prepacks constant MatMul weights (a packed copy each, kept by its session): on a model of
  large weights (LARGE_WEIGHTS bytes and more), each segment's session is built as the segment is
  reached and dropped once it has run, so that the packed copies of one segment are alive at a time;
  its large weights are then declared without bytes and handed over from the Plan's arrays
  (add_external_initializers: ORT copies them, for that segment only, with no serialized copy).
By default the mode follows the observers: per-op when a run has observers, optimized otherwise.
Models over 2 GB are handed to ORT through a temporary file with external data.
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import onnx
import onnxruntime as ort

from sealtrace.backends.base import ObservedRuns
from sealtrace.errors import BackendError
from sealtrace.plan.events import StepEvent, StepObserver
from sealtrace.plan.model import Plan

_PROTOBUF_LIMIT = 2_000_000_000
# Steps per per-op segment (Constant nodes not counted): bounds how many intermediate values ORT
# hands back at once, while keeping the number of session.run calls (tens of microseconds each) small.
SEGMENT_STEPS = 16
# From this many bytes of weights on, segment sessions are built per run and dropped after their
# segment (see the module docstring): rebuilding costs set-up time on every run, keeping them all
# costs a prepacked copy of every MatMul weight.
LARGE_WEIGHTS = 256 << 20
_LEVELS = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


class OnnxRuntimeBackend(ObservedRuns):
    """ONNX Runtime on the CPU, optimized or per-op (see the module docstring)."""

    name = "onnxruntime"
    # ORT executes the ONNX model itself: steps without a NumPy kernel (com.microsoft ops) are fine.
    needs_kernels = False

    def __init__(
        self, threads: int | None = None, optimization: str = "all", per_op: bool | None = None,
        keep_sessions: bool | None = None,
    ) -> None:
        """``keep_sessions``: whether per-op segment sessions are kept from run to run (None: unless
        the Plan's weights are LARGE_WEIGHTS bytes or more; see the module docstring)."""
        if optimization not in _LEVELS:
            raise BackendError(f"unknown optimization level {optimization!r}; choose one of {', '.join(_LEVELS)}")
        self.threads = threads
        self.optimization = optimization
        self.per_op = per_op
        self.keep_sessions = keep_sessions
        self._sessions: dict[tuple[int, bool], tuple[Plan, ort.InferenceSession]] = {}
        # Per Plan: its segments, per step the values to drop after it (graph outputs kept), the
        # element types segment models are built with, and whether the segments' sessions are kept.
        self._segments: dict[int, _Segments] = {}
        self._tmp: list[tempfile.TemporaryDirectory[str]] = []
        # Per Plan: its weights as OrtValues over the Plan's arrays, and its sparse initializers' names.
        self._weights: dict[int, tuple[Plan, dict[str, Any], set[str]]] = {}
        self._running_per_op = False

    @property
    def version(self) -> str:
        return str(ort.__version__)

    @property
    def per_step(self) -> bool:
        """Whether the current (or last) run reports every step: per-op mode."""
        return bool(self.per_op if self.per_op is not None else self._running_per_op)

    def describe(self, per_op: bool) -> dict[str, Any]:
        """Settings that shape the numbers, for audit headers and reports."""
        return {
            "mode": "per-op" if per_op else "optimized",
            "graph_optimization": "disabled" if per_op else self.optimization,
            "intra_op_threads": self.threads or 0,
        }

    def session_for(self, plan: Plan, per_op: bool = False) -> ort.InferenceSession:
        """The InferenceSession for ``plan`` in the given mode, created once per Plan.

        The per-op session exposes every top-level value at once; runs use segments instead (see
        the module docstring), this one-piece form is for callers that want ORT's view whole.
        """
        key = (id(plan), per_op)
        cached = self._sessions.get(key)
        if cached is not None and cached[0] is plan:
            return cached[1]
        if plan.source is None:
            raise BackendError("the onnxruntime backend needs a Plan built from an ONNX model")
        model = _expose_intermediates(plan) if per_op else plan.source
        session = self._session(model, per_op)
        self._sessions[key] = (plan, session)
        return session

    def _session(
        self, model: onnx.ModelProto, per_op: bool, shared: Mapping[str, Any] | None = None,
        without_bytes: Collection[str] = (),
    ) -> ort.InferenceSession:
        options = ort.SessionOptions()
        bare = [name for name in without_bytes if shared and name in shared]
        if bare:
            # Declared without bytes in the model (_segment_model): ORT copies these from the Plan's
            # arrays once (no serialized copy, no parsed copy); a transient session's copy goes with it.
            assert shared is not None
            options.add_external_initializers(bare, [shared[name] for name in bare])
        for name, value in (shared or {}).items():
            if name not in without_bytes:
                # Used in place of the model's initializer of that name, without a copy.
                options.add_initializer(name, value)
        if self.threads:
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
        options.graph_optimization_level = _LEVELS["disabled" if per_op else self.optimization]
        options.log_severity_level = 3
        if per_op:
            # A segment's buffers are handed back as outputs. An arena per segment session would
            # keep each segment's high-water mark for the session's lifetime; plain malloc leaves
            # the freed buffers scattered over the heap (the run's memory grows with fragmentation).
            # One arena shared by all segment sessions is reused from segment to segment.
            _shared_arena()
            options.add_session_config_entry("session.use_env_allocators", "1")
            # Segments run one after another, each on its own session's threads: threads left
            # spinning after a segment would take the cores from the next one and from the caller.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            session = ort.InferenceSession(self._loadable(model), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT raises its own exception types
            raise BackendError(f"onnxruntime cannot load the model: {_first_line(exc)}") from None
        _release_model_bytes(session)
        return session

    def _loadable(self, model: onnx.ModelProto) -> bytes | str:
        if model.ByteSize() < _PROTOBUF_LIMIT:
            return model.SerializeToString()
        tmp = tempfile.TemporaryDirectory(prefix="sealtrace-ort-")
        self._tmp.append(tmp)
        path = Path(tmp.name) / "model.onnx"
        onnx.save_model(model, str(path), save_as_external_data=True, location="model.data")
        return str(path)

    def _prepare_run(self, plan: Plan, feeds: Mapping[str, Any], observers: Sequence[StepObserver]) -> Any:
        """The session of an optimized run (None: a per-op run)."""
        per_op = self.per_op if self.per_op is not None else bool(observers)
        self._running_per_op = per_op
        return None if per_op else self.session_for(plan, False)

    def _execute_run(
        self, plan: Plan, feeds: Mapping[str, Any], observers: Sequence[StepObserver], prepared: Any
    ) -> dict[str, Any]:
        if prepared is None:
            stream = self.stream(plan, feeds)
            for event in stream:
                for observer in observers:
                    observer.on_step(event)
            return stream.outputs
        return dict(zip(plan.output_names, self._run(prepared, plan.output_names, feeds), strict=True))

    def stream(self, plan: Plan, feeds: Mapping[str, Any], inputs: bool = True) -> StepStream:
        """Per-op mode as an iterator of StepEvents in Plan order: each segment runs when its first
        step is asked for, and values are dropped as the Plan's release schedule allows.
        ``inputs=False``: the events carry no inputs (for a consumer that reads only outputs)."""
        if plan.source is None:
            raise BackendError("the onnxruntime backend needs a Plan built from an ONNX model")
        self._running_per_op = True
        cached = self._segments.get(id(plan))
        if cached is None or cached.plan is not plan:
            segments = _cut(plan, SEGMENT_STEPS)
            # Segment models are typed by shape inference's element types; shapes stay free
            # (dynamic axes).
            types = _static_types(plan, feeds)
            keep_sessions = self.keep_sessions
            if keep_sessions is None:
                keep_sessions = sum(getattr(w, "nbytes", 0) for w in plan.initializers.values()) < LARGE_WEIGHTS
            if keep_sessions:
                # Every session is built here, before the first segment runs (set-up, not run time).
                for segment in segments:
                    self._build_segment(plan, segment, types)
            keep = set(plan.output_names)
            release = tuple(tuple(name for name in names if name not in keep) for names in plan.release_after)
            cached = _Segments(plan, segments, release, types, keep_sessions)
            self._segments[id(plan)] = cached
        return StepStream(self, plan, cached.segments, feeds, cached.release, inputs, cached)

    def _build_segment(
        self, plan: Plan, segment: _Segment, types: Mapping[str, onnx.TypeProto], transient: bool = False
    ) -> None:
        """The segment's session from static element types; types ORT rejects (or that shape
        inference did not find) leave it to be built from the values at run time."""
        if all(name in types for name in segment.inputs):
            with contextlib.suppress(BackendError):
                segment.session = self._segment_session(plan, segment, types, transient)

    def _segment_session(
        self, plan: Plan, segment: _Segment, types: Mapping[str, onnx.TypeProto], transient: bool = False
    ) -> ort.InferenceSession:
        """The session of one segment, reading the Plan's weight arrays in place (add_initializer).

        ``transient`` (a session dropped after its segment has run): its large weights are declared
        without bytes and copied by ORT from the Plan's arrays, one copy alive while the segment
        runs instead of three while the session is built (the model's, its serialized bytes and ORT's
        parse); where ORT refuses that (shape inference reading such a weight), the usual session.
        """
        shared = self._shared_weights(plan, segment)
        if transient:
            large = {
                name for name in segment.weights if name in shared and plan.initializers[name].nbytes >= _STUB_BYTES
            }
            if large:
                with contextlib.suppress(BackendError):
                    return self._session(_segment_model(plan, segment, types, large, shared), True, shared, large)
        return self._session(_segment_model(plan, segment, types, (), shared), True, shared)

    def _shared_weights(self, plan: Plan, segment: _Segment) -> dict[str, Any]:
        """The Plan's own arrays of the weights ``segment`` reads, as OrtValues that its session
        uses instead of deserializing copies of its own: one set shared by all segment sessions
        and the reference backend (whose weights are the same arrays). Sparse initializers and
        arrays ORT cannot wrap as they are stay in the segment model."""
        cached = self._weights.get(id(plan))
        if cached is None or cached[0] is not plan:
            source = plan.source
            sparse = {t.values.name for t in source.graph.sparse_initializer} if source is not None else set()
            cached = (plan, {}, sparse)
            self._weights[id(plan)] = cached
        values, sparse = cached[1], cached[2]
        found: dict[str, Any] = {}
        for name in segment.weights:
            value = values.get(name)
            if value is None:
                array = plan.initializers.get(name)
                if (
                    name in sparse
                    or type(array) is not np.ndarray
                    or array.dtype.kind not in "biuf"
                    or not array.dtype.isnative
                    or not array.flags.c_contiguous
                ):
                    continue
                value = values[name] = ort.OrtValue.ortvalue_from_numpy(array)
            found[name] = value
        for position in segment.constants:
            # An earlier Constant this segment reads: an initializer over the Plan's array of its value
            # (ORT turns a Constant node into an initializer anyway), not a copy in every segment.
            step = plan.steps[position]
            name = step.outputs[0] if step.outputs else ""
            array = _constant_value(step)
            if not name or array is None:
                continue
            value = values.get(name)
            if value is None:
                value = values[name] = ort.OrtValue.ortvalue_from_numpy(array)
            found[name] = value
        segment.shared = found  # held as long as the session (ORT reads the arrays, never owns them)
        return found

    def _run(self, session: ort.InferenceSession, names: Sequence[str], feeds: Mapping[str, Any]) -> list[Any]:
        try:
            return list(session.run(list(names), dict(feeds)))
        except Exception as exc:  # ORT raises its own exception types
            raise BackendError(f"onnxruntime failed: {_first_line(exc)}") from None


def _release_model_bytes(session: ort.InferenceSession) -> None:
    """Let go of the serialized model a session built from bytes keeps (onnxruntime's Python
    wrapper holds it for the life of the session, only to rebuild the session when a provider
    fails over, which a CPU-only session never does): on a per-op segment that repeats the Constant
    nodes it reads, or a model of embedded weights, that is a second copy of those bytes."""
    session.disable_fallback()
    if getattr(session, "_model_bytes", None) is not None:
        session._model_bytes = None


_ARENA: list[bool] = []


def _shared_arena() -> None:
    """Register, once per process, the CPU arena that per-op segment sessions share."""
    if _ARENA:
        return
    # Grow by what is asked (not by powers of two) so the arena tracks the largest live set.
    config = ort.OrtArenaCfg({"arena_extend_strategy": 1})
    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    try:
        ort.create_and_register_allocator(info, config)
    except Exception as exc:  # already registered by someone else in this process: share theirs
        if "already" not in str(exc).lower():
            raise BackendError(f"onnxruntime cannot create the shared arena: {_first_line(exc)}") from None
    _ARENA.append(True)


class _Segments(NamedTuple):
    """A Plan cut into segments, with what every run of them needs."""

    plan: Plan
    segments: list[_Segment]
    release: tuple[tuple[str, ...], ...]
    types: dict[str, onnx.TypeProto]
    keep_sessions: bool


@dataclass
class _Segment:
    """Consecutive top-level steps run as one ORT session."""

    start: int  # index into plan.steps
    stop: int
    inputs: tuple[str, ...]  # values it reads that the feeds or earlier segments produce
    weights: tuple[str, ...]  # initializers it reads
    outputs: tuple[str, ...]  # every value its steps produce
    # Earlier Constant nodes whose values it reads: repeated in the segment, because ORT treats a
    # Constant's value as a weight (prepacked for MatMul, for one), which a graph input is not, and
    # the numbers must be those of the one-piece per-op session.
    constants: tuple[int, ...] = ()
    session: ort.InferenceSession | None = None
    shared: dict[str, Any] | None = None  # the OrtValues of the Plan's weights its session reads
    typed_from_values: bool = False  # its inputs' types came from run-time values, not shape inference


def _cut(plan: Plan, size: int) -> list[_Segment]:
    fed = set(plan.input_names)
    constant_steps = {
        name: position
        for position, step in enumerate(plan.steps)
        if step.op_type == "Constant" and step.domain in ("", "ai.onnx")
        for name in step.outputs
        if name
    }
    # Constant nodes cost ORT nothing to run (it holds their values as weights): only the other
    # steps count towards a segment's size.
    bounds = [0]
    counted = 0
    for position, step in enumerate(plan.steps):
        if step.op_type == "Constant" and step.domain in ("", "ai.onnx"):
            continue
        if counted == size:
            bounds.append(position)
            counted = 0
        counted += 1
    bounds.append(len(plan.steps))
    segments = []
    for start, stop in itertools.pairwise(bounds):
        steps = plan.steps[start:stop]
        produced: set[str] = set()
        outputs: list[str] = []
        reads: dict[str, None] = {}
        for step in steps:
            for name in (*step.inputs, *step.implicit_inputs):
                if name and name not in produced:
                    reads.setdefault(name)
            for name in step.outputs:
                if name:
                    produced.add(name)
                    outputs.append(name)
        weights = tuple(n for n in reads if n in plan.initializers and n not in fed)
        constants = tuple(constant_steps[n] for n in reads if n in constant_steps and n not in fed)
        inputs = tuple(n for n in reads if (n not in plan.initializers or n in fed) and n not in constant_steps)
        segments.append(_Segment(start, stop, inputs, weights, tuple(outputs), constants))
    return segments


class StepStream:
    """The per-op run of one Plan on ONNX Runtime, one segment at a time (see :meth:`stream`).

    Iterate for the StepEvents; ``outputs`` holds the graph outputs once iteration is complete.
    """

    def __init__(
        self, backend: OnnxRuntimeBackend, plan: Plan, segments: list[_Segment], feeds: Mapping[str, Any],
        release: Sequence[Sequence[str]] | None = None, inputs: bool = True, cut: _Segments | None = None,
    ) -> None:
        self.backend = backend
        self.plan = plan
        self.segments = segments
        self.feeds = feeds
        if release is None:
            keep = set(plan.output_names)
            release = [[name for name in names if name not in keep] for names in plan.release_after]
        self.release = release
        self.inputs = inputs
        # Sessions built as segments are reached and dropped after them (large weights), if not kept.
        self.cut = cut
        self.outputs: dict[str, Any] = {}

    def __iter__(self) -> Iterator[StepEvent]:
        plan = self.plan
        steps = plan.steps
        release = self.release
        with_inputs = self.inputs
        env: dict[str, Any] = dict(self.feeds)
        weights = plan.initializers
        cut = self.cut
        transient = cut is not None and not cut.keep_sessions
        for segment in self.segments:
            fed = {name: env[name] for name in segment.inputs}
            if transient and segment.session is None and not segment.typed_from_values:
                assert cut is not None
                self.backend._build_segment(plan, segment, cut.types, transient=True)
            if segment.session is None:  # an input whose type shape inference did not find
                segment.session = self._typed_from(fed, segment)
            try:
                values = self.backend._run(segment.session, segment.outputs, fed)
            except BackendError:
                if segment.typed_from_values:
                    raise
                # Shape inference's element type was not the value's: type the inputs from the values.
                segment.session = self._typed_from(fed, segment)
                values = self.backend._run(segment.session, segment.outputs, fed)
            env.update(zip(segment.outputs, values, strict=True))
            del fed, values
            if transient:
                # Its prepacked weights go with it; the next run builds it again.
                segment.session = None
                segment.shared = None
            for i in range(segment.start, segment.stop):
                step = steps[i]
                outputs = [env.get(n) if n else None for n in step.outputs]
                if with_inputs:
                    inputs = [(env[n] if n in env else weights.get(n)) if n else None for n in step.inputs]
                    yield StepEvent((), step, inputs, outputs)
                    del inputs
                else:
                    yield StepEvent((), step, (), outputs)
                del outputs
                for name in release[i]:
                    env.pop(name, None)
        self.outputs = {name: env[name] for name in plan.output_names}

    def _typed_from(self, fed: Mapping[str, Any], segment: _Segment) -> ort.InferenceSession:
        segment.typed_from_values = True
        types = {name: _type_of(value) for name, value in fed.items()}
        return self.backend._segment_session(self.plan, segment, types, transient=bool(self.cut and not self.cut.keep_sessions))


def _segment_model(
    plan: Plan, segment: _Segment, types: Mapping[str, onnx.TypeProto], without_bytes: Collection[str] = (),
    shared: Collection[str] = (),
) -> onnx.ModelProto:
    """A model of the segment's nodes: the live values at its cut as inputs (element types only),
    the weights it reads as initializers, every value it produces as an output. The weights named in
    ``without_bytes`` are declared as external data without their bytes (the session is handed them);
    the earlier Constants it reads whose values are in ``shared`` become initializers of those names
    (the session is handed the Plan's arrays), the others are repeated as nodes."""
    source = plan.source
    graph = onnx.GraphProto(name=f"{source.graph.name}_steps_{segment.start}_{segment.stop}")
    for i in segment.constants:
        node = plan.steps[i].node
        if node.output and node.output[0] in shared:
            tensor = onnx.TensorProto()
            tensor.CopyFrom(next(a.t for a in node.attribute if a.name == "value"))
            tensor.name = node.output[0]
            graph.initializer.append(tensor)
        else:
            graph.node.append(node)
    graph.node.extend(plan.steps[i].node for i in range(segment.start, segment.stop))
    wanted = set(segment.weights)
    for tensor in source.graph.initializer:
        if tensor.name in without_bytes:
            graph.initializer.append(_weight_without_bytes(tensor.name, plan.initializers[tensor.name]))
        elif tensor.name in wanted:
            graph.initializer.append(tensor)
    graph.sparse_initializer.extend(t for t in source.graph.sparse_initializer if t.values.name in wanted)
    graph.input.extend(onnx.helper.make_value_info(name, types[name]) for name in segment.inputs)
    graph.output.extend(onnx.ValueInfoProto(name=name) for name in segment.outputs)
    model = onnx.helper.make_model(graph, ir_version=source.ir_version, opset_imports=list(source.opset_import))
    model.functions.extend(source.functions)
    return model


# The file an external initializer without bytes names: never opened (its value is handed to the
# session, SessionOptions.add_external_initializers), but ORT wants a relative path that stays inside.
_NO_FILE = "sealtrace-weight-in-memory"
# Weights of at least this size are declared without bytes; smaller ones keep theirs (shape
# inference reads e.g. a Reshape's shape, and they cost nothing to copy).
_STUB_BYTES = 1 << 16


def _weight_without_bytes(name: str, array: np.ndarray) -> onnx.TensorProto:
    """A weight's declaration (name, element type, shape) as external data, without the data."""
    tensor = onnx.TensorProto(name=name, data_type=_elem_type(array.dtype), dims=array.shape)
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", _NO_FILE), ("offset", "0"), ("length", str(array.nbytes))):
        entry = tensor.external_data.add()
        entry.key = key
        entry.value = value
    return tensor


def _constant_value(step: Any) -> np.ndarray | None:
    """The array of a Constant step given by its ``value`` tensor, if ORT can read it in place."""
    attributes = step.attributes
    array = attributes.get("value")
    if (
        type(array) is not np.ndarray
        or any(v is not None for k, v in attributes.items() if k != "value")
        or array.dtype.kind not in "biuf"
        or not array.dtype.isnative
        or not array.flags.c_contiguous
        or not any(a.name == "value" and a.type == onnx.AttributeProto.TENSOR for a in step.node.attribute)
    ):
        return None
    return array


def _static_types(plan: Plan, feeds: Mapping[str, Any]) -> dict[str, onnx.TypeProto]:
    """Element types of the feeds and of every step output whose dtype shape inference found."""
    declared = {i.name: i.type for i in plan.source.graph.input} if plan.source is not None else {}
    # A map's key and value types cannot be told from a dict of Python numbers: the model says them.
    types = {
        name: declared[name] if isinstance(value, Mapping) and name in declared else _type_of(value)
        for name, value in feeds.items()
    }
    for step in plan.steps:
        for name, info in zip(step.outputs, step.output_info, strict=False):
            if name and info is not None and info.dtype is not None and info.kind in ("tensor", "sequence"):
                elem = _elem_type(np.dtype(info.dtype))
                tensor = onnx.helper.make_tensor_type_proto(elem, None)
                types[name] = onnx.helper.make_sequence_type_proto(tensor) if info.kind == "sequence" else tensor
    return types


def _elem_type(dtype: np.dtype[Any]) -> int:
    return onnx.TensorProto.STRING if dtype.kind in "OUS" else int(onnx.helper.np_dtype_to_tensor_dtype(dtype))


def _type_of(value: Any) -> onnx.TypeProto:
    # Element type only: shapes may change from run to run (dynamic axes), the session must not care.
    if isinstance(value, list):
        element = value[0] if value else np.zeros(0, np.float32)
        return onnx.helper.make_sequence_type_proto(_type_of(element))
    return onnx.helper.make_tensor_type_proto(_elem_type(np.asarray(value).dtype), None)


def _expose_intermediates(plan: Plan) -> onnx.ModelProto:
    """A copy of the source model whose graph outputs include every top-level step output."""
    model = onnx.ModelProto()
    model.CopyFrom(plan.source)
    existing = {o.name for o in model.graph.output}
    known = {vi.name: vi for vi in model.graph.value_info}
    for step in plan.steps:
        for name in step.outputs:
            if name and name not in existing:
                existing.add(name)
                if name in known:
                    model.graph.output.append(known[name])
                else:
                    model.graph.output.append(onnx.ValueInfoProto(name=name))
    return model


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
