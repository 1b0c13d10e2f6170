"""The device option, the device facts in audit headers, and replays across backends (issue 29).

No GPU is needed: the CUDA facts and precision switches are read through monkeypatched torch.cuda
functions; the CPU path runs for real.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealtrace.audit import audited_run, replay_log, verify_log
from sealtrace.audit.replay_across import OVER, judge_steps
from sealtrace.audit.show import describe_device
from sealtrace.backends import make_backend
from sealtrace.backends.devices import check_device, parse_device
from sealtrace.cli import main
from sealtrace.errors import BackendError, InputError
from sealtrace.jsonschemas import load_schema, validator
from sealtrace.parity.tolerance import Tolerance, ToleranceTable
from sealtrace.session import Session
from tests.conftest import make_model

torch = pytest.importorskip("torch")

X = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)


def chain_model() -> onnx.ModelProto:
    """x -> MatMul -> Tanh -> Relu: a float chain where a drift born at Tanh is inherited by Relu."""
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((16, 16)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Tanh", ["h"], ["t"], name="tanh"),
             helper.make_node("Relu", ["t"], ["y"], name="relu")]  # fmt: skip
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], [w])  # fmt: skip


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model(), path)
    np.save(tmp_path / "x.npy", X)
    return path


def _log(path: Path, backend: str, model: Path) -> Path:
    audited_run(Session(model, backend=make_backend(backend)), {"x": X}, audit=path, sample=64)
    return path


def _fake_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.cuda as on a one-GPU host, for the code that reads a GPU's facts (no kernel runs)."""
    class Properties:
        total_memory = 150_000_000_000

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=0: Properties())
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91000)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)


# -- the device option ----------------------------------------------------------------------------


def test_device_strings_parse() -> None:
    assert [parse_device(d) for d in ("cpu", "CUDA", "cuda:1", " cuda:0 ")] == ["cpu", "cuda", "cuda:1", "cuda:0"]
    for bad in ("gpu", "cuda:", "cuda:x", "cpu:0", "cuda:-1", ""):
        with pytest.raises(InputError, match="expected cpu, cuda or cuda:N"):
            parse_device(bad)


