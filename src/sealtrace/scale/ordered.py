"""Appending a job's records in the order of its tasks, whatever order the tasks finish in.

Tasks are made in position order; an :class:`~sealtrace.scale.cluster.Executor` hands back their
results as they finish; results that come early wait here for those before them, so the driver's one
:class:`~sealtrace.ledger.Ledger` receives the records in position order, and its writer commits them
in that order (group commits: one transaction for everything queued). At most the executor's window
of tasks is held. An interruption stops the appends at a task boundary: the ledger then holds a
prefix of the job (in position order), which a resumed job completes. Ctrl-C is taken at a task boundary
(:func:`~sealtrace.scale.cluster.graceful_interrupt`): a run is never cut off halfway.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from sealtrace.ledger import Ledger, Receipt, RecordError, Trail
from sealtrace.scale.cluster import Executor, graceful_interrupt


@dataclass
class Outcome:
    """What a worker made of one request: the record to append (and its trail), or why none."""

    position: int
    name: str
    record: dict[str, Any] | None
    trail: Trail | None
    error: str | None
    worker: str


@dataclass
class Appended:
    """How many records became durable, and how many the ledger already held (another run's)."""

    recorded: int = 0
    already: int = 0
    first_index: int | None = None


def append_in_order(
    ledger: Ledger,
    executor: Executor,
    fn: Callable[[Any, Any], list[Any]],
    shared: Any,
    tasks: Iterable[Any],
    *,
    inputs_of: Callable[[Any], dict[int, Any]] | None = None,
    on_outcome: Callable[[Any], None] | None = None,
    on_task: Callable[[int], None] | None = None,
    appended: Appended | None = None,
) -> Appended:
    """Run ``fn(shared, task)`` for every task on ``executor``; append each outcome's record in task
    order (inputs stored with it: ``inputs_of(task)`` maps positions to feeds). ``on_outcome`` sees
    every outcome in order before its record is submitted; ``on_task(n)`` is told each time a task
    of ``n`` outcomes finishes (in any order: progress). Returns once every appended record is durable;
    counted in ``appended`` (given, it holds the counts also when an interruption raises)."""
    kept: dict[int, dict[int, Any]] = {}
    finished: dict[int, list[Any]] = {}
    appended = appended if appended is not None else Appended()
    in_flight: list[Future[Receipt]] = []
    next_task = 0

    def keeping(source: Iterable[Any]) -> Iterator[Any]:
        for number, task in enumerate(source):
            kept[number] = inputs_of(task) if inputs_of is not None else {}
            yield task

    try:
        with graceful_interrupt() as stop:
            for number, outcomes in executor.run(fn, shared, keeping(tasks), stop=stop):
                finished[number] = outcomes
                while next_task in finished:
                    stored = kept.pop(next_task, {})
                    for outcome in finished.pop(next_task):
                        if on_outcome is not None:
                            on_outcome(outcome)
                        if outcome.record is not None:
                            in_flight.append(ledger.submit(outcome.record, inputs=stored.get(outcome.position),
                                                           trail=outcome.trail))
                    next_task += 1
                in_flight = _settle(in_flight, appended, wait=False)
                if on_task is not None:
                    on_task(len(outcomes))
    finally:
        _settle(in_flight, appended, wait=True)
    return appended


def _settle(in_flight: list[Future[Receipt]], appended: Appended, wait: bool) -> list[Future[Receipt]]:
    """Count the appends that are durable; return those still on their way (all of them counted if ``wait``)."""
    pending = []
    for future in in_flight:
        if not wait and not future.done():
            pending.append(future)
            continue
        try:
            receipt = future.result()
        except RecordError as exc:
            if "already holds a record with this id" in str(exc):
                appended.already += 1  # another driver of the same job appended it meanwhile
                continue
            raise
        appended.recorded += 1
        if appended.first_index is None or receipt.index < appended.first_index:
            appended.first_index = receipt.index
    return pending
