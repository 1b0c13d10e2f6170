"""Triton's extensions beyond inference: the model configuration and statistics endpoints, compressed
request and response bodies (zip bombs stop at --max-body), and Triton's scheduling parameters, which
the server refuses rather than ignore. tritonclient itself is exercised in test_triton_client.py."""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sealtrace.serve.encoding import decode_content, response_coding
from sealtrace.serve.protocol import PayloadTooLargeError
from tests.serve.conftest import serving

X = np.arange(8, dtype=np.float32).reshape(2, 4) / 7 - 0.5
REQUEST = json.dumps({"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32",
                                  "data": X.reshape(-1).tolist()}]}).encode()
LIMIT = 64 << 10


def _bomb(size: int, wbits: int = 16 + zlib.MAX_WBITS) -> bytes:
    """``size`` zero bytes compressed (about a thousandth of that)."""
    deflater = zlib.compressobj(9, wbits=wbits)
    chunk = bytes(1 << 20)
    return b"".join(deflater.compress(chunk) for _ in range(size >> 20)) + deflater.flush()


@pytest.fixture
def client(tmp_path: Path, containers: dict[str, Path], keys: tuple[Path, Path]) -> Any:
    with serving(tmp_path, [containers["tiny"], containers["typed"]], keys, audit="io", max_body=LIMIT) as served:
        yield served


def test_model_config_in_tritons_shape(client: Any) -> None:
    assert {"model_configuration", "statistics"} <= set(client.get("/v2").json()["extensions"])
    config = client.get("/v2/models/tiny/config").json()
    assert config["name"] == "tiny" and config["max_batch_size"] == 0
    assert config["platform"] == "sealtrace_onnxruntime" and config["backend"] == "onnxruntime"
    assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 4]}]
    assert config["output"] == [{"name": "y", "data_type": "TYPE_FP32", "dims": [-1, 3]}]
    metadata = client.get("/v2/models/tiny").json()["parameters"]
    assert config["parameters"]["plan_digest"] == {"string_value": metadata["plan_digest"]}
    assert client.get("/v2/models/tiny/versions/1/config").json() == config
    typed = {t["name"]: t["data_type"] for t in client.get("/v2/models/typed/config").json()["input"]}
    assert typed == {"i": "TYPE_INT64", "flag": "TYPE_BOOL", "text": "TYPE_STRING", "half": "TYPE_FP16"}
    assert client.get("/v2/models/nope/config").status_code == 404
    assert client.get("/v2/models/tiny/versions/7/config").status_code == 404


def test_statistics_count_successes_failures_and_phases(client: Any) -> None:
    empty = client.get("/v2/models/tiny/stats").json()["model_stats"]
    assert [(s["name"], s["version"], s["inference_count"], s["last_inference"]) for s in empty] == [("tiny", "1", 0, 0)]
    for _ in range(2):
        assert client.post("/v2/models/tiny/infer", content=REQUEST).status_code == 200
    assert client.post("/v2/models/tiny/infer", content=b"{").status_code == 400
    assert client.post("/v2/models/nope/infer", content=REQUEST).status_code == 404  # no model, no statistics
    (stat,) = client.get("/v2/models/tiny/versions/1/stats").json()["model_stats"]
    assert stat["inference_count"] == stat["execution_count"] == 2 and stat["last_inference"] > 1.7e12
    inference = stat["inference_stats"]
    assert inference["success"]["count"] == 2 and inference["fail"]["count"] == 1
    for phase in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert inference[phase]["count"] == 2 and 0 < inference[phase]["ns"] <= inference["success"]["ns"], phase
    assert inference["cache_hit"] == inference["cache_miss"] == {"count": 0, "ns": 0}
    every = client.get("/v2/models/stats").json()["model_stats"]
    assert [s["name"] for s in every] == ["tiny", "typed"] and every[0] == stat
    assert client.get("/v2/models/nope/stats").status_code == 404
    assert client.get("/v2/models/tiny/versions/7/stats").status_code == 404


