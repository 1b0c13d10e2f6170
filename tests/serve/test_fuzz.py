"""The API fuzzed from its own OpenAPI schema (schemathesis): whatever the generated requests hold,
valid by the schema or not, the server never answers 5xx, and a request it refuses appends nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from tests.serve.conftest import serving

EXAMPLES = 40  # per operation: bounded, so the whole run stays within seconds


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_no_5xx_from_generated_requests(tmp_path: Path, containers: dict[str, Path], keys: Any, mode: str) -> None:
    with serving(tmp_path, [containers["tiny"], containers["typed"]], keys, audit="io") as client:
        app = client.app
        schema = schemathesis.openapi.from_asgi("/openapi.json", app)
        schema.config.generation.update(modes=[schemathesis.GenerationMode(mode)])
        operations = [result.ok() for result in schema.get_all_operations()]
        assert any(op.path == "/v2/models/{name}/infer" for op in operations)
        ledger = client.service.ledger
        failures: list[str] = []

        for operation in operations:
            strategy = operation.as_strategy()

            @given(case=strategy)
            @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))
            def check(case: Any) -> None:
                before = ledger.size
                response = case.call()
                if response.status_code >= 500:
                    failures.append(f"{case.operation.method.upper()} {case.operation.path}: {response.status_code} "
                                    f"{response.text[:200]} for {case.path_parameters} {str(case.body)[:200]}")
                if response.status_code != 200 and case.operation.method == "post":
                    assert ledger.size == before
                if response.status_code >= 400:
                    assert "error" in response.json()

            check()
        assert not failures, failures[:5]


HTTP_EXAMPLES = 300  # bounded: seconds; `make fuzz` sends 100,000 (benchmarks/fuzz_http.py)


def test_generated_bodies_against_a_live_server(tmp_path: Path) -> None:
    """tests/fuzz/http.py: a 200 or a 4xx naming the problem, never a 5xx; one record per 200;
    health answers throughout; bounded memory."""
    from tests.fuzz.http import fuzz_http, live_server

    with live_server(tmp_path) as (url, pid, _):
        tally = fuzz_http(url, pid, HTTP_EXAMPLES, random_seed=27)
    shown = "\n".join(f"{problem}: {request.model} {request.headers} {request.body[:300]!r}"
                      for problem, request in tally.violations[:5])
    assert not tally.violations, f"{len(tally.violations)} violations in {tally.requests} requests:\n{shown}"
    assert tally.requests >= HTTP_EXAMPLES // 2 and tally.statuses[200] > 0 and tally.statuses[400] > 0, tally.statuses
