"""TVM engines: a sealed model compiled by Apache TVM into a CPU shared library that names its source.

Compiling (:func:`compile_tvm`, ``sealtrace compile MODEL.seal --backend tvm -o model.so``):
the container is verified, its Plan built, and the model imported with TVM's Relax ONNX frontend
(``tvm.relax.frontend.onnx``), compiled (``tvm.compile``, LLVM CPU target) and exported as a shared
library. Before compiling, a function ``sealtrace_stamp`` is added to the module: it returns the
*stamp*, canonical JSON (``sealtrace.tvm-stamp.v1``) naming the container digest, the Plan digest,
the TVM version, the target and the inputs and outputs as compiled. The library is then bound to the
container like every artifact (a sidecar ``model.so.binding.json``, signed with ``--sign``).

Loading (:func:`load_tvm_library`, ``Session("model.so", container=..., backend="tvm")``), in this
order, because loading a shared library runs its native code (constructors run at ``dlopen``):
1. the library file is read once (a regular file, within the memory budget);
2. the container is verified and its Plan built;
3. the binding record (sidecar) is checked against *those bytes*: unmodified, bound to this
   container, signed by a trusted key when trust is given;
4. only then are the same bytes written to a private file (a fresh 0700 directory, O_EXCL, 0600)
   and loaded from there: never the user's path, which could be swapped between check and load;
5. the library's own ``sealtrace_stamp`` is called and compared with the container digest, the
   Plan digest, the binding's TVM version and the Plan's inputs and outputs.
Any failure raises :class:`~sealtrace.binding.BindingCheckError` (exit 1) before any inference.

TVM fuses operators, so an engine runs the whole model: it has graph outputs only, no per-step values.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import os
import re
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx

from sealtrace import __version__
from sealtrace.binding import (
    BindingCheck,
    BindingCheckError,
    BindingRecord,
    bind_written,
    check_bound_bytes,
    sidecar_path,
)
from sealtrace.digest import canonical_json
from sealtrace.engines.shapes import fold_shapes
from sealtrace.errors import BackendError, InputError, InvalidModelError, SealtraceError
from sealtrace.limits import memory_budget, open_regular_file, read_regular_file
from sealtrace.outputs import atomic_output, check_output
from sealtrace.plan import Plan, build_plan
from sealtrace.plan.model import Dim
from sealtrace.strictjson import loads_strict

STAMP_FORMAT = "sealtrace.tvm-stamp.v1"
STAMP_FUNCTION = "sealtrace_stamp"
MAX_STAMP_BYTES = 1 << 20
TRANSFORMATION = "tvm-relax-compile"
INSTALL_HINT = "pip install 'sealtrace[tvm]'"
_ELF_MAGIC = b"\x7fELF"


class EngineImportError(SealtraceError):
    """TVM's ONNX frontend cannot import the model; the message names the operator (exit 2)."""


class EngineCompileError(SealtraceError):
    """TVM imported the model but cannot compile or link it (exit 2)."""


def require_tvm() -> ModuleType:
    """The ``tvm`` package, or BackendError saying how to install it."""
    try:
        import tvm
        from tvm import relax  # noqa: F401  (the VM and the frontend live there)
    except ImportError as exc:
        raise BackendError(f"TVM engines need Apache TVM ({exc}); {INSTALL_HINT}") from None
    return tvm


def tvm_version() -> str:
    return str(require_tvm().__version__)


_FRAME = re.compile(r"^(#?\d+[:.]? |\^+$)")


def _first_line(exc: BaseException) -> str:
    """The line of a TVM error that says what went wrong (its messages carry C++ tracebacks), with
    the offending call where TVM names one on the next line."""
    lines = [line.strip() for line in str(exc).splitlines()]
    for i, text in enumerate(lines):
        frame = _FRAME.match(text) is not None  # "0: tvm::relax::..." lines of a C++ traceback
        if text and not frame and not text.startswith(("Traceback", "File ", "File\"", "Error converting")) and text != "^":
            following = [t for t in lines[i + 1 :] if t]
            if len(following) >= 2 and following[0].rstrip(":").lower() == "offending call":
                text += f" (offending call: {following[1]})"
            return text[:400]
    return type(exc).__name__


