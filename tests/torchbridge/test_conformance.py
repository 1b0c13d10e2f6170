"""ONNX's node test suite on the torch translations, step by step (backend) and as an fx module.

Every case the reference interpreter passes must pass on torch too, unless it is one of the torch
bridge's documented exclusions (types torch has no dtype for: 2/4-bit integers, float4), each
declared with its reason beside the translations (``CONFORMANCE_EXCLUSIONS``, gathered by
``sealtrace.torchbridge.conformance_exclusions``), as the reference declares its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from sealtrace.backends.torch import TorchBackend  # noqa: E402
from sealtrace.conformance.runner import CaseResult, NodeCase, collect_cases, reference_runner, run_case  # noqa: E402
from sealtrace.plan import build_plan  # noqa: E402
from sealtrace.torchbridge import conformance_exclusions, to_torch  # noqa: E402
from sealtrace.torchops.dtypes import from_numpy, to_numpy  # noqa: E402
from sealtrace.torchops.reference_step import is_string_array  # noqa: E402
from sealtrace.torchops.steps import check_supported  # noqa: E402

EXCLUDED = conformance_exclusions()


def _backend_runner(model: Any) -> Callable[[Any, list[Any]], list[Any]]:
    plan = build_plan(model)
    check_supported(plan)
    backend = TorchBackend()

    def run(_model: Any, inputs: list[Any]) -> list[Any]:
        out = backend.run(plan, {i.name: v for i, v in zip(plan.inputs, inputs, strict=False)})
        return [out[n] for n in plan.output_names]

    return run


def _module_runner(model: Any) -> Callable[[Any, list[Any]], list[Any]]:
    plan = build_plan(model)
    check_supported(plan)
    module = to_torch(plan)

    def tensor(value: Any) -> Any:
        if isinstance(value, list):  # a sequence
            return [tensor(v) for v in value]
        if value is None or is_string_array(value):  # strings are fed as NumPy object arrays
            return value
        return from_numpy(np.asarray(value))

    def run(_model: Any, inputs: list[Any]) -> list[Any]:
        feeds = {i.name: v for i, v in zip(plan.inputs, inputs, strict=False)}
        with torch.no_grad():
            result = module(*(tensor(feeds[n]) for n in module.input_names))
        return [to_numpy(r) for r in (result if isinstance(result, tuple) else (result,))]

    return run


@pytest.fixture(scope="module")
def suite() -> tuple[list[NodeCase], dict[str, CaseResult]]:
    """The regenerated cases and the reference backend's result on each (run once per module)."""
    cases = collect_cases(None)
    prepare = reference_runner()
    return cases, {case.name: run_case(case, prepare) for case in cases}


@pytest.mark.slow
@pytest.mark.parametrize("runner", [_backend_runner, _module_runner], ids=["backend", "module"])
def test_every_case_the_reference_passes_passes_on_torch(
    runner: Callable[[Any], Any], suite: tuple[list[NodeCase], dict[str, CaseResult]]
) -> None:
    cases, reference = suite
    claimed = [case for case in cases if reference[case.name].status == "passed" and case.name not in EXCLUDED]
    results = [run_case(case, runner) for case in claimed]
    failing = [(r.name, r.status, r.message[:200]) for r in results if r.status != "passed"]
    assert not failing, failing[:20]
    reference_passed = sum(r.status == "passed" for r in reference.values())
    excluded_passing_on_reference = sum(reference[name].status == "passed" for name in EXCLUDED if name in reference)
    assert len(results) == reference_passed - excluded_passing_on_reference
    assert len(results) >= 1790, len(results)  # guards against the suite itself shrinking unnoticed


@pytest.mark.slow
def test_exclusions_are_real_dtype_gaps(suite: tuple[list[NodeCase], dict[str, CaseResult]]) -> None:
    cases, reference = suite
    by_name = {case.name: case for case in cases}
    unknown = sorted(set(EXCLUDED) - set(by_name))
    assert not unknown, f"torch exclusions for cases that do not exist: {unknown}"
    assert all(len(reason) > 20 for reason in EXCLUDED.values()), "every exclusion needs a real reason"
    # Only cases the reference passes need excluding (the reference's own exclusions apply already).
    assert all(reference[name].status == "passed" for name in EXCLUDED)
    # An exclusion that torch now passes would hide nothing: it must go.
    stale = [name for name in EXCLUDED if run_case(by_name[name], _backend_runner).status == "passed"]
    assert not stale, f"excluded cases that pass on torch: {stale}"


def test_cli_reports_torch_conformance_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    from sealtrace.cli import main

    assert main(["conformance", "--backend", "torch", "--ops", "SwiGLU,Cast", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["backend"] == "torch"
    assert report["totals"]["failed"] == 0 and report["totals"]["passed"] > 0
    excluded = {case["name"] for case in report["cases"] if case["status"] == "excluded"}
    assert excluded and excluded <= set(EXCLUDED)
