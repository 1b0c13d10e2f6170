"""Seal an ONNX file whose large weights live in external data files, in one pass over their bytes.

``onnx.save(..., save_as_external_data=True)`` keeps the weights outside the model file. Loading
them (sealtrace.plan.modelfile) reads every external file into memory, and sealing then copies each
weight again and hashes it three times from memory: for a 1 GB model, 3 GB of memory and three
passes over the bytes. Here the large weights are never loaded. Each external data file is read
once, in blocks, in file order, and every block, while it is in the CPU cache, is

- hashed into that file's sha256 (the header's ``source`` record),
- written to its place in the container and hashed into the tensor's chunk digests,
- hashed into the tensor's Plan digest (``sealtrace.digest.tensor_digest``: the tensor's bytes are
  exactly its raw_data form), which the Plan digest takes through ``plan.model.KNOWN_DIGESTS``;

each of the three on its own thread (hashlib and ``pwrite`` release the GIL), so hashing overlaps
with writing and with reading the next block. Memory stays at a few blocks, however large the model.

The three digests are three different sha256 streams that the format (version 1) defines: none can
be derived from another, so each byte is read once and hashed three times. The container is byte
for byte the one :func:`sealtrace.container.writer.seal_model` writes for the loaded model.

The files are read with ``pread``, not through a memory map: a source file truncated meanwhile then
gives a short read and a SealingError, where a mapped read would kill the process with SIGBUS. The
Plan is built over read-only mapped views of the large weights (only what the builder looks at is
paged in: nothing, for weights that are not shapes); their digests come from the pass.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import sys
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from onnx import ModelProto, TensorProto, helper

from sealtrace.container.errors import SealingError
from sealtrace.container.format import DTYPE_BITS, expected_length
from sealtrace.container.weights import dtype_name
from sealtrace.digest import tensor_digest_prefix
from sealtrace.errors import InvalidModelError
from sealtrace.limits import open_regular_file, read_regular_file
from sealtrace.plan.modelfile import ExternalFile, check_ranges, external_data_files, parse_model

# Bytes read per pread: large enough that each thread's work per block dwarfs handing it over,
# small enough that a block is still in the cache when the last of the three hashes reads it.
BLOCK = 8 << 20
# Blocks in flight: reading runs this far ahead of the slowest hash.
BLOCKS_IN_FLIGHT = 6
# Weights with more elements stay in their files while the Plan is built. The Plan builder's shape
# inference leaves initializers of more than 4096 elements out (plan.builder._LARGE_WEIGHT), so it
# sees the same model either way.
STREAM_MIN_ELEMENTS = 4096
# The types whose raw_data bytes are exactly the array onnx gives (numpy_helper.to_array: frombuffer),
# and so the bytes tensor_digest hashes; packed 4-bit and 2-bit types are unpacked there: not these.
_STREAMED_TYPES = frozenset(
    t for t in TensorProto.DataType.values() if DTYPE_BITS.get(dtype_name(t), 0) >= 8
)


@dataclass
class StreamedWeight:
    """A weight left in its external data file: where its bytes are, and what the pass found."""

    tensor: TensorProto
    file: int  # index into ModelSource.files
    start: int
    end: int
    shape: tuple[int, ...]
    np_dtype: np.dtype[Any]
    view: memoryview  # of the mapped file: the Weight's data (only its length is used)
    stand_in: np.ndarray | None = None  # the array the Plan holds
    chunk_digests: list[str] = field(default_factory=list)
    plan_digest: str = ""


@dataclass
class SourceFile:
    """One external data file, open for the pass."""

    location: str
    file: BinaryIO
    size: int
    mapped: mmap.mmap | None
    sha256: str = ""


@dataclass
class ModelSource:
    """An ONNX file opened for sealing: the model (small external tensors filled in, large ones
    still pointing to their files), the file's sha256 and size, and its external data files."""

    path: Path
    model: ModelProto
    sha256: str
    size: int
    files: list[SourceFile]
    streamed: list[StreamedWeight]
    # (file index, start, end, sha256) of each range filled into the model before the pass: the pass
    # checks that the file still holds those bytes, so the header's file digest covers what is sealed.
    filled: list[tuple[int, int, int, str]]
    _by_key: dict[tuple[str, ...], StreamedWeight] = field(default_factory=dict)
    _by_view: dict[int, StreamedWeight] = field(default_factory=dict)

    @property
    def external_data(self) -> list[ExternalFile]:
        return [ExternalFile(f.location, f.sha256, f.size) for f in self.files]

    def stand_in(self, tensor: TensorProto) -> np.ndarray | None:
        """The Plan's array for a streamed tensor: a read-only view of the mapped file."""
        weight = self._by_key.get(_key(tensor))
        if weight is None:
            return None
        if weight.stand_in is None:
            mapped = self.files[weight.file].mapped
            assert mapped is not None  # a file with streamed weights is mapped
            count = (weight.end - weight.start) // weight.np_dtype.itemsize
            weight.stand_in = np.frombuffer(mapped, weight.np_dtype, count, weight.start).reshape(weight.shape)
        return weight.stand_in

    def weight_bytes(self, tensor: TensorProto) -> memoryview | None:
        """For strip_weights: the bytes of a streamed tensor (a view, never read there)."""
        weight = self._by_key.get(_key(tensor))
        return None if weight is None else weight.view

    def streamed_weight(self, data: object) -> StreamedWeight | None:
        """The streamed weight whose view ``data`` is (a stripped Weight's data), else None."""
        return self._by_view.get(id(data))

    def known_digests(self) -> dict[int, str]:
        """id(stand-in) -> its Plan (tensor) digest, for plan.model.KNOWN_DIGESTS after the pass."""
        return {id(w.stand_in): w.plan_digest for w in self.streamed if w.stand_in is not None}

    def close(self) -> None:
        for weight in self.streamed:
            weight.view.release()
            weight.stand_in = None
        for f in self.files:
            if f.mapped is not None:
                with contextlib.suppress(BufferError):  # a stand-in still referenced: closed when freed
                    f.mapped.close()
            f.file.close()


