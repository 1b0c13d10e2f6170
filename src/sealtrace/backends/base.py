"""The backend contract: what every backend offers.

Backends execute a Plan and report each executed step to observers (sealtrace.plan.events).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from sealtrace.plan.events import StepObserver
from sealtrace.plan.model import Plan


class Backend(Protocol):
    """Executes a Plan. ``name`` and ``version`` go into audit logs and reports.

    A backend may also offer ``stream(plan, feeds, inputs=True)``: its steps as an iterator of
    StepEvents in Plan order, each computed only when asked for (``inputs=False``: the events carry
    no inputs). Parity pulls it as the other backend's run reaches each step (ONNX Runtime does).
    """

    name: str

    @property
    def version(self) -> str: ...

    @property
    def per_step(self) -> bool:
        """True when this backend reports every step to observers (not just graph outputs)."""
        ...

    def run(
        self,
        plan: Plan,
        feeds: Mapping[str, Any],
        observers: Sequence[StepObserver] = (),
    ) -> dict[str, Any]: ...


class ObservedRuns(ABC):
    """The run every backend offers: its observers told of the run's start and end around the
    backend's own execution. ``_prepare_run`` checks and sets up before any observer hears of the
    run (its errors reach none); what it returns is handed to ``_execute_run``."""

    name: str

    @property
    @abstractmethod
    def version(self) -> str: ...

    def run(
        self,
        plan: Plan,
        feeds: Mapping[str, Any],
        observers: Sequence[StepObserver] = (),
    ) -> dict[str, Any]:
        prepared = self._prepare_run(plan, feeds, observers)
        for observer in observers:
            observer.on_run_start(plan, feeds, self)
        result = self._execute_run(plan, feeds, observers, prepared)
        for observer in observers:
            observer.on_run_end(result)
        return result

    def _prepare_run(self, plan: Plan, feeds: Mapping[str, Any], observers: Sequence[StepObserver]) -> Any:
        return None

    @abstractmethod
    def _execute_run(
        self, plan: Plan, feeds: Mapping[str, Any], observers: Sequence[StepObserver], prepared: Any
    ) -> dict[str, Any]:
        """The graph outputs by name, each step reported to ``observers`` as it runs."""