def test_a_missing_gpu_or_torch_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(BackendError, match="no CUDA GPU available"):
        check_device("cuda", "torch")
    with pytest.raises(BackendError, match="the reference backend runs on the CPU only"):
        check_device("cuda:0", "reference")
    with pytest.raises(BackendError, match="onnxruntime backend runs on the CPU only"):
        make_backend("onnxruntime", device="cuda")
    assert check_device("cpu", "onnxruntime") == "cpu"
    _fake_gpu(monkeypatch)
    with pytest.raises(BackendError, match=r"no such GPU; torch sees 1 \(cuda:0 to cuda:0\)"):
        check_device("cuda:3", "torch")
    import sealtrace.backends.devices as devices

    monkeypatch.setattr(devices.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(BackendError, match="PyTorch is not installed"):
        check_device("cuda", "torch")


@pytest.mark.parametrize("verb", [
    ["run", "{model}", "--input", "x={x}", "--backend", "torch"],
    ["parity", "{model}", "--input", "x={x}", "--backends", "torch,reference"],
    ["replay", "{log}", "--model", "{model}", "--backend", "torch"],
    ["conformance", "--ops", "Relu", "--backend", "torch"],
    ["serve", "{seal}", "--backend", "torch", "--audit", "io", "--port", "0"],
    ["batch", "{seal}", "{data}", "--ledger", "{ledger}", "--backend", "torch"],
])  # fmt: skip
def test_every_verb_refuses_a_gpu_it_cannot_have(
    verb: list[str], model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    from sealtrace.container import seal_model

    seal = tmp_path / "chain.seal"
    seal_model(chain_model(), seal)
    log = _log(tmp_path / "run.jsonl", "reference", model_path)
    args = [a.format(model=model_path, x=tmp_path / "x.npy", log=log, seal=seal, data=tmp_path, ledger=tmp_path / "l.db")
            for a in verb]
    assert main([*args, "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no CUDA GPU available" in err
    assert main([*args, "--device", "tpu"]) == 2
    assert "expected cpu, cuda or cuda:N" in capsys.readouterr().err


def test_a_device_for_a_backend_without_one_is_exit_2(model_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = f"x={model_path.parent / 'x.npy'}"
    assert main(["run", str(model_path), "--input", x, "--device", "cuda:0"]) == 2
    assert "the reference backend runs on the CPU only; a GPU needs --backend torch" in capsys.readouterr().err
    assert main(["run", str(model_path), "--input", x, "--backend", "onnxruntime", "--device", "cpu"]) == 0
    assert main(["run", str(model_path), "--input", x, "--backend", "torch", "--gpu-precision", "tf32"]) == 2
    assert "only a CUDA device" in capsys.readouterr().err


def test_batch_runs_torch_on_the_device_given(tmp_path: Path) -> None:
    from sealtrace.container import seal_model
    from sealtrace.scale import BatchJob, InProcess, run_batch
    from sealtrace.scale.shipped import _SESSIONS

    seal_model(chain_model(), tmp_path / "chain.seal")
    (tmp_path / "reqs").mkdir()
    np.savez(tmp_path / "reqs" / "r0.npz", x=X)
    job = BatchJob(str(tmp_path / "chain.seal"), str(tmp_path / "reqs"), str(tmp_path / "l.db"), backend="torch",
                   device="cpu")  # fmt: skip
    summary = run_batch(job, InProcess())
    assert (summary.recorded, summary.failures) == (1, [])
    session = next(s for key, s in _SESSIONS.items() if key[1] == "torch" and key[4] == "cpu")
    assert session.backend.device_info["name"] == "cpu"  # type: ignore[attr-defined]


def test_session_takes_a_device(model_path: Path) -> None:
    session = Session(model_path, backend="torch", device="cpu")
    assert str(session.backend.device) == "cpu"  # type: ignore[attr-defined]
    np.testing.assert_allclose(session.run(None, {"x": X})[0], Session(model_path).run(None, {"x": X})[0], atol=1e-5)
    with pytest.raises(BackendError, match="CPU only"):
        Session(model_path, backend="reference", device="cuda")
    with pytest.raises(InputError, match="backend given by name"):
        Session(model_path, backend=make_backend("torch"), device="cpu")


# -- the header ------------------------------------------------------------------------------------


def test_a_torch_cpu_log_names_its_device_and_settings(model_path: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    log = _log(tmp_path / "torch.jsonl", "torch", model_path)
    assert verify_log(log).ok
    device = json.loads(log.read_text().splitlines()[0])["backend"]["device"]
    assert device["name"] == "cpu" and device["torch"] == torch.__version__
    assert device["settings"]["deterministic_algorithms"] == torch.are_deterministic_algorithms_enabled()
    assert "gpu" not in device and "precision" not in device
    assert main(["audit", "show", str(log)]) == 0
    assert f"device: cpu; torch {torch.__version__}; deterministic algorithms" in capsys.readouterr().out


@pytest.mark.parametrize("precision", ["faithful", "tf32"])
def test_cuda_facts_and_precision_settings(precision: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_gpu(monkeypatch)
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
              torch.are_deterministic_algorithms_enabled())  # fmt: skip
    backend = make_backend("torch", device="cuda", gpu_precision=None if precision == "faithful" else precision)
    info = backend.device_info  # type: ignore[attr-defined]
    tf32 = precision == "tf32"
    assert info["name"] == "cuda:0" and info["precision"] == precision
    assert info["gpu"] == {"name": "NVIDIA H200", "compute_capability": "9.0", "memory_bytes": 150_000_000_000,
                           "driver": None, "cuda_runtime": "13.0", "cudnn": "91000"}  # fmt: skip
    assert info["settings"]["matmul_tf32"] is tf32 and info["settings"]["cudnn_tf32"] is tf32
    assert info["settings"]["deterministic_algorithms"] is (not tf32 or before[2])
    assert info["settings"]["cublas_workspace_config"] == (None if tf32 else ":4096:8")
    # The switches are the run's only: restored once read.
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.are_deterministic_algorithms_enabled()) == before  # fmt: skip
    # The header's schema (the Go verifier embeds the same file) takes it.
    header_schema = load_schema("audit-log.schema.json")["$defs"]["header"]["properties"]["backend"]
    header_schema = {**header_schema, "$defs": load_schema("audit-log.schema.json")["$defs"]}
    record = {"name": "torch", "version": torch.__version__, "per_step": True, "device": info}
    assert not list(validator(header_schema).iter_errors(record))
    shown = describe_device(info)
    assert shown.startswith("cuda:0 (NVIDIA H200, compute capability 9.0, 140 GiB; driver unknown, CUDA 13.0, cuDNN 91000)")
    assert f"precision {precision}" in shown and f"TF32 matmul {'on' if tf32 else 'off'}" in shown


def test_serving_metadata_names_the_device(tmp_path: Path) -> None:
    from sealtrace.container import seal_model
    from sealtrace.serve.models import open_served_model

    seal_model(chain_model(), tmp_path / "chain.seal")
    served = open_served_model(tmp_path / "chain.seal", "chain", make_backend("torch", device="cpu"))
    parameters = served.metadata("io")["parameters"]
    assert parameters["device"] == "cpu" and parameters["device_facts"].startswith("cpu; torch ")
    assert "device" not in open_served_model(tmp_path / "chain.seal", "c", "reference").metadata("io")["parameters"]


# -- replay across backends ------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["onnxruntime", "torch"])
def test_replay_across_backends_gives_the_parity_verdict(
    backend: str, model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _log(tmp_path / f"{backend}.jsonl", backend, model_path)
    report = replay_log(log, model_path)
    assert report.across == (f"{backend} on cpu", "reference on cpu") and report.passed
    assert len(report.verdicts) == 3 and not report.over_tolerance
    assert main(["replay", str(log), "--model", str(model_path)]) == 0
    out = capsys.readouterr().out
    assert "cross-backend comparison, not a bit-identical replay" in out and "0 over" in out
    # On the log's own backend and device it is bit-identical, or it fails.
    assert main(["replay", str(log), "--model", str(model_path), "--backend", backend]) == 0
    assert "bit-identical: 3 step(s)" in capsys.readouterr().out


def test_replay_across_backends_names_the_drift_origin(
    model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sealtrace.backends.torch as torch_backend

    translated = torch_backend.call_translation

    def drifting_tanh(translation: Any, step: Any, args: Any, attrs: Any) -> Any:
        outputs = translated(translation, step, args, attrs)
        return [o + 0.01 for o in outputs] if step.op_type == "Tanh" else outputs

    # A torch backend whose Tanh is off by 0.01: its log is genuine, its numbers drift at Tanh.
    monkeypatch.setattr(torch_backend, "call_translation", drifting_tanh)
    log = _log(tmp_path / "drift.jsonl", "torch", model_path)
    monkeypatch.undo()
    report = replay_log(log, model_path)
    statuses = [(v.output, v.status, v.origin) for v in report.verdicts]
    assert statuses[1:] == [("t", OVER, "born-here"), ("y", OVER, "inherited")]
    assert main(["replay", str(log), "--model", str(model_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cross-backend comparison, not a bit-identical replay" in err
    assert "drift origin line 3: step 'tanh' (Tanh), output 't'" in err and "(born-here)" in err
    # A looser tolerance (parity's options) takes the drift in.
    assert main(["replay", str(log), "--model", str(model_path), "--atol", "0.02"]) == 0


def test_judging_a_sampled_value() -> None:
    def step(name: str, inputs: list[str], sample: list[float], digest: str) -> dict[str, Any]:
        out = {"name": name, "kind": "tensor", "dtype": "float32", "shape": [2], "digest": digest, "sample": sample,
               "stats": {"min": min(sample), "max": max(sample), "mean": sum(sample) / 2, "nan": 0, "inf": 0}}
        return {"path": [], "name": name, "op_type": "Op", "inputs": [{"name": n} for n in inputs], "outputs": [out]}

    logged = [(2, step("a", ["x"], [1.0, 2.0], "d1")), (3, step("b", ["a"], [1.0, 2.0], "d2"))]
    replayed = [step("a", ["x"], [1.0, 2.00001], "e1"), step("b", ["a"], [1.0, 2.0], "d2")]
    verdicts = judge_steps(logged, replayed, ToleranceTable(Tolerance(1e-4, 1e-3)))
    assert [v.status for v in verdicts] == ["within", "identical"]
    replayed[0]["outputs"][0]["stats"]["max"] = 3.0  # beyond the sample: only the statistics show it
    assert judge_steps(logged, replayed, ToleranceTable())[0].status == OVER
    # An unsigned log may hold strings where a float tensor's sample should: a verdict, not a crash.
    for junk in ("abc", [1, 2], True):
        replayed[0]["outputs"][0]["sample"] = [junk, 2.0]
        verdict = judge_steps(logged, replayed, ToleranceTable())[0]
        assert verdict.status == OVER and "not numbers" in verdict.detail
