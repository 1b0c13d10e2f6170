"""Attention (opset 23/24/25), RotaryEmbedding (opset 23), LinearAttention (opset 27) and
FlexAttention (ai.onnx.preview 1).

Numerics (docs/numerics.md): each operator runs its ONNX function body's steps, each product
(MatMul) correctly rounded element by element, Softmax as Softmax-13's body (``numerics.softmax``),
Tanh and Exp correctly rounded, and the other steps exact IEEE operations, in the type the body
gives them: Attention and RotaryEmbedding in the query's own type T (half precision included),
LinearAttention in float32 (float64 stays float64). Grouped-query attention is computed by
reshaping the query heads into (kv_heads, group) instead of repeating K and V: every element of
a correctly rounded product is the same either way.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from sealtrace.ops import numerics
from sealtrace.ops.registry import KernelContext, quiet, register

Array = np.ndarray[Any, Any]

_PRECISIONS = {
    1: np.dtype(np.float32),
    10: np.dtype(np.float16),
    11: np.dtype(np.float64),
    16: np.dtype(ml_dtypes.bfloat16),
}


def _cast(x: Array, dtype: np.dtype[Any]) -> Array:
    """ONNX Cast between float types: one rounding (float64 to bfloat16 through numerics, since
    ml_dtypes' conversion rounds twice)."""
    if x.dtype == dtype:
        return x
    if x.dtype == np.float64 and dtype == numerics.BFLOAT16.dtype:
        return numerics.round_to(x, numerics.BFLOAT16)
    return x.astype(dtype)


def _scalar(value: float, dtype: np.dtype[Any]) -> Any:
    """A float attribute (a float32 in the model) cast to ``dtype``, rounded once."""
    return np.asarray(np.float32(value)).astype(dtype)[()]


def _split_heads(x: Array, num_heads: int | None) -> Array:
    """(batch, seq, heads * size) -> (batch, heads, seq, size); 4-D inputs pass through."""
    if x.ndim == 4:
        return x
    if not num_heads:
        raise ValueError("3-D Attention inputs need q_num_heads and kv_num_heads")
    batch, seq, hidden = x.shape
    return x.reshape(batch, seq, num_heads, hidden // num_heads).transpose(0, 2, 1, 3)


def _attention_bias(
    attn_mask: Array | None,
    q_len: int,
    kv_len: int,
    offset: int | Array,
    is_causal: int,
    left_window: int,
    right_window: int,
    nonpad_kv_seqlen: Array | None,
    dtype: np.dtype[Any],
) -> Array:
    """The additive bias (0 or -inf, plus a float mask) in ``dtype``, broadcastable to (batch,
    heads, q, kv). Adding 0 and -inf is exact in any type, so building it in the query's type from
    the mask cast once gives the body's values (which adds in the mask's type, then casts).

    ``offset`` is the number of valid keys before the query block: an int, or one per batch
    (external cache described by nonpad_kv_seqlen).
    """
    neg_inf = dtype.type(-np.inf)
    bias = np.zeros((q_len, kv_len), dtype=dtype)
    if attn_mask is not None:
        short = kv_len - attn_mask.shape[-1]
        if short > 0:  # a shorter mask is padded with 'not attended' up to the total length
            fill: Any = False if attn_mask.dtype == np.bool_ else -np.inf
            attn_mask = np.pad(attn_mask, [(0, 0)] * (attn_mask.ndim - 1) + [(0, short)], constant_values=fill)
        if attn_mask.dtype == np.bool_:
            bias = bias + np.where(attn_mask, dtype.type(0), neg_inf)
        else:
            bias = bias + (_cast(attn_mask, dtype) if numerics.is_float(attn_mask.dtype) else attn_mask.astype(dtype))
    per_batch = np.ndim(offset) > 0
    # position[..., i, j] = (i + offset) - j: how far key j lies behind query i's absolute position.
    shift = np.reshape(offset, (-1, 1, 1, 1)) if per_batch else int(offset)
    query_pos = np.arange(q_len).reshape(q_len, 1) + shift
    distance = query_pos - np.arange(kv_len).reshape(1, kv_len)
    allowed = np.ones(distance.shape, dtype=np.bool_)
    if is_causal:
        allowed &= distance >= 0
    if left_window >= 0:
        allowed &= distance <= left_window
    if right_window >= 0:
        allowed &= -distance <= right_window
    if nonpad_kv_seqlen is not None:
        valid = np.arange(kv_len) < nonpad_kv_seqlen.reshape(-1, 1, 1, 1)
        allowed = allowed & valid
    if not allowed.all():
        bias = bias + np.where(allowed, dtype.type(0), neg_inf)
    return bias


def _per_kv_head(x: Array, kv: Array) -> Array:
    """x (batch, heads, rows, n) times kv (batch, kv_heads, n, cols), query head h with kv head
    h // (heads / kv_heads) (GQA): the query heads viewed as (kv_heads, group), so K and V are
    shared rather than repeated in memory. Each element correctly rounded in x's type."""
    batch, heads, rows, n = x.shape
    kv_heads = kv.shape[1]
    grouped = numerics.matmul(x.reshape(batch, kv_heads, heads // kv_heads, rows, n), kv[:, :, None])
    return grouped.reshape(batch, heads, rows, kv.shape[-1])  # (-1 is ambiguous for an empty batch)


def _attention(
    q: Array,
    k: Array,
    v: Array,
    attn_mask: Array | None,
    past_key: Array | None,
    past_value: Array | None,
    nonpad_kv_seqlen: Array | None,
    *,
    is_causal: int,
    kv_num_heads: int | None,
    q_num_heads: int | None,
    qk_matmul_output_mode: int,
    scale: float | None,
    softcap: float,
    softmax_precision: int | None,
    left_window_size: int,
    right_window_size: int,
) -> tuple[Array, Array, Array, Array]:
    if (past_key is None) != (past_value is None):
        raise ValueError("past_key and past_value must be given together")
    if nonpad_kv_seqlen is not None and past_key is not None:
        raise ValueError("nonpad_kv_seqlen cannot be combined with past_key/past_value")
    rank = q.ndim
    dtype = q.dtype  # T1: every step of the body runs in it (the softmax in softmax_precision)
    q4 = _split_heads(q, q_num_heads)
    k4 = _split_heads(k, kv_num_heads)
    v4 = _split_heads(v, kv_num_heads)
    present_key = k4 if past_key is None else np.concatenate((past_key, k4), axis=2)
    present_value = v4 if past_value is None else np.concatenate((past_value, v4), axis=2)

    batch, heads, q_len, head_size = q4.shape
    kv_heads, kv_len = present_key.shape[1], present_key.shape[2]
    if heads % kv_heads:
        raise ValueError(f"q_num_heads ({heads}) must be a multiple of kv_num_heads ({kv_heads})")

    # Q and K are each scaled by sqrt(scale) before the product, as the spec prescribes; the body
    # computes that factor in float32 (1 / sqrt(head_size) by default) and casts it to T1.
    scale32 = np.float32(scale) if scale is not None else np.float32(1) / np.sqrt(np.float32(head_size))
    root = _cast(np.asarray(np.sqrt(scale32)), dtype)[()]
    scores = _per_kv_head(q4 * root, _cast(present_key, dtype).swapaxes(-1, -2) * root)
    raw_scores = scores
    if softcap > 0:
        cap = _scalar(softcap, dtype)
        scores = numerics.apply("tanh", scores / cap) * cap
    capped_scores = scores

    if past_key is not None:
        offset: int | Array = past_key.shape[2]
    elif nonpad_kv_seqlen is not None:
        offset = nonpad_kv_seqlen.astype(np.int64).reshape(-1) - q_len
    else:
        offset = 0
    bias = _attention_bias(
        attn_mask, q_len, kv_len, offset, is_causal, left_window_size, right_window_size, nonpad_kv_seqlen, dtype
    )
    biased = scores + bias
    # softmax_precision names the type the softmax runs in; the probabilities return to T1.
    softmax_dtype = dtype if softmax_precision is None else _PRECISIONS[softmax_precision]
    probs = _cast(numerics.softmax(_cast(biased, softmax_dtype), -1), dtype)
    # Rows with no attendable key (decided on the bias, not on the logits) give zeros.
    fully_masked = np.isneginf(np.max(bias, axis=-1, keepdims=True))
    if fully_masked.any():
        probs = np.where(fully_masked, dtype.type(0), probs)

    y = _per_kv_head(probs, _cast(present_value, dtype))
    if rank == 3:
        y = y.transpose(0, 2, 1, 3).reshape(batch, q_len, y.shape[1] * y.shape[3])

    qk_output = {0: raw_scores, 1: capped_scores, 2: biased, 3: probs}[qk_matmul_output_mode]
    return (
        np.ascontiguousarray(y),
        present_key.astype(q.dtype, copy=False),
        present_value.astype(v.dtype, copy=False),
        np.ascontiguousarray(qk_output),
    )


@register("Attention", 23)
@quiet
def attention_v23(
    q: Array,
    k: Array,
    v: Array,
    attn_mask: Array | None = None,
    past_key: Array | None = None,
    past_value: Array | None = None,
    *,
    is_causal: int,
    kv_num_heads: int | None,
    q_num_heads: int | None,
    qk_matmul_output_mode: int,
    scale: float | None,
    softcap: float,
    softmax_precision: int | None,
) -> tuple[Array, Array, Array, Array]:
    """ONNX Attention v23: outputs Y, present_key, present_value, qk_matmul_output."""
    return _attention(
        q, k, v, attn_mask, past_key, past_value, None,
        is_causal=is_causal, kv_num_heads=kv_num_heads, q_num_heads=q_num_heads,
        qk_matmul_output_mode=qk_matmul_output_mode, scale=scale, softcap=softcap,
        softmax_precision=softmax_precision, left_window_size=-1, right_window_size=-1,
    )  # fmt: skip


@register("Attention", 24, 25)
@quiet
def attention(
    q: Array,
    k: Array,
    v: Array,
    attn_mask: Array | None = None,
    past_key: Array | None = None,
    past_value: Array | None = None,
    nonpad_kv_seqlen: Array | None = None,
    *,
    is_causal: int,
    kv_num_heads: int | None,
    q_num_heads: int | None,
    qk_matmul_output_mode: int,
    scale: float | None,
    softcap: float,
    softmax_precision: int | None,
    left_window_size: int = -1,
    right_window_size: int = -1,
) -> tuple[Array, Array, Array, Array]:
    """ONNX Attention v24 (nonpad_kv_seqlen) and v25 (left/right sliding windows)."""
    return _attention(
        q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen,
        is_causal=is_causal, kv_num_heads=kv_num_heads, q_num_heads=q_num_heads,
        qk_matmul_output_mode=qk_matmul_output_mode, scale=scale, softcap=softcap,
        softmax_precision=softmax_precision, left_window_size=left_window_size,
        right_window_size=right_window_size,
    )  # fmt: skip


@register("RotaryEmbedding", 23)
@quiet
def rotary_embedding(
    x: Array,
    cos_cache: Array,
    sin_cache: Array,
    position_ids: Array | None = None,
    *,
    interleaved: int,
    num_heads: int | None,
    rotary_embedding_dim: int,
) -> Array:
    """ONNX RotaryEmbedding v23: rotate (part of) each head by position-dependent angles; the
    body's steps in x's type T: real = cos * x1 - sin * x2, imaginary = sin * x1 + cos * x2."""
    dtype = x.dtype
    if x.ndim == 4:  # (batch, heads, seq, size) -> (batch, seq, heads, size)
        x4 = x.transpose(0, 2, 1, 3)
    else:
        if not num_heads:
            raise ValueError("3-D RotaryEmbedding input needs num_heads")
        batch, seq, hidden = x.shape
        x4 = x.reshape(batch, seq, num_heads, hidden // num_heads)
    dim = rotary_embedding_dim or x4.shape[-1]
    if position_ids is not None:
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    if cos_cache.shape[-1] != dim // 2 or sin_cache.shape[-1] != dim // 2:
        raise ValueError(f"cos/sin cache last dimension must be rotary_embedding_dim/2 = {dim // 2}")
    # (batch, seq, dim/2) -> (batch, seq, 1, dim/2); a 2-D (seq, dim/2) cache serves every batch.
    cos = _cast(cos_cache, dtype).reshape((-1, *cos_cache.shape[-2:]))[:, :, None, :]
    sin = _cast(sin_cache, dtype).reshape((-1, *sin_cache.shape[-2:]))[:, :, None, :]
    rotated = x4[..., :dim]
    if interleaved:
        x1, x2 = rotated[..., 0::2], rotated[..., 1::2]
    else:
        x1, x2 = rotated[..., : dim // 2], rotated[..., dim // 2 :]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    out = x4.copy()
    if interleaved:
        out[..., 0:dim:2], out[..., 1:dim:2] = real, imag
    else:
        out[..., : dim // 2], out[..., dim // 2 : dim] = real, imag
    out = out.reshape(x.shape) if x.ndim == 3 else out.transpose(0, 2, 1, 3)
    return np.ascontiguousarray(out)


@register("LinearAttention", 27)
@quiet
def linear_attention(
    query: Array,
    key: Array,
    value: Array,
    past_state: Array | None = None,
    decay: Array | None = None,
    beta: Array | None = None,
    *,
    chunk_size: int,
    kv_num_heads: int,
    q_num_heads: int,
    scale: float,
    update_rule: str,
) -> tuple[Array, Array]:
    """ONNX LinearAttention v27: linear/gated/delta/gated_delta recurrences; outputs (output, present_state).

    The body's step, in float32 (float64 inputs in float64): S <- S * Exp(decay_t) (gated);
    v <- beta_t * (v_t - S^T k_t) (delta); S <- S + k_t v^T; o_t = scale * (q_t S), each product
    correctly rounded, cast to the query's type.
    """
    # The recurrence runs token by token; chunk_size is only a tuning hint for chunked kernels.
    if update_rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ValueError(f"unknown LinearAttention update_rule {update_rule!r}")
    if q_num_heads <= 0 or kv_num_heads <= 0 or q_num_heads % kv_num_heads:
        raise ValueError(f"q_num_heads ({q_num_heads}) must be a positive multiple of kv_num_heads ({kv_num_heads})")
    gated = update_rule in ("gated", "gated_delta")
    delta = update_rule in ("delta", "gated_delta")
    if gated != (decay is not None) or delta != (beta is not None):
        raise ValueError(f"update_rule {update_rule!r}: decay is {'required' if gated else 'forbidden'}, "
                         f"beta is {'required' if delta else 'forbidden'}")  # fmt: skip
    work = np.dtype(np.float64) if query.dtype == np.float64 else np.dtype(np.float32)
    batch, steps, _ = query.shape
    d_k = query.shape[-1] // q_num_heads
    d_v = value.shape[-1] // kv_num_heads
    group = q_num_heads // kv_num_heads
    q4 = _cast(_split_heads(query, q_num_heads), work)
    k4 = _cast(_split_heads(key, kv_num_heads), work)
    v4 = _cast(_split_heads(value, kv_num_heads), work)
    if decay is not None:
        # Log-decay per head (B, T, H) or per key dimension (B, T, H * d_k) -> (B, H, T, 1 or d_k).
        gate = numerics.apply("exp", _cast(_split_heads(decay, kv_num_heads), work))
    if beta is not None:  # (B, T, H) or (B, T, 1) -> (B, H or 1, T, 1)
        rate = _cast(beta.reshape(batch, steps, beta.shape[-1], 1).transpose(0, 2, 1, 3), work)
    if past_state is not None:
        state = np.array(_cast(past_state, work), copy=True)
        state_dtype = past_state.dtype
    else:
        state = np.zeros((batch, kv_num_heads, d_k, d_v), dtype=work)
        state_dtype = query.dtype
    # The body's ScaleFactor: the attribute, or Reciprocal(Sqrt(d_k)) in the work type.
    factor = work.type(np.float32(scale)) if scale else work.type(1) / np.sqrt(work.type(d_k))
    out = np.empty((batch, q_num_heads, steps, d_v), dtype=work)
    for t in range(steps):  # the recurrence is sequential in time
        k_t, v_t = k4[:, :, t], v4[:, :, t]
        if decay is not None:
            state *= gate[:, :, t, :, None]
        if beta is not None:
            # v_t <- beta_t * (v_t - S^T k_t), with S already decayed for gated_delta.
            retrieved = numerics.matmul(k_t[:, :, None, :], state)[:, :, 0]
            v_t = rate[:, :, t] * (v_t - retrieved)
        state += k_t[:, :, :, None] * v_t[:, :, None, :]  # the outer product: one rounding each
        # GQA read: query heads (kv_heads, group) share their kv head's state.
        q_t = q4[:, :, t].reshape(batch, kv_num_heads, group, d_k)
        out[:, :, t] = factor * numerics.matmul(q_t, state).reshape(batch, q_num_heads, d_v)
    output = out.transpose(0, 2, 1, 3).reshape(batch, steps, q_num_heads * d_v)
    return _cast(output, query.dtype), _cast(state, state_dtype)


@register("FlexAttention", 1, domain="ai.onnx.preview", context=True)
def flex_attention(
    ctx: KernelContext,
    q: Array,
    k: Array,
    v: Array,
    *,
    prob_mod: Any,
    scale: float | None,
    score_mod: Any,
    softmax_precision: int | None,
) -> Array:
    """ai.onnx.preview FlexAttention v1: softmax((Q K^T) * scale -> score_mod) -> prob_mod, times V.

    As the spec's function: Q and K are each scaled by sqrt(scale) (taken in float32) in their own
    dtype and multiplied there; the scores then move to the softmax precision (float32 for inputs
    narrower than float32), where the modifier subgraphs, the softmax (Softmax-13's body) and the
    product with V run; the result returns to V's dtype. Each product is correctly rounded. The
    softmax is the plain one: a row of -inf scores is NaN.
    """
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"FlexAttention needs rank-4 Q, K, V; got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
    heads, head_size = q.shape[1], q.shape[3]
    kv_heads, kv_len = k.shape[1], k.shape[2]
    if k.shape[3] != head_size or v.shape[1] != kv_heads or v.shape[2] != kv_len:
        raise ValueError(f"FlexAttention: K {list(k.shape)} and V {list(v.shape)} do not match Q {list(q.shape)}")
    if heads % kv_heads:
        raise ValueError(f"FlexAttention: q_num_heads ({heads}) must be a multiple of kv_num_heads ({kv_heads})")
    if softmax_precision is not None:
        if softmax_precision not in _PRECISIONS:
            raise ValueError(f"FlexAttention: unsupported softmax_precision {softmax_precision}")
        work = _PRECISIONS[softmax_precision]
    else:  # float64 stays float64; float32 and the half types (bfloat16 too) go to float32
        work = np.dtype(np.float64) if q.dtype == np.float64 else np.dtype(np.float32)
    root = _cast(np.sqrt(np.asarray(1 / np.sqrt(head_size) if scale is None else scale, dtype=np.float32)), q.dtype)
    with np.errstate(all="ignore"):
        scores = _cast(_per_kv_head(q * root, _cast(k, q.dtype).swapaxes(-1, -2) * root), work)
        if score_mod is not None:
            scores = _modified(ctx, "score_mod", score_mod, scores, work)
        probs = numerics.softmax(scores, -1)
        if prob_mod is not None:
            probs = _modified(ctx, "prob_mod", prob_mod, probs, work)
        return _cast(_per_kv_head(probs, _cast(v, work)), v.dtype)


def _modified(ctx: KernelContext, name: str, graph: Any, value: Array, work: np.dtype[Any]) -> Array:
    """``value`` through a FlexAttention modifier subgraph (one input, one output of its shape)."""
    outputs = ctx.run_subgraph(name, graph, [value])
    if len(outputs) != 1:
        raise ValueError(f"FlexAttention {name} must have exactly one output, it has {len(outputs)}")
    out = np.asarray(outputs[0], dtype=work)
    if out.shape != value.shape:
        raise ValueError(f"FlexAttention {name} changed the shape {list(value.shape)} to {list(out.shape)}")
    return out
