"""The JSON Schema is valid and every record sealtrace writes follows it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jsonschema
import numpy as np

from sealtrace.audit.log import audit_schema, read_records
from tests.audit.conftest import loop_model


def test_schema_is_valid_and_logs_follow_it(mlp_log: Path, record_log: Callable[..., Path]) -> None:
    schema = audit_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    loop_log = record_log(loop_model(), {"x": np.array([1.0, np.nan], np.float32)})
    for log in (mlp_log, loop_log):
        for record in read_records(log):
            validator.validate(record)
