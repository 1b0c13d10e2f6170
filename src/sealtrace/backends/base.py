"""The backend contract: what every backend offers.

Backends execute a Plan and report each executed step to observers (sealtrace.plan.events).
"""

from __future__ import annotations

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
