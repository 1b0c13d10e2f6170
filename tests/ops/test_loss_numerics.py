"""SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss on portable numerics (docs/numerics.md): the
kernels give their function bodies' bits (the conformance suite's ``_expanded`` twins run op by op),
half precision computes in its own type, and each reduction is one correct rounding."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sealtrace import Session
from sealtrace.conformance import collect_cases
from sealtrace.ops import loss, numerics


def _run(case: Any) -> list[np.ndarray]:
    inputs = [np.asarray(v) for v in case.data_sets[0][0]]
    feeds = {i.name: v for i, v in zip(case.model.graph.input, inputs, strict=False)}
    with np.errstate(all="ignore"):
        return list(Session(case.model).run(None, feeds))


def test_kernels_give_their_function_bodies_bits() -> None:
    cases = {c.name: c for c in collect_cases(["SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"])}
    twins = [(c, cases[n + "_expanded"]) for n, c in sorted(cases.items()) if n + "_expanded" in cases]
    assert len(twins) > 40
    differ = [
        c.name
        for c, e in twins
        if any(a.tobytes() != b.tobytes() for a, b in zip(_run(c), _run(e), strict=True))
    ]
    assert not differ, f"kernel and function body differ: {differ}"


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_float16_nll_is_its_body_in_float16(reduction: str, weighted: bool) -> None:
    """loss = -x[n, t] * w[t] in float16; sum and mean are each one rounding of the exact value
    (float16 terms sum exactly in float64), the weighted mean RN(sum loss) / RN(sum w)."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((40, 6, 9)) * 4).astype(np.float16)
    target = rng.integers(0, 6, (40, 9))
    weight = (rng.random(6) * 2).astype(np.float16) if weighted else None
    got = loss.negative_log_likelihood_loss(x, target, weight, ignore_index=None, reduction=reduction)
    picked = -np.take_along_axis(x, target[:, None], axis=1)[:, 0]
    w = weight[target] if weight is not None else None
    terms = picked * w if w is not None else picked
    assert got.dtype == np.float16
    if reduction == "none":
        assert got.tobytes() == terms.tobytes()
        return
    exact_sum = terms.astype(np.float64).sum()  # exact: few float16 terms
    if reduction == "sum":
        want = np.float16(exact_sum)
    elif w is None:
        want = np.float16(exact_sum / terms.size)  # RN(exact sum / n): the float64 quotient rounds alike here
    else:
        want = np.float16(exact_sum) / np.float16(w.astype(np.float64).sum())
    assert got.tobytes() == np.asarray(want, dtype=np.float16).tobytes()


def test_log_prob_is_log_softmax_in_its_type() -> None:
    rng = np.random.default_rng(1)
    scores = (rng.standard_normal((5, 7, 3)) * 3).astype(np.float16)
    labels = rng.integers(0, 7, (5, 3))
    _, log_prob = loss.softmax_cross_entropy_loss(scores, labels, None, ignore_index=None, reduction="mean")
    assert log_prob.tobytes() == numerics.log_softmax(scores, 1).tobytes()


def test_ignored_positions_weigh_nothing() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    target = np.array([1, -1, 3, -1])
    weight = np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32)
    mean = loss.negative_log_likelihood_loss(x, target, weight, ignore_index=-1, reduction="mean")
    kept = np.array([0, 2])
    terms = -x[kept, target[kept]] * weight[target[kept]]  # float32 products, then one rounding of their sum
    want = np.float32(terms.astype(np.float64).sum()) / np.float32(2.0 + 4.0)
    assert mean.tobytes() == np.asarray(want, np.float32).tobytes()
