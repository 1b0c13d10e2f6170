"""Recurrent networks (RNN, GRU, LSTM): torch translations, differentiable through time.

The same equations as the NumPy kernels (:mod:`sealtrace.ops.rnn`): gates i, o, f, c for LSTM
(peepholes i, o, f), z, r, h for GRU; ``layout`` 1 is handled by transposing to time-major.
``sequence_lens`` shorter than the sequence is not supported here (a clear error at run time).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from sealtrace.ops.rnn import _PARAMETERS
from sealtrace.torchbridge.registry import ints, reference_versions, register

Activation = Callable[[torch.Tensor], torch.Tensor]


def _activation(name: str, alpha: float, beta: float) -> Activation:
    kind = name.lower()
    table: dict[str, Activation] = {
        "relu": torch.relu,
        "tanh": torch.tanh,
        "sigmoid": torch.sigmoid,
        "affine": lambda x: alpha * x + beta,
        "leakyrelu": lambda x: torch.where(x >= 0, x, alpha * x),
        "thresholdedrelu": lambda x: x * (x >= alpha),
        "scaledtanh": lambda x: alpha * torch.tanh(beta * x),
        "hardsigmoid": lambda x: torch.clamp(alpha * x + beta, 0, 1),
        "elu": lambda x: torch.where(x >= 0, x, alpha * torch.expm1(x)),
        "softsign": lambda x: x / (1 + torch.abs(x)),
        "softplus": lambda x: torch.log1p(torch.exp(x)),
    }
    if kind not in table:
        raise ValueError(f"unknown recurrent activation {name!r}")
    return table[kind]


def _activations(names: Sequence[str] | None, defaults: Sequence[str], directions: int,
                 alphas: Sequence[float] | None, betas: Sequence[float] | None) -> list[list[Activation]]:
    """Per direction, alphas/betas consumed in order exactly as the reference consumes them."""
    per = len(defaults)
    chosen = list(names) if names else list(defaults) * directions
    if len(chosen) == per and directions == 2:
        chosen = chosen * 2
    if len(chosen) == 2 * per and directions == 1:
        chosen = chosen[:per]
    alpha_left, beta_left = list(alphas or ()), list(betas or ())
    functions = []
    for name in chosen:
        takes_alpha, takes_beta, alpha, beta = _PARAMETERS[name.lower()]
        if takes_alpha and alpha_left:
            alpha = alpha_left.pop(0)
        if takes_beta and beta_left:
            beta = beta_left.pop(0)
        functions.append(_activation(name, alpha, beta))
    return [functions[d * per:(d + 1) * per] for d in range(directions)]


class _Setup:
    def __init__(self, x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, sequence_lens: Any,
                 initial: Sequence[torch.Tensor | None], direction: str, layout: int) -> None:
        self.layout = layout
        self.x = x.transpose(0, 1) if layout else x
        self.seq_len, self.batch = self.x.shape[0], self.x.shape[1]
        self.hidden = r.shape[-1]
        direction = "forward" if direction == "foward" else direction
        self.directions = ["forward", "reverse"] if direction == "bidirectional" else [direction]
        if sequence_lens is not None and any(n != self.seq_len for n in ints(sequence_lens)):
            raise ValueError("sequence_lens shorter than the sequence is not supported by the torch bridge")
        self.initial = []
        for value in initial:
            if value is None:
                value = torch.zeros(len(self.directions), self.batch, self.hidden, dtype=x.dtype, device=x.device)
            elif layout:
                value = value.transpose(0, 1)
            self.initial.append(value)

    def steps(self, d: int) -> range:
        return range(self.seq_len - 1, -1, -1) if self.directions[d] == "reverse" else range(self.seq_len)

    def finish(self, ys: list[torch.Tensor], finals: list[list[torch.Tensor]]) -> tuple[torch.Tensor, ...]:
        y = torch.stack(ys, dim=1)  # [seq, dirs, batch, hidden]
        states = [torch.stack(f, dim=0) for f in finals]  # [dirs, batch, hidden]
        if self.layout:
            y = y.permute(2, 0, 1, 3)
            states = [s.transpose(0, 1) for s in states]
        return (y, *states)


def _bias(b: torch.Tensor | None, gates: int, n: int, d: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if b is None:
        zero = torch.zeros(gates * n, dtype=like.dtype, device=like.device)
        return zero, zero
    return b[d, : gates * n], b[d, gates * n:]


def _clipper(clip: float | None) -> Activation:
    if clip is None:
        return lambda v: v
    return lambda v: torch.clamp(v, -clip, clip)


def _outputs(result: tuple[torch.Tensor, ...], n_outputs: int) -> Any:
    return result[:n_outputs] if n_outputs > 1 else result[0]


@register("LSTM", *reference_versions("LSTM"), static=(4,), n_outputs=True)
def lstm(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None = None, sequence_lens: Any = None,
         initial_h: torch.Tensor | None = None, initial_c: torch.Tensor | None = None, p: torch.Tensor | None = None,
         *, n_outputs: int, activation_alpha: Any = None, activation_beta: Any = None, activations: Any = None,
         clip: float | None = None, direction: str = "forward", hidden_size: int | None = None,
         input_forget: int = 0, layout: int = 0, output_sequence: int = 0) -> Any:
    """LSTM: gates i, o, f, c; peepholes i, o, f; input_forget couples f = 1 - i."""
    s = _Setup(x, w, r, sequence_lens, [initial_h, initial_c], direction, layout)
    acts = _activations(activations, ("Sigmoid", "Tanh", "Tanh"), len(s.directions), activation_alpha,
                        activation_beta)
    clipped = _clipper(clip)
    n = s.hidden
    ys, final_h, final_c = [], [], []
    for d in range(len(s.directions)):
        wb, rb = _bias(b, 4, n, d, x)
        xw = torch.matmul(s.x, w[d].T) + (wb + rb)
        r_t = r[d].T
        f, g, h_act = acts[d]
        h, c = s.initial[0][d], s.initial[1][d]
        y: list[torch.Tensor] = [x.new_empty(0)] * s.seq_len
        for t in s.steps(d):
            gates = xw[t] + torch.matmul(h, r_t)
            i_in, o_in, f_in, c_in = torch.split(gates, n, dim=1)
            if p is not None:
                i_in = i_in + p[d, :n] * c
                f_in = f_in + p[d, 2 * n:] * c
            i_gate = f(clipped(i_in))
            f_gate = 1 - i_gate if input_forget else f(clipped(f_in))
            c = f_gate * c + i_gate * g(clipped(c_in))
            if p is not None:
                o_in = o_in + p[d, n:2 * n] * c
            h = f(clipped(o_in)) * h_act(c)
            y[t] = h
        ys.append(torch.stack(y, dim=0))
        final_h.append(h)
        final_c.append(c)
    return _outputs(s.finish(ys, [final_h, final_c]), n_outputs)


@register("GRU", *reference_versions("GRU"), static=(4,), n_outputs=True)
def gru(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None = None, sequence_lens: Any = None,
        initial_h: torch.Tensor | None = None, *, n_outputs: int, activation_alpha: Any = None,
        activation_beta: Any = None, activations: Any = None, clip: float | None = None,
        direction: str = "forward", hidden_size: int | None = None, layout: int = 0, linear_before_reset: int = 0,
        output_sequence: int = 0) -> Any:
    """GRU: gates z, r, h; linear_before_reset keeps Rbh inside the reset product."""
    s = _Setup(x, w, r, sequence_lens, [initial_h], direction, layout)
    acts = _activations(activations, ("Sigmoid", "Tanh"), len(s.directions), activation_alpha, activation_beta)
    clipped = _clipper(clip)
    n = s.hidden
    ys, final_h = [], []
    for d in range(len(s.directions)):
        wb, rb = _bias(b, 3, n, d, x)
        xw = torch.matmul(s.x, w[d].T) + wb
        f, g = acts[d]
        h = s.initial[0][d]
        y: list[torch.Tensor] = [x.new_empty(0)] * s.seq_len
        for t in s.steps(d):
            gx = xw[t]
            if linear_before_reset:
                hr = torch.matmul(h, r[d].T) + rb
                z = f(clipped(gx[:, :n] + hr[:, :n]))
                reset = f(clipped(gx[:, n:2 * n] + hr[:, n:2 * n]))
                cand = g(clipped(gx[:, 2 * n:] + reset * hr[:, 2 * n:]))
            else:
                hzr = torch.matmul(h, r[d][: 2 * n].T) + rb[: 2 * n]
                z = f(clipped(gx[:, :n] + hzr[:, :n]))
                reset = f(clipped(gx[:, n:2 * n] + hzr[:, n:]))
                cand = g(clipped(gx[:, 2 * n:] + torch.matmul(reset * h, r[d][2 * n:].T) + rb[2 * n:]))
            h = (1 - z) * cand + z * h
            y[t] = h
        ys.append(torch.stack(y, dim=0))
        final_h.append(h)
    return _outputs(s.finish(ys, [final_h]), n_outputs)


@register("RNN", *reference_versions("RNN"), static=(4,), n_outputs=True)
def rnn(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None = None, sequence_lens: Any = None,
        initial_h: torch.Tensor | None = None, *, n_outputs: int, activation_alpha: Any = None,
        activation_beta: Any = None, activations: Any = None, clip: float | None = None,
        direction: str = "forward", hidden_size: int | None = None, layout: int = 0, output_sequence: int = 0
        ) -> Any:
    """RNN: H = f(X W^T + H R^T + Wb + Rb)."""
    s = _Setup(x, w, r, sequence_lens, [initial_h], direction, layout)
    acts = _activations(activations, ("Tanh",), len(s.directions), activation_alpha, activation_beta)
    clipped = _clipper(clip)
    n = s.hidden
    ys, final_h = [], []
    for d in range(len(s.directions)):
        wb, rb = _bias(b, 1, n, d, x)
        xw = torch.matmul(s.x, w[d].T) + (wb + rb)
        (f,) = acts[d]
        h = s.initial[0][d]
        y: list[torch.Tensor] = [x.new_empty(0)] * s.seq_len
        for t in s.steps(d):
            h = f(clipped(xw[t] + torch.matmul(h, r[d].T)))
            y[t] = h
        ys.append(torch.stack(y, dim=0))
        final_h.append(h)
    return _outputs(s.finish(ys, [final_h]), n_outputs)
