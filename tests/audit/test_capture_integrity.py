"""Captures read back: every file is re-hashed against its index digest, every index is checked
before use, and every dtype a run produces reads back exactly (ml_dtypes, strings with NULs)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from sealtrace.audit import CapturedRun, audited_run
from sealtrace.audit.capture import CaptureIndexError, CaptureIntegrityError
from sealtrace.audit.records import value_digest
from sealtrace.cli import main
from sealtrace.limits import BudgetExceededError, memory_budget_of
from sealtrace.session import Session
from tests.audit.conftest import MLP_INPUT
from tests.conftest import make_model
from tests.test_map_values import X, zip_map_model


def _capture(model: Any, feeds: dict[str, Any], directory: Path) -> Path:
    audited_run(Session(model), feeds, capture=directory)
    return directory


@pytest.fixture
def two_captures(mlp_path: Path, tmp_path: Path) -> tuple[Path, Path]:
    return _capture(mlp_path, MLP_INPUT, tmp_path / "a"), _capture(mlp_path, MLP_INPUT, tmp_path / "b")


def _index(directory: Path) -> dict[str, Any]:
    index: dict[str, Any] = json.loads((directory / "index.json").read_text())
    return index


def _write_index(directory: Path, index: Any) -> None:
    (directory / "index.json").write_text(json.dumps(index))


def test_an_edited_npy_is_a_failed_check_naming_file_and_key(
    two_captures: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = two_captures
    h = np.load(b / "h.npy")
    h[0, 0] += 1
    np.save(b / "h.npy", h)  # a well-formed .npy of the right dtype and shape: only the digest tells
    with pytest.raises(CaptureIntegrityError, match=r"h\.npy"):
        CapturedRun.open(b).load("h")
    assert main(["diff", str(a), str(b)]) == 1
    err = capsys.readouterr().err
    assert "h.npy" in err and "'h'" in err and err.count("\n") == 1


def test_an_edited_map_in_a_sequence_is_a_failed_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = zip_map_model(["cat", "dog", "emu"])
    a, b = _capture(model, {"x": X}, tmp_path / "a"), _capture(model, {"x": X}, tmp_path / "b")
    assert main(["diff", str(a), str(b)]) == 0
    entry = CapturedRun.open(b).entries["maps"]
    victim = b / entry["files"][2]
    with np.load(victim) as archive:
        keys, values = archive["keys"], archive["values"].copy()
    values[0] += 1e-3
    with victim.open("wb") as f:
        np.savez(f, keys=keys, values=values)
    capsys.readouterr()
    assert main(["diff", str(a), str(b)]) == 1
    err = capsys.readouterr().err
    assert entry["files"][2] in err and "'maps'" in err


def test_an_edited_digest_in_the_index_is_caught_too(two_captures: tuple[Path, Path]) -> None:
    # The digest is recomputed from the file, so editing the index alone is no way around it.
    a, b = two_captures
    index = _index(b)
    index["values"][1]["digest"] = _index(a)["values"][2]["digest"]
    _write_index(b, index)
    with pytest.raises(CaptureIntegrityError, match=r"h\.npy"):
        CapturedRun.open(b).load("h")


def _cast_model() -> onnx.ModelProto:
    """x float32 -> Cast to each type np.save cannot describe exactly (and a string output)."""
    targets = {
        "bf16": TensorProto.BFLOAT16,
        "e4m3": TensorProto.FLOAT8E4M3FN,
        "e5m2": TensorProto.FLOAT8E5M2,
        "i4": TensorProto.INT4,
        "u4": TensorProto.UINT4,
    }
    nodes = [helper.make_node("Cast", ["x"], [name], name=f"to_{name}", to=to) for name, to in targets.items()]
    outputs = [helper.make_tensor_value_info(name, to, [2, 3]) for name, to in targets.items()]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])], outputs, opset=21)


def test_extension_dtypes_read_back_exactly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    x = np.array([[0.5, -1.0, 2.0], [3.0, -4.0, 1.5]], np.float32)
    outputs = Session(_cast_model()).run(None, {"x": x})
    a = _capture(_cast_model(), {"x": x}, tmp_path / "a")
    b = _capture(_cast_model(), {"x": x}, tmp_path / "b")
    run = CapturedRun.open(a)
    for name, expected in zip(("bf16", "e4m3", "e5m2", "i4", "u4"), outputs, strict=True):
        value = run.load(name)
        assert value.dtype == expected.dtype, name
        assert value.tobytes() == expected.tobytes(), name
        assert value_digest(value) == run.entries[name]["digest"], name
    assert main(["diff", str(a), str(b)]) == 0
    assert "0 differing" in capsys.readouterr().out


def test_strings_that_unicode_arrays_cannot_hold_read_back_exactly(tmp_path: Path) -> None:
    # NumPy's unicode arrays drop trailing NULs: such strings are stored as UTF-8 with lengths.
    model = make_model(
        [helper.make_node("Identity", ["s"], ["t"], name="copy")],
        [helper.make_tensor_value_info("s", TensorProto.STRING, [3])],
        [helper.make_tensor_value_info("t", TensorProto.STRING, [3])],
    )
    feeds = {"s": np.array(["a\x00", "", "é\x00\x00"], dtype=object)}
    run = CapturedRun.open(_capture(model, feeds, tmp_path / "cap"))
    assert run.load("t").tolist() == ["a\x00", "", "é\x00\x00"]
    assert value_digest(run.load("s")) == value_digest(feeds["s"]) == run.entries["s"]["digest"]
    plain = _capture(model, {"s": np.array(["a", "b", "c"], dtype=object)}, tmp_path / "plain")
    assert _index(plain)["format"] == "sealtrace.capture.v1"  # nothing a v1 reader would misread
    assert sorted(p.name for p in plain.iterdir()) == ["index.json", "s.npy", "t.npy"]


def test_captures_written_before_encodings_stay_readable(tmp_path: Path) -> None:
    # A v1 capture of a bfloat16 value: np.save wrote it as raw void ('<V2').
    import ml_dtypes

    value = np.array([1.5, -2.0, 0.25], ml_dtypes.bfloat16)
    directory = tmp_path / "old"
    directory.mkdir()
    np.save(directory / "v.npy", value)
    entry = {"key": "v", "name": "v", "source": "input", "step": "", "op_type": "", "kind": "tensor",
             "files": ["v.npy"], "dtype": "<V2", "shape": [3], "digest": value_digest(value)}
    _write_index(directory, {"format": "sealtrace.capture.v1", "complete": True, "values": [entry]})
    loaded = CapturedRun.open(directory).load("v")
    assert loaded.tobytes() == value.tobytes()
    assert value_digest(loaded) == entry["digest"]


GOOD_ENTRY = {"key": "x", "name": "x", "source": "input", "step": "", "op_type": "", "kind": "tensor",
              "files": ["x.npy"], "dtype": "<f4", "shape": [1, 4], "digest": "0" * 64}


@pytest.mark.parametrize(
    "index",
    [
        [],
        "capture",
        {"format": "sealtrace.capture.v1", "complete": True},
        {"format": "sealtrace.capture.v1", "complete": True, "values": {"x": 1}},
        {"format": "sealtrace.capture.v1", "complete": True, "values": [7]},
        {"format": "sealtrace.capture.v1", "complete": "yes", "values": []},
        {"format": "sealtrace.capture.v9", "complete": True, "values": []},
        {"format": "sealtrace.capture.v1", "complete": True, "values": [{**GOOD_ENTRY, "key": None}]},
        {"format": "sealtrace.capture.v1", "complete": True, "values": [{**GOOD_ENTRY, "kind": "blob"}]},
        {"format": "sealtrace.capture.v1", "complete": True, "values": [{**GOOD_ENTRY, "files": "x.npy"}]},
        {"format": "sealtrace.capture.v1", "complete": True, "values": [{**GOOD_ENTRY, "files": ["a.npy", "b.npy"]}]},
        {"format": "sealtrace.capture.v1", "complete": True, "values": [{**GOOD_ENTRY, "digest": 5}]},
        {"format": "sealtrace.capture.v1", "complete": True, "values": [{**GOOD_ENTRY, "step": ["s"]}]},
        {"format": "sealtrace.capture.v1", "complete": True, "values": [{k: v for k, v in GOOD_ENTRY.items() if k != "kind"}]},
        {"format": "sealtrace.capture.v1", "complete": True, "values": [GOOD_ENTRY, GOOD_ENTRY]},
        {"format": "sealtrace.capture.v2", "complete": True, "values": [{**GOOD_ENTRY, "encodings": {"x.npy": "pickle"}}]},
        {"format": "sealtrace.capture.v1", "complete": True, "values": [{**GOOD_ENTRY, "kind": "none"}]},
    ],
)
def test_malformed_indexes_exit_2_naming_the_index(
    two_captures: tuple[Path, Path], index: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = two_captures
    _write_index(b, index)
    with pytest.raises(CaptureIndexError, match=r"index\.json"):
        CapturedRun.open(b)
    assert main(["diff", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "index.json" in err and err.startswith("sealtrace: error:") and err.count("\n") == 1


@pytest.mark.parametrize("text", ["[" * 100_000, '{"values": ' * 50_000, "{", "\xff\xfe", ""])
def test_unparseable_indexes_exit_2(two_captures: tuple[Path, Path], text: str, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_captures
    (b / "index.json").write_bytes(text.encode("latin-1"))
    assert main(["diff", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "index.json" in err and "internal error" not in err


def _forged_npy(path: Path, shape: tuple[int, ...]) -> None:
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1, np.float32))
    header["shape"] = shape
    with path.open("wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(b"\0" * 16)


def test_a_forged_npy_declaring_a_terabyte_is_a_failed_check(
    two_captures: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # The index records what the file held: a file that no longer reads back is a failed check (exit 1),
    # refused from its header before anything is allocated.
    a, b = two_captures
    _forged_npy(b / "h.npy", (10**12,))
    assert (b / "h.npy").stat().st_size < 200
    with pytest.raises(CaptureIntegrityError, match=r"h\.npy"):
        CapturedRun.open(b).load("h")
    assert main(["diff", str(a), str(b)]) == 1
    assert "h.npy" in capsys.readouterr().err


def test_a_capture_larger_than_the_budget_is_bad_input(two_captures: tuple[Path, Path]) -> None:
    # Not a tampered file: an honest value over the memory budget asks for a larger budget (exit 2).
    a, _b = two_captures
    run = CapturedRun.open(a)
    with memory_budget_of(8), pytest.raises(BudgetExceededError, match="memory budget"):
        run.load("x")


@pytest.mark.parametrize("victim", ["index.json", "h.npy"])
def test_a_fifo_or_device_in_a_capture_is_refused_without_reading(
    two_captures: tuple[Path, Path], victim: str, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = two_captures
    (b / victim).unlink()
    os.mkfifo(b / victim)  # reading a FIFO without a writer would block forever
    expected = 2 if victim == "index.json" else 1
    assert main(["diff", str(a), str(b)]) == expected
    assert "regular file" in capsys.readouterr().err
    (b / victim).unlink()
    (b / victim).symlink_to("/dev/zero")  # would be an endless read
    assert main(["diff", str(a), str(b)]) == expected
    assert "regular file" in capsys.readouterr().err


def test_a_missing_capture_file_is_a_failed_check(two_captures: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_captures
    (b / "z.npy").unlink()
    assert main(["diff", str(a), str(b)]) == 1
    assert "z.npy" in capsys.readouterr().err


def test_a_map_with_keys_unicode_arrays_cannot_hold_reads_back_exactly(tmp_path: Path) -> None:
    from tests.test_map_values import ML, map_input_model

    node = helper.make_node("DictVectorizer", ["x"], ["y"], domain=ML, string_vocabulary=["a\x00", "b"])
    model = map_input_model(node, TensorProto.STRING, TensorProto.FLOAT, TensorProto.FLOAT)
    feeds = {"x": {"a\x00": 1.5, "b": -2.0}}
    run = CapturedRun.open(_capture(model, feeds, tmp_path / "cap"))
    assert run.load("x") == feeds["x"]
    assert _index(tmp_path / "cap")["format"] == "sealtrace.capture.v2"


def test_a_capture_file_whose_header_does_not_close_is_a_failed_check(
    two_captures: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # NumPy re-tokenizes such a header and raises tokenize.TokenError: it was an internal error.
    a, b = two_captures
    data = bytearray((b / "h.npy").read_bytes())
    data[data.index(b"}")] = ord(" ")
    (b / "h.npy").write_bytes(bytes(data))
    assert main(["diff", str(a), str(b)]) == 1
    err = capsys.readouterr().err
    assert "h.npy" in err and "not a readable .npy header" in err
