"""Backends execute a Plan and report each step to observers. Looked up by name."""

from __future__ import annotations

from collections.abc import Callable

from sealtrace.backends.base import Backend
from sealtrace.errors import BackendError


def _reference() -> Backend:
    from sealtrace.backends.reference import ReferenceBackend

    return ReferenceBackend()


def _onnxruntime() -> Backend:
    from sealtrace.backends.onnxruntime import OnnxRuntimeBackend

    return OnnxRuntimeBackend()


def _torch(device: str = "cpu", threads: int | None = None, precision: str = "faithful") -> Backend:
    try:
        from sealtrace.backends.torch import TorchBackend
    except ImportError as exc:
        raise BackendError(f"the torch backend needs PyTorch ({exc}); pip install 'sealtrace[torch]'") from None
    return TorchBackend(device=device, threads=threads, precision=precision)


def _tvm() -> Backend:
    from sealtrace.backends.tvm import TvmBackend
    from sealtrace.engines.tvm import require_tvm

    require_tvm()  # BackendError naming the extra to install
    return TvmBackend()


BACKENDS: dict[str, Callable[[], Backend]] = {
    "reference": _reference,
    "onnxruntime": _onnxruntime,
    "torch": _torch,
    "tvm": _tvm,
}


def get_backend(name: str) -> Backend:
    """A fresh backend instance by name ('reference', 'onnxruntime', ...)."""
    factory = BACKENDS.get(name)
    if factory is None:
        raise BackendError(f"unknown backend {name!r}; choose one of: {', '.join(BACKENDS)}")
    return factory()


__all__ = ["BACKENDS", "Backend", "get_backend", "make_backend"]


def make_backend(
    name: str, threads: int | None = None, numerics: str = "portable", device: str | None = None,
    gpu_precision: str | None = None,
) -> Backend:
    """A backend by name with its thread count set (None: the backend's default), for the reference
    backend its numerics ("portable" or "native", docs/numerics.md), and for torch its device
    ("cpu", "cuda", "cuda:N"; sealtrace.backends.devices) and GPU precision ("faithful" or "tf32").
    A device other than the CPU, or a precision, for a backend without that choice is a BackendError."""
    from sealtrace.backends.devices import check_device, check_precision

    checked = check_device(device, name) if device is not None else None
    precision = check_precision(gpu_precision, checked)
    if name == "torch":
        return _torch(checked or "cpu", threads, precision)
    if name == "reference":
        from sealtrace.backends.reference import ReferenceBackend

        return ReferenceBackend(threads=threads, numerics=numerics)
    if threads is None:
        return get_backend(name)
    if name == "onnxruntime":
        from sealtrace.backends.onnxruntime import OnnxRuntimeBackend

        return OnnxRuntimeBackend(threads=threads)
    backend = get_backend(name)
    if hasattr(backend, "threads"):
        backend.threads = threads
    return backend
