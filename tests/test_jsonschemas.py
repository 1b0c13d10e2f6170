"""Schema patterns read as ECMA-262 reads them, so the Go verifier and sealtrace agree on every string."""

from __future__ import annotations

import pytest

from sealtrace.jsonschemas import load_schema, validator


@pytest.mark.parametrize(
    ("pattern", "text", "ok"),
    [
        ("^[0-9a-f]{4}$", "beef", True),
        ("^[0-9a-f]{4}$", "beef\n", False),  # Python's own $ matches before a final newline
        ("^(?!.*(^|/)\\.{1,2}(/|$))[a-z./]+$", "a/b", True),
        ("^(?!.*(^|/)\\.{1,2}(/|$))[a-z./]+$", "a/..", False),
        ("^[$a]+$", "$a$", True),  # a $ inside a class is a character
    ],
)
def test_patterns_anchor_at_the_end_of_the_string(pattern: str, text: str, ok: bool) -> None:
    check = validator({"type": "string", "pattern": pattern})
    assert check.is_valid(text) is ok


def test_a_digest_with_a_newline_is_refused_by_the_audit_schema() -> None:
    schema = load_schema("audit-log.schema.json")
    hex64 = validator({"$schema": schema["$schema"], **schema["$defs"]["hex64"]})
    assert hex64.is_valid("0" * 64) and not hex64.is_valid("0" * 64 + "\n")
