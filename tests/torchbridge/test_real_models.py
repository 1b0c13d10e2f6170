"""Every real model of ../shared/MODELS.md and the 45 ACAS Xu networks, converted to torch:
the fx module and the torch backend agree with the reference backend, step by step."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from sealtrace import zoo  # noqa: E402
from sealtrace.backends import get_backend  # noqa: E402
from sealtrace.parity import Tolerance, ToleranceTable, check_parity  # noqa: E402
from sealtrace.plan import build_plan  # noqa: E402
from sealtrace.torchbridge import to_torch  # noqa: E402
from tests.conftest import require_material  # noqa: E402

# float32 agreement: max |torch - reference| / max(1, max |reference|).
TOLERANCE = 1e-4

# Per-step parity uses the default tolerance (atol 1e-4, rtol 1e-3), except where float32
# summation order alone moves intermediate values further. For magika and ppocr-det the reference
# and ONNX Runtime drift apart just as much (magika's LayerNorm over byte embeddings cancels,
# ppocr-det's deep convolutions reach 1e3); in ppocr-rec activations reach 250 and elements near
# zero among them differ by up to 4e-4. test_no_step_is_born_in_torch checks that the torch side
# adds no error of its own at any step.
STEP_TOLERANCE = {
    "magika": Tolerance(atol=1e-2, rtol=1e-3),
    "ppocr-det": Tolerance(atol=2e-2, rtol=1e-3),
    "ppocr-rec": Tolerance(atol=1e-3, rtol=1e-3),
}


def relative_error(ours: np.ndarray, oracle: np.ndarray) -> float:
    assert ours.shape == oracle.shape, (ours.shape, oracle.shape)
    if ours.size == 0:
        return 0.0
    diff = np.abs(ours.astype(np.float64) - oracle.astype(np.float64)).max()
    return float(diff / max(1.0, float(np.abs(oracle.astype(np.float64)).max())))


def module_outputs(module: torch.nn.Module, input_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    with torch.no_grad():
        result = module(*(torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in input_names))
    return [r.numpy() for r in (result if isinstance(result, tuple) else (result,))]


@pytest.mark.slow
@pytest.mark.parametrize("key", [m.key for m in zoo.MODELS])
def test_real_model_converts_and_matches_reference(key: str) -> None:
    real = zoo.model(key)
    path = require_material(lambda: real.path)
    feeds = require_material(real.inputs)
    plan = build_plan(path)
    reference = get_backend("reference").run(plan, feeds)
    module = to_torch(plan)
    assert isinstance(module, torch.fx.GraphModule)
    ours = module_outputs(module, module.input_names, feeds)
    for name, mine in zip(plan.output_names, ours, strict=True):
        assert mine.dtype == reference[name].dtype
        error = relative_error(mine, reference[name])
        assert error <= TOLERANCE, f"{key} output {name}: relative error {error:.3g}"


@pytest.mark.slow
@pytest.mark.parametrize("key", [m.key for m in zoo.MODELS])
def test_real_model_parity_reference_vs_torch_per_step(key: str) -> None:
    real = zoo.model(key)
    path = require_material(lambda: real.path)
    feeds = require_material(real.inputs)
    table = ToleranceTable(STEP_TOLERANCE.get(key, Tolerance()))
    report = check_parity(path, feeds, ["reference", "torch"], table, local=False)
    assert report.passed, [
        (s.name, s.op_type, s.worst.max_abs if s.worst else None) for s in report.exceeding[:5]
    ]
    compared = [s for s in report.steps if s.status != "not-compared"]
    assert len(compared) == len(report.steps)  # the torch backend reports every step, subgraphs too


@pytest.mark.slow
@pytest.mark.parametrize("key", ["magika", "ppocr-rec"])
def test_no_step_is_born_in_torch(key: str) -> None:
    # At the default tolerance, steps may exceed only by inheriting: re-run alone on the torch
    # side's inputs, the reference kernel lands within tolerance of what torch computed.
    real = zoo.model(key)
    path = require_material(lambda: real.path)
    feeds = require_material(real.inputs)
    report = check_parity(path, feeds, ["reference", "torch"], local=True)
    assert not report.born_here, [(s.name, s.op_type) for s in report.born_here[:5]]


@pytest.mark.slow
def test_all_acasxu_networks_convert_and_match_reference() -> None:
    networks = require_material(zoo.acasxu_networks)
    assert len(networks) == 45
    points = [p for prop in (1, 2, 3, 4) for p in zoo.acasxu_inputs(prop, count=2, seed=prop)]
    reference = get_backend("reference")
    worst = 0.0
    for path in networks:
        plan = build_plan(path)
        module = to_torch(plan)
        for feeds in points:
            (ours,) = module_outputs(module, ["input"], feeds)
            expected = reference.run(plan, feeds)[plan.output_names[0]]
            worst = max(worst, relative_error(ours, expected))
        report = check_parity(plan, points[0], ["reference", "torch"], local=False)
        assert report.passed, path.name
    assert worst <= TOLERANCE


def test_acasxu_module_is_a_readable_graph_with_parameters() -> None:
    path = require_material(lambda: zoo.acasxu_networks()[0])
    module = to_torch(path)
    ops = [n.meta.get("onnx_op", "") for n in module.graph.nodes if n.op == "call_function"]
    assert ops.count("MatMul-1") == 7 and ops.count("Relu-6") == 6
    params = dict(module.named_parameters())
    assert len(params) >= 14 and all(p.requires_grad for p in params.values())
    assert set(module.onnx_names.values()) >= set(build_plan(path).initializers)
