"""The field checks of parsed outside JSON: what an integer, a string and an object's keys must be.

Each reader (container headers, binding records, ledger records) words its own errors; what a
field must be is said once, here. A digest field is :func:`sealtrace.digest.is_hex_digest`.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any

MAX_INT64 = (1 << 63) - 1


def is_integer(value: Any, low: int = 0, high: int = MAX_INT64) -> bool:
    """Whether ``value`` is an integer in [low, high]: JSON ``true`` is not one, though Python's
    bool is an int."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def is_text(value: Any, limit: int) -> bool:
    """Whether ``value`` is a string of at most ``limit`` characters."""
    return isinstance(value, str) and len(value) <= limit


def missing_and_unknown(
    value: dict[str, Any], required: Set[str], optional: Set[str] = frozenset()
) -> tuple[list[str], list[str]]:
    """The sorted required keys ``value`` lacks and the sorted keys it has beyond ``required`` and
    ``optional``: both empty when its keys are as the format says."""
    keys = value.keys()
    return sorted(required - keys), sorted(keys - required - optional)
