"""How many threads NumPy's BLAS may use while the reference backend runs.

The default is one. Two reasons: the thread count changes the bits of BLAS results (the order of
partial sums), so a fixed count keeps "same input, same machine, same bytes" true whatever
OPENBLAS_NUM_THREADS says; and OpenBLAS's spinning worker threads collapse when cores are shared
(measured on this project's 2-core machines under load: YOLOv8n 60 ms with one thread, 220 ms with
two). The count is set for the duration of a run and restored afterwards, so the caller's own
NumPy work is unaffected.
"""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def _blas_libraries() -> tuple[Any, ...]:
    import numpy  # noqa: F401 - threadpoolctl only sees libraries that are loaded
    from threadpoolctl import ThreadpoolController

    return tuple(lib for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas")


class blas_threads:  # noqa: N801 - used like the function it replaced: `with blas_threads(1):`
    """Limit NumPy's BLAS to ``count`` threads inside the block (None: leave it as it is).

    A class rather than a generator-based context manager: it is entered on every run, and on a
    model that runs in 80 us the generator's bookkeeping alone was a few percent.
    """

    __slots__ = ("_changed", "_count")

    def __init__(self, count: int | None) -> None:
        self._count = count
        self._changed: list[tuple[Any, int]] = []

    def __enter__(self) -> None:
        count = self._count
        if count is None:
            return
        for lib in _blas_libraries():
            before = lib.get_num_threads()
            if before != count:
                lib.set_num_threads(count)
                self._changed.append((lib, before))

    def __exit__(self, *exc: object) -> None:
        for lib, before in self._changed:
            lib.set_num_threads(before)
        self._changed.clear()
