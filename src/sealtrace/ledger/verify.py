"""Verifying a whole ledger without trusting its store.

Every leaf is recomputed from the stored records, every stored node from the leaves, every signed
root from the nodes; every tree head must carry a valid signature by a trusted key, and each tree
head must be consistent with the next (an RFC 9162 consistency proof built from the store and
checked). Every stored input and trail must hash to the digest it is stored under (they are what a
replay runs), and the database engine's own check of the store must find nothing damaged. The
store's rows are read a page at a time: memory stays flat however large the ledger.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sealtrace.ledger import merkle
from sealtrace.ledger.errors import LedgerError, ProofFormatError, RecordError
from sealtrace.ledger.records import MAX_RECORD_BYTES, parse_record
from sealtrace.ledger.store import SqlStore, is_integer_key, row_bytes
from sealtrace.ledger.treehead import TreeHead, TrustedKeys
from sealtrace.ledger.values import decode_tensor, decompress_trail, trail_run_digest

MAX_PROBLEMS = 100


@dataclass
class VerifyReport:
    """What :func:`verify_store` found."""

    location: str
    ledger_id: str
    size: int = 0
    tree_heads: int = 0
    latest: TreeHead | None = None
    problems: list[str] = field(default_factory=list)
    omitted: int = 0  # problems beyond MAX_PROBLEMS, counted only

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def unsigned(self) -> int:
        """Records after the latest trusted tree head: stored, not yet signed."""
        return self.size - (self.latest.tree_size if self.latest else 0)

    def problem(self, message: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(message)
        else:
            self.omitted += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "location": self.location,
            "ledger": self.ledger_id,
            "ok": self.ok,
            "records": self.size,
            "tree_heads": self.tree_heads,
            "latest_tree_head": self.latest.to_json() if self.latest else None,
            "unsigned_records": self.unsigned,
            "problems": self.problems,
            "problems_omitted": self.omitted,
        }


def verify_store(store: SqlStore, trusted: TrustedKeys, known: Iterable[TreeHead] = ()) -> VerifyReport:
    """Check every record, node and tree head of ``store``; tree heads count only when signed by
    one of ``trusted`` (public keys by key id).

    ``known``: tree heads the verifier holds from earlier (from proofs it was given). Each must be in
    the store and agree with its records: a store cut back to before a head it once signed, or
    rewritten since, is caught even where the rows left are consistent among themselves.
    """
    report = VerifyReport(store.location, store.ledger_id)
    try:
        _verify(store, trusted, known, report)
    except LedgerError as exc:
        # The store opened as a ledger (its meta table read), so rows it cannot give back are damage
        # found by the check (exit 1), not input the user got wrong.
        report.problem(f"the store cannot be read to the end: {exc}")
    return report


def _verify(store: SqlStore, trusted: TrustedKeys, known: Iterable[TreeHead], report: VerifyReport) -> None:
    heads = _tree_heads(store, trusted, report)
    # Read after the heads: every honest head is then within the records checked below.
    size = report.size = store.size()
    held = _known_heads(store, trusted, known, report)
    roots = _check_tree(store, size, {head.tree_size for head in [*heads, *held]}, report)
    for head in held:
        where = f"the tree head of size {head.tree_size} you hold"
        if head.tree_size > size:
            report.problem(f"{where}: the store holds only {size} records (cut back since)")
        elif roots.get(head.tree_size) != head.root_hash:
            report.problem(f"{where}: signs root {head.root_hash.hex()[:16]}..., the store's records give "
                           f"{roots.get(head.tree_size, b'').hex()[:16]}... (rewritten since)")
    previous: TreeHead | None = None
    for head in heads:
        where = f"tree head of size {head.tree_size}"
        if head.tree_size > size:
            report.problem(f"{where}: the store holds only {size} records (records were removed)")
            continue
        if roots.get(head.tree_size) != head.root_hash:
            got = roots.get(head.tree_size, b"").hex()[:16]
            report.problem(f"{where}: signs root {head.root_hash.hex()[:16]}..., the records give {got}...")
        if previous is not None:
            _check_consistency(store, previous, head, report)
        previous = head
    report.latest = previous
    for problem in store.integrity_problems():
        report.problem(problem)
    _check_blobs(store, report)
    if size and previous is None:
        report.problem(f"no tree head signed by a trusted key ({', '.join(sorted(trusted))}): "
                       f"none of the {size} records is signed")


def _check_blobs(store: SqlStore, report: VerifyReport) -> None:
    """Each stored input and trail (content-addressed) is what its digest says: a damaged one would
    make a replay fail or, worse, replay something else."""
    for digest in store.iter_blob_digests("inputs"):
        where = f"{store.location}: stored input {digest[:16]}..."
        try:
            stored = store.input_row(digest)
            if stored is not None:
                decode_tensor(digest, *stored, where=where)
        except LedgerError as exc:
            report.problem(str(exc))
    for digest in store.iter_blob_digests("trails"):
        where = f"{store.location}: stored trail {digest[:16]}..."
        try:
            trail = store.trail_row(digest)
            if trail is not None and trail_run_digest(decompress_trail(trail[1], trail[0], where)) != digest:
                report.problem(f"{where}: the audit log stored there has another run digest")
        except LedgerError as exc:
            report.problem(str(exc))


def _tree_heads(store: SqlStore, trusted: TrustedKeys, report: VerifyReport) -> list[TreeHead]:
    """The stored tree heads that parse, belong to this ledger and carry a trusted signature; each
    must name the one before it (``previous``), so none is missing or added between them."""
    heads: list[TreeHead] = []
    previous: str | None = None
    for column_size, body in store.iter_tree_heads():
        if not is_integer_key(column_size):
            report.problem(f"tree head row with size {str(column_size)[:40]!r}: not an integer (a row was altered)")
            continue
        where = f"tree head row {column_size}"
        report.tree_heads += 1
        stored = row_bytes(body)
        try:
            head = TreeHead.from_bytes(stored, where)
        except (ProofFormatError, LedgerError) as exc:
            report.problem(str(exc))
            previous = hashlib.sha256(stored).hexdigest()
            continue
        problem = head.problem(trusted)
        if problem is not None:
            report.problem(problem)
        elif head.tree_size != column_size:
            report.problem(f"{where}: holds the tree head of size {head.tree_size} (rows moved)")
        elif head.ledger != store.ledger_id:
            report.problem(f"{where}: signed for ledger {head.ledger}, this is ledger {store.ledger_id}")
        elif head.previous != previous:
            before = "no tree head" if head.previous is None else f"tree head {head.previous[:16]}..."
            report.problem(f"tree head of size {head.tree_size}: follows {before}, the store has "
                           f"{'none' if previous is None else previous[:16] + '...'} before it (a tree head "
                           "was removed, added or replaced)")
        elif heads and head.timestamp < heads[-1].timestamp:
            report.problem(f"{where}: signed at {head.timestamp}, before the smaller tree head at {heads[-1].timestamp}")
        else:
            heads.append(head)
        previous = hashlib.sha256(stored).hexdigest()
    return heads


def _known_heads(store: SqlStore, trusted: TrustedKeys, known: Iterable[TreeHead], report: VerifyReport) -> list[TreeHead]:
    """The held tree heads that are signed by a trusted key for this ledger, each also stored as is."""
    held = []
    for head in known:
        where = f"the tree head of size {head.tree_size} you hold"
        problem = head.problem(trusted)
        if problem is not None:
            report.problem(f"{where}: {problem}")
        elif head.ledger != store.ledger_id:
            report.problem(f"{where}: is of ledger {head.ledger}, this is ledger {store.ledger_id}")
        else:
            if store.tree_head(head.tree_size) != head.to_bytes():
                report.problem(f"{where}: is not in the store (removed or replaced)")
            held.append(head)
    return held


def _check_tree(store: SqlStore, size: int, wanted: set[int], report: VerifyReport) -> dict[int, bytes]:
    """Recompute leaves and nodes from the records, compare them with the stored nodes, and return
    the roots at the ``wanted`` tree sizes."""
    tree = merkle.CompactRange()
    roots: dict[int, bytes] = {}
    stored = _StoredNodes(store, report)
    expected = 0
    for idx, record_id, body in store.iter_records(size):
        if not is_integer_key(idx):
            report.problem(f"record row with leaf index {str(idx)[:40]!r}: not an integer (a row was altered)")
            continue
        if idx < expected:
            report.problem(f"record row {idx}: not a leaf index of the tree (a row was inserted or moved)")
            continue
        if idx > expected:
            report.problem(f"records {expected} to {idx - 1} are missing (leaf indices jump from {expected} to {idx})")
            expected = idx
        leaf = row_bytes(body)
        where = f"record {idx}"
        try:
            if not leaf:
                raise RecordError(f"{where}: empty, or more than a record may be ({MAX_RECORD_BYTES} bytes)")
            record = parse_record(leaf, where)
        except RecordError as exc:
            report.problem(str(exc))
        else:
            if record["id"] != record_id:
                report.problem(f"{where}: stored under id {str(record_id)[:40]!r}, the record says {record['id']}")
            for link in record["links"]:
                target = store.record_by_id(link["record"])
                if target is None or target[0] >= idx:
                    report.problem(f"{where}: links to {link['record']}, which is not an earlier record")
        for pos, value in tree.append(merkle.leaf_hash(leaf)):
            found = stored.take(pos, report)
            if found is None:
                report.problem(f"node {pos}: missing from the store")
            elif found != value:
                report.problem(f"node {pos}: stored hash {found.hex()[:16]}... differs from the records' "
                               f"{value.hex()[:16]}...")
        expected += 1
        if tree.size in wanted:
            roots[tree.size] = tree.root()
    if expected != size:
        report.problem(f"the store says it holds {size} records, {expected} were read")
    # Nodes of records appended while this ran are fine; any other node no record makes is not.
    stored.report_rest(merkle.node_count(store.size()), report)
    return roots


class _StoredNodes:
    """The stored nodes in position order, taken one position at a time as the tree is recomputed."""

    def __init__(self, store: SqlStore, report: VerifyReport) -> None:
        self._rows = self._positioned(store, report)
        self._next = next(self._rows, None)

    @staticmethod
    def _positioned(store: SqlStore, report: VerifyReport) -> Iterator[tuple[int, bytes]]:
        for pos, value in store.iter_nodes():
            if is_integer_key(pos):
                yield pos, row_bytes(value)
            else:
                report.problem(f"node row with position {str(pos)[:40]!r}: not an integer (a row was altered)")

    def _advance(self) -> None:
        self._next = next(self._rows, None)

    def take(self, pos: int, report: VerifyReport) -> bytes | None:
        """The stored hash at ``pos`` (None when missing); nodes stored before it are reported."""
        while self._next is not None and self._next[0] < pos:
            report.problem(f"node {self._next[0]}: stored, but no record makes it (a row was inserted or moved)")
            self._advance()
        if self._next is None or self._next[0] != pos:
            return None
        value = self._next[1]
        self._advance()
        return value

    def report_rest(self, appended: int, report: VerifyReport) -> None:
        """Report the nodes not taken, except those below ``appended`` (made by later appends)."""
        while self._next is not None:
            if self._next[0] >= appended:
                report.problem(f"node {self._next[0]}: stored, but no record makes it (a row was inserted or moved)")
            self._advance()


def _check_consistency(store: SqlStore, old: TreeHead, new: TreeHead, report: VerifyReport) -> None:
    try:
        proof = merkle.consistency_proof(old.tree_size, new.tree_size, store.read_nodes)
    except LookupError as exc:
        report.problem(f"consistency of tree heads {old.tree_size} -> {new.tree_size}: {exc}")
        return
    if not merkle.verify_consistency(old.tree_size, new.tree_size, old.root_hash, new.root_hash, proof):
        report.problem(f"tree head of size {new.tree_size} is not consistent with tree head of size {old.tree_size}")
