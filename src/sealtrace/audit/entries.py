"""Step records written straight as canonical JSON text, with as little Python per step as can be.

A step record's canonical JSON is mostly the same text on every run: the node's name, op type,
domain, operator version, index, input and output names. :class:`StepTemplate` serializes those
once per Plan step into a format string; a run fills in only what changes (input digests, each
output's entry, the path of a subgraph step, ``prev`` and ``seq``). Each output's entry is made by
:func:`tensor_entry` without a dict or a JSON encoder: the digest, the dtype and shape (serialized
once per dtype and shape), the sample and the statistics, formatted as canonical JSON formats them.

The text is exactly :func:`sealtrace.digest.canonical_json` of the record (tests check it on every
kind of value and on the real models; the verifier rejects any line that is not canonical), and
the tensor digest is exactly :func:`sealtrace.digest.tensor_digest`: the prefix of its encoding
(:func:`sealtrace.digest.tensor_digest_prefix`: domain tag, dtype, rank, shape) is hashed once per
dtype and shape and copied, then the tensor's bytes are added. Anything unusual (non-finite floats in the sample, strings, non-contiguous or
big-endian arrays, sequences) takes the general path through :func:`~sealtrace.audit.records.value_summary`.
"""

from __future__ import annotations

import math
import struct
import sys
from typing import Any

import numpy as np

from sealtrace.audit.records import float_stats, value_summary
from sealtrace.digest import SHA256, canonical_dtype, canonical_json, hasher, tensor_digest_prefix
from sealtrace.plan.model import Step

try:  # Rust: writes a sample of floats far faster than repr, the recorder's largest cost per step
    from orjson import JSONEncodeError as _OrjsonError
    from orjson import dumps as _orjson_dumps
except ImportError:  # pragma: no cover - orjson is a dependency; repr is the definition either way
    _orjson_dumps = None  # type: ignore[assignment]

# An output entry is HEAD + the output's name as JSON + TAIL: "name" sorts between "kind" and
# "sample", so the name (known per step) splits the entry (known per value) in two.
Entry = tuple[str, str, str | None]  # head, tail, digest

_LITTLE = sys.byteorder == "little"
_NAME_SPLIT = '"name":""'

# Per dtype: the JSON of its canonical name.
_DTYPE_JSON: dict[np.dtype[Any], str] = {}
# Per (dtype, shape, algorithm): the shape's JSON and a hash object that has hashed the encoding's prefix.
_PREFIXES: dict[tuple[np.dtype[Any], tuple[int, ...], str], tuple[str, Any]] = {}


def _prefix(dtype: np.dtype[Any], shape: tuple[int, ...], algorithm: str) -> tuple[str, Any]:
    key = (dtype, shape, algorithm)
    found = _PREFIXES.get(key)
    if found is None:
        if dtype not in _DTYPE_JSON:
            _DTYPE_JSON[dtype] = '"' + canonical_dtype(dtype) + '"'
        h = hasher(algorithm)(tensor_digest_prefix(dtype, shape))
        shape_json = "[" + ",".join(str(int(d)) for d in shape) + "]"
        found = (shape_json, h)
        if len(_PREFIXES) < 4096:  # shapes vary with inputs; keep the cache from growing without end
            _PREFIXES[key] = found
    return found


def list_json(values: list[Any]) -> str:
    """Canonical JSON of a list of finite floats and ints (a sample), as ``repr`` writes it.

    orjson writes the same shortest round-trip digits as ``float.__repr__`` and differs only in
    the form of small numbers: ``0.00001`` for repr's ``1e-05`` and ``1e-7`` for ``1e-07``. Its
    text is taken only when it holds neither form; anything else goes through ``repr``.
    """
    if _orjson_dumps is not None:
        try:
            text = _orjson_dumps(values)
        except _OrjsonError:  # pragma: no cover - integers beyond 64 bits: not from an ndarray
            pass
        else:
            if b"e-" not in text and b"0.0000" not in text:
                return text.decode("ascii")
    return repr(values).replace(" ", "")


def _number(value: float) -> str:
    """A float as canonical JSON writes it (float.__repr__; non-finite as strings)."""
    if math.isfinite(value):
        return repr(value)
    return '"nan"' if math.isnan(value) else ('"inf"' if value > 0 else '"-inf"')


def general_entry(value: Any, sample: int, algorithm: str = SHA256) -> Entry:
    """The entry of any value, through the dict form (the reference the fast path must equal)."""
    summary = value_summary(value, sample, algorithm)
    text = canonical_json({**summary, "name": ""}).decode("ascii")
    at = text.index(_NAME_SPLIT)  # the first: no value before "name" can hold the quoted text
    return text[:at] + '"name":', text[at + len(_NAME_SPLIT) :], summary["digest"]


