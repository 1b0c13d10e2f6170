"""The one JSON reader of outside bytes: what it refuses is said by its caller, never re-written.

Python's ``json.loads`` takes ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON), lets the last of
two equal keys win (two readers could take different values), and, given bytes, guesses UTF-16 or
UTF-32 and skips a byte order mark. :func:`loads_strict` refuses each of these unless its caller
says otherwise, and raises only what ``json.loads`` raises (ValueError, JSONDecodeError among them,
UnicodeDecodeError, RecursionError), so every reader keeps its own typed error and message.
"""

from __future__ import annotations

import json
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
      reads them), the standard parser only what orjson refuses; needs ``duplicate_keys=True``.
    """
    if fast:
        assert duplicate_keys, "orjson lets the last of two equal keys win"
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # NaN/Infinity, lone surrogates, deep nesting: the standard parser decides
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
