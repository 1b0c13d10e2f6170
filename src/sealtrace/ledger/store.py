"""Where a ledger keeps its rows: SQLite (embedded, the default) or PostgreSQL, behind one interface.

Tables (the same in both; docs/ledger.md):

- ``meta(key, value)``: the store format and the ledger's id;
- ``records(idx, id, body)``: leaf ``idx`` of the tree is ``body``, the record's canonical JSON;
- ``nodes(pos, hash)``: the hash of every complete subtree, by :func:`merkle.node_position`;
- ``tree_heads(tree_size, body)``: signed tree heads, canonical JSON;
- ``inputs(digest, dtype, shape, data, last_used)`` and ``trails(digest, size, data, time)``: what
  replays need; the only rows retention removes.

A store is not trusted: verification recomputes every leaf, node and root from the records and checks
every tree head's signature. Appends happen in :meth:`SqlStore.transaction`, which holds the store's
write lock (SQLite ``BEGIN IMMEDIATE``, PostgreSQL ``LOCK TABLE``) so that writers in other processes
are serialized, and whose commit is durable (SQLite WAL with ``synchronous=FULL``; PostgreSQL's
default ``synchronous_commit``) before it returns.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import stat
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sealtrace.ledger.errors import LedgerError, LedgerUnavailableError
from sealtrace.ledger.records import MAX_RECORD_BYTES
from sealtrace.ledger.treehead import MAX_TREE_HEAD_BYTES
from sealtrace.limits import check_allocation

STORE_FORMAT = "sealtrace.ledger.store.v1"
SQLITE_MAGIC = b"SQLite format 3\x00"
_PAGE = 1000  # rows per query when streaming a table

_TABLES = {
    "meta": "key TEXT PRIMARY KEY, value TEXT NOT NULL",
    "records": "idx {int} PRIMARY KEY, id TEXT NOT NULL UNIQUE, body {blob} NOT NULL",
    "nodes": "pos {int} PRIMARY KEY, hash {blob} NOT NULL",
    "tree_heads": "tree_size {int} PRIMARY KEY, body {blob} NOT NULL",
    "inputs": "digest TEXT PRIMARY KEY, dtype TEXT NOT NULL, shape TEXT NOT NULL, data {blob} NOT NULL, "
              "last_used {int} NOT NULL",
    "trails": "digest TEXT PRIMARY KEY, size {int} NOT NULL, data {blob} NOT NULL, time {int} NOT NULL",
}
_INDEXES = ("CREATE INDEX IF NOT EXISTS inputs_last_used ON inputs (last_used)",
            "CREATE INDEX IF NOT EXISTS trails_time ON trails (time)")


class Transaction:
    """One append transaction: reads and writes on the connection that holds the write lock."""

    def __init__(self, store: SqlStore, connection: Any) -> None:
        self._store = store
        self._connection = connection

    def size(self) -> int:
        return self._store._size(self._connection)

    def read_nodes(self, positions: Sequence[int]) -> dict[int, bytes]:
        return self._store._read_nodes(self._connection, positions)

    def existing_ids(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are ids of stored records."""
        found: set[str] = set()
        for chunk in _chunks(list(ids)):
            rows = self._store._fetch(self._connection, f"SELECT id FROM records WHERE id IN ({_marks(chunk)})", chunk)
            found.update(row[0] for row in rows)
        return found

    def insert_records(self, rows: Sequence[tuple[int, str, bytes]]) -> None:
        self._store._many(self._connection, "INSERT INTO records (idx, id, body) VALUES (?, ?, ?)", rows)

    def insert_nodes(self, rows: Sequence[tuple[int, bytes]]) -> None:
        self._store._many(self._connection, "INSERT INTO nodes (pos, hash) VALUES (?, ?)", rows)

    def put_inputs(self, rows: Sequence[tuple[str, str, str, bytes, int]]) -> None:
        self._store._many(
            self._connection,
            "INSERT INTO inputs (digest, dtype, shape, data, last_used) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (digest) DO UPDATE SET last_used = excluded.last_used",
            rows,
        )

    def put_trails(self, rows: Sequence[tuple[str, int, bytes, int]]) -> None:
        self._store._many(
            self._connection,
            "INSERT INTO trails (digest, size, data, time) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (digest) DO UPDATE SET time = excluded.time",
            rows,
        )

    def insert_tree_head(self, tree_size: int, body: bytes) -> None:
        self._store._many(self._connection, "INSERT INTO tree_heads (tree_size, body) VALUES (?, ?)", [(tree_size, body)])

    def latest_tree_head(self) -> tuple[int, bytes] | None:
        return self._store._latest_tree_head(self._connection)


