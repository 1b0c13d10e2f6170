"""Errors of the ledger package (part of sealtrace's one exception hierarchy)."""

from __future__ import annotations

from collections.abc import Sequence

from sealtrace.errors import CheckFailedError, InputError


class LedgerError(InputError):
    """A store, record, key or request the ledger cannot use: missing, malformed, unknown (exit 2)."""


class RecordError(LedgerError):
    """A record does not follow the record format (schema, canonical form, links); names the field."""


class ProofFormatError(LedgerError):
    """A proof or tree-head document is not one this reader knows or is malformed (exit 2)."""


class NotInLedgerError(LedgerError):
    """The ledger holds no record with the id asked for, or no tree head of the size asked for."""


class NotCoveredError(LedgerError):
    """No signed tree head covers the record yet (it was appended after the latest one)."""


class LedgerUnavailableError(LedgerError):
    """The store failed while appending (disk full, connection lost); nothing of the batch was kept."""


class LedgerCheckError(CheckFailedError):
    """Verification or a proof check ran and failed (exit 1); ``problems`` lists what was found."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        shown = "; ".join(self.problems[:10])
        more = f" (and {len(self.problems) - 10} more)" if len(self.problems) > 10 else ""
        super().__init__(f"{shown}{more}")
