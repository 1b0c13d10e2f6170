"""Recurrent networks: RNN, GRU, LSTM (every historic version of the default domain).

All three share one shape: the input projection of every time step is a single matmul
(``X @ W^T`` over the whole sequence), and only the recurrent matmul ``H @ R^T`` runs in a Python
loop over time. ``layout`` 1 (batch-major) is handled by transposing in and out of the
time-major layout 0. ``sequence_lens`` is honoured as ONNX Runtime does: a batch entry stops
updating its state after its length, its ``Y`` rows past the length are zero, and the reverse
direction walks each entry's own valid prefix backwards.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

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


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp(-x) overflows to inf for very negative x: 1/inf = 0 is right (the kernels are quiet)
    return 1 / (1 + np.exp(-x))


def _make_activation(name: str, alpha: float, beta: float) -> Activation:
    kind = name.lower()
    if kind == "relu":
        return lambda x: np.maximum(x, 0)
    if kind == "tanh":
        return np.tanh
    if kind == "sigmoid":
        return _sigmoid
    if kind == "affine":
        return lambda x: x.dtype.type(alpha) * x + x.dtype.type(beta)
    if kind == "leakyrelu":
        return lambda x: np.where(x >= 0, x, x.dtype.type(alpha) * x)
    if kind == "thresholdedrelu":
        return lambda x: x * (x >= x.dtype.type(alpha))
    if kind == "scaledtanh":
        return lambda x: x.dtype.type(alpha) * np.tanh(x.dtype.type(beta) * x)
    if kind == "hardsigmoid":
        return lambda x: np.clip(x.dtype.type(alpha) * x + x.dtype.type(beta), 0, 1)
    if kind == "elu":

        def elu(x: np.ndarray) -> np.ndarray:
            # exp of large positive x overflows, and the where discards it (the kernels are quiet)
            return np.where(x >= 0, x, x.dtype.type(alpha) * (np.exp(x) - 1))

        return elu
    if kind == "softsign":
        return lambda x: x / (1 + np.abs(x))
    if kind == "softplus":
        return lambda x: np.logaddexp(x.dtype.type(0), x)
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
    return lambda x: np.clip(x, x.dtype.type(-clip), x.dtype.type(clip))


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
        # Half-precision types are computed in float32 and rounded once at the end.
        self.compute = np.dtype(np.float32) if x.dtype.itemsize < 4 else x.dtype
        if layout == 1:
            x = np.swapaxes(x, 0, 1)
        self.x = np.ascontiguousarray(x, dtype=self.compute)
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
            return np.zeros(shape, dtype=self.compute)
        if self.layout == 1:
            state = np.swapaxes(state, 0, 1)
        state = np.asarray(state, dtype=self.compute)
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

    def project(self, w: np.ndarray, bias: np.ndarray | None, d: int) -> np.ndarray:
        """X @ W^T (+ bias) for every time step at once, in the order direction ``d`` reads them."""
        flat = self.x.reshape(-1, self.x.shape[-1]) @ np.asarray(w, dtype=self.compute).T
        if bias is not None:
            flat += bias
        projected = flat.reshape(self.seq_len, self.batch, -1)
        order = self.time_order(d)
        if order is not None:
            projected = np.take_along_axis(projected, order[:, :, None], axis=0)
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
        return np.take_along_axis(ys, order[:, :, None], axis=0)

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
            states = [np.where((self.lengths == 0)[None, :, None], 0, s).astype(s.dtype) for s in states]
        if self.layout == 1:
            y = np.transpose(y, (2, 0, 1, 3))
            states = [np.swapaxes(s, 0, 1) for s in states]
        return tuple(np.ascontiguousarray(v, dtype=self.dtype) for v in (y, *states))


# From this many time steps on, R^T is copied into a contiguous array before the loop: the copy
# costs about as much as 90 per-step products are slowed by reading the transposed view (measured
# with hidden size 128), so a short sequence (Silero VAD runs one step per call) uses the view.
CONTIGUOUS_FROM_STEPS = 64


def _transposed(matrix: np.ndarray, dtype: np.dtype[Any], steps: int) -> np.ndarray:
    transposed = np.asarray(matrix, dtype=dtype).T
    return np.ascontiguousarray(transposed) if steps >= CONTIGUOUS_FROM_STEPS else transposed


def _step(mask: np.ndarray | None, new: np.ndarray, old: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(next state, this step's Y row) given which entries are still running."""
    if mask is None:
        return new, new
    return np.where(mask, new, old), np.where(mask, new, 0).astype(new.dtype, copy=False)


