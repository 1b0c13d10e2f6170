"""The torch backend through Session and the CLI: run, audit, capture, parity."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from sealtrace import Session, zoo  # noqa: E402
from sealtrace.backends import get_backend  # noqa: E402
from sealtrace.backends.torch import TorchBackend  # noqa: E402
from sealtrace.cli import main  # noqa: E402
from sealtrace.errors import BackendError  # noqa: E402
from sealtrace.session import RunOptions  # noqa: E402
from tests.conftest import require_material  # noqa: E402


@pytest.fixture
def acas_file() -> Path:
    return require_material(lambda: zoo.acasxu_networks()[0])


@pytest.fixture
def acas_inputs(tmp_path: Path) -> Path:
    feeds = require_material(lambda: zoo.acasxu_inputs(1, count=1)[0])
    path = tmp_path / "in.npz"
    np.savez(path, **feeds)
    return path


def test_session_runs_on_torch_like_on_reference(acas_file: Path) -> None:
    feeds = zoo.acasxu_inputs(1, count=1)[0]
    (ours,) = Session(acas_file, backend="torch").run(None, feeds)
    (theirs,) = Session(acas_file).run(None, feeds)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_backend_reports_every_step_with_numpy_arrays(tiny_mlp: onnx.ModelProto) -> None:
    seen = []

    class Recorder:
        def on_run_start(self, plan, feeds, backend):  # type: ignore[no-untyped-def]
            assert backend.name == "torch"

        def on_step(self, event):  # type: ignore[no-untyped-def]
            assert all(isinstance(v, np.ndarray) for v in (*event.inputs, *event.outputs))
            seen.append(event.step.op_type)

        def on_run_end(self, outputs):  # type: ignore[no-untyped-def]
            pass

    Session(tiny_mlp, backend="torch").run(None, {"x": np.ones((1, 4), np.float32)}, RunOptions(observers=[Recorder()]))
    assert seen == ["MatMul", "Add", "Relu"]


def test_cli_run_with_audit_and_capture(acas_file: Path, acas_inputs: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    log, capture, out = tmp_path / "run.jsonl", tmp_path / "cap", tmp_path / "out.npz"
    code = main(["run", str(acas_file), "--inputs", str(acas_inputs), "--backend", "torch",
                 "--audit", str(log), "--capture", str(capture), "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert log.exists() and any(capture.iterdir())
    reference = tmp_path / "ref.npz"
    assert main(["run", str(acas_file), "--inputs", str(acas_inputs), "--out", str(reference)]) == 0
    with np.load(out) as a, np.load(reference) as b:
        for key in b.files:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-5)
    assert main(["audit", "verify", str(log)]) == 0


def test_cli_parity_reference_vs_torch(acas_file: Path, acas_inputs: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "parity.json"
    code = main(["parity", str(acas_file), "--inputs", str(acas_inputs), "--backends", "reference,torch",
                 "--report", str(report)])
    assert code == 0, capsys.readouterr()
    assert report.exists()


def test_cuda_without_a_gpu_is_a_clear_error() -> None:
    if torch.cuda.is_available():
        backend = TorchBackend(device="cuda")
        assert backend.device.type == "cuda"
    else:
        with pytest.raises(BackendError, match="CUDA"):
            TorchBackend(device="cuda")


def test_registered_by_name() -> None:
    assert get_backend("torch").name == "torch"