@pytest.mark.parametrize("coding, compress", [("gzip", gzip.compress), ("deflate", zlib.compress),
                                              ("identity", lambda body: body), ("GZIP", gzip.compress)])
def test_compressed_request_bodies(client: Any, coding: str, compress: Any) -> None:
    response = client.post("/v2/models/tiny/infer", content=compress(REQUEST), headers={"Content-Encoding": coding})
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["shape"] == [2, 3]


def test_zip_bomb_stops_at_the_body_limit(client: Any) -> None:
    size = client.service.ledger.size
    bomb = _bomb(16 << 20)
    assert len(bomb) < LIMIT
    response = client.post("/v2/models/tiny/infer", content=bomb, headers={"Content-Encoding": "gzip"})
    assert response.status_code == 413 and "decompressed" in response.json()["error"]
    assert client.service.ledger.size == size


def test_inflation_never_passes_the_limit() -> None:
    bomb = _bomb(256 << 20, wbits=zlib.MAX_WBITS)
    tracemalloc.start()
    try:
        with pytest.raises(PayloadTooLargeError):
            decode_content(bomb, "deflate", 1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"{peak} bytes allocated inflating a 256 MiB bomb with a 1 MiB limit"


@pytest.mark.parametrize("body, coding, what", [
    (b"PK\x03\x04 a zip archive, not gzip", "gzip", "not a valid gzip stream"),
    (REQUEST, "deflate", "not a valid deflate stream"),
    (gzip.compress(REQUEST)[:-9], "gzip", "truncated"),
    (gzip.compress(REQUEST) + b"tail", "gzip", "after the end"),
])
def test_corrupt_compressed_bodies_are_400s(client: Any, body: bytes, coding: str, what: str) -> None:
    response = client.post("/v2/models/tiny/infer", content=body, headers={"Content-Encoding": coding})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error.startswith("Content-Encoding:") and what in error, error


def test_unknown_content_encoding_is_415(client: Any) -> None:
    response = client.post("/v2/models/tiny/infer", content=REQUEST, headers={"Content-Encoding": "br"})
    assert response.status_code == 415 and "Content-Encoding" in response.json()["error"]


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_compressed_binary_responses_keep_the_header_length(client: Any, coding: str) -> None:
    body = json.dumps({"inputs": json.loads(REQUEST)["inputs"], "parameters": {"binary_data_output": True}}).encode()
    response = client.post("/v2/models/tiny/infer", content=body, headers={"Accept-Encoding": coding})
    assert response.status_code == 200 and response.headers["Content-Encoding"] == coding
    length = int(response.headers["Inference-Header-Content-Length"])  # of the decompressed body (httpx inflated it)
    header = json.loads(response.content[:length])
    assert header["outputs"][0]["parameters"]["binary_data_size"] == len(response.content) - length == 2 * 3 * 4
    plain = client.post("/v2/models/tiny/infer", content=body, headers={"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in plain.headers and plain.content[length:] == response.content[length:]


@pytest.mark.parametrize("header, coding", [
    (None, None), ("identity", None), ("gzip", "gzip"), ("deflate", "deflate"), ("br, deflate", "deflate"),
    ("deflate, gzip", "gzip"), ("gzip;q=0.5, deflate", "deflate"), ("gzip;q=0, deflate;q=0", None),
    ("GZIP ; Q=1", "gzip"), ("gzip;q=nan", None), ("deflate;q=2", None), ("*", None),
])
def test_accept_encoding_choice(header: str | None, coding: str | None) -> None:
    assert response_coding(header) == coding


@pytest.mark.parametrize("parameter, value", [
    ("sequence_id", 7), ("sequence_start", True), ("sequence_end", True), ("priority", 1), ("timeout", 1000),
])
def test_scheduling_parameters_are_refused(client: Any, parameter: str, value: Any) -> None:
    size = client.service.ledger.size
    body = {**json.loads(REQUEST), "parameters": {parameter: value}}
    response = client.post("/v2/models/tiny/infer", json=body)
    assert response.status_code == 400 and response.json()["error"].startswith(f"parameters.{parameter}: not supported")
    assert client.service.ledger.size == size
