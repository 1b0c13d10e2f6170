"""Per-leaf export parity: PyTorch leaf module calls vs the dynamo ONNX export on reference and ORT."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch
pytest.importorskip("onnxscript")

from sealtrace.cli import main  # noqa: E402
from sealtrace.torchbridge import check_export  # noqa: E402
from tests.torchbridge import models  # noqa: E402


def test_reused_modules_appear_once_per_call() -> None:
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))
    result = check_export(models.reused_block(), x)
    labels = [c.label for c in result.calls]
    assert labels == ["fc#0", "act#0", "fc#1", "act#1", "norm#0", "head#0"]
    assert not result.unmapped
    assert result.passed
    for name in ("reference", "onnxruntime"):
        report = result.reports[name]
        assert [s.name for s in report.steps] == labels
        assert all(s.status == "ok" for s in report.steps)
        assert report.backends == (name, "pytorch")
    # The norm's output was recorded before the in-place doubling.
    norm = result.calls[4].outputs[0]
    assert np.allclose(norm.mean(axis=-1), 0, atol=1e-5)


def test_a_wrong_export_is_found_at_its_leaf(monkeypatch: pytest.MonkeyPatch) -> None:
    # Simulate an exporter bug in the second call of `fc`: its output is scaled by 1.01.
    import onnx
    from onnx import helper, numpy_helper

    from sealtrace.torchbridge import export_parity

    original = export_parity._export

    def buggy_export(*args, **kwargs):  # type: ignore[no-untyped-def]
        model = original(*args, **kwargs)
        nodes = list(model.graph.node)
        in_fc = [i for i, n in enumerate(nodes) if export_parity._scope_of(n) == "fc"]
        groups: list[list[int]] = []
        for i in in_fc:  # consecutive nodes of `fc` are one call
            if groups and groups[-1][-1] == i - 1:
                groups[-1].append(i)
            else:
                groups.append([i])
        last = groups[1][-1]
        node = nodes[last]
        value = node.output[0]
        node.output[0] = value + "_before_bug"
        bug = helper.make_node("Mul", [node.output[0], "bug_factor"], [value])
        bug.metadata_props.extend(node.metadata_props)
        model.graph.node.insert(last + 1, bug)
        model.graph.initializer.append(numpy_helper.from_array(np.array(1.01, dtype=np.float32), "bug_factor"))
        onnx.checker.check_model(model)
        return model

    monkeypatch.setattr(export_parity, "_export", buggy_export)
    result = check_export(models.reused_block(), torch.randn(2, 8, generator=torch.Generator().manual_seed(0)))
    assert not result.passed
    for report in result.reports.values():
        origin = report.drift_origin
        assert origin is not None and origin.name == "fc#1"
        assert [s.status for s in report.steps[:2]] == ["ok", "ok"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("factory", "inputs"),
    [
        (models.tiny_bert, {"input_ids": lambda: torch.randint(0, 100, (1, 8))}),
        (models.tiny_vit, {"pixel_values": lambda: torch.randn(1, 3, 32, 32)}),
        (models.tiny_resnet, {"pixel_values": lambda: torch.randn(1, 3, 32, 32)}),
    ],
)
def test_transformers_models(factory, inputs) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("transformers")
    torch.manual_seed(1)
    kwargs = {k: make() for k, make in inputs.items()}
    result = check_export(factory(), (), kwargs=kwargs)
    assert result.passed, {n: [s.name for s in r.exceeding] for n, r in result.reports.items()}
    compared = [s for s in result.reports["reference"].steps if s.status != "not-compared"]
    assert len(compared) >= len(result.calls) - 3  # only identity leaves (no ONNX nodes) stay unmapped
    assert all(not d.exceeds for r in result.reports.values() for d in r.graph_outputs)


def test_cli_export_parity_writes_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "leaf.json"
    code = main(["export-parity", "tests.torchbridge.models:reused_block", "--input-shape", "x=2x8",
                 "--report", str(out), "--report", str(tmp_path / "leaf.md")])
    assert code == 0, capsys.readouterr()
    data = json.loads((tmp_path / "leaf.reference.json").read_text())
    assert [s["name"] for s in data["steps"]][:3] == ["fc#0", "act#0", "fc#1"]
    assert (tmp_path / "leaf.onnxruntime.md").exists()
    assert main(["export-parity", "no_such_module:f", "--input-shape", "x=2x8"]) == 2
