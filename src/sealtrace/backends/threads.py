"""How many threads NumPy's BLAS may use while the reference backend runs.

The default is one. Two reasons: the thread count changes the bits of BLAS results (the order of
partial sums), so a fixed count keeps "same input, same machine, same bytes" true whatever
OPENBLAS_NUM_THREADS says; and OpenBLAS's spinning worker threads collapse when cores are shared
(measured on this project's 2-core machines under load: YOLOv8n 60 ms with one thread, 220 ms with
two). The count is set for the duration of a run and restored afterwards, so the caller's own
NumPy work is unaffected.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any


@cache
def _blas_libraries() -> tuple[Any, ...]:
    import numpy  # noqa: F401 - threadpoolctl only sees libraries that are loaded
    from threadpoolctl import ThreadpoolController

    return tuple(lib for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas")


def blas_info() -> list[dict[str, Any]]:
    """What BLAS NumPy uses: library, version, architecture, threads (for audit headers, reports)."""
    return [lib.info() for lib in _blas_libraries()]


@contextmanager
def blas_threads(count: int | None) -> Iterator[None]:
    """Limit NumPy's BLAS to ``count`` threads inside the block (None: leave it as it is)."""
    if count is None:
        yield
        return
    changed = []
    for lib in _blas_libraries():
        before = lib.get_num_threads()
        if before != count:
            lib.set_num_threads(count)
            changed.append((lib, before))
    try:
        yield
    finally:
        for lib, before in changed:
            lib.set_num_threads(before)
