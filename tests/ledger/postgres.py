"""A throwaway PostgreSQL server: Debian's ``postgresql`` binaries (initdb, pg_ctl) in a temporary
directory, listening on 127.0.0.1 on a free port. The ledger tests use one per session and the ledger
benchmark one per run."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

PACKAGE_HINT = "install Debian's `postgresql` package (initdb and pg_ctl in /usr/lib/postgresql/*/bin)"


class PostgresUnavailableError(Exception):
    """No server can be started here; the message says why and what to install."""


def server_bindir() -> Path | None:
    """Where initdb and pg_ctl are: on PATH, else the newest /usr/lib/postgresql/*/bin."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[-3]))
    return Path(candidates[-1]).parent if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def temporary_postgres(fsync: bool = True) -> Iterator[str]:
    """Start a server, yield its DSN, stop and remove it. ``fsync=False`` trades crash safety for speed."""
    bindir = server_bindir()
    if bindir is None:
        raise PostgresUnavailableError(f"PostgreSQL server binaries not found: {PACKAGE_HINT}")
    run_as: list[str] = []
    base = Path(tempfile.mkdtemp(prefix="sealtrace-pg-"))
    try:
        if os.geteuid() == 0:  # initdb refuses root: run the server as the postgres user
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresUnavailableError("running as root and there is no 'postgres' user to run the server as") from None
            os.chown(base, user.pw_uid, user.pw_gid)
            run_as = ["runuser", "-u", "postgres", "--"]
        data, port = base / "data", _free_port()
        try:
            subprocess.run([*run_as, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                            "-E", "UTF8", "--no-sync"], check=True, capture_output=True, timeout=120)
            options = f"{'' if fsync else '-F '}-p {port} -k {base} -c listen_addresses=127.0.0.1"
            subprocess.run([*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-o", options,
                            "-w", "start"], check=True, capture_output=True, timeout=120)
        except subprocess.CalledProcessError as exc:
            log = (base / "log").read_text(errors="replace")[-2000:] if (base / "log").exists() else ""
            raise PostgresUnavailableError(f"PostgreSQL did not start: {exc.stderr.decode(errors='replace')[-2000:]} {log}") from None
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run([*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                           capture_output=True, timeout=60)
    finally:
        shutil.rmtree(base, ignore_errors=True)
