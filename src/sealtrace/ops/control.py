"""Control flow: If, Loop, Scan (every historic version of the default domain).

Bodies are nested Plans held in the graph attributes; ``ctx.run_subgraph`` runs one with
positional feeds (the executor wires up the values the body reads from enclosing scopes).
Values flowing through control flow may be tensors, sequences (lists) or optionals (None = empty).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sealtrace.limits import check_allocation
from sealtrace.ops._values import ARRAY_OBJECT_BYTES
from sealtrace.ops.registry import KernelContext, register


def _check_steps(steps: int, kept: int) -> None:
    """A Scan step makes at least one array (a slice it reads, an output it stacks) and each
    output it stacks: its steps are held to the memory budget before the first one runs."""
    check_allocation(steps * max(kept, 1) * ARRAY_OBJECT_BYTES, f"Scan of {steps} steps")


def _scalar_bool(value: np.ndarray, what: str) -> bool:
    array = np.asarray(value)
    if array.size != 1:
        raise ValueError(f"{what} must hold exactly one element, got shape {array.shape}")
    return bool(array.reshape(-1)[0])


def _scalar_int(value: np.ndarray, what: str) -> int:
    array = np.asarray(value)
    if array.size != 1:
        raise ValueError(f"{what} must hold exactly one element, got shape {array.shape}")
    return int(array.reshape(-1)[0])


@register("If", 1, 11, 13, 16, 19, 21, 23, 24, 25, context=True)
def if_(ctx: KernelContext, cond: np.ndarray, *, then_branch: Any, else_branch: Any) -> tuple[Any, ...]:
    """ONNX If (all versions): run one branch, return its outputs (tensors, sequences or optionals)."""
    if _scalar_bool(cond, "If condition"):
        return tuple(ctx.run_subgraph("then_branch", then_branch, []))
    return tuple(ctx.run_subgraph("else_branch", else_branch, []))


def _empty_scan_output(info: Any) -> np.ndarray:
    """The stacked scan output of a body that never ran: 0 along the new axis, the rest as declared.

    Like ONNX Runtime, the element shape comes from the body's declared output; unknown dims
    (and an unknown dtype, as float32) fill in so the result is still an empty array.
    """
    dtype = info.dtype if info is not None and info.dtype is not None else np.dtype(np.float32)
    dims = () if info is None or info.shape is None else info.shape
    return np.empty((0, *(d if isinstance(d, int) else 0 for d in dims)), dtype=dtype)


@register("Loop", 1, 11, 13, 16, 19, 21, 23, 24, 25, context=True)
def loop(
    ctx: KernelContext, trip_count: np.ndarray | None, cond: np.ndarray | None, *carried: Any, body: Any
) -> tuple[Any, ...]:
    """ONNX Loop (all versions): for/while loop with loop-carried values and stacked scan outputs.

    The body's condition output ends the loop whether or not the cond input was given, as ONNX
    Runtime and onnx's reference evaluator both do.
    """
    max_trips = None if trip_count is None else _scalar_int(trip_count, "Loop trip count M")
    running = True if cond is None else _scalar_bool(cond, "Loop condition")
    n_carried = len(carried)
    n_scan = len(body.outputs) - 1 - n_carried
    if n_scan < 0:
        raise ValueError(f"Loop body has {len(body.outputs)} outputs for {n_carried} loop-carried values")
    state = list(carried)
    scans: list[list[Any]] = [[] for _ in range(n_scan)]
    iteration = 0
    while running and (max_trips is None or iteration < max_trips):
        feeds = [np.array(iteration, dtype=np.int64), np.array(running, dtype=np.bool_), *state]
        outputs = ctx.run_subgraph("body", body, feeds)
        running = _scalar_bool(outputs[0], "Loop body condition")
        state = outputs[1 : 1 + n_carried]
        for k in range(n_scan):
            scans[k].append(outputs[1 + n_carried + k])
        iteration += 1
    stacked = [
        np.stack(values) if values else _empty_scan_output(body.outputs[1 + n_carried + k])
        for k, values in enumerate(scans)
    ]
    return (*state, *stacked)


def _axis(axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"{what} {axis} out of range for rank {rank}")
    return axis % rank


@register("Scan", 9, 11, 16, 19, 21, 23, 24, 25, context=True)
def scan(
    ctx: KernelContext,
    *values: Any,
    body: Any,
    num_scan_inputs: int,
    scan_input_axes: tuple[int, ...] | None,
    scan_input_directions: tuple[int, ...] | None,
    scan_output_axes: tuple[int, ...] | None,
    scan_output_directions: tuple[int, ...] | None,
) -> tuple[Any, ...]:
    """ONNX Scan (versions 9 to 25): iterate the body over slices of the scan inputs along any axis."""
    n_state = len(values) - num_scan_inputs
    n_scan_out = len(body.outputs) - n_state
    in_axes = scan_input_axes or (0,) * num_scan_inputs
    in_dirs = scan_input_directions or (0,) * num_scan_inputs
    out_axes = scan_output_axes or (0,) * n_scan_out
    out_dirs = scan_output_directions or (0,) * n_scan_out
    # Each scan input becomes a view with the scanned axis first, in the order it is read.
    sequences: list[np.ndarray] = []
    for j, value in enumerate(values[n_state:]):
        array = np.moveaxis(value, _axis(in_axes[j], value.ndim, "scan_input_axes entry"), 0)
        sequences.append(array[::-1] if in_dirs[j] else array)
    lengths = {s.shape[0] for s in sequences}
    if len(lengths) > 1:
        raise ValueError(f"Scan inputs disagree on the sequence length: {sorted(lengths)}")
    steps = lengths.pop() if lengths else 0
    _check_steps(steps, n_scan_out)
    state = list(values[:n_state])
    collected: list[list[Any]] = [[] for _ in range(n_scan_out)]
    for t in range(steps):
        outputs = ctx.run_subgraph("body", body, [*state, *(s[t] for s in sequences)])
        state = outputs[:n_state]
        for k in range(n_scan_out):
            collected[k].append(outputs[n_state + k])
    results: list[np.ndarray] = []
    for k, items in enumerate(collected):
        if not items:
            stacked = _empty_scan_output(body.outputs[n_state + k])
        else:
            stacked = np.stack(items[::-1] if out_dirs[k] else items)
        axis = _axis(out_axes[k], stacked.ndim, "scan_output_axes entry")
        results.append(np.moveaxis(stacked, 0, axis))
    return (*state, *results)


@register("Scan", 8, context=True)
def scan_8(
    ctx: KernelContext,
    sequence_lens: np.ndarray | None,
    *values: Any,
    body: Any,
    num_scan_inputs: int,
    directions: tuple[int, ...] | None,
) -> tuple[Any, ...]:
    """ONNX Scan version 8: batch axis 0, sequence axis 1, per-entry sequence_lens, zero padding."""
    n_state = len(values) - num_scan_inputs
    n_scan_out = len(body.outputs) - n_state
    in_dirs = directions or (0,) * num_scan_inputs
    scan_inputs = values[n_state:]
    if not scan_inputs:
        raise ValueError("Scan needs at least one scan input")
    batch, max_len = scan_inputs[0].shape[:2]
    lengths = (
        np.full(batch, max_len, dtype=np.int64)
        if sequence_lens is None
        else np.asarray(sequence_lens, dtype=np.int64).reshape(-1)
    )
    if lengths.shape[0] != batch or np.any(lengths < 0) or np.any(lengths > max_len):
        raise ValueError(f"sequence_lens {lengths.tolist()} invalid for batch {batch}, length {max_len}")
    _check_steps(batch * max_len, n_scan_out)
    final_states: list[list[Any]] = [[] for _ in range(n_state)]
    per_batch: list[list[np.ndarray]] = [[] for _ in range(n_scan_out)]
    for b in range(batch):
        length = int(lengths[b])
        # A reverse input starts from the entry's own last valid step, not the padded end.
        sequences = [v[b, :length][::-1] if in_dirs[j] else v[b, :length] for j, v in enumerate(scan_inputs)]
        state = [v[b] for v in values[:n_state]]
        collected: list[list[Any]] = [[] for _ in range(n_scan_out)]
        for t in range(length):
            outputs = ctx.run_subgraph("body", body, [*state, *(s[t] for s in sequences)])
            state = outputs[:n_state]
            for k in range(n_scan_out):
                collected[k].append(outputs[n_state + k])
        for i, s in enumerate(state):
            final_states[i].append(s)
        for k, items in enumerate(collected):
            per_batch[k].append(np.stack(items) if items else _empty_scan_output(body.outputs[n_state + k]))
    results: list[np.ndarray] = []
    for items in per_batch:
        # Entries shorter than the longest are zero padded at the end, as ONNX Runtime does.
        element = next((i.shape[1:] for i in items if i.shape[0]), items[0].shape[1:])
        dtype = items[0].dtype
        out = np.zeros((batch, max_len, *element), dtype=dtype)
        for b, item in enumerate(items):
            out[b, : item.shape[0]] = item
        results.append(out)
    states = [np.stack(s) if s else values[i] for i, s in enumerate(final_states)]
    return (*states, *results)
