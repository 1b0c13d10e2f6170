"""The Open Inference Protocol v2 on the wire: datatypes, request decoding, response encoding.

This is the KServe V2 REST protocol that Triton, KServe and MLServer speak, with the *binary tensor
data extension* (Triton's ``binary_tensor_data``): a request or response body is a JSON object,
optionally followed by raw tensor bytes, the JSON's length given by the
``Inference-Header-Content-Length`` header; an input carries ``"parameters": {"binary_data_size": N}``
instead of ``data``; a requested output asks for binary with ``"parameters": {"binary_data": true}``
(or all outputs at once with the request parameter ``binary_data_output``). Binary tensors are
little-endian, row-major; BOOL is one byte; a BYTES element is a 4-byte little-endian length and its
bytes.

Decoding checks everything against the model's declared inputs before a single value is allocated
(names, datatypes, shapes, element counts, binary sizes, the memory budget) and raises
:class:`ProtocolError` (a 4xx with a JSON ``{"error": ...}`` body naming the field). Nothing here
knows HTTP frameworks, sessions or the ledger.
"""

from __future__ import annotations

import json
import math
import struct
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from sealtrace.errors import InputError
from sealtrace.limits import BudgetExceededError, check_allocation
from sealtrace.plan.model import ValueInfo
from sealtrace.strictjson import loads_strict

HEADER_LENGTH = "Inference-Header-Content-Length"
MAX_RANK = 64
MAX_TENSORS = 4096
MAX_NAME = 1024
MAX_ID = 1024
# JSON parts past LARGE_JSON bytes are decoded at most two at a time in a process: while Python holds
# their numbers, each takes about 16 times its size, and many at once would add up to gigabytes.
LARGE_JSON = 1 << 20
_LARGE_JSON_PARSES = threading.BoundedSemaphore(2)
MAX_EXTENT = 1 << 48  # the product of a tensor's axes (empty ones as 1): 256 Ti elements

# OIP datatype -> NumPy dtype. BYTES is an object array (str for ONNX string tensors).
_DATATYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(object),
}
try:  # bfloat16 comes with ml_dtypes (an onnx dependency); binary only, as in Triton
    import ml_dtypes

    _DATATYPES["BF16"] = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    pass
_BINARY_ONLY = frozenset(("BF16",))
DATATYPES = tuple(_DATATYPES)


class ProtocolError(InputError):
    """A request the protocol refuses; ``status`` is the HTTP status (4xx), the message names the field."""

    status = 400

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class NotFoundError(ProtocolError):
    """An unknown model, version or record (404)."""

    status = 404


class PayloadTooLargeError(ProtocolError):
    """A body larger than the server accepts (413), refused before it is read."""

    status = 413


def datatype_of(dtype: np.dtype[Any] | None) -> str | None:
    """The OIP datatype of a NumPy dtype (None when it has none)."""
    if dtype is None:
        return None
    if dtype.kind in "OUS":
        return "BYTES"
    for name, candidate in _DATATYPES.items():
        if candidate == dtype and name != "BYTES":
            return name
    return None


@dataclass(frozen=True)
class TensorSpec:
    """What a model declares of one input or output, as the protocol states it."""

    name: str
    datatype: str | None  # None: not known statically (any datatype is accepted)
    shape: tuple[int, ...] | None  # -1 for a dynamic axis; None: not even the rank is known
    dtype: np.dtype[Any] | None
    axes: tuple[int | str | None, ...] | None = None  # the model's own: a name for a named dynamic axis

    @classmethod
    def of(cls, info: ValueInfo) -> TensorSpec:
        shape = None if info.shape is None else tuple(d if isinstance(d, int) and d > 0 else -1 for d in info.shape)
        return cls(info.name, datatype_of(info.dtype), shape, info.dtype, info.shape)

    def metadata(self) -> dict[str, Any]:
        """The ``$metadata_tensor`` object of the model metadata response."""
        # An unknown rank (rare: ONNX graph inputs declare one) is shown as one dynamic axis.
        return {"name": self.name, "datatype": self.datatype or "",
                "shape": list(self.shape) if self.shape is not None else [-1]}

    def describe(self) -> str:
        shape = "?" if self.shape is None else "[" + ",".join(str(d) for d in self.shape) + "]"
        return f"{self.datatype or '?'}{shape}"


