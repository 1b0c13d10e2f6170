"""Serve fixtures: sealed containers (small ones made here, the real models of MODELS.md), signing
keys, a service + app in this process, and a real uvicorn server on 127.0.0.1 in a thread."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealtrace.container import seal_model
from sealtrace.signing import generate_keypair
from tests.conftest import make_model, mlp_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(private, public) PEM paths: the key that signs containers and tree heads."""
    return generate_keypair(tmp_path_factory.mktemp("serve-keys") / "key.pem")


def typed_model() -> onnx.ModelProto:
    """Identity over INT64, BOOL, BYTES (ONNX strings) and FP16 inputs: the protocol's other datatypes."""
    kinds = {"i": TensorProto.INT64, "flag": TensorProto.BOOL, "text": TensorProto.STRING, "half": TensorProto.FLOAT16}
    nodes = [helper.make_node("Identity", [name], [f"{name}_out"], name=f"id_{name}") for name in kinds]
    return make_model(
        nodes,
        [helper.make_tensor_value_info(name, kind, ["N"]) for name, kind in kinds.items()],
        [helper.make_tensor_value_info(f"{name}_out", kind, ["N"]) for name, kind in kinds.items()],
        name="typed",
    )


def loop_model() -> onnx.ModelProto:
    """start[1] + 1, ``trips`` times (an ONNX Loop): a run as long as a request asks."""
    one = numpy_helper.from_array(np.ones(1, np.float32), "one")
    body = helper.make_graph(
        [helper.make_node("Add", ["y_in", "one"], ["y_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("y_out", TensorProto.FLOAT, [1])],
        initializer=[one],
    )
    return make_model([helper.make_node("Loop", ["trips", "", "start"], ["y"], body=body)],
                      [helper.make_tensor_value_info("trips", TensorProto.INT64, []),
                       helper.make_tensor_value_info("start", TensorProto.FLOAT, [1])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], name="loop")


@pytest.fixture(scope="session")
def containers(tmp_path_factory: pytest.TempPathFactory, keys: tuple[Path, Path]) -> dict[str, Path]:
    """Signed containers of the small models: 'tiny' and 'typed'."""
    folder = tmp_path_factory.mktemp("serve-models")
    made = {}
    for name, model in (("tiny", mlp_model(batch="N")), ("typed", typed_model())):
        made[name] = folder / f"{name}.seal"
        seal_model(model, made[name], sign_with=keys[0])
    return made


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ThreadServer:
    """A real uvicorn server on 127.0.0.1 (a free port) in a thread of this process; stops on exit."""

    def __init__(self, app: Any, **ssl: Any) -> None:
        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", **ssl))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        self.sock.close()

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"


@contextlib.contextmanager
def serving(tmp_path: Path, models: list[Path], keys: tuple[Path, Path], ledger: str | None = None,
            tokens: Any = None, max_body: int | None = None, **options: Any) -> Iterator[Any]:
    """A service over ``models`` and its app, started (lifespan run) with Starlette's TestClient."""
    from fastapi.testclient import TestClient

    from sealtrace.serve import InferenceService, ServeConfig, create_app

    config = ServeConfig(models=[str(m) for m in models], ledger=ledger or str(tmp_path / "ledger.db"),
                         trust=[str(keys[1])], sign_key=str(keys[0]), **options)
    service = InferenceService(config)
    extra = {"max_body": max_body} if max_body else {}
    app = create_app(service, tokens=tokens, **extra)
    with TestClient(app, raise_server_exceptions=False) as client:
        client.service = service  # type: ignore[attr-defined]
        yield client


def postgres_missing(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL needed in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A throwaway PostgreSQL server (tests/ledger/postgres.py) for this session; its base DSN."""
    from tests.ledger.postgres import PostgresUnavailableError, temporary_postgres

    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        postgres_missing("psycopg and psycopg-pool are not installed (pip install 'sealtrace[ledger]')")
    with contextlib.ExitStack() as stack:
        try:
            dsn = stack.enter_context(temporary_postgres(fsync=False))
        except PostgresUnavailableError as exc:
            postgres_missing(str(exc))
        yield dsn


def postgres_location(base: str) -> str:
    """A DSN with a fresh schema of its own on the server at ``base``."""
    import uuid

    import psycopg

    schema = f"s_{uuid.uuid4().hex}"
    with psycopg.connect(base, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
    return f"{base}?options=-csearch_path%3D{schema}"
