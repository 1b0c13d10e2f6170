"""The observer contract: what an executor reports of each step it runs.

Backends execute a Plan and report each executed step to observers. The audit recorder, the
parity checker and the capture store are observers; none of them knows which backend ran, and
none of them depends on the backends: the contract lives here, beside the Plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from sealtrace.plan.model import Plan, Step


class StepEvent(NamedTuple):
    """One executed step: where it sits (subgraph path), what it read and what it produced.

    ``path`` is empty for top-level steps; for a step inside a subgraph it names the enclosing
    node, the graph attribute and, for loops, the iteration: ('loop_1', 'body', '3').

    ``constant`` marks a step whose inputs are all weights (or outputs of other such steps), which
    a backend evaluated once and reuses: its ``outputs`` are then the same read-only arrays on
    every run of that backend instance, so an observer may cache per-array work (a digest, a
    summary) by identity, holding a reference to the array.

    A NamedTuple rather than a dataclass: one is made per executed step, and building a frozen
    dataclass costs more, which shows on models whose steps take microseconds.
    """

    path: tuple[str, ...]
    step: Step
    inputs: Sequence[Any]
    outputs: Sequence[Any]
    constant: bool = False


@runtime_checkable
class StepObserver(Protocol):
    """Receives every step of a run as it happens. Must not modify the arrays it is given."""

    def on_run_start(self, plan: Plan, feeds: Mapping[str, Any], backend: Any) -> None:
        """``backend`` is the sealtrace.backends.Backend running the Plan (its name and version)."""

    def on_step(self, event: StepEvent) -> None: ...

    def on_run_end(self, outputs: Mapping[str, Any]) -> None: ...
