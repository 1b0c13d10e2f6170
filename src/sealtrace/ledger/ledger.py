"""The ledger: append records durably, sign tree heads, and prove what it holds.

Appends from many threads are *group-committed*: :meth:`Ledger.submit` checks and encodes a record in
the caller's thread and queues it; one writer thread takes everything queued, appends it in one
transaction (one fsync), and only then resolves each caller's future. While one commit is on disk
the next batch gathers, so throughput grows with the number of concurrent callers while every
``append`` still returns only once its record is durable.

Tree heads are signed by the writer every ``head_every`` records or ``head_interval`` seconds after
the first unsigned record, whichever comes first, when the ledger is opened with unsigned records
(after a crash), and on :meth:`Ledger.close`.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sealtrace.digest import tensor_digest
from sealtrace.ledger import merkle
from sealtrace.ledger.errors import (
    LedgerError,
    LedgerUnavailableError,
    NotCoveredError,
    NotInLedgerError,
    RecordError,
)
from sealtrace.ledger.proofs import consistency_document, inclusion_document
from sealtrace.ledger.records import parse_record, record_leaf
from sealtrace.ledger.store import SqlStore, Transaction, open_store, row_bytes
from sealtrace.ledger.treehead import TreeHead, trusted_keys
from sealtrace.ledger.values import (
    Trail,
    decode_tensor,
    decompress_trail,
    encode_tensor,
)
from sealtrace.ledger.verify import VerifyReport, verify_store
from sealtrace.signing import load_private_key

DEFAULT_HEAD_EVERY = 1000
DEFAULT_HEAD_INTERVAL = 10.0
MAX_BATCH = 1024
_RECENT_INPUTS = 1 << 16  # digests known to be stored, so repeated inputs are not re-sent
_KNOWN_FOR = 60.0  # seconds; an input's last_used (for retention) lags by at most this much


@dataclass(frozen=True)
class Receipt:
    """What an append returns once the record is durable: its id and its leaf index in the tree."""

    record_id: str
    index: int
    leaf_hash: str

    def to_json(self) -> dict[str, Any]:
        return {"record_id": self.record_id, "index": self.index, "leaf_hash": self.leaf_hash}


@dataclass
class _Pending:
    """One queued append: the checked record, its leaf, and what goes beside it."""

    record_id: str
    leaf: bytes
    leaf_hash: bytes
    links: list[str]
    inputs: list[tuple[str, np.ndarray]]
    trail: tuple[str, int, bytes] | None
    index: int = -1
    future: Future[Receipt] = field(default_factory=Future)


@dataclass
class _Control:
    """A request to the writer: sign a tree head now, or stop."""

    stop: bool
    future: Future[TreeHead | None] = field(default_factory=Future)


class Ledger:
    """An append-only, Merkle-tree ledger of records over a SQLite or PostgreSQL store.

    ``Ledger.open("ledger.db", signer="key.pem")`` opens (creating when missing) a ledger that signs
    tree heads; ``Ledger.open(location, readonly=True)`` one to read, prove and verify. Thread-safe.
    """

    def __init__(
        self,
        store: SqlStore,
        signer: Ed25519PrivateKey | None = None,
        head_every: int = DEFAULT_HEAD_EVERY,
        head_interval: float = DEFAULT_HEAD_INTERVAL,
        retention: float | None = None,
    ) -> None:
        if head_every < 1 or head_interval <= 0:
            raise LedgerError("tree heads need head_every >= 1 and head_interval > 0")
        self.store = store
        self.signer = signer
        self.head_every = head_every
        self.head_interval = head_interval
        self.retention = retention
        self._queue: queue.SimpleQueue[_Pending | _Control] = queue.SimpleQueue()
        self._closed = False
        self._failure: BaseException | None = None
        self._close_lock = threading.Lock()
        self._known_inputs: dict[str, float] = {}
        self._writer: threading.Thread | None = None
        if not store.readonly:
            self._tree: merkle.CompactRange | None = None
            self._head_size = 0
            self._tail_since: float | None = None
            self._last_prune = 0.0
            self._writer = threading.Thread(target=self._run, name="sealtrace-ledger-writer", daemon=True)
            self._writer.start()
            try:
                self.sign_tree_head()  # after a crash: sign what the last run left unsigned
            except BaseException:
                self.close()
                raise

    @classmethod
    def open(
        cls,
        location: str | os.PathLike[str],
        *,
        signer: str | os.PathLike[str] | Ed25519PrivateKey | None = None,
        readonly: bool = False,
        head_every: int = DEFAULT_HEAD_EVERY,
        head_interval: float = DEFAULT_HEAD_INTERVAL,
        retention: float | None = None,
    ) -> Ledger:
        """The ledger at ``location`` (a SQLite path or a ``postgresql://`` DSN).

        ``signer``: the Ed25519 key (PEM path or key) that signs tree heads. ``retention``: seconds
        after which stored inputs and trails are removed (records and the tree never are).
        """
        key = signer if signer is None or isinstance(signer, Ed25519PrivateKey) else load_private_key(signer)
        store = open_store(location, readonly=readonly)
        try:
            return cls(store, key, head_every, head_interval, retention)
        except BaseException:
            store.close()
            raise

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def ledger_id(self) -> str:
        return self.store.ledger_id

    # -- appending ----------------------------------------------------------------------------------
    def submit(
        self,
        record: Mapping[str, Any],
        inputs: Mapping[str, Any] | None = None,
        trail: bytes | Trail | None = None,
    ) -> Future[Receipt]:
        """Queue ``record`` for appending; the future resolves to its :class:`Receipt` once it is durable.

        ``inputs``: the run's input values by name, stored by digest for replays (tensors; each must
        be the value the record names). ``trail``: the run's audit log (its bytes, or a :class:`Trail`
        made from them), whose run digest must be the record's ``trail``. Record errors raise here,
        before anything is queued.
        """
        if self._writer is None:
            raise LedgerError(f"{self.store.location}: opened read-only")
        leaf = record_leaf(record)
        pending = _Pending(
            record_id=record["id"],
            leaf=leaf,
            leaf_hash=merkle.leaf_hash(leaf),
            links=[link["record"] for link in record["links"]],
            inputs=self._checked_inputs(record, inputs or {}),
            trail=self._checked_trail(record, trail),
        )
        self._enqueue(pending)
        return pending.future

    def _enqueue(self, item: _Pending | _Control) -> None:
        with self._close_lock:  # nothing may be queued behind the writer's stop
            if self._closed or self._failure is not None:
                raise LedgerUnavailableError(f"{self.store.location}: the ledger is closed"
                                             + (f" ({self._failure})" if self._failure else ""))
            self._queue.put(item)

    def append(
        self,
        record: Mapping[str, Any],
        inputs: Mapping[str, Any] | None = None,
        trail: bytes | Trail | None = None,
    ) -> Receipt:
        """Append ``record`` and return once it is durable (see :meth:`submit`)."""
        return self.submit(record, inputs, trail).result()

    def _checked_inputs(self, record: Mapping[str, Any], inputs: Mapping[str, Any]) -> list[tuple[str, np.ndarray]]:
        named = record["inputs"]
        checked = []
        for name, value in inputs.items():
            identity = named.get(name)
            if identity is None:
                raise RecordError(f"record {record['id']}: input {name!r} is not one of the record's inputs")
            if identity["kind"] != "tensor":
                continue  # sequences and maps are named by digest but not stored
            digest = identity["digest"]
            if time.monotonic() - self._known_inputs.get(digest, -_KNOWN_FOR) < _KNOWN_FOR:
                continue  # stored a moment ago: not hashed and sent again
            array = np.asarray(value)
            if tensor_digest(array) != digest:
                raise RecordError(f"record {record['id']}: input {name!r} is not the value the record names")
            checked.append((digest, array))
        return checked

    def _checked_trail(self, record: Mapping[str, Any], trail: bytes | Trail | None) -> tuple[str, int, bytes] | None:
        if trail is None:
            return None
        made = trail if isinstance(trail, Trail) else Trail.of(trail)
        if record["trail"] != made.run_digest:
            raise RecordError(f"record {record['id']}: trail has run digest {made.run_digest[:16]}..., "
                              f"the record names {str(record['trail'])[:16]}...")
        return made.run_digest, made.size, made.compressed

    def sign_tree_head(self) -> TreeHead | None:
        """Sign a tree head now, if records were appended since the last one; the latest head."""
        if self._writer is None or self.signer is None:
            return self.latest_tree_head()
        control = _Control(stop=False)
        self._enqueue(control)
        return control.future.result()

    def close(self) -> None:
        """Append what is queued, sign a final tree head, and close the store."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            if self._writer is not None and self._writer.is_alive():
                self._queue.put(_Control(stop=True))
        if self._writer is not None:
            self._writer.join()
        self.store.close()

    # -- the writer thread ----------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                timeout = None
                if self._tail_since is not None and self.signer is not None:
                    timeout = max(0.0, self._tail_since + self.head_interval - time.monotonic())
                try:
                    batch = [self._queue.get(timeout=timeout)]
                except queue.Empty:
                    batch = []
                while len(batch) < MAX_BATCH:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                controls = [item for item in batch if isinstance(item, _Control)]
                entries = [item for item in batch if isinstance(item, _Pending)]
                head = self._commit(entries, force_head=bool(controls))
                for control in controls:
                    control.future.set_result(head)
                if any(control.stop for control in controls):
                    return
        except BaseException as exc:  # the writer must never die silently: fail everyone waiting
            self._failure = exc
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                item.future.set_exception(LedgerUnavailableError(f"ledger writer stopped: {exc}"))

    def _commit(self, entries: list[_Pending], force_head: bool) -> TreeHead | None:
        """Append ``entries`` in one transaction (and a tree head when one is due); resolve their futures."""
        head: TreeHead | None = None
        try:
            with self.store.transaction() as tx:
                tree = self._current_tree(tx)
                accepted = self._accept(tx, entries)
                records, nodes = [], []
                for entry in accepted:
                    entry.index = tree.size
                    records.append((tree.size, entry.record_id, entry.leaf))
                    nodes.extend(tree.append(entry.leaf_hash))
                tx.insert_records(records)
                tx.insert_nodes(nodes)
                now_ms = int(time.time() * 1000)
                tx.put_inputs(self._input_rows(accepted, now_ms))
                tx.put_trails([(*entry.trail, now_ms) for entry in accepted if entry.trail is not None])
                if accepted and self._tail_since is None:
                    self._tail_since = time.monotonic()
                if self._head_due(tree.size, force_head):
                    head = self._sign(tx, tree)
        except BaseException as exc:
            self._tree = None  # reload from the store on the next commit
            error = exc if isinstance(exc, LedgerError) else LedgerUnavailableError(f"append failed: {exc}")
            for entry in entries:
                if not entry.future.done():
                    entry.future.set_exception(error)
            if not isinstance(exc, Exception):
                raise
            return None
        self._tree = tree
        if head is not None:
            self._head_size, self._tail_since = head.tree_size, None
        for entry in entries:
            if not entry.future.done():
                entry.future.set_result(Receipt(entry.record_id, entry.index, entry.leaf_hash.hex()))
        for digest, _ in (item for entry in accepted for item in entry.inputs):
            self._remember_input(digest)
        if head is not None and self.retention is not None and time.monotonic() - self._last_prune > 60:
            self._last_prune = time.monotonic()
            self.store.prune(int((time.time() - self.retention) * 1000))
            self._known_inputs.clear()
        return head or (self.latest_tree_head() if force_head else None)

    def _sign(self, tx: Transaction, tree: merkle.CompactRange) -> TreeHead | None:
        """Sign and store a head of ``tree``, chained to the latest stored head (read here: another
        writer may have signed one since)."""
        assert self.signer is not None
        latest = tx.latest_tree_head()
        if latest is not None and latest[0] >= tree.size:
            self._head_size, self._tail_since = latest[0], None
            return None
        previous = hashlib.sha256(latest[1]).hexdigest() if latest else None
        head = TreeHead.sign(self.signer, self.store.ledger_id, tree.size, tree.root(), previous)
        tx.insert_tree_head(head.tree_size, head.to_bytes())
        return head

    def _current_tree(self, tx: Transaction) -> merkle.CompactRange:
        """The tree's right border as stored now (reloaded when another writer appended meanwhile)."""
        size = tx.size()
        if self._tree is None or self._tree.size != size:
            self._tree = merkle.CompactRange.load(size, tx.read_nodes)
            latest = tx.latest_tree_head()
            self._head_size = latest[0] if latest else 0
            self._tail_since = time.monotonic() if size > self._head_size else None
        return merkle.CompactRange(self._tree.size, self._tree.hashes)

    def _accept(self, tx: Transaction, entries: list[_Pending]) -> list[_Pending]:
        """The entries whose id is new and whose links name earlier records; the others fail."""
        wanted = {entry.record_id for entry in entries} | {link for entry in entries for link in entry.links}
        known = tx.existing_ids(sorted(wanted)) if wanted else set()
        accepted = []
        for entry in entries:
            if entry.record_id in known:
                entry.future.set_exception(RecordError(f"record {entry.record_id}: the ledger already holds a record with this id"))
                continue
            missing = [link for link in entry.links if link not in known]
            if missing:
                entry.future.set_exception(RecordError(f"record {entry.record_id}: links to {missing[0]}, which is not an earlier record of this ledger"))
                continue
            known.add(entry.record_id)
            accepted.append(entry)
        return accepted

    def _input_rows(self, entries: list[_Pending], now_ms: int) -> list[tuple[str, str, str, bytes, int]]:
        rows: dict[str, tuple[str, str, str, bytes, int]] = {}
        for entry in entries:
            for digest, array in entry.inputs:
                if digest not in rows:
                    rows[digest] = (digest, *encode_tensor(array), now_ms)
        return list(rows.values())

    def _remember_input(self, digest: str) -> None:
        if len(self._known_inputs) >= _RECENT_INPUTS:
            self._known_inputs.clear()
        self._known_inputs[digest] = time.monotonic()

    def _head_due(self, size: int, force: bool) -> bool:
        if self.signer is None or size <= self._head_size:
            return False
        if force or size - self._head_size >= self.head_every:
            return True
        return self._tail_since is not None and time.monotonic() - self._tail_since >= self.head_interval

    # -- reading and proving ----------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Records in the ledger (durable ones)."""
        return self.store.size()

    @property
    def pending(self) -> int:
        """Appends queued and not yet durable (a gauge for metrics)."""
        return self._queue.qsize()

    def records(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
        """(leaf index, record) from leaf ``start`` on, in order, read a page at a time: e.g. to find,
        after a restart, the deferred records no replay links to yet."""
        for index, _, body in self.store.iter_records(stop, start=start):
            yield int(index), parse_record(row_bytes(body), f"{self.store.location}: record {index}")

    def record(self, record_id: str) -> tuple[int, dict[str, Any]]:
        """(leaf index, record) of the record with ``record_id``."""
        index, leaf = self._find(record_id)
        return index, parse_record(leaf, f"{self.store.location}: record {record_id}")

    def holding(self, record_ids: Iterable[str]) -> set[str]:
        """Which of ``record_ids`` the ledger holds as durable records (one query per 500 ids): how a
        job that names its records in advance finds, after an interruption, what it already appended."""
        return self.store.existing_ids([i for i in record_ids if isinstance(i, str)])

    def _find(self, record_id: str) -> tuple[int, bytes]:
        found = self.store.record_by_id(record_id) if isinstance(record_id, str) else None
        if found is None:
            raise NotInLedgerError(f"{self.store.location}: no record with id {str(record_id)[:64]!r}")
        return found

    def latest_tree_head(self) -> TreeHead | None:
        """The latest signed tree head in the store (its signature is not checked here)."""
        latest = self.store.latest_tree_head()
        return TreeHead.from_bytes(latest[1], f"{self.store.location}: tree head {latest[0]}") if latest else None

    def tree_head(self, tree_size: int | None = None) -> TreeHead:
        """The stored tree head of ``tree_size`` records (the latest when None)."""
        if tree_size is None:
            head = self.latest_tree_head()
            if head is None:
                raise NotCoveredError(f"{self.store.location}: no signed tree head yet")
            return head
        body = self.store.tree_head(tree_size)
        if body is None:
            raise NotInLedgerError(f"{self.store.location}: no tree head of size {tree_size}")
        head = TreeHead.from_bytes(body, f"{self.store.location}: tree head {tree_size}")
        if head.tree_size != tree_size:
            raise LedgerError(f"{self.store.location}: the row of tree head {tree_size} holds the head of "
                              f"{head.tree_size} (the store was altered)")
        return head

    def inclusion_proof(self, index: int, tree_size: int) -> list[bytes]:
        """The RFC 9162 inclusion proof of leaf ``index`` in the tree of ``tree_size`` records."""
        try:
            return merkle.inclusion_proof(index, tree_size, self.store.read_nodes)
        except (ValueError, LookupError) as exc:
            raise LedgerError(f"{self.store.location}: {exc}") from None

    def consistency_proof(self, first: int, second: int) -> list[bytes]:
        """The RFC 9162 consistency proof from the tree of ``first`` records to that of ``second``."""
        try:
            return merkle.consistency_proof(first, second, self.store.read_nodes)
        except (ValueError, LookupError) as exc:
            raise LedgerError(f"{self.store.location}: {exc}") from None

    def prove(self, record_id: str, tree_size: int | None = None) -> dict[str, Any]:
        """The inclusion-proof document of a record: the record, its proof, and the signed tree head
        (the latest, or the one of ``tree_size``) it is proven against; check with :func:`check_proof`."""
        index, leaf = self._find(record_id)
        head = self.tree_head(tree_size)
        if head.tree_size <= index:
            raise NotCoveredError(f"record {record_id} (leaf {index}) is newer than the tree head of size "
                                  f"{head.tree_size}; a later tree head will cover it")
        return inclusion_document(leaf, index, head, self.inclusion_proof(index, head.tree_size))

    def prove_consistency(self, first: int, second: int | None = None) -> dict[str, Any]:
        """The consistency-proof document between the stored tree heads of ``first`` and ``second``
        (the latest when None) records."""
        old, new = self.tree_head(first), self.tree_head(second)
        if old.tree_size > new.tree_size:
            raise LedgerError(f"tree head {old.tree_size} is newer than tree head {new.tree_size}")
        return consistency_document(old, new, self.consistency_proof(old.tree_size, new.tree_size))

    def input(self, digest: str) -> np.ndarray:
        """A stored input by its tensor digest (checked against it)."""
        row = self.store.input_row(digest)
        if row is None:
            raise LedgerError(f"{self.store.location}: input {digest[:16]}... is not stored "
                              "(never stored, or removed by retention)")
        return decode_tensor(digest, *row, where=f"{self.store.location}: input {digest[:16]}...")

    def inputs_of(self, record: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The stored inputs of a record, by name: what a replay feeds."""
        return {name: self.input(value["digest"]) for name, value in record["inputs"].items() if value["kind"] == "tensor"}

    def trail(self, run_digest: str) -> bytes:
        """A stored per-op trail (audit log bytes) by its run digest."""
        row = self.store.trail_row(run_digest)
        if row is None:
            raise NotInLedgerError(f"{self.store.location}: trail {run_digest[:16]}... is not stored "
                              "(never stored, or removed by retention)")
        return decompress_trail(row[1], row[0], f"{self.store.location}: trail {run_digest[:16]}...")

    def prune(self, older_than: float) -> tuple[int, int]:
        """Remove inputs and trails not used for ``older_than`` seconds; (inputs, trails) removed."""
        removed = self.store.prune(int((time.time() - older_than) * 1000))
        self._known_inputs.clear()
        return removed

    def verify(self, trusted: Iterable[str | os.PathLike[str] | Ed25519PublicKey],
               known: Iterable[TreeHead] = ()) -> VerifyReport:
        """Recompute every leaf, node and root and check every tree head, and the ``known`` ones
        held from earlier (see :func:`verify_store`)."""
        return verify_store(self.store, trusted_keys(trusted), known)
