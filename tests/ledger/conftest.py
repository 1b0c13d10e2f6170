"""Ledger fixtures: every store test runs on SQLite and on a real PostgreSQL server started here.

The server is Debian's ``postgresql`` binaries (initdb, pg_ctl) in a temporary directory, one per test
session (per xdist worker), listening on 127.0.0.1 on a free port; each test gets its own schema.
Without the binaries the PostgreSQL half is skipped locally and fails in CI.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sealtrace.ledger import new_record
from sealtrace.signing import generate_keypair, load_private_key

PG_PACKAGE_HINT = "install Debian's `postgresql` package (initdb and pg_ctl in /usr/lib/postgresql/*/bin)"


def _pg_bindir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[-3]))
    return Path(candidates[-1]).parent if candidates else None


def _missing(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL needed in CI: {reason}")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A running PostgreSQL server for this session; yields its base DSN."""
    bindir = _pg_bindir()
    if bindir is None:
        _missing(f"PostgreSQL server binaries not found: {PG_PACKAGE_HINT}")
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        _missing("psycopg and psycopg-pool are not installed (pip install 'sealtrace[ledger]')")
    run_as: list[str] = []
    base = Path(tempfile.mkdtemp(prefix="sealtrace-pg-"))
    if os.geteuid() == 0:  # initdb refuses root: run the server as the postgres user
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(base)
            _missing("running as root and there is no 'postgres' user to run the server as")
        os.chown(base, user.pw_uid, user.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    data, port = base / "data", _free_port()

    def run(*args: str) -> None:
        subprocess.run([*run_as, *args], check=True, capture_output=True, timeout=120)

    try:
        run(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        # fsync off: tests check what is committed, not what survives power loss (benchmarks keep it on).
        options = f"-F -p {port} -k {base} -c listen_addresses=127.0.0.1"
        run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-o", options, "-w", "start")
    except subprocess.CalledProcessError as exc:
        log = (base / "log").read_text(errors="replace")[-2000:] if (base / "log").exists() else ""
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"PostgreSQL did not start: {exc.stderr.decode(errors='replace')[-2000:]} {log}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


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
