"""The ledger on both stores: durable appends, group commit, tree heads, proofs, stored inputs and trails."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from sealtrace.ledger import (
    Consistency,
    Inclusion,
    Ledger,
    LedgerError,
    NotCoveredError,
    RecordError,
    check_proof,
    replay_link,
    trusted_keys,
)
from sealtrace.ledger.values import trail_run_digest
from tests.ledger.conftest import execute_sql, make_record


def _verified(location: str, public: Path) -> None:
    with Ledger.open(location, readonly=True) as ledger:
        report = ledger.verify([public])
    assert report.ok, report.problems


def test_appends_are_durable_and_in_leaf_order(location: str, signer, keys) -> None:
    with Ledger.open(location, signer=signer) as ledger:
        receipts = [ledger.append(make_record(i)) for i in range(5)]
        assert [r.index for r in receipts] == list(range(5))
        # Durable means visible to any other reader of the store once append returned.
        assert execute_sql(location, "SELECT count(*) FROM records")[0][0] == 5
    with Ledger.open(location, readonly=True) as ledger:
        assert ledger.size == 5
        index, record = ledger.record(receipts[3].record_id)
        assert index == 3 and record["outputs"]["y"] == make_record(3)["outputs"]["y"] | {}
        report = ledger.verify([keys[1]])
    assert report.ok and report.size == 5 and report.latest is not None and report.latest.tree_size == 5


def test_concurrent_appends_are_group_committed(location: str, signer, keys) -> None:
    records = [make_record(i) for i in range(300)]
    with Ledger.open(location, signer=signer, head_every=40) as ledger, ThreadPoolExecutor(32) as pool:
        receipts = list(pool.map(ledger.append, records))
    assert sorted(r.index for r in receipts) == list(range(300))
    heads = execute_sql(location, "SELECT count(*) FROM tree_heads")[0][0]
    assert 2 <= heads <= 300 // 40 + 2  # heads come at batch ends, at least every 40 records, and at close
    _verified(location, keys[1])


def test_tree_heads_come_every_interval_and_on_close(location: str, signer) -> None:
    with Ledger.open(location, signer=signer, head_every=1000, head_interval=0.05) as ledger:
        ledger.append(make_record(0))
        deadline = time.monotonic() + 10
        while ledger.latest_tree_head() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        head = ledger.latest_tree_head()
        assert head is not None and head.tree_size == 1
        ledger.append(make_record(1))
        ledger.append(make_record(2))
    with Ledger.open(location, readonly=True) as ledger:
        head = ledger.latest_tree_head()
        assert head is not None and head.tree_size == 3


def test_reopening_signs_what_a_crash_left_unsigned(location: str, signer, keys) -> None:
    with Ledger.open(location) as ledger:  # no key: records, no tree heads
        ledger.append(make_record(0))
        ledger.append(make_record(1))
        assert ledger.latest_tree_head() is None
        with pytest.raises(NotCoveredError):
            ledger.prove(ledger.store.record_at(0)[0])  # type: ignore[index]
    with Ledger.open(location, readonly=True) as ledger:
        assert not ledger.verify([keys[1]]).ok  # nothing is signed
    with Ledger.open(location, signer=signer) as ledger:
        head = ledger.latest_tree_head()
        assert head is not None and head.tree_size == 2
    _verified(location, keys[1])


def test_two_writers_on_one_store_stay_one_tree(location: str, signer, keys) -> None:
    with Ledger.open(location, signer=signer) as a, Ledger.open(location, signer=signer) as b:
        for i in range(10):
            (a if i % 3 else b).append(make_record(i))
    _verified(location, keys[1])


def test_record_errors_fail_that_append_only(location: str, signer) -> None:
    with Ledger.open(location, signer=signer) as ledger:
        first = make_record(0)
        ledger.append(first)
        with pytest.raises(RecordError, match="already holds"):
            ledger.append(first)
        with pytest.raises(RecordError, match="not an earlier record"):
            ledger.append(make_record(1, kind="replay", links=[replay_link("0" * 32, "identical")]))
        with pytest.raises(RecordError, match="model/plan_digest"):
            ledger.append({**make_record(2), "model": {"name": "m", "container_digest": None, "plan_digest": "x"}})
        replay = make_record(0, kind="replay", audit="full", backend="reference",
                             links=[replay_link(first["id"], "diverged", "max abs error 3e-2")])
        assert ledger.append(replay).index == 1


def test_inputs_and_trails_are_stored_for_replays(location: str, signer, tmp_path: Path) -> None:
    feeds = {
        "x": np.arange(12, dtype=np.float32).reshape(3, 4),
        "ids": np.array([[1, 2, 3]], dtype=np.int64),
        "text": np.array(["héllo", "", "wörld"], dtype=object),
        "mask": np.array([True, False]),
    }
    log = (b'{"type":"header"}\n{"type":"step"}\n'
           b'{"chain_head":"' + b"7" * 64 + b'","type":"footer"}\n')
    record = make_record(0, inputs=feeds, audit="full", trail=trail_run_digest(log))
    with Ledger.open(location, signer=signer) as ledger:
        ledger.append(record, inputs=feeds, trail=log)
        ledger.append(make_record(1, inputs=feeds), inputs=feeds)  # the same inputs: stored once
        stored = ledger.inputs_of(ledger.record(record["id"])[1])
        assert stored.keys() == feeds.keys()
        for name, value in feeds.items():
            assert stored[name].shape == value.shape and stored[name].tolist() == value.tolist()
        assert ledger.trail("7" * 64) == log
        assert ledger.store.counts()["inputs"] == 4
        with pytest.raises(RecordError, match="not the value the record names"):
            ledger.append(make_record(2), inputs={"x": np.zeros(4, np.float32)})
        with pytest.raises(RecordError, match="run digest"):
            ledger.append(make_record(3), trail=log)


def test_retention_removes_inputs_and_trails_and_nothing_else(location: str, signer, keys) -> None:
    feeds = {"x": np.arange(4, dtype=np.float32)}
    log = b'{"chain_head":"' + b"5" * 64 + b'","type":"footer"}\n'
    with Ledger.open(location, signer=signer) as ledger:
        record = make_record(0, inputs=feeds, trail="5" * 64)
        ledger.append(record, inputs=feeds, trail=log)
        assert ledger.prune(older_than=3600) == (0, 0)
        time.sleep(0.01)
        assert ledger.prune(older_than=0) == (1, 1)
        with pytest.raises(LedgerError, match="removed by retention"):
            ledger.inputs_of(record)
        with pytest.raises(LedgerError, match="removed by retention"):
            ledger.trail("5" * 64)
        ledger.append(make_record(1, inputs=feeds), inputs=feeds)  # stored again after pruning
        assert ledger.input(record["inputs"]["x"]["digest"]).tolist() == [0, 1, 2, 3]
    _verified(location, keys[1])


def test_proofs_check_with_the_public_key_and_nothing_else(location: str, signer, keys) -> None:
    with Ledger.open(location, signer=signer, head_every=3) as ledger:
        receipts = [ledger.append(make_record(i)) for i in range(7)]
        early = ledger.sign_tree_head()
        receipts += [ledger.append(make_record(i)) for i in range(7, 12)]
        ledger.sign_tree_head()
        trusted = trusted_keys([keys[1]])
        for receipt in receipts:
            checked = check_proof(ledger.prove(receipt.record_id), trusted)
            assert isinstance(checked, Inclusion) and checked.index == receipt.index
            assert checked.record["id"] == receipt.record_id and checked.tree_head.tree_size == 12
        assert early is not None and early.tree_size == 7
        old = check_proof(ledger.prove(receipts[2].record_id, tree_size=7), trusted)
        assert isinstance(old, Inclusion) and old.tree_head == early
        with pytest.raises(NotCoveredError):
            ledger.prove(receipts[9].record_id, tree_size=7)
        consistency = check_proof(ledger.prove_consistency(7), trusted)
        assert isinstance(consistency, Consistency) and consistency.second.tree_size == 12
        with pytest.raises(LedgerError, match="no record"):
            ledger.prove("f" * 32)
        with pytest.raises(LedgerError, match="no tree head of size 5"):
            ledger.prove_consistency(5)


def test_a_read_only_ledger_refuses_appends(location: str, signer) -> None:
    Ledger.open(location, signer=signer).close()
    with Ledger.open(location, readonly=True) as ledger, pytest.raises(LedgerError, match="read-only"):
        ledger.append(make_record(0))


def test_a_closed_ledger_refuses_appends(location: str, signer) -> None:
    ledger = Ledger.open(location, signer=signer)
    ledger.close()
    with pytest.raises(LedgerError, match="closed"):
        ledger.append(make_record(0))
    with pytest.raises(LedgerError, match="closed"):
        ledger.sign_tree_head()
    ledger.close()  # twice is fine


def test_a_failed_commit_keeps_nothing_and_the_next_one_works(location: str, signer, keys, monkeypatch) -> None:
    from sealtrace.ledger import LedgerUnavailableError
    from sealtrace.ledger.store import Transaction

    original = Transaction.insert_nodes
    failures = iter([True])

    def failing(self: Transaction, rows: list[tuple[int, bytes]]) -> None:
        original(self, rows)  # the rows reach the store, then the commit fails: all must roll back
        if next(failures, False):
            raise OSError("disk full")

    with Ledger.open(location, signer=signer) as ledger:
        ledger.append(make_record(0))
        monkeypatch.setattr(Transaction, "insert_nodes", failing)
        with pytest.raises(LedgerUnavailableError, match="disk full"):
            ledger.append(make_record(1))
        assert ledger.size == 1
        assert ledger.append(make_record(2)).index == 1
    _verified(location, keys[1])


def test_trails_are_stored_compressed(location: str, signer) -> None:
    import zlib

    log = b"".join(b'{"type":"step","seq":%d}\n' % i for i in range(500)) + b'{"chain_head":"' + b"6" * 64 + b'","type":"footer"}\n'
    with Ledger.open(location, signer=signer) as ledger:
        ledger.append(make_record(0, trail="6" * 64, audit="full"), trail=log)
    size, data = execute_sql(location, "SELECT size, data FROM trails")[0]
    assert size == len(log) and len(bytes(data)) < len(log) // 5 and zlib.decompress(bytes(data)) == log


def test_stored_inputs_are_read_within_the_memory_budget(location: str, signer) -> None:
    from sealtrace.limits import BudgetExceededError, memory_budget_of

    feeds = {"x": np.zeros((256, 1024), np.float32)}
    record = make_record(0, inputs=feeds)
    with Ledger.open(location, signer=signer) as ledger:
        ledger.append(record, inputs=feeds)
        with memory_budget_of(1 << 19), pytest.raises(BudgetExceededError, match="memory budget"):
            ledger.inputs_of(record)
        assert ledger.inputs_of(record)["x"].shape == (256, 1024)


def test_a_database_of_something_else_is_left_alone(location: str, signer) -> None:
    if location.startswith("postgresql://"):
        execute_sql(location, "CREATE TABLE records (x TEXT)")  # someone else's table of that name
    else:
        import sqlite3

        connection = sqlite3.connect(location)
        connection.execute("CREATE TABLE accounts (x TEXT)")
        connection.commit()
        connection.close()
    with pytest.raises(LedgerError, match="refusing"):
        Ledger.open(location, signer=signer)
    if not location.startswith("postgresql://"):
        assert execute_sql(location, "PRAGMA journal_mode")[0][0] == "delete"  # not even its journal mode
        assert [name for (name,) in execute_sql(location, "SELECT name FROM sqlite_master")] == ["accounts"]


def test_records_are_read_back_in_order_from_any_leaf(location: str, signer) -> None:
    with Ledger.open(location, signer=signer) as ledger:
        ids = [ledger.append(make_record(i)).record_id for i in range(300)]  # more than one page
        assert ledger.pending == 0
        assert [(i, r["id"]) for i, r in ledger.records()] == list(enumerate(ids))
        assert [i for i, _ in ledger.records(start=290)] == list(range(290, 300))
        assert [i for i, _ in ledger.records(start=5, stop=8)] == [5, 6, 7]
