"""Off the critical path: a bounded pipe and a worker thread behind a StepObserver.

The executor's thread only hands references to a worker and carries on; the worker hashes or
writes (hashlib, NumPy reductions and file writes release the GIL, so this overlaps the run).
The pipe is bounded in items and bytes: when the worker falls behind, the executor waits, so an
observer never keeps more tensors alive than its bound allows.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

import numpy as np

from sealtrace.audit.errors import AuditWriteError

DEFAULT_PENDING_BYTES = 64 << 20
DEFAULT_PENDING_ITEMS = 4096


class BoundedPipe:
    """A FIFO from one producer to one consumer, bounded in items and in bytes, handed over in batches.

    ``put`` waits while the pipe is full; an item larger than the byte bound is still admitted
    once nothing else is pending, so progress never stops. Bytes count as pending from ``put``
    until the consumer calls ``done``: an item being processed still holds its tensors.

    The consumer is woken once per batch (``batch_items`` items or ``batch_bytes`` bytes), when
    an item is put with ``flush``, when the producer must wait, or after ``latency_s`` at most:
    waking a thread for every step of a run costs more GIL hand-offs than the work itself on
    models whose steps take microseconds.
    """

    def __init__(
        self,
        max_items: int = DEFAULT_PENDING_ITEMS,
        max_bytes: int = DEFAULT_PENDING_BYTES,
        batch_items: int = 256,
        batch_bytes: int = 1 << 20,
        latency_s: float = 0.05,
    ) -> None:
        self._items: deque[tuple[Any, int]] = deque()
        lock = threading.Lock()
        self._ready = threading.Condition(lock)  # the consumer waits here
        self._room = threading.Condition(lock)  # the producer waits here
        self._bytes = 0
        self._new_bytes = 0
        self._flush = False
        self._closed = False
        self._consumer_waiting = False
        self._producer_waiting = False
        self._max_items = max(1, max_items)
        self._max_bytes = max(1, max_bytes)
        self._batch_items = max(1, batch_items)
        self._batch_bytes = batch_bytes
        self._latency_s = latency_s
        self.peak_bytes = 0

    def wait_for_room(self, nbytes: int) -> None:
        """Wait until an item of ``nbytes`` would be admitted (the producer then holds its tensors)."""
        with self._room:
            self._wait_for_room(nbytes)

    def _wait_for_room(self, nbytes: int) -> None:
        while len(self._items) >= self._max_items or (self._bytes > 0 and self._bytes + nbytes > self._max_bytes):
            self._flush = True
            self._ready.notify()
            self._producer_waiting = True
            self._room.wait()
            self._producer_waiting = False

    def put(self, item: Any, nbytes: int = 0, flush: bool = False) -> None:
        with self._room:
            self._wait_for_room(nbytes)
            self._items.append((item, nbytes))
            self._bytes += nbytes
            self._new_bytes += nbytes
            self._flush = self._flush or flush
            if self._bytes > self.peak_bytes:
                self.peak_bytes = self._bytes
            if self._consumer_waiting and (
                self._flush or len(self._items) >= self._batch_items or self._new_bytes >= self._batch_bytes
            ):
                self._ready.notify()

    def get_batch(self) -> list[tuple[Any, int]]:
        """Wait for a batch (see the class docstring) and take every item pending.

        Returns ``[(None, 0)]`` once the producer took the rest itself (:meth:`close_if_idle`).
        """
        with self._ready:
            while not (
                self._items
                and (self._flush or len(self._items) >= self._batch_items or self._new_bytes >= self._batch_bytes)
            ):
                if self._closed:
                    return [(None, 0)]
                self._consumer_waiting = True
                woken = self._ready.wait(self._latency_s)
                self._consumer_waiting = False
                if not woken and self._items:
                    break  # the latency bound: records reach the log while the run goes
            batch = list(self._items)
            self._items.clear()
            self._new_bytes = 0
            self._flush = False
            return batch

    def close_if_idle(self) -> list[tuple[Any, int]] | None:
        """At the end of a run: if the consumer is idle (it has handled everything it took), close
        the pipe and hand the pending items to the caller, which handles them itself, sparing a
        thread hand-off; else None (the consumer is busy: end it with an end marker)."""
        with self._ready:
            if not self._consumer_waiting:
                return None
            self._closed = True
            batch = list(self._items)
            self._items.clear()
            self._ready.notify()
            return batch

    def done(self, nbytes: int) -> None:
        with self._room:
            self._bytes -= nbytes
            if self._producer_waiting:
                self._room.notify()


class BackgroundObserver:
    """Base of observers whose work runs on one worker thread, fed through a :class:`BoundedPipe`.

    Subclasses call :meth:`_start` when the run starts, :meth:`_submit` for each piece of work,
    :meth:`_finish` when the run ends, and implement :meth:`_handle` (runs on the worker) and
    :meth:`_close` (runs once the worker stopped). A run that fails is ended with :meth:`abort`:
    the queued work is still done, so what was recorded up to the failure is kept.
    """

    what = "observer"

    def __init__(self, max_pending_bytes: int, max_pending_items: int) -> None:
        self._pipe = BoundedPipe(max_pending_items, max_pending_bytes)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._state = "new"  # new -> running -> finished | aborted

    @property
    def peak_pending_bytes(self) -> int:
        """The most tensor bytes this observer held at once (bounded by max_pending_bytes)."""
        return self._pipe.peak_bytes

    def _start(self) -> None:
        if self._state != "new":
            raise AuditWriteError(f"an {type(self).__name__} records one run; make a new one for each run")
        self._state = "running"
        self._thread = threading.Thread(target=self._work, name=f"sealtrace-{self.what}", daemon=True)
        self._thread.start()

    def _submit(self, item: Any, nbytes: int, flush: bool = False) -> None:
        if self._state == "running" and self._error is None:
            self._pipe.put(item, nbytes, flush)

    def _finish(self) -> None:
        """Wait for the worker to drain the pipe; raise what it failed with, if anything."""
        if self._state != "running":
            return
        self._stop("finished")
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
        rest = self._pipe.close_if_idle()
        if rest is not None:
            # The worker has caught up and waits: finish here rather than wake it and wait.
            self._handle_all(rest)
        else:
            self._pipe.put(None, 0, flush=True)
            if self._thread is not None:
                self._thread.join()
        self._state = state
        try:
            self._close(state == "finished")
        except OSError as exc:
            self._error = self._error or exc

    def _work(self) -> None:
        while self._handle_all(self._pipe.get_batch()):
            pass

    def _handle_all(self, batch: list[tuple[Any, int]]) -> bool:
        """Handle ``batch`` in order; False once the end marker (None) is reached."""
        for item, nbytes in batch:
            try:
                if item is None:
                    return False  # the producer puts nothing after the end marker
                if self._error is None:
                    self._handle(item)
            except BaseException as exc:
                self._error = exc
            finally:
                self._pipe.done(nbytes)
        return True

    def _handle(self, item: Any) -> None:
        raise NotImplementedError

    def _close(self, finished: bool) -> None:
        """Release files once the worker stopped (``finished`` is False after an abort)."""

    def _describe(self) -> str:
        return self.what


def nbytes_of(values: Iterable[Any]) -> int:
    """Bytes of the arrays among ``values`` (sequences counted element by element)."""
    total = 0
    for value in values:
        if isinstance(value, np.ndarray):
            total += value.nbytes
        elif isinstance(value, list):
            total += sum(v.nbytes for v in value if isinstance(v, np.ndarray))
    return total
