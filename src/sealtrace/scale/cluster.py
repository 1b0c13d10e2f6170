"""Where a job's tasks run: in this process, or as Ray tasks on a cluster.

A job is a list of tasks, each a call ``fn(shared, task)`` of a plain library function (no Ray in it);
an :class:`Executor` runs them and hands back each result with its task's number, in the order they
finish. :class:`InProcess` calls them one after another in this process: nothing of Ray is imported.
:class:`RayExecutor` submits them as Ray tasks, at most ``window`` at a time, so the driver holds a
bounded number of tasks' data; Ray retries a task whose worker process or node died
(``max_retries``), and since every task is a pure function of its arguments, a retried task gives the
same result. ``share(value)`` puts a large value the tasks all need (a container's bytes) into Ray's
object store once; a task reads it through :meth:`Shared.get`, which fetches it only when called.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from sealtrace.scale.errors import ClusterError

LOCAL = "local"  # --ray without an address: start a Ray on this machine
DEFAULT_RETRIES = 5


@dataclass(frozen=True)
class Shared:
    """A value every task of a job reads: in this process (``value``) or in Ray's object store (``ref``).

    The object store reference is wrapped in this object so that Ray does not fetch it when a task
    starts: a worker that already opened the value for an earlier task never fetches it again.
    """

    value: Any = None
    ref: Any = None

    def get(self) -> Any:
        if self.ref is None:
            return self.value
        import ray

        return ray.get(self.ref)


class Executor(Protocol):
    """Runs a job's tasks; see :class:`InProcess` and :class:`RayExecutor`."""

    workers: int
    description: str
    in_process: bool

    def share(self, value: Any) -> Shared: ...

    def run(self, fn: Callable[[Any, Any], Any], shared: Any, tasks: Iterable[Any],
            num_cpus: float = 1, stop: threading.Event | None = None) -> Iterator[tuple[int, Any]]: ...

    def close(self) -> None: ...


@contextlib.contextmanager
def graceful_interrupt() -> Iterator[threading.Event]:
    """Ctrl-C (SIGINT) sets the event instead of raising wherever the main thread is (inside a run, a
    KeyboardInterrupt would end it halfway): the job stops at the next task boundary. A second Ctrl-C
    raises at once. Outside the main thread, nothing changes."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def interrupted(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


class InProcess:
    """Every task in this process, in order: the same functions, no Ray."""

    workers = 1
    description = "in this process"
    in_process = True

    def share(self, value: Any) -> Shared:
        return Shared(value=value)

    def run(self, fn: Callable[[Any, Any], Any], shared: Any, tasks: Iterable[Any],
            num_cpus: float = 1, stop: threading.Event | None = None) -> Iterator[tuple[int, Any]]:
        for number, task in enumerate(tasks):
            if stop is not None and stop.is_set():
                raise KeyboardInterrupt
            yield number, fn(shared, task)

    def close(self) -> None:
        pass


def import_ray() -> Any:
    """The ray module, or a one-line error naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise ClusterError("--ray needs Ray, which is not installed: pip install 'sealtrace[ray]'") from None
    return ray


class RayExecutor:
    """Tasks as Ray tasks on the cluster at ``address`` (:data:`LOCAL`: a Ray started here with
    ``workers`` CPUs; ``"auto"``: the cluster this machine belongs to; ``host:port`` or ``ray://...``).

    A Ray already initialized in this process (a script's own ``ray.init``, a test's cluster) is used
    as it is, and left running. ``workers`` (default: the cluster's CPUs) bounds the tasks in flight
    (twice that many are submitted, so no worker waits for the driver).
    """

    in_process = False

    def __init__(self, address: str = LOCAL, workers: int | None = None, max_retries: int = DEFAULT_RETRIES) -> None:
        ray = import_ray()
        self._ray = ray
        self._owned = False
        self.max_retries = max_retries
        if not ray.is_initialized():
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                       "configure_logging": False}
            try:
                if address == LOCAL:
                    ray.init(num_cpus=workers or os.cpu_count() or 1, **options)
                else:
                    ray.init(address=address, **options)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ClusterError(f"--ray {address}: cannot start or reach a Ray cluster "
                                   f"({' '.join(str(exc).split())[:300]})") from None
            self._owned = True
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = max(1, workers or cpus)
        where = "a local Ray" if address == LOCAL and self._owned else f"the Ray cluster at {address}"
        self.description = f"{where} ({len(ray.nodes())} node(s), {cpus} CPU(s), {self.workers} task(s) at a time)"

    def share(self, value: Any) -> Shared:
        return Shared(ref=self._ray.put(value))

    def run(self, fn: Callable[[Any, Any], Any], shared: Any, tasks: Iterable[Any],
            num_cpus: float = 1, stop: threading.Event | None = None) -> Iterator[tuple[int, Any]]:
        ray = self._ray
        remote = ray.remote(num_cpus=num_cpus, max_retries=self.max_retries, retry_exceptions=False)(fn)
        window = 2 * self.workers
        pending: dict[Any, int] = {}
        source = iter(enumerate(tasks))
        exhausted = False
        try:
            while True:
                while not exhausted and len(pending) < window:
                    try:
                        number, task = next(source)
                    except StopIteration:
                        exhausted = True
                        break
                    pending[remote.remote(shared, task)] = number
                if not pending:
                    return
                if stop is not None and stop.is_set():
                    raise KeyboardInterrupt
                done, _ = ray.wait(list(pending), num_returns=1, timeout=0.25)  # the stop is looked at
                for ref in done:
                    number = pending.pop(ref)
                    yield number, self._result(ref, number)
        finally:
            for ref in pending:  # interrupted, or a task failed for good: nothing more runs for this job
                with contextlib.suppress(Exception):  # already finished or gone: nothing to cancel
                    ray.cancel(ref, force=True)

    def _result(self, ref: Any, number: int) -> Any:
        ray = self._ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(getattr(exc, "cause", None), Exception) else None
            if cause is not None and _is_sealtrace_error(cause):
                raise cause from None  # a typed error the task raised on purpose: as it is
            raise ClusterError(f"task {number} failed: {type(cause or exc).__name__}: "
                               f"{' '.join(str(cause or exc).split())[:300]}") from None
        except ray.exceptions.RayError as exc:
            raise ClusterError(f"task {number} failed past {self.max_retries} retries: {type(exc).__name__}: "
                               f"{' '.join(str(exc).split())[:300]}") from None

    def close(self) -> None:
        if self._owned:
            self._ray.shutdown()
            self._owned = False


def _is_sealtrace_error(exc: BaseException) -> bool:
    from sealtrace.errors import SealtraceError

    return isinstance(exc, SealtraceError)


def executor_for(address: str | None, workers: int | None = None) -> Executor:
    """:class:`InProcess` when ``address`` is None (no ``--ray``), else a :class:`RayExecutor`."""
    if address is None:
        return InProcess()
    return RayExecutor(address, workers)


def worker_name() -> str:
    """Where this task runs: ``host:pid``, or Ray's node id and pid in a Ray worker (for summaries only;
    no record holds it)."""
    import socket
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        # Nodes of one machine (a test's simulated cluster) share a host name: name the node.
        with contextlib.suppress(Exception):  # not in a worker after all: the host name will do
            return f"node {ray.get_runtime_context().get_node_id()[:8]}:{os.getpid()}"
    return f"{socket.gethostname()}:{os.getpid()}"
