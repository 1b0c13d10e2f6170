"""ONNX files with external data: read once, identified by every byte that executes, and refused
(exit 2, never an internal error) when the external data points anywhere it should not."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from sealtrace import Session
from sealtrace.cli import main
from sealtrace.errors import InvalidModelError
from sealtrace.plan.modelfile import files_digest, model_file_digest, read_model_file
from tests.container.conftest import tiny_model

FEEDS = {"x": np.array([[1.0, 2.0]], np.float32)}


def save_external(path: Path) -> Path:
    """tiny_model() saved with every initializer in one external data file beside it."""
    onnx.save(tiny_model(), path, save_as_external_data=True, location=f"{path.name}.data", size_threshold=0)
    return path.with_name(f"{path.name}.data")


def set_external(model_path: Path, **entries: str) -> None:
    """Rewrite the external_data entries (location, offset, length) of the model's first initializer."""
    model = onnx.load(model_path, load_external_data=False)
    tensor = model.graph.initializer[0]
    for entry in tensor.external_data:
        if entry.key in entries:
            entry.value = entries.pop(entry.key)
    for key, value in entries.items():
        added = tensor.external_data.add()
        added.key, added.value = key, value
    model_path.write_bytes(model.SerializeToString())


def test_identity_without_external_data_is_the_file_sha256(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(tiny_model(), path)
    sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    read = read_model_file(path)
    # Unchanged from before external data counted: old audit logs and bindings still verify.
    assert read.external_data == () and read.digest == sha256 == model_file_digest(path)
    assert Session(str(path)).origin.sha256 == sha256


def test_identity_covers_external_data_in_a_defined_order(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    data = save_external(path)
    read = read_model_file(path)
    assert [f.path for f in read.external_data] == ["m.onnx.data"]
    assert read.external_data[0].sha256 == hashlib.sha256(data.read_bytes()).hexdigest()
    assert read.digest == files_digest(read.sha256, read.size, read.external_data) == model_file_digest(path)
    assert read.digest != read.sha256
    assert Session(str(path)).origin.sha256 == read.digest
    # One changed weight byte in the .data file changes the identity.
    raw = bytearray(data.read_bytes())
    raw[0] ^= 0x40
    data.write_bytes(bytes(raw))
    assert model_file_digest(path) != read.digest


def test_files_digest_frames_each_file() -> None:
    from sealtrace.plan.modelfile import ExternalFile

    a = [ExternalFile("a.data", "0" * 64, 2), ExternalFile("b.data", "1" * 64, 2)]
    b = [ExternalFile("a.data", "0" * 64, 3), ExternalFile("b.data", "1" * 64, 1)]
    assert files_digest("f" * 64, 10, a) != files_digest("f" * 64, 10, b)
    assert files_digest("f" * 64, 10, a) == files_digest("f" * 64, 10, list(reversed(a)))  # sorted by path


def test_weights_come_from_the_bytes_that_were_hashed(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    save_external(path)
    read = read_model_file(path)
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in read.model.graph.initializer}
    np.testing.assert_array_equal(weights["W"], np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5)
    assert all(t.data_location == TensorProto.DEFAULT and not t.external_data for t in read.model.graph.initializer)


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ({"location": "../outside.data"}, "leaves the model's directory"),
        ({"location": "/etc/passwd"}, "absolute"),
        ({"location": "sub/../../outside.data"}, "leaves the model's directory"),
        ({"offset": "-8"}, "negative"),
        ({"length": "-1"}, "negative"),
        ({"offset": "x"}, "not an integer"),
        ({"offset": "4096"}, "past the end"),
        ({"length": "4096"}, "past the end"),
    ],
)
def test_bad_external_data_is_bad_input(tmp_path: Path, entries: dict[str, str], message: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    path = tmp_path / "m.onnx"
    save_external(path)
    (tmp_path.parent / "outside.data").write_bytes(b"\0" * 64)
    set_external(path, **entries)
    with pytest.raises(InvalidModelError, match=message):
        read_model_file(path)
    capsys.readouterr()
    # onnx's ValidationError is not a ValueError: this was an internal error (exit 3).
    assert main(["run", str(path), "--random-inputs"]) == 2
    assert main(["seal", str(path), "-o", str(tmp_path / "m.seal")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("sealtrace: error:") for line in err)


def test_symlink_out_of_the_directory_is_refused(tmp_path: Path) -> None:
    inner = tmp_path / "model"
    inner.mkdir()
    path = inner / "m.onnx"
    data = save_external(path)
    outside = tmp_path / "elsewhere.data"
    outside.write_bytes(data.read_bytes())
    data.unlink()
    data.symlink_to(outside)
    with pytest.raises(InvalidModelError, match="outside the model's directory"):
        read_model_file(path)


def test_external_data_file_that_is_not_regular_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    data = save_external(path)
    data.unlink()
    os.mkfifo(data)  # a read of it would block forever
    with pytest.raises(InvalidModelError, match="not a regular file"):
        read_model_file(path)
    with pytest.raises(InvalidModelError, match="not a regular file"):
        model_file_digest(path)


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh process with a time limit: an unbounded read shows as a timeout, not a hang."""
    return subprocess.run([sys.executable, "-m", "sealtrace", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("device", ["/dev/zero", "fifo"])
def test_devices_and_fifos_are_refused_as_models_and_containers(tmp_path: Path, device: str) -> None:
    if device == "fifo":
        device = str(tmp_path / "pipe")
        os.mkfifo(device)
    for args in (["run", device, "--random-inputs"], ["verify", device], ["inspect", device],
                 ["seal", device, "-o", str(tmp_path / "x.seal")]):  # fmt: skip
        done = _cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("sealtrace: error:") and len(done.stderr.strip().splitlines()) == 1
