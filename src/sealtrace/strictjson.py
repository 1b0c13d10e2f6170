"""The one JSON reader of outside bytes: what it refuses is said by its caller, never re-written.

Python's ``json.loads`` takes ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON), lets the last of
two equal keys win (two readers could take different values), and, given bytes, guesses UTF-16 or
UTF-32 and skips a byte order mark. :func:`loads_strict` refuses each of these unless its caller
says otherwise, and raises only what ``json.loads`` raises (ValueError, JSONDecodeError among them,
UnicodeDecodeError, RecursionError), so every reader keeps its own typed error and message.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import orjson

from sealtrace.limits import refuse_duplicate_keys


class FloatNotAllowedError(ValueError):
    """A number with a fraction or an exponent, or NaN/Infinity, where only integers may be."""

    def __init__(self, text: str) -> None:
        super().__init__(f"floating-point number {text[:20]!r} not allowed")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _read_constant(name: str) -> float:
    return float(name.replace("Infinity", "inf"))


def _refuse_float(text: str) -> Any:
    raise FloatNotAllowedError(text)


def loads_strict(
    data: bytes | str,
    *,
    floats: bool = True,
    duplicate_keys: bool = False,
    nonfinite: bool = False,
    encoding: Literal["ascii", "utf-8"] | None = None,
    fast: bool = False,
) -> Any:
    """``data`` parsed as JSON; NaN/Infinity and a key given twice are a ValueError.

    - ``floats=False``: a number with a fraction or exponent (NaN and Infinity too) raises
      :class:`FloatNotAllowedError`.
    - ``duplicate_keys=True``: the last of two equal keys wins (a reader that checks canonical
      form afterwards finds such an object anyway).
    - ``nonfinite=True``: NaN, Infinity and -Infinity are read as floats (Triton writes them).
    - ``encoding``: bytes are decoded strictly as that encoding first, and a byte order mark is
      refused; None lets ``json.loads`` detect UTF-8, UTF-16 or UTF-32.
    - ``fast=True``: orjson parses first (integers past 64 bits come back as floats, as orjson
      reads them), the standard parser only what orjson refuses (NaN/Infinity with ``nonfinite``,
      deep nesting: a RecursionError); a string holding a lone surrogate (not Unicode text) is a
      ValueError, as orjson says.
    """
    if fast:
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            value = _loads_standard(data, floats, duplicate_keys, nonfinite, encoding)
            _refuse_lone_surrogates(data, value)
            return value
        if not duplicate_keys:  # orjson lets the last of two equal keys win: look for one in the text
            _refuse_duplicate_keys_in(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
        return value
    return _loads_standard(data, floats, duplicate_keys, nonfinite, encoding)


def _loads_standard(
    data: bytes | str,
    floats: bool,
    duplicate_keys: bool,
    nonfinite: bool,
    encoding: Literal["ascii", "utf-8"] | None,
) -> Any:
    if encoding is not None:
        text = data.decode(encoding) if isinstance(data, bytes) else data
        if text.startswith("\ufeff"):
            raise ValueError("a byte order mark before the JSON text")
        data = text
    if not floats:
        return json.loads(
            data,
            parse_float=_refuse_float,
            parse_constant=_refuse_float,
            object_pairs_hook=None if duplicate_keys else refuse_duplicate_keys,
        )
    return json.loads(
        data,
        parse_constant=_read_constant if nonfinite else _refuse_constant,
        object_pairs_hook=None if duplicate_keys else refuse_duplicate_keys,
    )


# One step over JSON text orjson has already accepted: the bytes up to the next string or brace
# (possessive: no backtracking), then that token; a string followed by a colon is a key.
_STRUCTURE = re.compile(rb'[^"{}]*+("[^"\\]*+(?:\\.[^"\\]*+)*+"(\s*+:)?|[{}])')


def _refuse_duplicate_keys_in(data: bytes) -> None:
    """ValueError when an object of ``data`` (valid JSON) has a key twice, escapes decoded (``"a"``
    and ``"\\u0061"`` are one key). The regular expression skips number arrays at C speed, so a
    tensor of a million numbers costs about what orjson took to parse it."""
    objects: list[set[str]] = []
    for match in _STRUCTURE.finditer(data):
        token = match.group(1)
        if token == b"{":
            objects.append(set())
        elif token == b"}":
            objects.pop()
        elif match.group(2) is not None:
            raw = token[: match.start(2) - match.start(1)]
            key = json.loads(raw) if b"\\" in raw else raw[1:-1].decode("utf-8")
            if key in objects[-1]:
                raise ValueError(f"duplicate key {key[:80]!r}")
            objects[-1].add(key)


# An escaped surrogate, or one encoded in the bytes (json.loads decodes bytes with "surrogatepass").
_SURROGATE = re.compile(rb"\\[uU][dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _refuse_lone_surrogates(data: bytes | str, value: Any) -> None:
    """ValueError when a string of ``value`` holds a surrogate code point on its own (``"\\ud800"``):
    it is no Unicode text, and a writer of UTF-8 (orjson, a database) fails on it later."""
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    if _SURROGATE.search(raw) is None:
        return  # the common case: no surrogate at all, so none can be alone
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=True).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a string holds a lone surrogate (\\ud800-\\udfff without its pair): not Unicode text") from None