def _key(tensor: TensorProto) -> tuple[str, ...]:
    """A streamed tensor is recognized by its name and external data entries, so a copy of the proto
    (the Plan builder makes some) is recognized too."""
    return (tensor.name, *(f"{e.key}={e.value}" for e in tensor.external_data))


def open_model_source(path: str | os.PathLike[str]) -> ModelSource:
    """Read the model file once and open its external data files (refusals as in
    :func:`sealtrace.plan.modelfile.read_model_file`, raised as InvalidModelError). Large weights
    whose bytes are their array stay in their files; the others are read into the model. The
    caller closes the source."""
    path = Path(os.fspath(path))
    where = str(path)
    data = read_regular_file(path, "ONNX model", InvalidModelError)
    model = parse_model(data, where)
    source = ModelSource(path, model, hashlib.sha256(data).hexdigest(), len(data), [], [], [])
    del data
    try:
        # Weights stream only where the Plan builder reads them from the proto given (functions are
        # inlined into a copy) and shape inference leaves them out: large top-level initializers.
        # (The list keeps protobuf's wrapper objects alive, so their ids stay theirs.)
        initializers = list(model.graph.initializer) if not model.functions else []
        top = {id(t) for t in initializers}
        for location, file_path, tensors in external_data_files(model, path):
            f, size = open_regular_file(file_path, "external data file", InvalidModelError)
            index = len(source.files)
            source.files.append(SourceFile(location, f, size, None))
            for tensor, (start, end) in zip(tensors, check_ranges(tensors, size, location, where), strict=True):
                np_dtype = _streamable(tensor, start, end, top)
                if np_dtype is None or _key(tensor) in source._by_key:  # a twin (refused by the Plan builder)
                    _fill(source, index, tensor, start, end, where)
                    continue
                if source.files[index].mapped is None:
                    source.files[index].mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                mapped = source.files[index].mapped
                assert mapped is not None
                weight = StreamedWeight(
                    tensor, index, start, end, tuple(int(d) for d in tensor.dims), np_dtype,
                    memoryview(mapped)[start:end],
                )  # fmt: skip
                source.streamed.append(weight)
                source._by_key[_key(tensor)] = weight
                source._by_view[id(weight.view)] = weight
    except BaseException:
        source.close()
        raise
    return source


