"""How many threads NumPy's BLAS may use while the reference backend runs.

With portable numerics (the default, docs/numerics.md) the thread count does not change a single
bit, and the backend leaves the BLAS as the environment set it (all cores unless
OPENBLAS_NUM_THREADS says otherwise). With native numerics it does (the order of partial sums), so
a replay of a native log pins one thread, as the reference did before portable numerics. On shared
cores OpenBLAS's spinning worker threads can collapse (BENCHMARKS.md, "Measurements behind the code"): ``--threads 1`` is the
remedy there.
The count is set for the duration of a run and restored afterwards, so the caller's own NumPy work
is unaffected.
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

    A class rather than a generator-based context manager: it is entered on every run, and on
    models that run in microseconds a generator's bookkeeping shows.
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