def tensor_entry(value: Any, sample: int, algorithm: str = SHA256) -> Entry:
    """The canonical JSON of a value's record entry, split around its name, and its digest
    (made with ``algorithm``, the log's digest algorithm)."""
    if type(value) is not np.ndarray:
        return general_entry(value, sample, algorithm)
    dtype = value.dtype
    kind = dtype.kind
    contiguous = value.flags.c_contiguous
    if (
        kind not in "fiub"
        or not value.size
        or not _LITTLE
        or dtype.byteorder == ">"
        or value.ndim > 32
        or (not contiguous and value.size < _SMALL)
    ):
        return general_entry(value, sample, algorithm)
    # A view (a Transpose, an Expand) is hashed and sampled from its C-order copy, as the digest's
    # definition and the general path do; its statistics are taken from the view itself, as the
    # general path takes them (a sum's order may follow the memory layout: the same bits).
    view = value
    if not contiguous:
        value = np.ascontiguousarray(value)
    shape_json, prefix = _prefix(dtype, value.shape, algorithm)
    h = prefix.copy()
    # C-contiguous: its bytes are the payload (blake3 takes byte buffers only: a uint8 view)
    h.update(value if kind != "b" and algorithm == SHA256 else value.reshape(-1).view(np.uint8))
    digest = h.hexdigest()
    flat = value.reshape(-1)
    if flat.size < _SMALL:
        small = _small_stats_json(flat.tolist(), kind, dtype.itemsize)
        if small is None:
            return general_entry(view, sample, algorithm)  # non-finite values: rare
        head = flat[:sample].tolist() if sample > 0 else []
        if kind == "b":
            sample_json = "[" + ",".join("true" if v else "false" for v in head) + "]"
        else:
            sample_json = list_json(head)
        stats_json = small
    elif kind == "f":
        head = flat[:sample].tolist() if sample > 0 else []
        stats = float_stats(flat if contiguous else view)
        lo, hi, mean, nan, inf = stats
        if nan or inf:
            return general_entry(view, sample, algorithm)  # a sample may hold non-finite values: rare
        stats_json = (
            f'{{"inf":0,"max":{float(hi)!r},"mean":{_number(mean)},"min":{float(lo)!r},"nan":0}}'  # type: ignore[arg-type]
        )
        sample_json = list_json(head)
    else:
        head = flat[:sample].tolist() if sample > 0 else []
        if not contiguous:
            flat = view
        if kind == "b":
            flat = flat.view(np.uint8)
            sample_json = "[" + ",".join("true" if v else "false" for v in head) + "]"
        else:
            sample_json = list_json(head)
        lo = int(np.minimum.reduce(flat, axis=None))
        hi = int(np.maximum.reduce(flat, axis=None))
        mean = float(np.add.reduce(flat, axis=None, dtype=np.float64)) / flat.size
        stats_json = f'{{"inf":0,"max":{hi},"mean":{_number(mean)},"min":{lo},"nan":0}}'
    return (
        '{"digest":"' + digest + '","dtype":' + _DTYPE_JSON[dtype] + ',"kind":"tensor","name":',
        ',"sample":' + sample_json + ',"shape":' + shape_json + ',"stats":' + stats_json + "}",
        digest,
    )


# Tensors of fewer values than this (NumPy's pairwise summation adds them one by one) get their
# statistics in Python from one tolist(): three ufunc calls cost more than that loop below this size.
_SMALL = 8
_FLOAT32 = struct.Struct("<f")
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _small_stats_json(values: list[Any], kind: str, itemsize: int) -> str | None:
    """The stats JSON of a tensor of fewer than 8 values, bit for bit what :func:`float_stats`
    and the integer reductions give: min and max exact, the sum from 0.0 in order, each partial
    sum rounded to float32 when NumPy accumulates in float32 (float16 and float32 whose sum cannot
    overflow; a float64 sum of two float32 values rounded once to float32 is the float32 sum, as
    53 >= 2 x 24 + 2). None when a value is not finite (the general path counts those)."""
    lo, hi = min(values), max(values)
    total = 0.0
    if kind == "f":
        if not all(map(math.isfinite, values)):
            return None
        if itemsize == 8 or max(-lo, hi) * len(values) >= _FLOAT32_MAX:
            for v in values:
                total += v
        else:
            pack, unpack = _FLOAT32.pack, _FLOAT32.unpack
            for v in values:
                total = unpack(pack(total + v))[0]
        return f'{{"inf":0,"max":{hi!r},"mean":{_number(total / len(values))},"min":{lo!r},"nan":0}}'
    for v in values:
        total += float(v)
    return f'{{"inf":0,"max":{int(hi)},"mean":{_number(total / len(values))},"min":{int(lo)},"nan":0}}'


def _json(value: Any) -> str:
    return canonical_json(value).decode("ascii")


def _escape(text: str) -> str:
    return text.replace("%", "%%")


class StepTemplate:
    """The parts of one Plan step's record that are the same on every run, serialized once.

    ``fmt % (inputs, outputs, path, prev, seq)`` is the record's canonical JSON without its digest.
    """

    __slots__ = ("fmt", "head", "input_names", "inputs", "outputs", "path", "rest")

    def __init__(self, step: Step) -> None:
        # Keys in canonical (sorted) order: domain, inputs, name, op_type, outputs, path, prev,
        # seq, since_version, step, type. The record's own digest is added in front.
        # ``head % (inputs, outputs)`` is the text up to the outputs; ``rest`` the text after seq,
        # so a record whose inputs and outputs are known in advance (a constant step's) is
        # that text + path, prev and seq + rest.
        self.head = (
            '{"domain":' + _escape(_json(step.domain)) + ',"inputs":[%s],"name":' + _escape(_json(step.name))
            + ',"op_type":' + _escape(_json(step.op_type)) + ',"outputs":[%s]'
        )  # fmt: skip
        self.rest = ',"since_version":' + _json(step.since_version) + ',"step":' + _json(step.index) + ',"type":"step"}'
        self.fmt = self.head + ',"path":%s,"prev":"%s","seq":%d' + _escape(self.rest)
        # Per input: (name, the entry's text after its digest, the entry with a null digest).
        self.inputs = tuple(
            (name, '","name":' + _json(name) + "}", '{"digest":null,"name":' + _json(name) + "}")
            for name in step.inputs
        )
        self.input_names = tuple(step.inputs)
        self.outputs = tuple((name, _json(name)) for name in step.outputs)
        self.path = "[]"
