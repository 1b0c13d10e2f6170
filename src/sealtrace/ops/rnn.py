"""Recurrent networks: RNN, GRU, LSTM (every historic version of the default domain).

All three share one shape: the input projection of every time step is a single product
(``X W^T`` over the whole sequence), and only the recurrent product ``H R^T`` runs in a Python
loop over time. ``layout`` 1 (batch-major) is handled by transposing in and out of the
time-major layout 0. ``sequence_lens`` is honoured as ONNX Runtime does: a batch entry stops
updating its state after its length, its ``Y`` rows past the length are zero, and the reverse
direction walks each entry's own valid prefix backwards.

Numerics (docs/numerics.md): every step runs in the input's type T, half precision included.
Each product (``X W^T``, ``H R^T``, GRU's ``(r . H) Rh^T``) is correctly rounded element by
element (``numerics``), so computing ``X W^T`` for every step at once gives the bits a per-step
product would. A gate's pre-activation is then a fixed left-to-right sequence of IEEE additions
in T, in the order of the ONNX formulas:

- RNN, GRU z and r, LSTM c: ``((XW + HR) + Wb) + Rb``;
- LSTM i and f: ``(((XW + HR) + P . C[t-1]) + Wb) + Rb``, o: the same with ``P . C[t]``;
- GRU h: ``((XW + (r . H) Rh^T) + Rbh) + Wbh``, or with linear_before_reset
  ``(XW + r . (H Rh^T + Rbh)) + Wbh``.

(An absent B adds nothing: adding zeros would not change a value, since no sum of correctly
rounded products is -0.) ``clip`` clamps that sum; the activations are the ONNX operators'
functions (``_make_activation``); the cell updates are IEEE operations in T:
``C = f . C + i . c``, ``H = o . h(C)`` (LSTM), ``H = (1 - z) . h + z . H`` (GRU).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sealtrace.ops import numerics
from sealtrace.ops._values import take_along_axis
from sealtrace.ops.registry import quiet, register

Activation = Callable[[np.ndarray], np.ndarray]

# Whether each activation consumes an alpha/beta from activation_alpha/activation_beta, and the
# defaults used when the lists run out: those of the ONNX operator of the same name (the spec's
# rule). ONNX Runtime consumes the lists the same way, per function that takes a parameter, and
# agrees on the LeakyRelu, HardSigmoid and Elu defaults; for ThresholdedRelu, Affine and ScaledTanh
# without values it uses 0.
_PARAMETERS: dict[str, tuple[bool, bool, float, float]] = {
    "relu": (False, False, 0.0, 0.0),
    "tanh": (False, False, 0.0, 0.0),
    "sigmoid": (False, False, 0.0, 0.0),
    "affine": (True, True, 1.0, 0.0),
    "leakyrelu": (True, False, 0.01, 0.0),
    "thresholdedrelu": (True, False, 1.0, 0.0),
    "scaledtanh": (True, True, 1.0, 1.0),
    "hardsigmoid": (True, True, 0.2, 0.5),
    "elu": (True, False, 1.0, 0.0),
    "softsign": (False, False, 0.0, 0.0),
    "softplus": (False, False, 0.0, 0.0),
}


def _scalar(value: float, dtype: np.dtype[Any]) -> Any:
    """An attribute value (a float32 in the model) in the computation's type T, rounded once."""
    return np.asarray(np.float32(value)).astype(dtype)[()]


def _attribute(value: float) -> float:
    """An attribute value at its own value (a float32 in the model), for numerics' parameters."""
    return float(np.float32(value))


def _relu(x: np.ndarray) -> np.ndarray:
    # + 0 makes SIMD max's zero +0 on every machine, as the Relu operator does
    out = np.maximum(x, x.dtype.type(0))
    out += x.dtype.type(0)
    return out


