"""Capture: every intermediate tensor as .npy, keyed by value name, with safe file names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from sealtrace.audit import AuditLogExistsError, AuditRecorder, CapturedRun, CaptureStore, audited_run
from sealtrace.audit.capture import safe_file_stem
from sealtrace.session import Session
from tests.audit.conftest import MLP_INPUT, loop_model


def test_capture_holds_every_value_with_the_logged_digest(mlp_path: Path, tmp_path: Path) -> None:
    recorder = AuditRecorder(None)
    outputs = audited_run(Session(mlp_path), MLP_INPUT, audit=recorder, capture=tmp_path / "cap")
    captured = CapturedRun.open(tmp_path / "cap")
    assert captured.complete
    assert captured.keys() == ["x", "h", "z", "y"]
    np.testing.assert_array_equal(captured.load("x"), MLP_INPUT["x"])
    np.testing.assert_array_equal(captured.load("y"), outputs[0])
    logged = {o["name"]: o["digest"] for r in recorder.records if r["type"] == "step" for o in r["outputs"]}
    for key in ("h", "z", "y"):
        assert captured.entries[key]["digest"] == logged[key]
    assert sorted(p.name for p in (tmp_path / "cap").iterdir()) == ["h.npy", "index.json", "x.npy", "y.npy", "z.npy"]


def test_subgraph_values_are_keyed_by_path(tmp_path: Path) -> None:
    audited_run(Session(loop_model()), {"x": np.array([1.0, -2.0], np.float32)}, capture=tmp_path / "cap")
    captured = CapturedRun.open(tmp_path / "cap")
    assert "loop/body/2/acc_out" in captured
    np.testing.assert_array_equal(captured.load("loop/body/2/acc_out"), [3.0, -6.0])
    np.testing.assert_array_equal(captured.load("loop/body/0/acc_out"), [1.0, -2.0])
    files = [f for e in captured.entries.values() for f in e["files"]]
    assert len(set(files)) == len(files)
    assert all("/" not in f for f in files)


def test_capture_refuses_a_non_empty_directory(mlp_path: Path, tmp_path: Path) -> None:
    (tmp_path / "cap").mkdir()
    (tmp_path / "cap" / "keep.txt").write_text("x")
    with pytest.raises(AuditLogExistsError):
        audited_run(Session(mlp_path), MLP_INPUT, capture=tmp_path / "cap")
    store = CaptureStore(tmp_path / "cap", overwrite=True)
    audited_run(Session(mlp_path), MLP_INPUT, capture=store)
    assert CapturedRun.open(tmp_path / "cap").complete


def test_safe_file_stems() -> None:
    taken: set[str] = set()
    assert safe_file_stem("conv1_out", taken) == "conv1_out"
    odd = [safe_file_stem(k, taken) for k in ("../etc/passwd", "a:b", "a_b", ".hidden", "", "x" * 500, "A", "a")]
    for stem in odd:
        assert stem and not stem.startswith(".") and len(stem) <= 120
        assert all(c.isalnum() or c in "._-" for c in stem)
    lowered = [s.lower() for s in ["conv1_out", *odd]]
    assert len(set(lowered)) == len(lowered)  # unique even on case-insensitive filesystems


def test_index_is_json(mlp_path: Path, tmp_path: Path) -> None:
    audited_run(Session(mlp_path), MLP_INPUT, capture=tmp_path / "cap")
    index = json.loads((tmp_path / "cap" / "index.json").read_text())
    assert index["format"] == "sealtrace.capture.v1"
    assert {e["source"] for e in index["values"]} == {"input", "step"}


def test_failed_run_leaves_an_incomplete_index(tmp_path: Path) -> None:
    from sealtrace.errors import KernelError
    from tests.audit.test_recorder import _failing_model

    feeds = {"x": np.ones((2, 3), np.float32), "shape": np.array([4, 4], np.int64)}
    with pytest.raises(KernelError):
        audited_run(Session(_failing_model()), feeds, capture=tmp_path / "cap")
    captured = CapturedRun.open(tmp_path / "cap")
    assert not captured.complete
    assert captured.keys() == ["x", "shape", "r"]


def test_capture_memory_is_bounded(tmp_path: Path) -> None:
    from tests.audit.test_recorder import _big_chain

    size = 1 << 18  # 1 MiB per tensor
    store = CaptureStore(tmp_path / "cap", max_pending_bytes=2 << 20)
    audited_run(Session(_big_chain(12, size)), {"v0": np.zeros(size, np.float32)}, capture=store)
    assert 0 < store.peak_pending_bytes <= 2 << 20
    np.testing.assert_array_equal(CapturedRun.open(tmp_path / "cap").load("v12"), np.full(size, 12, np.float32))


@pytest.mark.parametrize("bad", ["../outside.npy", "/etc/passwd", "sub/dir.npy", "..", "", 7, {}, ["x.npy"], ".hidden.npy"])
def test_a_crafted_index_cannot_point_outside_the_capture(mlp_path: Path, tmp_path: Path, bad: object) -> None:
    # Captures are shared and diffed: the file names in their index are checked before use.
    from sealtrace.errors import InputError

    audited_run(Session(mlp_path), MLP_INPUT, capture=tmp_path / "cap")
    (tmp_path / "outside.npy").write_bytes((tmp_path / "cap" / "x.npy").read_bytes())
    index_path = tmp_path / "cap" / "index.json"
    index = json.loads(index_path.read_text())
    index["values"][0]["files"] = [bad]
    index_path.write_text(json.dumps(index))
    captured = CapturedRun.open(tmp_path / "cap")
    with pytest.raises(InputError, match="invalid file"):
        captured.load(index["values"][0]["key"])


def _zip_map_capture(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, Path]:
    from sealtrace.cli import main
    from tests.test_map_values import X, zip_map_model

    onnx.save(zip_map_model(["cat", "dog", "emu"]), tmp_path / "zipmap.onnx")
    np.save(tmp_path / "x.npy", X)
    code = main(["run", str(tmp_path / "zipmap.onnx"), "--input", f"x={tmp_path / 'x.npy'}",
                 "--capture", str(tmp_path / "cap"), *extra])
    capsys.readouterr()
    return code, tmp_path / "cap"


def _loads_whole(directory: Path) -> bool:
    run = CapturedRun.open(directory)
    return all(run.load(key) is not None or run.entries[key]["kind"] == "none" for key in run.entries)


def test_force_replaces_a_capture_of_maps_and_keeps_files_sealtrace_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, cap = _zip_map_capture(tmp_path, capsys)
    assert code == 0
    first = sorted(p.name for p in cap.iterdir())
    (cap / "mine.npy").write_bytes(b"a user's file")  # not listed in the index: not sealtrace's
    (cap / "notes.txt").write_text("notes")
    code, cap = _zip_map_capture(tmp_path, capsys, "--force")
    assert code == 0
    assert (cap / "mine.npy").read_bytes() == b"a user's file" and (cap / "notes.txt").read_text() == "notes"
    assert sorted(p.name for p in cap.iterdir()) == sorted([*first, "mine.npy", "notes.txt"])
    assert CapturedRun.open(cap).complete and _loads_whole(cap)


def test_force_removes_the_files_of_the_previous_capture(mlp_path: Path, tmp_path: Path) -> None:
    audited_run(Session(loop_model()), {"x": np.array([1.0, -2.0], np.float32)}, capture=tmp_path / "cap")
    (tmp_path / "cap" / "h.npy").write_bytes(b"a user's h")  # a name the next capture wants
    audited_run(Session(mlp_path), MLP_INPUT, capture=CaptureStore(tmp_path / "cap", overwrite=True))
    run = CapturedRun.open(tmp_path / "cap")
    listed = {name for entry in run.entries.values() for name in entry["files"]}
    assert (tmp_path / "cap" / "h.npy").read_bytes() == b"a user's h"  # kept; the new h went elsewhere
    assert sorted(p.name for p in (tmp_path / "cap").iterdir()) == sorted([*listed, "h.npy", "index.json"])
    np.testing.assert_array_equal(run.load("x"), MLP_INPUT["x"])
    assert _loads_whole(tmp_path / "cap")


def test_the_previous_capture_stays_whole_until_the_new_one_is_in_place(mlp_path: Path, tmp_path: Path) -> None:
    audited_run(Session(mlp_path), MLP_INPUT, capture=tmp_path / "cap")
    seen: list[bool] = []

    class Watch:
        def on_run_start(self, *args: object) -> None:
            pass

        def on_step(self, event: object) -> None:
            seen.append(_loads_whole(tmp_path / "cap"))  # a run killed now leaves this capture

        def on_run_end(self, outputs: object) -> None:
            pass

    doubled = {"x": MLP_INPUT["x"] * 2}
    audited_run(Session(mlp_path), doubled, observers=[Watch()], capture=CaptureStore(tmp_path / "cap", overwrite=True))
    assert seen and all(seen)
    np.testing.assert_array_equal(CapturedRun.open(tmp_path / "cap").load("x"), doubled["x"])


def test_a_capture_whose_writer_failed_is_not_complete(
    mlp_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sealtrace.audit import AuditWriteError

    real_save = CaptureStore._save
    calls = iter(range(100))

    def failing_save(self: CaptureStore, key: str, value: object, encodings: dict[str, str]) -> str:
        if next(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_save(self, key, value, encodings)

    monkeypatch.setattr(CaptureStore, "_save", failing_save)
    with pytest.raises(AuditWriteError, match="No space left"):
        audited_run(Session(mlp_path), MLP_INPUT, capture=tmp_path / "cap")
    captured = CapturedRun.open(tmp_path / "cap")
    assert not captured.complete
    assert captured.keys() == ["x", "h"]
    assert _loads_whole(tmp_path / "cap")


def test_force_removes_only_array_files_an_index_lists(mlp_path: Path, tmp_path: Path) -> None:
    audited_run(Session(mlp_path), MLP_INPUT, capture=tmp_path / "cap")
    (tmp_path / "cap" / "notes.txt").write_text("mine")
    index = json.loads((tmp_path / "cap" / "index.json").read_text())
    index["values"][0]["files"] = ["notes.txt"]  # an edited index cannot get a user's file deleted
    (tmp_path / "cap" / "index.json").write_text(json.dumps(index))
    audited_run(Session(mlp_path), MLP_INPUT, capture=CaptureStore(tmp_path / "cap", overwrite=True))
    assert (tmp_path / "cap" / "notes.txt").read_text() == "mine"
    assert _loads_whole(tmp_path / "cap")
