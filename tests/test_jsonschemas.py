"""Schema patterns read as ECMA-262 reads them, so the Go verifier and sealtrace agree on every string."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
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


def _mutations(value: Any) -> Iterator[Any]:
    """``value`` with one field at a time changed in type or form, or removed, or an unknown one added."""
    if isinstance(value, dict):
        yield {**value, "unexpected": 1}
        for key, item in value.items():
            yield {k: v for k, v in value.items() if k != key}
            for changed in (None, True, -1, 1.5, "x", "0" * 64 + "\n", [], {}):
                yield {**value, key: changed}
            for inner in _mutations(item):
                yield {**value, key: inner}
    elif isinstance(value, list) and value:
        yield value[1:]
        yield [*value, value[-1]]
        for inner in _mutations(value[0]):
            yield [inner, *value[1:]]


def test_both_validators_decide_every_mutated_record_alike(tmp_path: Path) -> None:
    """jsonschema-rs decides, jsonschema words the failure: on every one-field change of a real log's
    records they must agree, and a refusal always has words."""
    from sealtrace import Session
    from sealtrace.audit import audited_run
    from sealtrace.audit.log import _validators
    from sealtrace.jsonschemas import _validator_class
    from tests.conftest import mlp_model

    log = tmp_path / "run.jsonl"
    audited_run(Session(mlp_model()), {"x": np.ones((1, 4), np.float32)}, audit=log)
    checked = refused = 0
    for line in log.read_text().splitlines():
        record = json.loads(line)
        check = _validators()[record["type"]]
        python = _validator_class()(check.schema)
        for mutated in _mutations(record):
            valid = check.is_valid(mutated)
            assert valid == python.is_valid(mutated), mutated
            assert valid or list(check.iter_errors(mutated))
            checked, refused = checked + 1, refused + (not valid)
    assert checked > 1000 and 0 < refused < checked