def _streamable(tensor: TensorProto, start: int, end: int, top: set[int]) -> np.dtype[Any] | None:
    """The NumPy dtype of a tensor that can stay in its file, or None (it is read in)."""
    if id(tensor) not in top or sys.byteorder != "little" or tensor.data_type not in _STREAMED_TYPES:
        return None
    if tensor.HasField("segment") or tensor.HasField("raw_data"):
        return None
    if any(len(getattr(tensor, f)) for f in ("float_data", "double_data", "int32_data", "int64_data", "uint64_data")):
        return None
    shape = [int(d) for d in tensor.dims]
    if any(d < 0 for d in shape) or int(np.prod(shape, dtype=object)) <= STREAM_MIN_ELEMENTS:
        return None
    if end - start != expected_length(dtype_name(tensor.data_type), shape):
        return None  # loaded, onnx refuses it with its own message, as without streaming
    return np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))


def _fill(source: ModelSource, index: int, tensor: TensorProto, start: int, end: int, where: str) -> None:
    """Read one external tensor into the model, as loading does (sealtrace.plan.modelfile)."""
    data = _pread(source.files[index], start, end - start, where)
    source.filled.append((index, start, end, hashlib.sha256(data).hexdigest()))
    tensor.raw_data = data
    tensor.data_location = TensorProto.DEFAULT
    del tensor.external_data[:]


def _pread(f: SourceFile, offset: int, length: int, where: str) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < length:
        part = os.pread(f.file.fileno(), min(length - got, BLOCK), offset + got)
        if not part:
            raise SealingError(f"{where}: external data file {f.location!r} changed while being sealed (truncated)")
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def stream_weights(
    source: ModelSource,
    out_fd: int,
    places: dict[int, int],
    chunk_size: int,
    where: str,
) -> None:
    """The pass: read every external data file once, write each streamed weight to its place in the
    container (``places``: id(StreamedWeight) -> file offset), and fill in each file's sha256, each
    streamed weight's chunk digests and Plan digest. Raises SealingError when a file changed."""
    lanes = [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"sealtrace-stream-{n}") for n in range(3)]
    file_lane, write_lane, plan_lane = lanes
    buffers = [bytearray(BLOCK) for _ in range(BLOCKS_IN_FLIGHT)]
    in_flight: deque[tuple[bytearray, list[Future[None]]]] = deque()

    def settle(oldest: tuple[bytearray, list[Future[None]]]) -> bytearray:
        for future in oldest[1]:
            future.result()  # a failed write surfaces here
        return oldest[0]

    try:
        for index, f in enumerate(source.files):
            whole = hashlib.sha256()
            weights = sorted((w for w in source.streamed if w.file == index), key=lambda w: w.start)
            filled = [(s, e, d) for i, s, e, d in source.filled if i == index]
            state = {id(w): _WeightHashes(w, chunk_size, places[id(w)]) for w in weights}
            check = {(s, e): hashlib.sha256() for s, e, _ in filled}
            position = 0
            while position < f.size:
                buffer = buffers.pop() if buffers else settle(in_flight.popleft())
                length = min(BLOCK, f.size - position)
                block = memoryview(buffer)[:length]
                got = os.preadv(f.file.fileno(), [block], position)
                while got < length:  # a regular file reads short only at its end
                    more = os.preadv(f.file.fileno(), [block[got:]], position + got)
                    if not more:
                        raise SealingError(
                            f"{where}: external data file {f.location!r} changed while being sealed (truncated)"
                        )
                    got += more
                futures = [file_lane.submit(whole.update, block)]
                for (s, e), h in check.items():
                    if s < position + length and e > position:
                        futures.append(file_lane.submit(h.update, block[max(s, position) - position : min(e, position + length) - position]))
                for w in weights:
                    if w.start >= position + length:
                        break
                    if w.end <= position:
                        continue
                    hashes = state[id(w)]
                    a, b = max(w.start, position), min(w.end, position + length)
                    piece = block[a - position : b - position]
                    futures.append(write_lane.submit(hashes.write, out_fd, piece, a - w.start))
                    futures.append(plan_lane.submit(hashes.plan.update, piece))
                in_flight.append((buffer, futures))
                position += length
            while in_flight:
                buffers.append(settle(in_flight.popleft()))
            if os.fstat(f.file.fileno()).st_size != f.size:
                raise SealingError(f"{where}: external data file {f.location!r} changed while being sealed (size)")
            for s, e, digest in filled:
                if check[(s, e)].hexdigest() != digest:
                    raise SealingError(f"{where}: external data file {f.location!r} changed while being sealed")
            f.sha256 = whole.hexdigest()
            for w in weights:
                state[id(w)].finish()
    except OSError as exc:
        raise SealingError(f"{where}: cannot seal ({exc.strerror or exc})") from None
    finally:
        for lane in lanes:
            lane.shutdown(wait=True, cancel_futures=True)


