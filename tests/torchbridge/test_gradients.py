"""Autograd through converted real models matches central finite differences (float64)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from sealtrace import zoo  # noqa: E402
from sealtrace.backends import get_backend  # noqa: E402
from sealtrace.plan import build_plan  # noqa: E402
from sealtrace.torchbridge import to_torch  # noqa: E402
from tests.conftest import require_material  # noqa: E402

STEP = 1e-6


def central_difference(f, x: torch.Tensor, direction: torch.Tensor) -> float:  # type: ignore[no-untyped-def]
    with torch.no_grad():
        return float((f(x + STEP * direction) - f(x - STEP * direction)) / (2 * STEP))


@pytest.mark.slow
def test_acasxu_gradients_match_finite_differences() -> None:
    networks = require_material(zoo.acasxu_networks)
    points = [zoo.acasxu_inputs(prop, count=2, seed=prop)[1]["input"] for prop in (1, 3)]
    worst = 0.0
    for path in networks:
        module = to_torch(path, dtype=torch.float64)
        for point in points:
            x = torch.from_numpy(point.astype(np.float64)).requires_grad_(True)
            for k in range(5):  # every advisory score
                def score(v: torch.Tensor, k: int = k, net: torch.nn.Module = module) -> torch.Tensor:
                    return net(v).reshape(-1)[k]

                (grad,) = torch.autograd.grad(score(x), x)
                for i in range(5):  # every input coordinate
                    unit = torch.zeros_like(x)
                    unit.reshape(-1)[i] = 1.0
                    fd = central_difference(score, x.detach(), unit)
                    ad = float(grad.reshape(-1)[i])
                    worst = max(worst, abs(fd - ad) / max(1.0, abs(ad)))
    assert worst < 1e-6, worst


@pytest.mark.slow
def test_conv_net_gradients_match_finite_differences() -> None:
    # PP-OCR's orientation classifier: Conv, BatchNorm, HardSigmoid, Clip, pooling, MatMul, Softmax.
    real = zoo.model("ppocr-cls")
    path = require_material(lambda: real.path)
    feeds = require_material(real.inputs)
    module = to_torch(path, dtype=torch.float64)
    x = torch.from_numpy(feeds["x"].astype(np.float64))
    # The float64 module computes what the float32 reference computes, up to float32 rounding.
    reference = get_backend("reference").run(build_plan(path), feeds)
    with torch.no_grad():
        np.testing.assert_allclose(module(x).numpy(), next(iter(reference.values())), atol=1e-4)

    def score(v: torch.Tensor) -> torch.Tensor:
        return module(v)[0, 1]

    xg = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(score(xg), xg)
    assert float(grad.abs().max()) > 0
    rng = np.random.default_rng(0)
    for _ in range(3):  # directional derivatives along random directions
        direction = torch.from_numpy(rng.standard_normal(x.shape))
        fd = central_difference(score, x, direction)
        ad = float((grad * direction).sum())
        assert abs(fd - ad) <= 1e-5 * max(1.0, abs(ad)), (fd, ad)


@pytest.mark.slow
def test_gradients_through_an_lstm_inside_if() -> None:
    # Silero VAD: STFT-like Conv, Pow/Sqrt magnitude, LSTM inside If branches (pinned sample rate).
    real = zoo.model("silero-vad")
    path = require_material(lambda: real.path)
    feeds = require_material(real.inputs)
    module = to_torch(path, dtype=torch.float64, fixed_inputs={"sr": feeds["sr"]})
    state = torch.from_numpy(feeds["state"].astype(np.float64))
    x = torch.from_numpy(feeds["input"].astype(np.float64))

    def score(v: torch.Tensor) -> torch.Tensor:
        return module(v, state)[0].sum()

    xg = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(score(xg), xg)
    rng = np.random.default_rng(0)
    for _ in range(3):
        direction = torch.from_numpy(rng.standard_normal(x.shape))
        fd = central_difference(score, x, direction)
        ad = float((grad * direction).sum())
        # The magnitude sqrt(re^2 + im^2) is sharply curved near zero: a looser bound than ACAS Xu's.
        assert abs(fd - ad) <= 1e-3 * max(1.0, abs(ad)), (fd, ad)
