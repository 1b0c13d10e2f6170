"""Reading .npy/.npz from outside: declared sizes checked against the file and the memory budget."""

from __future__ import annotations

import os
import struct
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper

from sealtrace.arrayfiles import ArrayFileError, as_declared, load_npy, load_npz, save_npy, save_npz
from sealtrace.cli import main
from sealtrace.limits import BudgetExceededError, format_size, memory_budget, memory_budget_of, parse_size


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    """y = relu(x) with x float32[batch, 4]: one dynamic dimension, named."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def forged_npy(path: Path, shape: tuple[int, ...], dtype: str = "<f4", data: bytes = b"") -> Path:
    """A .npy whose header declares ``shape`` but that holds only ``data``."""
    header = f"{{'descr': '{dtype}', 'fortran_order': False, 'shape': {shape}, }}"
    header += " " * (-(len(header) + 11) % 64) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data)
    return path


def test_a_tiny_npy_declaring_terabytes_is_refused_before_allocating(tmp_path: Path) -> None:
    path = forged_npy(tmp_path / "big.npy", (1_000_000, 1_000_000), data=b"\0" * 17)
    assert path.stat().st_size < 200
    with pytest.raises(ArrayFileError, match=r"big.npy: header declares <f4\[1000000, 1000000\] = 4000000000000 bytes"):
        load_npy(path)


def test_a_truncated_npy_names_the_shortfall(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.arange(100, dtype=np.float32))
    data = (tmp_path / "x.npy").read_bytes()
    (tmp_path / "x.npy").write_bytes(data[:-4])
    with pytest.raises(ArrayFileError, match="400 bytes of data, the file holds 396"):
        load_npy(tmp_path / "x.npy")


def test_an_npy_within_its_file_but_over_the_budget_is_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.zeros(1 << 16, dtype=np.float32))
    with memory_budget_of(1 << 16), pytest.raises(BudgetExceededError, match=r"x.npy declares 256 KiB .* budget of 64 KiB"):
        load_npy(tmp_path / "x.npy")


def test_a_zip_bomb_npz_is_refused_before_inflating(tmp_path: Path) -> None:
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive, archive.open("x.npy", "w") as f:
        np.lib.format.write_array(f, np.zeros(1 << 22, dtype=np.float32))  # 16 MiB of zeros
    assert path.stat().st_size < 100_000
    with memory_budget_of(1 << 20), pytest.raises(BudgetExceededError, match=r"bomb.npz declares 16 MiB"):
        load_npz(path)


def test_a_member_whose_header_declares_more_than_the_archive_says_is_refused(tmp_path: Path) -> None:
    forged = forged_npy(tmp_path / "m.npy", (10**9,), data=b"\0" * 8)
    path = tmp_path / "x.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.write(forged, "x.npy")
    with pytest.raises(ArrayFileError, match=r"x.npz: array 'x': header declares <f4\[1000000000\]"):
        load_npz(path)


def test_a_damaged_npz_member_is_an_error_not_data(tmp_path: Path) -> None:
    path = tmp_path / "x.npz"
    np.savez(path, x=np.arange(64, dtype=np.int64))
    data = bytearray(path.read_bytes())
    data[200] ^= 0xFF  # inside the stored member's data: its CRC no longer matches
    path.write_bytes(bytes(data))
    with pytest.raises(ArrayFileError, match=r"x\.npz"):
        load_npz(path)


@pytest.mark.parametrize("make", ["npy_as_npz", "text", "empty", "directory", "device", "missing", "fifo"])
def test_what_is_not_an_array_file_is_named(tmp_path: Path, make: str) -> None:
    path = tmp_path / "x.npz"
    if make == "npy_as_npz":
        np.save(tmp_path / "x.npy", np.zeros(3))
        path = tmp_path / "x.npy"
        expected = "is a .npy file, not a .npz archive"
    elif make == "text":
        path.write_text("hello")
        expected = "not a .npz archive"
    elif make == "empty":
        path.write_bytes(b"")
        expected = "not a .npz archive"
    elif make == "directory":
        path = tmp_path
        expected = "is a directory"
    elif make == "device":
        path = Path("/dev/zero")
        expected = "not a regular file"
    elif make == "fifo":
        os.mkfifo(path)
        expected = "not a regular file"
    else:
        expected = "no such file"
    with pytest.raises(ArrayFileError, match=expected):
        load_npz(path)


@pytest.mark.parametrize(
    "header",
    [b"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }  [[[[[[", b"{'descr': '<f4', 'shape': (1,", b"\xff\xfe"],
)
def test_a_header_numpy_cannot_parse_is_an_array_file_error(tmp_path: Path, header: bytes) -> None:
    # NumPy's parser raises tokenize.TokenError, SyntaxError or ValueError on such headers.
    header = header + b" " * (-(len(header) + 11) % 64) + b"\n"
    (tmp_path / "x.npy").write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + b"\0" * 8)
    with pytest.raises(ArrayFileError, match=r"not a readable \.npy header"):
        load_npy(tmp_path / "x.npy")


@pytest.mark.parametrize("shape", [b"(-1,)", b"(3, -4)"])
def test_a_negative_dimension_is_refused(tmp_path: Path, shape: bytes) -> None:
    # NumPy's own header parser accepts it; a manifest then computed a negative data range (exit 3).
    header = b"{'descr': '|V8', 'fortran_order': True, 'shape': " + shape + b", }"
    header = header + b" " * (-(len(header) + 11) % 64) + b"\n"
    (tmp_path / "x.npy").write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + b"\0" * 8)
    with pytest.raises(ArrayFileError, match="negative or non-integer dimension"):
        load_npy(tmp_path / "x.npy")


def test_object_and_record_dtypes_are_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ArrayFileError, match="not a tensor dtype"):
        load_npy(tmp_path / "o.npy")
    np.save(tmp_path / "r.npy", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
    with pytest.raises(ArrayFileError, match="not a tensor dtype"):
        load_npy(tmp_path / "r.npy")


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        dtype=st.sampled_from([np.float32, np.float64, np.int8, np.int64, np.uint16, np.bool_, np.complex64, np.float16]),
        shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5),
    ),
    st.booleans(),
)
def test_arrays_read_back_as_numpy_wrote_them(tmp_path_factory: pytest.TempPathFactory, array: np.ndarray, fortran: bool) -> None:
    directory = tmp_path_factory.mktemp("arrays")
    if fortran:
        array = np.asfortranarray(array)
    np.save(directory / "a.npy", array)
    np.savez_compressed(directory / "a.npz", a=array, b=array[..., :1] if array.ndim else array)
    for got in (load_npy(directory / "a.npy"), load_npz(directory / "a.npz")["a"]):
        assert got.dtype == array.dtype and got.shape == array.shape
        np.testing.assert_array_equal(got, array)
        assert got.flags.writeable


def test_budget_sizes_parse_and_print() -> None:
    assert parse_size("16GiB") == 16 << 30 and parse_size("2gb") == 2 * 10**9 and parse_size("512") == 512
    assert format_size(145) == "145 bytes" and format_size(1 << 30) == "1 GiB" and format_size(1536) == "1.5 KiB"
    with pytest.raises(Exception, match="expected a size"):
        parse_size("lots")


def test_the_budget_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEALTRACE_MEMORY_BUDGET", "3MiB")
    assert memory_budget() == 3 << 20
    monkeypatch.delenv("SEALTRACE_MEMORY_BUDGET")
    assert memory_budget() == 1 << 30


def test_cli_refuses_a_forged_input_with_one_line_and_exit_2(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = forged_npy(tmp_path / "big.npy", (10**6, 10**6), data=b"\0" * 17)
    assert main(["run", str(tiny_model), "--input", f"x={big}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "big.npy: header declares" in err
    # --inputs given a .npy file says so instead of failing inside NumPy.
    assert main(["run", str(tiny_model), "--inputs", str(big)]) == 2
    assert "is a .npy file, not a .npz archive" in capsys.readouterr().err


def test_cli_memory_budget_option_applies_to_random_inputs(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", str(tiny_model), "--random-inputs", "--dim", "batch=2"]
    assert main([*args, "--memory-budget", "8"]) == 2
    assert "more than the memory budget of 8 bytes" in capsys.readouterr().err
    # The budget of one call does not carry over to the next.
    assert main(args) == 0


def test_cli_unknown_dim_names_are_refused(tiny_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tiny_model), "--random-inputs", "--dim", "batchh=2"]) == 2
    assert "--dim batchh: no input has such a dynamic dimension" in capsys.readouterr().err


# bfloat16 (issue 28 item 2): np.save writes ml_dtypes' bfloat16 as raw void ('<V2'), which loaded
# as |V2; sealtrace writes it under its name and reads raw void as bfloat16 only where a model says so.
BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture
def bf16_model(tmp_path: Path) -> Path:
    """y = maxpool(x) with x bfloat16[1, 1, 4, 4]: the kernel that failed on bfloat16."""
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], "bf16",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [1, 1, 2, 2])],
    )
    path = tmp_path / "bf16.onnx"
    onnx.save(helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 22)]), path)
    return path


@pytest.mark.parametrize("dtype", [BF16, np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.int4)])
def test_ml_dtypes_arrays_round_trip_under_their_name(tmp_path: Path, dtype: np.dtype) -> None:
    array = np.arange(-6, 6).reshape(3, 4).astype(dtype)[:, ::2]  # not contiguous
    with (tmp_path / "a.npy").open("wb") as f:
        save_npy(f, array)
    assert b"'descr': '" + dtype.name.encode() + b"'" in (tmp_path / "a.npy").read_bytes()[:128]
    with (tmp_path / "a.npz").open("wb") as f:
        save_npz(f, {"a": array, "b": np.ones(2, np.float32)})
    for got in (load_npy(tmp_path / "a.npy"), load_npz(tmp_path / "a.npz")["a"], np.load(tmp_path / "a.npy")):
        assert got.dtype == dtype and got.shape == array.shape
        assert got.tobytes() == np.ascontiguousarray(array).tobytes()


def test_a_named_bfloat16_npy_keeps_its_size_checks(tmp_path: Path) -> None:
    forged = forged_npy(tmp_path / "big.npy", (10**12,), "bfloat16")
    with pytest.raises(ArrayFileError, match="2000000000000 bytes of data, the file holds 0"):
        load_npy(forged)


def test_raw_void_becomes_bfloat16_only_where_declared(tmp_path: Path) -> None:
    bits = np.array([1.5, -2.0], BF16)
    raw = bits.view("V2")
    assert as_declared(raw, BF16).dtype == BF16
    assert as_declared(raw, BF16).tobytes() == bits.tobytes()
    assert as_declared(raw, None).dtype == raw.dtype  # nothing says bfloat16
    assert as_declared(raw, np.dtype(np.float16)).dtype == raw.dtype  # a NumPy type is no reason
    assert as_declared(raw.view("V1").reshape(2, 2), BF16).dtype == np.dtype("V1")  # another width


def test_cli_runs_bfloat16_from_random_inputs_and_from_files(
    bf16_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.npz"
    assert main(["run", str(bf16_model), "--random-inputs", "--out", str(out)]) == 0, capsys.readouterr().err
    assert load_npz(out)["y"].dtype == BF16
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4).astype(BF16)
    np.save(tmp_path / "x.npy", x)  # NumPy's own form: raw void '<V2'
    assert np.load(tmp_path / "x.npy").dtype == np.dtype("V2")
    assert main(["run", str(bf16_model), "--input", f"x={tmp_path / 'x.npy'}", "--out", str(out), "--force"]) == 0
    y = load_npz(out)["y"]
    assert y.dtype == BF16 and y.astype(np.float32).ravel().tolist() == [5, 7, 13, 15]


def test_random_bfloat16_inputs_are_rounded_once_from_the_draw() -> None:
    from sealtrace.inputs import random_feeds
    from sealtrace.plan.model import ValueInfo

    (drawn,) = random_feeds([ValueInfo("x", "tensor", BF16, (1000,))], seed=3).values()
    draw = np.random.default_rng(3).standard_normal(1000)
    assert drawn.dtype == BF16
    assert np.all(np.abs(drawn.astype(np.float64) - draw) <= np.abs(draw) * 2.0**-8)  # half a bfloat16 ulp
