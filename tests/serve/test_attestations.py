"""`serve --attest-key KEY`: GET /v2/ledger/records/{id}/attestation answers a record's run as an
in-toto attestation carrying its ledger index, verified by securesystemslib with the public key and by
`audit verify-attestation` against the trail the ledger stores; 404 where there is none to give."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sealtrace.cli import main
from tests.provenance.checks import checked_statement
from tests.serve.conftest import serving

X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
REQUEST = {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": X.reshape(-1).tolist()}]}


@pytest.fixture(scope="module")
def ec_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    key = tmp_path_factory.mktemp("attest-key") / "ec.pem"
    assert main(["keygen", "--algorithm", "ecdsa-p256", "-o", str(key)]) == 0
    return key


def _attestation(client: Any, record_id: str, where: Path, key: Path) -> dict[str, Any]:
    """The record's attestation, checked by both verifiers against the trail the ledger holds."""
    response = client.get(f"/v2/ledger/records/{record_id}/attestation")
    assert response.status_code == 200, response.text
    index, record = client.service.ledger.record(record_id)
    statement = checked_statement(response.content, key.with_suffix(".pub"),
                                  client.service.ledger.trail(record["trail"]), where)  # fmt: skip
    assert statement["predicate"]["ledger"] == {"index": index, "record_id": record_id}
    assert {s["name"]: s["digest"]["sha256"] for s in statement["subject"]} == {
        name: value["digest"] for name, value in record["outputs"].items()}
    return statement


def test_full_audit_records_are_attested(tmp_path: Path, containers: dict[str, Path], keys: Any, ec_key: Path) -> None:
    with serving(tmp_path, [containers["tiny"]], keys, audit="full", attest_key=str(ec_key)) as client:
        ids = []
        for _ in range(2):
            answer = client.post("/v2/models/tiny/infer", json=REQUEST)
            assert answer.status_code == 200, answer.text
            ids.append(answer.json()["parameters"]["record_id"])
        for n, record_id in enumerate(ids):
            statement = _attestation(client, record_id, tmp_path / f"check{n}", ec_key)
            assert statement["predicate"]["computation"]["backend"] == "reference"
        unknown = client.get(f"/v2/ledger/records/{'0' * 32}/attestation")
        assert unknown.status_code == 404 and "no record" in unknown.json()["error"]
        assert client.get("/v2/ledger/records/nothex/attestation").status_code == 404


def test_a_server_without_a_key_attests_nothing(tmp_path: Path, containers: dict[str, Path], keys: Any) -> None:
    with serving(tmp_path, [containers["tiny"]], keys, audit="full") as client:
        record_id = client.post("/v2/models/tiny/infer", json=REQUEST).json()["parameters"]["record_id"]
        response = client.get(f"/v2/ledger/records/{record_id}/attestation")
        assert response.status_code == 404 and "--attest-key" in response.json()["error"]


def test_deferred_attests_the_replay_not_the_answer(tmp_path: Path, containers: dict[str, Path], keys: Any,
                                                   ec_key: Path) -> None:
    with serving(tmp_path, [containers["tiny"]], keys, audit="deferred", attest_key=str(ec_key)) as client:
        record_id = client.post("/v2/models/tiny/infer", json=REQUEST).json()["parameters"]["record_id"]
        # The answer came from ONNX Runtime with digests only: nothing of its run to attest.
        served = client.get(f"/v2/ledger/records/{record_id}/attestation")
        assert served.status_code == 404 and "deferred" in served.json()["error"]
        ledger = client.service.ledger
        assert client.service.replay.drain(120)
        (replay_id,) = [r["id"] for _, r in ledger.records() if r["kind"] == "replay"]
        statement = _attestation(client, replay_id, tmp_path / "check", ec_key)
        assert statement["predicate"]["computation"]["backend"] == "reference"


def test_io_with_an_attest_key_is_refused(tmp_path: Path, containers: dict[str, Path], ec_key: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", str(containers["tiny"]), "--audit", "io", "--attest-key", str(ec_key), "--host", "127.0.0.1",
                 "--port", "0", "--ledger", str(tmp_path / "l.db")]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("sealtrace: error: --attest-key") and "--audit io" in err
    assert not (tmp_path / "l.db").exists()
