"""`batch --attest DIR --attest-key KEY`: one in-toto attestation per record, named after its request,
verified by securesystemslib with the public key and by `audit verify-attestation` against the trail
the ledger stores; --resume writes what an earlier run left out; bad combinations are exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sealtrace.cli import main
from sealtrace.ledger import Ledger
from tests.provenance.checks import checked_statement
from tests.scale.conftest import npz_dataset


@pytest.fixture(scope="module")
def ec_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    key = tmp_path_factory.mktemp("attest-key") / "ec.pem"
    assert main(["keygen", "--algorithm", "ecdsa-p256", "-o", str(key)]) == 0
    return key


def _argv(material: dict[str, Path], data: Path, ledger: Path, *more: str) -> list[str]:
    return ["batch", str(material["tiny"]), str(data), "--ledger", str(ledger), "--sign", str(material["key"]),
            "--json", *more]  # fmt: skip


def test_each_record_gets_a_verified_attestation(material: dict[str, Path], ec_key: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    data, ledger, folder = npz_dataset(tmp_path / "data", 3, 2), tmp_path / "l.db", tmp_path / "attest"
    assert main(_argv(material, data, ledger, "--audit", "full", "--attest", str(folder),
                      "--attest-key", str(ec_key))) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["attested"] == 3
    assert sorted(p.name for p in folder.iterdir()) == [f"req{i:05d}.intoto.json" for i in range(3)]
    with Ledger.open(str(ledger), readonly=True) as opened:
        for index, record in opened.records():
            document = (folder / f"req{index:05d}.intoto.json").read_bytes()
            statement = checked_statement(document, ec_key.with_suffix(".pub"), opened.trail(record["trail"]),
                                          tmp_path / f"check{index}")  # fmt: skip
            predicate = statement["predicate"]
            assert predicate["ledger"] == {"index": index, "record_id": record["id"]}
            assert predicate["audit_log"]["run_digest"] == record["trail"]
            outputs = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
            assert outputs == {name: value["digest"] for name, value in record["outputs"].items()}

    capsys.readouterr()
    # An attestation left out (an interrupted run writes none): --resume writes that one only.
    (folder / "req00001.intoto.json").unlink()
    kept = (folder / "req00000.intoto.json").read_bytes()
    assert main(_argv(material, data, ledger, "--audit", "full", "--attest", str(folder), "--attest-key",
                      str(ec_key), "--resume")) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["attested"] == 1
    assert (folder / "req00001.intoto.json").exists() and (folder / "req00000.intoto.json").read_bytes() == kept


def test_bad_combinations_are_refused_before_work(material: dict[str, Path], ec_key: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    full = tmp_path / "full"
    full.mkdir()
    (full / "old.intoto.json").write_text("{}")
    folder, key = str(tmp_path / "attest"), str(ec_key)
    for more, message in (
        (["--audit", "io", "--attest", folder, "--attest-key", key], "--attest needs --audit full"),
        (["--audit", "full", "--attest-key", key], "go together"),
        (["--audit", "full", "--attest", folder], "go together"),
        (["--audit", "full", "--attest", str(full), "--attest-key", key], "not empty"),
        (["--audit", "full", "--attest", f"{folder}/a/b", "--attest-key", key], "does not exist"),
    ):
        assert main(_argv(material, material["tiny_data"], tmp_path / "l.db", *more)) == 2, more
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and message in err, err
        assert not (tmp_path / "l.db").exists() and not (tmp_path / "attest").exists()