def _split_bias(
    b: np.ndarray | None, gates: int, hidden: int, d: int, dtype: np.dtype[Any]
) -> tuple[np.ndarray, np.ndarray]:
    if b is None:
        zero = np.zeros(gates * hidden, dtype=dtype)
        return zero, zero
    row = np.asarray(b[d], dtype=dtype)
    return row[: gates * hidden], row[gates * hidden :]


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
    """ONNX RNN (versions 1, 7, 14, 22): Ht = f(Xt W^T + Ht-1 R^T + Wb + Rb)."""
    rec = _Recurrence(x, w, r, sequence_lens, [initial_h], direction, layout)
    acts = _activations(activations, ("Tanh",), len(rec.directions), activation_alpha, activation_beta)
    clipped = _clipper(clip)
    ys: list[np.ndarray] = []
    final_h: list[np.ndarray] = []
    for d in range(len(rec.directions)):
        wb, rb = _split_bias(b, 1, rec.hidden, d, rec.compute)
        xw = rec.project(w[d], wb + rb, d)
        r_t = _transposed(r[d], rec.compute, rec.seq_len)
        f = acts[d][0]
        h = rec.initial[0][d]
        y = np.empty((rec.seq_len, rec.batch, rec.hidden), dtype=rec.compute)
        for t in range(rec.seq_len):
            h, y[t] = _step(rec.mask(t), f(clipped(xw[t] + h @ r_t)), h)
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
    ys: list[np.ndarray] = []
    final_h: list[np.ndarray] = []
    for d in range(len(rec.directions)):
        wb, rb = _split_bias(b, 3, n, d, rec.compute)
        # z and r take both biases up front; Rbh stays inside the reset product when
        # linear_before_reset is set, else it is a plain addend of the h gate too.
        input_bias = wb + rb
        if linear_before_reset:
            input_bias[2 * n :] = wb[2 * n :]
        xw = rec.project(w[d], input_bias, d)
        r_zr_t = _transposed(r[d][: 2 * n], rec.compute, rec.seq_len)
        r_h_t = _transposed(r[d][2 * n :], rec.compute, rec.seq_len)
        r_all_t = _transposed(r[d], rec.compute, rec.seq_len)
        rb_h = rb[2 * n :]
        f, g = acts[d]
        h = rec.initial[0][d]
        y = np.empty((rec.seq_len, rec.batch, n), dtype=rec.compute)
        for t in range(rec.seq_len):
            gates_x = xw[t]
            if linear_before_reset:
                hr = h @ r_all_t
                zr = f(clipped(gates_x[:, : 2 * n] + hr[:, : 2 * n]))
                z, reset = zr[:, :n], zr[:, n:]
                candidate = g(clipped(gates_x[:, 2 * n :] + reset * (hr[:, 2 * n :] + rb_h)))
            else:
                zr = f(clipped(gates_x[:, : 2 * n] + h @ r_zr_t))
                z, reset = zr[:, :n], zr[:, n:]
                candidate = g(clipped(gates_x[:, 2 * n :] + (reset * h) @ r_h_t))
            h, y[t] = _step(rec.mask(t), (1 - z) * candidate + z * h, h)
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
    ys: list[np.ndarray] = []
    final_h: list[np.ndarray] = []
    final_c: list[np.ndarray] = []
    for d in range(len(rec.directions)):
        wb, rb = _split_bias(b, 4, n, d, rec.compute)
        xw = rec.project(w[d], wb + rb, d)
        r_t = _transposed(r[d], rec.compute, rec.seq_len)
        peep = None if p is None else np.asarray(p[d], dtype=rec.compute)
        f, g, h_act = acts[d]
        h = rec.initial[0][d]
        c = rec.initial[1][d]
        y = np.empty((rec.seq_len, rec.batch, n), dtype=rec.compute)
        for t in range(rec.seq_len):
            gates = xw[t] + h @ r_t
            i_in, o_in, f_in, c_in = gates[:, :n], gates[:, n : 2 * n], gates[:, 2 * n : 3 * n], gates[:, 3 * n :]
            if peep is None and not input_forget:
                # The common LSTM: i, o and f are adjacent and share f, so one call activates all
                # three (elementwise, so the same values as three calls, for a third of the calls).
                iof = f(clipped(gates[:, : 3 * n]))
                c_new = iof[:, 2 * n :] * c + iof[:, :n] * g(clipped(c_in))
                h_new = iof[:, n : 2 * n] * h_act(c_new)
                mask = rec.mask(t)
                h, y[t] = _step(mask, h_new, h)
                c = c_new if mask is None else np.where(mask, c_new, c)
                continue
            if peep is not None:
                i_in = i_in + peep[:n] * c
                f_in = f_in + peep[2 * n :] * c
            i_gate = f(clipped(i_in))
            # input_forget couples the gates as ONNX Runtime does: f = 1 - i.
            f_gate = 1 - i_gate if input_forget else f(clipped(f_in))
            c_new = f_gate * c + i_gate * g(clipped(c_in))
            if peep is not None:
                o_in = o_in + peep[n : 2 * n] * c_new
            h_new = f(clipped(o_in)) * h_act(c_new)
            mask = rec.mask(t)
            h, y[t] = _step(mask, h_new, h)
            c = c_new if mask is None else np.where(mask, c_new, c)
        ys.append(rec.place(y, d))
        final_h.append(h)
        final_c.append(c)
    y_out, h_out, c_out = rec.outputs(ys, [final_h, final_c])
    return y_out, h_out, c_out
