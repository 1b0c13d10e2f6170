"""A client nobody here wrote: NVIDIA's tritonclient[http] runs every real model of MODELS.md against the
server, with binary tensor data on and off. On the reference backend (--audit full) the outputs equal
a local Session run bit for bit; on ONNX Runtime (--audit deferred) they agree with it within the
model's documented tolerance. Every answer's record is in the ledger. On the small 'tiny' model it
also reads the model configuration and the inference statistics, and compresses requests and
responses every way it can."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils as triton_utils

from sealtrace import Session, zoo
from sealtrace.container import seal_model
from sealtrace.serve import InferenceService, ServeConfig, create_app
from tests.conftest import require_material
from tests.serve.conftest import ThreadServer
from tests.test_real_models import relative_error


@pytest.fixture(scope="module")
def real_containers(tmp_path_factory: pytest.TempPathFactory, keys: tuple[Path, Path]) -> dict[str, tuple[Path, dict[str, np.ndarray]]]:
    """Every real model sealed and signed, with its real inputs, by zoo key."""
    folder = tmp_path_factory.mktemp("real-seal")
    sealed = {}
    for real in zoo.MODELS:
        path = require_material(lambda real=real: real.path)
        feeds = require_material(real.inputs)
        target = folder / f"{real.key}.seal"
        seal_model(path, target, sign_with=keys[0])
        sealed[real.key] = (target, feeds)
    return sealed


@pytest.fixture(scope="module", params=["full", "deferred"])
def server(request: pytest.FixtureRequest, real_containers: Any, keys: tuple[Path, Path],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ThreadServer, InferenceService]]:
    """One server per audit mode (reference for full, ONNX Runtime for deferred) over every real model."""
    mode = request.param
    config = ServeConfig(models=[str(path) for path, _ in real_containers.values()],
                         ledger=str(tmp_path_factory.mktemp(f"ledger-{mode}") / "ledger.db"), trust=[str(keys[1])],
                         sign_key=str(keys[0]), audit=mode, replay_drain_seconds=0)
    service = InferenceService(config)
    with ThreadServer(create_app(service)) as running:
        yield mode, running, service


def _infer(client: Any, name: str, feeds: dict[str, np.ndarray], binary: bool, **options: Any) -> Any:
    inputs = []
    for input_name, value in feeds.items():
        tensor = httpclient.InferInput(input_name, list(value.shape), triton_utils.np_to_triton_dtype(value.dtype))
        tensor.set_data_from_numpy(value, binary_data=binary)
        inputs.append(tensor)
    return client.infer(name, inputs, request_id=f"{name}-{binary}", **options)


@pytest.mark.slow
@pytest.mark.parametrize("key", [m.key for m in zoo.MODELS])
def test_tritonclient_runs_every_real_model(key: str, server: Any, real_containers: Any, keys: tuple[Path, Path]) -> None:
    mode, running, service = server
    path, feeds = real_containers[key]
    client = httpclient.InferenceServerClient(running.url, network_timeout=120.0)
    assert client.is_server_live() and client.is_model_ready(key)
    metadata = client.get_model_metadata(key)
    assert sorted(t["name"] for t in metadata["inputs"]) == sorted(feeds)
    reference = Session(path, trust=[keys[1]])
    expected = dict(zip(reference.plan.output_names, reference.run(None, feeds), strict=True))
    for binary in (True, False):
        result = _infer(client, key, feeds, binary)
        response = result.get_response()
        assert response["id"] == f"{key}-{binary}"
        _, record = service.ledger.record(response["parameters"]["record_id"])  # durable before the 200
        assert record["audit"] == mode and record["model"]["name"] == key
        for name, want in expected.items():
            got = result.as_numpy(name)
            assert got is not None and got.dtype == want.dtype and got.shape == want.shape, (name, got)
            if mode == "full":
                assert got.tobytes() == want.tobytes(), f"{key} {name} (binary={binary}) differs from the local run"
            else:
                error = relative_error(got, want)
                assert error <= zoo.model(key).tolerance, f"{key} {name}: relative error {error:.3g}"
    client.close()


@pytest.fixture(scope="module")
def tiny_server(containers: dict[str, Path], keys: tuple[Path, Path],
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ThreadServer, Any]]:
    """A server (reference backend, full audit) over the small 'tiny' model; its client."""
    config = ServeConfig(models=[str(containers["tiny"])], ledger=str(tmp_path_factory.mktemp("tiny") / "ledger.db"),
                         trust=[str(keys[1])], sign_key=str(keys[0]), audit="full")
    with ThreadServer(create_app(InferenceService(config))) as running:
        client = httpclient.InferenceServerClient(running.url, network_timeout=30.0)
        yield running, client
        client.close()


def test_tritonclient_reads_the_model_config(tiny_server: Any) -> None:
    _, client = tiny_server
    config = client.get_model_config("tiny")
    assert config == client.get_model_config("tiny", "1")
    assert (config["name"], config["platform"], config["backend"], config["max_batch_size"]) == \
        ("tiny", "sealtrace_reference", "reference", 0)
    assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 4]}]
    assert config["output"] == [{"name": "y", "data_type": "TYPE_FP32", "dims": [-1, 3]}]
    with pytest.raises(triton_utils.InferenceServerException, match="no version"):
        client.get_model_config("tiny", "2")


@pytest.mark.parametrize("response_compression", [None, "gzip", "deflate"])
@pytest.mark.parametrize("request_compression", [None, "gzip", "deflate"])
def test_tritonclient_compresses_both_ways(tiny_server: Any, containers: dict[str, Path], keys: tuple[Path, Path],
                                           request_compression: str | None, response_compression: str | None) -> None:
    _, client = tiny_server
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    (want,) = Session(containers["tiny"], trust=[keys[1]]).run(None, {"x": x})
    for binary in (True, False):
        result = _infer(client, "tiny", {"x": x}, binary, request_compression_algorithm=request_compression,
                        response_compression_algorithm=response_compression)
        assert result.as_numpy("y").tobytes() == want.tobytes(), (request_compression, response_compression, binary)


def test_tritonclient_reads_inference_statistics(tiny_server: Any) -> None:
    _, client = tiny_server
    before = client.get_inference_statistics("tiny")["model_stats"][0]["inference_stats"]["success"]["count"]
    x = np.zeros((2, 4), np.float32)
    for binary in (True, False):
        _infer(client, "tiny", {"x": x}, binary)
    with pytest.raises(triton_utils.InferenceServerException, match="priority"):
        _infer(client, "tiny", {"x": x}, True, priority=1)
    (stat,) = client.get_inference_statistics("tiny", "1")["model_stats"]
    assert (stat["name"], stat["version"]) == ("tiny", "1")
    assert stat["inference_stats"]["success"]["count"] == stat["inference_count"] == before + 2
    assert stat["inference_stats"]["fail"]["count"] >= 1 and stat["inference_stats"]["compute_infer"]["ns"] > 0
    assert client.get_inference_statistics()["model_stats"] == [stat]