class SqlStore(ABC):
    """The SQL both stores share; subclasses say how to connect, lock and spell types."""

    placeholder = "?"
    int_type = "INTEGER"
    blob_type = "BLOB"

    def __init__(self, location: str, readonly: bool) -> None:
        self.location = location
        self.readonly = readonly
        self.ledger_id = ""
        self._write_lock = threading.Lock()  # one transaction at a time on the writer connection

    # -- what a dialect provides ---------------------------------------------------------------
    @abstractmethod
    @contextlib.contextmanager
    def _reader(self) -> Iterator[Any]:
        """A connection for reads (autocommit), safe to use from the calling thread."""

    @abstractmethod
    @contextlib.contextmanager
    def _writer(self) -> Iterator[Any]:
        """The writer's connection inside a transaction that holds the write lock; commits on exit."""

    @abstractmethod
    def close(self) -> None:
        """Close every connection."""

    # -- shared SQL ------------------------------------------------------------------------------
    def _sql(self, text: str) -> str:
        return text if self.placeholder == "?" else text.replace("?", self.placeholder)

    def _fetch(self, connection: Any, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(connection.execute(self._sql(sql), tuple(params)).fetchall())

    def _many(self, connection: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            connection.cursor().executemany(self._sql(sql), rows)

    # The tables of the connection's database (SQLite) or schema (PostgreSQL).
    tables_sql = "SELECT name FROM sqlite_master WHERE type = 'table'"
    whole_database = True  # a SQLite ledger is a file of its own; a PostgreSQL one may share a schema

    def _create(self, connection: Any) -> None:
        """Create the tables, unless the database already holds something that is not a ledger:
        the ledger's tables are never put into, or mixed with, someone else's."""
        tables = {row[0] for row in self._fetch(connection, self.tables_sql)}
        if tables & _TABLES.keys():
            meta = dict(self._fetch(connection, "SELECT key, value FROM meta")) if "meta" in tables else {}
            if meta.get("format") != STORE_FORMAT:
                raise LedgerError(f"{self.location}: has tables named like a ledger's ({', '.join(sorted(tables & _TABLES.keys()))}) "
                                  "but is not a sealtrace ledger; refusing to touch it")
        elif tables and self.whole_database:
            raise LedgerError(f"{self.location}: is a SQLite database of something else ({len(tables)} tables); "
                              "refusing to add a ledger to it")
        types = {"int": self.int_type, "blob": self.blob_type}
        for name, columns in _TABLES.items():
            connection.execute(f"CREATE TABLE IF NOT EXISTS {name} ({columns.format(**types)})")
        for sql in _INDEXES:
            connection.execute(sql)
        self._many(connection, "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                   [("format", STORE_FORMAT), ("ledger_id", uuid.uuid4().hex)])

    def _load_meta(self) -> None:
        try:
            with self._reader() as connection:
                meta = dict(self._fetch(connection, "SELECT key, value FROM meta"))
        except LedgerError as exc:
            raise LedgerError(f"{self.location}: not a sealtrace ledger ({str(exc).split(' (', 1)[-1]}") from None
        if meta.get("format") != STORE_FORMAT:
            raise LedgerError(f"{self.location}: store format {meta.get('format')!r} is not {STORE_FORMAT!r}")
        ledger_id = meta.get("ledger_id")
        if not (isinstance(ledger_id, str) and re.fullmatch(r"[0-9a-f]{32}", ledger_id)):
            raise LedgerError(f"{self.location}: ledger id {str(ledger_id)[:40]!r} is not 32 hex digits")
        self.ledger_id = ledger_id

    def _key(self, value: Any, what: str) -> int:
        """An integer key read back from the store (see :func:`is_integer_key`), refused otherwise."""
        if is_integer_key(value):
            return value
        raise LedgerError(f"{self.location}: {what} {str(value)[:40]!r} is not an integer (the store was altered)")

    def _size(self, connection: Any) -> int:
        (value,) = self._fetch(connection, "SELECT max(idx) FROM records")[0]
        return 0 if value is None else self._key(value, "record leaf index") + 1

    def _read_nodes(self, connection: Any, positions: Sequence[int]) -> dict[int, bytes]:
        found: dict[int, bytes] = {}
        for chunk in _chunks(list(positions)):
            for pos, value in self._fetch(connection, f"SELECT pos, hash FROM nodes WHERE pos IN ({_marks(chunk)})", chunk):
                found[self._key(pos, "node position")] = row_bytes(value)
        return found

    def _latest_tree_head(self, connection: Any) -> tuple[int, bytes] | None:
        rows = self._fetch(connection, f"SELECT tree_size, {_HEAD} FROM tree_heads ORDER BY tree_size DESC LIMIT 1")
        return (self._key(rows[0][0], "tree head size"), row_bytes(rows[0][1])) if rows else None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """An append transaction holding the write lock; durable once the ``with`` block exits."""
        if self.readonly:
            raise LedgerError(f"{self.location}: opened read-only")
        try:
            with self._write_lock, self._writer() as connection:
                yield Transaction(self, connection)
        except LedgerError:
            raise
        except (sqlite3.Error, OSError) as exc:
            raise LedgerUnavailableError(f"{self.location}: append failed, nothing kept ({_brief(exc)})") from None
        except Exception as exc:
            if type(exc).__module__.startswith("psycopg"):
                raise LedgerUnavailableError(f"{self.location}: append failed, nothing kept ({_brief(exc)})") from None
            raise

    # -- reads (any thread) ------------------------------------------------------------------------
    def size(self) -> int:
        """How many records the store holds (one more than the largest leaf index)."""
        with self._reader() as connection:
            return self._size(connection)

    def read_nodes(self, positions: Sequence[int]) -> dict[int, bytes]:
        """Stored complete-subtree hashes by position (positions not stored are left out)."""
        with self._reader() as connection:
            return self._read_nodes(connection, positions)

    def record_by_id(self, record_id: str) -> tuple[int, bytes] | None:
        """(leaf index, leaf bytes) of the record with this id."""
        with self._reader() as connection:
            rows = self._fetch(connection, f"SELECT idx, {_BODY} FROM records WHERE id = ?", (record_id,))
        return (self._key(rows[0][0], "record leaf index"), row_bytes(rows[0][1])) if rows else None

    def existing_ids(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are ids of stored records (read outside any append)."""
        with self._reader() as connection:
            return Transaction(self, connection).existing_ids(ids)

    def record_at(self, index: int) -> tuple[str, bytes] | None:
        """(id, leaf bytes) of leaf ``index``."""
        with self._reader() as connection:
            rows = self._fetch(connection, f"SELECT {_ID}, {_BODY} FROM records WHERE idx = ?", (index,))
        return (str(rows[0][0]), row_bytes(rows[0][1])) if rows else None

    def recent_records(self, count: int) -> list[tuple[int, str, bytes]]:
        """The last ``count`` records, newest first."""
        with self._reader() as connection:
            rows = self._fetch(connection, f"SELECT idx, {_ID}, {_BODY} FROM records ORDER BY idx DESC LIMIT ?", (count,))
        return [(self._key(i, "record leaf index"), str(r), row_bytes(b)) for i, r, b in rows]

    def iter_records(self, stop: int | None = None, start: int | None = None) -> Iterator[tuple[Any, Any, Any]]:
        """(idx, id, body) of every record (with ``start`` <= idx < ``stop``), in leaf order, a page at a time."""
        yield from self._rows("records", "idx", f"{_ID}, {_BODY}", stop, page=128, start=start)

    def iter_nodes(self, stop: int | None = None) -> Iterator[tuple[Any, Any]]:
        """(pos, hash) of every stored node (with pos < ``stop``), in position order."""
        yield from self._rows("nodes", "pos", _capped("hash", 64), stop)

    def iter_tree_heads(self) -> Iterator[tuple[Any, Any]]:
        """(tree_size, body) of every stored tree head, smallest first."""
        yield from self._rows("tree_heads", "tree_size", _HEAD, None)

    def _rows(self, table: str, key: str, columns: str, stop: int | None, page: int = _PAGE,
              start: int | None = None) -> Iterator[Any]:
        """Every row of ``table`` in ``key`` order, a page per query (keyset pagination: no long
        transaction, no server-side cursor), negative keys included: a verifier sees every row."""
        bound = "" if stop is None else f" AND {key} < {int(stop)}"
        low = "" if start is None else f" AND {key} >= {int(start)}"
        first = f"SELECT {key}, {columns} FROM {table} WHERE 1 = 1{low}{bound} ORDER BY {key} LIMIT {page}"
        after = f"SELECT {key}, {columns} FROM {table} WHERE {key} > ?{bound} ORDER BY {key} LIMIT {page}"
        rows: list[Any] = []
        while True:
            with self._reader() as connection:
                # The last key as read (not int(): a key of an altered row is reported by the caller).
                rows = self._fetch(connection, after, (rows[-1][0],)) if rows else self._fetch(connection, first)
            yield from rows
            if len(rows) < page:
                return

    def latest_tree_head(self) -> tuple[int, bytes] | None:
        """(tree size, body) of the largest stored tree head."""
        with self._reader() as connection:
            return self._latest_tree_head(connection)

    def tree_head(self, tree_size: int) -> bytes | None:
        """The stored tree head of exactly ``tree_size`` records."""
        with self._reader() as connection:
            rows = self._fetch(connection, f"SELECT {_HEAD} FROM tree_heads WHERE tree_size = ?", (tree_size,))
        return row_bytes(rows[0][0]) if rows else None

    def input_row(self, digest: str) -> tuple[str, str, bytes] | None:
        """(dtype, shape, data) of a stored input (its size checked against the memory budget first)."""
        return self._blob_row("inputs", f"{_capped('dtype', 64)}, {_capped('shape', 4096)}", digest)

    def trail_row(self, digest: str) -> tuple[int, bytes] | None:
        """(uncompressed size, compressed data) of a stored trail (its size checked first)."""
        return self._blob_row("trails", "size", digest)

    def _blob_row(self, table: str, columns: str, digest: str) -> tuple[Any, ...] | None:
        with self._reader() as connection:
            rows = self._fetch(connection, f"SELECT {columns}, length(data) FROM {table} WHERE digest = ?", (digest,))
            if not rows:
                return None
            *fields, length = rows[0]
            check_allocation(int(length or 0), f"{self.location}: {table} row {digest[:16]}...")
            data = self._fetch(connection, f"SELECT data FROM {table} WHERE digest = ?", (digest,))
        if not data or any(field is None for field in fields):
            return None
        return (*(f if isinstance(f, int) else str(f) for f in fields), row_bytes(data[0][0]))

    def iter_blob_digests(self, table: str) -> Iterator[str]:
        """The digest of every row of ``inputs`` or ``trails``, in digest order, a page at a time."""
        assert table in ("inputs", "trails")
        query = f"SELECT digest FROM {table} WHERE digest > ? ORDER BY digest LIMIT {_PAGE}"
        last = ""
        while True:
            with self._reader() as connection:
                rows = self._fetch(connection, query, (last,))
            yield from (str(row[0]) for row in rows)
            if len(rows) < _PAGE:
                return
            last = str(rows[-1][0])

    def integrity_problems(self) -> list[str]:
        """What the database engine itself finds damaged in the store (none for a server that
        manages its own pages: PostgreSQL checks those with data checksums, when enabled)."""
        return []

    def counts(self) -> dict[str, int]:
        """Rows per table."""
        with self._reader() as connection:
            return {
                table: int(self._fetch(connection, f"SELECT count(*) FROM {table}")[0][0])
                for table in ("records", "nodes", "tree_heads", "inputs", "trails")
            }

    def prune(self, before_ms: int) -> tuple[int, int]:
        """Remove inputs last used and trails stored before ``before_ms``; (inputs, trails) removed.

        Records, nodes and tree heads are never removed: the records keep the digests, so the tree
        still verifies, and a replay of a pruned record says what is missing.
        """
        removed = []
        with self.transaction() as tx:
            # Counted first: a pipelined PostgreSQL DELETE reports no row count.
            for table, column in (("inputs", "last_used"), ("trails", "time")):
                condition = f"FROM {table} WHERE {column} < ?"
                removed.append(int(self._fetch(tx._connection, f"SELECT count(*) {condition}", (before_ms,))[0][0]))
                self._many(tx._connection, f"DELETE {condition}", [(before_ms,)])
        return removed[0], removed[1]


def _capped(column: str, limit: int) -> str:
    """``column`` where it holds at most ``limit`` bytes, else NULL: a hostile row cannot make a reader
    allocate more than the format allows."""
    return f"CASE WHEN length({column}) <= {limit} THEN {column} END"


_ID = _capped("id", 64)
_BODY = _capped("body", MAX_RECORD_BYTES)
_HEAD = _capped("body", MAX_TREE_HEAD_BYTES)


def _marks(items: Sequence[Any]) -> str:
    return ", ".join("?" * len(items))


def _chunks(items: list[Any], size: int = 500) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def is_integer_key(value: Any) -> bool:
    """Whether a key read back from the store is an integer: in a store whose schema was altered,
    SQLite keeps NULL, text or a float there too, which is never converted with int()."""
    return isinstance(value, int) and not isinstance(value, bool)


def row_bytes(value: Any) -> bytes:
    # A tampered SQLite row may hold text where bytes belong (then simply wrong bytes), or more than
    # the format allows (read as NULL by the queries: no bytes).
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return repr(value).encode("ascii")


def _brief(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


class SqliteStore(SqlStore):
    """A ledger in one SQLite file: WAL journal, ``synchronous=FULL`` (a commit is on disk when it
    returns), one writer connection and one read connection per thread."""

    def __init__(self, path: str | os.PathLike[str], readonly: bool = False) -> None:
        super().__init__(os.fspath(path), readonly)
        self.path = Path(path)
        _check_sqlite_file(self.path, must_exist=readonly)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._write_connection: sqlite3.Connection | None = None
        try:
            if not readonly:
                connection = self._connect()
                connection.execute("BEGIN IMMEDIATE")
                try:
                    self._create(connection)
                    connection.execute("COMMIT")
                except BaseException:
                    connection.execute("ROLLBACK")
                    raise
                # After the check that the file is a ledger: nothing else's journal mode is changed.
                connection.execute("PRAGMA journal_mode=WAL")
                self._write_connection = connection
            self._load_meta()
        except BaseException:
            self.close()
            raise

    def _connect(self) -> sqlite3.Connection:
        try:
            if self.readonly:
                uri = f"file:{quote(str(self.path.resolve()))}?mode=ro"
                connection = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            else:
                connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            connection.execute("PRAGMA busy_timeout=30000")
            connection.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as exc:
            raise LedgerError(f"{self.location}: cannot open SQLite ledger ({_brief(exc)})") from None
        except UnicodeDecodeError:  # SQLite's own message quoted a damaged schema's bytes
            raise LedgerError(f"{self.location}: cannot open SQLite ledger (its schema is damaged)") from None
        with self._lock:
            self._connections.append(connection)
        return connection

    @contextlib.contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self._connect()
        try:
            yield connection
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"{self.location}: cannot read the ledger ({_brief(exc)})") from None
        except UnicodeDecodeError as exc:  # sqlite3 decodes TEXT as UTF-8; a tampered row may not be
            raise LedgerError(f"{self.location}: cannot read the ledger (a text value is not UTF-8: {exc.reason})") from None

    @contextlib.contextmanager
    def _writer(self) -> Iterator[sqlite3.Connection]:
        connection = self._write_connection
        assert connection is not None
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    def integrity_problems(self) -> list[str]:
        """SQLite's own check of every page, index and table of the file (``PRAGMA quick_check``):
        damage in pages a ledger check does not read (stored inputs, free space, indexes) shows too."""
        try:
            with self._reader() as connection:
                rows = self._fetch(connection, "PRAGMA quick_check(20)")
        except LedgerError as exc:
            return [str(exc)]
        found = [str(row[0]) for row in rows if str(row[0]) != "ok"]
        return [f"{self.location}: the SQLite file is damaged: {'; '.join(f[:200] for f in found)}"] if found else []

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()
        self._local = threading.local()


def _check_sqlite_file(path: Path, must_exist: bool) -> None:
    """Refuse a path that is not, and cannot become, a SQLite ledger (a directory, a device, a PDF)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        if must_exist:
            raise LedgerError(f"{path}: no such ledger") from None
        if not path.parent.is_dir():
            raise LedgerError(f"{path}: directory {path.parent} does not exist") from None
        return
    except OSError as exc:
        raise LedgerError(f"{path}: cannot open ledger ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise LedgerError(f"{path}: not a regular file, not a ledger")
    if info.st_size == 0 and not must_exist:
        return
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read ledger ({exc.strerror})") from None
    if head != SQLITE_MAGIC:
        raise LedgerError(f"{path}: not a SQLite file, not a ledger")


class PostgresStore(SqlStore):
    """A ledger in a PostgreSQL database (tables in the connection's schema): psycopg 3, a pool of
    read connections, one writer connection; appends lock ``records`` so writers serialize."""

    placeholder = "%s"
    int_type = "BIGINT"
    blob_type = "BYTEA"
    tables_sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
    whole_database = False

    def __init__(self, dsn: str, readonly: bool = False, pool_size: int = 8) -> None:
        super().__init__(_display_dsn(dsn), readonly)
        self._dsn = dsn
        try:
            import psycopg
            from psycopg_pool import ConnectionPool
        except ImportError:
            raise LedgerError(
                "a PostgreSQL ledger needs psycopg and psycopg-pool (pip install 'sealtrace[ledger]')"
            ) from None
        self._psycopg = psycopg
        self._write_connection: Any = None
        try:
            # A first connection of its own: a server that is not there fails here, at once, by name.
            self._write_connection = psycopg.connect(dsn, autocommit=False, connect_timeout=10)
            if readonly:
                self._write_connection.close()
                self._write_connection = None
            else:
                with self._write_connection.transaction():
                    self._write_connection.execute("SELECT pg_advisory_xact_lock(7412305)")  # serializes schema creation
                    self._create(self._write_connection)
            self._pool = ConnectionPool(
                dsn, min_size=1, max_size=pool_size, open=True, timeout=30,
                kwargs={"autocommit": True, "connect_timeout": 10},
                configure=self._configure_reader,
            )
            self._pool.wait(timeout=30)
        except (psycopg.Error, OSError) as exc:
            self.close()
            raise LedgerError(f"{self.location}: cannot open PostgreSQL ledger ({_brief(exc)})") from None
        except Exception as exc:
            self.close()
            if type(exc).__name__ == "PoolTimeout":
                raise LedgerError(f"{self.location}: cannot connect to PostgreSQL ({_brief(exc)})") from None
            raise
        try:
            self._load_meta()
        except BaseException:
            self.close()
            raise

    def _configure_reader(self, connection: Any) -> None:
        if self.readonly:
            connection.execute("SET default_transaction_read_only = on")

    @contextlib.contextmanager
    def _reader(self) -> Iterator[Any]:
        try:
            with self._pool.connection() as connection:
                yield connection
        except self._psycopg.Error as exc:
            raise LedgerError(f"{self.location}: cannot read the ledger ({_brief(exc)})") from None

    @contextlib.contextmanager
    def _writer(self) -> Iterator[Any]:
        connection = self._write_connection
        if connection is None or connection.closed or connection.broken:
            connection = self._write_connection = self._psycopg.connect(self._dsn, autocommit=False, connect_timeout=10)
        # Pipeline mode: statements go out without waiting for each answer; a batch is a few round trips.
        with connection.pipeline(), connection.transaction():
            # EXCLUSIVE blocks other writers until commit; readers (ACCESS SHARE) go on.
            connection.execute("LOCK TABLE records IN EXCLUSIVE MODE")
            yield connection

    def close(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.close()
        if self._write_connection is not None:
            self._write_connection.close()
            self._write_connection = None


def _display_dsn(dsn: str) -> str:
    """The DSN without its password, for messages."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", dsn)


def is_postgres(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def open_store(location: str | os.PathLike[str], readonly: bool = False) -> SqlStore:
    """The store at ``location``: a ``postgresql://`` DSN, else the path of a SQLite file."""
    text = os.fspath(location)
    if is_postgres(text):
        return PostgresStore(text, readonly)
    return SqliteStore(text, readonly)
