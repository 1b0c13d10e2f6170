"""Container and manifest errors, mapped by the CLI to exit codes like every sealtrace error."""

from __future__ import annotations

from dataclasses import dataclass

from sealtrace.errors import CheckFailedError, SealtraceError


class ContainerFormatError(SealtraceError):
    """The file is not a container or not a valid manifest (no container magic, malformed manifest).

    Exit code 2: nothing was checked, because there is nothing well-formed to check. A file that
    claims to be a container and is malformed raises :class:`ContainerDamagedError` (exit 1).
    """


class SealingError(SealtraceError):
    """A model cannot be sealed (unreadable, external data missing, or its Plan cannot be built)."""


@dataclass(frozen=True)
class Mismatch:
    """One part of a container or directory that does not match what was recorded.

    ``kind`` says what the part is ('tensor', 'section', 'header', 'padding', 'signature', 'file',
    'graph': a node, attribute or opset import inside a changed graph section, or 'format': the
    file claims to be a container and is malformed),
    ``name`` names it, ``expected``/``actual`` say what was recorded and what was found, and
    ``offset`` and ``length`` give the byte range in the file where that is meaningful (for a
    tensor, the chunk whose digest differs).
    """

    kind: str
    name: str
    expected: str
    actual: str
    offset: int | None = None
    length: int | None = None

    def describe(self) -> str:
        if self.kind == "format":
            return f"not a well-formed container: {self.actual}"
        if self.kind == "graph":  # the name is a phrase (docs/container-format.md, "The graph index")
            return f"graph: {self.name} changed: expected {self.expected}, found {self.actual}"
        if self.offset is not None and self.length is not None:
            where = f" (bytes {self.offset}..{self.offset + self.length})"
        elif self.offset is not None:
            where = f" at byte {self.offset}"
        else:
            where = ""
        return f"{self.kind} {self.name!r}{where}: expected {self.expected}, found {self.actual}"

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "name": self.name,
            "expected": self.expected,
            "actual": self.actual,
            "offset": self.offset,
            "length": self.length,
        }


class IntegrityError(CheckFailedError):
    """Verification ran and found mismatches; ``mismatches`` names every one of them (exit 1)."""

    def __init__(self, where: str, mismatches: list[Mismatch]) -> None:
        self.where = where
        self.mismatches = list(mismatches)
        shown = "; ".join(m.describe() for m in self.mismatches[:10])
        more = f" (and {len(self.mismatches) - 10} more)" if len(self.mismatches) > 10 else ""
        super().__init__(f"{where}: integrity check failed, {len(self.mismatches)} mismatch(es): {shown}{more}")


class ContainerDamagedError(IntegrityError, ContainerFormatError):
    """A file that claims to be a container (it starts with the container magic, or is named
    ``*.seal``) and is not a well-formed one.

    Any byte of such a file that fails its check is a failed check, exit 1, whether it lands in a
    tensor, in the header's JSON or in the format version: a damaged container is not "bad input"
    that a user should fix by giving another file, it is a container that did not verify. It is
    also a :class:`ContainerFormatError`, for callers that catch the format error.
    """

    def __init__(self, where: str, problem: str) -> None:
        problem = problem.removeprefix(f"{where}: ")
        self.where = where
        self.mismatches = [Mismatch("format", "container", "a well-formed sealtrace container", problem)]
        CheckFailedError.__init__(self, f"{where}: integrity check failed: {problem}")
