"""Run ONNX's node test cases (regenerated with ``collect_testcases()``) against a backend.

Each case is one small model plus input/expected-output data sets. A case passes when every data
set's outputs match the expected ones in dtype, shape and value (``assert_allclose`` with the
case's own rtol/atol, as ONNX's backend test runner does); it is 'unsupported' when the Plan
cannot be built because an operator, version or domain has no kernel; anything else is a failure.
"""

from __future__ import annotations

import difflib
import re
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from sealtrace.errors import InputError, SealtraceError, UnsupportedError

_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


@dataclass(frozen=True)
class CaseResult:
    """The outcome of one node test case."""

    name: str
    op_type: str
    status: str  # 'passed' | 'failed' | 'unsupported' | 'excluded'
    message: str = ""


@dataclass
class ConformanceReport:
    """All case results, with per-op totals."""

    backend: str
    results: list[CaseResult] = field(default_factory=list)

    def totals(self) -> Counter[str]:
        return Counter(r.status for r in self.results)

    def per_op(self) -> dict[str, Counter[str]]:
        table: dict[str, Counter[str]] = {}
        for r in self.results:
            table.setdefault(r.op_type, Counter())[r.status] += 1
        return dict(sorted(table.items()))

    def to_json(self) -> dict[str, Any]:
        totals = self.totals()
        return {
            "format": "sealtrace.conformance.v1",
            "backend": self.backend,
            "onnx_version": onnx.__version__,
            "totals": {k: totals.get(k, 0) for k in ("passed", "failed", "unsupported", "excluded")},
            "ops": {
                op: {k: c.get(k, 0) for k in ("passed", "failed", "unsupported", "excluded")}
                for op, c in self.per_op().items()
            },
            "cases": [
                {"name": r.name, "op_type": r.op_type, "status": r.status, "message": r.message}
                for r in self.results
            ],
        }


@dataclass(frozen=True)
class NodeCase:
    """One regenerated node test case."""

    name: str
    op_type: str
    model: onnx.ModelProto
    data_sets: Sequence[tuple[list[Any], list[Any]]]
    rtol: float
    atol: float


class UnknownOpError(InputError):
    """An operator named in a case filter has no node test case (a typo, or an op the suite lacks)."""


def collect_cases(ops: Iterable[str] | None = None) -> list[NodeCase]:
    """Regenerate the node test suite from the installed onnx; optionally only for ``ops``.

    Op names match case-insensitively. A name that selects no case is refused (with the closest
    names the suite has): a filter that runs nothing must not look like a pass.
    """
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case generators compute inf/nan on purpose
        raw = collect_testcases()
    raw = [c for c in raw if c.model is not None and c.data_sets is not None]
    op_of_base = {c.name: _main_op(c.model) for c in raw if not _EXPANDED.search(c.name)}  # type: ignore[arg-type]
    cases = []
    for c in raw:
        base = _EXPANDED.sub("", c.name)
        op_type = op_of_base.get(base) or _main_op(c.model)  # type: ignore[arg-type]
        cases.append(NodeCase(c.name, op_type, c.model, c.data_sets, c.rtol, c.atol))  # type: ignore[arg-type]
    if ops is not None:
        wanted = {o.lower() for o in ops}
        _check_op_names(list(dict.fromkeys(ops)), {c.op_type for c in cases})
        cases = [c for c in cases if c.op_type.lower() in wanted]
    return sorted(cases, key=lambda c: c.name)


def _check_op_names(names: list[str], known: set[str]) -> None:
    by_lower = {op.lower(): op for op in known}
    problems = []
    for name in names:
        if name.lower() in by_lower:
            continue
        close = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(by_lower[c] for c in close)}?)" if close else ""
        kind = "has no node test case in this onnx" if _is_onnx_op(name) else "is not an ONNX operator"
        problems.append(f"{name!r} {kind}{hint}")
    if problems:
        raise UnknownOpError(f"--ops: {'; '.join(problems)}; nothing would run")


def _is_onnx_op(name: str) -> bool:
    return any(schema.name.lower() == name.lower() for schema in onnx.defs.get_all_schemas())


def _main_op(model: onnx.ModelProto) -> str:
    nodes = model.graph.node
    return nodes[0].op_type if len(nodes) == 1 else (nodes[-1].op_type if nodes else "?")


Runner = Callable[[onnx.ModelProto, list[Any]], list[Any]]


def reference_runner() -> Callable[[onnx.ModelProto], Runner | None]:
    """Factory of per-model run functions on the reference backend."""
    from sealtrace.backends.reference import ReferenceBackend
    from sealtrace.plan import build_plan

    backend = ReferenceBackend()

    def prepare(model: onnx.ModelProto) -> Runner:
        plan = build_plan(model)

        def run(_model: onnx.ModelProto, inputs: list[Any]) -> list[Any]:
            feeds = dict(zip(plan.input_names, inputs, strict=False))
            outputs = backend.run(plan, feeds)
            return [outputs[n] for n in plan.output_names]

        return run

    return prepare


