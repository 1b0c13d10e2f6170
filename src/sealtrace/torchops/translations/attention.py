"""Attention (opset 23/24/25) and RotaryEmbedding (opset 23): torch translations following the
reference kernels (:mod:`sealtrace.ops.attention`): scores and softmax in float32 for float16 and
float32 inputs (float64 stays float64, bfloat16 stays bfloat16), grouped-query attention by
viewing the query heads as (kv_heads, group)."""

from __future__ import annotations

import math
from typing import Any

import torch

from sealtrace.torchops.dtypes import torch_dtype
from sealtrace.torchops.registry import reference_versions, register
from sealtrace.torchops.translations.activation import ordered_sum


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype in (torch.bfloat16, torch.float64) else torch.float32


def _split_heads(x: torch.Tensor, num_heads: int | None) -> torch.Tensor:
    if x.dim() == 4:
        return x
    if not num_heads:
        raise ValueError("3-D Attention inputs need q_num_heads and kv_num_heads")
    batch, seq, hidden = x.shape
    return x.reshape(batch, seq, num_heads, hidden // num_heads).transpose(1, 2)


def _bias(attn_mask: torch.Tensor | None, q_len: int, kv_len: int, offset: Any, is_causal: int, left: int,
          right: int, nonpad: torch.Tensor | None, work: torch.dtype, device: torch.device) -> torch.Tensor:
    neg_inf = torch.tensor(-math.inf, dtype=work, device=device)
    zero = torch.tensor(0.0, dtype=work, device=device)
    bias = torch.zeros((q_len, kv_len), dtype=work, device=device)
    if attn_mask is not None:
        short = kv_len - attn_mask.shape[-1]
        if short > 0:  # a shorter mask is padded with 'not attended'
            pad_value = False if attn_mask.dtype == torch.bool else -math.inf
            attn_mask = torch.nn.functional.pad(attn_mask, [0, short], value=pad_value)
        bias = bias + (torch.where(attn_mask, zero, neg_inf) if attn_mask.dtype == torch.bool
                       else attn_mask.to(work))
    if isinstance(offset, torch.Tensor):
        shift: Any = offset.reshape(-1, 1, 1, 1)
    else:
        shift = int(offset)
    query_pos = torch.arange(q_len, device=device).reshape(q_len, 1) + shift
    distance = query_pos - torch.arange(kv_len, device=device).reshape(1, kv_len)
    allowed = torch.ones(distance.shape, dtype=torch.bool, device=device)
    if is_causal:
        allowed = allowed & (distance >= 0)
    if left >= 0:
        allowed = allowed & (distance <= left)
    if right >= 0:
        allowed = allowed & (-distance <= right)
    if nonpad is not None:
        allowed = allowed & (torch.arange(kv_len, device=device) < nonpad.reshape(-1, 1, 1, 1))
    if not bool(allowed.all()):
        bias = bias + torch.where(allowed, zero, neg_inf)
    return bias


def _softmax(logits: torch.Tensor) -> torch.Tensor:
    peak = torch.amax(logits, dim=-1, keepdim=True)
    # An all -inf row has no attendable key: shift by 0 and let its (zero) sum become 1.
    peak = torch.where(torch.isneginf(peak), torch.zeros_like(peak), peak)
    exp = torch.exp(logits - peak)
    total = ordered_sum(exp, -1)  # bfloat16: added in order, rounding each time, as the reference
    return exp / torch.where(total == 0, torch.ones_like(total), total)


def _product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b; bfloat16 operands multiply exactly in float32 and the result stays float32, as
    ml_dtypes' matmul answers (the reference rounds it where it rounds)."""
    if a.dtype == torch.bfloat16:
        return torch.matmul(a.float(), b.float())
    return torch.matmul(a, b)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
               past_key: torch.Tensor | None, past_value: torch.Tensor | None, nonpad: torch.Tensor | None, *,
               n_outputs: int, is_causal: int = 0, kv_num_heads: int | None = None, q_num_heads: int | None = None,
               qk_matmul_output_mode: int = 0, scale: float | None = None, softcap: float = 0.0,
               softmax_precision: int | None = None, left_window_size: int = -1, right_window_size: int = -1
               ) -> Any:
    if (past_key is None) != (past_value is None):
        raise ValueError("past_key and past_value must be given together")
    rank, out_dtype = q.dim(), q.dtype
    work = _work_dtype(out_dtype)
    q4, k4, v4 = _split_heads(q, q_num_heads), _split_heads(k, kv_num_heads), _split_heads(v, kv_num_heads)
    present_key = k4 if past_key is None else torch.cat((past_key, k4), dim=2)
    present_value = v4 if past_value is None else torch.cat((past_value, v4), dim=2)
    batch, heads, q_len, head_size = q4.shape
    kv_heads, kv_len = present_key.shape[1], present_key.shape[2]
    group = heads // kv_heads
    if scale is None:
        scale = 1 / math.sqrt(head_size)
    # Q and K are each scaled by sqrt(scale) (rounded to the work dtype), as the spec prescribes.
    root = torch.tensor(math.sqrt(scale), dtype=torch.float64).to(work)
    qs = q4.to(work) * root
    ks = present_key.to(work) * root
    scores = _product(qs.reshape(batch, kv_heads, group, q_len, head_size),
                      ks[:, :, None].transpose(-1, -2)).reshape(batch, heads, q_len, kv_len).to(work)
    raw = scores
    if softcap > 0:
        cap = torch.tensor(softcap, dtype=torch.float64).to(work)
        scores = torch.tanh(scores / cap) * cap
    capped = scores
    if past_key is not None:
        offset: Any = past_key.shape[2]
    elif nonpad is not None:
        offset = nonpad.to(torch.int64).reshape(-1) - q_len
    else:
        offset = 0
    bias = _bias(attn_mask, q_len, kv_len, offset, is_causal, left_window_size, right_window_size, nonpad, work,
                 q.device)
    biased = scores + bias
    softmax_dtype = work if softmax_precision is None else torch_dtype(softmax_precision)
    probs = _softmax(biased.to(softmax_dtype)).to(work)
    fully_masked = torch.isneginf(torch.amax(bias, dim=-1, keepdim=True))
    probs = torch.where(fully_masked, torch.zeros_like(probs), probs)
    y = _product(probs.reshape(batch, kv_heads, group, q_len, kv_len),
                 present_value.to(work)[:, :, None]).reshape(batch, heads, q_len, -1)
    if rank == 3:
        y = y.transpose(1, 2).reshape(batch, q_len, -1)
    qk = {0: raw, 1: capped, 2: biased, 3: probs}[qk_matmul_output_mode]
    outputs = (y.to(out_dtype), present_key.to(q.dtype), present_value.to(v.dtype), qk.to(out_dtype))
    return outputs[:n_outputs] if n_outputs > 1 else outputs[0]