@contextlib.contextmanager
def _native_stderr_dropped() -> Iterator[None]:
    """TVM's C++ code writes its warnings straight to file descriptor 2, bypassing Python; a verb's
    stderr is its one error line, so they are dropped while TVM imports and compiles."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as sink:
            os.dup2(sink.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


# --- the stamp -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompiledInput:
    """One input as compiled: its name, NumPy dtype name and shape (an int per fixed axis; a
    dimension's name, or None, for an axis left dynamic)."""

    name: str
    dtype: str
    shape: tuple[Dim, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    def problem(self, value: np.ndarray) -> str | None:
        """Why ``value`` cannot be fed to this input of the engine (None: it can)."""
        if value.dtype != np.dtype(self.dtype):
            return f"dtype {value.dtype}, the engine was compiled for {self.dtype}"
        if value.ndim != len(self.shape):
            return f"rank {value.ndim}, the engine was compiled for {self.describe()}"
        for axis, (got, want) in enumerate(zip(value.shape, self.shape, strict=True)):
            if isinstance(want, int) and got != want:
                return f"axis {axis} is {got}, the engine was compiled for {self.describe()} (compile it again with --dim)"
        return None

    def describe(self) -> str:
        return f"{self.dtype}[{','.join('?' if d is None else str(d) for d in self.shape)}]"


@dataclass(frozen=True)
class EngineStamp:
    """What a compiled engine says about itself (``sealtrace_stamp``, docs/tvm.md)."""

    container_digest: str
    plan_digest: str
    tvm_version: str
    target: str
    inputs: tuple[CompiledInput, ...]
    outputs: tuple[str, ...]
    sealtrace_version: str = __version__

    def to_json(self) -> dict[str, Any]:
        return {
            "format": STAMP_FORMAT,
            "container_digest": self.container_digest,
            "plan_digest": self.plan_digest,
            "tvm_version": self.tvm_version,
            "target": self.target,
            "inputs": [i.to_json() for i in self.inputs],
            "outputs": list(self.outputs),
            "sealtrace_version": self.sealtrace_version,
        }

    @classmethod
    def from_json(cls, data: Any) -> EngineStamp:
        """The stamp from parsed JSON; ValueError naming the first field that is not as documented."""
        fields = {"format", "container_digest", "plan_digest", "tvm_version", "target", "inputs", "outputs",
                  "sealtrace_version"}  # fmt: skip
        if not isinstance(data, dict) or data.get("format") != STAMP_FORMAT:
            raise ValueError(f"not a {STAMP_FORMAT} stamp")
        if set(data) != fields:
            raise ValueError(f"fields {sorted(set(data) ^ fields)[:5]} missing or unknown")
        for key in fields - {"inputs", "outputs"}:
            if not isinstance(data[key], str):
                raise ValueError(f"{key} must be a string")
        for key in ("container_digest", "plan_digest"):
            if len(data[key]) != 64 or any(c not in "0123456789abcdef" for c in data[key]):
                raise ValueError(f"{key} must be 64 lowercase hex digits")
        if not isinstance(data["outputs"], list) or not all(isinstance(o, str) for o in data["outputs"]):
            raise ValueError("outputs must be a list of names")
        if not isinstance(data["inputs"], list):
            raise ValueError("inputs must be a list")
        inputs = []
        for entry in data["inputs"]:
            if (
                not isinstance(entry, dict)
                or set(entry) != {"name", "dtype", "shape"}
                or not isinstance(entry["name"], str)
                or not isinstance(entry["dtype"], str)
                or not isinstance(entry["shape"], list)
                or not all(d is None or type(d) in (int, str) for d in entry["shape"])
            ):
                raise ValueError("each input must be {name, dtype, shape}")
            try:
                np.dtype(entry["dtype"])
            except TypeError:
                raise ValueError(f"input {entry['name'][:40]!r}: unknown dtype") from None
            inputs.append(CompiledInput(entry["name"], entry["dtype"], tuple(entry["shape"])))
        return cls(
            container_digest=data["container_digest"],
            plan_digest=data["plan_digest"],
            tvm_version=data["tvm_version"],
            target=data["target"],
            inputs=tuple(inputs),
            outputs=tuple(data["outputs"]),
            sealtrace_version=data["sealtrace_version"],
        )


def parse_stamp(data: bytes) -> EngineStamp:
    """A stamp from its bytes (canonical JSON); ValueError when it is not one."""
    if len(data) > MAX_STAMP_BYTES:
        raise ValueError(f"{len(data)} bytes, more than a stamp may be ({MAX_STAMP_BYTES})")
    try:
        parsed = loads_strict(data, duplicate_keys=True)  # the canonical form check below refuses them
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"not JSON ({type(exc).__name__})") from None
    stamp = EngineStamp.from_json(parsed)
    if canonical_json(stamp.to_json()) != data:
        raise ValueError("not in canonical form")
    return stamp


# --- importing and compiling ---------------------------------------------------------------------

_IMPORT_LOCK = threading.Lock()


def _importer_class() -> type:
    """TVM's ONNX importer, made to remember which node it is converting: its own errors name no
    operator for a failure inside an If body, and for the others only print one to stdout."""
    from tvm.relax.frontend.onnx import onnx_frontend

    base: type = onnx_frontend.ONNXGraphImporter

    class NamingImporter(base):
        converting: tuple[str, str] | None = None

        def _convert_operator(self, op_name: str, inputs: Any, attrs: dict[str, Any], opset: int) -> Any:
            custom = attrs.get("tvm_custom") or {}
            self.converting = (op_name, str(custom.get("name") or ""))
            return super()._convert_operator(op_name, inputs, attrs, opset)

    return NamingImporter


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def import_onnx(
    model: onnx.ModelProto, plan: Plan, shapes: Mapping[str, Sequence[Dim]]
) -> tuple[Any, tuple[CompiledInput, ...], int]:
    """The Relax module of ``model`` with its inputs' shapes set to ``shapes`` (an int fixes an axis,
    a name or None leaves it dynamic), the inputs as compiled, in the order of its ``main``, and the
    number of steps whose values shape folding made constants (sealtrace.engines.shapes).

    EngineImportError names the operator (and node) TVM's frontend could not import.
    """
    tvm = require_tvm()
    pinned = onnx.ModelProto()
    pinned.CopyFrom(model)
    weights = {t.name for t in pinned.graph.initializer} | {t.values.name for t in pinned.graph.sparse_initializer}
    inputs: list[CompiledInput] = []
    for graph_input in pinned.graph.input:
        if graph_input.name in weights:
            continue  # IR 3 models list their weights as inputs: TVM binds them as constants
        info = plan.inputs_by_name.get(graph_input.name)
        if info is None or info.kind != "tensor" or info.dtype is None or info.shape is None:
            what = info.describe() if info is not None else "not an input of the Plan"
            raise EngineImportError(f"input {graph_input.name!r} ({what}): a TVM engine takes tensors of known rank and dtype")
        shape = tuple(shapes.get(graph_input.name, info.shape))
        dims = graph_input.type.tensor_type.shape.dim
        if len(dims) != len(shape):
            raise EngineImportError(f"input {graph_input.name!r}: declared with {len(dims)} axes, compiled for {len(shape)}")
        for dim, size in zip(dims, shape, strict=True):
            if isinstance(size, int):
                dim.Clear()
                dim.dim_value = size
        inputs.append(CompiledInput(graph_input.name, info.dtype.name, shape))
    # Shape computations over the axes just fixed become constants (sealtrace.engines.shapes).
    pinned, folded = fold_shapes(pinned)
    # The frontend prints its failures to stdout and warns about dynamic shapes: the error says it all.
    failure: str | None = None
    with _IMPORT_LOCK, contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), _native_stderr_dropped():
        warnings.simplefilter("ignore")
        importer = _importer_class()(None, "float32", keep_params_in_input=False, sanitize=True)
        try:
            module = importer.from_onnx(pinned.graph, _opset(pinned))
        except tvm.error.OpNotImplemented as exc:
            failure = _unsupported_message(pinned, exc)
        except Exception as exc:  # the frontend raises whatever its converters raise
            converting = importer.converting
            where = f"operator {converting[0]}" + (f" (node {converting[1]!r})" if converting[1] else "") if converting else "the model"
            failure = f"TVM {tvm.__version__}'s ONNX frontend cannot import {where}, opset {_opset(pinned)}: {_first_line(exc)}"
        # A failed import leaves its block builder open, which warns (on fd 2) when it is destroyed: here.
        del importer
        gc.collect()
    if failure is not None:
        raise EngineImportError(failure)
    params = module["main"].params
    if len(params) != len(inputs):
        raise EngineImportError(f"TVM's ONNX frontend made {len(params)} parameter(s) of {len(inputs)} input(s)")
    return bounded_take(module), tuple(inputs), folded


