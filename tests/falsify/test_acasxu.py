"""Real ACAS Xu instances (VNN-COMP 2021): violated properties are found and certified, including two
that the published PGD falsifier DNNF missed (prop_2 on 5_3, prop_7 on 1_9); an unsat one stays unknown."""

from __future__ import annotations

from pathlib import Path

import pytest

from sealtrace import zoo
from sealtrace.audit import verify_log
from sealtrace.falsify import SearchSettings, falsify, load_vnnlib
from tests.conftest import require_material

pytestmark = pytest.mark.slow


def instance(network: str, prop: int) -> tuple[Path, Path]:
    """The network and property files (missing material fails in CI, skips elsewhere, saying how to get it)."""

    def locate() -> tuple[Path, Path]:
        return zoo.acasxu_file(f"ACASXU_run2a_{network}_batch_2000.onnx"), zoo.acasxu_file(f"prop_{prop}.vnnlib")

    found: tuple[Path, Path] = require_material(locate)
    return found


@pytest.mark.parametrize(("network", "prop"), [("2_1", 2), ("1_7", 3), ("2_9", 8), ("5_3", 2), ("1_9", 7)])
def test_sat_instance_is_found_and_certified(network: str, prop: int, tmp_path: Path) -> None:
    onnx_path, vnnlib_path = instance(network, prop)
    log = tmp_path / "cex.jsonl"
    result = falsify(onnx_path, load_vnnlib(vnnlib_path), SearchSettings(timeout_s=60), audit=log,
                     cache_dir=tmp_path)
    assert result.status == "sat" and result.certified
    cex = result.counterexample
    assert cex is not None and cex.inside_box and all(v.holds for v in cex.values)
    assert result.batching == "leading"  # the converted module takes the batch on its leading axis
    assert verify_log(log, model=result.container, inputs=cex.feeds).ok
    assert cex.feeds["input"].shape == (1, 1, 1, 5)


def test_unsat_instance_stays_unknown(tmp_path: Path) -> None:
    onnx_path, vnnlib_path = instance("1_1", 1)
    result = falsify(onnx_path, load_vnnlib(vnnlib_path), SearchSettings(timeout_s=2), cache_dir=tmp_path)
    assert result.status == "unknown" and result.stats.stopped_by == "timeout"
    assert result.total_s < 4
