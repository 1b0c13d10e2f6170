"""RNN, GRU and LSTM on portable numerics (docs/numerics.md): every result is the step sequence the
spec line defines, in the input's type T, re-implemented here one time step at a time from the
numerics primitives; the activations are the standalone operators' functions; weights are
prepared once per weight."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from sealtrace.ops import activation, numerics, rnn
from sealtrace.ops.numerics import products

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), BF16]
SEQ, BATCH, INPUT, HIDDEN = 6, 3, 5, 4
NO_ATTRIBUTES: dict[str, Any] = {
    "activation_alpha": None,
    "activation_beta": None,
    "activations": None,
    "clip": None,
    "hidden_size": None,
}


def _random(rng: np.random.Generator, dtype: np.dtype[Any], *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(dtype)


def _bits_equal(got: tuple[np.ndarray, ...], want: tuple[np.ndarray, ...]) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()


def _times(a: np.ndarray, m: np.ndarray) -> np.ndarray:
    """One step's product a @ m^T, correctly rounded (MatMul's numerics)."""
    return numerics.matmul(a, np.ascontiguousarray(m.T))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return numerics.apply("sigmoid", x)


def _tanh(x: np.ndarray) -> np.ndarray:
    return numerics.apply("tanh", x)


def _lstm_steps(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray,
    h: np.ndarray,
    c: np.ndarray,
    p: np.ndarray | None,
) -> tuple[np.ndarray, ...]:
    """LSTM, one direction: i, f = f(((XW + HR) + P . C) + Wb) + Rb), c = g(((XW + HR) + Wb) + Rb),
    C = f . C + i . c, o = f((((XW + HR) + P . C_new) + Wb) + Rb), H = o . h(C)."""
    n = HIDDEN
    wb, rb = b[: 4 * n], b[4 * n :]
    gate = [slice(k * n, (k + 1) * n) for k in range(4)]  # i, o, f, c
    ys = []
    for t in range(x.shape[0]):
        pre = _times(x[t], w) + _times(h, r)

        def activated(
            k: int, peep: np.ndarray | None, fn: Callable[[np.ndarray], np.ndarray], pre: np.ndarray = pre
        ) -> np.ndarray:
            value = pre[:, gate[k]]
            if peep is not None:
                value = value + peep
            return fn((value + wb[gate[k]]) + rb[gate[k]])

        i = activated(0, None if p is None else p[:n] * c, _sigmoid)
        f = activated(2, None if p is None else p[2 * n :] * c, _sigmoid)
        c = f * c + i * activated(3, None, _tanh)
        o = activated(1, None if p is None else p[n : 2 * n] * c, _sigmoid)
        h = o * _tanh(c)
        ys.append(h)
    return np.stack(ys)[:, None], h[None], c[None]


@pytest.mark.parametrize("peepholes", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_lstm_is_its_step_sequence(dtype: np.dtype[Any], peepholes: bool) -> None:
    rng = np.random.default_rng(1)
    x = _random(rng, dtype, SEQ, BATCH, INPUT)
    w = _random(rng, dtype, 1, 4 * HIDDEN, INPUT, scale=0.5)
    r = _random(rng, dtype, 1, 4 * HIDDEN, HIDDEN, scale=0.5)
    b = _random(rng, dtype, 1, 8 * HIDDEN, scale=0.5)
    h0 = _random(rng, dtype, 1, BATCH, HIDDEN)
    c0 = _random(rng, dtype, 1, BATCH, HIDDEN)
    p = _random(rng, dtype, 1, 3 * HIDDEN, scale=0.5) if peepholes else None
    got = rnn.lstm(x, w, r, b, None, h0, c0, p, direction="forward", input_forget=0, **NO_ATTRIBUTES)
    want = _lstm_steps(x, w[0], r[0], b[0], h0[0], c0[0], None if p is None else p[0])
    _bits_equal(got, want)


def _gru_steps(
    x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray, h: np.ndarray, linear_before_reset: int
) -> tuple[np.ndarray, ...]:
    """GRU, one direction: z, r = f(((XW + HR) + Wb) + Rb); h = g(((XW + (r . H) Rh^T) + Rbh) + Wbh),
    or g((XW + r . (H Rh^T + Rbh)) + Wbh); H = (1 - z) . h + z . H."""
    n = HIDDEN
    wb, rb = b[: 3 * n], b[3 * n :]
    zr, hh = slice(0, 2 * n), slice(2 * n, 3 * n)
    ys = []
    for t in range(x.shape[0]):
        xw = _times(x[t], w)
        gates = _sigmoid(((xw[:, zr] + _times(h, r[zr])) + wb[zr]) + rb[zr])
        z, reset = gates[:, :n], gates[:, n:]
        if linear_before_reset:
            candidate = _tanh((xw[:, hh] + reset * (_times(h, r[hh]) + rb[hh])) + wb[hh])
        else:
            candidate = _tanh(((xw[:, hh] + _times(reset * h, r[hh])) + rb[hh]) + wb[hh])
        h = (1 - z) * candidate + z * h
        ys.append(h)
    return np.stack(ys)[:, None], h[None]


@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gru_is_its_step_sequence(dtype: np.dtype[Any], linear_before_reset: int) -> None:
    rng = np.random.default_rng(2)
    x = _random(rng, dtype, SEQ, BATCH, INPUT)
    w = _random(rng, dtype, 1, 3 * HIDDEN, INPUT, scale=0.5)
    r = _random(rng, dtype, 1, 3 * HIDDEN, HIDDEN, scale=0.5)
    b = _random(rng, dtype, 1, 6 * HIDDEN, scale=0.5)
    h0 = _random(rng, dtype, 1, BATCH, HIDDEN)
    got = rnn.gru(
        x, w, r, b, None, h0, direction="forward", linear_before_reset=linear_before_reset, **NO_ATTRIBUTES
    )
    _bits_equal(got, _gru_steps(x, w[0], r[0], b[0], h0[0], linear_before_reset))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rnn_is_its_step_sequence_in_reverse(dtype: np.dtype[Any]) -> None:
    rng = np.random.default_rng(3)
    x = _random(rng, dtype, SEQ, BATCH, INPUT)
    w = _random(rng, dtype, 1, HIDDEN, INPUT, scale=0.5)
    r = _random(rng, dtype, 1, HIDDEN, HIDDEN, scale=0.5)
    b = _random(rng, dtype, 1, 2 * HIDDEN, scale=0.5)
    h = np.zeros((BATCH, HIDDEN), dtype)
    ys = []
    for t in reversed(range(SEQ)):  # Ht = Tanh(((Xt W^T + Ht-1 R^T) + Wb) + Rb)
        h = _tanh(((_times(x[t], w[0]) + _times(h, r[0])) + b[0, :HIDDEN]) + b[0, HIDDEN:])
        ys.append(h)
    got = rnn.rnn(x, w, r, b, None, None, direction="reverse", **NO_ATTRIBUTES)
    _bits_equal(got, (np.stack(ys[::-1])[:, None], h[None]))


def test_the_whole_sequence_projection_gives_each_steps_bits() -> None:
    """A prefix of the sequence computes the same first steps, to the bit (X W^T for all steps at
    once is each element's correctly rounded value, whatever else is in the product)."""
    rng = np.random.default_rng(4)
    x = _random(rng, np.dtype(np.float32), 40, 2, 16)
    w = _random(rng, np.dtype(np.float32), 1, 4 * 8, 16, scale=0.3)
    r = _random(rng, np.dtype(np.float32), 1, 4 * 8, 8, scale=0.3)
    full = rnn.lstm(
        x, w, r, None, None, None, None, None, direction="forward", input_forget=0, **NO_ATTRIBUTES
    )
    prefix = rnn.lstm(
        x[:7], w, r, None, None, None, None, None, direction="forward", input_forget=0, **NO_ATTRIBUTES
    )
    assert full[0][:7].tobytes() == prefix[0].tobytes()


# Each RNN activation with a standalone operator: that operator's function, to the bit.
STANDALONE: list[tuple[str, list[float], list[float], Callable[[np.ndarray], np.ndarray]]] = [
    ("Relu", [], [], lambda x: activation.relu(x)),
    ("Tanh", [], [], lambda x: activation.tanh(x)),
    ("Sigmoid", [], [], lambda x: activation.sigmoid(x)),
    ("LeakyRelu", [0.3], [], lambda x: activation.leaky_relu(x, alpha=0.3)),
    ("ThresholdedRelu", [0.2], [], lambda x: activation.thresholded_relu(x, alpha=0.2)),
    ("HardSigmoid", [0.3], [0.4], lambda x: activation.hard_sigmoid(x, alpha=0.3, beta=0.4)),
    ("Elu", [0.7], [], lambda x: activation.elu(x, alpha=0.7)),
    ("Softsign", [], [], lambda x: activation.softsign(x)),
    ("Softplus", [], [], lambda x: activation.softplus(x)),
]


@pytest.mark.parametrize(
    ("name", "alphas", "betas", "standalone"), STANDALONE, ids=[s[0] for s in STANDALONE]
)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_activations_are_the_standalone_operators(
    dtype: np.dtype[Any],
    name: str,
    alphas: list[float],
    betas: list[float],
    standalone: Callable[[np.ndarray], np.ndarray],
) -> None:
    # W = I, R = 0, no bias: one step's pre-activation is X itself (a correctly rounded sum with
    # one nonzero term is that term), so Y = f(X).
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((1, 64, HIDDEN)) * 3).astype(dtype)
    x[x == 0] = dtype.type(1)
    w = np.eye(HIDDEN, dtype=dtype)[None]
    r = np.zeros((1, HIDDEN, HIDDEN), dtype)
    attributes = {
        **NO_ATTRIBUTES,
        "activations": (name,),
        "activation_alpha": tuple(alphas) or None,
        "activation_beta": tuple(betas) or None,
    }
    y, _ = rnn.rnn(x, w, r, None, None, None, direction="forward", **attributes)
    want = standalone(x[0])
    assert y[0, 0].tobytes() == np.asarray(want, dtype=dtype).tobytes()


