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


# Measured with `sealtrace conformance --backend onnxruntime` (onnx 1.23.2, onnxruntime 1.31.1):
# ONNX Runtime passes 1398 of the regenerated cases. Every case the reference backend claims must
# pass (test_node_case), so the claimed count is what we hold against that figure.
ONNXRUNTIME_PASSES = 1398


def test_claimed_cases_at_least_onnxruntimes_passes() -> None:
    from sealtrace.errors import SealtraceError, UnsupportedError
    from sealtrace.plan import build_plan

    claimed = 0
    for case in CASES:
        if case.name in EXCLUDED:
            continue
        try:
            build_plan(case.model)
        except UnsupportedError:
            continue
        except SealtraceError:
            pass  # a plan error on a claimed op is a failure that test_node_case reports
        claimed += 1
    assert claimed >= ONNXRUNTIME_PASSES, f"only {claimed} cases claimed"


@pytest.fixture
def suite_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI regenerates the suite on each call (seconds); these tests reuse one regeneration."""
    import onnx.backend.test.case.node as node_cases

    if not _RAW:
        _RAW.extend(node_cases.collect_testcases())
    monkeypatch.setattr(node_cases, "collect_testcases", lambda: list(_RAW))


_RAW: list = []


def test_unknown_op_names_are_refused_with_close_names(
    suite_once: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from sealtrace.cli import main
    from sealtrace.conformance.runner import UnknownOpError

    with pytest.raises(UnknownOpError, match=r"'Softmx' is not an ONNX operator \(did you mean Softmax"):
        collect_cases(["Relu", "Softmx"])
    assert {c.op_type for c in collect_cases(["relu"])} == {"Relu"}  # names match case-insensitively
    # Was exit 0 with a table of zeros: a filter that selects no case is not a pass.
    assert main(["conformance", "--ops", "NoSuchOp"]) == 2
    err = capsys.readouterr().err
    assert err == "sealtrace: error: --ops: 'NoSuchOp' is not an ONNX operator; nothing would run\n"
    assert main(["conformance", "--ops", "Relu,Conv2d"]) == 2
    assert "'Conv2d' is not an ONNX operator (did you mean Conv" in capsys.readouterr().err
    assert main(["conformance", "--ops", ","]) == 2
    assert "no operator named" in capsys.readouterr().err
    assert main(["conformance", "--ops", "Relu"]) == 0


@pytest.mark.parametrize("status", ["failed", "unsupported"])
@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_conformance_exit_status_with_ops(
    suite_once: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], status: str, as_json: bool
) -> None:
    from sealtrace.cli import main
    from sealtrace.conformance import runner

    def judged(case: NodeCase, _prepare: object) -> runner.CaseResult:
        return runner.CaseResult(case.name, case.op_type, status, "as this test says")

    monkeypatch.setattr(runner, "run_case", judged)
    # --json returned before the verdict: failures exited 0. All unsupported: nothing checked, exit 1.
    assert main(["conformance", "--ops", "Relu", *(["--json"] if as_json else [])]) == 1
    err = capsys.readouterr().err
    n = len(runner.collect_cases(["Relu"]))
    expected = f"{n} case(s) failed" if status == "failed" else f"none of the {n} selected case(s) ran on reference"
    assert err.startswith(f"sealtrace: error: {expected}") and err.count("\n") == 1
