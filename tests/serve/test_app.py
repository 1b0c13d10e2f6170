"""The server over HTTP (Starlette's TestClient runs the app and its lifespan in this process): the
Open Inference Protocol's endpoints, JSON and binary tensors, the record behind every 200, bad input
answered 4xx with nothing appended, auth, the body limit, metrics and the ledger's proofs."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sealtrace import Session
from sealtrace.ledger import Ledger, check_proof, trusted_keys
from tests.serve.conftest import serving

X = np.arange(8, dtype=np.float32).reshape(2, 4) / 7 - 0.5


def _json_request(x: np.ndarray = X, **extra: Any) -> dict[str, Any]:
    return {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.reshape(-1).tolist()}], **extra}


def _binary_request(tensors: list[tuple[str, str, np.ndarray | bytes, list[int]]],
                    outputs: list[dict[str, Any]] | None = None, **extra: Any) -> tuple[bytes, dict[str, str]]:
    inputs, blobs = [], []
    for name, datatype, value, shape in tensors:
        blob = value if isinstance(value, bytes) else np.ascontiguousarray(value).tobytes()
        inputs.append({"name": name, "shape": shape, "datatype": datatype, "parameters": {"binary_data_size": len(blob)}})
        blobs.append(blob)
    document: dict[str, Any] = {"inputs": inputs, **extra}
    if outputs is not None:
        document["outputs"] = outputs
    header = json.dumps(document).encode()
    return header + b"".join(blobs), {"Inference-Header-Content-Length": str(len(header)),
                                      "Content-Type": "application/octet-stream"}


def _split(response: Any) -> tuple[dict[str, Any], bytes]:
    length = response.headers.get("Inference-Header-Content-Length")
    if length is None:
        return response.json(), b""
    return json.loads(response.content[: int(length)]), response.content[int(length):]


def _bytes_tensor(items: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


@pytest.fixture
def full(tmp_path: Path, containers: dict[str, Path], keys: tuple[Path, Path]) -> Any:
    with serving(tmp_path, [containers["tiny"], containers["typed"]], keys, audit="full", head_interval=0.05) as client:
        yield client


def test_metadata_health_and_repository(full: Any, containers: dict[str, Path]) -> None:
    assert full.get("/v2/health/live").json() == {"live": True}
    assert full.get("/v2/health/ready").status_code == 200
    server = full.get("/v2").json()
    assert server["name"] == "sealtrace" and "binary_tensor_data" in server["extensions"]
    meta = full.get("/v2/models/tiny").json()
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert meta["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}]
    session = Session(containers["tiny"])
    assert meta["parameters"]["plan_digest"] == session.plan.digest
    assert meta["parameters"]["container_digest"] == session.origin.container_digest
    assert meta["parameters"]["trusted"] is True and meta["versions"] == ["1"]
    typed = {t["name"]: t["datatype"] for t in full.get("/v2/models/typed").json()["inputs"]}
    assert typed == {"i": "INT64", "flag": "BOOL", "text": "BYTES", "half": "FP16"}
    assert full.get("/v2/models/tiny/versions/1").status_code == 200
    assert full.get("/v2/models/tiny/ready").json() == {"name": "tiny", "ready": True}
    missing = full.get("/v2/models/nope")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]
    assert full.get("/v2/models/tiny/versions/7").status_code == 404
    index = full.post("/v2/repository/index").json()
    assert {m["name"] for m in index} == {"tiny", "typed"}
    assert full.get("/no/such/path").json() == {"error": "Not Found"}


def test_json_inference_is_recorded_durably_with_its_trail(full: Any, containers: dict[str, Path], keys: Any) -> None:
    response = full.post("/v2/models/tiny/infer", json=_json_request(id="req-1"))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == "req-1" and body["model_name"] == "tiny"
    (expected,) = Session(containers["tiny"]).run(None, {"x": X})
    (output,) = body["outputs"]
    got = np.asarray(output["data"], dtype=np.float32).reshape(output["shape"])
    assert output["datatype"] == "FP32" and got.tobytes() == expected.tobytes()  # bit for bit
    parameters = body["parameters"]
    ledger: Ledger = full.service.ledger
    index, record = ledger.record(parameters["record_id"])  # durable before the 200
    assert index == parameters["ledger_index"] and parameters["audit"] == "full"
    assert record["audit"] == "full" and record["backend"]["name"] == "reference" and record["principal"] is None
    assert record["model"]["plan_digest"] == Session(containers["tiny"]).plan.digest
    trail = ledger.trail(record["trail"])  # the per-op audit log, stored compressed
    assert trail.count(b'"type":"step"') == 3
    assert ledger.inputs_of(record)["x"].tobytes() == X.tobytes()


def test_binary_tensors_and_requested_outputs(full: Any) -> None:
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    body, headers = _binary_request([("x", "FP32", x, [3, 4])], outputs=[{"name": "y", "parameters": {"binary_data": True}}])
    response = full.post("/v2/models/tiny/infer", content=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/octet-stream"
    document, blob = _split(response)
    (output,) = document["outputs"]
    assert output["parameters"]["binary_data_size"] == len(blob) == 3 * 3 * 4
    (expected,) = full.service.models["tiny"].session.run(None, {"x": x})
    assert np.frombuffer(blob, np.float32).reshape(3, 3).tobytes() == expected.tobytes()
    # binary_data_output makes every output binary; a requested output may say otherwise
    body, headers = _binary_request([("x", "FP32", x, [3, 4])], parameters={"binary_data_output": True})
    document, blob = _split(full.post("/v2/models/tiny/infer", content=body, headers=headers))
    assert len(blob) == 36 and "data" not in document["outputs"][0]
    body, headers = _binary_request([("x", "FP32", x, [3, 4])], outputs=[{"name": "y", "parameters": {"binary_data": False}}],
                                    parameters={"binary_data_output": True})
    document, blob = _split(full.post("/v2/models/tiny/infer", content=body, headers=headers))
    assert blob == b"" and len(document["outputs"][0]["data"]) == 9


def test_every_datatype_round_trips_in_json_and_binary(full: Any) -> None:
    i = np.array([-(2**62), 7], np.int64)
    flag = np.array([True, False])
    half = np.array([1.5, -65504], np.float16)
    text = ["héllo", ""]
    json_body = {"inputs": [
        {"name": "i", "shape": [2], "datatype": "INT64", "data": i.tolist()},
        {"name": "flag", "shape": [2], "datatype": "BOOL", "data": flag.tolist()},
        {"name": "text", "shape": [2], "datatype": "BYTES", "data": text},
        {"name": "half", "shape": [2], "datatype": "FP16", "data": half.tolist()},
    ], "outputs": [{"name": "i_out"}, {"name": "text_out"}, {"name": "half_out"}, {"name": "flag_out"}]}
    document = full.post("/v2/models/typed/infer", json=json_body).json()
    outputs = {o["name"]: o for o in document["outputs"]}
    assert [o["name"] for o in document["outputs"]] == ["i_out", "text_out", "half_out", "flag_out"]  # as requested
    assert outputs["i_out"]["data"] == i.tolist() and outputs["i_out"]["datatype"] == "INT64"
    assert outputs["text_out"]["data"] == text and outputs["text_out"]["datatype"] == "BYTES"
    assert outputs["flag_out"]["data"] == [True, False] and outputs["flag_out"]["datatype"] == "BOOL"
    assert np.array(outputs["half_out"]["data"], np.float16).tobytes() == half.tobytes()
    body, headers = _binary_request(
        [("i", "INT64", i, [2]), ("flag", "BOOL", flag, [2]), ("text", "BYTES", _bytes_tensor([t.encode() for t in text]), [2]),
         ("half", "FP16", half, [2])],
        outputs=[{"name": n, "parameters": {"binary_data": True}} for n in ("i_out", "flag_out", "text_out", "half_out")],
    )
    document, blob = _split(full.post("/v2/models/typed/infer", content=body, headers=headers))
    sizes = [o["parameters"]["binary_data_size"] for o in document["outputs"]]
    parts, offset = [], 0
    for size in sizes:
        parts.append(blob[offset : offset + size])
        offset += size
    assert parts[0] == i.tobytes() and parts[1] == flag.tobytes() and parts[3] == half.tobytes()
    assert parts[2] == _bytes_tensor([t.encode() for t in text])


def _bad_requests() -> list[tuple[str, Any, dict[str, str], int, str]]:
    """(case, body, headers, status, a word the error must contain)."""
    x = X.reshape(-1).tolist()
    good = {"name": "x", "shape": [2, 4], "datatype": "FP32", "data": x}
    js = {"Content-Type": "application/json"}

    def body(document: Any) -> bytes:
        return json.dumps(document).encode()

    binary, headers = _binary_request([("x", "FP32", X[:1].tobytes()[:12], [1, 4])])
    beyond = json.dumps({"inputs": [{**{k: v for k, v in good.items() if k != "data"}, "parameters": {"binary_data_size": 32}}]}).encode()
    trailing, trailing_headers = _binary_request([("x", "FP32", X, [2, 4])])
    return [
        ("malformed JSON", b'{"inputs": [', js, 400, "JSON"),
        ("not an object", b"[1, 2]", js, 400, "object"),
        ("no inputs", body({"inputs": []}), js, 400, "inputs"),
        ("unknown field", body({"inputs": [good], "input": 1}), js, 400, "input"),
        ("unknown input", body({"inputs": [{**good, "name": "q"}]}), js, 400, "'q'"),
        ("missing input", body({"inputs": [{**good, "name": "x"}], "id": 5}), js, 400, "id"),
        ("duplicate input", body({"inputs": [good, good]}), js, 400, "twice"),
        ("wrong datatype", body({"inputs": [{**good, "datatype": "FP64"}]}), js, 400, "datatype"),
        ("unknown datatype", body({"inputs": [{**good, "datatype": "FLOAT"}]}), js, 400, "datatype"),
        ("wrong rank", body({"inputs": [{**good, "shape": [8]}]}), js, 400, "shape"),
        ("wrong fixed axis", body({"inputs": [{**good, "shape": [1, 8]}]}), js, 400, "axis 1"),
        ("negative axis", body({"inputs": [{**good, "shape": [-2, 4]}]}), js, 400, "shape"),
        ("element count", body({"inputs": [{**good, "data": x[:-1]}]}), js, 400, "7 elements"),
        ("ragged data", body({"inputs": [{**good, "data": [[1, 2, 3, 4], [1]]}]}), js, 400, "data"),
        ("strings for FP32", body({"inputs": [{**good, "data": ["a"] * 8}]}), js, 400, "numbers"),
        ("no data", body({"inputs": [{k: v for k, v in good.items() if k != "data"}]}), js, 400, "data"),
        ("deep nesting", b'{"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": ' + b"[" * 5000 + b"]" * 5000 + b"}]}", js, 400, "nested"),
        ("nested past the rank", b'{"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": ' + b"[" * 90 + b"1" + b"]" * 90 + b"}]}", js, 400, "data"),
        ("binary size mismatch", binary, headers, 400, "binary_data_size"),
        ("binary beyond the body", beyond, {"Inference-Header-Content-Length": str(len(beyond))}, 400, "binary_data_size"),
        ("bytes after the binary", trailing + b"\0", trailing_headers, 400, "binary data after"),
        ("header length not a number", body({"inputs": [good]}), {"Inference-Header-Content-Length": "12x"}, 400, "Inference-Header-Content-Length"),
        ("header length past the body", body({"inputs": [good]}), {"Inference-Header-Content-Length": "99999"}, 400, "Inference-Header-Content-Length"),
        ("unknown output", body({"inputs": [good], "outputs": [{"name": "z"}]}), js, 400, "'z'"),
        ("binary_data not a boolean", body({"inputs": [good], "outputs": [{"name": "y", "parameters": {"binary_data": 1}}]}), js, 400, "binary_data"),
        ("classification", body({"inputs": [good], "outputs": [{"name": "y", "parameters": {"classification": 3}}]}), js, 400, "classification"),
    ]


def _typed_bad_requests() -> list[tuple[str, Any, dict[str, str], int, str]]:
    def doc(i: Any = None, flag: Any = None, text: Any = None) -> dict[str, Any]:
        return {"inputs": [
            {"name": "i", "shape": [1], "datatype": "INT64", "data": [1] if i is None else i},
            {"name": "flag", "shape": [1], "datatype": "BOOL", "data": [True] if flag is None else flag},
            {"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a"] if text is None else text},
            {"name": "half", "shape": [1], "datatype": "FP16", "data": [1.0]},
        ]}

    js = {"Content-Type": "application/json"}
    cases: list[tuple[str, Any, dict[str, str], int, str]] = [
        ("float in INT64", json.dumps(doc(i=[1.5])).encode(), js, 400, "integers"),
        ("INT64 out of range", json.dumps(doc(i=[2**64])).encode(), js, 400, "INT64"),
        ("number for BOOL", json.dumps(doc(flag=[2])).encode(), js, 400, "BOOL"),
        ("number for BYTES", json.dumps(doc(text=[3])).encode(), js, 400, "BYTES"),
    ]
    tensors: list[tuple[str, str, Any, list[int]]] = [("i", "INT64", np.int64([1]), [1]), ("flag", "BOOL", b"\x02", [1]),
                                                      ("text", "BYTES", _bytes_tensor([b"a"]), [1]), ("half", "FP16", np.float16([1]), [1])]
    body, headers = _binary_request(tensors)
    cases.append(("BOOL byte not 0 or 1", body, headers, 400, "BOOL"))
    for case, blob in (("BYTES length past the end", struct.pack("<I", 50) + b"ab"), ("BYTES not UTF-8", _bytes_tensor([b"\xff\xfe"])),
                       ("BYTES without a length", b"ab"), ("BYTES extra bytes", _bytes_tensor([b"a"]) + b"zz")):
        tensors[1] = ("flag", "BOOL", b"\x01", [1])
        tensors[2] = ("text", "BYTES", blob, [1])
        body, headers = _binary_request(tensors)
        cases.append((case, body, headers, 400, "BYTES"))
    return cases


def test_bad_input_is_a_4xx_naming_the_field_and_appends_nothing(full: Any) -> None:
    ledger: Ledger = full.service.ledger
    before = ledger.size
    for model, cases in (("tiny", _bad_requests()), ("typed", _typed_bad_requests())):
        for case, body, headers, status, word in cases:
            response = full.post(f"/v2/models/{model}/infer", content=body, headers=headers)
            assert response.status_code == status, (case, response.text)
            error = response.json()["error"]
            assert word in error, (case, error)
    unknown = full.post("/v2/models/none/infer", json=_json_request())
    assert unknown.status_code == 404 and "'none'" in unknown.json()["error"]
    assert ledger.size == before  # nothing appended for any of them
    metrics = full.get("/metrics").text
    assert 'sealtrace_requests_total{model="tiny",status="400"}' in metrics


def test_body_limit_refuses_before_reading(tmp_path: Path, containers: dict[str, Path], keys: Any) -> None:
    with serving(tmp_path, [containers["tiny"]], keys, audit="io", max_body=4096) as client:
        big = json.dumps(_json_request(np.zeros((1000, 4), np.float32))).encode()
        response = client.post("/v2/models/tiny/infer", content=big, headers={"Content-Type": "application/json"})
        assert response.status_code == 413 and "4096" in response.json()["error"]

        def chunks() -> Any:  # no Content-Length: cut off while streaming
            for start in range(0, len(big), 1000):
                yield big[start : start + 1000]

        streamed = client.post("/v2/models/tiny/infer", content=chunks(), headers={"Content-Type": "application/json"})
        assert streamed.status_code == 413
        assert client.post("/v2/models/tiny/infer", json=_json_request()).status_code == 200
        assert client.service.ledger.size == 1


def test_a_declared_allocation_beyond_the_memory_budget_is_refused(tmp_path: Path, containers: dict[str, Path], keys: Any) -> None:
    from sealtrace.limits import memory_budget_of

    with serving(tmp_path, [containers["tiny"]], keys, audit="io") as client, memory_budget_of(1 << 20):
        document = {"inputs": [{"name": "x", "shape": [1 << 30, 4], "datatype": "FP32", "data": [0.0]}]}
        response = client.post("/v2/models/tiny/infer", json=document)
        assert response.status_code == 413 and "memory budget" in response.json()["error"]
        assert client.service.ledger.size == 0


def test_bearer_tokens_name_the_principal(tmp_path: Path, containers: dict[str, Path], keys: Any) -> None:
    from sealtrace.serve.tokens import TokenTable, add_token

    token_file = tmp_path / "tokens.txt"
    alice = add_token(token_file, "alice")
    assert alice not in token_file.read_text()  # only its hash is stored
    with serving(tmp_path, [containers["tiny"]], keys, audit="io", tokens=TokenTable.load(token_file)) as client:
        refused = client.post("/v2/models/tiny/infer", json=_json_request())
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        wrong = client.post("/v2/models/tiny/infer", json=_json_request(), headers={"Authorization": "Bearer st_nope"})
        assert wrong.status_code == 401
        assert client.get("/v2/models/tiny").status_code == 401
        assert client.get("/v2/ledger/tree-head").status_code == 401
        assert client.get("/v2/health/ready").status_code == 200  # health and metrics stay open
        assert client.get("/metrics").status_code == 200
        answer = client.post("/v2/models/tiny/infer", json=_json_request(), headers={"Authorization": f"Bearer {alice}"})
        assert answer.status_code == 200
        _, record = client.service.ledger.record(answer.json()["parameters"]["record_id"])
        assert record["principal"] == "alice"
        assert client.service.ledger.size == 1


def test_proofs_over_http_are_the_cli_documents(full: Any, keys: tuple[Path, Path], tmp_path: Path) -> None:
    from sealtrace.cli import main

    ids = [full.post("/v2/models/tiny/infer", json=_json_request()).json()["parameters"]["record_id"] for _ in range(3)]
    ledger: Ledger = full.service.ledger
    ledger.sign_tree_head()
    head = full.get("/v2/ledger/tree-head").json()
    assert head["tree_size"] == 3
    record = full.get(f"/v2/ledger/records/{ids[1]}").json()
    assert record["index"] == 1 and record["record"]["id"] == ids[1]
    proof = full.get(f"/v2/ledger/records/{ids[1]}/proof/inclusion")
    assert proof.content == (json.dumps(ledger.prove(ids[1]), indent=2, sort_keys=True) + "\n").encode()
    path = tmp_path / "proof.json"
    path.write_bytes(proof.content)
    assert main(["ledger", "check-proof", str(path), "--trust", str(keys[1])]) == 0
    checked = check_proof(proof.json(), trusted_keys([keys[1]]))
    assert checked.record["id"] == ids[1]  # type: ignore[union-attr]
    first = full.get(f"/v2/ledger/records/{ids[0]}/proof/inclusion", params={"tree_size": 3}).json()
    assert first["tree_head"]["tree_size"] == 3
    full.post("/v2/models/tiny/infer", json=_json_request())
    ledger.sign_tree_head()
    consistency = full.get("/v2/ledger/proof/consistency", params={"first": 3})
    assert consistency.status_code == 200
    path.write_bytes(consistency.content)
    assert main(["ledger", "check-proof", str(path), "--trust", str(keys[1])]) == 0
    assert full.get("/v2/ledger/records/" + "0" * 32).status_code == 404
    assert full.get("/v2/ledger/records/xyz/proof/inclusion").status_code == 404
    assert full.get("/v2/ledger/proof/consistency", params={"first": "a"}).status_code == 400
    assert full.get("/v2/ledger/tree-head", params={"tree_size": 2}).status_code == 404


def test_tampering_shows_through_the_servers_proofs(tmp_path: Path, containers: dict[str, Path], keys: tuple[Path, Path]) -> None:
    import sqlite3

    from sealtrace.cli import main

    location = str(tmp_path / "ledger.db")
    with serving(tmp_path, [containers["tiny"]], keys, audit="io", ledger=location) as client:
        ids = [client.post("/v2/models/tiny/infer", json=_json_request(X + i)).json()["parameters"]["record_id"] for i in range(5)]
        client.service.ledger.sign_tree_head()
        held = tmp_path / "held.json"  # what a client kept: a proof with the tree head of 5 records
        held.write_bytes(client.get(f"/v2/ledger/records/{ids[0]}/proof/inclusion").content)
    # Someone with the database but not the key rewrites record 2 (its principal).
    connection = sqlite3.connect(location)
    body = connection.execute("SELECT body FROM records WHERE idx = 2").fetchone()[0]
    forged = bytes(body).replace(b'"principal":null', b'"principal":"mallory"')
    assert forged != bytes(body)
    connection.execute("UPDATE records SET body = ? WHERE idx = 2", (forged,))
    connection.commit()
    connection.close()
    assert main(["ledger", "verify", location, "--trust", str(keys[1])]) == 1
    with serving(tmp_path, [containers["tiny"]], keys, audit="io", ledger=location) as client:
        proof = tmp_path / "forged.json"
        proof.write_bytes(client.get(f"/v2/ledger/records/{ids[2]}/proof/inclusion", params={"tree_size": 5}).content)
        assert main(["ledger", "check-proof", str(proof), "--trust", str(keys[1])]) == 1
        assert main(["ledger", "check-proof", str(held), "--trust", str(keys[1])]) == 0  # what was held still checks
    assert main(["ledger", "verify", location, "--trust", str(keys[1]), "--known", str(held)]) == 1


def test_metrics_and_ledger_page(full: Any) -> None:
    for _ in range(2):
        assert full.post("/v2/models/tiny/infer", json=_json_request()).status_code == 200
    text = full.get("/metrics").text
    assert 'sealtrace_requests_total{model="tiny",status="200"} 2.0' in text
    assert 'sealtrace_request_duration_seconds_count{model="tiny"} 2.0' in text
    assert "sealtrace_ledger_records 2.0" in text and "sealtrace_replay_backlog 0.0" in text
    page = full.get("/ledger")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "Recent records" in page.text and "src=" not in page.text and "href=" not in page.text


def test_openapi_describes_the_inference_request(full: Any) -> None:
    schema = full.get("/openapi.json").json()
    infer = schema["paths"]["/v2/models/{name}/infer"]["post"]
    assert infer["requestBody"]["content"]["application/json"]["schema"]["required"] == ["inputs"]
