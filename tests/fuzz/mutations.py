"""Hypothesis strategies that mutate a valid seed the way an attacker or a broken disk would.

Three families, each drawing 1-4 edits: raw bytes (flips, overwrites, truncations, insertions,
deletions, duplicated ranges), JSON (any value of the document replaced by a hostile one: wrong
types, NaN, huge or negative numbers, long strings, deep nesting; then re-encoded canonically or
not), and lines (JSON Lines and VNNLIB: lines dropped, duplicated, swapped, or edited as JSON).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from sealtrace.digest import canonical_json

Mutation = Callable[[bytes], st.SearchStrategy[bytes]]

# Numbers that break code that trusts them: sizes, offsets, counts, shapes and versions.
HOSTILE_NUMBERS = [0, -1, 1, 2, 3, 63, 64, 65, 255, 256, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63,
                   2**64, 10**12, 10**100, -(2**63)]
HOSTILE_STRINGS = ["", " ", "..", "../../etc/passwd", "/abs/path", "a\\b", "\x00", "\x1b[31m", "é", "\ud7ff",
                   "0" * 64, "f" * 63, "x" * 70_000, "NaN", "null", "1e309", "{}", "%s%n"]


class Deep:
    """Nesting too deep to build as Python lists: written into the encoded bytes directly."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.placeholder = f"\u0001deep{id(self)}\u0001"


@st.composite
def hostile_values(draw: st.DrawFn) -> Any:
    """A JSON-able (or nearly: NaN, Infinity) value that a reader must refuse or handle."""
    kind = draw(st.sampled_from(["null", "bool", "number", "float", "string", "list", "object", "deep"]))
    if kind == "null":
        return None
    if kind == "bool":
        return draw(st.booleans())
    if kind == "number":
        return draw(st.sampled_from(HOSTILE_NUMBERS) | st.integers(-(2**70), 2**70))
    if kind == "float":
        return draw(st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 0.5, 1e308, 5e-324, 2.0**63]))
    if kind == "string":
        return draw(st.sampled_from(HOSTILE_STRINGS) | st.text(max_size=20))
    if kind == "list":
        return draw(st.lists(st.sampled_from([0, None, "a", -1, 1.5]), max_size=4))
    if kind == "object":
        return draw(st.dictionaries(st.sampled_from(["", "a", "format", "name", "sha256"]),
                                    st.sampled_from([0, None, "a"]), max_size=3))
    return Deep(draw(st.sampled_from([64, 1_000, 100_000])))


