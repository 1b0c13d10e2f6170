"""Sequences of maps (ZipMap's output, the default end of skl2onnx classifiers) through every part of
sealtrace: the run, the audit digest, captures, replay, parity and diff."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import sealtrace
from sealtrace.audit import CapturedRun, CaptureStore, replay_log
from sealtrace.audit.records import map_digest, value_digest
from sealtrace.parity import Tolerance, check_parity, compare_values
from sealtrace.parity.diff import diff_runs

ML = "ai.onnx.ml"


def zip_map_model(labels: list[int] | list[str]) -> onnx.ModelProto:
    """softmax(x) -> ZipMap: a classifier's probabilities as one map per sample."""
    key = "classlabels_strings" if isinstance(labels[0], str) else "classlabels_int64s"
    nodes = [
        helper.make_node("Softmax", ["x"], ["p"], name="softmax", axis=1),
        helper.make_node("ZipMap", ["p"], ["maps"], name="zipmap", domain=ML, **{key: labels}),
    ]
    key_type = TensorProto.STRING if key == "classlabels_strings" else TensorProto.INT64
    maps = helper.make_sequence_type_proto(
        helper.make_map_type_proto(key_type, helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    )
    graph = helper.make_graph(
        nodes, "zipmap", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, len(labels)])],
        [helper.make_value_info("maps", maps), helper.make_tensor_value_info("p", TensorProto.FLOAT, None)],
    )
    return helper.make_model(
        graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)]
    )


X = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)


def test_zip_map_gives_what_onnxruntime_gives() -> None:
    for labels in ([4, 7, 9], ["cat", "dog", "emu"]):
        model = zip_map_model(labels)
        (ours, _) = sealtrace.Session(model).run(None, {"x": X})
        (theirs, _) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": X}
        )
        assert [list(m) for m in ours] == [list(m) for m in theirs] == [labels] * len(X)
        for mine, other in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(list(mine.values()), list(other.values()), rtol=1e-6)


def test_map_digest_is_exact_and_order_free() -> None:
    a = {1: 0.25, 2: 0.75}
    assert map_digest(a) == map_digest({2: 0.75, 1: 0.25})
    assert map_digest(a) != map_digest({1: 0.25, 2: float(np.nextafter(0.75, 1))})  # one ulp apart
    assert map_digest(a) != map_digest({1: 0.25, 3: 0.75})
    assert value_digest([a, a]) != value_digest([a])


def test_captured_maps_read_back_and_replay_bit_identically(tmp_path: Path) -> None:
    model = zip_map_model(["cat", "dog", "emu"])
    onnx.save(model, tmp_path / "m.onnx")
    session = sealtrace.Session(model)
    maps, _ = session.run(None, {"x": X}, capture=CaptureStore(tmp_path / "cap"), audit=tmp_path / "run.jsonl")
    run = CapturedRun.open(tmp_path / "cap")
    assert run.load("maps") == maps
    assert run.entries["maps"]["digest"] == value_digest(maps)
    report = replay_log(tmp_path / "run.jsonl", tmp_path / "m.onnx", {"x": X})
    assert report.identical, report.summary()


def test_parity_and_diff_compare_maps_by_key() -> None:
    tol = Tolerance()
    a = {1: 0.25, 2: 0.75}
    next_float32 = float(np.nextafter(np.float32(0.75), np.float32(1)))
    close = compare_values("m", [a], [{2: next_float32, 1: 0.25}], tol)
    assert not close.exceeds and close.max_ulp == 1  # float32 steps, not float64 ones
    assert compare_values("m", [a], [{1: 0.25, 2: 0.8}], tol).exceeds
    other_keys = compare_values("m", [a], [{1: 0.25, 3: 0.75}], tol)
    assert other_keys.exceeds and "keys differ" in (other_keys.shape_mismatch or "")
    report = check_parity(zip_map_model([4, 7, 9]), {"x": X})
    assert report.passed and [s.op_type for s in report.steps] == ["Softmax", "ZipMap"]


def test_diff_of_two_captures_with_maps(tmp_path: Path) -> None:
    model = zip_map_model([4, 7, 9])
    session = sealtrace.Session(model)
    ort_session = sealtrace.Session(model, backend="onnxruntime")
    session.run(None, {"x": X}, capture=CaptureStore(tmp_path / "ref"))
    ort_session.run(None, {"x": X}, capture=CaptureStore(tmp_path / "ort"))
    report = diff_runs(tmp_path / "ref", tmp_path / "ort", None)
    assert report.passed


def test_run_out_names_the_outputs_an_npz_cannot_hold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sealtrace.cli import main

    onnx.save(zip_map_model([4, 7, 9]), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", X)
    out = tmp_path / "out.npz"
    assert main(["run", str(tmp_path / "m.onnx"), "--input", f"x={tmp_path / 'x.npy'}", "--out", str(out)]) == 0
    assert "left out: maps" in capsys.readouterr().out
    with np.load(out) as saved:
        assert list(saved) == ["p"]
