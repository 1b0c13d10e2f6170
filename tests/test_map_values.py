"""Maps through every part of sealtrace: ZipMap's sequences of maps (the default end of skl2onnx
classifiers) and the map inputs of DictVectorizer and CastMap, in the run, the audit log and its
digests, captures, replay, parity and diff."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import sealtrace
from sealtrace.audit import CapturedRun, CaptureStore, audited_run, replay_log, verify_log
from sealtrace.audit.diff import diff_runs
from sealtrace.audit.records import map_digest, value_digest
from sealtrace.parity import Tolerance, check_parity, compare_values

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
    assert map_digest({1: 1.5}) != map_digest({1: "0x1.8000000000000p+0"})  # kinds are tagged: no confusion
    assert map_digest({1: 2}) != map_digest({1: 2.0}) != map_digest({"1": 2.0})
    assert value_digest([a, a]) != value_digest([a])


def test_captured_maps_read_back_and_replay_bit_identically(tmp_path: Path) -> None:
    model = zip_map_model(["cat", "dog", "emu"])
    onnx.save(model, tmp_path / "m.onnx")
    session = sealtrace.Session(model)
    maps, _ = audited_run(session, {"x": X}, capture=CaptureStore(tmp_path / "cap"), audit=tmp_path / "run.jsonl")
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
    audited_run(session, {"x": X}, capture=CaptureStore(tmp_path / "ref"))
    audited_run(ort_session, {"x": X}, capture=CaptureStore(tmp_path / "ort"))
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



def map_input_model(node: onnx.NodeProto, key_type: int, value_type: int, out_type: int) -> onnx.ModelProto:
    """A one-node model whose input x is a map."""
    graph = helper.make_graph(
        [node], "maps",
        [helper.make_value_info("x", helper.make_map_type_proto(key_type, helper.make_tensor_type_proto(value_type, None)))],
        [helper.make_tensor_value_info("y", out_type, None)],
    )
    return helper.make_model(
        graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)]
    )


def _ort(model: onnx.ModelProto, feeds: dict[str, object]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_dict_vectorizer_and_cast_map_give_what_onnxruntime_gives() -> None:
    # The map types ORT's Python API can take: string -> float and int64 -> float.
    vectorizers = [
        (TensorProto.STRING, {"string_vocabulary": ["a", "c", "z"]}, {"a": 1.5, "b": 2.0, "c": -3.0}),
        (TensorProto.INT64, {"int64_vocabulary": [3, 1, 9]}, {1: 0.25, 3: 7.5}),
    ]
    for key_type, vocabulary, feed in vectorizers:
        node = helper.make_node("DictVectorizer", ["x"], ["y"], domain=ML, **vocabulary)
        model = map_input_model(node, key_type, TensorProto.FLOAT, TensorProto.FLOAT)
        (ours,) = sealtrace.Session(model).run(None, {"x": feed})
        (theirs,) = _ort(model, {"x": feed})
        assert ours.dtype == theirs.dtype and ours.tolist() == theirs.tolist()
    feed = {0: 1.5, 3: 2.25, 1: -1.0}
    for cast_to, out_type in (("TO_FLOAT", TensorProto.FLOAT), ("TO_INT64", TensorProto.INT64),
                              ("TO_STRING", TensorProto.STRING)):
        for form in ("DENSE", "SPARSE"):
            node = helper.make_node("CastMap", ["x"], ["y"], domain=ML, cast_to=cast_to, map_form=form, max_map=5)
            model = map_input_model(node, TensorProto.INT64, TensorProto.FLOAT, out_type)
            (ours,) = sealtrace.Session(model).run(None, {"x": feed})
            (theirs,) = _ort(model, {"x": feed})
            assert ours.dtype == theirs.dtype and ours.tolist() == theirs.tolist(), (cast_to, form)


def test_a_map_input_is_logged_captured_replayed_and_compared(tmp_path: Path) -> None:
    node = helper.make_node("DictVectorizer", ["x"], ["y"], domain=ML, string_vocabulary=["a", "b", "c"])
    model = map_input_model(node, TensorProto.STRING, TensorProto.FLOAT, TensorProto.FLOAT)
    onnx.save(model, tmp_path / "m.onnx")
    feeds = {"x": {"a": 1.5, "c": -2.0}}
    session = sealtrace.Session(model)
    audited_run(session, feeds, audit=tmp_path / "run.jsonl", capture=CaptureStore(tmp_path / "cap"))
    assert CapturedRun.open(tmp_path / "cap").load("x") == feeds["x"]
    header = json.loads((tmp_path / "run.jsonl").read_text().splitlines()[0])
    assert header["inputs"] == [{"name": "x", "kind": "map", "size": 2, "digest": map_digest(feeds["x"])}]
    assert verify_log(tmp_path / "run.jsonl", model=tmp_path / "m.onnx", inputs=feeds).ok  # schema included
    assert replay_log(tmp_path / "run.jsonl", tmp_path / "m.onnx", feeds).identical
    assert check_parity(model, feeds).passed  # ORT per-op, its sessions typed from the model's map type


def test_a_map_input_is_checked_like_any_other() -> None:
    from sealtrace.errors import InputError
    from sealtrace.inputs import random_feeds

    node = helper.make_node("DictVectorizer", ["x"], ["y"], domain=ML, string_vocabulary=["a"])
    session = sealtrace.Session(map_input_model(node, TensorProto.STRING, TensorProto.FLOAT, TensorProto.FLOAT))
    with pytest.raises(InputError, match="expected a map"):
        session.run(None, {"x": np.zeros(1, np.float32)})
    with pytest.raises(InputError, match="is a map: feed it from Python"):
        random_feeds(session.plan.inputs)
