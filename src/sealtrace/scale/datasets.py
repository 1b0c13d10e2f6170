"""Datasets of requests for ``sealtrace batch``: a directory of .npz feeds, or a Parquet file.

A dataset is an ordered list of requests; a request's *position* is its place in that order, and
positions order the ledger's records (docs/scale.md). Readers trust nothing in the files: .npz files
go through :mod:`sealtrace.arrayfiles` (declared sizes checked before allocating); a Parquet file's
footer length, row counts and each row group's declared (uncompressed) size are checked against the
memory budget before anything is read or decoded (a decoded value takes at most 8 bytes; strings must
be plain-encoded), and every value is checked against the layout.

**Directory of .npz files**: every regular ``*.npz`` file directly inside it, in byte order of the file
names; one request per file, its arrays named by the model's inputs (``np.savez(f, x=..., mask=...)``).

**Parquet**: one row per request, in row order. For each model input ``NAME``:

- column ``NAME``: the tensor's elements in C order, as a list (``list``, ``large_list`` or
  ``fixed_size_list``) of the input's element type (``float32`` for a float input, ``int64``,
  ``bool``, ``string`` for a string tensor ...), or a plain value of that type for a tensor of one
  element;
- column ``NAME.shape`` (optional): the tensor's shape, a list of integers; without it the model's
  declared shape is used, which must then be fixed (no dynamic axis).

No nulls; other columns are ignored; string columns written without a dictionary
(``use_dictionary=False``: a dictionary's decoded size is not bounded by anything the file declares). ``pyarrow.table({"x": [[...], ...], "x.shape": [[1, 4], ...]})``
written with ``pyarrow.parquet.write_table`` is such a file.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from sealtrace.arrayfiles import load_npz
from sealtrace.errors import InputError, SealtraceError
from sealtrace.limits import check_allocation, open_regular_file
from sealtrace.plan.model import ValueInfo

MAX_REQUESTS = 1 << 32  # far beyond any job, but a bound on what a listing may hold
SHAPE_SUFFIX = ".shape"


class DatasetError(InputError):
    """A dataset that cannot be read as one (exit 2): not a directory of .npz files or a Parquet file,
    a column that does not follow the layout, a size beyond the memory budget."""


@dataclass
class Request:
    """One request of a dataset: its position, a name for people (file name or row number), and its
    feeds; or, when the request could not be read, ``error`` (the job records the others)."""

    position: int
    name: str
    feeds: dict[str, Any] | None
    error: str | None = None


class Dataset(Protocol):
    """An ordered list of requests, read a slice at a time."""

    path: str
    size: int

    def fingerprint(self) -> dict[str, Any]:
        """What identifies the dataset in a job id (names and sizes; see docs/scale.md)."""
        ...

    def read(self, positions: Sequence[int]) -> list[Request]:
        """The requests at ``positions`` (ascending)."""
        ...

    def stem(self, position: int) -> str:
        """A file name (without suffix) for what is written about the request at ``position``."""
        ...


def open_dataset(path: str | os.PathLike[str], inputs: Sequence[ValueInfo]) -> Dataset:
    """The dataset at ``path``: a directory of .npz files, or a Parquet file (``.parquet``/``.pq``, or
    a file that starts with Parquet's magic)."""
    where = os.fspath(path)
    if os.path.isdir(where):
        return NpzDirectory(where)
    f, size = open_regular_file(where, "dataset (a directory of .npz files or a Parquet file)", DatasetError)
    with f:
        magic = f.read(4)
    if magic != b"PAR1":
        raise DatasetError(f"{where}: not a Parquet file (no PAR1 magic) nor a directory of .npz files")
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise DatasetError(f"{where}: reading Parquet needs pyarrow: pip install 'sealtrace[ray]'") from None
    return ParquetRequests(where, inputs, size)


class NpzDirectory:
    """One request per ``*.npz`` file directly inside a directory, in byte order of the names."""

    def __init__(self, path: str) -> None:
        self.path = path
        entries: list[tuple[str, int]] = []
        try:
            with os.scandir(path) as listing:
                for entry in listing:
                    if entry.name.endswith(".npz") and entry.is_file():
                        entries.append((entry.name, entry.stat().st_size))
                        if len(entries) > MAX_REQUESTS:
                            raise DatasetError(f"{path}: more than {MAX_REQUESTS} .npz files")
        except OSError as exc:
            raise DatasetError(f"{path}: cannot list the directory ({exc.strerror or exc})") from None
        if not entries:
            raise DatasetError(f"{path}: no .npz files in the directory (one request per file)")
        entries.sort(key=lambda item: item[0].encode("utf-8", "surrogateescape"))
        self._entries = entries
        self.size = len(entries)

    def fingerprint(self) -> dict[str, Any]:
        listing = hashlib.sha256()
        for name, size in self._entries:
            listing.update(name.encode("utf-8", "surrogateescape") + b"\0" + str(size).encode() + b"\n")
        return {"kind": "npz-directory", "requests": self.size, "listing": listing.hexdigest()}

    def stem(self, position: int) -> str:
        return self._entries[position][0].removesuffix(".npz")

    def read(self, positions: Sequence[int]) -> list[Request]:
        requests = []
        for position in positions:
            name = self._entries[position][0]
            try:
                feeds: dict[str, Any] | None = load_npz(Path(self.path) / name)
                error = None
            except SealtraceError as exc:  # one bad file fails its request, not the job
                feeds, error = None, str(exc)
            requests.append(Request(position, name, feeds, error))
        return requests


class ParquetRequests:
    """One request per row of a Parquet file (layout in the module docstring)."""

    def __init__(self, path: str, inputs: Sequence[ValueInfo], size: int) -> None:
        import pyarrow.parquet as pq

        self.path = path
        self._inputs = [info for info in inputs]
        self._footer = self._read_footer(size)
        try:
            with open_regular_file(path, "Parquet file", DatasetError)[0] as f:
                opened = pq.ParquetFile(f, thrift_string_size_limit=1 << 26, thrift_container_size_limit=1 << 20)
                metadata, names = opened.metadata, set(opened.schema_arrow.names)
        except SealtraceError:
            raise
        except Exception as exc:  # pyarrow's errors (ArrowInvalid, OSError ...) on a malformed file
            raise DatasetError(f"{path}: not a readable Parquet file ({_brief(exc)})") from None
        self.size = int(metadata.num_rows)
        if not 0 < self.size <= MAX_REQUESTS:
            raise DatasetError(f"{path}: {self.size} rows (a dataset needs 1 to {MAX_REQUESTS})")
        self._columns: list[str] = []
        for info in self._inputs:
            if info.name not in names:
                raise DatasetError(f"{path}: no column {info.name!r} for the model's input {info.name!r} "
                                   f"(columns: {', '.join(sorted(names))[:300]})")
            self._columns.append(info.name)
            if info.name + SHAPE_SUFFIX in names:
                self._columns.append(info.name + SHAPE_SUFFIX)
            elif info.shape is None or not all(isinstance(d, int) for d in info.shape):
                raise DatasetError(f"{path}: input {info.name!r} has a dynamic shape ({info.describe()}): "
                                   f"give each row's shape in a column {info.name + SHAPE_SUFFIX!r}")
        # Rows of each row group, and what reading its columns declares it needs.
        self._groups: list[tuple[int, int, int]] = []  # (first row, rows, bytes its columns decode to, at most)
        wanted = set(self._columns)
        first = 0
        for g in range(metadata.num_row_groups):
            group = metadata.row_group(g)
            declared = 16 * int(group.num_rows)  # list offsets
            for c in range(group.num_columns):
                chunk = group.column(c)
                if chunk.path_in_schema.split(".list.")[0] not in wanted and chunk.path_in_schema not in wanted:
                    continue
                # Encoded sizes do not bound decoded ones (a run of zeros encodes in a few bytes): a
                # decoded value takes at most 8 bytes, a string its plain-encoded size, and strings
                # behind a dictionary could take any multiple of it, so they are refused.
                if chunk.physical_type == "BYTE_ARRAY":
                    if chunk.has_dictionary_page:
                        raise DatasetError(f"{path}: column {chunk.path_in_schema!r} is dictionary-encoded strings, "
                                           "whose decoded size nothing bounds: write it with use_dictionary=False")
                    declared += int(chunk.total_uncompressed_size) + 16 * int(chunk.num_values)
                else:
                    declared += max(int(chunk.total_uncompressed_size), 8 * int(chunk.num_values))
            self._groups.append((first, int(group.num_rows), declared))
            first += int(group.num_rows)
        if first != self.size:
            raise DatasetError(f"{path}: row groups hold {first} rows, the footer says {self.size}")
        self._cached: tuple[int, dict[str, list[Any]]] | None = None

    def _read_footer(self, size: int) -> bytes:
        """The file's footer (Thrift metadata), its declared length checked before it is read."""
        f, _ = open_regular_file(self.path, "Parquet file", DatasetError)
        with f:
            if size < 12:
                raise DatasetError(f"{self.path}: {size} bytes, too short for a Parquet file")
            f.seek(size - 8)
            tail = f.read(8)
            (length,) = struct.unpack("<I", tail[:4])
            if tail[4:] != b"PAR1" or length > size - 12:
                raise DatasetError(f"{self.path}: not a Parquet file (its footer is missing or declares "
                                   f"{length} bytes in a file of {size})")
            check_allocation(length, f"{self.path}: Parquet footer")
            f.seek(size - 8 - length)
            return f.read(length)

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": "parquet", "requests": self.size, "footer": hashlib.sha256(self._footer).hexdigest()}

    def stem(self, position: int) -> str:
        return f"row-{position}"

    def read(self, positions: Sequence[int]) -> list[Request]:
        requests = []
        for position in positions:
            group = self._group_of(position)
            first, _, _ = self._groups[group]
            rows = self._rows(group)
            name = f"row {position}"
            error = rows["__error__"][0] if "__error__" in rows else None
            if error is None:
                try:
                    feeds: dict[str, Any] | None = {
                        info.name: self._tensor(info, rows, position - first) for info in self._inputs
                    }
                except DatasetError as exc:
                    feeds, error = None, str(exc)
            else:
                feeds = None
            requests.append(Request(position, name, feeds, error))
        return requests

    def _group_of(self, position: int) -> int:
        low, high = 0, len(self._groups) - 1
        while low < high:  # the last group whose first row is at or before the position
            middle = (low + high + 1) // 2
            if self._groups[middle][0] <= position:
                low = middle
            else:
                high = middle - 1
        return low

    def _rows(self, group: int) -> dict[str, list[Any]]:
        """The columns of one row group, decoded (the last one is kept: reads go in position order)."""
        if self._cached is not None and self._cached[0] == group:
            return self._cached[1]
        import pyarrow.parquet as pq

        self._cached = None
        first, count, declared = self._groups[group]
        try:
            # Decoding makes one NumPy copy beside Arrow's buffers: twice what the row group may take.
            check_allocation(2 * declared, f"{self.path}: row group {group} ({count} rows)")
            with open_regular_file(self.path, "Parquet file", DatasetError)[0] as f:
                table = pq.ParquetFile(f, thrift_string_size_limit=1 << 26,
                                       thrift_container_size_limit=1 << 20).read_row_group(group, columns=self._columns)
            if table.num_rows != count:
                raise DatasetError(f"{self.path}: row group {group} holds {table.num_rows} rows, its metadata says {count}")
            rows = {name: _column_rows(table.column(name), name, self.path, first) for name in self._columns}
        except SealtraceError as exc:
            rows = {"__error__": [str(exc)]}  # every request of the group fails, naming why
        except Exception as exc:
            rows = {"__error__": [f"{self.path}: row group {group} cannot be read ({_brief(exc)})"]}
        self._cached = (group, rows)
        return rows

    def _tensor(self, info: ValueInfo, rows: dict[str, list[Any]], row: int) -> np.ndarray:
        values = rows[info.name][row]
        shape_column = rows.get(info.name + SHAPE_SUFFIX)
        if shape_column is not None:
            raw = shape_column[row]
            if not (isinstance(raw, np.ndarray) and raw.dtype.kind in "iu" and raw.ndim == 1 and len(raw) <= 64
                    and (raw >= 0).all()):
                raise DatasetError(f"{self.path}: row {row}: {info.name + SHAPE_SUFFIX!r} is not a list of at most "
                                   "64 non-negative integers")
            shape = tuple(int(d) for d in raw)
        else:
            assert info.shape is not None
            shape = tuple(int(d) for d in info.shape if isinstance(d, int))
        values = np.asarray(values)
        count = int(np.prod(shape, dtype=object)) if shape else 1
        if values.size != count:
            raise DatasetError(f"{self.path}: input {info.name!r}: {values.size} value(s) for shape {list(shape)}")
        if info.dtype is not None and info.dtype.kind != "O" and values.dtype != info.dtype:
            raise DatasetError(f"{self.path}: input {info.name!r}: column holds {values.dtype}, the model takes {info.dtype}")
        return values.reshape(shape)


def _column_rows(column: Any, name: str, path: str, first: int) -> list[Any]:
    """Each row's values of one column: a NumPy array per row (lists) or a one-element array (plain
    values). Nulls, nested lists and types NumPy cannot hold are refused, naming the row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    array = column.combine_chunks()
    if array.null_count:
        bad = first + int(pc.index(pc.is_null(array), True).as_py())
        raise DatasetError(f"{path}: row {bad}: column {name!r} is null")
    kind = array.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        values = array.flatten()
        if pa.types.is_nested(values.type):
            raise DatasetError(f"{path}: column {name!r} is a list of lists: give a flat list and a "
                               f"{name.removesuffix(SHAPE_SUFFIX) + SHAPE_SUFFIX!r} column")
        if values.null_count:
            raise DatasetError(f"{path}: column {name!r} holds a null element")
        flat = _numpy(values, name, path)
        lengths = pc.list_value_length(array).to_numpy(zero_copy_only=False).astype(np.int64)
        ends = np.cumsum(lengths)
        return [flat[end - length : end] for end, length in zip(ends.tolist(), lengths.tolist(), strict=True)]
    flat = _numpy(array, name, path)
    return [flat[i : i + 1] for i in range(len(flat))]


def _numpy(values: Any, name: str, path: str) -> np.ndarray:
    import pyarrow as pa

    kind = values.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return np.array(values.to_pylist(), dtype=object)
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
        raise DatasetError(f"{path}: column {name!r} holds {kind}: tensors are lists of numbers, booleans or strings")
    return np.asarray(values.to_numpy(zero_copy_only=False))


def _brief(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def iter_positions(size: int, skip: set[int], task_size: int) -> Iterator[list[int]]:
    """The positions of ``0 .. size-1`` not in ``skip``, in order, ``task_size`` at a time."""
    chunk: list[int] = []
    for position in range(size):
        if position in skip:
            continue
        chunk.append(position)
        if len(chunk) == task_size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
