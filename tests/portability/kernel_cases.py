"""Kernel cases of RNN/GRU/LSTM, Attention (and RotaryEmbedding, LinearAttention, FlexAttention), the
losses and DFT/STFT/windows/MelWeightMatrix in float32, float16, bfloat16 and float64, beyond what
ONNX's node test suite holds. Their inputs come from a seeded NumPy generator (PCG64's stream and
its normal draws are the same in every NumPy since 1.17), so each environment under test makes
them itself; the portability tests compare their digests like the other cases' (runs.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
NO_ATTRIBUTES: dict[str, Any] = {
    "activation_alpha": None,
    "activation_beta": None,
    "activations": None,
    "clip": None,
    "hidden_size": None,
}


def digest(outputs: Any) -> str:
    h = hashlib.sha256()
    for value in outputs if isinstance(outputs, tuple | list) else (outputs,):
        value = np.ascontiguousarray(value)
        h.update(f"{value.dtype}{value.shape}".encode())
        h.update(value.tobytes())
    return h.hexdigest()


def cases() -> Iterator[tuple[str, Any]]:
    """(name, outputs) of every case, computed in order."""
    from sealtrace import Session
    from sealtrace.ops import attention, loss, rnn, signal
    from tests.ops.oneop import one_node_model

    rng = np.random.default_rng(1234)

    def r(*shape: int, scale: float = 1.0, dtype: Any = np.float32) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(dtype)

    for dt in (np.dtype(np.float32), np.dtype(np.float16), BF16):
        seq, batch, inputs, hidden = 12, 4, 96, 128
        x, h0, c0 = (
            r(seq, batch, inputs, dtype=dt),
            r(2, batch, hidden, dtype=dt),
            r(2, batch, hidden, dtype=dt),
        )
        w4, r4 = r(2, 4 * hidden, inputs, scale=0.1, dtype=dt), r(2, 4 * hidden, hidden, scale=0.1, dtype=dt)
        b4, p = r(2, 8 * hidden, scale=0.1, dtype=dt), r(2, 3 * hidden, scale=0.1, dtype=dt)
        w3, r3 = r(2, 3 * hidden, inputs, scale=0.1, dtype=dt), r(2, 3 * hidden, hidden, scale=0.1, dtype=dt)
        b3 = r(2, 6 * hidden, scale=0.1, dtype=dt)
        w1, r1, b1 = (
            r(1, hidden, inputs, scale=0.1, dtype=dt),
            r(1, hidden, hidden, scale=0.1, dtype=dt),
            r(1, 2 * hidden, dtype=dt),
        )
        lengths = np.array([12, 7, 3, 12], np.int32)
        yield (
            f"lstm/{dt}",
            rnn.lstm(
                x,
                w4,
                r4,
                b4,
                lengths,
                h0,
                c0,
                None,
                direction="bidirectional",
                input_forget=0,
                **NO_ATTRIBUTES,
            ),
        )
        yield (
            f"lstm-peepholes/{dt}",
            rnn.lstm(
                x,
                w4[:1],
                r4[:1],
                b4[:1],
                None,
                h0[:1],
                c0[:1],
                p[:1],
                direction="forward",
                input_forget=0,
                **{**NO_ATTRIBUTES, "clip": 3.0},
            ),
        )
        for lbr in (0, 1):
            yield (
                f"gru-lbr{lbr}/{dt}",
                rnn.gru(
                    x,
                    w3,
                    r3,
                    b3,
                    lengths,
                    h0,
                    direction="bidirectional",
                    linear_before_reset=lbr,
                    **NO_ATTRIBUTES,
                ),
            )
        yield (
            f"rnn-elu/{dt}",
            rnn.rnn(
                x, w1, r1, b1, None, h0[:1], direction="forward", **{**NO_ATTRIBUTES, "activations": ("Elu",)}
            ),
        )

        q, k, v = r(2, 8, 16, 64, dtype=dt), r(2, 2, 16, 64, dtype=dt), r(2, 2, 16, 64, dtype=dt)
        past_k, past_v, mask = r(2, 2, 20, 64, dtype=dt), r(2, 2, 20, 64, dtype=dt), r(16, 36, dtype=dt)
        attrs: dict[str, Any] = {
            "is_causal": 1,
            "kv_num_heads": None,
            "q_num_heads": None,
            "qk_matmul_output_mode": 3,
            "scale": None,
            "softcap": 0.0,
            "softmax_precision": None,
        }
        yield f"attention/{dt}", attention.attention_v23(q, k, v, mask, past_k, past_v, **attrs)
        yield (
            f"attention-softcap/{dt}",
            attention.attention_v23(
                q, k, v, **{**attrs, "softcap": 5.0, "qk_matmul_output_mode": 1, "softmax_precision": 1}
            ),
        )
        cos, sin, positions = r(40, 32, dtype=dt), r(40, 32, dtype=dt), rng.integers(0, 40, (2, 16))
        yield (
            f"rotary/{dt}",
            attention.rotary_embedding(
                q, cos, sin, positions, interleaved=0, num_heads=None, rotary_embedding_dim=0
            ),
        )
        lq, lk, lv = r(2, 10, 8 * 16, dtype=dt), r(2, 10, 2 * 16, dtype=dt), r(2, 10, 2 * 16, dtype=dt)
        decay, beta = r(2, 10, 2, scale=0.1, dtype=dt), rng.random((2, 10, 2)).astype(dt)
        yield (
            f"linear-attention/{dt}",
            attention.linear_attention(
                lq,
                lk,
                lv,
                None,
                decay,
                beta,
                chunk_size=64,
                kv_num_heads=2,
                q_num_heads=8,
                scale=0.0,
                update_rule="gated_delta",
            ),
        )
        if dt != BF16:  # onnx has no bfloat16 input in one_node_model's models for ORT; ours is enough
            flex = one_node_model("FlexAttention", {"Q": q, "K": k, "V": v}, 1, 1, "ai.onnx.preview")
            yield f"flex-attention/{dt}", Session(flex).run(None, {"Q": q, "K": k, "V": v})

        scores, labels = r(6, 10, 7, dtype=dt), rng.integers(0, 10, (6, 7))
        weights = (rng.random(10) + 0.5).astype(dt)
        for reduction in ("none", "sum", "mean"):
            yield (
                f"sce-{reduction}/{dt}",
                loss.softmax_cross_entropy_loss(scores, labels, weights, ignore_index=3, reduction=reduction),
            )
            yield (
                f"nll-{reduction}/{dt}",
                loss.negative_log_likelihood_loss(
                    scores, labels, None, ignore_index=None, reduction=reduction
                ),
            )

        real, complex_ = r(3, 400, 1, dtype=dt), r(3, 256, 2, dtype=dt)
        yield f"rfft/{dt}", signal.dft_17(real, None, axis=1, inverse=0, onesided=1)
        yield f"dft/{dt}", signal.dft_17(complex_, None, axis=1, inverse=0, onesided=0)
        yield f"idft/{dt}", signal.dft_17(complex_, np.array(200), axis=1, inverse=1, onesided=0)
        yield f"irfft/{dt}", signal.dft_17(complex_[:, :129], np.array(256), axis=1, inverse=1, onesided=1)
        audio = r(2, 4000, 1, dtype=dt)
        window = signal.hann_window(np.array(400), output_datatype=1, periodic=1).astype(dt)
        yield f"stft/{dt}", signal.stft(audio, np.array(160), window, None, onesided=1)
    for op in (signal.hann_window, signal.hamming_window, signal.blackman_window):
        yield op.__name__, op(np.array(512), output_datatype=1, periodic=0)
    yield (
        "mel",
        signal.mel_weight_matrix(
            np.array(80),
            np.array(512),
            np.array(16000),
            np.array(20.0, np.float32),
            np.array(8000.0, np.float32),
            output_datatype=1,
        ),
    )
    x64 = rng.standard_normal((2, 32, 1))
    yield "dft/float64", signal.dft_17(x64, None, axis=1, inverse=0, onesided=0)
    lstm64 = (r(4, 2, 8, dtype=np.float64), r(1, 24, 8, dtype=np.float64), r(1, 24, 6, dtype=np.float64))
    yield (
        "lstm/float64",
        rnn.lstm(*lstm64, None, None, None, None, None, direction="forward", input_forget=0, **NO_ATTRIBUTES),
    )


def kernel_digests() -> dict[str, str]:
    """{"kernel/NAME": digest of the outputs} of every case."""
    with np.errstate(all="ignore"):
        return {f"kernel/{name}": digest(outputs) for name, outputs in cases()}
