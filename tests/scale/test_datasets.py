"""Datasets of requests: .npz directories and Parquet files, read bounded and checked against the layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sealtrace.limits import memory_budget_of
from sealtrace.plan.model import ValueInfo
from sealtrace.scale.datasets import DatasetError, iter_positions, open_dataset

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

X = ValueInfo("x", "tensor", np.dtype(np.float32), (1, 3))
DYNAMIC = ValueInfo("x", "tensor", np.dtype(np.float32), ("batch", 3))


def test_npz_directory_in_name_order_and_a_bad_file_fails_only_its_request(tmp_path: Path) -> None:
    for name, value in (("b.npz", 2), ("a.npz", 1), ("c.npz", 3)):
        np.savez(tmp_path / name, x=np.full((1, 3), value, np.float32))
    (tmp_path / "notes.txt").write_text("not a request")
    (tmp_path / "c.npz").write_bytes(b"PK\x03\x04 broken")
    dataset = open_dataset(tmp_path, [X])
    assert dataset.size == 3
    requests = dataset.read([0, 1, 2])
    assert [r.name for r in requests] == ["a.npz", "b.npz", "c.npz"]
    assert requests[0].feeds is not None and float(requests[0].feeds["x"][0, 0]) == 1.0
    assert requests[2].feeds is None and "c.npz" in str(requests[2].error)


def test_npz_fingerprint_follows_names_and_sizes(tmp_path: Path) -> None:
    np.savez(tmp_path / "a.npz", x=np.zeros((1, 3), np.float32))
    before = open_dataset(tmp_path, [X]).fingerprint()
    np.savez(tmp_path / "a.npz", x=np.zeros((1, 4), np.float32))  # another size
    assert open_dataset(tmp_path, [X]).fingerprint() != before


def test_empty_directory_and_other_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"no \.npz files"):
        open_dataset(tmp_path, [X])
    (tmp_path / "plain.txt").write_text("hello")
    with pytest.raises(DatasetError, match="not a Parquet file"):
        open_dataset(tmp_path / "plain.txt", [X])


def _write(path: Path, columns: dict[str, object], row_group_size: int | None = None) -> Path:
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


def test_parquet_lists_with_shapes_across_row_groups(tmp_path: Path) -> None:
    rows = [np.arange(3 * (i % 2 + 1), dtype=np.float32) + i for i in range(7)]
    path = _write(tmp_path / "d.parquet", {
        "x": pa.array([r.tolist() for r in rows], pa.list_(pa.float32())),
        "x.shape": [[i % 2 + 1, 3] for i in range(7)],
        "other": list(range(7)),
    }, row_group_size=3)
    dataset = open_dataset(path, [DYNAMIC])
    assert dataset.size == 7
    requests = dataset.read([2, 3, 6])
    for request in requests:
        assert request.feeds is not None, request.error
        expected = rows[request.position].reshape(request.position % 2 + 1, 3)
        assert request.feeds["x"].dtype == np.float32
        np.testing.assert_array_equal(request.feeds["x"], expected)
    assert requests[0].name == "row 2"


def test_parquet_fixed_shape_without_a_shape_column_and_scalars(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.parquet", {"x": pa.array([[1, 2, 3], [4, 5, 6]], pa.list_(pa.float32())),
                                            "s": pa.array([7, 8], pa.int64())})
    s = ValueInfo("s", "tensor", np.dtype(np.int64), ())
    feeds = open_dataset(path, [X, s]).read([1])[0].feeds
    assert feeds is not None
    np.testing.assert_array_equal(feeds["x"], np.array([[4, 5, 6]], np.float32))
    assert feeds["s"].shape == () and int(feeds["s"]) == 8


@pytest.mark.parametrize(("columns", "message"), [
    ({"y": [[1.0, 2.0, 3.0]]}, "no column 'x'"),
])
def test_parquet_layout_refusals_at_open(tmp_path: Path, columns: dict[str, object], message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        open_dataset(_write(tmp_path / "d.parquet", columns), [X])


def test_parquet_dynamic_shape_needs_a_shape_column(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.parquet", {"x": pa.array([[1, 2, 3]], pa.list_(pa.float32()))})
    with pytest.raises(DatasetError, match=r"x\.shape"):
        open_dataset(path, [DYNAMIC])


@pytest.mark.parametrize(("column", "message"), [
    (pa.array([[1, 2, 3], None], pa.list_(pa.float32())), "row 1: column 'x' is null"),
    (pa.array([[1, 2, 3], [1, None, 3]], pa.list_(pa.float32())), "null element"),
    (pa.array([[1, 2, 3], [1, 2]], pa.list_(pa.float32())), "2 value"),
    (pa.array([[1, 2, 3], [1, 2, 3]], pa.list_(pa.float64())), "float64, the model takes float32"),
    (pa.array([[[1, 2, 3]], [[1, 2, 3]]], pa.list_(pa.list_(pa.float32()))), "list of lists"),
    (pa.array([{"a": 1}, {"a": 2}]), "tensors are lists of numbers"),
])
def test_parquet_bad_values_fail_their_requests(tmp_path: Path, column: object, message: str) -> None:
    dataset = open_dataset(_write(tmp_path / "d.parquet", {"x": column}), [X])
    request = dataset.read([1])[0]
    assert request.feeds is None and message in str(request.error), request.error


def test_parquet_row_group_beyond_the_memory_budget_is_not_read(tmp_path: Path) -> None:
    values = np.zeros((64, 4096), np.float32)
    path = _write(tmp_path / "d.parquet", {"x": pa.array(list(values), pa.list_(pa.float32())),
                                           "x.shape": [[1, 4096]] * 64})
    dataset = open_dataset(path, [ValueInfo("x", "tensor", np.dtype(np.float32), (1, None))])
    with memory_budget_of(256 << 10):
        request = dataset.read([0])[0]
    assert request.feeds is None and "memory budget" in str(request.error)


def test_parquet_footer_declaring_more_than_the_file_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.parquet", {"x": pa.array([[1, 2, 3]], pa.list_(pa.float32()))})
    data = bytearray(path.read_bytes())
    data[-8:-4] = (len(data) * 4).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="footer"):
        open_dataset(path, [X])


def test_truncated_parquet_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.parquet", {"x": pa.array([[1, 2, 3]], pa.list_(pa.float32()))})
    path.write_bytes(path.read_bytes()[:-20] + path.read_bytes()[-8:])
    with pytest.raises(DatasetError):
        open_dataset(path, [X])


def test_device_is_refused() -> None:
    with pytest.raises(DatasetError, match="not a regular file"):
        open_dataset("/dev/zero", [X])


def test_positions_skip_what_is_recorded() -> None:
    assert list(iter_positions(7, {1, 2, 5}, 2)) == [[0, 3], [4, 6]]