def _unsupported_message(model: onnx.ModelProto, exc: BaseException) -> str:
    text = _first_line(exc)
    ops = sorted({op.strip() for op in text.split(":", 1)[-1].split(",") if op.strip()})
    nodes = [n.name or n.op_type for n in model.graph.node if n.op_type in ops]
    shown = f" (node(s) {', '.join(repr(n) for n in nodes[:5])}{' ...' if len(nodes) > 5 else ''})" if nodes else ""
    return f"TVM's ONNX frontend has no converter for operator(s) {', '.join(ops) or text}{shown}"


def bounded_take(module: Any) -> Any:
    """``module`` with every ``take`` (ONNX Gather) in TVM's "fast" mode switched to "clip".

    Fast mode reads outside the tensor for an index out of range (TVM says it may segfault): an
    index that comes from the feeds (a token id) would make a crash, or a read of other memory, out
    of bad input. Clipped, an index in range gives ONNX's value (the frontend has already turned
    negative indices into positive ones) and one out of range reads the nearest element, never
    outside the tensor. (ONNX calls an index out of range an error; the reference backend raises one.)
    """
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    take = tvm.ir.Op.get("relax.take")

    @mutator
    class ClipTake(PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = self.visit_expr_post_order(call)
            if call.op.same_as(take) and str(call.attrs.mode) == "fast":
                return relax.op.take(call.args[0], call.args[1], call.attrs.axis, "clip")
            return call

    rewriter = ClipTake(module)
    for var, function in module.functions_items():
        if isinstance(function, relax.Function):
            rewriter.builder_.update_func(var, rewriter.visit_expr(function))
    return rewriter.builder_.get()


def _with_stamp(module: Any, stamp: EngineStamp) -> Any:
    """``module`` with the function that returns the stamp (a constant uint8 tensor of its JSON)."""
    from tvm import relax

    if any(gv.name_hint == STAMP_FUNCTION for gv in module.get_global_vars()):
        raise EngineImportError(f"the imported module already has a function named {STAMP_FUNCTION}")
    data = np.frombuffer(canonical_json(stamp.to_json()), dtype=np.uint8).copy()
    builder = relax.BlockBuilder()
    with builder.function(STAMP_FUNCTION, []):
        builder.emit_func_output(relax.const(data))
    module[STAMP_FUNCTION] = builder.get()[STAMP_FUNCTION]
    return module


def _target(text: str) -> Any:
    tvm = require_tvm()
    try:
        target = tvm.target.Target(text)
    except Exception as exc:  # TVM raises its own error types for a target it cannot parse
        raise InputError(f"--target {text}: not a TVM target ({_first_line(exc)})") from None
    if target.kind.name != "llvm":
        raise InputError(f"--target {text}: a TVM engine runs on the CPU; give an llvm target (e.g. llvm)")
    return target


def _build(module: Any, target: Any, target_text: str) -> Any:
    tvm = require_tvm()
    with warnings.catch_warnings(), _native_stderr_dropped():
        warnings.simplefilter("ignore")
        try:
            return tvm.compile(module, target=target)
        except Exception as exc:  # TVM raises its own error types from every pass
            raise EngineCompileError(
                f"TVM {tvm.__version__} cannot compile the model for target {target_text}: {_first_line(exc)}"
            ) from None


def _export(executable: Any) -> bytes:
    with tempfile.TemporaryDirectory(prefix="sealtrace-tvm-") as tmp:
        path = Path(tmp) / "engine.so"
        try:
            executable.export_library(str(path))
        except Exception as exc:  # the system compiler links the library: its failures come as RuntimeError
            raise EngineCompileError(f"TVM cannot link the shared library: {_first_line(exc)}") from None
        return path.read_bytes()


def _verified_plan(container: str | os.PathLike[str]) -> tuple[Plan, str]:
    """The Plan of a verified container (built without requiring NumPy kernels: TVM runs the
    model) and the container digest; the same Plan-digest rule as ``load_sealed_plan``."""
    from sealtrace.container import IntegrityError, Mismatch, load_verified_model

    verified = load_verified_model(container)
    plan = build_plan(verified.model, require_kernels=False)
    recorded = verified.report.plan_digest
    if verified.sealtrace_version == __version__ and plan.digest != recorded:
        raise IntegrityError(os.fspath(container), [Mismatch("header", "plan digest", str(recorded), plan.digest)])
    assert verified.report.digest is not None
    return plan, verified.report.digest


def pinned_shapes(plan: Plan, dims: Mapping[str, int]) -> dict[str, tuple[Dim, ...]]:
    """Each input's shape with the dynamic axes that ``dims`` names (a dimension's name, or
    'INPUT:AXIS') fixed to their size; InputError for a name that is no dynamic axis of an input."""
    used: set[str] = set()
    shapes: dict[str, tuple[Dim, ...]] = {}
    for info in plan.inputs:
        if info.shape is None:
            continue
        shape: list[Dim] = []
        for axis, dim in enumerate(info.shape):
            if isinstance(dim, int) and dim > 0:
                shape.append(dim)
                continue
            by_axis = f"{info.name}:{axis}"
            key = by_axis if by_axis in dims else dim if isinstance(dim, str) and dim in dims else None
            if key is None:
                shape.append(dim if isinstance(dim, str) and dim else None)
            else:
                used.add(key)
                shape.append(int(dims[key]))
        shapes[info.name] = tuple(shape)
    unknown = sorted(set(dims) - used)
    if unknown:
        dynamic = sorted({
            label for info in plan.inputs for axis, dim in enumerate(info.shape or ())
            if not (isinstance(dim, int) and dim > 0)
            for label in ((f"{info.name}:{axis}", dim) if isinstance(dim, str) and dim else (f"{info.name}:{axis}",))
        })  # fmt: skip
        raise InputError(
            f"--dim {', '.join(unknown)}: no input has such a dynamic dimension "
            f"(dynamic: {', '.join(dynamic) or 'none: every input has a static shape'})"
        )
    return shapes


def compile_tvm(
    container: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    target: str = "llvm",
    dims: Mapping[str, int] | None = None,
    sign_with: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
) -> BindingRecord:
    """Verify ``container``, compile its Plan's model with TVM into the shared library ``output``
    (stamped with the container and Plan digests, see the module docstring), and bind it.

    ``dims`` fixes dynamic input dimensions (by name or 'INPUT:AXIS'); the others stay dynamic.
    ``output`` and its sidecar are checked before any work: an existing one is refused unless
    ``overwrite``. EngineImportError (naming the operator) or EngineCompileError when TVM cannot.
    """
    tvm = require_tvm()
    out = check_output(output, overwrite, "-o")
    check_output(sidecar_path(out), overwrite, "binding sidecar")
    if out.suffix != ".so":
        raise InputError(f"-o {output}: a TVM engine is a shared library; name it *.so")
    target_spec = _target(target)
    plan, container_digest = _verified_plan(container)
    assert plan.source is not None
    fixed = dict(dims or {})
    for name, size in fixed.items():
        if size <= 0:
            raise InputError(f"--dim {name}={size}: size must be positive")
    module, inputs, folded = import_onnx(plan.source, plan, pinned_shapes(plan, fixed))
    stamp = EngineStamp(
        container_digest=container_digest, plan_digest=plan.digest, tvm_version=str(tvm.__version__),
        target=str(target_spec), inputs=inputs, outputs=tuple(plan.output_names),
    )  # fmt: skip
    data = _export(_build(_with_stamp(module, stamp), target_spec, target))
    with atomic_output(out, force=overwrite) as f:
        f.write(data)
    return bind_written(
        out, data, container_digest, transformation=TRANSFORMATION, backend="tvm",
        backend_version=str(tvm.__version__),
        options={"target": target, "dims": dict(sorted(fixed.items())), "frontend": "tvm.relax.frontend.onnx",
                 "shape_steps_folded": folded},
        sign_with=sign_with, overwrite=overwrite,
    )  # fmt: skip


# --- loading and running -------------------------------------------------------------------------

_THREADS: list[int] = []


def _set_threads(tvm: ModuleType, threads: int) -> None:
    """TVM's thread pool (one per process) set to ``threads`` workers sharing every usable core."""
    if _THREADS and _THREADS[0] == threads:
        return
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    # Mode -3 (kSpecifyThreadShareAllCore): that many threads, none pinned to one core.
    tvm.get_global_func("runtime.config_threadpool")(-3, threads, [str(c) for c in cores])
    _THREADS[:] = [threads]


@dataclass
class TvmEngine:
    """A compiled model ready to run: TVM's Relax VM over it, and what it was compiled from.

    ``check`` and ``identity`` (the sha256 of the library file) are set for a library loaded with
    :func:`load_tvm_library`; an engine compiled in memory for one Plan (the tvm backend's own,
    without a library) has neither and its stamp's container digest is the Plan digest's stand-in.
    """

    vm: Any
    stamp: EngineStamp
    library: str | None = None
    check: BindingCheck | None = None
    identity: str | None = None
    module: Any = field(default=None, repr=False)  # keeps the loaded library alive

    def run(self, feeds: Mapping[str, Any], threads: int = 1) -> dict[str, np.ndarray]:
        """The graph outputs for ``feeds`` (already checked against the Plan), by name."""
        tvm = require_tvm()
        values = [np.asarray(feeds[spec.name]) for spec in self.stamp.inputs]
        problems = [f"input {spec.name!r}: {p}" for spec, v in zip(self.stamp.inputs, values, strict=True)
                    if (p := spec.problem(v)) is not None]  # fmt: skip
        sizes: dict[str, int] = {}
        for spec, value in zip(self.stamp.inputs, values, strict=True):
            for axis, dim in enumerate(spec.shape):
                if (
                    isinstance(dim, str)
                    and value.ndim == len(spec.shape)
                    and sizes.setdefault(dim, value.shape[axis]) != value.shape[axis]
                ):
                    problems.append(f"input {spec.name!r}: dimension {dim!r} is {value.shape[axis]}, "
                                    f"another input has it {sizes[dim]}")  # fmt: skip
        if problems:
            raise InputError("; ".join(problems))
        _set_threads(tvm, threads)
        try:
            # Not np.ascontiguousarray: it makes a 0-d array (a scalar input) 1-d.
            args = [tvm.runtime.tensor(v if v.flags.c_contiguous else v.copy(order="C")) for v in values]
            result = self.vm["main"](*args)
            outputs = [result] if hasattr(result, "numpy") else list(result)
            arrays = [o.numpy() for o in outputs]
        except Exception as exc:  # TVM raises its own error types from the compiled code
            raise BackendError(f"tvm failed: {_first_line(exc)}") from None
        if len(arrays) != len(self.stamp.outputs):
            raise BackendError(f"tvm returned {len(arrays)} output(s), the model has {len(self.stamp.outputs)}")
        return dict(zip(self.stamp.outputs, arrays, strict=True))


def compile_in_memory(plan: Plan, shapes: Mapping[str, Sequence[Dim]], target: str = "llvm") -> TvmEngine:
    """An engine for ``plan`` compiled in this process (no library file, no binding): what the tvm
    backend runs for a Plan it was given no library for."""
    tvm = require_tvm()
    from tvm import relax

    if plan.source is None:
        raise BackendError("the tvm backend needs a Plan built from an ONNX model")
    target_spec = _target(target)
    module, inputs, _folded = import_onnx(plan.source, plan, shapes)
    executable = _build(module, target_spec, target)
    stamp = EngineStamp(
        container_digest=plan.digest, plan_digest=plan.digest, tvm_version=str(tvm.__version__),
        target=str(target_spec), inputs=inputs, outputs=tuple(plan.output_names),
    )  # fmt: skip
    return TvmEngine(vm=relax.VirtualMachine(executable, tvm.cpu()), stamp=stamp)


def is_tvm_library(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` looks like a compiled engine (an ELF shared library); False for anything
    that cannot be read (the caller's own read reports it)."""
    try:
        f, _size = open_regular_file(path, "compiled library")
    except SealtraceError:
        return False
    with f:
        return f.read(4) == _ELF_MAGIC


def _load_private_copy(tvm: ModuleType, data: bytes, where: str) -> Any:
    """Load ``data`` as a TVM library from a file only this process could have written: a fresh
    directory (mode 0700) and a file created there exclusively (0600), removed once loaded."""
    folder = tempfile.mkdtemp(prefix="sealtrace-engine-")
    # Named by content: the dynamic loader reuses a loaded library of the same path.
    path = os.path.join(folder, f"engine-{hashlib.sha256(data).hexdigest()[:32]}.so")
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        with os.fdopen(os.open(path, flags, 0o600), "wb") as f:
            f.write(data)
        try:
            return tvm.runtime.load_module(path)
        except Exception as exc:  # the loader's and TVM's own error types
            raise InvalidModelError(f"{where}: bound, but not a loadable TVM library ({_first_line(exc)})") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def _read_stamp(vm: Any) -> tuple[EngineStamp | None, str | None]:
    """The engine's stamp from its own ``sealtrace_stamp``, or why there is none."""
    try:
        function = vm[STAMP_FUNCTION]
        value = function()
    except Exception:  # the VM raises its own error type for a function it does not have
        return None, f"the library carries no sealtrace stamp (no function {STAMP_FUNCTION}): not made by sealtrace compile"
    try:
        array = value.numpy()
    except Exception:  # anything but a tensor
        return None, f"{STAMP_FUNCTION} returned {type(value).__name__}, not the stamp"
    if array.dtype != np.uint8 or array.ndim != 1:
        return None, f"{STAMP_FUNCTION} returned {array.dtype}{list(array.shape)}, not the stamp"
    try:
        return parse_stamp(array.tobytes()), None
    except ValueError as exc:
        return None, f"the library's stamp is malformed: {exc}"


def load_tvm_library(
    library: str | os.PathLike[str],
    container: str | os.PathLike[str],
    *,
    trust: Sequence[str | os.PathLike[str]] = (),
    require_signature: bool = False,
    strict: bool = False,
) -> tuple[Plan, TvmEngine]:
    """Check, load and check again a TVM engine bound to ``container`` (see the module docstring
    for the order); the container's Plan and the engine. BindingCheckError (exit 1) on any
    mismatch, raised before anything of the library runs where the binding decides it."""
    tvm = require_tvm()
    from tvm import relax

    path = Path(library)
    data = read_regular_file(path, "compiled library", InputError, max_bytes=memory_budget())
    plan, container_digest = _verified_plan(container)
    check = check_bound_bytes(path, data, container, container_digest=container_digest, trust=trust,
                              require_signature=require_signature, strict=strict)  # fmt: skip
    module = _load_private_copy(tvm, data, str(path))
    try:
        vm = relax.VirtualMachine(module, tvm.cpu())
    except Exception as exc:  # a library that is not a Relax VM executable
        raise BindingCheckError(str(path), [f"not a TVM engine: {_first_line(exc)}"]) from None
    stamp, problem = _read_stamp(vm)
    if stamp is None:
        raise BindingCheckError(str(path), [problem or "no stamp"])
    failures = stamp_mismatches(stamp, container_digest, plan, check.record, Path(container).name)
    if failures:
        raise BindingCheckError(str(path), failures)
    identity = hashlib.sha256(data).hexdigest()
    return plan, TvmEngine(vm=vm, stamp=stamp, library=str(path), check=check, identity=identity, module=module)


def stamp_mismatches(
    stamp: EngineStamp, container_digest: str, plan: Plan, record: BindingRecord, container_name: str = "the container"
) -> list[str]:
    """Every way the engine's own stamp disagrees with the container, its Plan and the binding."""
    failures = []
    if stamp.container_digest != container_digest:
        failures.append(
            f"compiled from another container: the library says {stamp.container_digest[:16]}..., "
            f"not {container_name} ({container_digest[:16]}...)"
        )
    if stamp.plan_digest != plan.digest:
        failures.append(f"compiled from another Plan: the library says {stamp.plan_digest[:16]}..., "
                        f"the container's Plan is {plan.digest[:16]}...")  # fmt: skip
    if record.backend == "tvm" and stamp.tvm_version != record.backend_version:
        failures.append(f"the library was compiled by TVM {stamp.tvm_version}, its binding says {record.backend_version}")
    names = [i.name for i in stamp.inputs]  # in the order of the engine's parameters
    if len(names) != len(set(names)) or set(names) != set(plan.input_names):
        failures.append(f"the library's inputs {[i.name for i in stamp.inputs]} are not the Plan's {list(plan.input_names)}")
    if list(stamp.outputs) != list(plan.output_names):
        failures.append(f"the library's outputs {list(stamp.outputs)} are not the Plan's {list(plan.output_names)}")
    return failures
