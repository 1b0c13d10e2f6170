"""Triton's extensions beyond inference: Triton's scheduling parameters, which the server refuses rather
than ignore."""

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


@pytest.mark.parametrize("parameter, value", [
    ("sequence_id", 7), ("sequence_start", True), ("sequence_end", True), ("priority", 1), ("timeout", 1000),
])
def test_scheduling_parameters_are_refused(client: Any, parameter: str, value: Any) -> None:
    size = client.service.ledger.size
    body = {**json.loads(REQUEST), "parameters": {parameter: value}}
    response = client.post("/v2/models/tiny/infer", json=body)
    assert response.status_code == 400 and response.json()["error"].startswith(f"parameters.{parameter}: not supported")
    assert client.service.ledger.size == size
