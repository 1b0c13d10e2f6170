"""Which numerics the reference runs: portable (docs/numerics.md, the default) or native.

``portable``: every result is defined by the specification, version ``SPEC_VERSION``, and is the
same on every CPU, BLAS, thread count and NumPy version. ``native``: the primitives call NumPy and
the BLAS directly in the inputs' type, as fast as the host allows, with results that depend on the
host (its CPU's kernels, the BLAS and its thread count); an audit log records which one ran.

The mode is per thread: the reference backend sets it for the duration of a run.
"""

from __future__ import annotations

import threading

# The version of docs/numerics.md the portable primitives implement. A change of any result
# (a new definition, a changed composite) is a new version.
SPEC_VERSION = "1"

PORTABLE = "portable"
NATIVE = "native"
MODES = (PORTABLE, NATIVE)


class _State(threading.local):
    native = False


_STATE = _State()


def is_native() -> bool:
    """Whether the current thread runs native numerics."""
    return _STATE.native


def current_mode() -> str:
    return NATIVE if _STATE.native else PORTABLE


def check_mode(mode: str) -> str:
    """``mode`` if it names a numerics mode, else a ValueError naming the choices."""
    if mode not in MODES:
        raise ValueError(f"numerics must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


class numerics_mode:  # noqa: N801 - a context manager used like a function
    """Run the block with the given numerics mode in this thread (restored afterwards)."""

    __slots__ = ("_before", "_native")

    def __init__(self, mode: str) -> None:
        self._native = check_mode(mode) == NATIVE
        self._before = False

    def __enter__(self) -> None:
        self._before = _STATE.native
        _STATE.native = self._native

    def __exit__(self, *exc: object) -> None:
        _STATE.native = self._before
