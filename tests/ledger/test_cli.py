"""``sealtrace ledger``: verify, prove, consistency, check-proof and show, with their exit codes, and
proofs and stores from outside (malformed, hostile, huge claims) refused with one line and exit 2."""

from __future__ import annotations

import copy
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sealtrace.cli import main
from sealtrace.ledger import Ledger, LedgerCheckError, LedgerError, check_proof, trusted_keys
from sealtrace.signing import generate_keypair
from tests.ledger.conftest import execute_sql, make_record


@pytest.fixture
def store(location: str, signer: Ed25519PrivateKey) -> tuple[str, list[str]]:
    with Ledger.open(location, signer=signer, head_every=3) as ledger:
        ids = [ledger.append(make_record(i)).record_id for i in range(7)]
    return location, ids


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    if code:
        assert captured.err.count("\n") == 1, captured.err  # one line per error
    return code, captured.out, captured.err


def test_verify_prove_and_check_a_proof(store, keys, tmp_path: Path, capsys) -> None:
    location, ids = store
    public = str(keys[1])
    code, out, _ = _run(capsys, "ledger", "verify", location, "--trust", public)
    assert code == 0 and "ok:" in out and "7 records" in out
    proof = tmp_path / "proof.json"
    assert _run(capsys, "ledger", "prove", location, ids[4], "-o", str(proof))[0] == 0
    code, out, _ = _run(capsys, "ledger", "check-proof", str(proof), "--trust", public)
    assert code == 0 and f"record {ids[4]} is leaf 4" in out
    # An existing output is kept unless --force.
    code, _, err = _run(capsys, "ledger", "prove", location, ids[4], "-o", str(proof))
    assert code == 2 and "exists" in err
    assert _run(capsys, "ledger", "prove", location, ids[1], "-o", str(proof), "--tree-size", "3", "--force")[0] == 0
    assert json.loads(proof.read_text())["tree_head"]["tree_size"] == 3
    consistency = tmp_path / "consistency.json"
    assert _run(capsys, "ledger", "consistency", location, "3", "-o", str(consistency))[0] == 0
    code, out, _ = _run(capsys, "ledger", "check-proof", str(consistency), "--trust", public, "--json")
    assert code == 0 and json.loads(out)["second"]["tree_size"] == 7
    code, out, _ = _run(capsys, "ledger", "verify", location, "--trust", public, "--known", str(proof),
                        "--known", str(consistency))
    assert code == 0
    code, out, _ = _run(capsys, "ledger", "show", location, "--recent", "2")
    assert code == 0 and "7 records" in out and ids[6] in out


def test_failed_checks_exit_1(store, keys, tmp_path: Path, capsys) -> None:
    location, ids = store
    proof = tmp_path / "proof.json"
    assert _run(capsys, "ledger", "prove", location, ids[2], "-o", str(proof))[0] == 0
    _, stranger = generate_keypair(tmp_path / "stranger.pem")
    code, _, err = _run(capsys, "ledger", "check-proof", str(proof), "--trust", str(stranger))
    assert code == 1 and "not by a trusted key" in err
    code, _, err = _run(capsys, "ledger", "verify", location, "--trust", str(stranger))
    assert code == 1 and "not by a trusted key" in err
    document = json.loads(proof.read_text())
    document["leaf"] = document["leaf"].replace('"alice"', '"mallory"')
    proof.write_text(json.dumps(document))
    code, _, err = _run(capsys, "ledger", "check-proof", str(proof), "--trust", str(keys[1]))
    assert code == 1 and "not leaf 2" in err
    execute_sql(location, "DELETE FROM nodes WHERE pos = 2")
    code, out, err = _run(capsys, "ledger", "verify", location, "--trust", str(keys[1]), "--json")
    assert code == 1 and not json.loads(out)["ok"]
    code, _, err = _run(capsys, "ledger", "verify", location, "--trust", str(keys[1]))
    assert code == 1 and "node 2: missing" in err


