"""Attention (opset 23/24/25) and RotaryEmbedding against onnxruntime; FlexAttention (ai.onnx.preview) against onnx's reference evaluator."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import sealtrace
from sealtrace.errors import KernelError
from tests.ops.oneop import one_node_model
from tests.ops.test_matmul import assert_same, run_both, run_ours

RNG = np.random.default_rng(3)
B, SQ, SKV, D = 2, 4, 6, 8


def _qkv(q_heads: int, kv_heads: int, rank: int = 4, past: int = 0) -> dict[str, np.ndarray | None]:
    def tensor(heads: int, seq: int) -> np.ndarray:
        x = RNG.standard_normal((B, heads, seq, D)).astype(np.float32)
        return x if rank == 4 else x.transpose(0, 2, 1, 3).reshape(B, seq, heads * D)

    feeds: dict[str, np.ndarray | None] = {"Q": tensor(q_heads, SQ), "K": tensor(kv_heads, SKV), "V": tensor(kv_heads, SKV)}
    if past:
        feeds["attn_mask"] = None
        feeds["past_key"] = RNG.standard_normal((B, kv_heads, past, D)).astype(np.float32)
        feeds["past_value"] = RNG.standard_normal((B, kv_heads, past, D)).astype(np.float32)
    return feeds


@pytest.mark.parametrize(("q_heads", "kv_heads"), [(2, 2), (4, 2), (4, 1)])
@pytest.mark.parametrize("is_causal", [0, 1])
@pytest.mark.parametrize("rank", [3, 4])
def test_attention_heads_and_causal(q_heads: int, kv_heads: int, is_causal: int, rank: int) -> None:
    attrs: dict[str, Any] = {"is_causal": is_causal}
    if rank == 3:
        attrs |= {"q_num_heads": q_heads, "kv_num_heads": kv_heads}
    ours, theirs = run_both("Attention", _qkv(q_heads, kv_heads, rank), 23, **attrs)
    assert_same(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask_kind", ["bool", "float"])
@pytest.mark.parametrize("mask_shape", [(SQ, SKV), (B, 1, SQ, SKV), (1, 2, SQ, SKV)])
def test_attention_masks(mask_kind: str, mask_shape: tuple[int, ...]) -> None:
    feeds = _qkv(2, 2)
    if mask_kind == "bool":
        mask = RNG.random(mask_shape) > 0.3
        mask[..., 0] = True  # keep every row attendable (fully masked rows are tested below)
        feeds["attn_mask"] = mask
    else:
        feeds["attn_mask"] = RNG.standard_normal(mask_shape).astype(np.float32)
    assert_same(*run_both("Attention", feeds, 23), rtol=1e-5, atol=1e-5)


def test_attention_fully_masked_row_is_zero() -> None:
    feeds = _qkv(2, 2)
    mask = np.ones((SQ, SKV), bool)
    mask[1] = False
    feeds["attn_mask"] = mask
    (y, *_) = run_ours("Attention", feeds, 23, n_outputs=4, qk_matmul_output_mode=3)
    assert not np.isnan(y).any()
    np.testing.assert_array_equal(y[:, :, 1], 0)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_qk_output_modes_with_softcap(mode: int) -> None:
    feeds = _qkv(2, 2)
    feeds["attn_mask"] = RNG.standard_normal((SQ, SKV)).astype(np.float32)
    ours, theirs = run_both("Attention", feeds, 23, n_outputs=4, qk_matmul_output_mode=mode, softcap=2.0, scale=0.3)
    assert ours[3].shape == (B, 2, SQ, SKV)
    assert_same(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("is_causal", [0, 1])
def test_attention_past_and_present(is_causal: int) -> None:
    feeds = _qkv(4, 2, past=3)
    ours, theirs = run_both("Attention", feeds, 23, n_outputs=3, is_causal=is_causal)
    assert ours[1].shape == (B, 2, 3 + SKV, D)
    assert_same(ours, theirs, rtol=1e-5, atol=1e-5)


def test_attention_nonpad_kv_seqlen_opset24() -> None:
    feeds = _qkv(2, 2)
    feeds["attn_mask"] = None
    feeds["past_key"] = None
    feeds["past_value"] = None
    feeds["nonpad_kv_seqlen"] = np.array([5, 6], np.int64)
    assert_same(*run_both("Attention", feeds, 24, is_causal=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("softmax_precision", [None, 1])
def test_attention_float16(softmax_precision: int | None) -> None:
    feeds = {k: (v.astype(np.float16) if v is not None else None) for k, v in _qkv(4, 2).items()}
    attrs: dict[str, Any] = {"is_causal": 1}
    if softmax_precision is not None:
        attrs["softmax_precision"] = softmax_precision
    ours, theirs = run_both("Attention", feeds, 23, **attrs)
    assert ours[0].dtype == np.float16
    assert_same(ours, theirs, rtol=2e-3, atol=2e-3)


def test_attention_is_deterministic() -> None:
    feeds = _qkv(4, 2)
    first = run_ours("Attention", feeds, 23)[0]
    assert first.tobytes() == run_ours("Attention", feeds, 23)[0].tobytes()


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [0, 4])
@pytest.mark.parametrize("rank", [3, 4])
def test_rotary_embedding(interleaved: int, rotary_dim: int, rank: int) -> None:
    heads, seq, size, max_pos = 2, 5, 8, 16
    x = RNG.standard_normal((B, heads, seq, size)).astype(np.float32)
    if rank == 3:
        x = x.transpose(0, 2, 1, 3).reshape(B, seq, heads * size)
    half = (rotary_dim or size) // 2
    angles = RNG.uniform(0, np.pi, (max_pos, half)).astype(np.float32)
    feeds: dict[str, np.ndarray | None] = {
        "X": x,
        "cos_cache": np.cos(angles),
        "sin_cache": np.sin(angles),
        "position_ids": RNG.integers(0, max_pos, (B, seq)).astype(np.int64),
    }
    attrs: dict[str, Any] = {"interleaved": interleaved, "rotary_embedding_dim": rotary_dim}
    if rank == 3:
        attrs["num_heads"] = heads
    assert_same(*run_both("RotaryEmbedding", feeds, 23, **attrs), rtol=1e-5, atol=1e-6)


def _linear_attention_feeds(rule: str, steps: int, per_key_decay: bool = False) -> dict[str, np.ndarray | None]:
    hq, hkv, dk, dv = 4, 2, 4, 3
    rng = np.random.default_rng(4)
    key = rng.standard_normal((B, steps, hkv, dk))
    key /= np.linalg.norm(key, axis=-1, keepdims=True)  # delta rules expect L2-normalized keys
    feeds: dict[str, np.ndarray | None] = {
        "query": rng.standard_normal((B, steps, hq * dk)).astype(np.float32),
        "key": key.reshape(B, steps, hkv * dk).astype(np.float32),
        "value": rng.standard_normal((B, steps, hkv * dv)).astype(np.float32),
        "past_state": rng.standard_normal((B, hkv, dk, dv)).astype(np.float32),
        "decay": None,
        "beta": None,
    }
    if rule in ("gated", "gated_delta"):
        width = hkv * dk if per_key_decay else hkv
        feeds["decay"] = -rng.uniform(0.01, 0.5, (B, steps, width)).astype(np.float32)
    if rule in ("delta", "gated_delta"):
        feeds["beta"] = rng.uniform(0.1, 0.9, (B, steps, hkv)).astype(np.float32)
    return feeds


def _linear_attention_naive(feeds: dict[str, np.ndarray | None], rule: str) -> tuple[np.ndarray, np.ndarray]:
    """The spec's recurrence, one (batch, head, token) at a time."""
    q, k, v, s0 = (np.asarray(feeds[n], np.float64) for n in ("query", "key", "value", "past_state"))
    hq, hkv, dk, dv = 4, 2, 4, 3
    steps = q.shape[1]
    out = np.zeros((B, steps, hq, dv))
    state = s0.copy()
    for b in range(B):
        for h in range(hkv):
            s = state[b, h]
            for t in range(steps):
                kt, vt = k[b, t, h * dk : (h + 1) * dk], v[b, t, h * dv : (h + 1) * dv]
                if feeds["decay"] is not None:
                    g = np.asarray(feeds["decay"], np.float64)[b, t]
                    s = s * np.exp(np.atleast_1d(g[h] if g.size == hkv else g[h * dk : (h + 1) * dk]))[:, None]
                if feeds["beta"] is not None:
                    vt = np.asarray(feeds["beta"], np.float64)[b, t, h] * (vt - s.T @ kt)
                s = s + np.outer(kt, vt)
                for g_idx in range(hq // hkv):
                    head = h * (hq // hkv) + g_idx
                    out[b, t, head] = (q[b, t, head * dk : (head + 1) * dk] @ s) / np.sqrt(dk)
            state[b, h] = s
    return out.reshape(B, steps, hq * dv), state


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention_matches_recurrence(rule: str) -> None:
    feeds = _linear_attention_feeds(rule, steps=5, per_key_decay=rule == "gated")
    output, present = run_ours("LinearAttention", feeds, 27, n_outputs=2, q_num_heads=4, kv_num_heads=2, update_rule=rule)
    want_output, want_state = _linear_attention_naive(feeds, rule)
    np.testing.assert_allclose(output, want_output, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(present, want_state, rtol=1e-4, atol=1e-5)


def test_linear_attention_state_carries_across_calls() -> None:
    feeds = _linear_attention_feeds("gated_delta", steps=6)
    attrs: dict[str, Any] = {"q_num_heads": 4, "kv_num_heads": 2}
    whole, final = run_ours("LinearAttention", feeds, 27, n_outputs=2, **attrs)
    first = {n: (v[:, :3] if v is not None and n != "past_state" else v) for n, v in feeds.items()}
    head, state = run_ours("LinearAttention", first, 27, n_outputs=2, **attrs)
    second = {n: (v[:, 3:] if v is not None and n != "past_state" else v) for n, v in feeds.items()}
    second["past_state"] = state
    tail, state = run_ours("LinearAttention", second, 27, n_outputs=2, **attrs)
    np.testing.assert_allclose(np.concatenate([head, tail], axis=1), whole, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state, final, rtol=1e-5, atol=1e-6)


def _flex_model(q: np.ndarray, k: np.ndarray, v: np.ndarray, **attrs: Any) -> onnx.ModelProto:
    return one_node_model("FlexAttention", {"Q": q, "K": k, "V": v}, 1, 1, "ai.onnx.preview", **attrs)


def _modifier(name: str, op: str, *constants: float) -> onnx.GraphProto:
    """A one-input modifier subgraph: (x) -> op(x, *constants), float32."""
    tensors = [numpy_helper.from_array(np.float32(c), f"{name}_c{i}") for i, c in enumerate(constants)]
    node = helper.make_node(op, [f"{name}_in", *(t.name for t in tensors)], [f"{name}_out"])
    return helper.make_graph(
        [node], name, [helper.make_tensor_value_info(f"{name}_in", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, None)], initializer=tensors,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_flex_attention_gqa_with_both_modifiers_matches_onnx_reference(dtype: type) -> None:
    # ONNX Runtime has no ai.onnx.preview kernels: onnx's own reference evaluator is the oracle.
    rng = np.random.default_rng(4)
    q = rng.standard_normal((2, 4, 5, 8)).astype(dtype)
    k = rng.standard_normal((2, 2, 6, 8)).astype(dtype)
    v = rng.standard_normal((2, 2, 6, 3)).astype(dtype)
    attrs: dict[str, Any] = {"scale": 0.3}
    if dtype is np.float32:  # the modifiers' graphs are float32, the softmax precision of float32 inputs
        attrs.update(score_mod=_modifier("score", "Mul", 0.5), prob_mod=_modifier("prob", "Pow", 2.0))
    model = _flex_model(q, k, v, **attrs)
    feeds = {"Q": q, "K": k, "V": v}
    (ours,) = sealtrace.Session(model).run(None, feeds)
    (theirs,) = ReferenceEvaluator(model).run(None, feeds)
    assert ours.dtype == theirs.dtype and ours.shape == (2, 4, 5, 3)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)


def test_flex_attention_refuses_mismatched_heads_and_shape_changing_modifiers() -> None:
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 3, 4, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 4, 8)).astype(np.float32)
    with pytest.raises(KernelError, match="multiple of kv_num_heads"):
        sealtrace.Session(_flex_model(q, k, k)).run(None, {"Q": q, "K": k, "V": k})
    q = q[:, :2]
    model = _flex_model(q, k, k, score_mod=_modifier("score", "ReduceMax"))  # all axes: (1, 1, 1, 1)
    with pytest.raises(KernelError, match="changed the shape"):
        sealtrace.Session(model).run(None, {"Q": q, "K": k, "V": k})
