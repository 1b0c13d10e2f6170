"""The ``.seal`` file format, versions 1 and 2, and its strict reader (docs/container-format.md).

Layout::

    preamble   48 bytes  magic b"\\x89SEAL\\r\\n\\x1a", u32 LE format version, u32 LE header length,
                         32-byte container digest (sha256 of the header's "container" object)
    header     canonical JSON: {"container": {...}, "signatures": [...]}
    padding    zeros up to the next multiple of 64
    data       sections and tensors, each starting at a multiple of 64 (offsets are relative to
               the data start), zeros between them, the file ends where the last one ends

The reader accepts nothing outside this: bounded header, canonical JSON only, no unknown keys or
versions, no overlapping, out-of-range or unaligned entries, no holes beyond alignment padding,
sizes consistent with dtype and shape, unique names that cannot be read as escaping paths.
No code runs on load: the header is JSON, the data is raw bytes. A file that claims to be a
container (the magic, or a ``.seal`` name) and breaks any of this fails its check (exit 1).
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from sealtrace.container.errors import ContainerDamagedError, ContainerFormatError, IntegrityError, Mismatch
from sealtrace.container.graphindex import LABEL_LENGTH
from sealtrace.digest import HEX_DIGEST, canonical_json, is_hex_digest, json_digest
from sealtrace.errors import SealtraceError
from sealtrace.fields import MAX_INT64, is_integer, is_text, missing_and_unknown
from sealtrace.limits import has_control_characters, json_nesting_exceeds, open_regular_file
from sealtrace.strictjson import FloatNotAllowedError, loads_strict

MAGIC = b"\x89SEAL\r\n\x1a"
FORMAT_NAME = "sealtrace.container"
FORMAT_VERSION = 2  # what sealtrace writes: version 1 plus the graph index
READABLE_VERSIONS = (1, 2)
PREAMBLE = struct.Struct("<8sII32s")
PREAMBLE_SIZE = PREAMBLE.size  # 48
ALIGNMENT = 64
# Headers hold the table and metadata only (the graph is a data section), so 64 MiB is generous.
MAX_HEADER_SIZE = 64 << 20
DEFAULT_CHUNK_SIZE = 16 << 20
MIN_CHUNK_SIZE = 1 << 16
MAX_CHUNK_SIZE = 1 << 30
MAX_NAME_LENGTH = 4096
MAX_RANK = 64
MAX_JSON_DEPTH = 64  # lists and objects in a header; its schema nests 5 deep
GRAPH_SECTION = "graph"
GRAPH_ENCODING = "onnx-protobuf"

# Bits per element of every numeric ONNX tensor type a container may hold (strings stay in the graph).
DTYPE_BITS: dict[str, int] = {
    "float": 32, "uint8": 8, "int8": 8, "uint16": 16, "int16": 16, "int32": 32, "int64": 64,
    "bool": 8, "float16": 16, "double": 64, "uint32": 32, "uint64": 64, "complex64": 64,
    "complex128": 128, "bfloat16": 16, "float8e4m3fn": 8, "float8e4m3fnuz": 8, "float8e5m2": 8,
    "float8e5m2fnuz": 8, "uint4": 4, "int4": 4, "float4e2m1": 4, "float8e8m0": 8, "uint2": 2, "int2": 2,
}  # fmt: skip

# NumPy views for the types NumPy has; the others are exposed as raw bytes.
NUMPY_DTYPES: dict[str, str] = {
    "float": "<f4", "uint8": "u1", "int8": "i1", "uint16": "<u2", "int16": "<i2", "int32": "<i4",
    "int64": "<i8", "bool": "?", "float16": "<f2", "double": "<f8", "uint32": "<u4", "uint64": "<u8",
    "complex64": "<c8", "complex128": "<c16",
}  # fmt: skip

STORAGE_FIELDS = ("raw_data", "float_data", "double_data", "int32_data", "int64_data", "uint64_data")

_HEX16 = re.compile(r"[0-9a-f]{16}")
_HEX128 = re.compile(r"[0-9a-f]{128}")


def align(offset: int, alignment: int = ALIGNMENT) -> int:
    """The first multiple of ``alignment`` at or after ``offset``."""
    return -(-offset // alignment) * alignment


def chunk_count(length: int, chunk_size: int) -> int:
    """How many chunk digests an entry of ``length`` bytes carries (at least one)."""
    return max(1, -(-length // chunk_size))


def expected_length(dtype: str, shape: list[int]) -> int:
    """Bytes a tensor of ``dtype`` and ``shape`` occupies (sub-byte types packed, rounded up)."""
    count = 1
    for dim in shape:
        count *= dim
    return -(-count * DTYPE_BITS[dtype] // 8)


@dataclass(frozen=True)
class Entry:
    """One region of the data area: a section (the graph) or a tensor.

    ``offset`` is relative to the data start; ``sha256`` lists the digest of each ``chunk_size``
    piece in order (one digest, of the whole region, when it fits in one chunk).
    """

    kind: str
    name: str
    offset: int
    length: int
    sha256: tuple[str, ...]
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    storage: str | None = None
    encoding: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.kind == "section":
            return {
                "name": self.name,
                "encoding": self.encoding,
                "offset": self.offset,
                "length": self.length,
                "sha256": list(self.sha256),
            }
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape or ()),
            "storage": self.storage,
            "offset": self.offset,
            "length": self.length,
            "sha256": list(self.sha256),
        }


@dataclass(frozen=True)
class SignatureEntry:
    """A signature stored in a container or manifest: the public key travels with it, so a
    damaged signature is detected even without a trusted key; trust is decided by key id."""

    algorithm: str
    key_id: str
    public_key: str
    signature: str

    def to_json(self) -> dict[str, str]:
        return {
            "algorithm": self.algorithm,
            "key_id": self.key_id,
            "public_key": self.public_key,
            "signature": self.signature,
        }


class ContainerBytes:
    """Where a container's bytes come from: memory, or an open regular file read with ``pread``.

    A file is never memory-mapped: a mapped file that someone truncates kills the reader with
    SIGBUS, while a read of a shrunken file just comes back short, and that is reported as a
    truncated container (exit 1). Reads release the GIL, so many threads can read and hash at once.
    """

    def __init__(self, where: str, memory: memoryview | None = None, file: BinaryIO | None = None, size: int = 0) -> None:
        self.where = where
        self._memory = memory
        self._file = file
        self.size = len(memory) if memory is not None else size

    @property
    def in_memory(self) -> bool:
        return self._memory is not None

    def read(self, start: int, length: int) -> memoryview:
        """``length`` bytes at ``start``; IntegrityError when the file no longer holds them."""
        if self._memory is not None:
            if start + length > len(self._memory):
                raise self._truncated(start + length)
            return self._memory[start : start + length]
        buffer = bytearray(length)
        self.read_into(memoryview(buffer), start)
        return memoryview(buffer)

    def read_into(self, buffer: memoryview, start: int) -> None:
        """Fill ``buffer`` with the bytes at ``start`` (exactly ``len(buffer)`` of them)."""
        if self._memory is not None:
            buffer[:] = self.read(start, len(buffer))
            return
        assert self._file is not None
        done = 0
        while done < len(buffer):
            try:
                count = os.preadv(self._file.fileno(), [buffer[done:]], start + done)
            except OSError as exc:
                raise IntegrityError(
                    self.where, [Mismatch("file", self.where, "a readable file", f"read error ({exc.strerror})")]
                ) from None
            if count == 0:
                raise self._truncated(start + len(buffer))
            done += count

    def _truncated(self, needed: int) -> IntegrityError:
        return IntegrityError(
            self.where,
            [Mismatch("file", self.where, f"{self.size} bytes", f"fewer than {needed} (truncated while being read)")],
        )

    def close(self) -> None:
        if self._memory is not None:
            with contextlib.suppress(BufferError):
                self._memory.release()
        if self._file is not None:
            self._file.close()
            self._file = None


class Container:
    """An opened ``.seal`` file whose structure has been checked (its bytes not yet hashed).

    Use :func:`sealtrace.container.verify_container` before trusting any byte of the data.
    """

    def __init__(
        self,
        where: str,
        source: ContainerBytes,
        body: dict[str, Any],
        entries: list[Entry],
        signatures: list[SignatureEntry],
        digest: str,
        header_length: int,
    ) -> None:
        self.where = where
        self.source = source
        self.body = body
        self.entries = entries
        self.signatures = signatures
        self.digest = digest
        self.header_length = header_length
        self.data_start = align(PREAMBLE_SIZE + header_length)

    @property
    def chunk_size(self) -> int:
        return int(self.body["chunk_size"])

    @property
    def format_version(self) -> int:
        return int(self.body["format_version"])

    @property
    def graph_index(self) -> dict[str, Any] | None:
        """The digests of the graph's parts (version 2); None in a version 1 container."""
        index = self.body.get("graph_index")
        return index if isinstance(index, dict) else None

    @property
    def plan_digest(self) -> str:
        return str(self.body["plan_digest"])

    @property
    def tensors(self) -> list[Entry]:
        return [e for e in self.entries if e.kind == "tensor"]

    @property
    def sections(self) -> list[Entry]:
        return [e for e in self.entries if e.kind == "section"]

    @property
    def size(self) -> int:
        return self.source.size

    def entry(self, name: str, kind: str = "tensor") -> Entry:
        for e in self.entries:
            if e.kind == kind and e.name == name:
                return e
        raise KeyError(name)

    def data(self, entry: Entry) -> memoryview:
        """The bytes of one entry: a view for a container in memory, a fresh read from a file."""
        return self.source.read(self.data_start + entry.offset, entry.length)

    def array(self, name: str) -> np.ndarray:
        """A read-only NumPy array of a tensor (types NumPy lacks come back as uint8 bytes)."""
        entry = self.entry(name)
        assert entry.dtype is not None and entry.shape is not None
        view = self.data(entry)
        if entry.dtype in NUMPY_DTYPES:
            array = np.frombuffer(view, dtype=NUMPY_DTYPES[entry.dtype]).reshape(entry.shape)
        else:
            array = np.frombuffer(view, dtype=np.uint8)
        array.flags.writeable = False
        return array

    def padding(self) -> Iterator[tuple[str, int, int]]:
        """(what follows, absolute start, end) of every zero-padding run in the file."""
        end = PREAMBLE_SIZE + self.header_length
        for e in self.entries:
            start = self.data_start + e.offset
            if start > end:
                yield (f"{e.kind} {e.name}", end, start)
            end = start + e.length

    def close(self) -> None:
        """Release the file (views handed out of an in-memory container stay valid)."""
        self.source.close()

    def __enter__(self) -> Container:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def claims_container_name(path: str | os.PathLike[str]) -> bool:
    """A file named ``*.seal`` claims to be a container: it is checked as one, and refused (exit 1)
    when it is not, never run as something else."""
    return Path(os.fspath(path)).suffix.lower() == ".seal"


