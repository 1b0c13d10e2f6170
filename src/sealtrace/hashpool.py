"""The process's hashing threads, owned in one place.

Two shapes of work share them:

- :func:`hash_map`: a batch of independent digests (a container's chunks, a manifest's files and
  chunks, the regions a sealer writes), spread over one process-wide pool sized to the cores this
  process may use. A call made from inside the pool runs its batch inline, so a job that hashes in
  turn never waits for threads that are all waiting for it.
- :class:`Helpers`: the audit recorder's helpers, which take the newest of its queued jobs while
  the recorder's own worker takes the oldest (so the two meet in the middle of the backlog instead
  of contending for one job), and which give a job back to the worker when none has started it.

A forked child does not have its parent's threads: the pool and the helpers are forgotten there and
made again on first use.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    """Threads to hash with: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def default_helpers() -> int:
    """The recorder's helper threads: half the usable CPUs (the run needs the rest), 1-8."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus // 2))


_INSIDE = threading.local()  # set in the pool's own threads
_POOLS: dict[int, ThreadPoolExecutor] = {}
_HELPERS: dict[int, Helpers] = {}
_LOCK = threading.Lock()


def _mark_pool_thread() -> None:
    _INSIDE.pool = True


def hash_map(fn: Callable[[T], R], items: Iterable[T], workers: int | None = None) -> list[R]:
    """``[fn(item) for item in items]``, on up to ``workers`` (default: every usable core) of the
    process's hashing threads."""
    batch = list(items)
    count = workers or default_workers()
    if count == 1 or len(batch) <= 1 or getattr(_INSIDE, "pool", False):
        return [fn(item) for item in batch]
    with _LOCK:
        pool = _POOLS.get(count)
        if pool is None:
            pool = _POOLS[count] = ThreadPoolExecutor(count, "sealtrace-hash", initializer=_mark_pool_thread)
    return list(pool.map(fn, batch))


class HashJob:
    """One piece of work handed to the :class:`Helpers`; its submitter takes it back (runs it
    itself) if no helper has started it."""

    __slots__ = ("done", "error", "result", "work")

    def __init__(self, work: Callable[[], Any]) -> None:
        self.work: Callable[[], Any] | None = work
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()


class Helpers:
    """Threads that run submitted jobs, newest first (see the module docstring)."""

    def __init__(self, threads: int) -> None:
        self.jobs: deque[HashJob] = deque()
        self._ready = threading.Condition(threading.Lock())
        self._idle = 0
        for i in range(threads):
            threading.Thread(target=self._work, name=f"sealtrace-hash-helper-{i}", daemon=True).start()

    def submit(self, job: HashJob) -> None:
        self.jobs.append(job)
        if self._idle:
            with self._ready:
                self._ready.notify()

    def claim(self, job: HashJob) -> Any:
        """The job's result: computed here when no helper took it, else the helper's."""
        try:
            self.jobs.remove(job)  # atomic under the GIL: either it is ours now or a helper's
        except ValueError:
            job.done.wait()
        else:
            work, job.work = job.work, None
            assert work is not None
            return work()
        if job.error is not None:
            raise job.error
        return job.result

    def _work(self) -> None:
        jobs = self.jobs
        while True:
            try:
                job = jobs.pop()
            except IndexError:
                with self._ready:
                    self._idle += 1  # counted first, then looked: submit appends, then reads
                    if not jobs:
                        self._ready.wait(1.0)
                    self._idle -= 1
                continue
            work, job.work = job.work, None
            try:
                assert work is not None
                job.result = work()
            except BaseException as exc:
                job.error = exc
            work = None  # what it read (a large tensor) is not kept until the next job
            job.done.set()


def helpers(threads: int) -> Helpers:
    """The process-wide helpers of ``threads`` threads, shared by every recorder (made once)."""
    with _LOCK:
        if threads not in _HELPERS:
            _HELPERS[threads] = Helpers(threads)
        return _HELPERS[threads]


def _forget_threads() -> None:
    """In a forked child: the parent's threads do not exist there; new ones are made on first use."""
    global _LOCK
    _POOLS.clear()
    _HELPERS.clear()
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_threads)