@register("Attention", 23, n_outputs=True)
def attention_v23(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
                  past_key: torch.Tensor | None = None, past_value: torch.Tensor | None = None, **attrs: Any) -> Any:
    """Attention-23: outputs Y, present_key, present_value, qk_matmul_output."""
    return _attention(q, k, v, attn_mask, past_key, past_value, None, **attrs)


@register("Attention", 24, 25, n_outputs=True)
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
              past_key: torch.Tensor | None = None, past_value: torch.Tensor | None = None,
              nonpad_kv_seqlen: torch.Tensor | None = None, **attrs: Any) -> Any:
    """Attention-24 (nonpad_kv_seqlen) and -25 (sliding windows)."""
    return _attention(q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen, **attrs)


@register("RotaryEmbedding", *reference_versions("RotaryEmbedding"))
def rotary_embedding(x: torch.Tensor, cos_cache: torch.Tensor, sin_cache: torch.Tensor,
                     position_ids: torch.Tensor | None = None, *, interleaved: int = 0, num_heads: int | None = None,
                     rotary_embedding_dim: int = 0) -> torch.Tensor:
    """RotaryEmbedding: rotate (part of) each head by position-dependent angles."""
    work = _work_dtype(x.dtype)
    if x.dim() == 4:
        x4 = x.transpose(1, 2)
    else:
        if not num_heads:
            raise ValueError("3-D RotaryEmbedding input needs num_heads")
        batch, seq, hidden = x.shape
        x4 = x.reshape(batch, seq, num_heads, hidden // num_heads)
    x4 = x4.to(work)
    dim = rotary_embedding_dim or x4.shape[-1]
    if position_ids is not None:
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    cos = cos_cache.to(work).reshape(-1, *cos_cache.shape[-2:])[:, :, None, :]
    sin = sin_cache.to(work).reshape(-1, *sin_cache.shape[-2:])[:, :, None, :]
    rotated = x4[..., :dim]
    if interleaved:
        x1, x2 = rotated[..., 0::2], rotated[..., 1::2]
        real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
        mixed = torch.stack((real, imag), dim=-1).reshape(*real.shape[:-1], dim)
    else:
        x1, x2 = rotated[..., : dim // 2], rotated[..., dim // 2 :]
        mixed = torch.cat((cos * x1 - sin * x2, sin * x1 + cos * x2), dim=-1)
    out = torch.cat((mixed, x4[..., dim:]), dim=-1)
    out = out.transpose(1, 2) if x.dim() == 4 else out.reshape(x.shape)
    return out.to(x.dtype)


@register("LinearAttention", *reference_versions("LinearAttention"), n_outputs=True)
def linear_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     past_state: torch.Tensor | None = None, decay: torch.Tensor | None = None,
                     beta: torch.Tensor | None = None, *, n_outputs: int, chunk_size: int = 64,
                     kv_num_heads: int, q_num_heads: int, scale: float = 0.0, update_rule: str = "linear") -> Any:
    """LinearAttention: the linear / gated / delta / gated_delta recurrences token by token, as the
    reference computes them (state (B, H, d_k, d_v) in float32, or float64 for float64 inputs);
    outputs (output, present_state). chunk_size is only a tuning hint for chunked kernels."""
    if update_rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ValueError(f"unknown LinearAttention update_rule {update_rule!r}")
    if q_num_heads <= 0 or kv_num_heads <= 0 or q_num_heads % kv_num_heads:
        raise ValueError(f"q_num_heads ({q_num_heads}) must be a positive multiple of kv_num_heads ({kv_num_heads})")
    gated = update_rule in ("gated", "gated_delta")
    delta = update_rule in ("delta", "gated_delta")
    if gated != (decay is not None) or delta != (beta is not None):
        raise ValueError(f"update_rule {update_rule!r}: decay is {'required' if gated else 'forbidden'}, "
                         f"beta is {'required' if delta else 'forbidden'}")
    work = torch.float64 if query.dtype == torch.float64 else torch.float32
    batch, steps, _ = query.shape
    d_k = query.shape[-1] // q_num_heads
    d_v = value.shape[-1] // kv_num_heads
    group = q_num_heads // kv_num_heads
    q4 = _split_heads(query, q_num_heads).to(work)
    k4 = _split_heads(key, kv_num_heads).to(work)
    v4 = _split_heads(value, kv_num_heads).to(work)
    gate = torch.exp(_split_heads(decay, kv_num_heads).to(work)) if decay is not None else None
    rate = beta.reshape(batch, steps, beta.shape[-1], 1).transpose(1, 2).to(work) if beta is not None else None
    if past_state is not None:
        state, state_dtype = past_state.to(work), past_state.dtype
    else:
        state = torch.zeros((batch, kv_num_heads, d_k, d_v), dtype=work, device=query.device)
        state_dtype = query.dtype
    factor = torch.tensor(scale if scale else 1 / math.sqrt(d_k), dtype=torch.float64).to(work)
    outputs = []
    for t in range(steps):  # the recurrence is sequential in time
        k_t, v_t = k4[:, :, t], v4[:, :, t]
        if gate is not None:
            state = state * gate[:, :, t, :, None]
        if rate is not None:
            retrieved = torch.matmul(k_t[:, :, None, :], state)[:, :, 0]
            v_t = rate[:, :, t] * (v_t - retrieved)
        state = state + k_t[:, :, :, None] * v_t[:, :, None, :]
        q_t = q4[:, :, t].reshape(batch, kv_num_heads, group, d_k)
        outputs.append(torch.matmul(q_t, state).reshape(batch, q_num_heads, d_v) * factor)
    out = torch.stack(outputs, dim=2) if outputs else torch.zeros((batch, q_num_heads, 0, d_v), dtype=work)
    output = out.transpose(1, 2).reshape(batch, steps, q_num_heads * d_v)
    results = (output.to(query.dtype), state.to(state_dtype))
    return results[:n_outputs] if n_outputs > 1 else results[0]


def _per_kv_head(x: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """x (batch, heads, rows, n) times kv (batch, kv_heads, n, cols): query heads share their kv head."""
    batch, heads, rows, n = x.shape
    kv_heads = kv.shape[1]
    return torch.matmul(x.reshape(batch, kv_heads, heads // kv_heads, rows, n), kv[:, :, None]).reshape(
        batch, heads, rows, -1)


_FLEX_PRECISIONS = {1: torch.float32, 10: torch.float16, 11: torch.float64, 16: torch.bfloat16}


@register("FlexAttention", *reference_versions("FlexAttention", domain="ai.onnx.preview"),
          domain="ai.onnx.preview", subgraphs=True)
def flex_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, prob_mod: Any = None,
                   scale: float | None = None, score_mod: Any = None, softmax_precision: int | None = None
                   ) -> torch.Tensor:
    """FlexAttention (ai.onnx.preview 1): softmax((Q K^T) * scale -> score_mod) -> prob_mod, times V.

    As the reference (the spec's function): Q and K are each scaled by sqrt(scale) in their own
    dtype and multiplied there; scores move to the softmax precision (float32 for narrower
    inputs), where the modifier subgraphs (callables here), the plain softmax and the product
    with V run; the result returns to V's dtype.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"FlexAttention needs rank-4 Q, K, V; got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    heads, head_size = q.shape[1], q.shape[3]
    kv_heads, kv_len = k.shape[1], k.shape[2]
    if k.shape[3] != head_size or v.shape[1] != kv_heads or v.shape[2] != kv_len:
        raise ValueError(f"FlexAttention: K {list(k.shape)} and V {list(v.shape)} do not match Q {list(q.shape)}")
    if heads % kv_heads:
        raise ValueError(f"FlexAttention: q_num_heads ({heads}) must be a multiple of kv_num_heads ({kv_heads})")
    if softmax_precision is not None:
        if softmax_precision not in _FLEX_PRECISIONS:
            raise ValueError(f"FlexAttention: unsupported softmax_precision {softmax_precision}")
        work = _FLEX_PRECISIONS[softmax_precision]
    else:
        work = torch.float64 if q.dtype == torch.float64 else torch.float32
    factor = torch.tensor(1 / math.sqrt(head_size) if scale is None else scale, dtype=torch.float32)
    root = torch.sqrt(factor).to(q.dtype).to(q.device)
    scores = _per_kv_head(q * root, (k * root).transpose(-1, -2)).to(work)
    if score_mod is not None:
        scores = _modified("score_mod", score_mod, scores, work)
    exp = torch.exp(scores - torch.amax(scores, dim=-1, keepdim=True))
    probs = exp / exp.sum(dim=-1, keepdim=True)
    if prob_mod is not None:
        probs = _modified("prob_mod", prob_mod, probs, work)
    return _per_kv_head(probs, v.to(work)).to(v.dtype)


def _modified(name: str, graph: Any, value: torch.Tensor, work: torch.dtype) -> torch.Tensor:
    outputs = graph(value)
    if len(outputs) != 1:
        raise ValueError(f"FlexAttention {name} must have exactly one output, it has {len(outputs)}")
    out = outputs[0].to(work)
    if out.shape != value.shape:
        raise ValueError(f"FlexAttention {name} changed the shape {list(value.shape)} to {list(out.shape)}")
    return out
