"""The JSON Schemas of sealtrace's formats (src/sealtrace/schemas/), and validators for them.

One difference between Python's ``re`` and ECMA-262 regular expressions, which JSON Schema's
``pattern`` is defined by, matters to a verifier: Python's ``$`` also matches just before a final
newline, so ``"^[0-9a-f]{64}$"`` would accept a digest with ``"\\n"`` appended, and another
implementation (the Go verifier) would not. The validators here read an anchoring ``$`` as the end
of the string, as ECMA-262 does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any


@cache
def load_schema(file_name: str) -> dict[str, Any]:
    """A schema of src/sealtrace/schemas/ by file name (e.g. ``audit-log.schema.json``)."""
    text = resources.files("sealtrace").joinpath("schemas", file_name).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _ecma(pattern: str) -> re.Pattern[str]:
    # '$' not escaped and not inside a class means end of input in ECMA-262: Python spells it \Z.
    return re.compile(re.sub(r"(?<!\\)\$(?![^\[]*\])", r"\\Z", pattern))


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not _ecma(pattern).search(instance):
        yield ValidationError(f"{instance[:80]!r} does not match {pattern!r}")


@cache
def _validator_class() -> Any:
    import jsonschema

    return jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _pattern})


def validator(schema: dict[str, Any]) -> Any:
    """A Draft 2020-12 validator of ``schema`` whose ``pattern`` follows ECMA-262 anchoring."""
    return _validator_class()(schema)
