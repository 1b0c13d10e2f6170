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


class Validator:
    """A Draft 2020-12 validator of one schema. jsonschema-rs decides whether an instance conforms
    (its patterns are ECMA-262's, and it checks an audit log record in a hundredth of the time);
    jsonschema, whose ``pattern`` is made to anchor as ECMA-262 does, words what is wrong."""

    def __init__(self, schema: dict[str, Any]) -> None:
        import jsonschema_rs

        self.schema = schema
        self._decide = jsonschema_rs.validator_for(schema)

    def is_valid(self, instance: Any) -> bool:
        try:
            return bool(self._decide.is_valid(instance))
        except ValueError:  # a Python object that is not plain JSON (a str subclass): jsonschema decides
            return bool(_validator_class()(self.schema).is_valid(instance))

    def iter_errors(self, instance: Any) -> Iterator[Any]:
        """The failures of ``instance``: none when it conforms, else at least one."""
        if self.is_valid(instance):
            return
        found = False
        for error in _validator_class()(self.schema).iter_errors(instance):
            found = True
            yield error
        if not found:  # the two disagree: jsonschema-rs's own words, so that a refusal is never silent
            from jsonschema.exceptions import ValidationError

            yield ValidationError(next(iter(self._decide.iter_errors(instance))).message)


    def validate(self, instance: Any) -> None:
        """Raise jsonschema's ValidationError (the best match) unless ``instance`` conforms."""
        from jsonschema.exceptions import best_match

        error = best_match(self.iter_errors(instance))
        if error is not None:
            raise error


def validator(schema: dict[str, Any]) -> Validator:
    """A Draft 2020-12 validator of ``schema`` whose ``pattern`` follows ECMA-262 anchoring."""
    return Validator(schema)