def torch_runner(device: str | None = None, gpu_precision: str | None = None) -> Callable[[onnx.ModelProto], Runner | None]:
    """Factory of per-model run functions on the torch backend (the torch bridge's translations,
    step by step) on ``device`` (default the CPU); a model with an untranslated step is unsupported."""
    from sealtrace.backends import make_backend
    from sealtrace.plan import build_plan
    from sealtrace.torchops.steps import check_supported

    backend = make_backend("torch", device=device, gpu_precision=gpu_precision)

    def prepare(model: onnx.ModelProto) -> Runner:
        plan = build_plan(model)
        check_supported(plan)

        def run(_model: onnx.ModelProto, inputs: list[Any]) -> list[Any]:
            outputs = backend.run(plan, dict(zip(plan.input_names, inputs, strict=False)))
            return [outputs[n] for n in plan.output_names]

        return run

    return prepare


def onnxruntime_runner() -> Callable[[onnx.ModelProto], Runner | None]:
    """Factory of per-model run functions on plain ONNX Runtime (to measure it on the same suite)."""
    import onnxruntime as ort

    def prepare(model: onnx.ModelProto) -> Runner:
        options = ort.SessionOptions()
        options.log_severity_level = 4
        try:
            session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT's load errors mean "not supported"
            raise UnsupportedError([str(exc).splitlines()[0][:200]]) from None
        names = [i.name for i in session.get_inputs()]

        def run(_model: onnx.ModelProto, inputs: list[Any]) -> list[Any]:
            return list(session.run(None, dict(zip(names, inputs, strict=False))))

        return run

    return prepare


def run_case(case: NodeCase, prepare: Callable[[onnx.ModelProto], Any]) -> CaseResult:
    """Run one case; never raises for a backend failure (it becomes the case's status)."""
    try:
        runner = prepare(case.model)
    except UnsupportedError as exc:
        return CaseResult(case.name, case.op_type, "unsupported", str(exc))
    except SealtraceError as exc:
        return CaseResult(case.name, case.op_type, "failed", f"plan: {exc}")
    for index, (inputs, expected) in enumerate(case.data_sets):
        try:
            with np.errstate(all="ignore"):
                outputs = runner(case.model, [to_value(v) for v in inputs])
        except Exception as exc:  # a crash is a failed case, reported with its cause
            return CaseResult(case.name, case.op_type, "failed", f"data set {index}: {type(exc).__name__}: {exc}")
        problem = compare_outputs([to_value(v) for v in expected], outputs, case.rtol, case.atol)
        if problem:
            return CaseResult(case.name, case.op_type, "failed", f"data set {index}: {problem}")
    return CaseResult(case.name, case.op_type, "passed")


def to_value(value: Any) -> Any:
    """A case's input or expected output as the backends take it: arrays (a TensorProto decoded,
    bfloat16 and float8 as ml_dtypes), lists of them for sequences."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [to_value(v) for v in value]
    if value is None or isinstance(value, np.ndarray):
        return value
    return np.asarray(value)


def compare_outputs(expected: list[Any], actual: list[Any], rtol: float, atol: float) -> str | None:
    """None when ``actual`` matches ``expected`` (dtype, shape, values), else what differs."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for i, (want, got) in enumerate(zip(expected, actual, strict=True)):
        problem = _compare_value(want, got, rtol, atol)
        if problem:
            return f"output {i}: {problem}"
    return None


def _compare_value(want: Any, got: Any, rtol: float, atol: float) -> str | None:
    if isinstance(want, list):
        if not isinstance(got, list):
            return f"expected a sequence, got {type(got).__name__}"
        if len(want) != len(got):
            return f"sequence length {len(got)}, expected {len(want)}"
        for w, g in zip(want, got, strict=True):
            problem = _compare_value(w, g, rtol, atol)
            if problem:
                return problem
        return None
    if want is None:
        return None if got is None else f"expected no value, got {type(got).__name__}"
    if not isinstance(got, np.ndarray):
        return f"expected an array, got {type(got).__name__}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if want.dtype == object:
        if not np.array_equal(want, got):
            return "string values differ"
        return None
    try:
        np.testing.assert_allclose(
            _comparable(got),
            _comparable(want),
            rtol=rtol,
            atol=atol,
        )
    except AssertionError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        return "values differ: " + " | ".join(lines[1:4])
    return None


def _comparable(array: np.ndarray) -> np.ndarray:
    """ml_dtypes arrays (bfloat16, float8, int4 ...) are compared as float64."""
    if array.dtype.kind == "V":
        return array.astype(np.float64)
    return array


def run_conformance(
    backend: str = "reference",
    ops: Iterable[str] | None = None,
    on_case: Callable[[CaseResult], None] | None = None,
    excluded: dict[str, str] | None = None,
    cases: Sequence[NodeCase] | None = None,
    device: str | None = None,
    gpu_precision: str | None = None,
) -> ConformanceReport:
    """Run every regenerated node case (or those of ``ops``, or ``cases`` already collected) on ``backend``
    (the torch backend on ``device``, in ``gpu_precision`` on a GPU: sealtrace.backends.devices)."""
    if backend == "torch":
        prepare = torch_runner(device, gpu_precision)
    else:
        prepare = {"reference": reference_runner, "onnxruntime": onnxruntime_runner}[backend]()
    report = ConformanceReport(backend)
    for case in cases if cases is not None else collect_cases(ops):
        if excluded and case.name in excluded:
            result = CaseResult(case.name, case.op_type, "excluded", excluded[case.name])
        else:
            result = run_case(case, prepare)
        report.results.append(result)
        if on_case is not None:
            on_case(result)
    return report