@st.composite
def byte_edits(draw: st.DrawFn, seed: bytes) -> bytes:
    """``seed`` with 1-4 raw byte edits."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete", "duplicate", "append"]))
        n = len(data)
        at = draw(st.integers(0, max(0, n - 1)))
        if op == "flip" and n:
            data[at] ^= draw(st.sampled_from([0x01, 0x02, 0x10, 0x20, 0x80, 0xFF]))
        elif op == "set" and n:
            data[at] = draw(st.sampled_from([0x00, 0x22, 0x2C, 0x30, 0x39, 0x5B, 0x7B, 0x7D, 0xFF]) | st.integers(0, 255))
        elif op == "truncate":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16) | st.sampled_from([b"\0" * 64, b"[" * 512, b"\n"]))
        elif op == "delete" and n:
            del data[at : at + draw(st.integers(1, 64))]
        elif op == "duplicate" and n:
            chunk = bytes(data[at : at + draw(st.integers(1, 256))])
            data[at:at] = chunk
        elif op == "append":
            data += draw(st.binary(min_size=1, max_size=64))
    return bytes(data)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside a JSON document (the root included)."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found.extend(_paths(item, (*prefix, i)))
    return found


def _replace(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return document


def _encode(draw: st.DrawFn, document: Any) -> bytes:
    deep: list[Deep] = []

    def placeholders(value: Any) -> Any:
        if isinstance(value, Deep):
            deep.append(value)
            return value.placeholder
        if isinstance(value, dict):
            return {k: placeholders(v) for k, v in value.items()}
        if isinstance(value, list):
            return [placeholders(v) for v in value]
        return value

    document = placeholders(document)
    style = draw(st.sampled_from(["canonical", "canonical", "spaced", "unsorted"]))
    try:
        if style != "canonical":
            raise ValueError(style)
        data = canonical_json(document)
    except ValueError:  # NaN and Infinity: canonical JSON refuses them, plain JSON writes them
        data = json.dumps(document, indent=1 if style == "spaced" else None, sort_keys=style != "unsorted").encode()
    for value in deep:
        data = data.replace(json.dumps(value.placeholder).encode(), b"[" * value.depth + b"0" + b"]" * value.depth)
    return data


# Deeper documents are edited as bytes. Whether json.loads of a deep document raises RecursionError
# depends on the caller's stack depth, which differs between hypothesis's runs of one choice
# sequence; a strategy that branches on it draws inconsistently (FlakyStrategyDefinition).
MAX_PARSED_NESTING = 200


def parse_json(data: bytes) -> Any | None:
    """``data`` parsed as JSON, or None where it is not JSON or nests deeper than MAX_PARSED_NESTING
    (decided from the bytes alone, so the same bytes always give the same answer)."""
    depth = deepest = 0
    for byte in data:
        if byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    if deepest > MAX_PARSED_NESTING:  # brackets inside strings count too: an overestimate, still deterministic
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


@st.composite
def json_document_edits(draw: st.DrawFn, seed: bytes) -> bytes:
    """``seed`` (one JSON document) with 1-3 of its values replaced by hostile ones, re-encoded."""
    document = parse_json(seed)
    if document is None:  # an earlier edit broke it: edit bytes instead
        return draw(byte_edits(seed))
    paths = _paths(document)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        try:
            document = _replace(document, path, draw(hostile_values()))
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed the parent
        paths = _paths(document) if len(paths) < 5_000 else paths
    return _encode(draw, document)


@st.composite
def json_edits(draw: st.DrawFn, seed: bytes) -> bytes:
    """Structural JSON edits most of the time, raw byte edits otherwise."""
    if draw(st.integers(0, 3)):
        return draw(json_document_edits(seed))
    return draw(byte_edits(seed))


@st.composite
def line_edits(draw: st.DrawFn, seed: bytes) -> bytes:
    """``seed`` (lines; JSON Lines or text) with lines dropped, duplicated, swapped or edited."""
    lines = seed.split(b"\n")
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["drop", "duplicate", "swap", "json", "bytes"]))
        i = draw(st.integers(0, len(lines) - 1))
        if op == "drop" and len(lines) > 1:
            del lines[i]
        elif op == "duplicate":
            lines.insert(draw(st.integers(0, len(lines))), lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "json":
            edit = json_document_edits if parse_json(lines[i]) is not None else byte_edits
            lines[i] = draw(edit(lines[i]))
        else:
            lines[i] = draw(byte_edits(lines[i]))
    return b"\n".join(lines)


@st.composite
def text_token_edits(draw: st.DrawFn, seed: bytes) -> bytes:
    """``seed`` (S-expression text such as VNNLIB) with tokens replaced or parentheses unbalanced."""
    lines = [line.replace("(", " ( ").replace(")", " ) ").split() for line in seed.decode("utf-8").splitlines()]
    slots = [(i, j) for i, line in enumerate(lines) for j in range(len(line))]
    for _ in range(draw(st.integers(1, 4))):
        i, j = draw(st.sampled_from(slots))
        lines[i][j] = draw(st.sampled_from([
            "(", ")", "1e999999", "-0", "1/0", "X_99999999999", "Y_-1", "X_0", "Y_0", "nan", "inf", "or", "and",
            "assert", "declare-const", "Real", "Int", "<=", ">", "*", "/", "0", "(" * 10_000, "1" * 5_000, "\0", ";",
        ]))
    result = "\n".join(" ".join(line) for line in lines).encode("utf-8")
    return draw(byte_edits(result)) if draw(st.booleans()) else result


@st.composite
def npy_header_edits(draw: st.DrawFn, seed: bytes) -> bytes:
    """A ``.npy`` with a hostile header (shape, dtype, order) over the seed's data, or byte edits."""
    if draw(st.booleans()):
        return draw(byte_edits(seed))
    shape = draw(st.sampled_from([(), (0,), (10**12,), (2**62, 4), (-1,), (1, 2), (2, 1), (3,), (2**31, 2**31)]))
    descr = draw(st.sampled_from(["<f4", "<f8", "|O", "<i8", "|V8", "<U4", "|b1", ">f4", "<c16", "[('a','<f4')]"]))
    order = draw(st.sampled_from(["False", "True", "None", "1"]))
    header = f"{{'descr': {descr if descr.startswith('[') else repr(descr)}, 'fortran_order': {order}, 'shape': {shape}, }}"
    header += " " * (-(len(header) + 11) % 64) + "\n"
    head = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()
    data_start = seed.index(b"\n", 10) + 1 if b"\n" in seed[10:] else len(seed)
    return head + seed[data_start:]
