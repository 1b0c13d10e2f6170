"""Bounds on what reading outside bytes may cost: a memory budget and regular-file checks.

Every reader of outside bytes (models, containers, logs, captures, sidecars, manifests, ``.npy`` and
``.npz`` feeds, VNNLIB) goes through these checks before it allocates:

- A file is read only when it is a regular file. ``/dev/zero``, a FIFO or a socket would make a read
  that never ends (or blocks forever); a directory gives a confusing error later. They are refused
  up front with a typed error naming the path.
- Memory sized by what a file *declares* (a ``.npy`` header's shape, a zip member's uncompressed
  size, a sparse tensor's dimensions, ``--dim`` sizes) is checked against the **memory budget**
  before it is allocated. A 145-byte ``.npy`` may declare 10^12 elements and a 2 MB ``.npz`` may
  inflate to 2 GiB; neither gets further than this check.

The budget is the most one declared allocation may take: 1 GiB unless ``SEALTRACE_MEMORY_BUDGET``
(or the CLI's ``--memory-budget``, or :func:`set_memory_budget`) says otherwise, e.g. ``16GiB``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from sealtrace.errors import InputError, SealtraceError

ENV_VAR = "SEALTRACE_MEMORY_BUDGET"
DEFAULT_MEMORY_BUDGET = 1 << 30

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "kib": 1 << 10,
    "m": 10**6, "mb": 10**6, "mib": 1 << 20,
    "g": 10**9, "gb": 10**9, "gib": 1 << 30,
    "t": 10**12, "tb": 10**12, "tib": 1 << 40,
}  # fmt: skip
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*\Z")

_override: int | None = None


class BudgetExceededError(InputError):
    """Reading a file would allocate more than the memory budget allows (exit 2)."""


def parse_size(text: str, what: str = "size") -> int:
    """Bytes from '1073741824', '512MiB', '16GiB', '2GB' (decimal and binary units, case-insensitive)."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise InputError(f"{what} {text!r}: expected a size such as 512MiB, 16GiB or 2000000000")
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise InputError(f"{what} {text!r}: must be positive")
    return value


def format_size(n: int) -> str:
    """A byte count for people: '1 GiB', '3.5 MiB', '145 bytes' (binary units, stated as such)."""
    if n < 1024:
        return f"{n} bytes"
    exponent = min(4, (n.bit_length() - 1) // 10)
    value = n / (1 << (10 * exponent))
    return f"{value:.1f} {('KiB', 'MiB', 'GiB', 'TiB')[exponent - 1]}".replace(".0 ", " ")


def memory_budget() -> int:
    """The current budget in bytes: set_memory_budget(), else $SEALTRACE_MEMORY_BUDGET, else 1 GiB."""
    if _override is not None:
        return _override
    text = os.environ.get(ENV_VAR)
    return _budget_of(text) if text else DEFAULT_MEMORY_BUDGET


@functools.lru_cache(maxsize=8)
def _budget_of(text: str) -> int:
    """$SEALTRACE_MEMORY_BUDGET parsed once per value: kernels check their outputs on every call."""
    return parse_size(text, ENV_VAR)


def set_memory_budget(nbytes: int | None) -> None:
    """Set the budget for this process (None: back to the environment variable or the default)."""
    global _override
    if nbytes is not None and nbytes <= 0:
        raise InputError(f"memory budget {nbytes}: must be positive")
    _override = nbytes


@contextlib.contextmanager
def memory_budget_of(nbytes: int) -> Iterator[None]:
    """A budget for the duration of a ``with`` block (tests, and callers with their own limit)."""
    global _override
    before = _override
    set_memory_budget(nbytes)
    try:
        yield
    finally:
        _override = before


def check_allocation(nbytes: int, what: str) -> None:
    """Refuse, before allocating, ``nbytes`` that ``what`` (e.g. "x.npy: array 'x'") declares."""
    budget = memory_budget()
    if nbytes > budget:
        raise BudgetExceededError(
            f"{what} declares {format_size(nbytes)} ({nbytes} bytes), more than the memory budget of "
            f"{format_size(budget)}; raise it with --memory-budget or {ENV_VAR} if this is expected"
        )


def has_control_characters(name: str) -> bool:
    """Whether a name taken from outside bytes holds a C0 control character or DEL: no name a
    writer of ours makes does, and a NUL cannot reach the file system at all."""
    return any(ord(c) < 32 or ord(c) == 127 for c in name)


def open_regular_file(
    path: str | os.PathLike[str], what: str = "file", error: type[SealtraceError] = InputError
) -> tuple[BinaryIO, int]:
    """Open ``path`` for reading, refusing anything but a regular file; (file, size in bytes).

    Devices (``/dev/zero``), FIFOs and sockets are refused before a single byte is read, and so is
    a directory. ``error`` is the typed error to raise (every one of them is a bad-input exit 2).
    """
    path = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO without a writer would block; it is refused just below anyway.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, not a {what}") from None
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    except ValueError:  # a NUL character: no file has such a name (names come from outside bytes too)
        raise error(f"{str(path)[:200]!r}: not a valid file name (it contains a NUL character)") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a device, pipe or socket)"
        raise error(f"{path}: is {kind}, not a {what}")
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb"), info.st_size


def read_regular_file(
    path: str | os.PathLike[str],
    what: str = "file",
    error: type[SealtraceError] = InputError,
    max_bytes: int | None = None,
) -> bytes:
    """The whole of a regular file (see :func:`open_regular_file`), at most ``max_bytes`` of it.

    The size is taken from the open file, and exactly that many bytes are read: a file that grows
    while it is read cannot make the read unbounded.
    """
    f, size = open_regular_file(path, what, error)
    with f:
        if max_bytes is not None and size > max_bytes:
            raise error(f"{path}: {format_size(size)}, larger than a {what} may be ({format_size(max_bytes)})")
        try:
            data = f.read(size)
        except OSError as exc:
            raise error(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    return data


def json_nesting_exceeds(value: Any, limit: int) -> bool:
    """Whether parsed JSON nests lists and objects more than ``limit`` levels deep (the value itself
    is level 1). Iterative: a document built to be deep cannot exhaust the stack here."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for ``json.loads``: a key given twice is a ValueError (two readers could
    take different values from such an object; docs/binding.md, docs/ledger.md)."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key[:80]!r}")
        result[key] = value
    return result