def is_container(source: str | os.PathLike[str] | bytes) -> bool:
    """True when ``source`` claims to be a container: its bytes start with the container magic, or
    (a path) it is named ``*.seal``. Such a source must be opened and verified as a container."""
    if isinstance(source, bytes):
        return source[: len(MAGIC)] == MAGIC
    if claims_container_name(source):
        return True
    try:
        f, _ = open_regular_file(source, "container")
    except SealtraceError:
        return False
    with f:
        return f.read(len(MAGIC)) == MAGIC


def open_container(
    source: str | os.PathLike[str] | bytes | bytearray | memoryview, *, private_copy: bool = False
) -> Container:
    """Open a container from a path or from its bytes, checking its structure.

    A path is read with ``pread`` as its bytes are needed (never mapped: see ContainerBytes). With
    ``private_copy`` the whole file is read into memory first, so the bytes that get verified are
    the bytes that are used even if someone rewrites the file meanwhile.

    Raises :class:`ContainerFormatError` (exit 2) for a file that is not a container (no magic,
    and not named ``*.seal``; a directory, device or FIFO), and :class:`IntegrityError` (exit 1) for
    one that claims to be a container and is not a valid one: bytes that are not a container under
    a ``.seal`` name, a malformed header (:class:`ContainerDamagedError`), a header that does not
    match the digest in the preamble, a file not as long as the header says.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _parse(ContainerBytes("<bytes>", memory=memoryview(source).cast("B")), named_container=False)
    path = Path(os.fspath(source))
    named = claims_container_name(path)
    f, size = open_regular_file(path, "container", ContainerFormatError)
    bytes_source = ContainerBytes(str(path), file=f, size=size)
    try:
        if private_copy:
            buffer = bytearray(size)
            bytes_source.read_into(memoryview(buffer), 0)
            bytes_source.close()
            bytes_source = ContainerBytes(str(path), memory=memoryview(buffer))
        return _parse(bytes_source, named_container=named)
    except BaseException:
        bytes_source.close()
        raise


def _parse(source: ContainerBytes, named_container: bool) -> Container:
    where = source.where
    size = source.size
    head = bytes(source.read(0, min(size, PREAMBLE_SIZE)))
    if size < PREAMBLE_SIZE:
        if size > 0 and head[: len(MAGIC)] == MAGIC[: min(size, len(MAGIC))]:
            raise IntegrityError(
                where, [Mismatch("file", where, f"at least {PREAMBLE_SIZE} bytes", f"{size} bytes (truncated)")]
            )
        if named_container:
            raise ContainerDamagedError(where, f"named .seal, but not a sealtrace container ({size} bytes, too short)")
        raise ContainerFormatError(f"{where}: not a sealtrace container (file too short)")
    magic, version, header_length, digest_raw = PREAMBLE.unpack(head)
    if magic != MAGIC:
        if named_container:
            raise ContainerDamagedError(where, "named .seal, but not a sealtrace container (no container magic bytes)")
        raise ContainerFormatError(f"{where}: not a sealtrace container (bad magic bytes)")
    try:
        return _parse_after_magic(source, version, header_length, digest_raw)
    except ContainerDamagedError:
        raise
    except ContainerFormatError as exc:
        # The file claims to be a container: whatever is malformed in it is a failed check.
        raise ContainerDamagedError(where, str(exc)) from None


def _parse_after_magic(source: ContainerBytes, version: int, header_length: int, digest_raw: bytes) -> Container:
    where, size = source.where, source.size
    if version not in READABLE_VERSIONS:
        raise ContainerFormatError(
            f"{where}: container format version {version} is not supported (this sealtrace reads "
            f"{' and '.join(map(str, READABLE_VERSIONS))}): damaged, or written by a newer sealtrace"
        )
    if header_length < 2 or header_length > MAX_HEADER_SIZE:
        raise ContainerFormatError(f"{where}: header length {header_length} out of bounds (2..{MAX_HEADER_SIZE})")
    if PREAMBLE_SIZE + header_length > size:
        raise IntegrityError(
            where,
            [Mismatch("file", where, f"a {header_length}-byte header", f"{size - PREAMBLE_SIZE} bytes (truncated)")],
        )
    raw = bytes(source.read(PREAMBLE_SIZE, header_length))
    document = parse_canonical_json(raw, f"{where}: header")
    if not isinstance(document, dict) or set(document) != {"container", "signatures"}:
        raise ContainerFormatError(f"{where}: header must be an object with keys 'container' and 'signatures'")
    body = document["container"]
    signatures = parse_signatures(document["signatures"], where)
    digest = digest_raw.hex()
    actual = json_digest(body)
    if actual != digest:
        # The header is what every other check trusts, so nothing else is examined.
        raise IntegrityError(where, [Mismatch("header", "container", digest, actual, offset=PREAMBLE_SIZE)])
    entries = _check_body(body, where, version)
    container = Container(where, source, body, entries, signatures, digest, header_length)
    last = max((e.offset + e.length for e in entries), default=0)
    declared = container.data_start + last
    if declared != size:
        problem = "truncated" if size < declared else "extra bytes at the end"
        raise IntegrityError(where, [Mismatch("file", where, f"{declared} bytes", f"{size} bytes ({problem})")])
    return container


def parse_canonical_json(raw: bytes, what: str) -> Any:
    """Parse JSON that must be exactly sealtrace's canonical encoding (no floats, no duplicates)."""
    try:
        document = loads_strict(raw, floats=False, encoding="ascii")
    except FloatNotAllowedError as exc:
        raise ContainerFormatError(f"{what}: {exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        # ValueError covers JSONDecodeError, a duplicate key and over-long integers; RecursionError deep nesting.
        raise ContainerFormatError(f"{what}: not valid JSON ({type(exc).__name__}: {str(exc)[:80]})") from None
    if json_nesting_exceeds(document, MAX_JSON_DEPTH):
        # A fixed bound (docs/container-format.md), not the interpreter's recursion limit, decides.
        raise ContainerFormatError(f"{what}: JSON nested more than {MAX_JSON_DEPTH} levels deep")
    try:
        canonical = canonical_json(document)
    except (ValueError, RecursionError):
        raise ContainerFormatError(f"{what}: JSON cannot be re-encoded canonically") from None
    if canonical != raw:
        raise ContainerFormatError(f"{what}: JSON is not in canonical form (sorted keys, no whitespace)")
    return document


def parse_signatures(value: Any, where: str) -> list[SignatureEntry]:
    """Check the shape of a signature list (validity is checked by the verifier)."""
    if not isinstance(value, list):
        raise ContainerFormatError(f"{where}: 'signatures' must be a list")
    found: list[SignatureEntry] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or set(item) != {"algorithm", "key_id", "public_key", "signature"}:
            raise ContainerFormatError(
                f"{where}: signature {i} must have exactly algorithm, key_id, public_key, signature"
            )
        if item["algorithm"] != "ed25519":
            raise ContainerFormatError(f"{where}: signature {i}: unknown algorithm {str(item['algorithm'])[:40]!r}")
        for key, pattern in (("key_id", _HEX16), ("public_key", HEX_DIGEST), ("signature", _HEX128)):
            if not isinstance(item[key], str) or not pattern.fullmatch(item[key]):
                raise ContainerFormatError(f"{where}: signature {i}: malformed {key}")
        found.append(SignatureEntry(item["algorithm"], item["key_id"], item["public_key"], item["signature"]))
    return found


_BODY_KEYS = {
    "format", "format_version", "sealtrace_version", "alignment", "chunk_size", "plan_digest",
    "model", "source", "sections", "tensors",
}  # fmt: skip
_MODEL_KEYS = {"ir_version", "producer_name", "producer_version", "domain", "model_version", "graph_name", "opset_imports"}
_SOURCE_KEYS = {"file_name", "sha256", "size", "external_data"}
_SECTION_KEYS = {"name", "encoding", "offset", "length", "sha256"}
_TENSOR_KEYS = {"name", "dtype", "shape", "storage", "offset", "length", "sha256"}


def _fail(where: str, message: str) -> ContainerFormatError:
    return ContainerFormatError(f"{where}: {message}")


def _int(value: Any, what: str, where: str, low: int = 0, high: int = MAX_INT64) -> int:
    if not is_integer(value, low, high):
        raise _fail(where, f"{what} must be an integer in [{low}, {high}]")
    return value


def _str(value: Any, what: str, where: str, limit: int = MAX_NAME_LENGTH) -> str:
    if not is_text(value, limit):
        raise _fail(where, f"{what} must be a string of at most {limit} characters")
    return value


def _keys(value: Any, keys: set[str], what: str, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, f"{what} must be an object")
    missing, unknown = missing_and_unknown(value, keys)
    if missing or unknown:
        raise _fail(where, f"{what}: missing keys {missing}, unknown keys {[k[:40] for k in unknown[:5]]}")
    return value


def check_name(name: Any, what: str, where: str) -> str:
    """A tensor or section name: non-empty, printable, and not readable as an escaping path."""
    name = _str(name, what, where)
    if not name:
        raise _fail(where, f"{what} is empty")
    if has_control_characters(name):
        raise _fail(where, f"{what} {name[:60]!r} contains control characters")
    if "\\" in name or name.startswith("/") or re.match(r"[A-Za-z]:", name):
        raise _fail(where, f"{what} {name[:60]!r} looks like an absolute or Windows path")
    if any(part in (".", "..") for part in name.split("/")):
        raise _fail(where, f"{what} {name[:60]!r} has a '.' or '..' path component")
    return name


def _digests(value: Any, count: int, what: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) != count:
        raise _fail(where, f"{what}: sha256 must list {count} chunk digest(s)")
    for item in value:
        if not is_hex_digest(item):
            raise _fail(where, f"{what}: sha256 entries must be 64 lowercase hex digits")
    return tuple(value)


def _check_graph_index(index: Any, where: str) -> None:
    """The shape of a graph index (its values are checked against the graph section by verify)."""
    index = _keys(index, {"model", "opset_imports", "graph", "nodes"}, "graph_index", where)
    for key in ("model", "graph"):
        _hex64(index[key], f"graph_index.{key}", where)
    if not isinstance(index["opset_imports"], list) or not isinstance(index["nodes"], list):
        raise _fail(where, "graph_index.opset_imports and graph_index.nodes must be lists")
    for item in index["opset_imports"]:
        item = _keys(item, {"domain", "sha256"}, "graph_index opset import", where)
        _label(item["domain"], "graph_index opset domain", where)
        _hex64(item["sha256"], "graph_index opset import sha256", where)
    for node in index["nodes"]:
        node = _keys(node, {"name", "op_type", "sha256", "attributes"}, "graph_index node", where)
        _label(node["name"], "graph_index node name", where)
        _label(node["op_type"], "graph_index node op_type", where)
        _hex64(node["sha256"], "graph_index node sha256", where)
        if not isinstance(node["attributes"], list):
            raise _fail(where, "graph_index node attributes must be a list")
        for attribute in node["attributes"]:
            attribute = _keys(attribute, {"name", "sha256"}, "graph_index attribute", where)
            _label(attribute["name"], "graph_index attribute name", where)
            _hex64(attribute["sha256"], "graph_index attribute sha256", where)


def _hex64(value: Any, what: str, where: str) -> None:
    if not is_hex_digest(value):
        raise _fail(where, f"{what} must be 64 lowercase hex digits")


def _label(value: Any, what: str, where: str) -> None:
    if value is not None:
        _str(value, what, where, LABEL_LENGTH)


def _check_body(body: Any, where: str, version: int) -> list[Entry]:
    if isinstance(body, dict) and body.get("format_version") != version:
        raise _fail(where, f"header format_version {str(body.get('format_version'))[:20]} is not the preamble's {version}")
    body = _keys(body, _BODY_KEYS | ({"graph_index"} if version >= 2 else set()), "container header", where)
    if body["format"] != FORMAT_NAME:
        raise _fail(where, f"format must be {FORMAT_NAME!r}")
    if isinstance(body["format_version"], bool):
        raise _fail(where, f"header format_version {str(body['format_version'])[:20]} is not supported")
    if version >= 2:
        _check_graph_index(body["graph_index"], where)
    _str(body["sealtrace_version"], "sealtrace_version", where, 64)
    if body["alignment"] != ALIGNMENT or isinstance(body["alignment"], bool):
        raise _fail(where, f"alignment must be {ALIGNMENT}")
    chunk_size = _int(body["chunk_size"], "chunk_size", where, MIN_CHUNK_SIZE, MAX_CHUNK_SIZE)
    if chunk_size & (chunk_size - 1):
        raise _fail(where, "chunk_size must be a power of two")
    _hex64(body["plan_digest"], "plan_digest", where)
    model = _keys(body["model"], _MODEL_KEYS, "model", where)
    for key in ("producer_name", "producer_version", "domain", "graph_name"):
        _str(model[key], f"model.{key}", where)
    _int(model["ir_version"], "model.ir_version", where)
    _int(model["model_version"], "model.model_version", where)
    if not isinstance(model["opset_imports"], list):
        raise _fail(where, "model.opset_imports must be a list")
    for item in model["opset_imports"]:
        item = _keys(item, {"domain", "version"}, "opset import", where)
        _str(item["domain"], "opset domain", where)
        _int(item["version"], "opset version", where)
    source = _keys(body["source"], _SOURCE_KEYS, "source", where)
    if source["file_name"] is not None:
        check_name(source["file_name"], "source.file_name", where)
    _hex64(source["sha256"], "source.sha256", where)
    _int(source["size"], "source.size", where)
    if not isinstance(source["external_data"], list):
        raise _fail(where, "source.external_data must be a list")
    for item in source["external_data"]:
        item = _keys(item, {"path", "sha256", "size"}, "source.external_data entry", where)
        check_name(item["path"], "external data path", where)
        _hex64(item["sha256"], "external data sha256", where)
        _int(item["size"], "external data size", where)

    entries: list[Entry] = []
    if not isinstance(body["sections"], list) or not isinstance(body["tensors"], list):
        raise _fail(where, "sections and tensors must be lists")
    for item in body["sections"]:
        item = _keys(item, _SECTION_KEYS, "section", where)
        name = check_name(item["name"], "section name", where)
        if name != GRAPH_SECTION or item["encoding"] != GRAPH_ENCODING:
            raise _fail(where, f"unknown section {name[:60]!r} (v1 has one section, 'graph', onnx-protobuf)")
        offset = _int(item["offset"], f"section {name!r} offset", where)
        length = _int(item["length"], f"section {name!r} length", where)
        digests = _digests(item["sha256"], chunk_count(length, chunk_size), f"section {name!r}", where)
        entries.append(Entry("section", name, offset, length, digests, encoding=GRAPH_ENCODING))
    if len(entries) != 1:
        raise _fail(where, "a container has exactly one 'graph' section")
    names: set[str] = set()
    for item in body["tensors"]:
        item = _keys(item, _TENSOR_KEYS, "tensor entry", where)
        name = check_name(item["name"], "tensor name", where)
        if name in names:
            raise _fail(where, f"tensor name {name[:60]!r} appears twice")
        names.add(name)
        dtype = item["dtype"]
        if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
            raise _fail(where, f"tensor {name!r}: unknown dtype {str(dtype)[:40]!r}")
        shape = item["shape"]
        if not isinstance(shape, list) or len(shape) > MAX_RANK:
            raise _fail(where, f"tensor {name!r}: shape must be a list of at most {MAX_RANK} sizes")
        dims = tuple(_int(d, f"tensor {name!r} dimension", where) for d in shape)
        if item["storage"] not in STORAGE_FIELDS:
            raise _fail(where, f"tensor {name!r}: unknown storage {str(item['storage'])[:40]!r}")
        offset = _int(item["offset"], f"tensor {name!r} offset", where)
        length = _int(item["length"], f"tensor {name!r} length", where)
        if expected_length(dtype, list(dims)) != length:
            raise _fail(where, f"tensor {name!r}: {dtype}{list(dims)} needs {expected_length(dtype, list(dims))} bytes, header says {length}")
        digests = _digests(item["sha256"], chunk_count(length, chunk_size), f"tensor {name!r}", where)
        entries.append(Entry("tensor", name, offset, length, digests, dtype, dims, item["storage"]))

    # Layout: in file order, each entry starts at the first aligned offset after the previous one.
    end = 0
    ordered = sorted(entries, key=lambda e: e.offset)
    if ordered != entries:
        raise _fail(where, "sections and tensors must be listed in file order")
    for e in entries:
        if e.offset != align(end):
            kind = "overlaps the previous entry" if e.offset < end else "leaves a hole or is misaligned"
            raise _fail(where, f"{e.kind} {e.name!r} at offset {e.offset} {kind} (expected {align(end)})")
        end = e.offset + e.length
    return entries
