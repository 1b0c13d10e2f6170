"""An ONNX file and its external data, read once: what is hashed is what runs.

An ONNX model on disk is the model file plus every external data file its tensors name
(``onnx.save(..., save_as_external_data=True)``). Everything that identifies such a model (the
audit linkage of a run, the artifact digest of a binding, the ``source`` record of a container)
must cover all of those bytes, and must be taken from the very bytes the model is then built
from: a file swapped between the hash and the parse would otherwise run unseen.

:func:`read_model_file` reads the model file and each external data file exactly once (regular
files only, through :mod:`sealtrace.limits`), fills the tensors from those bytes, and returns the
digests with the model. :func:`files_digest` is the rule that combines them (docs/binding.md):

- no external data: the sha256 of the model file, as it always was (old records still verify);
- with external data: sha256 of the canonical JSON
  ``{"format": "sealtrace.onnx-files.v1", "model": {"sha256", "size"},
  "external_data": [{"path", "sha256", "size"}, ...]}`` with the files sorted by path. Each file
  is framed by its own digest and size, so no byte can move from one file to another unseen.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto

from sealtrace.digest import json_digest
from sealtrace.errors import InvalidModelError
from sealtrace.limits import has_control_characters, open_regular_file, read_regular_file

FILES_FORMAT = "sealtrace.onnx-files.v1"


@dataclass(frozen=True)
class ExternalFile:
    """One external data file of a model: its path relative to the model's directory ('/'-separated,
    as the model names it, normalized), sha256 and size in bytes."""

    path: str
    sha256: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "size": self.size}


def files_digest(model_sha256: str, model_size: int, external: Sequence[ExternalFile]) -> str:
    """The digest of a model and its external data files (see the module docstring).

    Without external data it is ``model_sha256`` itself, so the identity of a self-contained model
    is the sha256 of its bytes, unchanged from before external data counted.
    """
    if not external:
        return model_sha256
    files = sorted(external, key=lambda f: f.path)
    return json_digest(
        {
            "format": FILES_FORMAT,
            "model": {"sha256": model_sha256, "size": model_size},
            "external_data": [f.to_json() for f in files],
        }
    )


@dataclass(frozen=True)
class ModelFile:
    """An ONNX file read once: the model (external data filled in from the bytes that were hashed),
    the sha256 and size of the file's bytes, and its external data files sorted by path."""

    path: Path
    model: ModelProto
    sha256: str
    size: int
    external_data: tuple[ExternalFile, ...]

    @property
    def digest(self) -> str:
        """What identifies this model on disk: :func:`files_digest` of the file and its external data."""
        return files_digest(self.sha256, self.size, self.external_data)


def parse_model(data: bytes, where: str) -> ModelProto:
    """Parse ONNX bytes; InvalidModelError for anything that is not a model with a graph."""
    from google.protobuf.message import DecodeError

    model = ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise InvalidModelError(f"{where}: not a valid ONNX model ({exc})") from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise InvalidModelError(f"{where}: not an ONNX model (no graph found)")
    return model


def read_model_file(source: str | os.PathLike[str]) -> ModelFile:
    """Read an ONNX file and its external data once; fill the tensors from the bytes hashed.

    Refused with :class:`InvalidModelError` (exit 2): a missing file, a directory, a device or
    FIFO (``/dev/zero``), bytes that are not ONNX, an external data location that is absolute or
    leaves the model's directory (``..``, a symbolic link pointing out), a negative or malformed
    offset or length, a range past the end of its file, external data in a sparse tensor.
    """
    path = Path(os.fspath(source))
    data = read_regular_file(path, "ONNX model", InvalidModelError)
    model = parse_model(data, str(path))
    sha256, size = hashlib.sha256(data).hexdigest(), len(data)
    del data  # the parsed model holds what is needed; do not keep a second copy while loading weights
    return ModelFile(path, model, sha256, size, _external_data(model, path, fill=True))


