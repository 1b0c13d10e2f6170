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
