"""``sealtrace convert``: ONNX / .seal -> torch.export program, checked against the reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from sealtrace import zoo  # noqa: E402
from sealtrace.cli import main  # noqa: E402
from tests.conftest import require_material  # noqa: E402


def test_convert_writes_a_loadable_program(tmp_path: Path, tiny_mlp: onnx.ModelProto,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "mlp.onnx"
    onnx.save(tiny_mlp, model)
    out = tmp_path / "mlp.pt2"
    assert main(["convert", str(model), "-o", str(out), "--random-inputs"]) == 0
    program = torch.export.load(str(out))
    x = torch.ones(1, 4)
    expected = np.maximum(np.ones((1, 4), np.float32) @ _weights(tiny_mlp, "w") + _weights(tiny_mlp, "b"), 0)
    np.testing.assert_allclose(program.module()(x).detach().numpy(), expected, rtol=1e-6)
    # Refuses to overwrite without --force; one line on stderr, exit 2.
    capsys.readouterr()
    assert main(["convert", str(model), "-o", str(out), "--random-inputs"]) == 2
    assert "file exists" in capsys.readouterr().err
    assert main(["convert", str(model), "-o", str(out), "--random-inputs", "--force"]) == 0
    assert main(["convert", str(model), "-o", str(tmp_path / "x.pt"), "--random-inputs"]) == 2


def _weights(model: onnx.ModelProto, name: str) -> np.ndarray:
    return next(onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.name == name)


def test_convert_a_sealed_container_binds_the_program(tmp_path: Path, tiny_mlp: onnx.ModelProto) -> None:
    model = tmp_path / "mlp.onnx"
    onnx.save(tiny_mlp, model)
    sealed = tmp_path / "mlp.seal"
    assert main(["seal", str(model), "-o", str(sealed)]) == 0
    out = tmp_path / "mlp.pt2"
    assert main(["convert", str(sealed), "-o", str(out), "--random-inputs"]) == 0
    assert (tmp_path / "mlp.pt2.binding.json").exists()
    assert main(["check-binding", str(out), "--container", str(sealed)]) == 0


@pytest.mark.slow
def test_convert_silero_needs_the_sample_rate_pinned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real = zoo.model("silero-vad")
    path = require_material(lambda: real.path)
    feeds = require_material(real.inputs)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **feeds)
    out = tmp_path / "vad.pt2"
    capsys.readouterr()
    assert main(["convert", str(path), "-o", str(out), "--inputs", str(inputs)]) == 2
    assert "--fix" in capsys.readouterr().err
    assert main(["convert", str(path), "-o", str(out), "--inputs", str(inputs), "--fix", "sr=16000"]) == 0
    program = torch.export.load(str(out))
    probability, _state = program.module()(torch.from_numpy(feeds["input"]), torch.from_numpy(feeds["state"]))
    assert probability.shape == (1, 1)


def _cli_in_a_fresh_process(*args: str) -> tuple[int, bool, str]:
    """(exit code, whether torch was imported, stderr) of one sealtrace call in a new interpreter."""
    import subprocess
    import sys

    code = (
        "import sys; from sealtrace.cli import main; status = main(sys.argv[1:]); "
        "print('torch imported' if 'torch' in sys.modules else 'no torch'); sys.exit(status)"
    )
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          check=False)
    return done.returncode, "torch imported" in done.stdout, done.stderr


def test_convert_checks_what_needs_no_torch_before_importing_it(tmp_path: Path, tiny_mlp: onnx.ModelProto) -> None:
    from onnx import TensorProto, helper

    from tests.conftest import make_model

    dynamic = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    onnx.save(dynamic, tmp_path / "dynamic.onnx")
    onnx.save(tiny_mlp, tmp_path / "mlp.onnx")
    (tmp_path / "exists.pt2").write_bytes(b"kept")
    cases = [
        (["convert", str(tmp_path / "dynamic.onnx"), "-o", str(tmp_path / "d.pt2"), "--random-inputs"], "batch"),
        (["convert", str(tmp_path / "mlp.onnx"), "-o", str(tmp_path / "exists.pt2"), "--random-inputs"], "exists"),
        (["convert", str(tmp_path / "mlp.onnx"), "-o", str(tmp_path / "m.pt2"), "--random-inputs", "--sign",
          str(tmp_path / "k.pem")], "--sign"),
        (["convert", str(tmp_path / "mlp.onnx"), "-o", str(tmp_path / "missing" / "m.pt2"), "--random-inputs"],
         "does not exist"),
    ]
    for args, said in cases:
        code, imported, err = _cli_in_a_fresh_process(*args)
        assert (code, imported) == (2, False), (args, err)
        assert said in err and err.count("\n") == 1, err


def test_export_parity_checks_its_report_paths_before_the_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r.reference.md").write_text("kept")
    code = main(["export-parity", "no_such_module:f", "--input-shape", "x=2x8", "--report", str(tmp_path / "r.md")])
    assert code == 2
    err = capsys.readouterr().err
    assert "r.reference.md" in err and "exists" in err  # not "cannot import": checked first


def test_sizes_and_values_from_the_command_line_are_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each was an internal error (OverflowError, MemoryError, torch's RuntimeError) before.
    from onnx import TensorProto, helper

    from tests.conftest import make_model

    small = make_model([helper.make_node("Identity", ["n"], ["y"], name="copy")],
                       [helper.make_tensor_value_info("n", TensorProto.INT32, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.INT32, [2])])
    huge = make_model([helper.make_node("Identity", ["n"], ["y"], name="copy")],
                      [helper.make_tensor_value_info("n", TensorProto.INT64, [100_000, 100_000, 100])],
                      [helper.make_tensor_value_info("y", TensorProto.INT64, [100_000, 100_000, 100])])
    onnx.save(small, tmp_path / "small.onnx")
    onnx.save(huge, tmp_path / "huge.onnx")
    factory = "tests.torchbridge.models:reused_block"
    cases = [
        ["convert", str(tmp_path / "small.onnx"), "-o", str(tmp_path / "a.pt2"), "--fix", "n=99999999999999999999"],
        ["convert", str(tmp_path / "huge.onnx"), "-o", str(tmp_path / "b.pt2"), "--fix", "n=3"],
        ["export-parity", factory, "--input-shape", "x=2x-8"],
        ["export-parity", factory, "--input-shape", "x=2x8", "--input-dtype", "x=int64", "--int-high", "0"],
        ["export-parity", factory, "--input-shape", "x=100000x100000x1000"],
    ]
    for args in cases:
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert "internal error" not in err and err.count("\n") == 1, err
    assert not (tmp_path / "a.pt2").exists() and not (tmp_path / "b.pt2").exists()


def test_an_export_leaves_no_traced_tensor_behind_for_later_eager_runs() -> None:
    # torch.export traces with FakeTensors; a kernel helper that cached a tensor it made while
    # tracing (the LSTM's gate order) handed that FakeTensor to every later eager run in the
    # process, which then failed ("tensor subclasses") depending on test order.
    from sealtrace.backends import get_backend
    from sealtrace.plan import build_plan
    from sealtrace.torchbridge.program import export_program

    real = zoo.model("silero-vad")
    path = require_material(lambda: real.path)
    feeds = require_material(real.inputs)
    export_program(str(path), feeds, fixed_inputs={"sr": np.array(16000, np.int64)})
    plan = build_plan(path)
    eager = get_backend("torch").run(plan, feeds)
    reference = get_backend("reference").run(plan, feeds)
    for name, value in reference.items():
        np.testing.assert_allclose(eager[name], value, rtol=1e-4, atol=1e-5)
