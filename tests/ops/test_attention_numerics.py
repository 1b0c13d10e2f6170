"""Attention, RotaryEmbedding and LinearAttention on portable numerics (docs/numerics.md): each kernel
computes its ONNX function body's steps, so it gives the very bits of the body run op by op by the
reference backend (the conformance suite's ``_expanded`` twins), and Attention equals the body's
step sequence re-implemented here from the numerics primitives."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from sealtrace import Session
from sealtrace.conformance import collect_cases
from sealtrace.conformance.runner import NodeCase
from sealtrace.ops import attention, numerics

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture(scope="module")
def twins() -> list[tuple[NodeCase, NodeCase]]:
    cases = {c.name: c for c in collect_cases(["Attention", "RotaryEmbedding", "LinearAttention"])}
    return [
        (c, cases[name + "_expanded"]) for name, c in sorted(cases.items()) if name + "_expanded" in cases
    ]


def _run(case: NodeCase) -> list[np.ndarray]:
    inputs = [np.asarray(v) for v in case.data_sets[0][0]]
    feeds = {i.name: v for i, v in zip(case.model.graph.input, inputs, strict=False)}
    with np.errstate(all="ignore"):
        return list(Session(case.model).run(None, feeds))


def test_kernels_give_their_function_bodies_bits(twins: list[tuple[NodeCase, NodeCase]]) -> None:
    assert len(twins) > 100
    differ = []
    for case, expanded in twins:
        ours, body = _run(case), _run(expanded)
        if any(a.dtype != b.dtype or a.tobytes() != b.tobytes() for a, b in zip(ours, body, strict=True)):
            differ.append(case.name)
    assert not differ, f"kernel and function body differ: {differ}"


def _attention_steps(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray,
    softcap: float,
    softmax_dtype: np.dtype[Any] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Attention-23's body, 4-D inputs, as many KV heads as query heads, a float mask, not causal."""
    dtype = q.dtype
    scale = np.float32(1) / np.sqrt(np.float32(q.shape[-1]))
    root = np.asarray(np.sqrt(scale)).astype(dtype)
    scores = numerics.matmul(q * root, np.swapaxes(k, -1, -2) * root)
    if softcap:
        cap = np.asarray(np.float32(softcap)).astype(dtype)
        scores = numerics.apply("tanh", scores / cap) * cap
    biased = scores + mask.astype(dtype)
    work = dtype if softmax_dtype is None else softmax_dtype
    probs = numerics.softmax(biased.astype(work), -1).astype(dtype)
    return numerics.matmul(probs, v), probs


@pytest.mark.parametrize(
    ("dtype", "softcap", "softmax_precision"),
    [
        (np.dtype(np.float32), 0.0, None),
        (np.dtype(np.float32), 4.0, None),
        (np.dtype(np.float16), 0.0, None),
        (np.dtype(np.float16), 3.0, 1),
        (BF16, 0.0, None),
        (np.dtype(np.float64), 2.0, None),
    ],
)
def test_attention_is_its_step_sequence(
    dtype: np.dtype[Any], softcap: float, softmax_precision: int | None
) -> None:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, n, 16)).astype(dtype) for n in (5, 7, 7))
    mask = (rng.standard_normal((5, 7)) * 2).astype(dtype)
    y, _, _, probs = attention.attention_v23(
        q,
        k,
        v,
        mask,
        is_causal=0,
        kv_num_heads=None,
        q_num_heads=None,
        qk_matmul_output_mode=3,
        scale=None,
        softcap=softcap,
        softmax_precision=softmax_precision,
    )
    softmax_dtype = None if softmax_precision is None else np.dtype(np.float32)
    want_y, want_probs = _attention_steps(q, k, v, mask, softcap, softmax_dtype)
    assert y.dtype == dtype and probs.dtype == dtype
    assert y.tobytes() == want_y.tobytes()
    assert probs.tobytes() == want_probs.tobytes()


def test_grouped_query_heads_equal_repeated_kv_heads() -> None:
    """Sharing a KV head among its query heads is the same product as repeating it (each element
    of a correctly rounded product depends on its row and column only)."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 6, 4, 8)).astype(np.float32)
    k, v = (rng.standard_normal((1, 2, 9, 8)).astype(np.float32) for _ in range(2))
    attrs: dict[str, Any] = {
        "is_causal": 1,
        "kv_num_heads": None,
        "q_num_heads": None,
        "qk_matmul_output_mode": 0,
        "scale": None,
        "softcap": 0.0,
        "softmax_precision": None,
    }
    grouped = attention.attention_v23(q, k, v, **attrs)
    repeated = attention.attention_v23(q, np.repeat(k, 3, axis=1), np.repeat(v, 3, axis=1), **attrs)
    assert grouped[0].tobytes() == repeated[0].tobytes()
    assert grouped[3].tobytes() == repeated[3].tobytes()
