"""The ledger: an append-only, RFC 9162 Merkle-tree log of inference records with signed tree heads.

What a server (or ``run --ledger``) needs::

    from sealtrace.ledger import Ledger, LedgerEntry, record_run

    with Ledger.open("ledger.db", signer="key.pem") as ledger:      # or "postgresql://..."
        run = record_run(session, feeds, LedgerEntry("resnet", principal=user))  # runs the model
        receipt = ledger.append(run.record, inputs=feeds)            # returns once durable
        document = ledger.prove(receipt.record_id)                   # after a tree head covers it

and what anyone else needs to believe it: :func:`check_proof` (a proof document and trusted public
keys) and :meth:`Ledger.verify` (a whole store). docs/ledger.md specifies every encoding. The
package imports ``digest``, ``signing``, ``limits``, ``session`` and ``audit`` of sealtrace, nothing
of the server or the CLI.
"""

from __future__ import annotations

from sealtrace.ledger.errors import (
    LedgerCheckError,
    LedgerError,
    LedgerUnavailableError,
    NotCoveredError,
    NotInLedgerError,
    ProofFormatError,
    RecordError,
)
from sealtrace.ledger.ledger import Ledger, Receipt
from sealtrace.ledger.proofs import Consistency, Inclusion, check_proof, held_tree_heads, read_proof
from sealtrace.ledger.records import new_record, replay_link
from sealtrace.ledger.runs import LedgerEntry, RecordedRun, record_run
from sealtrace.ledger.store import open_store
from sealtrace.ledger.treehead import TreeHead, trusted_keys
from sealtrace.ledger.values import Trail
from sealtrace.ledger.verify import VerifyReport, verify_store

__all__ = [
    "Consistency",
    "Inclusion",
    "Ledger",
    "LedgerEntry",
    "LedgerCheckError",
    "LedgerError",
    "LedgerUnavailableError",
    "NotCoveredError",
    "NotInLedgerError",
    "ProofFormatError",
    "Receipt",
    "RecordError",
    "RecordedRun",
    "Trail",
    "TreeHead",
    "VerifyReport",
    "check_proof",
    "held_tree_heads",
    "new_record",
    "open_store",
    "read_proof",
    "record_run",
    "replay_link",
    "trusted_keys",
    "verify_store",
]
