"""Attention (opset 23/24) and RotaryEmbedding against onnxruntime."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

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


def test_attention_float16() -> None:
    feeds = {k: (v.astype(np.float16) if v is not None else None) for k, v in _qkv(4, 2).items()}
    ours, theirs = run_both("Attention", feeds, 23, is_causal=1)
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
