"""``sealtrace diff``: two captures or two audit logs compared value by value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from sealtrace.cli import main
from sealtrace.parity.diff import diff_runs
from tests.parity.test_parity import conv_net


@pytest.fixture
def recorded(tmp_path: Path) -> dict[str, Path]:
    model = tmp_path / "net.onnx"
    onnx.save(conv_net(), model)
    changed = onnx.ModelProto()
    changed.CopyFrom(conv_net())
    w2 = onnx.numpy_helper.to_array(changed.graph.initializer[1]).copy()
    w2 += np.float32(0.01)
    changed.graph.initializer[1].CopyFrom(onnx.numpy_helper.from_array(w2, "w2"))
    other = tmp_path / "changed.onnx"
    onnx.save(changed, other)
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32))
    paths = {}
    for label, path in (("a", model), ("again", model), ("b", other)):
        capture, log = tmp_path / f"cap_{label}", tmp_path / f"{label}.jsonl"
        assert main(["run", str(path), "--input", f"x={x}", "--capture", str(capture), "--audit", str(log)]) == 0
        paths[f"cap_{label}"], paths[f"log_{label}"] = capture, log
    return paths


def test_identical_runs(recorded: dict[str, Path]) -> None:
    for kind in ("cap", "log"):
        report = diff_runs(recorded[f"{kind}_a"], recorded[f"{kind}_again"])
        assert report.passed and report.drift_origin is None
        assert all(e.status == "identical" for e in report.entries)


def test_changed_weight_found_in_captures_and_logs(recorded: dict[str, Path]) -> None:
    captures = diff_runs(recorded["cap_a"], recorded["cap_b"])
    assert not captures.passed
    assert captures.drift_origin is not None and captures.drift_origin.step == "conv2"
    assert captures.drift_origin.status == "exceeds" and captures.drift_origin.diff is not None
    logs = diff_runs(recorded["log_a"], recorded["log_b"])
    assert logs.drift_origin is not None and logs.drift_origin.step == "conv2"
    before = [e for e in logs.entries if e.step in ("conv1", "relu1")]
    assert before and all(e.status == "identical" for e in before)


def test_cli_exit_codes(recorded: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", str(recorded["cap_a"]), str(recorded["cap_again"])]) == 0
    assert main(["diff", str(recorded["log_a"]), str(recorded["log_b"])]) == 1
    assert main(["diff", str(recorded["cap_a"]), str(tmp_path / "nothing")]) == 2
    assert main(["diff", str(recorded["cap_a"]), str(recorded["cap_b"]), "--json"]) == 1
    assert '"format": "sealtrace.diff.v1"' in capsys.readouterr().out
