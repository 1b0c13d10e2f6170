"""Reductions: torch translations (axes as an attribute before opset 13/18, as an input after)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from sealtrace.torchops.registry import ints, reference_versions, register

Reducer = Callable[[torch.Tensor, list[int], bool], torch.Tensor]


def _dims(x: torch.Tensor, axes: list[int] | None, noop: int) -> list[int] | None:
    if not axes:
        return None if noop else list(range(x.dim()))
    return [a + x.dim() if a < 0 else a for a in axes]


def _reduce(x: torch.Tensor, axes: list[int] | None, keepdims: int, noop: int, fn: Reducer) -> torch.Tensor:
    dims = _dims(x, axes, noop)
    if dims is None:
        return x.clone()
    if x.dim() == 0:
        return fn(x.reshape(1), [0], False).reshape(())
    return fn(x, dims, bool(keepdims))


def _empty_result(x: torch.Tensor, d: list[int], k: bool, lowest: bool) -> torch.Tensor:
    """Max (min) over an empty set: the identity of the reduction, -inf (+inf) or the type's bound."""
    shape = [1 if i in d else n for i, n in enumerate(x.shape)] if k else [n for i, n in enumerate(x.shape) if i not in d]
    if x.dtype == torch.bool:
        fill: Any = not lowest
    elif x.is_floating_point():
        fill = -float("inf") if lowest else float("inf")
    else:
        info = torch.iinfo(x.dtype)
        fill = info.min if lowest else info.max
    return torch.full(shape, fill, dtype=x.dtype, device=x.device)


def _amax(x: torch.Tensor, d: list[int], k: bool) -> torch.Tensor:
    if any(x.shape[i] == 0 for i in d):
        return _empty_result(x, d, k, lowest=True)
    return torch.amax(x, dim=d, keepdim=k)


def _amin(x: torch.Tensor, d: list[int], k: bool) -> torch.Tensor:
    if any(x.shape[i] == 0 for i in d):
        return _empty_result(x, d, k, lowest=False)
    return torch.amin(x, dim=d, keepdim=k)


def _sum(x: torch.Tensor, d: list[int], k: bool) -> torch.Tensor:
    return torch.sum(x, dim=d, keepdim=k).to(x.dtype)


def _mean(x: torch.Tensor, d: list[int], k: bool) -> torch.Tensor:
    return torch.mean(x, dim=d, keepdim=k) if x.is_floating_point() else \
        torch.div(torch.sum(x, dim=d, keepdim=k), max(1, _count(x, d)), rounding_mode="trunc").to(x.dtype)


def _count(x: torch.Tensor, d: list[int]) -> int:
    n = 1
    for a in d:
        n *= x.shape[a]
    return n


def _prod(x: torch.Tensor, d: list[int], k: bool) -> torch.Tensor:
    y = x
    for a in sorted(d, reverse=True):  # highest axis first, so lower axis numbers stay valid
        y = torch.prod(y, dim=a, keepdim=k)
    return y.to(x.dtype)


def _l1(x: torch.Tensor, d: list[int], k: bool) -> torch.Tensor:
    return _sum(torch.abs(x), d, k)


def _l2(x: torch.Tensor, d: list[int], k: bool) -> torch.Tensor:
    return torch.sqrt(torch.sum(x * x, dim=d, keepdim=k)).to(x.dtype)


def _log_sum(x: torch.Tensor, d: list[int], k: bool) -> torch.Tensor:
    return torch.log(torch.sum(x, dim=d, keepdim=k))


def _log_sum_exp(x: torch.Tensor, d: list[int], k: bool) -> torch.Tensor:
    return torch.logsumexp(x, dim=d, keepdim=k)


def _sum_square(x: torch.Tensor, d: list[int], k: bool) -> torch.Tensor:
    return _sum(x * x, d, k)


_REDUCERS: dict[str, tuple[Reducer, int]] = {
    # op: (reducer, first version with axes as an input)
    "ReduceMax": (_amax, 18),
    "ReduceMin": (_amin, 18),
    "ReduceSum": (_sum, 13),
    "ReduceMean": (_mean, 18),
    "ReduceProd": (_prod, 18),
    "ReduceL1": (_l1, 18),
    "ReduceL2": (_l2, 18),
    "ReduceLogSum": (_log_sum, 18),
    "ReduceLogSumExp": (_log_sum_exp, 18),
    "ReduceSumSquare": (_sum_square, 18),
}


def _register_reduce(op_type: str, fn: Reducer, input_since: int) -> None:
    def with_attribute(x: torch.Tensor, *, axes: tuple[int, ...] | None = None, keepdims: int = 1) -> torch.Tensor:
        return _reduce(x, list(axes) if axes else None, keepdims, 0, fn)

    def with_input(x: torch.Tensor, axes: Any = None, *, keepdims: int = 1,
                   noop_with_empty_axes: int = 0) -> torch.Tensor:
        return _reduce(x, ints(axes) if axes is not None else None, keepdims, noop_with_empty_axes, fn)

    for f, suffix in ((with_attribute, "attribute"), (with_input, "input")):
        f.__name__ = f.__qualname__ = f"{op_type.lower()}_axes_{suffix}"
    early = reference_versions(op_type, until=input_since - 1)
    late = reference_versions(op_type, since=input_since)
    if early:
        register(op_type, *early)(with_attribute)
    if late:
        register(op_type, *late, static=(1,))(with_input)


for _op, (_fn, _since) in _REDUCERS.items():
    _register_reduce(_op, _fn, _since)
