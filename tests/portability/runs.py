"""Run digests: what "the same bits" means for a whole run, and the cases they are taken of.

A run's digest is sha256 over the digests (``sealtrace.audit.records.value_digest``, what an audit
log records) of every step output in Plan order, folded steps and graph outputs included. Two runs
with one run digest computed every step output to the bit.

The cases are the real models of the test set on their real inputs (``sealtrace.zoo``), the 45
ACAS Xu networks, every case of ONNX's node test suite that the reference backend runs, the
one-operator cases of op_cases.py and the kernel cases of kernel_cases.py. They are
written once into a directory (pickled models and feeds; only this test suite reads them) so that
every environment under test runs the very same inputs: ONNX's case generators draw random inputs
with NumPy, whose results would differ between the environments being compared.

    python -m tests.portability.runs CASES_DIR     # prints {case: run digest} as JSON
"""

from __future__ import annotations

import hashlib
import json
import pickle
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

GOLDEN = Path(__file__).resolve().parent / "golden.json"
# ACAS Xu networks run on one input each: a point of property 1's box.
ACASXU_INPUT_SEED = 0


class _StepDigests:
    """A step observer keeping each step's output digests in Plan order."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, str, list[str | None]]] = []

    def on_run_start(self, plan: Any, feeds: Any, backend: Any) -> None:
        pass

    def on_step(self, event: Any) -> None:
        from sealtrace.audit.records import value_digest

        path = "/".join((*event.path, event.step.name))
        self.steps.append((event.step.op_type, path, [value_digest(v) for v in event.outputs]))

    def on_run_end(self, outputs: Any) -> None:
        pass


def run_digest(model: Any, feeds: Mapping[str, Any]) -> dict[str, Any]:
    """Run ``model`` on ``feeds`` (reference backend, portable numerics) and digest every step."""
    from sealtrace import Session
    from sealtrace.audit.records import value_digest

    session = Session(model)
    observer = _StepDigests()
    with np.errstate(all="ignore"):
        outputs = session.backend.run(session.plan, dict(feeds), [observer])
    h = hashlib.sha256()
    for _, _, digests in observer.steps:
        for digest in digests:
            h.update((digest or "-").encode())
    output_digests = {name: value_digest(value) for name, value in outputs.items()}
    for name in sorted(output_digests):
        h.update(f"{name}={output_digests[name]}".encode())
    return {"digest": h.hexdigest(), "steps": observer.steps, "outputs": output_digests}


def real_cases() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(case, model path, feeds) of every real model and every ACAS Xu network that is installed."""
    from sealtrace import zoo

    for m in zoo.MODELS:
        try:
            yield m.key, str(m.path), m.inputs()
        except zoo.MaterialMissingError:
            continue
    try:
        networks = zoo.acasxu_networks()
    except zoo.MaterialMissingError:
        return
    (point,) = zoo.acasxu_inputs(prop=1, count=1, seed=ACASXU_INPUT_SEED)
    for network in networks:
        yield f"acasxu/{network.name}", str(network), point


def conformance_cases() -> Iterator[tuple[str, bytes, list[dict[str, Any]]]]:
    """(case, model bytes, feeds of each data set) of ONNX's node test cases the reference runs."""
    from sealtrace.conformance.runner import collect_cases, to_value
    from sealtrace.plan.builder import build_plan

    for case in collect_cases():
        try:
            plan = build_plan(case.model)
        except Exception:  # not claimed by the reference backend (an op without a kernel)
            continue
        if plan.unsupported:
            continue
        names = [value.name for value in case.model.graph.input]
        # inputs as the conformance runner gives them (TensorProtos of bfloat16, float8 ... to arrays)
        feeds = [dict(zip(names, (to_value(v) for v in inputs), strict=False)) for inputs, _ in case.data_sets]
        yield f"node/{case.name}", case.model.SerializeToString(), feeds


def write_cases(directory: Path, conformance: bool = True) -> list[str]:
    """Write every case into ``directory`` (one pickle each); returns the case names."""
    directory.mkdir(parents=True, exist_ok=True)
    names = []
    for name, path, feeds in real_cases():
        names.append(name)
        _dump(directory, name, {"model": path, "feeds": [feeds]})
    if conformance:
        from tests.portability.op_cases import op_cases

        for name, model, data_sets in (*conformance_cases(), *op_cases()):
            names.append(name)
            _dump(directory, name, {"model": model, "feeds": data_sets})
    (directory / "index.json").write_text(json.dumps(names))
    (directory / "kernels.json").write_text(json.dumps(conformance))
    return names


def _dump(directory: Path, name: str, case: dict[str, Any]) -> None:
    (directory / (hashlib.sha256(name.encode()).hexdigest()[:24] + ".pkl")).write_bytes(pickle.dumps(case))


def run_cases(directory: Path) -> dict[str, str]:
    """{case: run digest} of every case in ``directory`` (a case of several data sets: the digest of
    their digests; a case that fails to run gives 'error: <exception type>'), and the digests of
    the kernel cases, which every environment makes itself (kernel_cases.py)."""
    names = json.loads((directory / "index.json").read_text())
    digests: dict[str, str] = {}
    for name in names:
        case = pickle.loads((directory / (hashlib.sha256(name.encode()).hexdigest()[:24] + ".pkl")).read_bytes())
        parts = []
        for feeds in case["feeds"]:
            try:
                parts.append(run_digest(case["model"], feeds)["digest"])
            except Exception as exc:  # the same failure everywhere is agreement too
                parts.append(f"error: {type(exc).__name__}")
        digests[name] = parts[0] if len(parts) == 1 else hashlib.sha256("".join(parts).encode()).hexdigest()
    if json.loads((directory / "kernels.json").read_text()):
        from tests.portability.kernel_cases import kernel_digests

        digests.update(kernel_digests())
    return digests


def golden_record(model: str, feeds: Mapping[str, Any]) -> dict[str, Any]:
    """What golden.json keeps of a real case: its input digests, output digests, run digest."""
    from sealtrace.audit.records import value_digest

    run = run_digest(model, feeds)
    return {
        "inputs": {name: value_digest(np.asarray(value)) for name, value in sorted(feeds.items())},
        "outputs": run["outputs"],
        "steps": len(run["steps"]),
        "digest": run["digest"],
    }


def write_golden() -> None:
    """Record golden.json: only when the numerics specification's version changes (docs/numerics.md)."""
    from sealtrace.ops.numerics import SPEC_VERSION

    cases = {name: golden_record(path, feeds) for name, path, feeds in real_cases()}
    GOLDEN.write_text(json.dumps({"spec": SPEC_VERSION, "cases": cases}, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-golden"]:
        write_golden()
    else:
        json.dump(run_cases(Path(sys.argv[1])), sys.stdout, indent=0, sort_keys=True)
