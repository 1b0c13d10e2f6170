"""Reading ``.npy`` and ``.npz`` files from outside: every declared size checked before allocating.

``np.load`` trusts a file's header: a 145-byte ``.npy`` that declares 10^12 elements makes it try to
allocate terabytes, and a 2 MB ``.npz`` of zeros inflates to gigabytes. These readers parse the
header with NumPy's own header parser, then check what it declares against the file (a ``.npy``
must hold exactly the bytes its header declares; each ``.npz`` member exactly what the archive's
directory says it inflates to) and against the memory budget (:mod:`sealtrace.limits`) before one
byte of data is read. No pickles, no object or structured dtypes; every failure is an
:class:`ArrayFileError` naming the file (and the member).

bfloat16 and ml_dtypes' other types (float8, int4 ...): ``np.save`` writes them as raw void
(``'<V2'``), which says nothing of the type. sealtrace writes them (:func:`save_npy`,
:func:`save_npz`) with the type's name as the header's ``descr`` (``'bfloat16'``), the data in the
machine's byte order as NumPy holds them; such a file reads back as that type here, and through
``np.load`` wherever ml_dtypes is imported (jax, onnx and sealtrace import it). A raw void array
stays raw void: it becomes bfloat16 only where the model declares the input bfloat16
(:func:`as_declared`), never by guessing from its width.
"""

from __future__ import annotations

import os
import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import ml_dtypes  # noqa: F401  (registers 'bfloat16', 'float8_e4m3fn' ... as dtype names for the header parser)
import numpy as np

from sealtrace.errors import InputError
from sealtrace.limits import check_allocation, open_regular_file

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
# Kinds a tensor file may hold: bool, integers, floats, complex, strings, and plain void (NumPy's
# spelling of extension types such as bfloat16). Objects would need pickles; records are not tensors.
_TENSOR_KINDS = "biufcUSV"
_BLOCK = 4 << 20


class ArrayFileError(InputError):
    """A ``.npy``/``.npz`` file is unreadable, malformed, or declares more than it holds (exit 2)."""


