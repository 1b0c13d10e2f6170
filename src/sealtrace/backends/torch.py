"""The torch backend: executes a Plan step by step with the torch translations of sealtrace.torchops.

Every step (subgraph steps included) is reported to observers with NumPy arrays, exactly as the
reference backend reports them, so audit logs, captures and per-step parity work unchanged. Runs
on the CPU, or on CUDA with ``device="cuda"`` when a GPU is present. Control flow runs eagerly:
If evaluates its condition, Loop iterates its body.

On CUDA, float32 work is faithful by default: TF32 off for matmuls and cuDNN, and deterministic
algorithms, for the duration of each run (``precision="tf32"`` opts in to TF32). These are torch's
process-wide switches, so CUDA runs hold one lock while they are set and restored: CUDA runs of a
process (a server's workers) take turns, and torch code outside sealtrace that runs meanwhile on
another thread sees the run's settings. CPU runs change nothing and take no lock. ``device_info``
is what the audit header records: the device, its facts and the settings in force.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from sealtrace.backends.base import ObservedRuns
from sealtrace.errors import BackendError, KernelError, SealtraceError
from sealtrace.plan.events import StepEvent, StepObserver
from sealtrace.plan.model import Plan, Step
from sealtrace.torchops.control import empty_scan_output, run_scan, run_scan_8
from sealtrace.torchops.dtypes import from_numpy, to_numpy
from sealtrace.torchops.reference_step import is_string_array
from sealtrace.torchops.steps import call_translation, check_supported, tensor_attributes, translation_for

# cuBLAS is deterministic only with a fixed workspace (torch.use_deterministic_algorithms' docs);
# it is read when cuBLAS starts, so it is set before the first CUDA run unless the user set one.
_CUBLAS_WORKSPACE = ":4096:8"
# Held by a CUDA run while it has torch's process-wide numerics switches set (re-entrant: the audit
# recorder reads device_info inside the run).
_CUDA_SETTINGS = threading.RLock()


class TorchBackend(ObservedRuns):
    """PyTorch eager execution of a Plan, one translated op per step."""

    name = "torch"
    per_step = True

    def __init__(self, device: str = "cpu", threads: int | None = None, precision: str = "faithful") -> None:
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise BackendError(f"device {device!r} asked for, but torch sees no CUDA GPU")
        if precision not in ("faithful", "tf32"):
            raise BackendError(f"precision {precision!r}: expected faithful or tf32")
        self.device = torch.device(device)
        if self.device.type == "cuda":
            self.device = torch.device("cuda", self.device.index if self.device.index is not None else 0)
            if precision == "faithful":
                os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", _CUBLAS_WORKSPACE)
        self.precision = precision
        self.threads = threads
        self._weights: dict[int, tuple[Plan, dict[str, torch.Tensor]]] = {}
        self._attributes: dict[int, tuple[Step, dict[str, Any]]] = {}
        self._constants: dict[int, tuple[Step, list[Any]]] = {}

    @property
    def version(self) -> str:
        return str(torch.__version__)

    def describe(self, per_op: bool) -> dict[str, Any]:
        """Settings that shape the numbers, for audit headers and reports."""
        return {"device": str(self.device), "intra_op_threads": torch.get_num_threads()}

    @property
    def device_info(self) -> dict[str, Any]:
        """The audit header's ``backend.device``: the device, and for CUDA the precision and the GPU's
        facts, with the numerics settings a run has in force, read from torch (on CUDA, read with
        the run's settings applied: inside a run, the run's own)."""
        info: dict[str, Any] = {"name": str(self.device), "torch": str(torch.__version__)}
        if self.device.type != "cuda":
            return {**info, "settings": _settings()}
        with _CUDA_SETTINGS, _numerics(self.precision):
            settings = _settings()
        return {**info, "precision": self.precision, "gpu": gpu_facts(self.device), "settings": settings}

    def run(
        self, plan: Plan, feeds: Mapping[str, Any], observers: Sequence[StepObserver] = ()
    ) -> dict[str, Any]:
        if self.device.type != "cuda":
            return super().run(plan, feeds, observers)
        with _CUDA_SETTINGS, _numerics(self.precision):
            return super().run(plan, feeds, observers)

    def _prepare_run(self, plan: Plan, feeds: Mapping[str, Any], observers: Sequence[StepObserver]) -> Any:
        check_supported(plan)
        if self.threads:
            torch.set_num_threads(self.threads)

    def _execute_run(
        self, plan: Plan, feeds: Mapping[str, Any], observers: Sequence[StepObserver], prepared: Any
    ) -> dict[str, Any]:
        tensors = {name: self._tensor(value) for name, value in feeds.items()}
        # The device context makes tensors that translations create (indices, fills) land on the
        # run's device too. On the CPU, where they land anyway, it is left out: torch keeps the
        # context's device in a process-wide variable, which runs on several threads (a server's
        # workers) would otherwise race on.
        placed = self.device if self.device.type != "cpu" else contextlib.nullcontext()
        with torch.no_grad(), placed:
            outputs = self._execute(plan, tensors, observers, ())
        return {name: to_numpy(value) for name, value in zip(plan.output_names, outputs, strict=True)}

    def _tensor(self, value: Any) -> Any:
        # Strings (torch has no string dtype) stay NumPy object arrays and maps stay dicts: only
        # reference-kernel steps read them (torchops.reference_step).
        if value is None or isinstance(value, (torch.Tensor, dict)) or is_string_array(value):
            return value
        if isinstance(value, list):  # a sequence
            return [self._tensor(v) for v in value]
        return from_numpy(value).to(self.device)

    def _initializers(self, plan: Plan) -> dict[str, torch.Tensor]:
        cached = self._weights.get(id(plan))
        if cached is not None and cached[0] is plan:
            return cached[1]
        weights = {name: self._tensor(value) for name, value in plan.initializers.items()}
        self._weights[id(plan)] = (plan, weights)
        return weights

    def _attrs(self, step: Step) -> dict[str, Any]:
        cached = self._attributes.get(id(step))
        if cached is not None and cached[0] is step:
            return cached[1]
        attrs = tensor_attributes(step, self.device)
        self._attributes[id(step)] = (step, attrs)
        return attrs

    def _execute(
        self, plan: Plan, feeds: Mapping[str, Any], observers: Sequence[StepObserver], path: tuple[str, ...]
    ) -> list[Any]:
        env: dict[str, Any] = dict(self._initializers(plan))
        env.update(feeds)
        for step, release in zip(plan.steps, plan.release_after, strict=True):
            args = [env[name] if name else None for name in step.inputs]
            try:
                outputs = self._step(step, args, env, observers, path)
            except SealtraceError:
                raise
            except Exception as exc:
                where = "/".join((*path, step.name))
                raise KernelError(
                    f"step {step.index} {where!r} ({step.op_type}) failed on torch: {type(exc).__name__}: {exc}"
                ) from exc
            for i, name in enumerate(step.outputs):
                if name:
                    if i >= len(outputs):
                        raise KernelError(f"step {step.index} {step.name!r} ({step.op_type}): output {i} missing")
                    env[name] = outputs[i]
            if observers:
                event = StepEvent(
                    path,
                    step,
                    [to_numpy(a) for a in args],
                    [to_numpy(env[n]) if n else None for n in step.outputs],
                )
                for observer in observers:
                    observer.on_step(event)
            for name in release:
                env.pop(name, None)
        return [env[name] for name in plan.output_names]

    def _step(
        self, step: Step, args: list[Any], env: Mapping[str, Any], observers: Sequence[StepObserver],
        path: tuple[str, ...],
    ) -> list[Any]:
        if step.op_type == "If":
            branch = "then_branch" if bool(args[0].reshape(-1)[0]) else "else_branch"
            sub = step.attributes[branch]
            return self._execute(sub, {c: env[c] for c in sub.captures}, observers, (*path, step.name, branch, "0"))
        if step.op_type == "Loop":
            return self._loop(step, args, env, observers, path)
        if step.op_type == "Scan":
            body: Plan = step.attributes["body"]
            captured = {c: env[c] for c in body.captures}

            def run_body(t: int, feeds: list[Any]) -> list[Any]:
                named = {**captured, **dict(zip(body.input_names, feeds, strict=True))}
                return self._execute(body, named, observers, (*path, step.name, "body", str(t)))

            if step.since_version < 9:  # Scan-8: sequence_lens first, batch axis 0
                n_state = len(args) - 1 - int(step.attributes["num_scan_inputs"])
                return run_scan_8(run_body, args[0], args[1:], n_state, len(body.outputs) - n_state,
                                  step.attributes.get("directions"), lambda k: empty_scan_output(body, n_state + k))
            n_state = len(args) - int(step.attributes["num_scan_inputs"])
            return run_scan(run_body, args, n_state, len(body.outputs) - n_state, step.attributes)
        if step.op_type == "Constant":
            # A Constant's value never changes: make its tensor once (translations never write
            # into their inputs, so sharing it between runs is safe).
            cached = self._constants.get(id(step))
            if cached is None or cached[0] is not step:
                cached = (step, self._call(step, args))
                self._constants[id(step)] = cached
            return cached[1]
        return self._call(step, args, env, observers, path)

    def _call(self, step: Step, args: list[Any], env: Mapping[str, Any] | None = None,
              observers: Sequence[StepObserver] = (), path: tuple[str, ...] = ()) -> list[Any]:
        translation = translation_for(step)
        assert translation is not None  # check_supported ran first
        attrs = self._attrs(step)
        if translation.subgraphs:
            attrs = {**attrs, **{name: self._subgraph_call(step, name, sub, env or {}, observers, path)
                                 for name, sub in step.subgraphs.items()}}
        return call_translation(translation, step, args, attrs)

    def _subgraph_call(self, step: Step, name: str, sub: Plan, env: Mapping[str, Any],
                       observers: Sequence[StepObserver], path: tuple[str, ...]) -> Any:
        """A subgraph attribute as the callable its translation takes (feeds in, outputs out)."""
        captured = {c: env[c] for c in sub.captures}
        calls = iter(range(1 << 62))

        def run(*feeds: Any) -> list[Any]:
            named = {**captured, **dict(zip(sub.input_names, feeds, strict=True))}
            return self._execute(sub, named, observers, (*path, step.name, name, str(next(calls))))

        return run

    def _loop(
        self, step: Step, args: list[Any], env: Mapping[str, Any], observers: Sequence[StepObserver],
        path: tuple[str, ...],
    ) -> list[Any]:
        body: Plan = step.attributes["body"]
        trip, cond, *state = args
        max_trips = None if trip is None else int(trip.reshape(-1)[0])
        running = True if cond is None else bool(cond.reshape(-1)[0])
        n_scan = len(body.outputs) - 1 - len(state)
        scans: list[list[Any]] = [[] for _ in range(n_scan)]
        captured = {c: env[c] for c in body.captures}
        iteration = 0
        while running and (max_trips is None or iteration < max_trips):
            feeds = dict(captured)
            values = [torch.tensor(iteration, dtype=torch.int64, device=self.device),
                      torch.tensor(running, device=self.device), *state]
            feeds.update(zip(body.input_names, values, strict=False))
            outputs = self._execute(body, feeds, observers, (*path, step.name, "body", str(iteration)))
            running = bool(outputs[0].reshape(-1)[0])
            state = outputs[1 : 1 + len(state)]
            for k in range(n_scan):
                scans[k].append(outputs[1 + len(state) + k])
            iteration += 1
        if any(not values for values in scans):
            raise ValueError("a Loop that runs no iteration has empty scan outputs of unknown shape")
        return [*state, *(torch.stack(values) for values in scans)]


@contextlib.contextmanager
def _numerics(precision: str) -> Iterator[None]:
    """torch's TF32 and determinism switches set for ``precision``, restored afterwards."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.use_deterministic_algorithms(not tf32 or deterministic)
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


def _settings() -> dict[str, Any]:
    """torch's numerics switches as they are now."""
    return {
        "matmul_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_tf32": bool(torch.backends.cudnn.allow_tf32),
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    }


def gpu_facts(device: torch.device) -> dict[str, Any]:
    """What decides a CUDA run's numbers besides the settings: the GPU and its software stack."""
    index = device.index or 0
    properties = torch.cuda.get_device_properties(index)
    major, minor = torch.cuda.get_device_capability(index)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "name": torch.cuda.get_device_name(index),
        "compute_capability": f"{major}.{minor}",
        "memory_bytes": int(properties.total_memory),
        "driver": _driver_version(),
        "cuda_runtime": torch.version.cuda,
        "cudnn": None if cudnn is None else str(cudnn),
    }


def _driver_version() -> str | None:
    """The NVIDIA driver's version from NVML where it can be read (pynvml), else None."""
    try:
        import pynvml  # type: ignore[import-not-found, import-untyped, unused-ignore]

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
    except Exception:  # no NVML (no pynvml, no driver library): the header says it is unknown
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


__all__ = ["TorchBackend", "gpu_facts"]
