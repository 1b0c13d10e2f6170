"""Container and manifest errors, mapped by the CLI to exit codes like every sealtrace error."""

from __future__ import annotations

from dataclasses import dataclass

from sealtrace.errors import CheckFailedError, SealtraceError


class ContainerFormatError(SealtraceError):
    """The file is not a valid container or manifest (bad magic, unknown version, malformed header).

    Exit code 2: nothing was checked, because there is nothing well-formed to check.
    """


class SealingError(SealtraceError):
    """A model cannot be sealed (unreadable, external data missing, or its Plan cannot be built)."""


@dataclass(frozen=True)
class Mismatch:
    """One part of a container or directory that does not match what was recorded.

    ``kind`` says what the part is ('tensor', 'section', 'header', 'padding', 'signature', 'file'),
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
