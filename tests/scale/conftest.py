"""Scale fixtures: sealed models, datasets of requests, keys, and one small multi-node Ray cluster.

The cluster is started once per test session (per xdist worker; the Ray tests share one xdist group,
so one worker runs them all): a head node without CPUs and two worker nodes of one CPU each, on this machine
(``ray.cluster_utils.Cluster``), health checks fast so that a removed node is noticed within seconds.
Without Ray the Ray tests skip locally and fail in CI.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealtrace.cli import main
from tests.container.conftest import tiny_model


def chain_model(steps: int = 60, size: int = 32) -> onnx.ModelProto:
    """x[1,size] through ``steps`` MatMul+Tanh pairs: slow enough (a few ms a run with the full audit)
    that tasks are still running when a test removes a node."""
    rng = np.random.default_rng(7)
    nodes, inits, current = [], [], "x"
    for i in range(steps):
        w = numpy_helper.from_array((rng.standard_normal((size, size)) / np.sqrt(size)).astype(np.float32), f"w{i}")
        inits.append(w)
        nodes.append(helper.make_node("MatMul", [current, f"w{i}"], [f"m{i}"], name=f"matmul{i}"))
        nodes.append(helper.make_node("Tanh", [f"m{i}"], [f"t{i}"], name=f"tanh{i}"))
        current = f"t{i}"
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, size])],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, [1, size])], inits,
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])


def seal(model: onnx.ModelProto, where: Path, name: str, key: Path) -> Path:
    onnx.save(model, where / f"{name}.onnx")
    assert main(["seal", str(where / f"{name}.onnx"), "-o", str(where / f"{name}.seal"), "--sign", str(key)]) == 0
    return where / f"{name}.seal"


def npz_dataset(where: Path, count: int, size: int, seed: int = 0) -> Path:
    """``count`` requests x[1,size] (float32), one .npz file each, named in position order."""
    where.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        np.savez(where / f"req{i:05d}.npz", x=rng.standard_normal((1, size)).astype(np.float32))
    return where


@pytest.fixture(scope="session")
def material(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A ledger key, the tiny model and the chain model sealed, and datasets for each."""
    w = tmp_path_factory.mktemp("scale")
    assert main(["keygen", "-o", str(w / "k.pem")]) == 0
    key = w / "k.pem"
    return {
        "dir": w, "key": key, "pub": w / "k.pub",
        "tiny": seal(tiny_model(), w, "tiny", key), "chain": seal(chain_model(), w, "chain", key),
        "tiny_data": npz_dataset(w / "tiny_data", 12, 2), "chain_data": npz_dataset(w / "chain_data", 24, 32, seed=1),
    }


def copy_dataset(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def records_of(location: str | Path) -> list[dict[str, Any]]:
    from sealtrace.ledger import Ledger

    with Ledger.open(str(location), readonly=True) as ledger:
        return [record for _, record in ledger.records()]


def verify_ok(location: str | Path, pub: Path) -> None:
    from sealtrace.ledger import Ledger

    with Ledger.open(str(location), readonly=True) as ledger:
        report = ledger.verify([pub])
    assert report.ok and report.unsigned == 0, report.problems


def _require_ray() -> Any:
    try:
        import ray
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("Ray is needed in CI: pip install 'sealtrace[ray]'")
        pytest.skip("Ray is not installed (pip install 'sealtrace[ray]')")
    return ray


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """A head node that runs no tasks (no CPU: the driver's node) and two worker nodes of one CPU
    each, on this machine; this process connected."""
    ray = _require_ray()
    from ray.cluster_utils import Cluster

    fast_health = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                   "health_check_failure_threshold": 3}
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False, "_system_config": fast_health})
    cluster.add_node(num_cpus=1)
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
