"""TVM engines: compiled libraries that carry their container's digest, checked before they are loaded.

Libraries are compiled once per module (a few seconds each) and copied into each test's own folder
before a test edits anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealtrace import Session
from sealtrace.binding import BindingCheckError, read_binding
from sealtrace.cli import main
from sealtrace.container import seal_model
from sealtrace.errors import InputError
from tests.conftest import make_model
from tests.parity.test_parity import FEEDS, conv_net

try:
    import tvm  # noqa: F401
except ImportError:
    if os.environ.get("CI"):  # CI installs the tvm extra (make test): a missing TVM is a failure there
        raise
    pytest.skip("Apache TVM is not installed (pip install 'sealtrace[tvm]')", allow_module_level=True)

from sealtrace.engines import tvm as engines
from sealtrace.engines.tvm import (
    EngineCompileError,
    compile_tvm,
    load_tvm_library,
    tvm_version,
)
from sealtrace.signing import generate_keypair


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """net.seal compiled (signed) to net.so, and other.seal (the same net, one node renamed) to other.so."""
    folder = tmp_path_factory.mktemp("tvm")
    model = conv_net()
    other = onnx.ModelProto()
    other.CopyFrom(model)
    other.graph.node[-1].name = "renamed"  # any change makes it another container
    paths = {"seal": folder / "net.seal", "other_seal": folder / "other.seal"}
    seal_model(model, paths["seal"])
    seal_model(other, paths["other_seal"])
    paths["key"], paths["pub"] = generate_keypair(folder / "signer.pem")
    paths["so"] = folder / "net.so"
    paths["other_so"] = folder / "other.so"
    compile_tvm(paths["seal"], paths["so"], sign_with=paths["key"])
    compile_tvm(paths["other_seal"], paths["other_so"], sign_with=paths["key"])
    return paths


@pytest.fixture
def files(built: dict[str, Path], tmp_path: Path) -> dict[str, Path]:
    """This test's own copies of the built files (libraries with their sidecars)."""
    copies = {}
    for key, path in built.items():
        copies[key] = tmp_path / path.name
        shutil.copyfile(path, copies[key])
        sidecar = Path(f"{path}.binding.json")
        if sidecar.exists():
            shutil.copyfile(sidecar, f"{copies[key]}.binding.json")
    return copies


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every library loaded (its private copy) and every engine run, in order."""
    seen: list[str] = []
    load = engines._load_private_copy
    run = engines.TvmEngine.run

    def counted_load(tvm: Any, data: bytes, where: str) -> Any:
        seen.append(f"load {Path(where).name}")
        return load(tvm, data, where)

    def counted_run(self: engines.TvmEngine, feeds: Any, threads: int = 1) -> Any:
        seen.append("run")
        return run(self, feeds, threads)

    monkeypatch.setattr(engines, "_load_private_copy", counted_load)
    monkeypatch.setattr(engines.TvmEngine, "run", counted_run)
    return seen


def run_cli(*args: str | Path) -> int:
    return main([str(a) for a in args])


def run_verb(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    """A verb run as a user runs it: (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_engine_runs_the_sealed_model_and_says_where_it_came_from(files: dict[str, Path], loads: list[str]) -> None:
    record = read_binding(files["so"])
    assert (record.backend, record.transformation, record.artifact_digest_scope) == ("tvm", "tvm-relax-compile", "file")
    assert record.artifact_sha256 == hashlib.sha256(files["so"].read_bytes()).hexdigest()
    session = Session(files["so"], container=files["seal"], backend="tvm", trust=[files["pub"]])
    assert loads == ["load net.so"]
    got = session.run(None, FEEDS)[0]
    expected = Session(files["seal"]).run(None, FEEDS)[0]
    np.testing.assert_allclose(got, expected, atol=1e-5)
    origin = session.origin
    assert origin.kind == "artifact" and origin.container_digest == record.container_digest
    assert origin.sha256 == record.artifact_sha256 and origin.trusted and origin.binding_digest == record.digest


def test_the_library_itself_names_its_container_plan_and_tvm(files: dict[str, Path]) -> None:
    plan, engine = load_tvm_library(files["so"], files["seal"])
    stamp = engine.stamp
    assert stamp.container_digest == read_binding(files["so"]).container_digest
    assert stamp.plan_digest == plan.digest and stamp.tvm_version == tvm_version()
    assert [i.name for i in stamp.inputs] == ["x"] and list(stamp.outputs) == ["y"]
    # Read straight from the library's own function, as any TVM user could.
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(str(files["so"])), tvm.cpu())
    text = bytes(vm[engines.STAMP_FUNCTION]().numpy()).decode("ascii")
    assert json.loads(text)["container_digest"] == stamp.container_digest
    assert engines.parse_stamp(text.encode()) == stamp