def _tanh(x: np.ndarray) -> np.ndarray:
    return numerics.apply("tanh", x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return numerics.apply("sigmoid", x)


def _softplus(x: np.ndarray) -> np.ndarray:
    return numerics.apply("softplus", x)


def _softsign(x: np.ndarray) -> np.ndarray:
    denominator = np.abs(x)
    denominator += x.dtype.type(1)
    return np.divide(x, denominator, out=denominator)


def _make_activation(name: str, alpha: float, beta: float) -> Activation:
    """The activation ``name`` in the input's type T: the function of the ONNX operator of that
    name (Sigmoid, Tanh, Softplus and Elu correctly rounded by numerics, the others exact IEEE
    steps in T with alpha and beta rounded to T); Affine and ScaledTanh, which have no operator,
    as alpha * x + beta and alpha * Tanh(beta * x), each step in T."""
    kind = name.lower()
    if kind == "relu":
        return _relu
    if kind == "tanh":
        return _tanh
    if kind == "sigmoid":
        return _sigmoid
    if kind == "affine":
        return lambda x: _scalar(alpha, x.dtype) * x + _scalar(beta, x.dtype)
    if kind == "leakyrelu":
        return lambda x: np.where(x < 0, x * _scalar(alpha, x.dtype), x)
    if kind == "thresholdedrelu":
        return lambda x: np.where(x > _scalar(alpha, x.dtype), x, x.dtype.type(0))
    if kind == "scaledtanh":
        return lambda x: _scalar(alpha, x.dtype) * numerics.apply("tanh", _scalar(beta, x.dtype) * x)
    if kind == "hardsigmoid":

        def hard_sigmoid(x: np.ndarray) -> np.ndarray:
            out = x * _scalar(alpha, x.dtype)
            out += _scalar(beta, x.dtype)
            np.clip(out, x.dtype.type(0), x.dtype.type(1), out=out)
            out += x.dtype.type(0)  # clip's SIMD max may return -0 or +0 at 0: +0 everywhere
            return out

        return hard_sigmoid
    if kind == "elu":
        parameter = _attribute(alpha)
        return lambda x: numerics.apply("elu", x, parameter)
    if kind == "softsign":
        return _softsign
    if kind == "softplus":
        return _softplus
    raise ValueError(f"unknown recurrent activation {name!r}")


def _activations(
    names: Sequence[str] | None,
    defaults: Sequence[str],
    num_directions: int,
    alphas: Sequence[float] | None,
    betas: Sequence[float] | None,
) -> list[list[Activation]]:
    """One list of activation functions per direction, alphas/betas consumed in order."""
    return _activations_of(
        None if names is None else tuple(names),
        tuple(defaults),
        num_directions,
        None if alphas is None else tuple(alphas),
        None if betas is None else tuple(betas),
    )


@functools.lru_cache(maxsize=256)  # the same few per model, asked for on every run
def _activations_of(
    names: tuple[str, ...] | None,
    defaults: tuple[str, ...],
    num_directions: int,
    alphas: tuple[float, ...] | None,
    betas: tuple[float, ...] | None,
) -> list[list[Activation]]:
    per_direction = len(defaults)
    chosen = list(names) if names else list(defaults) * num_directions
    if len(chosen) == per_direction and num_directions == 2:
        chosen = chosen * 2  # one direction's worth given for a bidirectional op: both use it
    if len(chosen) == 2 * per_direction and num_directions == 1:
        chosen = chosen[:per_direction]  # RNN's schema default lists two even for one direction
    if len(chosen) != per_direction * num_directions:
        raise ValueError(f"{len(chosen)} activations given, expected {per_direction * num_directions}")
    alpha_left = list(alphas or ())
    beta_left = list(betas or ())
    functions: list[Activation] = []
    for name in chosen:
        if name.lower() not in _PARAMETERS:
            raise ValueError(f"unknown recurrent activation {name!r}")
        takes_alpha, takes_beta, alpha, beta = _PARAMETERS[name.lower()]
        if takes_alpha and alpha_left:
            alpha = alpha_left.pop(0)
        if takes_beta and beta_left:
            beta = beta_left.pop(0)
        functions.append(_make_activation(name, alpha, beta))
    return [functions[d * per_direction : (d + 1) * per_direction] for d in range(num_directions)]


def _clipper(clip: float | None) -> Callable[[np.ndarray], np.ndarray]:
    if clip is None or clip <= 0:
        return lambda x: x
    return lambda x: np.clip(x, _scalar(-clip, x.dtype), _scalar(clip, x.dtype))


def _times_transposed(
    m: np.ndarray, d: int, dtype: np.dtype[Any], rows: slice = slice(None)
) -> Callable[[np.ndarray], np.ndarray]:
    """``a -> a @ m[d][rows]^T``, each element correctly rounded in ``dtype`` (numerics.gemm, which
    prepares a read-only weight's float64 copy and column norms once)."""
    part = m[d][rows]
    if part.dtype != dtype:
        part = np.asarray(part, dtype=dtype)
    return lambda a: numerics.gemm(a, part, None, 1.0, 0.0, trans_b=True)


class _Recurrence:
    """The parts every recurrent op shares: layout, directions, sequence lengths, dtypes."""

    def __init__(
        self,
        x: np.ndarray,
        w: np.ndarray,
        r: np.ndarray,
        sequence_lens: np.ndarray | None,
        initial_states: Sequence[np.ndarray | None],
        direction: str,
        layout: int,
    ) -> None:
        self.dtype = x.dtype
        if layout == 1:
            x = np.swapaxes(x, 0, 1)
        self.x = np.ascontiguousarray(x)
        self.seq_len, self.batch, _ = self.x.shape
        self.hidden = r.shape[-1]
        direction = "forward" if direction == "foward" else direction  # GRU-1's schema default is misspelt
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ValueError(f"unknown direction {direction!r}")
        self.directions = ["forward", "reverse"] if direction == "bidirectional" else [direction]
        if w.shape[0] != len(self.directions):
            raise ValueError(
                f"W has {w.shape[0]} directions, direction={direction!r} needs {len(self.directions)}"
            )
        self.layout = layout
        self.initial = [self._state(s) for s in initial_states]
        # Lengths are only honoured when some entry is shorter than the whole sequence.
        self.lengths: np.ndarray | None = None
        if sequence_lens is not None:
            lengths = np.asarray(sequence_lens, dtype=np.int64).reshape(-1)
            if lengths.shape[0] != self.batch:
                raise ValueError(f"sequence_lens has {lengths.shape[0]} entries for batch {self.batch}")
            if np.any(lengths < 0) or np.any(lengths > self.seq_len):
                raise ValueError(f"sequence_lens {lengths.tolist()} outside [0, {self.seq_len}]")
            if np.any(lengths != self.seq_len):
                self.lengths = lengths

    def _state(self, state: np.ndarray | None) -> np.ndarray:
        shape = (len(self.directions), self.batch, self.hidden)
        if state is None:
            return np.zeros(shape, dtype=self.dtype)
        if self.layout == 1:
            state = np.swapaxes(state, 0, 1)
        state = np.asarray(state, dtype=self.dtype)
        # Read only (never written: each step makes new state arrays).
        return state if state.shape == shape else np.broadcast_to(state, shape)

    def time_order(self, d: int) -> np.ndarray | None:
        """Per (step, batch) the time index the direction reads at that step; None = identity."""
        if self.directions[d] == "forward":
            return None
        steps = np.arange(self.seq_len)[:, None]
        if self.lengths is None:
            return np.broadcast_to(self.seq_len - 1 - steps, (self.seq_len, self.batch))
        lengths = self.lengths[None, :]
        # Walk each entry's valid prefix backwards; padded steps map to themselves (and are masked).
        return np.where(steps < lengths, lengths - 1 - steps, steps)

    def project(self, w: np.ndarray, d: int) -> np.ndarray:
        """X W[d]^T for every time step at once (each element correctly rounded, so the same as one
        step at a time), in the order direction ``d`` reads them."""
        flat = _times_transposed(w, d, self.dtype)(self.x.reshape(-1, self.x.shape[-1]))
        projected = flat.reshape(self.seq_len, self.batch, -1)
        order = self.time_order(d)
        if order is not None:
            projected = take_along_axis(projected, order[:, :, None], axis=0)
        return projected

    def mask(self, t: int) -> np.ndarray | None:
        """Which batch entries are still running at step ``t`` (None: all of them)."""
        if self.lengths is None:
            return None
        return (t < self.lengths)[:, None]

    def place(self, ys: np.ndarray, d: int) -> np.ndarray:
        """Put the per-step outputs of direction ``d`` back at the time positions they belong to."""
        order = self.time_order(d)
        if order is None:
            return ys
        return take_along_axis(ys, order[:, :, None], axis=0)

    def outputs(self, ys: list[np.ndarray], finals: Sequence[list[np.ndarray]]) -> tuple[np.ndarray, ...]:
        """Y [seq, dirs, batch, hidden] and the final states, in the op's layout and dtype."""
        if len(ys) == 1:  # one direction: a new axis, not np.stack's copy (microseconds per call)
            y = ys[0][:, None]
            states = [f[0][None] for f in finals]
        else:
            y = np.stack(ys, axis=1)
            states = [np.stack(f, axis=0) for f in finals]
        if self.lengths is not None and np.any(self.lengths == 0):
            # ONNX Runtime reports zero final states (not the initial ones) for empty entries.
            states = [np.where((self.lengths == 0)[None, :, None], s.dtype.type(0), s) for s in states]
        if self.layout == 1:
            y = np.transpose(y, (2, 0, 1, 3))
            states = [np.swapaxes(s, 0, 1) for s in states]
        return tuple(np.ascontiguousarray(v, dtype=self.dtype) for v in (y, *states))


def _step(mask: np.ndarray | None, new: np.ndarray, old: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(next state, this step's Y row) given which entries are still running."""
    if mask is None:
        return new, new
    return np.where(mask, new, old), np.where(mask, new, new.dtype.type(0))


def _biases(
    b: np.ndarray | None, gates: int, hidden: int, d: int, dtype: np.dtype[Any]
) -> tuple[np.ndarray, np.ndarray] | None:
    """(Wb, Rb) of direction ``d``; None when B is absent (adding zeros changes nothing)."""
    if b is None:
        return None
    row = np.asarray(b[d], dtype=dtype)
    return row[: gates * hidden], row[gates * hidden :]


def _plus_biases(
    pre: np.ndarray, biases: tuple[np.ndarray, np.ndarray] | None, part: slice = slice(None)
) -> np.ndarray:
    """``(pre + Wb) + Rb`` (the ``part`` of the biases that ``pre`` holds), in place on ``pre``."""
    if biases is not None:
        pre += biases[0][part]
        pre += biases[1][part]
    return pre


@register("RNN", 1, 7, 14, 22)
@quiet
def rnn(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    *,
    activation_alpha: tuple[float, ...] | None,
    activation_beta: tuple[float, ...] | None,
    activations: tuple[str, ...] | None,
    clip: float | None,
    direction: str,
    hidden_size: int | None,
    layout: int = 0,
    output_sequence: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """ONNX RNN (versions 1, 7, 14, 22): Ht = f(((Xt W^T + Ht-1 R^T) + Wb) + Rb)."""
    rec = _Recurrence(x, w, r, sequence_lens, [initial_h], direction, layout)
    acts = _activations(activations, ("Tanh",), len(rec.directions), activation_alpha, activation_beta)
    clipped = _clipper(clip)
    ys: list[np.ndarray] = []
    final_h: list[np.ndarray] = []
    for d in range(len(rec.directions)):
        biases = _biases(b, 1, rec.hidden, d, rec.dtype)
        xw = rec.project(w, d)
        times_r = _times_transposed(r, d, rec.dtype)
        f = acts[d][0]
        h = rec.initial[0][d]
        y = np.empty((rec.seq_len, rec.batch, rec.hidden), dtype=rec.dtype)
        for t in range(rec.seq_len):
            pre = _plus_biases(xw[t] + times_r(h), biases)
            h, y[t] = _step(rec.mask(t), f(clipped(pre)), h)
        ys.append(rec.place(y, d))
        final_h.append(h)
    y_out, h_out = rec.outputs(ys, [final_h])
    return y_out, h_out


@register("GRU", 1, 3, 7, 14, 22)
@quiet
def gru(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    *,
    activation_alpha: tuple[float, ...] | None,
    activation_beta: tuple[float, ...] | None,
    activations: tuple[str, ...] | None,
    clip: float | None,
    direction: str,
    hidden_size: int | None,
    layout: int = 0,
    linear_before_reset: int = 0,
    output_sequence: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """ONNX GRU (versions 1, 3, 7, 14, 22), gates z, r, h; linear_before_reset from version 3."""
    rec = _Recurrence(x, w, r, sequence_lens, [initial_h], direction, layout)
    acts = _activations(
        activations, ("Sigmoid", "Tanh"), len(rec.directions), activation_alpha, activation_beta
    )
    clipped = _clipper(clip)
    n = rec.hidden
    zr, hh = slice(0, 2 * n), slice(2 * n, 3 * n)
    ys: list[np.ndarray] = []
    final_h: list[np.ndarray] = []
    for d in range(len(rec.directions)):
        biases = _biases(b, 3, n, d, rec.dtype)
        xw = rec.project(w, d)
        if linear_before_reset:
            times_r_all = _times_transposed(r, d, rec.dtype)
        else:
            times_r_zr, times_r_h = _times_transposed(r, d, rec.dtype, zr), _times_transposed(r, d, rec.dtype, hh)
        f, g = acts[d]
        h = rec.initial[0][d]
        y = np.empty((rec.seq_len, rec.batch, n), dtype=rec.dtype)
        for t in range(rec.seq_len):
            xw_t = xw[t]
            if linear_before_reset:
                hr = times_r_all(h)
                z_r = f(clipped(_plus_biases(xw_t[:, zr] + hr[:, zr], biases, zr)))
                z, reset = z_r[:, :n], z_r[:, n:]
                inner = hr[:, hh]
                if biases is not None:
                    inner = inner + biases[1][hh]  # H Rh^T + Rbh
                pre_h = xw_t[:, hh] + reset * inner
                if biases is not None:
                    pre_h += biases[0][hh]  # + Wbh
            else:
                z_r = f(clipped(_plus_biases(xw_t[:, zr] + times_r_zr(h), biases, zr)))
                z, reset = z_r[:, :n], z_r[:, n:]
                pre_h = xw_t[:, hh] + times_r_h(reset * h)
                if biases is not None:
                    pre_h += biases[1][hh]  # + Rbh, then + Wbh (the spec's order)
                    pre_h += biases[0][hh]
            candidate = g(clipped(pre_h))
            h, y[t] = _step(rec.mask(t), (z.dtype.type(1) - z) * candidate + z * h, h)
        ys.append(rec.place(y, d))
        final_h.append(h)
    y_out, h_out = rec.outputs(ys, [final_h])
    return y_out, h_out


@register("LSTM", 1, 7, 14, 22)
@quiet
def lstm(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None = None,
    sequence_lens: np.ndarray | None = None,
    initial_h: np.ndarray | None = None,
    initial_c: np.ndarray | None = None,
    p: np.ndarray | None = None,
    *,
    activation_alpha: tuple[float, ...] | None,
    activation_beta: tuple[float, ...] | None,
    activations: tuple[str, ...] | None,
    clip: float | None,
    direction: str,
    hidden_size: int | None,
    input_forget: int,
    layout: int = 0,
    output_sequence: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX LSTM (versions 1, 7, 14, 22), gates i, o, f, c, peepholes i, o, f."""
    rec = _Recurrence(x, w, r, sequence_lens, [initial_h, initial_c], direction, layout)
    acts = _activations(
        activations, ("Sigmoid", "Tanh", "Tanh"), len(rec.directions), activation_alpha, activation_beta
    )
    clipped = _clipper(clip)
    n = rec.hidden
    gate_i, gate_o, gate_f, gate_c = (slice(k * n, (k + 1) * n) for k in range(4))
    ys: list[np.ndarray] = []
    final_h: list[np.ndarray] = []
    final_c: list[np.ndarray] = []
    for d in range(len(rec.directions)):
        biases = _biases(b, 4, n, d, rec.dtype)
        xw = rec.project(w, d)
        times_r = _times_transposed(r, d, rec.dtype)
        peep = None if p is None else np.asarray(p[d], dtype=rec.dtype)
        f, g, h_act = acts[d]
        h = rec.initial[0][d]
        c = rec.initial[1][d]
        y = np.empty((rec.seq_len, rec.batch, n), dtype=rec.dtype)
        for t in range(rec.seq_len):
            pre = xw[t] + times_r(h)  # XW + HR, all four gates
            if peep is None and not input_forget:
                # The common LSTM: i, o and f are adjacent and share f, so one call activates all
                # three (elementwise, so the same values as three calls, for a third of the calls).
                _plus_biases(pre, biases)
                iof = f(clipped(pre[:, : 3 * n]))
                c_new = iof[:, gate_f] * c + iof[:, gate_i] * g(clipped(pre[:, gate_c]))
                h_new = iof[:, gate_o] * h_act(c_new)
            else:
                i_in, f_in = pre[:, gate_i], pre[:, gate_f]
                if peep is not None:
                    i_in = i_in + peep[gate_i] * c
                    f_in = f_in + peep[gate_f] * c
                i_gate = f(clipped(_plus_biases(i_in, biases, gate_i)))
                # input_forget couples the gates as ONNX Runtime does: f = 1 - i.
                f_gate = (
                    i_gate.dtype.type(1) - i_gate if input_forget else f(clipped(_plus_biases(f_in, biases, gate_f)))
                )
                c_new = f_gate * c + i_gate * g(clipped(_plus_biases(pre[:, gate_c], biases, gate_c)))
                o_in = pre[:, gate_o]
                if peep is not None:
                    o_in = o_in + peep[gate_o] * c_new
                h_new = f(clipped(_plus_biases(o_in, biases, gate_o))) * h_act(c_new)
            mask = rec.mask(t)
            h, y[t] = _step(mask, h_new, h)
            c = c_new if mask is None else np.where(mask, c_new, c)
        ys.append(rec.place(y, d))
        final_h.append(h)
        final_c.append(c)
    y_out, h_out, c_out = rec.outputs(ys, [final_h, final_c])
    return y_out, h_out, c_out
