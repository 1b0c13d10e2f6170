"""Recurrent networks (RNN, GRU, LSTM): torch translations, differentiable through time.

The same equations as the NumPy kernels (:mod:`sealtrace.ops.rnn`): gates i, o, f, c for LSTM
(peepholes i, o, f), z, r, h for GRU; ``layout`` 1 is handled by transposing to time-major;
half-precision inputs compute in float32 and round once at the end; ``sequence_lens`` as ONNX
Runtime honours it (an entry stops updating after its length, its Y rows past it are zero, the
reverse direction walks its own valid prefix backwards).

Where torch has the very cell (LSTM without peepholes, input_forget or clip, with the default
activations; GRU with linear_before_reset; RNN with Tanh or Relu; every entry of full length;
float32 or float64), the whole layer runs as torch's fused recurrent kernel (``torch.lstm``,
``torch.gru``, ``torch.rnn_tanh``/``rnn_relu``, what ``nn.LSTM`` calls), with the ONNX weights
reordered into torch's gate order on the way in: the same function, differentiable in every
input, at the speed of ``nn.LSTM``. Everything else runs the step-by-step loop below.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from sealtrace.ops.rnn import _PARAMETERS
from sealtrace.torchops.registry import ints, reference_versions, register

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
        "softplus": lambda x: torch.logaddexp(torch.zeros((), dtype=x.dtype, device=x.device), x),
    }
    if kind not in table:
        raise ValueError(f"unknown recurrent activation {name!r}")
    return table[kind]


def _activation_names(names: Sequence[str] | None, defaults: Sequence[str], directions: int) -> list[str]:
    per = len(defaults)
    chosen = list(names) if names else list(defaults) * directions
    if len(chosen) == per and directions == 2:
        chosen = chosen * 2  # one direction's worth given for a bidirectional op: both use it
    if len(chosen) == 2 * per and directions == 1:
        chosen = chosen[:per]  # RNN's schema default lists two even for one direction
    if len(chosen) != per * directions:
        raise ValueError(f"{len(chosen)} activations given, expected {per * directions}")
    return chosen


def _activations(names: Sequence[str] | None, defaults: Sequence[str], directions: int,
                 alphas: Sequence[float] | None, betas: Sequence[float] | None) -> list[list[Activation]]:
    """Per direction, alphas/betas consumed in order exactly as the reference consumes them."""
    per = len(defaults)
    alpha_left, beta_left = list(alphas or ()), list(betas or ())
    functions = []
    for name in _activation_names(names, defaults, directions):
        if name.lower() not in _PARAMETERS:
            raise ValueError(f"unknown recurrent activation {name!r}")
        takes_alpha, takes_beta, alpha, beta = _PARAMETERS[name.lower()]
        if takes_alpha and alpha_left:
            alpha = alpha_left.pop(0)
        if takes_beta and beta_left:
            beta = beta_left.pop(0)
        functions.append(_activation(name, alpha, beta))
    return [functions[d * per:(d + 1) * per] for d in range(directions)]


class _Setup:
    """What every recurrent op shares: layout, directions, sequence lengths, dtypes."""

    def __init__(self, x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, sequence_lens: Any,
                 initial: Sequence[torch.Tensor | None], direction: str, layout: int) -> None:
        self.dtype = x.dtype
        # Half-precision types compute in float32 and round once at the end, as the reference.
        self.compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
        self.layout = layout
        self.x = (x.transpose(0, 1) if layout else x).to(self.compute)
        self.seq_len, self.batch = self.x.shape[0], self.x.shape[1]
        self.hidden = r.shape[-1]
        direction = "forward" if direction == "foward" else direction  # GRU-1's schema default is misspelt
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ValueError(f"unknown direction {direction!r}")
        self.directions = ["forward", "reverse"] if direction == "bidirectional" else [direction]
        if w.shape[0] != len(self.directions):
            raise ValueError(f"W has {w.shape[0]} directions, direction={direction!r} needs {len(self.directions)}")
        # Lengths are only honoured when some entry is shorter than the whole sequence.
        self.lengths: torch.Tensor | None = None
        if sequence_lens is not None:
            lengths = ints(sequence_lens)
            if len(lengths) != self.batch:
                raise ValueError(f"sequence_lens has {len(lengths)} entries for batch {self.batch}")
            if any(n < 0 or n > self.seq_len for n in lengths):
                raise ValueError(f"sequence_lens {lengths} outside [0, {self.seq_len}]")
            if any(n != self.seq_len for n in lengths):
                self.lengths = torch.tensor(lengths, dtype=torch.int64, device=x.device)
        shape = (len(self.directions), self.batch, self.hidden)
        self.initial = []
        for value in initial:
            if value is None:
                value = torch.zeros(shape, dtype=self.compute, device=x.device)
            else:
                value = (value.transpose(0, 1) if layout else value).to(self.compute)
                value = value if tuple(value.shape) == shape else value.expand(shape)
            self.initial.append(value)

    def time_order(self, d: int) -> torch.Tensor | None:
        """Per (step, batch) the time index direction ``d`` reads at that step; None = identity."""
        if self.directions[d] == "forward":
            return None
        steps = torch.arange(self.seq_len, device=self.x.device)[:, None]
        if self.lengths is None:
            return (self.seq_len - 1 - steps).expand(self.seq_len, self.batch)
        lengths = self.lengths[None, :]
        # Walk each entry's valid prefix backwards; padded steps map to themselves (and are masked).
        return torch.where(steps < lengths, lengths - 1 - steps, steps)

    def project(self, w: torch.Tensor, bias: torch.Tensor, d: int) -> torch.Tensor:
        """X @ W^T + bias for every step at once, in the order direction ``d`` reads them."""
        projected = torch.matmul(self.x, w.to(self.compute).T) + bias
        order = self.time_order(d)
        if order is not None:
            projected = torch.gather(projected, 0, order[:, :, None].expand(projected.shape))
        return projected

    def mask(self, t: int) -> torch.Tensor | None:
        """Which batch entries still run at step ``t`` (None: all of them)."""
        return None if self.lengths is None else (t < self.lengths)[:, None]

    def step(self, mask: torch.Tensor | None, new: torch.Tensor, old: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """(next state, this step's Y row) given which entries are still running."""
        if mask is None:
            return new, new
        return torch.where(mask, new, old), torch.where(mask, new, torch.zeros_like(new))

    def place(self, ys: list[torch.Tensor], d: int) -> torch.Tensor:
        """The per-step outputs of direction ``d`` at the time positions they belong to."""
        y = torch.stack(ys, dim=0) if ys else torch.zeros((0, self.batch, self.hidden), dtype=self.compute)
        order = self.time_order(d)
        if order is None:
            return y
        return torch.gather(y, 0, order[:, :, None].expand(y.shape))

    def finish(self, ys: list[torch.Tensor], finals: list[list[torch.Tensor]]) -> tuple[torch.Tensor, ...]:
        """Y [seq, dirs, batch, hidden] and the final states, in the op's layout and dtype."""
        y = torch.stack(ys, dim=1)
        states = [torch.stack(f, dim=0) for f in finals]
        if self.lengths is not None and bool((self.lengths == 0).any()):
            # ONNX Runtime reports zero final states (not the initial ones) for empty entries.
            empty = (self.lengths == 0)[None, :, None]
            states = [torch.where(empty, torch.zeros_like(s), s) for s in states]
        return self.arrange(y, states)

    def arrange(self, y: torch.Tensor, states: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        if self.layout:
            y = y.permute(2, 0, 1, 3)
            states = [s.transpose(0, 1) for s in states]
        return tuple(v.to(self.dtype) for v in (y, *states))


def _bias(b: torch.Tensor | None, gates: int, n: int, d: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if b is None:
        zero = torch.zeros(gates * n, dtype=like.dtype, device=like.device)
        return zero, zero
    row = b[d].to(like.dtype)
    return row[: gates * n], row[gates * n:]


def _clipper(clip: float | None) -> Activation:
    if clip is None or clip <= 0:
        return lambda v: v
    return lambda v: torch.clamp(v, -clip, clip)


def _outputs(result: tuple[torch.Tensor, ...], n_outputs: int) -> Any:
    return result[:n_outputs] if n_outputs > 1 else result[0]


# ---------------------------------------------------------------------------------------------
# The fused path: torch's own recurrent kernels (what nn.LSTM / nn.GRU / nn.RNN call)

# ONNX gate order -> torch's: LSTM i, o, f, c -> i, f, c(g), o; GRU z, r, h -> r, z, n.
_LSTM_ORDER = (0, 2, 3, 1)
_GRU_ORDER = (1, 0, 2)


def _default_activations(names: Sequence[str] | None, defaults: Sequence[str], directions: int) -> bool:
    if not names:
        return True
    try:
        chosen = _activation_names(names, defaults, directions)
    except ValueError:
        return False
    return [n.lower() for n in chosen] == [n.lower() for n in defaults] * directions


def _fusable(s: _Setup, clip: float | None) -> bool:
    return s.lengths is None and s.compute in (torch.float32, torch.float64) and (clip is None or clip <= 0) \
        and s.seq_len > 0


@functools.lru_cache(maxsize=64)
def _gate_rows(order: tuple[int, ...], n: int) -> tuple[int, ...]:
    # Plain integers are cached, never a tensor: a tensor made while torch.export traces is a
    # FakeTensor, and a cached one then leaked into every later eager run of the process.
    return tuple(row for g in order for row in range(g * n, (g + 1) * n))


def _reordered(matrix: torch.Tensor, order: Sequence[int], n: int) -> torch.Tensor:
    """Gate blocks of ``matrix`` (rows, or entries of a bias) in torch's order (one gather)."""
    if tuple(order) == tuple(range(len(order))):
        return matrix
    index = torch.tensor(_gate_rows(tuple(order), n), dtype=torch.int64, device=matrix.device)
    return matrix.index_select(0, index)


def _fused(kind: str, s: _Setup, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None, gates: int,
           order: Sequence[int]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One torch recurrent kernel call for every direction: Y [seq, dirs, batch, hidden], final states."""
    n = s.hidden
    params: list[torch.Tensor] = []
    for d in range(len(s.directions)):
        wb, rb = _bias(b, gates, n, d, s.x)
        params += [_reordered(w[d].to(s.compute), order, n), _reordered(r[d].to(s.compute), order, n),
                   _reordered(wb, order, n), _reordered(rb, order, n)]
    reverse_only = s.directions == ["reverse"]
    x = s.x.flip(0) if reverse_only else s.x
    bidirectional = len(s.directions) == 2
    initial = [v.contiguous() for v in s.initial]
    args = (x, *([tuple(initial)] if kind == "lstm" else initial), params, True, 1, 0.0, False, bidirectional,
            False)
    output, *finals = getattr(torch, kind)(*args)
    y = output.reshape(s.seq_len, s.batch, len(s.directions), n).transpose(1, 2)
    if reverse_only:
        y = y.flip(0)
    return y, finals


@register("LSTM", *reference_versions("LSTM"), static=(4,), n_outputs=True)
def lstm(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None = None, sequence_lens: Any = None,
         initial_h: torch.Tensor | None = None, initial_c: torch.Tensor | None = None, p: torch.Tensor | None = None,
         *, n_outputs: int, activation_alpha: Any = None, activation_beta: Any = None, activations: Any = None,
         clip: float | None = None, direction: str = "forward", hidden_size: int | None = None,
         input_forget: int = 0, layout: int = 0, output_sequence: int = 0) -> Any:
    """LSTM: gates i, o, f, c; peepholes i, o, f; input_forget couples f = 1 - i."""
    s = _Setup(x, w, r, sequence_lens, [initial_h, initial_c], direction, layout)
    if _fusable(s, clip) and p is None and not input_forget and \
            _default_activations(activations, ("Sigmoid", "Tanh", "Tanh"), len(s.directions)):
        y, (h_n, c_n) = _fused("lstm", s, w, r, b, 4, _LSTM_ORDER)
        return _outputs(s.arrange(y, [h_n, c_n]), n_outputs)
    return _outputs(lstm_steps(s, w, r, b, p, activations, activation_alpha, activation_beta, clip, input_forget),
                    n_outputs)


def lstm_steps(s: _Setup, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None, p: torch.Tensor | None,
               activations: Any, alphas: Any, betas: Any, clip: float | None, input_forget: int
               ) -> tuple[torch.Tensor, ...]:
    """The LSTM step by step (every configuration)."""
    acts = _activations(activations, ("Sigmoid", "Tanh", "Tanh"), len(s.directions), alphas, betas)
    clipped = _clipper(clip)
    n = s.hidden
    ys, final_h, final_c = [], [], []
    for d in range(len(s.directions)):
        wb, rb = _bias(b, 4, n, d, s.x)
        xw = s.project(w[d], wb + rb, d)
        r_t = r[d].to(s.compute).T
        peep = None if p is None else p[d].to(s.compute)
        f, g, h_act = acts[d]
        h, c = s.initial[0][d], s.initial[1][d]
        y = []
        for t in range(s.seq_len):
            gates = xw[t] + torch.matmul(h, r_t)
            i_in, o_in, f_in, c_in = torch.split(gates, n, dim=1)
            if peep is not None:
                i_in = i_in + peep[:n] * c
                f_in = f_in + peep[2 * n:] * c
            i_gate = f(clipped(i_in))
            f_gate = 1 - i_gate if input_forget else f(clipped(f_in))
            c_new = f_gate * c + i_gate * g(clipped(c_in))
            if peep is not None:
                o_in = o_in + peep[n:2 * n] * c_new
            h_new = f(clipped(o_in)) * h_act(c_new)
            mask = s.mask(t)
            h, y_t = s.step(mask, h_new, h)
            c = c_new if mask is None else torch.where(mask, c_new, c)
            y.append(y_t)
        ys.append(s.place(y, d))
        final_h.append(h)
        final_c.append(c)
    return s.finish(ys, [final_h, final_c])


@register("GRU", *reference_versions("GRU"), static=(4,), n_outputs=True)
def gru(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None = None, sequence_lens: Any = None,
        initial_h: torch.Tensor | None = None, *, n_outputs: int, activation_alpha: Any = None,
        activation_beta: Any = None, activations: Any = None, clip: float | None = None,
        direction: str = "forward", hidden_size: int | None = None, layout: int = 0, linear_before_reset: int = 0,
        output_sequence: int = 0) -> Any:
    """GRU: gates z, r, h; linear_before_reset keeps Rbh inside the reset product (torch's GRU cell)."""
    s = _Setup(x, w, r, sequence_lens, [initial_h], direction, layout)
    if _fusable(s, clip) and linear_before_reset and \
            _default_activations(activations, ("Sigmoid", "Tanh"), len(s.directions)):
        y, (h_n,) = _fused("gru", s, w, r, b, 3, _GRU_ORDER)
        return _outputs(s.arrange(y, [h_n]), n_outputs)
    return _outputs(gru_steps(s, w, r, b, activations, activation_alpha, activation_beta, clip, linear_before_reset),
                    n_outputs)


def gru_steps(s: _Setup, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None, activations: Any, alphas: Any,
              betas: Any, clip: float | None, linear_before_reset: int) -> tuple[torch.Tensor, ...]:
    """The GRU step by step (every configuration)."""
    acts = _activations(activations, ("Sigmoid", "Tanh"), len(s.directions), alphas, betas)
    clipped = _clipper(clip)
    n = s.hidden
    ys, final_h = [], []
    for d in range(len(s.directions)):
        wb, rb = _bias(b, 3, n, d, s.x)
        xw = s.project(w[d], wb, d)
        r_d = r[d].to(s.compute)
        f, g = acts[d]
        h = s.initial[0][d]
        y = []
        for t in range(s.seq_len):
            gx = xw[t]
            if linear_before_reset:
                hr = torch.matmul(h, r_d.T) + rb
                z = f(clipped(gx[:, :n] + hr[:, :n]))
                reset = f(clipped(gx[:, n:2 * n] + hr[:, n:2 * n]))
                cand = g(clipped(gx[:, 2 * n:] + reset * hr[:, 2 * n:]))
            else:
                hzr = torch.matmul(h, r_d[: 2 * n].T) + rb[: 2 * n]
                z = f(clipped(gx[:, :n] + hzr[:, :n]))
                reset = f(clipped(gx[:, n:2 * n] + hzr[:, n:]))
                cand = g(clipped(gx[:, 2 * n:] + torch.matmul(reset * h, r_d[2 * n:].T) + rb[2 * n:]))
            h, y_t = s.step(s.mask(t), (1 - z) * cand + z * h, h)
            y.append(y_t)
        ys.append(s.place(y, d))
        final_h.append(h)
    return s.finish(ys, [final_h])


@register("RNN", *reference_versions("RNN"), static=(4,), n_outputs=True)
def rnn(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None = None, sequence_lens: Any = None,
        initial_h: torch.Tensor | None = None, *, n_outputs: int, activation_alpha: Any = None,
        activation_beta: Any = None, activations: Any = None, clip: float | None = None,
        direction: str = "forward", hidden_size: int | None = None, layout: int = 0, output_sequence: int = 0
        ) -> Any:
    """RNN: H = f(X W^T + H R^T + Wb + Rb)."""
    s = _Setup(x, w, r, sequence_lens, [initial_h], direction, layout)
    if _fusable(s, clip):
        for name in ("Tanh", "Relu"):
            if _default_activations(activations, (name,), len(s.directions)):
                y, (h_n,) = _fused(f"rnn_{name.lower()}", s, w, r, b, 1, (0,))
                return _outputs(s.arrange(y, [h_n]), n_outputs)
    return _outputs(rnn_steps(s, w, r, b, activations, activation_alpha, activation_beta, clip), n_outputs)


def rnn_steps(s: _Setup, w: torch.Tensor, r: torch.Tensor, b: torch.Tensor | None, activations: Any, alphas: Any,
              betas: Any, clip: float | None) -> tuple[torch.Tensor, ...]:
    """The RNN step by step (every configuration)."""
    acts = _activations(activations, ("Tanh",), len(s.directions), alphas, betas)
    clipped = _clipper(clip)
    n = s.hidden
    ys, final_h = [], []
    for d in range(len(s.directions)):
        wb, rb = _bias(b, 1, n, d, s.x)
        xw = s.project(w[d], wb + rb, d)
        r_t = r[d].to(s.compute).T
        (f,) = acts[d]
        h = s.initial[0][d]
        y = []
        for t in range(s.seq_len):
            h, y_t = s.step(s.mask(t), f(clipped(xw[t] + torch.matmul(h, r_t))), h)
            y.append(y_t)
        ys.append(s.place(y, d))
        final_h.append(h)
    return s.finish(ys, [final_h])