@dataclass(frozen=True)
class RequestedOutput:
    """An output the client asked for; ``binary`` None follows the request's ``binary_data_output``."""

    name: str
    binary: bool | None


@dataclass
class InferenceRequest:
    """A decoded, checked request: feeds ready for ``Session.run``."""

    id: str | None
    inputs: dict[str, np.ndarray]
    outputs: list[RequestedOutput] | None  # None: every output, each as ``binary_default`` says
    binary_default: bool = False
    parameters: dict[str, Any] = field(default_factory=dict)


def json_too_large(size: int | str, max_json: int) -> str:
    return (f"body: a JSON part of {size} bytes is more than the server parses ({max_json}; see --max-json); "
            "send large tensors as binary data")


def parse_json_header(data: bytes) -> Any:
    """The JSON object of a request: bounded by the body limit already; deep nesting is a 400."""
    try:
        # Triton writes and reads NaN and Infinity; orjson first, for speed on large bodies.
        return loads_strict(data, nonfinite=True, fast=True)
    except RecursionError:
        raise ProtocolError("body: JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"body: not valid JSON ({' '.join(str(exc).split())[:160]})") from None


def split_body(body: bytes, header_length: str | None) -> tuple[bytes, bytes]:
    """(JSON part, binary part) of a body, as ``Inference-Header-Content-Length`` says."""
    if header_length is None:
        return body, b""
    text = header_length.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise ProtocolError(f"{HEADER_LENGTH}: {header_length[:40]!r} is not a byte count")
    length = int(text)
    if length > len(body):
        raise ProtocolError(f"{HEADER_LENGTH}: {length} is more than the body's {len(body)} bytes")
    return body[:length], body[length:]


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{where}: must be a JSON object, not {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array",
            dict: "an object"}.get(type(value), type(value).__name__)


def _only(obj: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    extra = [k for k in obj if k not in allowed]
    if extra:
        raise ProtocolError(f"{where}: unknown field {extra[0][:80]!r} (allowed: {', '.join(allowed)})")


def _parameters(obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    value = obj.get("parameters")
    if value is None:
        return {}
    return _object(value, f"{where}.parameters")


# Triton's scheduling parameters: accepted silently they would promise what the server does not do.
_UNSUPPORTED_PARAMETERS = {
    **dict.fromkeys(("sequence_id", "sequence_start", "sequence_end"), "the server has no sequence batcher"),
    "priority": "the server has no priority queue",
    "timeout": "the server has no per-request timeout",
}


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise ProtocolError(f"{where}: must be a non-empty string of at most {MAX_NAME} characters")
    return value


def parse_request(
    body: bytes,
    header_length: str | None,
    inputs: Mapping[str, TensorSpec],
    outputs: Mapping[str, TensorSpec],
    max_json: int | None = None,
) -> InferenceRequest:
    """Decode and check an inference request against the model's ``inputs`` and ``outputs``; a JSON
    part over ``max_json`` bytes is refused (413) before it is parsed."""
    header, binary = split_body(body, header_length)
    if max_json is not None and len(header) > max_json:
        raise PayloadTooLargeError(json_too_large(len(header), max_json))
    if len(header) <= LARGE_JSON:
        return _decode(header, binary, inputs, outputs)
    with _LARGE_JSON_PARSES:
        return _decode(header, binary, inputs, outputs)


def _decode(header: bytes, binary: bytes, inputs: Mapping[str, TensorSpec],
            outputs: Mapping[str, TensorSpec]) -> InferenceRequest:
    document = _object(parse_json_header(header), "body")
    _only(document, ("id", "parameters", "inputs", "outputs"), "body")
    request_id = document.get("id")
    if request_id is not None and not (isinstance(request_id, str) and len(request_id) <= MAX_ID):
        raise ProtocolError(f"id: must be a string of at most {MAX_ID} characters")
    parameters = _parameters(document, "body")
    for name, why in _UNSUPPORTED_PARAMETERS.items():
        if name in parameters:
            raise ProtocolError(f"parameters.{name}: not supported ({why})")
    binary_default = parameters.get("binary_data_output", False)
    if not isinstance(binary_default, bool):
        raise ProtocolError("parameters.binary_data_output: must be a boolean")
    raw_inputs = document.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise ProtocolError("inputs: must be a non-empty array of input tensors")
    if len(raw_inputs) > MAX_TENSORS:
        raise ProtocolError(f"inputs: at most {MAX_TENSORS} tensors")
    feeds: dict[str, np.ndarray] = {}
    offset = 0
    for i, raw in enumerate(raw_inputs):
        where = f"inputs[{i}]"
        tensor = _object(raw, where)
        _only(tensor, ("name", "shape", "datatype", "parameters", "data"), where)
        name = _name(tensor.get("name"), f"{where}.name")
        where = f"inputs[{i}] ({name[:80]!r})"
        spec = inputs.get(name)
        if spec is None:
            raise ProtocolError(f"{where}.name: unknown input {name[:80]!r}; the model's inputs are: "
                                f"{', '.join(inputs) or 'none'}")
        if name in feeds:
            raise ProtocolError(f"{where}.name: input {name[:80]!r} given twice")
        datatype, shape = _check_declaration(tensor, spec, where)
        size = _parameters(tensor, where).get("binary_data_size")
        if size is not None:
            if "data" in tensor:
                raise ProtocolError(f"{where}: has both data and parameters.binary_data_size")
            if type(size) is not int or size < 0:
                raise ProtocolError(f"{where}.parameters.binary_data_size: must be a non-negative integer")
            if size > len(binary) - offset:
                raise ProtocolError(f"{where}.parameters.binary_data_size: {size} bytes, but only "
                                    f"{len(binary) - offset} bytes of binary data are left in the body")
            feeds[name] = _binary_tensor(binary[offset : offset + size], datatype, shape, spec, where)
            offset += size
        else:
            if "data" not in tensor:
                raise ProtocolError(f"{where}.data: missing (and no parameters.binary_data_size)")
            if datatype in _BINARY_ONLY:
                raise ProtocolError(f"{where}.datatype: {datatype} tensors must be sent as binary data")
            feeds[name] = _json_tensor(tensor["data"], datatype, shape, spec, where)
    if offset != len(binary):
        raise ProtocolError(f"body: {len(binary) - offset} bytes of binary data after the last binary input "
                            f"({HEADER_LENGTH} or binary_data_size is wrong)")
    missing = [spec for name, spec in inputs.items() if name not in feeds]
    if missing:
        raise ProtocolError("inputs: missing " + ", ".join(f"{s.name!r} ({s.describe()})" for s in missing[:10]))
    return InferenceRequest(request_id, feeds, _requested_outputs(document, outputs), binary_default, parameters)


def _check_declaration(tensor: Mapping[str, Any], spec: TensorSpec, where: str) -> tuple[str, tuple[int, ...]]:
    datatype = tensor.get("datatype")
    if not isinstance(datatype, str) or datatype not in _DATATYPES:
        raise ProtocolError(f"{where}.datatype: {str(datatype)[:40]!r} is not an OIP datatype "
                            f"({', '.join(DATATYPES)})")
    if spec.datatype is not None and datatype != spec.datatype:
        raise ProtocolError(f"{where}.datatype: {datatype}, but the model's input is {spec.datatype}")
    shape = tensor.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_RANK or not all(type(d) is int and d >= 0 for d in shape):
        raise ProtocolError(f"{where}.shape: must be an array of at most {MAX_RANK} non-negative integers")
    if spec.shape is not None:
        if len(shape) != len(spec.shape):
            raise ProtocolError(f"{where}.shape: {shape} has rank {len(shape)}; the model expects {spec.describe()}")
        for axis, (want, got) in enumerate(zip(spec.shape, shape, strict=True)):
            if want >= 0 and want != got:
                raise ProtocolError(f"{where}.shape: {shape}: axis {axis} is {got}, the model expects "
                                    f"{want} ({spec.describe()})")
    return datatype, tuple(shape)


def _count(shape: tuple[int, ...], datatype: str, where: str) -> int:
    # The extent counts every axis, empty ones as 1: NumPy refuses an array of shape [0, 2**62] as
    # it does one of [1, 2**62], and a kernel's index arithmetic must not overflow on either.
    extent = math.prod(max(d, 1) for d in shape)
    if extent > MAX_EXTENT:
        raise ProtocolError(f"{where}.shape: {list(shape)}: the axes multiply to more than 2**{MAX_EXTENT.bit_length() - 1} "
                            "(empty axes counted as 1)")
    # The budget holds the tensor's extent (8 bytes an element for BYTES' references), an empty tensor's
    # as if its empty axes were 1: the reference's kernels take one in O(1), but ONNX Runtime's
    # InstanceNormalization, BatchNormalization, Trilu and Scan loop over the other axes of a [2**40, 0]
    # input for hours, holding a thread no signal can stop.
    _budget(extent * (8 if datatype == "BYTES" else _DATATYPES[datatype].itemsize),
            f"{where} (empty axes counted as 1)" if 0 in shape else where)
    return math.prod(shape)


def _budget(nbytes: int, where: str) -> None:
    try:
        check_allocation(nbytes, where)
    except BudgetExceededError as exc:
        raise ProtocolError(str(exc), status=413) from None


def _binary_tensor(data: bytes, datatype: str, shape: tuple[int, ...], spec: TensorSpec, where: str) -> np.ndarray:
    count = _count(shape, datatype, where)
    if datatype == "BYTES":
        return _bytes_elements(data, count, shape, spec, where)
    dtype = _DATATYPES[datatype]
    if len(data) != count * dtype.itemsize:
        raise ProtocolError(f"{where}.parameters.binary_data_size: {len(data)} bytes, but {datatype}{list(shape)} "
                            f"is {count * dtype.itemsize} bytes")
    array = np.frombuffer(data, dtype=dtype.newbyteorder("<")).reshape(shape)
    if datatype == "BOOL" and count and int(np.frombuffer(data, np.uint8).max()) > 1:
        raise ProtocolError(f"{where}: a BOOL element is a byte 0 or 1")
    # Native byte order, writable and owned: kernels and digests see an ordinary array.
    return array.astype(dtype, copy=True)


def _bytes_elements(data: bytes, count: int, shape: tuple[int, ...], spec: TensorSpec, where: str) -> np.ndarray:
    if count > len(data) // 4:  # every element takes at least its 4-byte length
        raise ProtocolError(f"{where}: {len(data)} bytes cannot hold {count} BYTES elements (4-byte length each)")
    items: list[Any] = []
    offset = 0
    for index in range(count):
        if len(data) - offset < 4:
            raise ProtocolError(f"{where}: BYTES element {index} has no 4-byte length (binary data ends)")
        (length,) = struct.unpack_from("<I", data, offset)
        offset += 4
        if length > len(data) - offset:
            raise ProtocolError(f"{where}: BYTES element {index} declares {length} bytes, {len(data) - offset} are left")
        items.append(_element(data[offset : offset + length], spec, f"{where}: BYTES element {index}"))
        offset += length
    if offset != len(data):
        raise ProtocolError(f"{where}: {len(data) - offset} bytes after the last of {count} BYTES elements")
    array = np.empty(count, dtype=object)
    array[:] = items
    return array.reshape(shape)


def _element(raw: bytes, spec: TensorSpec, where: str) -> Any:
    """A BYTES element as the model takes it: ONNX string tensors hold UTF-8 text."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"{where} is not UTF-8 (the model's string input holds text)") from None


def _json_tensor(data: Any, datatype: str, shape: tuple[int, ...], spec: TensorSpec, where: str) -> np.ndarray:
    count = _count(shape, datatype, where)
    dtype = _DATATYPES[datatype]
    _budget(count * (8 if datatype == "BYTES" else max(8, dtype.itemsize)), where)
    if not isinstance(data, list):
        if count == 1 and len(shape) == 0 and not isinstance(data, dict):
            data = [data]  # a scalar may be given bare
        else:
            raise ProtocolError(f"{where}.data: must be an array of {count} elements")
    if datatype == "BYTES":
        flat = _flatten(data, where)
        if len(flat) != count:
            raise ProtocolError(f"{where}.data: {len(flat)} elements, but shape {list(shape)} needs {count}")
        if not all(isinstance(item, str) for item in flat):
            raise ProtocolError(f"{where}.data: BYTES elements in JSON must be strings")
        array = np.empty(count, dtype=object)
        array[:] = flat
        return array.reshape(shape)
    try:
        parsed = np.array(data)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise ProtocolError(f"{where}.data: not an array of {datatype} numbers ({' '.join(str(exc).split())[:120]})") from None
    if parsed.size != count:
        raise ProtocolError(f"{where}.data: {parsed.size} elements, but shape {list(shape)} needs {count}")
    if parsed.ndim > 1 and tuple(parsed.shape) != shape:
        raise ProtocolError(f"{where}.data: nested as {list(parsed.shape)}, the shape says {list(shape)}")
    return _typed(parsed, datatype, dtype, where).reshape(shape)


def _flatten(data: list[Any], where: str) -> list[Any]:
    """The elements of nested arrays in row-major order (iteratively: no recursion on outside data)."""
    flat: list[Any] = []
    stack: list[Any] = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                if len(stack) >= MAX_RANK:
                    raise ProtocolError(f"{where}.data: nested deeper than {MAX_RANK} levels")
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def _typed(parsed: np.ndarray, datatype: str, dtype: np.dtype[Any], where: str) -> np.ndarray:
    kind = parsed.dtype.kind
    if parsed.size == 0:
        return np.zeros(parsed.shape, dtype=dtype)
    if datatype == "BOOL":
        if kind != "b":
            raise ProtocolError(f"{where}.data: BOOL elements must be true or false")
        return parsed.astype(np.bool_)
    if dtype.kind in "iu":
        if kind not in "iu":
            raise ProtocolError(f"{where}.data: {datatype} elements must be integers")
        info = np.iinfo(dtype)
        low, high = int(parsed.min()), int(parsed.max())
        if low < info.min or high > info.max:
            raise ProtocolError(f"{where}.data: element {low if low < info.min else high} is out of {datatype}'s range")
        return parsed.astype(dtype)
    if kind not in "iuf":
        raise ProtocolError(f"{where}.data: {datatype} elements must be numbers")
    with np.errstate(over="ignore"):
        return parsed.astype(dtype)


def _requested_outputs(document: Mapping[str, Any], outputs: Mapping[str, TensorSpec]) -> list[RequestedOutput] | None:
    raw = document.get("outputs")
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) > MAX_TENSORS:
        raise ProtocolError("outputs: must be an array of requested outputs")
    requested: list[RequestedOutput] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        where = f"outputs[{i}]"
        obj = _object(item, where)
        _only(obj, ("name", "parameters"), where)
        name = _name(obj.get("name"), f"{where}.name")
        if name not in outputs:
            raise ProtocolError(f"{where}.name: unknown output {name[:80]!r}; the model's outputs are: {', '.join(outputs)}")
        if name in seen:
            raise ProtocolError(f"{where}.name: output {name[:80]!r} requested twice")
        seen.add(name)
        parameters = _parameters(obj, where)
        binary = parameters.get("binary_data", None)
        if binary is not None and not isinstance(binary, bool):
            raise ProtocolError(f"{where}.parameters.binary_data: must be a boolean")
        classification = parameters.get("classification", 0)
        if classification not in (0, None, False):
            raise ProtocolError(f"{where}.parameters.classification: the classification extension is not supported")
        requested.append(RequestedOutput(name, binary))
    return requested


# -- responses ------------------------------------------------------------------------------------
def _wanted(request: InferenceRequest, specs: Mapping[str, TensorSpec]) -> list[RequestedOutput]:
    return request.outputs if request.outputs is not None else [RequestedOutput(n, None) for n in specs]


def declared_response_bytes(request: InferenceRequest, inputs: Mapping[str, TensorSpec],
                            outputs: Mapping[str, TensorSpec]) -> int:
    """The bytes the requested outputs take at least, known before the run: each output whose
    declared shape is fixed once the request's sizes are put in for the named axes of the inputs
    (``batch``, ``sequence``), at its element size; an output of any other shape counts 0 here and
    is measured once computed (:func:`encode_response`)."""
    sizes: dict[str, int] = {}
    for name, spec in inputs.items():
        value = request.inputs.get(name)
        if spec.axes is not None and value is not None and value.ndim == len(spec.axes):
            for axis, size in zip(spec.axes, value.shape, strict=True):
                if isinstance(axis, str):
                    sizes.setdefault(axis, int(size))
    total = 0
    for item in _wanted(request, outputs):
        spec = outputs[item.name]
        if spec.axes is None or spec.dtype is None or spec.dtype.kind in "OUSV":
            continue
        extents = [a if isinstance(a, int) and a >= 0 else sizes.get(a) if isinstance(a, str) else None
                   for a in spec.axes]
        if all(e is not None for e in extents):
            total += math.prod(e for e in extents if e is not None) * spec.dtype.itemsize
    return total


def _response_limit(nbytes: int, max_bytes: int | None, measured: str) -> None:
    if max_bytes is not None and nbytes > max_bytes:
        raise ProtocolError(f"response: {measured} {nbytes} bytes, more than the server sends ({max_bytes}; "
                            "see --max-response)", status=413)


@dataclass
class EncodedResponse:
    """A response body in two parts around the ledger index, known only once the record is durable."""

    head: bytes
    tail: bytes
    binary_header_length: int | None  # the JSON's length minus the index digits, when binary follows

    def body(self, index: int) -> tuple[bytes, dict[str, str]]:
        digits = str(index).encode("ascii")
        headers = {}
        if self.binary_header_length is not None:
            headers[HEADER_LENGTH] = str(self.binary_header_length + len(digits))
        return b"".join((self.head, digits, self.tail)), headers


def encode_response(
    model_name: str,
    model_version: str,
    request: InferenceRequest,
    values: Mapping[str, Any],
    specs: Mapping[str, TensorSpec],
    parameters: Mapping[str, Any],
    index_parameter: str,
    max_bytes: int | None = None,
) -> EncodedResponse:
    """The inference response for ``values`` (every output the model computed); ``parameters`` go in
    the response's parameters, followed by ``index_parameter`` whose value is filled in later. A
    response over ``max_bytes`` is a ProtocolError (413), found before it is encoded where the
    element counts show it (every element takes a byte at least, in binary as in JSON)."""
    wanted = _wanted(request, specs)
    arrays = {item.name: np.asarray(values[item.name]) for item in wanted}
    _response_limit(sum(a.size for a in arrays.values()), max_bytes, "the outputs take at least")
    outputs: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    plain = True  # every float finite: orjson's fast path applies
    for item in wanted:
        value = arrays[item.name]
        datatype = datatype_of(value.dtype) or "BYTES"
        binary = request.binary_default if item.binary is None else item.binary
        entry: dict[str, Any] = {"name": item.name, "datatype": datatype, "shape": [int(d) for d in value.shape]}
        strings = _strings(value) if datatype == "BYTES" and not binary else None
        if datatype in _BINARY_ONLY or (datatype == "BYTES" and not binary and strings is None):
            binary = True  # no JSON form (bfloat16; bytes that are not UTF-8): sent as binary, as the client reads
        if binary:
            blob = _bytes_blob(value) if datatype == "BYTES" else np.ascontiguousarray(value, value.dtype.newbyteorder("<")).tobytes()
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        elif strings is not None:
            entry["data"] = strings
        else:
            flat = value.reshape(-1)
            if flat.dtype.kind == "f" and flat.size and not np.isfinite(flat).all():
                plain = False
                entry["data"] = flat.tolist()
            else:
                entry["data"] = flat
        outputs.append(entry)
    document: dict[str, Any] = {"model_name": model_name, "model_version": model_version}
    if request.id is not None:
        document["id"] = request.id
    document["outputs"] = outputs
    document["parameters"] = {**parameters, index_parameter: 0}
    if plain:
        text = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
    else:  # NaN and Infinity as Triton writes them (its clients read them with Python's json)
        text = json.dumps(document, default=_plain, separators=(",", ":"), allow_nan=True).encode("utf-8")
    # The index placeholder is the last parameter, the last member of the document: "...":0}}
    marker = orjson.dumps(index_parameter) + b":0}}"
    assert text.endswith(marker)
    head = text[: len(text) - 3]
    tail = b"}}" + b"".join(blobs)
    _response_limit(len(head) + len(tail) + 20, max_bytes, "encoded, the outputs take")  # 20: the index's digits
    return EncodedResponse(head, tail, len(text) - 1 if blobs else None)


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(type(value).__name__)


def _strings(value: np.ndarray) -> list[str] | None:
    items = []
    for item in value.reshape(-1).tolist():
        if isinstance(item, bytes):
            try:
                item = item.decode("utf-8")
            except UnicodeDecodeError:
                return None
        items.append(str(item))
    return items


def _bytes_blob(value: np.ndarray) -> bytes:
    parts = []
    for item in value.reshape(-1).tolist():
        raw = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(raw)))
        parts.append(raw)
    return b"".join(parts)


def error_body(message: str) -> bytes:
    """The protocol's error object, ``{"error": "..."}``."""
    return orjson.dumps({"error": message})
