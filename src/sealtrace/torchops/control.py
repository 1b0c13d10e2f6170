"""Scan (versions 9+), shared by the torch backend and the fx module: the body runs once per step."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

BodyCall = Callable[[int, list[Any]], Sequence[Any]]


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def run_scan(body: BodyCall, values: Sequence[Any], n_state: int, n_scan_out: int, attrs: Mapping[str, Any]
             ) -> list[Any]:
    """ONNX Scan-9+: states carried through the body, scan inputs sliced along their axes, scan
    outputs stacked (reversed where asked) and moved to their axes."""
    n_in = len(values) - n_state
    in_axes = attrs.get("scan_input_axes") or (0,) * n_in
    in_dirs = attrs.get("scan_input_directions") or (0,) * n_in
    out_axes = attrs.get("scan_output_axes") or (0,) * n_scan_out
    out_dirs = attrs.get("scan_output_directions") or (0,) * n_scan_out
    sequences = []
    for j, value in enumerate(values[n_state:]):
        moved = value.movedim(_axis(in_axes[j], value.dim()), 0)
        sequences.append(moved.flip(0) if in_dirs[j] else moved)
    lengths = {s.shape[0] for s in sequences}
    if len(lengths) != 1:
        raise ValueError(f"Scan inputs disagree on the sequence length: {sorted(lengths)}")
    steps = lengths.pop()
    if steps == 0 and n_scan_out:
        raise ValueError("a Scan over an empty sequence has scan outputs of unknown shape")
    state = list(values[:n_state])
    collected: list[list[Any]] = [[] for _ in range(n_scan_out)]
    for t in range(steps):
        outputs = body(t, [*state, *(s[t] for s in sequences)])
        state = list(outputs[:n_state])
        for k in range(n_scan_out):
            collected[k].append(outputs[n_state + k])
    results = []
    for k, items in enumerate(collected):
        stacked = torch.stack(items[::-1] if out_dirs[k] else items)
        results.append(stacked.movedim(0, _axis(out_axes[k], stacked.dim())))
    return [*state, *results]


def run_scan_8(body: BodyCall, sequence_lens: Any, values: Sequence[Any], n_state: int, n_scan_out: int,
               directions: Sequence[int] | None, empty_output: Callable[[int], torch.Tensor]) -> list[Any]:
    """ONNX Scan-8: batch axis 0, sequence axis 1, a length per batch entry (``sequence_lens``), the
    body run per entry; scan outputs shorter than the longest are zero padded at the end, as ONNX
    Runtime does. ``empty_output(k)`` is scan output k of a zero-length entry (its static shape)."""
    scan_inputs = values[n_state:]
    if not scan_inputs:
        raise ValueError("Scan needs at least one scan input")
    in_dirs = directions or (0,) * len(scan_inputs)
    batch, max_len = scan_inputs[0].shape[:2]
    lengths = [max_len] * batch if sequence_lens is None else [int(v) for v in sequence_lens.reshape(-1).tolist()]
    if len(lengths) != batch or any(n < 0 or n > max_len for n in lengths):
        raise ValueError(f"sequence_lens {lengths} invalid for batch {batch}, length {max_len}")
    final_states: list[list[Any]] = [[] for _ in range(n_state)]
    per_batch: list[list[torch.Tensor]] = [[] for _ in range(n_scan_out)]
    step = 0
    for b, length in enumerate(lengths):
        # A reverse input starts from the entry's own last valid step, not the padded end.
        sequences = [v[b, :length].flip(0) if in_dirs[j] else v[b, :length] for j, v in enumerate(scan_inputs)]
        state = [v[b] for v in values[:n_state]]
        collected: list[list[Any]] = [[] for _ in range(n_scan_out)]
        for t in range(length):
            outputs = body(step, [*state, *(s[t] for s in sequences)])
            step += 1
            state = list(outputs[:n_state])
            for k in range(n_scan_out):
                collected[k].append(outputs[n_state + k])
        for i, s in enumerate(state):
            final_states[i].append(s)
        for k, items in enumerate(collected):
            per_batch[k].append(torch.stack(items) if items else empty_output(k))
    results = []
    for items in per_batch:
        element = next((i.shape[1:] for i in items if i.shape[0]), items[0].shape[1:])
        padded = [torch.nn.functional.pad(i, [0, 0] * len(element) + [0, max_len - i.shape[0]]) if i.shape[0]
                  else torch.zeros((max_len, *element), dtype=i.dtype, device=i.device) for i in items]
        results.append(torch.stack(padded))
    states = [torch.stack(s) if s else values[i] for i, s in enumerate(final_states)]
    return [*states, *results]


def empty_scan_output(plan: Any, index: int) -> torch.Tensor:
    """Scan output ``index`` of a body that never ran: zero steps of its static element shape."""
    from sealtrace.ops.control import _empty_scan_output
    from sealtrace.torchops.dtypes import from_numpy

    return from_numpy(_empty_scan_output(plan.outputs[index]))