def test_library_compiled_from_another_container_is_refused_by_its_own_stamp(
    files: dict[str, Path], loads: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Its own sidecar says so first.
    with pytest.raises(BindingCheckError, match="bound to another container"):
        Session(files["other_so"], container=files["seal"], backend="tvm")
    assert loads == []
    # A forger binds it to net.seal anew (an unsigned record that checks out): the library loads,
    # and its stamp refuses it before any inference.
    os.remove(f"{files['other_so']}.binding.json")
    assert run_cli("bind", files["other_so"], "--to", files["seal"], "--backend", "tvm",
                   "--backend-version", tvm_version()) == 0  # fmt: skip
    with pytest.raises(BindingCheckError, match="compiled from another container") as refused:
        Session(files["other_so"], container=files["seal"], backend="tvm")
    assert "compiled from another Plan" in str(refused.value)
    assert loads == ["load other.so"]  # loaded (the binding said so), never run
    capsys.readouterr()
    code, out, err = run_verb(capsys, "run", files["other_so"], "--container", files["seal"], "--random-inputs")
    assert code == 1 and "compiled from another container" in err and "y" not in out
    assert "run" not in loads


def test_edited_library_is_refused_before_it_is_loaded(files: dict[str, Path], loads: list[str],
                                                       capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    data = bytearray(files["so"].read_bytes())
    data[len(data) // 2] ^= 0x01
    files["so"].write_bytes(bytes(data))
    code, _out, err = run_verb(capsys, "run", files["so"], "--container", files["seal"], "--random-inputs")
    assert code == 1 and "artifact modified" in err
    assert err.strip().splitlines()[-1].startswith("sealtrace: error:")
    with pytest.raises(BindingCheckError, match="artifact modified"):
        Session(files["so"], container=files["seal"], backend="tvm")
    assert loads == []


def test_edited_sidecar_is_refused_before_the_library_is_loaded(files: dict[str, Path], loads: list[str],
                                                                capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    sidecar = Path(f"{files['so']}.binding.json")
    record = json.loads(sidecar.read_text())
    # Any edit breaks the signature that --trust requires ...
    record["options"]["target"] = "llvm -mcpu=skylake"
    sidecar.write_text(json.dumps(record))
    code, _out, err = run_verb(capsys, "run", files["so"], "--container", files["seal"], "--random-inputs",
                               "--trust", files["pub"])  # fmt: skip
    assert code == 1 and "signature untrusted or invalid" in err
    # ... and an edited artifact digest no longer matches the library, signed or not.
    record["artifact"]["sha256"] = "0" * 64
    sidecar.write_text(json.dumps(record))
    code, _out, err = run_verb(capsys, "run", files["so"], "--container", files["seal"], "--random-inputs")
    assert code == 1 and "artifact modified" in err
    assert loads == []


def test_sidecar_moved_to_another_library_is_refused_before_it_is_loaded(
    files: dict[str, Path], loads: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copyfile(f"{files['so']}.binding.json", f"{files['other_so']}.binding.json")
    code, _out, err = run_verb(capsys, "run", files["other_so"], "--container", files["seal"], "--random-inputs",
                               "--trust", files["pub"])  # fmt: skip
    assert code == 1 and "artifact modified" in err
    with pytest.raises(BindingCheckError, match="artifact modified"):
        Session(files["other_so"], container=files["seal"], backend="tvm", trust=[files["pub"]])
    assert loads == []


def test_library_without_a_stamp_is_refused(files: dict[str, Path], tmp_path: Path) -> None:
    import tvm

    from sealtrace.container import load_verified_model

    module, _inputs, _folded = engines.import_onnx(load_verified_model(files["seal"]).model, Session(files["seal"]).plan, {})
    plain = tmp_path / "plain.so"
    tvm.compile(module, target="llvm").export_library(str(plain))
    assert run_cli("bind", plain, "--to", files["seal"], "--backend", "tvm", "--backend-version", tvm_version()) == 0
    with pytest.raises(BindingCheckError, match="no sealtrace stamp"):
        Session(plain, container=files["seal"], backend="tvm")


def test_run_of_a_library_picks_tvm_and_audits_inputs_outputs_and_artifact(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "run.jsonl"
    np.save(tmp_path / "x.npy", FEEDS["x"])
    code, out, err = run_verb(capsys, "run", files["so"], "--container", files["seal"], "--input", f"x={tmp_path / 'x.npy'}",
                              "--audit", log, "--trust", files["pub"])  # fmt: skip
    assert code == 0, err
    assert "on tvm" in out and "binding signed by trusted key" in out
    header, footer = (json.loads(line) for line in log.read_text().splitlines())
    assert header["backend"] == {"name": "tvm", "version": tvm_version(), "per_step": False}
    assert header["model"]["kind"] == "artifact"
    assert header["model"]["sha256"] == hashlib.sha256(files["so"].read_bytes()).hexdigest()
    assert header["model"]["container_digest"] == read_binding(files["so"]).container_digest
    from sealtrace.digest import tensor_digest

    assert [i["digest"] for i in header["inputs"]] == [tensor_digest(FEEDS["x"])]
    expected = Session(files["so"], container=files["seal"], backend="tvm").run(None, FEEDS)[0]
    assert [o["digest"] for o in footer["outputs"]] == [tensor_digest(expected)]
    code, out, err = run_verb(capsys, "audit", "verify", log, "--container", files["seal"], "--model", files["so"])
    assert code == 0, err
    assert "linked to" in out


def test_parity_of_a_library_compares_graph_outputs_and_says_so(files: dict[str, Path]) -> None:
    from sealtrace.parity import check_parity
    from sealtrace.parity.report import graph_outputs_only, report_markdown

    session = Session(files["so"], container=files["seal"], backend="tvm")
    report = check_parity(session.plan, FEEDS, ["reference", session.backend])
    assert report.passed and report.steps == [] and [d.name for d in report.graph_outputs] == ["y"]
    assert report.backend_settings["tvm"]["mode"] == "compiled library"
    assert "TVM fuses operators" in graph_outputs_only(report) and "TVM fuses operators" in report_markdown(report)


def test_parity_verb_with_the_tvm_backend(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_verb(capsys, "parity", files["seal"], "--backends", "reference,tvm", "--random-inputs")
    assert code == 0, err
    said = " ".join(out.split())  # the console wraps long lines
    assert "graph outputs only: TVM fuses operators" in said and "1 graph output(s) compared, 0 over tolerance" in said


def test_library_without_its_container_is_refused(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InputError, match="compiled engine: give the container"):
        Session(files["so"], backend="tvm")
    code, _out, err = run_verb(capsys, "run", files["so"], "--backend", "tvm", "--random-inputs")
    assert code == 2 and "--container" in err


def test_compile_refuses_bad_usage_before_any_work(files: dict[str, Path], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    for args, message in [
        (("-o", tmp_path / "a.onnx"), "name it *.so"),
        (("-o", tmp_path / "a.so", "--target", "cuda"), "runs on the CPU"),
        (("-o", tmp_path / "a.so", "--target", "no-such-target"), "not a TVM target"),
        (("-o", tmp_path / "a.so", "--level", "all"), "--level is ONNX Runtime's"),
        (("-o", tmp_path / "a.so", "--dim", "batch=2"), "no input has such a dynamic dimension"),
        (("-o", files["so"]), "exists"),
    ]:
        code, _out, err = run_verb(capsys, "compile", files["seal"], "--backend", "tvm", *args)
        assert code == 2 and message in err, (args, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "a.so").exists()


def _sealed(model: onnx.ModelProto, tmp_path: Path) -> Path:
    path = tmp_path / "m.seal"
    seal_model(model, path)
    return path


def test_operator_the_frontend_lacks_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weights = [numpy_helper.from_array(np.zeros((1, 8, 2), np.float32), n) for n in ("W", "R")]
    model = make_model([helper.make_node("LSTM", ["x", "W", "R"], ["y"], name="lstm1", hidden_size=2)],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1, 2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights)  # fmt: skip
    code, _out, err = run_verb(capsys, "compile", _sealed(model, tmp_path), "--backend", "tvm", "-o", tmp_path / "m.so")
    assert code == 2 and "no converter for operator(s) LSTM (node(s) 'lstm1')" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "m.so").exists()


def test_operator_the_frontend_cannot_convert_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = make_model([helper.make_node("Pad", ["x", "pads"], ["y"], name="pad1", mode="reflect")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                        helper.make_tensor_value_info("pads", TensorProto.INT64, [4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])  # fmt: skip
    code, _out, err = run_verb(capsys, "compile", _sealed(model, tmp_path), "--backend", "tvm", "-o", tmp_path / "m.so")
    assert code == 2 and "cannot import operator Pad (node 'pad1')" in err and "Dynamic pads" in err
    assert len(err.strip().splitlines()) == 1


def test_compile_failure_is_one_line(monkeypatch: pytest.MonkeyPatch, files: dict[str, Path], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    import tvm

    def failing(*_args: Any, **_kwargs: Any) -> Any:
        raise tvm.error.InternalError("Traceback (most recent call last):\n  0: foo\nInternalError: Check failed: "
                                      "lowering\nOffending call:\nR.subtract(a, b)")  # fmt: skip

    monkeypatch.setattr(tvm, "compile", failing)
    code, _out, err = run_verb(capsys, "compile", files["seal"], "--backend", "tvm", "-o", tmp_path / "m.so")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "cannot compile the model for target llvm" in err and "offending call: R.subtract(a, b)" in err
    with pytest.raises(EngineCompileError):
        compile_tvm(files["seal"], tmp_path / "m.so")


def test_out_of_range_gather_index_reads_inside_the_tensor(tmp_path: Path) -> None:
    table = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "table")
    model = make_model([helper.make_node("Gather", ["table", "ids"], ["y"], name="embed")],
                       [helper.make_tensor_value_info("ids", TensorProto.INT64, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [table])  # fmt: skip
    session = Session(_sealed(model, tmp_path), backend="tvm")
    np.testing.assert_array_equal(session.run(None, {"ids": np.array([1, -1])})[0], [[3, 4, 5], [9, 10, 11]])
    # Far out of range: TVM's fast mode would read other memory; clipped, it stays in the table.
    far = session.run(None, {"ids": np.array([1 << 40, -(1 << 40)])})[0]
    assert set(far.ravel().tolist()) <= set(range(12))


def test_engine_refuses_feeds_it_was_not_compiled_for(files: dict[str, Path]) -> None:
    session = Session(files["so"], container=files["seal"], backend="tvm")
    with pytest.raises(InputError):
        session.run(None, {"x": FEEDS["x"].astype(np.float64)})
    _plan, engine = load_tvm_library(files["so"], files["seal"])
    with pytest.raises(InputError, match="axis 2 is 9"):
        engine.run({"x": np.zeros((1, 3, 9, 8), np.float32)})


def test_tvm_verbs_without_tvm_say_how_to_install(files: dict[str, Path], tmp_path: Path) -> None:
    script = (
        "import sys; sys.modules['tvm'] = None\n"
        "from sealtrace.cli import main\n"
        f"sys.exit(main(['compile', {str(files['seal'])!r}, '--backend', 'tvm', '-o', {str(tmp_path / 'm.so')!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})  # fmt: skip
    assert done.returncode == 2 and "pip install 'sealtrace[tvm]'" in done.stderr and "Traceback" not in done.stderr


def _reshape_by_computed_shape() -> onnx.ModelProto:
    """x[N,4] -> Reshape(x, [2 * Shape(x)[0], 2]) -> y: a new shape computed from the input's shape."""
    consts = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              (("zero", [0]), ("two", [2]), ("tail", [2]))]  # fmt: skip
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="batch"),
        helper.make_node("Mul", ["n", "two"], ["rows"], name="double"),
        helper.make_node("Concat", ["rows", "tail"], ["new_shape"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "new_shape"], ["y"], name="reshape"),
    ]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], consts)  # fmt: skip


def test_shape_computations_fold_once_the_axes_are_fixed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sealtrace.engines.shapes import fold_shapes

    seal = _sealed(_reshape_by_computed_shape(), tmp_path)
    # Left dynamic, the new shape is a computed tensor, which TVM's frontend refuses ...
    code, _out, err = run_verb(capsys, "compile", seal, "--backend", "tvm", "-o", tmp_path / "dynamic.so")
    assert code == 2 and "cannot import operator Reshape (node 'reshape')" in err
    # ... fixed, it is a constant: the Shape..Concat steps are folded and the engine is exact.
    assert run_cli("compile", seal, "--backend", "tvm", "-o", tmp_path / "m.so", "--dim", "N=3") == 0
    assert read_binding(tmp_path / "m.so").options["shape_steps_folded"] >= 4
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = Session(tmp_path / "m.so", container=seal, backend="tvm").run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, x.reshape(6, 2))
    with pytest.raises(InputError, match="axis 0 is 5"):
        Session(tmp_path / "m.so", container=seal, backend="tvm").run(None, {"x": np.zeros((5, 4), np.float32)})
    folded, count = fold_shapes(_fixed(_reshape_by_computed_shape(), 3))
    assert count >= 4 and [n.op_type for n in folded.graph.node] == ["Reshape"]


def _fixed(model: onnx.ModelProto, size: int) -> onnx.ModelProto:
    dim = model.graph.input[0].type.tensor_type.shape.dim[0]
    dim.Clear()
    dim.dim_value = size
    return model


def test_shapes_that_depend_on_input_values_are_not_folded() -> None:
    from sealtrace.engines.shapes import fold_shapes

    # NonZero's output size depends on the values of x, not on its shape: its Shape must stay.
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Shape", ["nz"], ["y"], name="shape")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                       [helper.make_tensor_value_info("y", TensorProto.INT64, [2])])  # fmt: skip
    folded, count = fold_shapes(model)
    assert count == 0 and [n.op_type for n in folded.graph.node] == ["NonZero", "Shape"]