@dataclass(frozen=True)
class NpyHeader:
    """What a ``.npy`` header declares, and where its data starts."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    fortran_order: bool
    data_offset: int

    @property
    def nbytes(self) -> int:
        """Bytes of data the header declares (Python integers: no overflow whatever the shape)."""
        count = 1
        for dim in self.shape:
            count *= dim
        return count * self.dtype.itemsize


def read_npy_header(stream: IO[bytes], where: str) -> NpyHeader:
    """Parse a ``.npy`` header at the start of ``stream`` (NumPy's parser, bounded header size)."""
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise ValueError(f"format version {version[0]}.{version[1]} is not one of tensors (1.0, 2.0)")
    except Exception as exc:  # NumPy's header parser (tokenize, ast) raises assorted errors on bad bytes
        raise ArrayFileError(f"{where}: not a readable .npy header ({_brief(exc)})") from None
    if dtype.hasobject or dtype.names is not None or dtype.shape != () or dtype.kind not in _TENSOR_KINDS:
        raise ArrayFileError(f"{where}: dtype {dtype.str!r} is not a tensor dtype (objects and records are refused)")
    if not isinstance(shape, tuple) or any(not isinstance(d, int) or d < 0 for d in shape):
        # NumPy's header parser takes (-1,) as written; a size below zero describes no array.
        raise ArrayFileError(f"{where}: shape {str(shape)[:80]} has a negative or non-integer dimension")
    return NpyHeader(dtype, tuple(int(d) for d in shape), bool(fortran_order), stream.tell())


def _extension(dtype: np.dtype[Any]) -> bool:
    """ml_dtypes' types (bfloat16, float8, int4 ...), which NumPy can only call raw void."""
    return dtype.type.__module__.split(".")[0] == "ml_dtypes"


def as_declared(array: np.ndarray, declared: np.dtype[Any] | None) -> np.ndarray:
    """``array`` as the ml_dtypes type ``declared`` when it is raw void of that width (what
    ``np.save`` makes of bfloat16); every other array as it is. The declaration (a model's input
    type) is what says bfloat16: raw void is never reinterpreted without one."""
    if (
        declared is not None and _extension(declared) and array.dtype.type is np.void
        and array.dtype.names is None and array.dtype.itemsize == declared.itemsize
    ):
        return array.view(declared)
    return array


def save_npy(stream: IO[bytes], array: np.ndarray) -> None:
    """Write ``array`` as a ``.npy`` file: ml_dtypes' types under their own name (module docstring)."""
    array = np.asarray(array)
    if not _extension(array.dtype):
        np.lib.format.write_array(stream, array)  # as np.save and np.savez write it
        return
    header = {"descr": array.dtype.name, "fortran_order": False, "shape": array.shape}
    try:
        np.lib.format.write_array_header_1_0(stream, header)
    except ValueError:  # a 1.0 header holds 65535 bytes; a shape of very many axes needs 2.0
        np.lib.format.write_array_header_2_0(stream, header)
    stream.write(np.ascontiguousarray(array).tobytes())


def save_npz(stream: IO[bytes], arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` as a ``.npz`` archive (stored, as ``np.savez``), each through :func:`save_npy`."""
    with zipfile.ZipFile(stream, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                save_npy(member, array)


def _brief(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}"


def _read_data(stream: IO[bytes], header: NpyHeader, available: int, where: str) -> np.ndarray:
    """The array a checked header declares, read from ``stream`` that holds ``available`` data bytes."""
    nbytes = header.nbytes
    if nbytes != available:
        raise ArrayFileError(
            f"{where}: header declares {header.dtype.str}{list(header.shape)} = {nbytes} bytes of data, "
            f"the file holds {available} (truncated, padded or forged)"
        )
    check_allocation(nbytes, where)
    buffer = bytearray(nbytes)
    view = memoryview(buffer)
    filled = 0
    while filled < nbytes:
        n = stream.readinto(view[filled : filled + _BLOCK])  # type: ignore[attr-defined]
        if not n:
            raise ArrayFileError(f"{where}: data ends after {filled} of {nbytes} bytes (truncated)")
        filled += n
    if header.dtype.itemsize == 0:
        array = np.empty(header.shape, header.dtype)
    elif header.fortran_order:
        array = np.frombuffer(buffer, header.dtype).reshape(header.shape[::-1]).transpose()
    else:
        array = np.frombuffer(buffer, header.dtype).reshape(header.shape)
    return array


def load_npy(path: str | os.PathLike[str]) -> np.ndarray:
    """One array from a ``.npy`` file; its declared size is checked against the file and the budget."""
    where = os.fspath(path)
    f, size = open_regular_file(path, ".npy file", ArrayFileError)
    with f:
        head = f.read(len(NPY_MAGIC))
        if head[:4] in ZIP_MAGICS:
            raise ArrayFileError(f"{where}: is a .npz archive, not a .npy file")
        f.seek(0)
        header = read_npy_header(f, where)
        try:
            return _read_data(f, header, size - header.data_offset, where)
        except OSError as exc:
            raise ArrayFileError(f"{where}: cannot read ({exc.strerror or exc})") from None


def _members(archive: zipfile.ZipFile, where: str) -> list[tuple[str, zipfile.ZipInfo]]:
    found: dict[str, zipfile.ZipInfo] = {}
    for info in archive.infolist():
        if not info.filename:  # zipfile's own is_dir() fails on it (IndexError)
            raise ArrayFileError(f"{where}: a member has an empty name")
        if info.is_dir():
            continue
        if not info.filename.endswith(".npy"):
            raise ArrayFileError(f"{where}: member {info.filename[:80]!r} is not a .npy array")
        name = info.filename[: -len(".npy")]
        if name in found:
            raise ArrayFileError(f"{where}: array {name[:80]!r} appears twice")
        found[name] = info
    return list(found.items())


def load_npz(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every array of a ``.npz`` archive by name; what the archive inflates to is checked first."""
    return dict(iter_npz(path))


def iter_npz(path: str | os.PathLike[str]) -> Iterator[tuple[str, np.ndarray]]:
    """(name, array) for each member of a ``.npz`` archive, read one at a time."""
    where = os.fspath(path)
    f, _size = open_regular_file(path, ".npz archive", ArrayFileError)
    with f:
        head = f.read(len(NPY_MAGIC))
        if head == NPY_MAGIC:
            raise ArrayFileError(f"{where}: is a .npy file, not a .npz archive (give it as NAME=FILE.npy)")
        if head[:4] not in ZIP_MAGICS:
            raise ArrayFileError(f"{where}: not a .npz archive (no zip signature)")
        f.seek(0)
        try:
            with zipfile.ZipFile(f) as archive:
                members = _members(archive, where)
                # Before anything is inflated: what the archive says it inflates to, in total.
                check_allocation(sum(info.file_size for _, info in members), where)
                for name, info in members:
                    yield name, _member_array(archive, info, f"{where}: array {name[:80]!r}")
        except ArrayFileError:
            raise
        except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, NotImplementedError,
                RuntimeError, ValueError, OSError, struct.error) as exc:
            raise ArrayFileError(f"{where}: not a readable .npz archive ({_brief(exc)})") from None


def _member_array(archive: zipfile.ZipFile, info: zipfile.ZipInfo, where: str) -> np.ndarray:
    with archive.open(info) as member:
        header = read_npy_header(member, where)
        array = _read_data(member, header, info.file_size - header.data_offset, where)
        # Reading to the end makes zipfile compare the CRC: a damaged member is an error, not data.
        if member.read(1):
            raise ArrayFileError(f"{where}: more data than the archive declares")
    return array

