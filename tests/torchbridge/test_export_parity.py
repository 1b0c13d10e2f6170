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
        # Local error: fc#1 re-run alone on PyTorch's inputs still differs; act#1 re-run on
        # PyTorch's inputs agrees, so it only inherited fc#1's error.
        statuses = {s.name: s.status for s in report.steps}
        assert statuses["fc#1"] == "born-here"
        assert statuses["act#1"] == "inherited"
        assert [s.name for s in report.born_here] == ["fc#1"]


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


def _export_parity(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["export-parity", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_nothing_compared_is_not_a_pass(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _export_parity(capsys, "tests.torchbridge.models:only_identity", "--input-shape", "x=2x8",
                                    "--backends", "reference")
    assert code == 1, (out, err)
    assert "nothing was compared: none of the 1 leaf module calls has an ONNX value" in err


def test_autocast_in_forward_keeps_the_leaf_calls() -> None:
    # torch.export wraps the autocast block in a higher-order op whose inlined nodes lose their modules.
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))
    result = check_export(models.autocast_block(), x, backends=("reference",))
    assert [c.label for c in result.calls] == ["body.fc#0", "body.act#0", "body.fc#1", "body.act#1", "body.norm#0",
                                               "body.head#0"]
    assert not result.unmapped
    assert result.calls[0].outputs[0].dtype.itemsize == 2  # bfloat16: the autocast region ran
    assert result.nothing_compared is None
    assert all(s.status == "ok" for s in result.reports["reference"].steps)


def test_precision_loss_is_reported_apart_from_export_drift() -> None:
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))
    result = check_export(models.reused_block(), x, backends=("reference",), precision="fp16")
    report = result.reports["reference"]
    assert result.calls[0].outputs[0].dtype == np.float16
    assert report.precision == "fp16"
    assert sorted(report.precision_loss) == sorted(c.label for c in result.calls)
    # float16 rounds: the precision moves every leaf's values from the float32 model's ...
    assert all(0 < d.max_abs < 0.05 for diffs in report.precision_loss.values() for d in diffs)
    # ... while the export, run in float16 too, matches PyTorch in float16.
    assert all(s.status == "ok" for s in report.steps), [(s.name, s.worst) for s in report.steps]
    data = report.to_json()
    assert data["precision"] == "fp16" and set(data["precision_loss"]) == set(report.precision_loss)
    _, worst = report.worst_precision_loss or ("", None)
    assert worst is not None and worst.max_abs == max(d.max_abs for ds in report.precision_loss.values() for d in ds)


def test_cli_precision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "leaf.json"
    code, text, err = _export_parity(capsys, "tests.torchbridge.models:reused_block", "--input-shape", "x=2x8",
                                     "--backends", "reference", "--precision", "bf16", "--atol", "0.02",
                                     "--report", str(out))
    assert code == 0, (text, err)
    data = json.loads(out.read_text())
    assert data["precision"] == "bf16" and len(data["precision_loss"]) == 6
    assert "precision_loss (bf16 vs float32 PyTorch): largest at " in text


def test_cli_tolerance_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tolerances = tmp_path / "tol.toml"
    tolerances.write_text("[default]\natol = 0.01\nrtol = 0.01\n[ops.LayerNorm]\natol = 0.02\n")
    out = tmp_path / "leaf.json"
    code, text, err = _export_parity(capsys, "tests.torchbridge.models:reused_block", "--input-shape", "x=2x8",
                                     "--backends", "reference", "--tolerance-file", str(tolerances),
                                     "--report", str(out))
    assert code == 0, (text, err)
    data = json.loads(out.read_text())
    assert data["tolerance"]["default"] == {"atol": 0.01, "rtol": 0.01}
    assert data["tolerance"]["ops"] == {"LayerNorm": {"atol": 0.02, "rtol": 1e-3}}
    code, _, err = _export_parity(capsys, "tests.torchbridge.models:reused_block", "--input-shape", "x=2x8",
                                  "--tolerance-file", str(tolerances), "--atol", "1")
    assert code == 2 and "either --atol/--rtol or --tolerance-file" in err


def test_summary_leads_with_the_worst_leaf(capsys: pytest.CaptureFixture[str]) -> None:
    code, text, err = _export_parity(capsys, "tests.torchbridge.models:reused_block", "--input-shape", "x=2x8",
                                     "--backends", "reference")
    assert code == 0, (text, err)
    first = text.splitlines()[0]
    assert first.startswith("reference: worst leaf "), text
    assert " (Linear): max abs " in first or " (GELU): max abs " in first or " (LayerNorm): max abs " in first


def test_factory_from_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "__init__.py").write_text("")
    (tmp_path / "mine" / "nets.py").write_text(
        "import torch\n\ndef build():\n    torch.manual_seed(0)\n    return torch.nn.Sequential(torch.nn.Linear(4, 2))\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    code, out, err = _export_parity(capsys, "mine.nets:build", "--input-shape", "input=1x4", "--backends", "reference")
    assert code == 0, (out, err)


def test_a_factory_that_raises_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _export_parity(capsys, "tests.torchbridge.models:broken", "--input-shape", "x=1x4")
    assert code == 2, (out, err)
    assert err.strip().splitlines() == [
        "sealtrace: error: tests.torchbridge.models:broken() raised RuntimeError: no weights at /nowhere"
    ]
