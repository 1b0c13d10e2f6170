"""Hostile requests (issue 27): each was a 500, a silent acceptance or an unbounded cost on the server
before, and is now a 4xx that appends nothing to the ledger. A request refused after its run (its
response over --max-response) appends nothing either: the response is encoded before the record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from sealtrace.container import seal_model
from sealtrace.strictjson import loads_strict
from tests.conftest import make_model
from tests.serve.conftest import serving

X = [0.5, -0.25, 1.0, 2.0]
GOOD = {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": X}


@pytest.fixture(scope="module")
def hostile_models(tmp_path_factory: pytest.TempPathFactory, keys: tuple[Path, Path]) -> dict[str, Path]:
    """'any2d': Identity over FP32 of any two axes. 'tile': Tile(x, repeats), an output whose shape
    only the run knows."""
    folder = tmp_path_factory.mktemp("hostile-models")
    any2d = make_model([helper.make_node("Identity", ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["A", "B"])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["A", "B"])], name="any2d")
    tile = make_model([helper.make_node("Tile", ["x", "repeats"], ["y"])],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
                       helper.make_tensor_value_info("repeats", TensorProto.INT64, [1])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])], name="tile")
    made = {}
    for name, model in (("any2d", any2d), ("tile", tile)):
        made[name] = folder / f"{name}.seal"
        seal_model(model, made[name], sign_with=keys[0])
    return made


@pytest.fixture
def io_server(tmp_path: Path, containers: dict[str, Path], hostile_models: dict[str, Path], keys: Any) -> Any:
    models = [containers["tiny"], containers["typed"], hostile_models["any2d"], hostile_models["tile"]]
    with serving(tmp_path, models, keys, audit="io", max_response=4096) as client:
        yield client


def _post(client: Any, model: str, body: bytes, **headers: str) -> Any:
    return client.post(f"/v2/models/{model}/infer", content=body,
                       headers={"Content-Type": "application/json", **headers})


def _refused(client: Any, model: str, body: bytes, status: int, word: str, **headers: str) -> None:
    before = client.service.ledger.size
    response = _post(client, model, body, **headers)
    assert response.status_code == status, response.text
    assert word in response.json()["error"], response.json()
    assert client.service.ledger.size == before, "a refused request appended a record"


@pytest.mark.parametrize(("case", "body"), [
    # Was recorded, then the reply failed to encode the id: a 500 with a record behind it.
    ("lone surrogate in the id", b'{"id": "\\ud800", "inputs": [' + json.dumps(GOOD).encode() + b"]}"),
    ("lone low surrogate", b'{"id": "a\\udfffb", "inputs": [' + json.dumps(GOOD).encode() + b"]}"),
    ("encoded surrogate bytes", b'{"id": "\xed\xa0\x80", "inputs": [' + json.dumps(GOOD).encode() + b"]}"),
    ("surrogate beside NaN", b'{"id": "\\ud800", "inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", '
                             b'"data": [NaN, 1, 2, 3]}]}'),
])
def test_strings_that_are_not_unicode_text_are_refused(io_server: Any, case: str, body: bytes) -> None:
    _refused(io_server, "tiny", body, 400, "JSON")


def test_a_lone_surrogate_in_a_bytes_tensor_is_refused(io_server: Any) -> None:
    tensors = [{"name": "i", "shape": [1], "datatype": "INT64", "data": [1]},
               {"name": "flag", "shape": [1], "datatype": "BOOL", "data": [True]},
               {"name": "half", "shape": [1], "datatype": "FP16", "data": [1.0]}]
    text = b'{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["\\udc00"]}'
    body = b'{"inputs": [' + b", ".join(json.dumps(t).encode() for t in tensors) + b", " + text + b"]}"
    _refused(io_server, "typed", body, 400, "surrogate")
    # A surrogate pair is one character, and fine.
    ok = body.replace(b"\\udc00", b"\\ud83d\\ude00")
    assert _post(io_server, "typed", ok).status_code == 200


@pytest.mark.parametrize("shape", [[0, 1 << 62], [1 << 62, 0], [0, 1 << 49]])
def test_empty_tensors_with_huge_axes_are_a_400(io_server: Any, shape: list[int]) -> None:
    # [0, 2**62] was a 500: NumPy refuses to shape even an empty array so.
    body = json.dumps({"inputs": [{"name": "x", "shape": shape, "datatype": "FP32", "data": []}]}).encode()
    _refused(io_server, "any2d", body, 400, "axes multiply")
    binary = body.replace(b'"data": []', b'"parameters": {"binary_data_size": 0}')
    _refused(io_server, "any2d", binary, 400, "axes multiply", **{"Inference-Header-Content-Length": str(len(binary))})


def test_an_empty_tensor_is_held_to_the_memory_budget_as_if_its_empty_axes_were_1(io_server: Any) -> None:
    # MiniLM's [2**40, 0] froze a server (issue 27, item 5); ONNX Runtime loops over such axes in some
    # kernels, so the server does not hand them over.
    for shape in ([0, 1 << 40], [1 << 40, 0]):
        body = json.dumps({"inputs": [{"name": "x", "shape": shape, "datatype": "FP32", "data": []}]}).encode()
        _refused(io_server, "any2d", body, 413, "empty axes counted as 1")
    body = json.dumps({"inputs": [{"name": "x", "shape": [0, 4096], "datatype": "FP32", "data": []}]}).encode()
    response = _post(io_server, "any2d", body)
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["shape"] == [0, 4096]


@pytest.mark.parametrize(("case", "body", "key"), [
    ("inputs twice", b'{"inputs": [], "inputs": [' + json.dumps(GOOD).encode() + b"]}", "inputs"),
    ("a tensor's name twice", b'{"inputs": [{"name": "nope", "name": "x", "shape": [1, 4], "datatype": "FP32", '
                              b'"data": [1, 2, 3, 4]}]}', "name"),
    ("escaped the second time", b'{"inputs": [' + json.dumps(GOOD).encode() + b'], "\\u0069nputs": []}', "inputs"),
    ("in the parameters", b'{"parameters": {"binary_data_output": true, "binary_data_output": false}, "inputs": ['
                          + json.dumps(GOOD).encode() + b"]}", "binary_data_output"),
    ("beside NaN", b'{"inputs": [], "inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", '
                   b'"data": [NaN, 1, 2, 3]}]}', "inputs"),
])
def test_duplicate_keys_are_a_400(io_server: Any, case: str, body: bytes, key: str) -> None:
    _refused(io_server, "tiny", body, 400, f"duplicate key {key!r}")


def test_equal_strings_that_are_not_keys_are_fine(io_server: Any) -> None:
    document = {"id": "inputs", "inputs": [GOOD], "parameters": {"note": "{\"inputs\": 1, \"inputs\": 2}"}}
    body = json.dumps(document).encode()
    assert loads_strict(body, fast=True) == document
    assert _post(io_server, "tiny", body).status_code == 200


def test_a_response_past_max_response_is_refused_before_the_run(io_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import sealtrace.serve.service as service_module

    def no_run(*_: Any, **__: Any) -> Any:
        raise AssertionError("the model ran although its outputs' declared shapes were over the limit")

    monkeypatch.setattr(service_module, "record_run", no_run)
    rows = 400  # y[N, 3] FP32: 4,800 bytes, over the fixture's 4,096
    body = json.dumps({"inputs": [{"name": "x", "shape": [rows, 4], "datatype": "FP32", "data": [0.0] * (4 * rows)}]})
    _refused(io_server, "tiny", body.encode(), 413, "--max-response")


def test_a_response_past_max_response_is_refused_once_computed(io_server: Any) -> None:
    # Tile's output shape is known only once it ran: the limit applies before it is encoded.
    for repeats, status in ((2000, 413), (10, 200)):
        body = json.dumps({"inputs": [{"name": "x", "shape": [4], "datatype": "FP32", "data": X},
                                      {"name": "repeats", "shape": [1], "datatype": "INT64", "data": [repeats]}]})
        if status == 413:
            _refused(io_server, "tile", body.encode(), 413, "--max-response")
        else:
            assert _post(io_server, "tile", body.encode()).status_code == 200


def test_json_has_its_own_smaller_limit(tmp_path: Path, containers: dict[str, Path], keys: Any) -> None:
    from fastapi.testclient import TestClient

    from sealtrace.serve import InferenceService, ServeConfig, create_app

    rows = 2000
    values = np.linspace(-1, 1, rows * 4, dtype=np.float32)
    document = json.dumps({"inputs": [{"name": "x", "shape": [rows, 4], "datatype": "FP32",
                                       "data": values.tolist()}]}).encode()
    header = json.dumps({"inputs": [{"name": "x", "shape": [rows, 4], "datatype": "FP32",
                                     "parameters": {"binary_data_size": values.nbytes}}]}).encode()
    config = ServeConfig(models=[str(containers["tiny"])], ledger=str(tmp_path / "ledger.db"), trust=[str(keys[1])],
                         sign_key=str(keys[0]), audit="io")
    app = create_app(InferenceService(config), max_json=len(document) - 1)
    with TestClient(app, raise_server_exceptions=False) as client:
        client.service = app.state.service
        _refused(client, "tiny", document, 413, "--max-json")  # refused from its Content-Length

        def chunks() -> Any:  # no Content-Length: cut off while streaming
            for start in range(0, len(document), 4096):
                yield document[start : start + 4096]

        streamed = client.post("/v2/models/tiny/infer", content=chunks(), headers={"Content-Type": "application/json"})
        assert streamed.status_code == 413 and "--max-json" in streamed.json()["error"]
        # The same tensor as binary data is read as it lies, up to --max-body.
        binary = _post(client, "tiny", header + values.tobytes(), **{"Inference-Header-Content-Length": str(len(header))})
        assert binary.status_code == 200, binary.text
        # A JSON part past the limit inside a binary body is refused too.
        padded = header[:-1] + b', "id": "' + b"x" * len(document) + b'"}'
        _refused(client, "tiny", padded + values.tobytes(), 413, "--max-json",
                 **{"Inference-Header-Content-Length": str(len(padded))})
        assert client.service.ledger.size == 1