def _writeback_starter() -> Callable[[int, int, int], None]:
    """Linux's sync_file_range(SYNC_FILE_RANGE_WRITE): start writing a written range to disk now,
    without waiting, so the final fsync does not wait for the whole container at once (the disk
    works while the pass hashes). Elsewhere: nothing; the fsync alone makes the file durable."""
    try:
        import ctypes

        call = ctypes.CDLL(None, use_errno=True).sync_file_range
        call.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    except (OSError, AttributeError, ImportError):
        return lambda fd, offset, length: None

    def start(fd: int, offset: int, length: int) -> None:
        call(fd, offset, length, 2)  # SYNC_FILE_RANGE_WRITE; a failure shows in the final fsync

    return start


_start_writeback = _writeback_starter()


class _WeightHashes:
    """The running digests of one streamed weight; each method runs on one lane, in block order."""

    def __init__(self, weight: StreamedWeight, chunk_size: int, place: int):
        self.weight = weight
        self.chunk_size = chunk_size
        self.place = place
        self.chunks: list[Any] = []
        self.plan = hashlib.sha256(tensor_digest_prefix(weight.np_dtype, weight.shape))

    def write(self, out_fd: int, piece: memoryview, offset: int) -> None:
        """Write ``piece`` (at ``offset`` in the weight) to the container, and hash it into its chunks."""
        written = 0
        while written < len(piece):
            written += os.pwrite(out_fd, piece[written:], self.place + offset + written)
        _start_writeback(out_fd, self.place + offset, len(piece))
        while len(piece):
            k, within = divmod(offset, self.chunk_size)
            if k == len(self.chunks):
                self.chunks.append(hashlib.sha256())
            take = min(len(piece), self.chunk_size - within)
            self.chunks[k].update(piece[:take])
            piece, offset = piece[take:], offset + take

    def finish(self) -> None:
        self.weight.chunk_digests = [h.hexdigest() for h in self.chunks]
        self.weight.plan_digest = self.plan.hexdigest()


def sealed_plan_digest(source: ModelSource, digest: Callable[[], str]) -> str:
    """Compute a Plan digest (``digest``, e.g. ``lambda: plan.digest``) taking the streamed weights'
    digests from the pass instead of reading them again."""
    from sealtrace.plan.model import KNOWN_DIGESTS

    token = KNOWN_DIGESTS.set(source.known_digests())
    try:
        return digest()
    finally:
        KNOWN_DIGESTS.reset(token)