def external_tensors(model: ModelProto) -> Iterator[TensorProto]:
    """Every tensor whose data lives in an external file, where onnx looks for them: initializers
    and tensor attributes of the graph and its subgraphs, and tensor attributes of functions."""
    for tensor in _tensors(model):
        if tensor.data_location == TensorProto.EXTERNAL:
            yield tensor


def _tensors(model: ModelProto) -> Iterator[TensorProto]:
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        for node in function.node:
            yield from _node_tensors(node)


def _graph_tensors(graph: GraphProto) -> Iterator[TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        yield from _node_tensors(node)


def _node_tensors(node: NodeProto) -> Iterator[TensorProto]:
    for attr in node.attribute:
        if attr.type == AttributeProto.TENSOR:
            yield attr.t
        elif attr.type == AttributeProto.TENSORS:
            yield from attr.tensors
        elif attr.type == AttributeProto.GRAPH:
            yield from _graph_tensors(attr.g)
        elif attr.type == AttributeProto.GRAPHS:
            for sub in attr.graphs:
                yield from _graph_tensors(sub)


def _sparse_external(model: ModelProto) -> list[str]:
    """Sparse tensors that point at external data (onnx does not load those either)."""
    found: list[str] = []
    pending: list[GraphProto] = [model.graph]
    while pending:
        graph = pending.pop()
        for sparse in graph.sparse_initializer:
            if TensorProto.EXTERNAL in (sparse.values.data_location, sparse.indices.data_location):
                found.append(sparse.values.name)
        for node in graph.node:
            for attr in node.attribute:
                for sparse in [attr.sparse_tensor, *attr.sparse_tensors]:
                    if TensorProto.EXTERNAL in (sparse.values.data_location, sparse.indices.data_location):
                        found.append(f"{node.name or node.op_type}.{attr.name}")
                if attr.type == AttributeProto.GRAPH:
                    pending.append(attr.g)
                pending.extend(attr.graphs)
    return found


_DRIVE = re.compile(r"[A-Za-z]:")


def external_location(location: str, where: str, tensor: str) -> str:
    """A location normalized to a '/'-separated path inside the model's directory, or refused."""
    if not location:
        raise InvalidModelError(f"{where}: tensor {tensor[:80]!r} has external data without a location")
    if has_control_characters(location):
        raise InvalidModelError(
            f"{where}: tensor {tensor[:80]!r}: external data location {location[:120]!r} has control characters"
        )
    if location.startswith(("/", "\\")) or _DRIVE.match(location):
        raise InvalidModelError(
            f"{where}: tensor {tensor[:80]!r}: external data location {location[:120]!r} is absolute; "
            "it must be relative to the model's directory"
        )
    parts = [p for p in re.split(r"[/\\]", location) if p not in ("", ".")]
    if not parts or ".." in parts:
        raise InvalidModelError(
            f"{where}: tensor {tensor[:80]!r}: external data location {location[:120]!r} leaves the "
            "model's directory"
        )
    return "/".join(parts)


def _entry(tensor: TensorProto, key: str, where: str) -> int | None:
    values = [e.value for e in tensor.external_data if e.key == key]
    if not values:
        return None
    try:
        value = int(values[-1])
    except ValueError:
        raise InvalidModelError(
            f"{where}: tensor {tensor.name[:80]!r}: external data {key} {values[-1][:40]!r} is not an integer"
        ) from None
    if value < 0:
        raise InvalidModelError(f"{where}: tensor {tensor.name[:80]!r}: external data {key} {value} is negative")
    return value


def load_external_data(model: ModelProto, path: str | os.PathLike[str]) -> tuple[ExternalFile, ...]:
    """Fill every external tensor of ``model`` (read from ``path``) from its file, in place, each
    file read once; the files, sorted by path. Refusals as in :func:`read_model_file`."""
    return _external_data(model, Path(os.fspath(path)), fill=True)


def model_file_digest(source: str | os.PathLike[str]) -> str:
    """The identity of an ONNX file on disk, :func:`files_digest` of the file and its external
    data, taken without building the model's tensors (external files are hashed as they are read).
    A file that is not ONNX is identified by the sha256 of its bytes; an empty file is no model."""
    path = Path(os.fspath(source))
    data = read_regular_file(path, "model file", InvalidModelError)
    if not data:
        raise InvalidModelError(f"{path}: empty file, not a model")
    sha256, size = hashlib.sha256(data).hexdigest(), len(data)
    try:
        model = parse_model(data, str(path))
    except InvalidModelError:
        return sha256
    del data
    return files_digest(sha256, size, _external_data(model, path, fill=False))


def external_data_files(model: ModelProto, path: str | os.PathLike[str]) -> list[tuple[str, Path, list[TensorProto]]]:
    """The external data files of ``model`` (read from ``path``), sorted by location: (location,
    the file, the tensors it holds). Refused as in :func:`read_model_file`: sparse tensors with
    external data, locations that are absolute or resolve outside the model's directory."""
    path = Path(os.fspath(path))
    where = str(path)
    sparse = _sparse_external(model)
    if sparse:
        raise InvalidModelError(f"{where}: sparse tensor(s) with external data are not supported: {', '.join(sparse[:5])}")
    wanted: dict[str, list[TensorProto]] = {}
    for tensor in external_tensors(model):
        location = "".join(e.value for e in tensor.external_data if e.key == "location")
        wanted.setdefault(external_location(location, where, tensor.name), []).append(tensor)
    base = path.parent
    real_base = base.resolve() if wanted else base
    found: list[tuple[str, Path, list[TensorProto]]] = []
    for location in sorted(wanted):
        file = base / location
        try:
            inside = file.resolve().is_relative_to(real_base)
        except (OSError, RuntimeError):  # a symbolic link loop
            inside = False
        if not inside:
            raise InvalidModelError(
                f"{where}: external data file {location[:120]!r} resolves outside the model's directory"
            )
        found.append((location, file, wanted[location]))
    return found


def _external_data(model: ModelProto, path: Path, fill: bool) -> tuple[ExternalFile, ...]:
    where = str(path)
    found: list[ExternalFile] = []
    for location, file, tensors in external_data_files(model, path):
        if not fill:
            digest, size = _hash_file(file)
            found.append(ExternalFile(location, digest, size))
            check_ranges(tensors, size, location, where)
            continue
        data = read_regular_file(file, "external data file", InvalidModelError)
        found.append(ExternalFile(location, hashlib.sha256(data).hexdigest(), len(data)))
        for tensor, (offset, end) in zip(tensors, check_ranges(tensors, len(data), location, where), strict=True):
            tensor.raw_data = data[offset:end]
            tensor.data_location = TensorProto.DEFAULT
            del tensor.external_data[:]
        del data
    return tuple(found)


def check_ranges(tensors: list[TensorProto], size: int, location: str, where: str) -> list[tuple[int, int]]:
    """(start, end) of each tensor's bytes in a file of ``size`` bytes; refused past its end."""
    ranges = []
    for tensor in tensors:
        offset = _entry(tensor, "offset", where) or 0
        length = _entry(tensor, "length", where)
        end = size if length is None else offset + length
        if offset > size or end > size:
            raise InvalidModelError(
                f"{where}: tensor {tensor.name[:80]!r}: external data bytes {offset}..{end} lie past the end "
                f"of {location[:120]} ({size} bytes)"
            )
        ranges.append((offset, end))
    return ranges


def _hash_file(path: Path) -> tuple[str, int]:
    f, expected = open_regular_file(path, "external data file", InvalidModelError)
    digest = hashlib.sha256()
    size = 0
    with f:
        try:
            # Up to the size at open: a file that keeps growing cannot make the read unbounded.
            while size < expected and (block := f.read(min(1 << 20, expected - size))):
                digest.update(block)
                size += len(block)
        except OSError as exc:
            raise InvalidModelError(f"{path}: cannot read external data file ({exc.strerror or exc})") from None
    return digest.hexdigest(), size
