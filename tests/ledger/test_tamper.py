"""Tampering with a store behind the ledger's back, on both stores: every edit, deletion, reordering or
insertion of a row (records, nodes, tree heads), and a record rewritten with the whole tree recomputed
(without the key), is caught by ``verify`` and by a client who checks proofs against a tree head it
holds from earlier."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sealtrace.digest import canonical_json
from sealtrace.ledger import (
    Inclusion,
    Ledger,
    LedgerCheckError,
    LedgerError,
    TreeHead,
    check_proof,
    merkle,
    trusted_keys,
)
from tests.ledger.conftest import execute_sql, make_record

SIZE = 12  # tree heads at 4, 8 and 12 records


@pytest.fixture
def ledger_with_evidence(location: str, signer: Ed25519PrivateKey) -> tuple[str, list[dict[str, Any]]]:
    """A ledger of 12 records and what a client kept: a proof of every record against the latest tree
    head, and proofs against the two earlier ones."""
    with Ledger.open(location, signer=signer, head_every=4) as ledger:
        ids = [ledger.append(make_record(i)).record_id for i in range(SIZE)]
        heads = [size for (size,) in execute_sql(location, "SELECT tree_size FROM tree_heads ORDER BY tree_size")]
        assert heads == [4, 8, 12]
        evidence = [ledger.prove(record_id) for record_id in ids]
        evidence += [ledger.prove(ids[2], tree_size=4), ledger.prove(ids[6], tree_size=8)]
    return location, evidence


def _body(location: str, table: str, key: str, value: int, column: str = "body") -> bytes:
    return bytes(execute_sql(location, f"SELECT {column} FROM {table} WHERE {key} = ?", (value,))[0][0])


def _set(location: str, table: str, key: str, value: int, data: bytes, column: str = "body") -> None:
    execute_sql(location, f"UPDATE {table} SET {column} = ? WHERE {key} = ?", (data, value))


def _flip(data: bytes, at: int = 0) -> bytes:
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]


def _other_record(location: str, idx: int) -> bytes:
    """A valid, canonical record in place of record ``idx``: same id, another principal."""
    record = json.loads(_body(location, "records", "idx", idx))
    record["principal"] = "mallory"
    return canonical_json(record)


def _swap(location: str, table: str, key: str, a: int, b: int, columns: tuple[str, ...]) -> None:
    rows = {k: execute_sql(location, f"SELECT {', '.join(columns)} FROM {table} WHERE {key} = ?", (k,))[0] for k in (a, b)}
    execute_sql(location, f"DELETE FROM {table} WHERE {key} IN (?, ?)", (a, b))
    marks = ", ".join("?" * (len(columns) + 1))
    for k, other in ((a, b), (b, a)):
        execute_sql(location, f"INSERT INTO {table} ({key}, {', '.join(columns)}) VALUES ({marks})", (k, *rows[other]))


def _recompute_tree(location: str) -> None:
    """What a tamperer without the key can do after rewriting records: make the nodes agree again."""
    tree = merkle.CompactRange()
    execute_sql(location, "DELETE FROM nodes")
    for (body,) in execute_sql(location, "SELECT body FROM records ORDER BY idx"):
        for pos, value in tree.append(merkle.leaf_hash(bytes(body))):
            execute_sql(location, "INSERT INTO nodes (pos, hash) VALUES (?, ?)", (pos, value))


def _forged_head(location: str, size: int) -> bytes:
    """A tree head of the right form, signed by a key nobody trusts."""
    head = TreeHead.from_bytes(_body(location, "tree_heads", "tree_size", size), "head")
    forged = TreeHead.sign(Ed25519PrivateKey.generate(), head.ledger, head.tree_size, head.root_hash, head.previous)
    return forged.to_bytes()


def _insert_in_the_middle(location: str) -> None:
    for idx in range(SIZE - 1, 4, -1):  # shift records 5.. up by one, then put a new record at 5
        execute_sql(location, "UPDATE records SET idx = ? WHERE idx = ?", (idx + 1, idx))
    extra = make_record(99)
    execute_sql(location, "INSERT INTO records (idx, id, body) VALUES (?, ?, ?)", (5, extra["id"], canonical_json(extra)))


Tamper = Callable[[str], None]
TAMPERS: dict[str, Tamper] = {
    "edit a record": lambda loc: _set(loc, "records", "idx", 5, _other_record(loc, 5)),
    "flip a bit of a record": lambda loc: _set(loc, "records", "idx", 5, _flip(_body(loc, "records", "idx", 5), 40)),
    "edit a record's id column": lambda loc: execute_sql(loc, "UPDATE records SET id = ? WHERE idx = 3", ("e" * 32,)),
    "delete a record": lambda loc: execute_sql(loc, "DELETE FROM records WHERE idx = 5"),
    "delete the last record": lambda loc: execute_sql(loc, f"DELETE FROM records WHERE idx = {SIZE - 1}"),
    "reorder two records": lambda loc: _swap(loc, "records", "idx", 4, 5, ("id", "body")),
    "insert a record at the end": lambda loc: execute_sql(
        loc, "INSERT INTO records (idx, id, body) VALUES (?, ?, ?)",
        (SIZE, make_record(50)["id"], canonical_json(make_record(50)))),
    "insert a record before the first": lambda loc: execute_sql(
        loc, "INSERT INTO records (idx, id, body) VALUES (?, ?, ?)",
        (-1, make_record(51)["id"], canonical_json(make_record(51)))),
    "insert a record in the middle": _insert_in_the_middle,
    "make a record huge": lambda loc: _set(loc, "records", "idx", 5, b"{" + b" " * (3 << 20) + b"}"),
    "make a tree head huge": lambda loc: _set(loc, "tree_heads", "tree_size", 8, b" " * (1 << 20)),
    "make a node huge": lambda loc: _set(loc, "nodes", "pos", 3, b"\x00" * (1 << 20), "hash"),
    "edit a node": lambda loc: _set(loc, "nodes", "pos", 3, _flip(_body(loc, "nodes", "pos", 3, "hash")), "hash"),
    "delete a node": lambda loc: execute_sql(loc, "DELETE FROM nodes WHERE pos = 3"),
    "reorder two nodes": lambda loc: _swap(loc, "nodes", "pos", 0, 1, ("hash",)),
    "insert a node": lambda loc: execute_sql(loc, "INSERT INTO nodes (pos, hash) VALUES (?, ?)",
                                             (merkle.node_count(SIZE) + 3, b"\x00" * 32)),
    "edit a tree head": lambda loc: _set(loc, "tree_heads", "tree_size", 8,
                                         _body(loc, "tree_heads", "tree_size", 8).replace(b'"timestamp":1', b'"timestamp":2')),
    "forge a tree head": lambda loc: _set(loc, "tree_heads", "tree_size", 8, _forged_head(loc, 8)),
    "delete a middle tree head": lambda loc: execute_sql(loc, "DELETE FROM tree_heads WHERE tree_size = 8"),
    "delete the first tree head": lambda loc: execute_sql(loc, "DELETE FROM tree_heads WHERE tree_size = 4"),
    "delete the latest tree head": lambda loc: execute_sql(loc, "DELETE FROM tree_heads WHERE tree_size = 12"),
    "reorder two tree heads": lambda loc: _swap(loc, "tree_heads", "tree_size", 4, 8, ("body",)),
    "insert a forged tree head": lambda loc: execute_sql(
        loc, "INSERT INTO tree_heads (tree_size, body) VALUES (?, ?)", (6, _forged_head(loc, 8))),
    "insert a copied tree head": lambda loc: execute_sql(
        loc, "INSERT INTO tree_heads (tree_size, body) VALUES (?, ?)", (6, _body(loc, "tree_heads", "tree_size", 8))),
    "change the ledger id": lambda loc: execute_sql(loc, "UPDATE meta SET value = ? WHERE key = 'ledger_id'", ("0" * 32,)),
    "rewrite a record and recompute the tree": lambda loc: (
        _set(loc, "records", "idx", 5, _other_record(loc, 5)), _recompute_tree(loc)),
    "rewrite a record, recompute the tree, drop the tree heads after it": lambda loc: (
        _set(loc, "records", "idx", 5, _other_record(loc, 5)), _recompute_tree(loc),
        execute_sql(loc, "DELETE FROM tree_heads WHERE tree_size > 4")),
    "cut the ledger back to an earlier tree head": lambda loc: (
        execute_sql(loc, "DELETE FROM records WHERE idx >= 8"),
        execute_sql(loc, f"DELETE FROM nodes WHERE pos >= {merkle.node_count(8)}"),
        execute_sql(loc, "DELETE FROM tree_heads WHERE tree_size > 8")),
}
# What the store alone cannot show: the newest signatures removed, with or without what they signed. The
# records left are consistent (those no head signs are reported as unsigned); a verifier holding a later
# tree head sees the rest. Certificate Transparency has the same limit, hence its monitors and witnesses.
ONLY_WITH_HELD_HEADS = {
    "delete the latest tree head",
    "rewrite a record, recompute the tree, drop the tree heads after it",
    "cut the ledger back to an earlier tree head",
}


# Rows added beside what was signed change nothing a client holds (its proofs still hold, rightly);
# verify catches them.
CLIENT_UNAFFECTED = {
    "insert a record at the end", "insert a record before the first", "insert a node", "insert a forged tree head",
    "insert a copied tree head", "change the ledger id",
}


def _client_notices(location: str, evidence: list[dict[str, Any]], public: Path) -> bool:
    """Does a client holding ``evidence`` (earlier proofs) see that the ledger no longer stands by them?"""
    trusted = trusted_keys([public])
    try:
        with Ledger.open(location, readonly=True) as ledger:
            for document in evidence:
                held = check_proof(document, trusted)
                assert isinstance(held, Inclusion)
                fresh = check_proof(ledger.prove(held.record["id"], tree_size=held.tree_head.tree_size), trusted)
                assert isinstance(fresh, Inclusion)
                if (fresh.tree_head, fresh.index, fresh.record) != (held.tree_head, held.index, held.record):
                    return True
                latest = ledger.tree_head()
                proof = ledger.consistency_proof(held.tree_head.tree_size, latest.tree_size)
                if latest.problem(trusted) or not merkle.verify_consistency(
                    held.tree_head.tree_size, latest.tree_size, held.tree_head.root_hash, latest.root_hash, proof
                ):
                    return True
    except (LedgerError, LedgerCheckError):
        return True
    return False


def test_an_untouched_ledger_verifies_and_keeps_its_proofs(ledger_with_evidence, keys) -> None:
    location, evidence = ledger_with_evidence
    with Ledger.open(location, readonly=True) as ledger:
        held = [TreeHead.from_json(doc["tree_head"], "held") for doc in evidence]
        report = ledger.verify([keys[1]], known=held)
    assert report.ok and report.size == SIZE and report.unsigned == 0, report.problems
    assert not _client_notices(location, evidence, keys[1])


@pytest.mark.parametrize("tamper", list(TAMPERS), ids=lambda name: name.replace(" ", "-"))
def test_tampering_is_caught(tamper: str, ledger_with_evidence, keys) -> None:
    location, evidence = ledger_with_evidence
    TAMPERS[tamper](location)
    held = [TreeHead.from_json(doc["tree_head"], "held") for doc in evidence]
    with Ledger.open(location, readonly=True) as ledger:
        alone = ledger.verify([keys[1]])
        with_held = ledger.verify([keys[1]], known=held)
    assert not with_held.ok
    if tamper == "cut the ledger back to an earlier tree head":
        assert alone.ok  # a shorter, consistent ledger: truncation shows only against a later tree head
    elif tamper in ONLY_WITH_HELD_HEADS:
        assert alone.unsigned > 0  # the store alone shows records nobody signed
    else:
        assert not alone.ok, f"verify missed: {tamper}"
    if tamper not in CLIENT_UNAFFECTED:
        assert _client_notices(location, evidence, keys[1]), f"a client holding earlier proofs missed: {tamper}"


def test_a_damaged_stored_input_is_caught(location: str, signer: Ed25519PrivateKey) -> None:
    # Inputs are what a replay runs: verify re-hashes each against the digest it is stored under.
    with Ledger.open(location, signer=signer, head_every=1) as ledger:
        ledger.append(make_record(0), inputs={"x": np.arange(4, dtype=np.float32)})  # the record's own x
        assert ledger.verify([signer.public_key()]).ok
    (digest, data), = execute_sql(location, "SELECT digest, data FROM inputs")
    execute_sql(location, "UPDATE inputs SET data = ? WHERE digest = ?", (_flip(bytes(data)), digest))
    with Ledger.open(location, readonly=True) as ledger:
        report = ledger.verify([signer.public_key()])
    assert not report.ok and any("does not match its digest" in p for p in report.problems), report.problems


def test_a_sqlite_file_damaged_where_no_row_is_read_is_caught(tmp_path: Path, signer: Ed25519PrivateKey) -> None:
    # Found by fuzzing: bytes shifted in pages that hold only stored inputs left every record, node
    # and tree head readable, and verify passed a file SQLite itself calls malformed.
    location = str(tmp_path / "ledger.db")
    with Ledger.open(location, signer=signer, head_every=1) as ledger:
        for i in range(3):
            x = np.full(2048, i, np.float32)
            ledger.append(make_record(i, inputs={"x": x}), inputs={"x": x})
    data = bytearray(Path(location).read_bytes())
    last_page = len(data) - 4096
    data[last_page : last_page + 16] = b"\xff" * 16  # the b-tree page header of the last page
    Path(location).write_bytes(bytes(data))
    with Ledger.open(location, readonly=True) as ledger:
        report = ledger.verify([signer.public_key()])
    assert not report.ok and any("damaged" in p for p in report.problems), report.problems


def _sqlite_ledger(tmp_path: Path, signer: Ed25519PrivateKey) -> str:
    location = str(tmp_path / "ledger.db")
    with Ledger.open(location, signer=signer, head_every=1) as ledger:
        for i in range(3):
            ledger.append(make_record(i))
    return location


def test_rows_whose_keys_are_not_integers_are_reported(tmp_path: Path, signer: Ed25519PrivateKey) -> None:
    # Found by fuzzing (exit 3): a damaged schema let a node, record or tree head row carry NULL or
    # text where its integer key belongs, and verify converted it with int().
    import contextlib
    import sqlite3

    location = _sqlite_ledger(tmp_path, signer)
    with contextlib.closing(sqlite3.connect(location)) as db:
        for table in ("nodes", "records", "tree_heads"):
            columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
            db.execute(f"ALTER TABLE {table} RENAME TO old_{table}")
            db.execute(f"CREATE TABLE {table} ({', '.join(columns)})")  # no types, no primary key
            db.execute(f"INSERT INTO {table} SELECT * FROM old_{table}")
            db.execute(f"DROP TABLE old_{table}")
        db.execute("UPDATE nodes SET pos = NULL WHERE pos = 0")
        db.execute("UPDATE records SET idx = 0.5 WHERE idx = 0")
        db.execute("UPDATE tree_heads SET tree_size = 2.5 WHERE tree_size = 2")
        db.commit()
    with Ledger.open(location, readonly=True) as ledger:
        report = ledger.verify([signer.public_key()])
    problems = "\n".join(report.problems)
    assert not report.ok
    for expected in ("node row with position 'None'", "record row with leaf index '0.5'", "tree head row with size '2.5'"):
        assert expected in problems, problems
    # Text sorts above every number in SQLite: the store's size itself is then no integer.
    execute_sql(location, "UPDATE records SET idx = 'one' WHERE idx = 1")
    with Ledger.open(location, readonly=True) as ledger:
        report = ledger.verify([signer.public_key()])
    assert not report.ok and any("'one' is not an integer" in p for p in report.problems), report.problems

