"""``sealtrace diff``: two captures or two audit logs compared value by value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from sealtrace.audit import audited_run
from sealtrace.audit.diff import diff_runs
from sealtrace.cli import main
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


def test_a_log_that_does_not_verify_is_a_failed_check(
    recorded: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An edited record (its digest no longer matches) used to be compared as if it were honest.
    lines = recorded["log_again"].read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"op_type":"Relu"', b'"op_type":"Elu"').replace(b'"op_type":"Conv"', b'"op_type":"Elu"')
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_bytes(b"".join(lines))
    assert main(["diff", str(recorded["log_a"]), str(tampered)]) == 1
    err = capsys.readouterr().err
    assert "line 3" in err and "tampered.jsonl" in err and err.count("\n") == 1
    tampered.write_bytes(b"".join([*lines[:2], b"[" * 100_000 + b"\n", *lines[3:]]))  # deep nesting
    assert main(["diff", str(recorded["log_a"]), str(tampered)]) == 1
    assert "line 3" in capsys.readouterr().err


@pytest.mark.parametrize("special", ["fifo", "device"])
def test_a_log_that_is_not_a_regular_file_is_refused_unread(
    recorded: dict[str, Path], tmp_path: Path, special: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    path = tmp_path / "log.jsonl"
    if special == "fifo":
        os.mkfifo(path)  # no writer: a plain read would wait forever
    else:
        path.symlink_to("/dev/zero")  # a read without end
    assert main(["diff", str(recorded["log_a"]), str(path)]) == 2
    assert "regular file" in capsys.readouterr().err


def test_summary_counts_values_within_tolerance_and_names_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    model = tmp_path / "net.onnx"
    onnx.save(conv_net(), model)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    for name, value in (("x", x), ("near", x + np.float32(1e-6)), ("far", x + np.float32(1.0))):
        np.save(tmp_path / f"{name}.npy", value)
        assert main(["run", str(model), "--input", f"x={tmp_path / f'{name}.npy'}", "--capture",
                     str(tmp_path / f"cap_{name}")]) == 0
    capsys.readouterr()
    assert main(["diff", str(tmp_path / "cap_x"), str(tmp_path / "cap_near")]) == 0
    out = capsys.readouterr().out
    report = diff_runs(tmp_path / "cap_x", tmp_path / "cap_near")
    within = report.count("within")
    assert within > 0 and f"{within} within tolerance" in out and "0 differing" in out
    assert main(["diff", str(tmp_path / "cap_x"), str(tmp_path / "cap_near"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["within"] == within
    assert main(["diff", str(tmp_path / "cap_x"), str(tmp_path / "cap_far")]) == 1
    out = capsys.readouterr().out
    assert "drift origin: x (graph input): exceeds" in out and "(step ," not in out


def test_logs_compare_their_inputs_too(tmp_path: Path) -> None:
    model = tmp_path / "net.onnx"
    onnx.save(conv_net(), model)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    for name, value in (("a", x), ("b", -x)):
        np.save(tmp_path / f"{name}.npy", value)
        assert main(["run", str(model), "--input", f"x={tmp_path / f'{name}.npy'}", "--audit",
                     str(tmp_path / f"{name}.jsonl")]) == 0
    report = diff_runs(tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    assert report.drift_origin is not None and report.drift_origin.key == "x"
    assert report.drift_origin.where() == "graph input"


def test_values_that_are_none_on_both_sides_are_identical(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    from sealtrace.session import Session
    from tests.conftest import make_model

    # An Optional without input: an empty optional, captured with kind "none" and no digest.
    float_type = helper.make_tensor_type_proto(TensorProto.FLOAT, [1])
    model = make_model(
        [
            helper.make_node("Identity", ["x"], ["y"], name="copy"),
            helper.make_node("Optional", [], ["nothing"], name="empty", type=float_type),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
            helper.make_value_info("nothing", helper.make_optional_type_proto(float_type)),
        ],
        opset=18,
    )
    for name in ("a", "b"):
        audited_run(Session(model), {"x": np.ones(2, np.float32)}, capture=tmp_path / name)
    report = diff_runs(tmp_path / "a", tmp_path / "b")
    assert [(e.key, e.status) for e in report.entries] == [("x", "identical"), ("y", "identical"),
                                                            ("nothing", "identical")]


def test_diff_holds_a_few_captured_values_at_a_time(
    recorded: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two captures of a large model do not fit in memory together: values are read as compared.
    import weakref

    from sealtrace.audit.capture import CapturedRun

    alive: list[weakref.ref[np.ndarray]] = []
    most = 0
    real_load = CapturedRun.load

    def load(self: CapturedRun, key: str) -> object:
        nonlocal most
        value = real_load(self, key)
        alive.append(weakref.ref(value))
        most = max(most, sum(1 for ref in alive if ref() is not None))
        return value

    monkeypatch.setattr(CapturedRun, "load", load)
    report = diff_runs(recorded["cap_a"], recorded["cap_b"])
    assert len(alive) == 2 * len(report.entries) > 6
    assert most <= 3


def test_a_capture_against_a_log_differing_beyond_the_sample_differs(tmp_path: Path) -> None:
    # The log holds the first 8 values only: agreement there says nothing about the rest.
    from onnx import TensorProto, helper

    from sealtrace.session import Session
    from tests.conftest import make_model

    model = make_model([helper.make_node("Identity", ["x"], ["y"], name="copy")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [20])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [20])])
    x = np.arange(20, dtype=np.float32)
    other = x.copy()
    other[-1] += 5
    audited_run(Session(model), {"x": x}, capture=tmp_path / "cap")
    audited_run(Session(model), {"x": other}, audit=tmp_path / "run.jsonl")
    for a, b in ((tmp_path / "cap", tmp_path / "run.jsonl"), (tmp_path / "run.jsonl", tmp_path / "cap")):
        report = diff_runs(a, b)
        assert not report.passed  # the capture's side used to be judged "within" on the sample alone
        assert {e.status for e in report.entries} == {"digest-differs"}


def test_two_incomplete_captures_do_not_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Both runs failed at the same step: their captures agree, but they are no complete runs.
    from sealtrace.errors import KernelError
    from sealtrace.session import Session
    from tests.audit.test_recorder import _failing_model

    feeds = {"x": np.ones((2, 3), np.float32), "shape": np.array([4, 4], np.int64)}
    for name in ("a", "b"):
        with pytest.raises(KernelError):
            audited_run(Session(_failing_model()), feeds, capture=tmp_path / name)
    report = diff_runs(tmp_path / "a", tmp_path / "b")
    assert not report.differing and not report.passed
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    captured = capsys.readouterr()
    assert "incomplete capture" in captured.out and "incomplete capture" in captured.err
