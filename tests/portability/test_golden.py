"""Golden run digests: every machine reproduces the bits recorded once (tests/portability/golden.json).

They were recorded with portable numerics, specification version 1 (docs/numerics.md), on one
machine; every step output of every real model on its real input, and of the 45 ACAS Xu networks,
must digest the same here, whatever the CPU, BLAS, thread count or NumPy version. They replace
fixtures that only replay on the machine that wrote them. Re-record them (``python -m
tests.portability.runs --write-golden``) only with a new version of the specification.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from sealtrace import zoo
from sealtrace.audit.records import value_digest
from sealtrace.ops.numerics import SPEC_VERSION
from tests.conftest import require_material
from tests.portability.runs import ACASXU_INPUT_SEED, GOLDEN, golden_record

GOLDEN_CASES: dict[str, Any] = json.loads(GOLDEN.read_text())["cases"]


def test_golden_digests_are_of_this_specification_version() -> None:
    assert json.loads(GOLDEN.read_text())["spec"] == SPEC_VERSION


def _case(name: str) -> tuple[str, dict[str, Any]]:
    if name.startswith("acasxu/"):
        (point,) = zoo.acasxu_inputs(prop=1, count=1, seed=ACASXU_INPUT_SEED)
        return str(zoo.acasxu_file(name.split("/", 1)[1])), point
    model = zoo.model(name)
    return str(model.path), model.inputs()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_real_model_reproduces_its_golden_run_digest(name: str) -> None:
    path, feeds = require_material(lambda: _case(name))
    golden = GOLDEN_CASES[name]
    inputs = {k: value_digest(np.asarray(v)) for k, v in sorted(feeds.items())}
    # the input is part of the material: a change there is not a change of the numerics
    assert inputs == golden["inputs"], f"{name}: the input is not the one the golden digest was recorded with"
    record = golden_record(path, feeds)
    assert record["steps"] == golden["steps"]
    assert record["outputs"] == golden["outputs"], f"{name}: graph outputs differ from the golden digests"
    assert record["digest"] == golden["digest"], f"{name}: some step's output differs from the golden run"
