"""Ledger fixtures: every store test runs on SQLite and on a real PostgreSQL server started here.

The server is Debian's ``postgresql`` binaries (initdb, pg_ctl) in a temporary directory, one per test
session (per xdist worker), listening on 127.0.0.1 on a free port; each test gets its own schema.
Without the binaries the PostgreSQL half is skipped locally and fails in CI.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sealtrace.ledger import new_record
from sealtrace.signing import generate_keypair, load_private_key
from tests.ledger.postgres import PostgresUnavailableError, temporary_postgres


def _missing(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL needed in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A running PostgreSQL server for this session (fsync off: tests check what is committed, not what
    survives power loss); yields its base DSN."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        _missing("psycopg and psycopg-pool are not installed (pip install 'sealtrace[ledger]')")
    with contextlib.ExitStack() as stack:
        try:
            dsn = stack.enter_context(temporary_postgres(fsync=False))
        except PostgresUnavailableError as exc:
            _missing(str(exc))
        yield dsn


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty ledger location: a SQLite path, or a PostgreSQL DSN with a schema of its own."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.db")
    base = request.getfixturevalue("postgres_server")
    import psycopg

    schema = f"t_{uuid.uuid4().hex}"
    with psycopg.connect(base, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
    return f"{base}?options=-csearch_path%3D{schema}"


def execute_sql(location: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on a store behind the ledger's back (what a tamperer does)."""
    if location.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(location, autocommit=True) as connection:
            cursor = connection.execute(sql.replace("?", "%s"), params)
            return list(cursor.fetchall()) if cursor.description else []
    connection = sqlite3.connect(location, isolation_level=None)
    try:
        cursor = connection.execute(sql, params)
        return list(cursor.fetchall())
    finally:
        connection.close()


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(private, public) PEM paths of a signing key."""
    private, public = generate_keypair(tmp_path_factory.mktemp("keys") / "ledger.pem")
    return private, public


@pytest.fixture(scope="session")
def signer(keys: tuple[Path, Path]) -> Ed25519PrivateKey:
    return load_private_key(keys[0])


def make_record(i: int = 0, **overrides: Any) -> dict[str, Any]:
    """A small inference record whose output depends on ``i``."""
    fields: dict[str, Any] = {
        "model_name": "tiny",
        "plan_digest": "ab" * 32,
        "container_digest": "cd" * 32,
        "backend": "onnxruntime",
        "backend_version": "1.23.2",
        "inputs": {"x": np.arange(4, dtype=np.float32) + i},
        "outputs": {"y": np.float32([i])},
        "principal": "alice",
    }
    fields.update(overrides)
    return new_record(**fields)


RecordFactory = Callable[..., dict[str, Any]]
