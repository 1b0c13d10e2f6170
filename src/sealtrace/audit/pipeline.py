"""Off the critical path: a bounded pipe and a worker thread behind a StepObserver.

The executor's thread only hands references to a worker and carries on; the worker hashes or
writes (hashlib, NumPy reductions and file writes release the GIL, so this overlaps the run).
The pipe is bounded in items and bytes: when the worker falls behind, the executor waits, so an
observer never keeps more tensors alive than its bound allows.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from sealtrace.audit.errors import AuditLogExistsError, AuditWriteError

DEFAULT_PENDING_BYTES = 8 << 20
DEFAULT_PENDING_ITEMS = 4096


class BoundedPipe:
    """A FIFO from one producer to one consumer, bounded in items and in bytes.

    ``put`` waits while the pipe is full; an item larger than the byte bound is still admitted
    once nothing else is pending, so progress never stops. Bytes count as pending from ``put``
    until the consumer calls ``done``: an item being processed still holds its tensors.

    The producer's common path takes no lock: it appends to a deque (atomic under the GIL) and
    adds to counters only it writes; the consumer pops items one by one and adds to counters only
    it writes, so pending bytes are ``put - done`` without a shared counter. Locks are taken only
    to wake a waiting side. The consumer is woken once per batch (``batch_items`` items or
    ``batch_bytes`` bytes since it was last woken), when an item is put with ``flush``, when the
    producer must wait, or after ``latency_s`` at most: waking a thread for every step costs more
    GIL hand-offs than the work itself on models whose steps take microseconds.
    """

    def __init__(
        self,
        max_items: int = DEFAULT_PENDING_ITEMS,
        max_bytes: int = DEFAULT_PENDING_BYTES,
        batch_items: int = 256,
        batch_bytes: int = 1 << 20,
        latency_s: float = 0.05,
    ) -> None:
        self.items: deque[tuple[Any, int]] = deque()
        lock = threading.Lock()
        self._lock = lock
        self._ready = threading.Condition(lock)  # the consumer waits here
        self._room = threading.Condition(lock)  # the producer waits here
        # Written by the producer only.
        self._put_items = 0
        self._put_bytes = 0
        self._flush = False
        # Written by the consumer only.
        self._done_items = 0
        self._done_bytes = 0
        self._woken_items = 0  # the producer's counts when the consumer last took work
        self._woken_bytes = 0
        self._closed = False
        self._busy = False  # the consumer is handling items (set and cleared under the lock)
        self._consumer_waiting = False
        self._producer_waiting = False
        self._max_items = max(1, max_items)
        self._max_bytes = max(1, max_bytes)
        self._batch_items = max(1, batch_items)
        self._batch_bytes = batch_bytes
        self._latency_s = latency_s
        self.peak_bytes = 0
        # Called (once) to start the consumer the first time it would be woken or the producer
        # would wait: until then no consumer runs (see BackgroundObserver: a small run ends first).
        self.on_demand: Callable[[], None] | None = None

    @property
    def pending_bytes(self) -> int:
        """Bytes put and not yet done (may lag behind the consumer by an item: an upper bound)."""
        return self._put_bytes - self._done_bytes

    def _full(self, nbytes: int) -> bool:
        pending = self._put_bytes - self._done_bytes
        return self._put_items - self._done_items >= self._max_items or (
            pending > 0 and pending + nbytes > self._max_bytes
        )

    def _demand(self) -> None:
        start, self.on_demand = self.on_demand, None
        if start is not None:
            start()

    def wait_for_room(self, nbytes: int) -> None:
        """Wait until an item of ``nbytes`` would be admitted (the producer then holds its tensors)."""
        if self.on_demand is not None and self._full(nbytes):
            self._demand()
        while self._full(nbytes):
            with self._room:
                # Set the flag first, then look again: the consumer reads the flag after counting
                # an item done, so either it sees the flag or this check sees its count.
                self._producer_waiting = True
                if self._full(nbytes):
                    self._flush = True
                    self._ready.notify()
                    self._room.wait(0.1)
                self._producer_waiting = False

    def put(self, item: Any, nbytes: int = 0, flush: bool = False) -> None:
        if self._full(nbytes):
            self.wait_for_room(nbytes)
        self.items.append((item, nbytes))
        self._put_items += 1
        self._put_bytes += nbytes
        pending = self._put_bytes - self._done_bytes
        if pending > self.peak_bytes:
            self.peak_bytes = pending
        if flush:
            self._flush = True
        if self._consumer_waiting:
            if self._should_wake():
                with self._ready:
                    self._ready.notify()
        elif self.on_demand is not None and self._should_wake():
            self._demand()

    def _should_wake(self) -> bool:
        return (
            self._flush
            or self._put_items - self._woken_items >= self._batch_items
            or self._put_bytes - self._woken_bytes >= self._batch_bytes
        )

    def wait(self) -> bool:
        """Wait for work (see the class docstring); False once the producer closed the pipe."""
        with self._ready:
            self._busy = False
            while True:
                if self._closed:
                    return False
                if self.items and self._should_wake():
                    break
                # Set the flag, then wait: the producer appends, then reads the flag.
                self._consumer_waiting = True
                self._ready.wait(self._latency_s)
                self._consumer_waiting = False
                if self._closed:
                    return False
                if self.items:
                    break  # woken for a batch, or the latency bound: records reach the log as the run goes
            self._busy = True
        self._took()
        return True

    def _took(self) -> None:
        self._woken_items = self._put_items
        self._woken_bytes = self._put_bytes
        self._flush = False

    def close_if_idle(self) -> bool:
        """At the end of a run: if the consumer is not handling items (it waits for work, or has
        not started yet: waking a parked thread takes longer than a small model's whole run),
        close the pipe (the caller then takes what is left itself, sparing thread hand-offs) and
        return True; else False (the consumer is busy: end it with an end marker)."""
        with self._ready:
            if self._busy:
                return False
            self._closed = True
            self._ready.notify()
            return True

    def done(self, nbytes: int) -> None:
        self._done_items += 1
        self._done_bytes += nbytes
        if self._producer_waiting:
            with self._room:
                self._room.notify()


class _Parked:
    """A worker thread kept between runs: starting a thread costs more than a whole run of a
    small model; waking a parked one costs far less."""

    def __init__(self, name: str) -> None:
        self._wake = threading.Condition(threading.Lock())
        self._task: tuple[Callable[[], None], threading.Event] | None = None
        threading.Thread(target=self._loop, name=name, daemon=True).start()

    def start(self, task: Callable[[], None]) -> threading.Event:
        done = threading.Event()
        with self._wake:
            self._task = (task, done)
            self._wake.notify()
        return done

    def _loop(self) -> None:
        while True:
            with self._wake:
                while self._task is None:
                    self._wake.wait()
                (task, done), self._task = self._task, None
            try:
                task()
            finally:
                with _PARKED_LOCK:
                    _PARKED.append(self)  # parked before done: the next run may take it at once
                done.set()


_PARKED: list[_Parked] = []
_PARKED_LOCK = threading.Lock()


def start_worker(task: Callable[[], None], name: str) -> threading.Event:
    """Run ``task`` on a parked worker thread (one is made when none is free); the returned
    event is set once it has returned."""
    with _PARKED_LOCK:
        worker = _PARKED.pop() if _PARKED else None
    if worker is None:
        worker = _Parked(name)
    return worker.start(task)


class BackgroundObserver:
    """Base of observers whose work runs on one worker thread, fed through a :class:`BoundedPipe`.

    Subclasses call :meth:`_start` when the run starts, :meth:`_submit` for each piece of work,
    :meth:`_finish` when the run ends, and implement :meth:`_handle` (runs on the worker),
    :meth:`_drained` (runs whenever the worker has handled everything pending) and :meth:`_close`
    (runs once the worker stopped). A run that fails is ended with :meth:`abort`: the queued work
    is still done, so what was recorded up to the failure is kept.

    The worker thread is started only when the pipe would first wake it or make the run wait, or
    once the run has gone on for the pipe's latency bound (:class:`_LatencyWatch`); a run that
    ends before any of these is handled on its own thread when it ends.
    """

    what = "observer"

    def __init__(self, max_pending_bytes: int, max_pending_items: int, **pipe_options: Any) -> None:
        self._pipe = BoundedPipe(max_pending_items, max_pending_bytes, **pipe_options)
        self._done: threading.Event | None = None  # set once the worker has returned
        self._launch_lock = threading.Lock()
        self._launched = False  # the worker was started (see _start)
        self._error: BaseException | None = None
        self._state = "new"  # new -> running -> finished | aborted

    @property
    def peak_pending_bytes(self) -> int:
        """The most tensor bytes this observer held at once (bounded by max_pending_bytes)."""
        return self._pipe.peak_bytes

    def _start(self) -> None:
        # The worker is not woken here: on a run shorter than its latency bound whose pipe never
        # fills, the run's own thread does the work at the end (_stop), and waking a thread,
        # then taking turns with it for the GIL, cost more than such a run (hundreds of us on a
        # busy machine). It is started the first time the pipe would wake it or the run would wait
        # for room, or by the latency watch once the run has gone on for the latency bound.
        if self._state != "new":
            raise AuditWriteError(f"an {type(self).__name__} records one run; make a new one for each run")
        self._state = "running"
        self._pipe.on_demand = self._launch
        _LATENCY_WATCH.add(self, self._pipe._latency_s)

    def _launch(self) -> None:
        """Start the worker, once (from the producer on demand, or from the latency watch)."""
        with self._launch_lock:
            if self._launched or self._pipe._closed:
                return
            self._launched = True
            self._pipe.on_demand = None
            self._done = start_worker(self._work, f"sealtrace-{self.what}")

    def _submit(self, item: Any, nbytes: int, flush: bool = False) -> None:
        if self._state == "running" and self._error is None:
            self._pipe.put(item, nbytes, flush)

    def _finish(self) -> None:
        """Wait for the worker to drain the pipe; raise what it failed with, if anything."""
        if self._state != "running":
            return
        self._stop("finished")
        if isinstance(self._error, (AuditLogExistsError, AuditWriteError)):
            raise self._error  # already says what went wrong and where (a log that exists)
        if self._error is not None:
            raise AuditWriteError(f"{self._describe()}: not completed: {self._error}") from self._error

    def abort(self) -> None:
        """End a run that failed: finish the queued work, write no ending, stop the worker."""
        if self._state == "running":
            self._stop("aborted")
        elif self._state == "new":
            self._state = "aborted"

    def __enter__(self) -> BackgroundObserver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()

    def _stop(self, state: str) -> None:
        with self._launch_lock:
            launched = self._launched
            if not launched:
                self._pipe.on_demand = None
                self._pipe._closed = True  # the latency watch starts no worker now
        _LATENCY_WATCH.discard(self)
        if not launched:
            self._drain()  # no worker ever ran: this thread does it all, in order
        elif self._pipe.close_if_idle():
            # The worker has caught up and waits: finish here rather than wake it and wait. It
            # ends without touching the pipe again once it sees the pipe closed.
            self._drain()
        else:
            self._pipe.put(None, 0, flush=True)
            if self._done is not None:
                self._done.wait()
        self._state = state
        try:
            self._close(state == "finished")
        except OSError as exc:
            self._error = self._error or exc

    def _work(self) -> None:
        while self._pipe.wait() and self._drain():
            pass

    def _drain(self) -> bool:
        """Handle every pending item in order; False once the end marker (None) is reached."""
        items = self._pipe.items
        pipe = self._pipe
        going = True
        while items:
            item, nbytes = items.popleft()
            try:
                if item is None:
                    going = False  # the producer puts nothing after the end marker
                    break
                if self._error is None:
                    self._handle(item)
            except BaseException as exc:
                self._error = exc
            finally:
                del item  # release the tensors before counting them done
                pipe.done(nbytes)
        try:
            if self._error is None:
                self._drained()
        except BaseException as exc:
            self._error = exc
        return going

    def _handle(self, item: Any) -> None:
        raise NotImplementedError

    def _drained(self) -> None:
        """Called on the worker whenever it has handled every pending item (write buffers out)."""

    def _close(self, finished: bool) -> None:
        """Release files once the worker stopped (``finished`` is False after an abort)."""

    def _describe(self) -> str:
        return self.what


class _LatencyWatch:
    """One process-wide thread that starts the worker of a run that has gone on for its latency
    bound without needing it sooner, so that its records still reach the log as the run goes.

    It sleeps until the earliest such deadline and is not woken for each run that registers (a
    wake-up per run is what starting workers on demand saves): only when it sleeps with no run to
    watch, or a run's deadline comes before the one it sleeps until. A run that ends first is
    simply dropped; while runs come and go, the thread wakes about once per latency bound.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        # Also in a forked child, where the parent's thread does not exist: a new one is started
        # for the child's first run.
        self._lock = threading.Condition(threading.Lock())
        self._runs: dict[BackgroundObserver, float] = {}  # observer -> when to start its worker
        self._thread: threading.Thread | None = None
        self._wake_at: float | None = None  # when the thread wakes next (None: only when notified)

    def add(self, observer: BackgroundObserver, latency_s: float) -> None:
        deadline = time.monotonic() + latency_s
        with self._lock:
            self._runs[observer] = deadline
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="sealtrace-latency-watch", daemon=True)
                self._thread.start()
            elif self._wake_at is None or deadline < self._wake_at:
                self._lock.notify()

    def discard(self, observer: BackgroundObserver) -> None:
        with self._lock:
            self._runs.pop(observer, None)

    def _watch(self) -> None:
        while True:
            with self._lock:
                while True:
                    now = time.monotonic()
                    due = [observer for observer, when in self._runs.items() if when <= now]
                    if due:
                        for observer in due:
                            del self._runs[observer]
                        break
                    self._wake_at = min(self._runs.values()) if self._runs else None
                    self._lock.wait(None if self._wake_at is None else self._wake_at - now)
                self._wake_at = now
            for observer in due:
                observer._launch()


_LATENCY_WATCH = _LatencyWatch()


def _after_fork_in_child() -> None:
    """Threads do not survive fork: the child forgets the parent's parked workers and watch."""
    global _PARKED_LOCK
    _PARKED.clear()
    _PARKED_LOCK = threading.Lock()
    _LATENCY_WATCH._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def nbytes_of(values: Iterable[Any]) -> int:
    """Bytes of the arrays among ``values`` (sequences counted element by element)."""
    total = 0
    for value in values:
        if isinstance(value, np.ndarray):
            total += value.nbytes
        elif isinstance(value, list):
            total += sum(v.nbytes for v in value if isinstance(v, np.ndarray))
    return total