def test_bad_input_exits_2(store, keys, tmp_path: Path, capsys) -> None:
    location, _ = store
    public = str(keys[1])
    not_sqlite = tmp_path / "notes.txt"
    not_sqlite.write_text("hello")
    for bad_store, message in [
        (str(tmp_path / "missing.db"), "no such ledger"),
        (str(tmp_path), "not a regular file"),
        (str(not_sqlite), "not a SQLite file"),
        ("/dev/zero", "not a regular file"),
        ("postgresql://nobody@127.0.0.1:1/none", "cannot"),
    ]:
        code, _, err = _run(capsys, "ledger", "verify", bad_store, "--trust", public)
        assert code == 2 and message in err, (bad_store, err)
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).execute("CREATE TABLE other (x)").connection.commit()
    code, _, err = _run(capsys, "ledger", "show", str(empty))
    assert code == 2 and "not a sealtrace ledger" in err
    code, _, err = _run(capsys, "ledger", "prove", location, "f" * 32, "-o", str(tmp_path / "p.json"))
    assert code == 2 and "no record" in err
    assert not (tmp_path / "p.json").exists()
    code, _, err = _run(capsys, "ledger", "verify", location)
    assert code == 2 and "--trust" in err
    code, _, err = _run(capsys, "ledger", "check-proof", "/dev/zero", "--trust", public)
    assert code == 2 and "not a regular file" in err
    code, _, err = _run(capsys, "ledger", "verify", location, "--trust", str(tmp_path / "nokey.pub"))
    assert code == 2 and "key" in err


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any], Path]:
    """A genuine inclusion proof of leaf 5 of 7, and the public key that checks it."""
    from sealtrace.signing import load_private_key

    directory = tmp_path_factory.mktemp("proof")
    private, public = generate_keypair(directory / "key.pem")
    with Ledger.open(directory / "l.db", signer=load_private_key(private)) as ledger:
        ids = [ledger.append(make_record(i)).record_id for i in range(7)]
        ledger.sign_tree_head()
        return ledger.prove(ids[5]), ledger.prove_consistency(7), public


def _mutated(document: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    result = copy.deepcopy(document)
    target: Any = result
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return result


HOSTILE = [
    (("index",), 2**63), (("index",), 2**64 + 5), (("index",), -1), (("index",), "5"), (("index",), 5.0),
    (("tree_head", "tree_size"), 2**63 - 1), (("tree_head", "tree_size"), 2**70), (("tree_head", "tree_size"), True),
    (("proof",), ["00" * 32] * 64), (("proof",), ["00" * 32] * 100_000), (("proof",), "00" * 32),
    (("proof", 0), "00" * 31), (("proof", 0), ("00" * 32) + "\n"), (("proof", 0), None),
    (("leaf",), "x" * (2 << 20)), (("leaf",), "{}"), (("leaf",), "[" * 10_000), (("leaf",), "caf\u00e9"),
    (("tree_head",), []), (("tree_head", "root_hash"), "AB" * 32), (("tree_head", "signature"), {}),
    (("tree_head", "format"), "sealtrace.ledger.tree-head.v2"), (("format",), "sealtrace.ledger.inclusion-proof.v2"),
    (("extra",), 1),
]


@pytest.mark.parametrize(("path", "value"), HOSTILE, ids=lambda v: str(v)[:30])
def test_hostile_proofs_are_refused_in_bounded_time(document, path: tuple[Any, ...], value: Any) -> None:
    inclusion, _, public = document
    trusted = trusted_keys([public])
    with pytest.raises((LedgerError, LedgerCheckError)):
        check_proof(_mutated(inclusion, path, value), trusted)


def test_a_tree_size_changed_to_a_huge_one_fails_the_signature(document) -> None:
    inclusion, consistency, public = document
    trusted = trusted_keys([public])
    check_proof(inclusion, trusted)
    check_proof(consistency, trusted)
    with pytest.raises(LedgerCheckError, match="signature"):
        check_proof(_mutated(inclusion, ("tree_head", "tree_size"), 2**63 - 1), trusted)
    with pytest.raises(LedgerCheckError, match="signature"):
        check_proof(_mutated(consistency, ("second", "tree_size"), 2**63 - 1), trusted)


def test_proof_files_that_are_not_proofs(document, tmp_path: Path, capsys) -> None:
    public = str(document[2])
    for name, data in [
        ("nested.json", b"[" * 200_000 + b"]" * 200_000),
        ("nan.json", b'{"format": NaN}'),
        ("text.json", b"not json"),
        ("list.json", b"[1, 2]"),
        ("big.json", b" " * (5 << 20)),
        ("binary.json", os.urandom(64)),
    ]:
        path = tmp_path / name
        path.write_bytes(data)
        code, _, err = _run(capsys, "ledger", "check-proof", str(path), "--trust", public)
        assert code == 2, (name, err)


def test_a_proof_with_a_duplicate_key_is_refused(document, tmp_path: Path, capsys) -> None:
    """Two readers could take different values from a key given twice (docs/ledger.md): exit 2, even
    when the value JSON readers keep (the last) makes a proof that holds."""
    inclusion, _, public = document
    text = json.dumps(inclusion).replace('"index": ', f'"index": {inclusion["index"] + 1}, "index": ', 1)
    path = tmp_path / "twice.json"
    path.write_text(text)
    assert json.loads(text) == inclusion
    code, _, err = _run(capsys, "ledger", "check-proof", str(path), "--trust", str(public))
    assert code == 2 and "duplicate key 'index'" in err
