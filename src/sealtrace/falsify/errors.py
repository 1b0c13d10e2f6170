"""Errors of the falsifier: a property that cannot be read, or one that does not fit the model."""

from __future__ import annotations

from sealtrace.errors import InputError, SealtraceError


class PropertyError(InputError):
    """A property is unusable: an unbounded input, a variable count that does not match the model ...

    ``where`` names the file (and line:column where known) or the API call.
    """

    def __init__(self, message: str, where: str | None = None) -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class VnnlibSyntaxError(PropertyError):
    """A VNNLIB file is malformed or outside the supported subset, at ``line``:``column`` (1-based)."""

    def __init__(self, message: str, path: str, line: int, column: int) -> None:
        self.path = path
        self.line = line
        self.column = column
        super().__init__(message, f"{path}:{line}:{column}")


class PropertyReadTimeoutError(SealtraceError):
    """The time budget ran out while a property file was being read (``read`` of ``size`` bytes).

    Not bad input: the falsifier's answer is ``unknown``, as for a search that runs out of time.
    """

    def __init__(self, path: str, read: int, size: int) -> None:
        self.path = path
        self.read = read
        self.size = size
        super().__init__(f"{path}: the time budget ran out while reading the property ({read} of {size} bytes read)")
