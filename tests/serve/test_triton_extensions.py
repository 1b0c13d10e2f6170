"""Triton's extensions beyond inference: the model configuration and statistics endpoints, and Triton's
scheduling parameters, which the server refuses rather than ignore. tritonclient itself is exercised in test_triton_client.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.serve.conftest import serving

X = np.arange(8, dtype=np.float32).reshape(2, 4) / 7 - 0.5
REQUEST = json.dumps({"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32",
                                  "data": X.reshape(-1).tolist()}]}).encode()


@pytest.fixture
def client(tmp_path: Path, containers: dict[str, Path], keys: tuple[Path, Path]) -> Any:
    with serving(tmp_path, [containers["tiny"], containers["typed"]], keys, audit="io") as served:
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


@pytest.mark.parametrize("parameter, value", [
    ("sequence_id", 7), ("sequence_start", True), ("sequence_end", True), ("priority", 1), ("timeout", 1000),
])
def test_scheduling_parameters_are_refused(client: Any, parameter: str, value: Any) -> None:
    size = client.service.ledger.size
    body = {**json.loads(REQUEST), "parameters": {parameter: value}}
    response = client.post("/v2/models/tiny/infer", json=body)
    assert response.status_code == 400 and response.json()["error"].startswith(f"parameters.{parameter}: not supported")
    assert client.service.ledger.size == size
