"""Every real model of ../shared/MODELS.md and the 45 ACAS Xu networks, on real inputs:
the reference backend agrees with ONNX Runtime within each model's documented tolerance,
and runs are bit-identical from one run to the next, with observers or without."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from sealtrace import Session, zoo
from sealtrace.session import RunOptions
from tests.conftest import require_material


def _ort_outputs(path: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def relative_error(ours: np.ndarray, oracle: np.ndarray) -> float:
    """max |ours - oracle| / max(1, max |oracle|): the error relative to the output's scale."""
    assert ours.shape == oracle.shape and ours.dtype == oracle.dtype
    if ours.size == 0:
        return 0.0
    diff = np.abs(ours.astype(np.float64) - oracle.astype(np.float64)).max()
    return float(diff / max(1.0, float(np.abs(oracle.astype(np.float64)).max())))


@pytest.mark.slow
@pytest.mark.parametrize("key", [m.key for m in zoo.MODELS])
def test_real_model_matches_onnxruntime(key: str) -> None:
    real = zoo.model(key)
    path = require_material(lambda: real.path)
    feeds = require_material(real.inputs)
    session = Session(path)
    ours = session.run(None, feeds)
    oracle = _ort_outputs(str(path), feeds)
    for name, mine, theirs in zip(session.plan.output_names, ours, oracle, strict=True):
        error = relative_error(mine, theirs)
        assert error <= real.tolerance, f"{key} output {name}: relative error {error:.3g} > {real.tolerance}"
    # Deterministic: a second run is bit-identical, and so is a run with an observer (the
    # reference backend's step loop, where a run without observers executes generated code).
    again = session.run(None, feeds)
    watched = session.run(None, feeds, RunOptions(observers=[_Silent()]))
    for first, second, third in zip(ours, again, watched, strict=True):
        assert first.tobytes() == second.tobytes() == third.tobytes()


class _Silent:
    """An observer that looks at nothing."""

    def on_run_start(self, plan: object, feeds: object, backend: object) -> None:
        pass

    def on_step(self, event: object) -> None:
        pass

    def on_run_end(self, outputs: object) -> None:
        pass


@pytest.mark.slow
def test_all_acasxu_networks_match_onnxruntime() -> None:
    networks = require_material(zoo.acasxu_networks)
    assert len(networks) == 45
    points = [p for prop in (1, 2, 3, 4) for p in zoo.acasxu_inputs(prop, count=3, seed=prop)]
    worst = 0.0
    for path in networks:
        session = Session(path)
        assert [i.name for i in session.get_inputs()] == ["input"]  # IR 3: weights are not inputs
        for feeds in points:
            (ours,) = session.run(None, feeds)
            (theirs,) = _ort_outputs(str(path), feeds)
            worst = max(worst, relative_error(ours, theirs))
    assert worst <= 1e-5, f"worst relative error over 45 networks: {worst:.3g}"
