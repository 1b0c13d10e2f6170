"""Logs recorded on one machine, re-executed on another (issue 30): the ACAS Xu logs under
tests/fixtures/replay were recorded once, with portable numerics version 1, on the development host
(x86-64, OpenBLAS, NumPy 2). Wherever this runs, both sealtrace's replay and sealverify's must
reproduce every step's bits. The networks are not committed: each is sealed here from
../shared/data/acasxu, and the log's link to the container (its digest) must hold, which also pins
sealing as deterministic.

Re-record (only with a new version of the specification or of the log format)::

    python -m tests.verifier.test_replay_fixtures
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from sealtrace import Session, zoo
from sealtrace.audit import audited_run, replay_log
from sealtrace.container import seal_model
from tests.conftest import require_material

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "replay"
# Both ends of the set and one between; inputs drawn from property 1's box, and one far outside it.
NETWORKS = (zoo.ACASXU_NETWORKS[0], zoo.ACASXU_NETWORKS[22], zoo.ACASXU_NETWORKS[-1])
INPUT_SEED = 30


def _feeds(index: int) -> dict[str, np.ndarray]:
    (point,) = zoo.acasxu_inputs(prop=1, count=1, seed=INPUT_SEED + index)
    if index == 2:
        point = {name: (value * np.float32(1e4)).astype(np.float32) for name, value in point.items()}
    return point


def _fixture(network: str) -> Path:
    return FIXTURES / (network.removesuffix(".onnx") + ".jsonl")


def _seal(network: str, folder: Path) -> Path:
    container = folder / network.replace(".onnx", ".seal")
    seal_model(zoo.acasxu_file(network), container)
    return container


@pytest.mark.parametrize("network", NETWORKS)
def test_a_log_recorded_elsewhere_replays_bit_identical_in_both(network: str, sealverify: Path,
                                                                 tmp_path: Path) -> None:
    require_material(lambda: zoo.acasxu_file(network))
    container = _seal(network, tmp_path)
    log = _fixture(network)
    report = replay_log(log, container)
    assert report.identical, f"sealtrace's replay: {report.first_difference or report.structure_difference}"
    done = subprocess.run([str(sealverify), "replay", str(log), "--container", str(container)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "bit-identical" in done.stdout


def record() -> None:
    """Write the fixtures (the log's samples hold every input value, so no inputs file is needed)."""
    import tempfile

    FIXTURES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        for index, network in enumerate(NETWORKS):
            container = _seal(network, Path(folder))
            _fixture(network).unlink(missing_ok=True)
            audited_run(Session(str(container)), _feeds(index), audit=_fixture(network), sample=8)


if __name__ == "__main__":
    record()