def test_weights_are_prepared_once_per_weight() -> None:
    rng = np.random.default_rng(6)
    x = _random(rng, np.dtype(np.float32), 3, 2, 5)
    w = _random(rng, np.dtype(np.float32), 2, 4 * HIDDEN, 5)
    r = _random(rng, np.dtype(np.float32), 2, 4 * HIDDEN, HIDDEN)
    fed = rnn.lstm(
        x, w, r, None, None, None, None, None, direction="bidirectional", input_forget=0, **NO_ATTRIBUTES
    )
    prepared = products._PREPARED
    assert not any(key[0] in (id(w), id(r)) for key in prepared)  # a writable weight: per call
    w.flags.writeable = False
    r.flags.writeable = False
    first = rnn.lstm(
        x, w, r, None, None, None, None, None, direction="bidirectional", input_forget=0, **NO_ATTRIBUTES
    )
    keys = [key for key in prepared if key[0] in (id(w), id(r))]
    assert {key[0] for key in keys} == {id(w), id(r)}  # views of W and R, by their owner
    assert len({(key[0], key[1]) for key in keys}) >= 4  # two directions each
    again = rnn.lstm(
        x, w, r, None, None, None, None, None, direction="bidirectional", input_forget=0, **NO_ATTRIBUTES
    )
    _bits_equal(first, fed)
    _bits_equal(again, fed)
    del w, r
    gc.collect()
    assert not any(key in prepared for key in keys)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_native_numerics_stay_close_to_portable(op: str) -> None:
    rng = np.random.default_rng(7)
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    x = _random(rng, np.dtype(np.float32), SEQ, BATCH, INPUT)
    w = _random(rng, np.dtype(np.float32), 2, gates * HIDDEN, INPUT, scale=0.5)
    r = _random(rng, np.dtype(np.float32), 2, gates * HIDDEN, HIDDEN, scale=0.5)
    b = _random(rng, np.dtype(np.float32), 2, 2 * gates * HIDDEN, scale=0.5)
    kernel = {"RNN": rnn.rnn, "GRU": rnn.gru, "LSTM": rnn.lstm}[op]
    extra: dict[str, Any] = {"input_forget": 0} if op == "LSTM" else {}

    def run() -> tuple[np.ndarray, ...]:
        return kernel(x, w, r, b, direction="bidirectional", **extra, **NO_ATTRIBUTES)

    portable = run()
    with numerics.numerics_mode(numerics.NATIVE):
        native = run()
    for p, n in zip(portable, native, strict=True):
        assert p.dtype == n.dtype
        np.testing.assert_allclose(n, p, rtol=1e-5, atol=1e-6)
