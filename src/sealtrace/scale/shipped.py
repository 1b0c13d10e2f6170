"""The model a job ships to its workers: a container's bytes, verified once in each worker process.

The driver reads the container once (its size checked against the memory budget), verifies it, and
puts its bytes in Ray's object store (:meth:`Executor.share`). A task carries only a reference; the
first task a worker process runs fetches the bytes, verifies them (every tensor, every signature, the
trusted keys) and opens a :class:`~sealtrace.session.Session`, which the process keeps for the tasks
after it: a container is verified once per worker, never re-read per task. What travels: the bytes,
the raw public keys to trust, the backend's name and thread count, the memory budget and the versions
the driver expects the workers to have. No private key is shipped.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from sealtrace import __version__
from sealtrace.backends import make_backend
from sealtrace.container import IntegrityError, Mismatch
from sealtrace.container.signatures import signers
from sealtrace.container.verify import load_verified_model
from sealtrace.errors import InputError
from sealtrace.limits import check_allocation, memory_budget, memory_budget_of, open_regular_file
from sealtrace.scale.cluster import Executor, Shared
from sealtrace.scale.errors import ClusterError
from sealtrace.session import ModelOrigin, Session


@dataclass(frozen=True)
class ShippedModel:
    """What a task needs to open the job's model in a worker process."""

    container: Shared  # the .seal file's bytes
    digest: str  # its container digest (verified by the driver): the key of each process's cache
    path: str  # the driver's path of the container: how audit trails name the model
    name: str  # the model's name in records
    trust: tuple[bytes, ...]  # raw Ed25519 public keys; a container not signed by one is refused
    backend: str
    threads: int
    memory_budget: int
    sealtrace_version: str
    backend_version: str
    device: str | None = None  # the torch backend's (sealtrace.backends.devices); None: the CPU
    gpu_precision: str | None = None

    def session(self) -> Session:
        """The verified Session of this model in this process (opened by the first task that asks)."""
        with _LOCK:
            session = _SESSIONS.get(self.cache_key)
            if session is None:
                session = _open(self)
                _SESSIONS[self.cache_key] = session
        return session

    @property
    def cache_key(self) -> tuple[Any, ...]:
        return (self.digest, self.backend, self.threads, self.trust, self.device, self.gpu_precision)


_SESSIONS: dict[tuple[Any, ...], Session] = {}
_LOCK = threading.Lock()


def _open(model: ShippedModel) -> Session:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from sealtrace.plan import build_plan

    if model.sealtrace_version != __version__:
        raise ClusterError(f"a worker has sealtrace {__version__}, the driver {model.sealtrace_version}: "
                           "install the same version on every node")
    with memory_budget_of(model.memory_budget):
        data = model.container.get()
        keys = [Ed25519PublicKey.from_public_bytes(raw) for raw in model.trust]
        # From Ray's object store: a read-only array over shared memory, verified and used in place.
        source: Any = memoryview(data.data).cast("B") if isinstance(data, np.ndarray) else data
        verified = load_verified_model(source, trust=keys, file_sha256=True)
        report = verified.report
        if model.digest and report.digest != model.digest:
            raise IntegrityError(model.path, [Mismatch("header", "container digest", model.digest, str(report.digest))])
        backend = make_backend(model.backend, model.threads, device=model.device, gpu_precision=model.gpu_precision)
        plan = build_plan(verified.model, require_kernels=bool(getattr(backend, "needs_kernels", True)))
    if verified.sealtrace_version == __version__ and plan.digest != report.plan_digest:
        # As Session("x.seal") does: a container sealed by this version must give back its Plan digest.
        raise IntegrityError(model.path, [Mismatch("header", "plan digest", str(report.plan_digest), plan.digest)])
    session = Session(plan, backend=backend)
    # The Session was opened from verified bytes, not a path: it names the container it came from, as
    # Session("x.seal") would, so that audit trails link to it (docs/audit-log.md).
    session.origin = ModelOrigin("container", path=model.path, sha256=report.file_sha256,
                                 container_digest=report.digest, signed_by=signers(report.signatures, bool(keys)),
                                 trusted=bool(keys))
    version = str(session.backend.version)
    if version != model.backend_version:
        raise ClusterError(f"a worker has {model.backend} {version}, the driver {model.backend_version}: "
                           "install the same version on every node (records name it)")
    return session


def ship_model(
    path: str | os.PathLike[str],
    executor: Executor,
    *,
    backend: str,
    threads: int = 1,
    trust: tuple[str, ...] = (),
    name: str | None = None,
    device: str | None = None,
    gpu_precision: str | None = None,
) -> tuple[ShippedModel, Session]:
    """Read and verify the container at ``path`` here, share its bytes with the workers; the model
    to ship and this process's Session of it."""
    from sealtrace.container import is_container, open_container
    from sealtrace.signing import load_public_key

    where = os.fspath(path)
    if not is_container(path):
        raise InputError(f"{where}: not a sealed container (seal it first: sealtrace seal MODEL.onnx -o MODEL.seal)")
    open_container(path).close()  # its structure checked by name, as Session("x.seal") does (a bad .seal: exit 1)
    f, size = open_regular_file(path, "container")
    with f:
        check_allocation(size, f"{where}: container")
        data = f.read(size)
    if len(data) != size:
        raise InputError(f"{where}: changed while it was read")
    keys = tuple(load_public_key(key).public_bytes_raw() for key in trust)
    backend_version = str(make_backend(backend).version)
    local = ShippedModel(Shared(value=data), "", os.path.abspath(where), name or model_name_of(where), keys,
                         backend, threads, memory_budget(), __version__, backend_version, device, gpu_precision)
    session = _open(local)  # verified here as a worker would: a job run in this process reuses it
    digest = session.origin.container_digest
    assert digest is not None
    # In this process the bytes are the ones just read; to Ray workers they go through the object
    # store, as an array (Ray hands arrays to tasks without a copy, read-only).
    shared = Shared(value=data) if executor.in_process else executor.share(np.frombuffer(data, np.uint8))
    shipped = dataclasses.replace(local, container=shared, digest=digest)
    with _LOCK:
        _SESSIONS[shipped.cache_key] = session
    return shipped, session


def model_name_of(path: str) -> str:
    """A model's name in records: its container's file stem, as ``sealtrace serve`` names it."""
    stem = os.path.basename(path)
    for suffix in (".seal",):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    return stem or "model"
