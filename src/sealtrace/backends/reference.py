"""The reference backend: executes a Plan step by step with the NumPy kernels in sealtrace.ops."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sealtrace import __version__
from sealtrace.backends.base import StepEvent, StepObserver
from sealtrace.backends.threads import blas_threads
from sealtrace.errors import KernelError, SealtraceError, UnsupportedError
from sealtrace.ops.registry import as_outputs
from sealtrace.plan.model import Plan, Step


class ReferenceBackend:
    """Faithful, deterministic NumPy execution of a Plan, reporting every step to observers.

    ``threads`` is how many threads NumPy's BLAS may use during a run (default 1, see
    :mod:`sealtrace.backends.threads`; None leaves BLAS as the environment configured it).
    """

    name = "reference"
    per_step = True

    def __init__(self, threads: int | None = 1) -> None:
        self.threads = threads

    @property
    def version(self) -> str:
        return __version__

    def run(
        self,
        plan: Plan,
        feeds: Mapping[str, Any],
        observers: Sequence[StepObserver] = (),
    ) -> dict[str, Any]:
        if plan.unsupported:
            raise UnsupportedError(list(plan.unsupported))
        for observer in observers:
            observer.on_run_start(plan, feeds, self)
        given = {id(v) for v in feeds.values()} | {id(v) for v in plan.initializers.values()}
        with blas_threads(self.threads):
            outputs = [_owned(value, given) for value in execute(plan, feeds, observers, ())]
        result = dict(zip(plan.output_names, outputs, strict=True))
        for observer in observers:
            observer.on_run_end(result)
        return result


def _owned(value: Any, given: set[int]) -> Any:
    """A graph output the caller may keep and modify: views (Expand's broadcast, a Reshape of a
    weight) and the caller's own arrays (Identity of an input) are copied, as ONNX Runtime hands
    back fresh arrays."""
    if isinstance(value, np.ndarray) and (
        id(value) in given or not (value.flags.owndata and value.flags.writeable)
    ):
        return value.copy()
    if isinstance(value, list):
        return [_owned(v, given) for v in value]
    return value


class StepContext:
    """The KernelContext handed to control-flow kernels."""

    __slots__ = ("_calls", "_env", "_observers", "_path", "_step")

    def __init__(
        self, env: dict[str, Any], observers: Sequence[StepObserver], path: tuple[str, ...], step: Step
    ) -> None:
        self._env = env
        self._observers = observers
        self._path = path
        self._step = step
        self._calls: dict[str, int] = {}

    @property
    def n_outputs(self) -> int:
        return len(self._step.outputs)

    @property
    def since_version(self) -> int:
        return self._step.since_version

    @property
    def output_info(self) -> tuple[Any, ...]:
        """Static info (ValueInfo or None) of each declared output, from shape inference."""
        return self._step.output_info

    @property
    def requested_outputs(self) -> tuple[bool, ...]:
        """Which declared outputs the graph actually names (optional ones may be empty)."""
        return tuple(bool(o) for o in self._step.outputs)

    def run_subgraph(self, name: str, plan: Plan, feeds: Sequence[Any]) -> list[Any]:
        call = self._calls.get(name, 0)
        self._calls[name] = call + 1
        outer = {c: self._env[c] for c in plan.captures}
        outer.update(zip(plan.input_names, feeds, strict=False))
        return execute(plan, outer, self._observers, (*self._path, self._step.name, name, str(call)))


def execute(
    plan: Plan,
    feeds: Mapping[str, Any],
    observers: Sequence[StepObserver],
    path: tuple[str, ...],
) -> list[Any]:
    """Run ``plan`` on ``feeds`` (which may also carry captured outer values); return its outputs."""
    env: dict[str, Any] = dict(plan.initializers)
    env.update(feeds)
    for step, release in zip(plan.steps, plan.release_after, strict=True):
        args = [env[name] if name else None for name in step.inputs]
        try:
            if step.kernel.context:
                result = step.kernel.fn(StepContext(env, observers, path, step), *args, **step.attributes)
            else:
                result = step.kernel.fn(*args, **step.attributes)
        except SealtraceError:
            raise
        except Exception as exc:  # any kernel failure is reported with its step
            where = "/".join((*path, step.name))
            raise KernelError(
                f"step {step.index} {where!r} ({step.op_type}) failed: {type(exc).__name__}: {exc}"
            ) from exc
        names = step.outputs
        if len(names) == 1 and type(result) is np.ndarray and names[0]:
            env[names[0]] = result  # the common case, without the generic unpacking below
        else:
            outputs = as_outputs(result)
            for i, name in enumerate(names):
                if name:
                    if i >= len(outputs):
                        raise KernelError(
                            f"step {step.index} {step.name!r} ({step.op_type}): output {i} ({name!r}) "
                            "was asked for but the kernel does not produce it"
                        )
                    env[name] = outputs[i]
        if observers:
            event = StepEvent(path, step, args, [env[n] if n else None for n in step.outputs])
            for observer in observers:
                observer.on_step(event)
        for name in release:
            env.pop(name, None)
    return [env[name] for name in plan.output_names]
