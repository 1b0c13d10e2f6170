"""The network as the search sees it: a batch of flat X vectors in, a batch of flat Y vectors out.

``X`` covers the *searched* inputs (by default every graph input), each flattened in C order and
concatenated in graph order; inputs left out must be given fixed values. ``Y`` is every graph
output flattened and concatenated. The torch module from the torch bridge takes inputs of the
model's declared shapes; a batch of starts runs as one forward pass either by putting the batch on
the leading axis (when the declared leading size is 1 and the module computes the same values that
way, checked once on two different points) or, failing that, with ``torch.func.vmap``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sealtrace.errors import InputError
from sealtrace.falsify.errors import PropertyError
from sealtrace.plan import Plan


@dataclass(frozen=True)
class InputSlot:
    """One graph input: its name, static shape, dtype, and where its values sit in X (or its fixed value)."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    start: int | None  # offset in X; None for a fixed input
    fixed: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass(frozen=True)
class NetworkLayout:
    """How X maps onto the graph inputs and Y onto the graph outputs."""

    inputs: tuple[InputSlot, ...]
    output_names: tuple[str, ...]
    output_sizes: tuple[int, ...]

    @property
    def n_inputs(self) -> int:
        return sum(s.size for s in self.inputs if s.start is not None)

    @property
    def n_outputs(self) -> int:
        return sum(self.output_sizes)

    @property
    def float_dtype(self) -> np.dtype[Any]:
        """The dtype of the searched inputs (they must share one floating dtype)."""
        searched = [s.dtype for s in self.inputs if s.start is not None]
        return searched[0] if searched else np.dtype(np.float32)

    def feeds(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """The graph feeds for one flat X vector (already of the searched dtype)."""
        feeds: dict[str, np.ndarray] = {}
        for slot in self.inputs:
            if slot.start is None:
                assert slot.fixed is not None
                feeds[slot.name] = slot.fixed
            else:
                part = x[slot.start : slot.start + slot.size]
                feeds[slot.name] = np.ascontiguousarray(part.reshape(slot.shape).astype(slot.dtype, copy=False))
        return feeds

    def flat_outputs(self, outputs: Sequence[np.ndarray]) -> np.ndarray:
        """The graph outputs of one run flattened and concatenated (Y)."""
        return np.concatenate([np.asarray(o).reshape(-1) for o in outputs])

    def check(self, n_inputs: int, n_outputs: int, where: str) -> None:
        """Refuse a property whose X/Y counts do not match this layout."""
        searched = [f"{s.name}{list(s.shape)}" for s in self.inputs if s.start is not None]
        if n_inputs != self.n_inputs:
            raise PropertyError(
                f"the property declares {n_inputs} inputs (X_0..X_{n_inputs - 1}) but the searched model "
                f"input(s) {', '.join(searched)} hold {self.n_inputs} values",
                where,
            )
        if n_outputs != self.n_outputs:
            shown = ", ".join(f"{n}({k})" for n, k in zip(self.output_names, self.output_sizes, strict=True))
            raise PropertyError(
                f"the property declares {n_outputs} outputs (Y_0..Y_{n_outputs - 1}) but the model's outputs "
                f"{shown} hold {self.n_outputs} values",
                where,
            )


def layout_of(
    plan: Plan, searched: Sequence[str] | None = None, fixed: Mapping[str, Any] | None = None
) -> NetworkLayout:
    """The layout of ``plan``: ``searched`` inputs form X (default: every input not in ``fixed``)."""
    fixed = dict(fixed or {})
    names = [v.name for v in plan.inputs]
    unknown = [n for n in [*(searched or []), *fixed] if n not in names]
    if unknown:
        raise InputError(f"unknown input(s) {', '.join(map(repr, unknown))}; inputs are: {', '.join(names)}")
    wanted = list(searched) if searched is not None else [n for n in names if n not in fixed]
    slots: list[InputSlot] = []
    offset = 0
    for info in plan.inputs:
        shape = info.shape
        static = info.kind == "tensor" and shape is not None and all(isinstance(d, int) and d >= 0 for d in shape)
        if not static and info.name in wanted:
            raise InputError(f"input {info.name!r} has no static shape ({shape}); falsifying needs one")
        dtype = np.dtype(info.dtype) if info.dtype is not None else np.dtype(np.float32)
        if info.name in wanted:
            if dtype.kind != "f":
                raise InputError(f"input {info.name!r} is {dtype}: only float inputs can be searched; fix it instead")
            assert shape is not None
            slot = InputSlot(info.name, tuple(int(d) for d in shape if isinstance(d, int)), dtype, offset)
            offset += slot.size
        elif info.name in fixed:
            given = fixed[info.name]
            if isinstance(given, np.ndarray) and given.dtype != dtype:
                # An array's dtype is a choice: casting float64 values to float32 would change them unasked.
                raise InputError(f"input {info.name!r} is {dtype}; the fixed value given is {given.dtype}")
            value = np.asarray(given, dtype=dtype)
            if static and shape is not None and value.shape != tuple(shape):
                raise InputError(f"input {info.name!r} has shape {list(shape)}; the fixed value given has "
                                 f"{list(value.shape)}")
            slot = InputSlot(info.name, tuple(value.shape), dtype, None, value)
        else:
            raise InputError(f"input {info.name!r} is neither searched nor given a fixed value")
        slots.append(slot)
    if len({s.dtype for s in slots if s.start is not None}) > 1:
        raise InputError("the searched inputs have different dtypes; search them one dtype at a time")
    sizes = []
    for info in plan.outputs:
        shape = info.shape
        if shape is None or any(not isinstance(d, int) or d < 0 for d in shape):
            raise InputError(f"output {info.name!r} has no static shape ({shape}); falsifying needs one")
        sizes.append(int(np.prod([d for d in shape if isinstance(d, int)], dtype=np.int64)))
    return NetworkLayout(tuple(slots), tuple(plan.output_names), tuple(sizes))


_TORCH_DTYPES = {np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32,
                 np.dtype(np.float64): torch.float64}


class BatchedNetwork:
    """``forward(x)`` maps X of shape [B, n_inputs] to Y of shape [B, n_outputs] in one pass."""

    def __init__(self, module: torch.nn.Module, layout: NetworkLayout) -> None:
        self.module = module
        self.layout = layout
        self.dtype = _TORCH_DTYPES.get(layout.float_dtype, torch.float32)
        self._fixed = {
            s.name: torch.as_tensor(np.ascontiguousarray(s.fixed)) for s in layout.inputs if s.fixed is not None
        }
        for p in module.parameters():
            p.requires_grad_(False)  # gradients flow to the inputs only
        self.mode = self._choose_mode()

    def _call(self, args: Sequence[torch.Tensor]) -> torch.Tensor:
        out = self.module(*args)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return torch.cat([o.reshape(o.shape[0], -1) if o.dim() else o.reshape(1, 1) for o in outs], dim=1)

    def _args(self, x: torch.Tensor, batched: bool) -> list[torch.Tensor]:
        args = []
        for slot in self.layout.inputs:
            if slot.start is None:
                value = self._fixed[slot.name]
                if batched and slot.shape and slot.shape[0] == 1:
                    value = value.expand(x.shape[0], *slot.shape[1:])
                args.append(value)
            else:
                part = x[:, slot.start : slot.start + slot.size]
                args.append(part.reshape(x.shape[0], *slot.shape[1:]) if batched else part.reshape(slot.shape))
        return args

    def _leading(self, x: torch.Tensor) -> torch.Tensor:
        return self._call(self._args(x, batched=True))

    def _vmapped(self, x: torch.Tensor) -> torch.Tensor:
        def one(row: torch.Tensor) -> torch.Tensor:
            args = []
            for slot in self.layout.inputs:
                if slot.start is None:
                    args.append(self._fixed[slot.name])
                else:
                    args.append(row[slot.start : slot.start + slot.size].reshape(slot.shape))
            out = self.module(*args)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            return torch.cat([o.reshape(-1) for o in outs])

        return torch.func.vmap(one)(x)

    def _looped(self, x: torch.Tensor) -> torch.Tensor:
        rows = []
        for row in x:
            rows.append(self._call(self._args(row[None], batched=False)).reshape(-1))
        return torch.stack(rows)

    def _choose_mode(self) -> str:
        """'leading', 'vmap' or 'loop': the first that agrees with single runs on two distinct points."""
        n = self.layout.n_inputs
        probe = torch.stack([torch.linspace(-0.5, 0.5, n, dtype=self.dtype), torch.linspace(0.3, -0.2, n, dtype=self.dtype)])
        with torch.no_grad():
            expected = self._looped(probe)
            leading_ok = all(s.shape[:1] == (1,) for s in self.layout.inputs if s.start is not None)
            candidates: list[tuple[str, Callable[[torch.Tensor], torch.Tensor]]] = []
            if leading_ok:
                candidates.append(("leading", self._leading))
            candidates.append(("vmap", self._vmapped))
            for mode, fn in candidates:
                try:
                    got = fn(probe)
                except Exception:  # any failure means: this way of batching does not work for this module
                    continue
                if got.shape == expected.shape and torch.allclose(got, expected, rtol=1e-4, atol=1e-5):
                    return mode
        return "loop"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Y for every row of ``x`` ([B, n_inputs] -> [B, n_outputs])."""
        if self.mode == "leading":
            return self._leading(x)
        if self.mode == "vmap":
            return self._vmapped(x)
        return self._looped(x)

    __call__ = forward
