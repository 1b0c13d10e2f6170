"""Convolution, pooling, normalization and matrix products: torch translations.

Window geometry (auto_pad, asymmetric pads, ceil_mode) is resolved by the same code the NumPy
kernels use (:mod:`sealtrace.ops._windows`), then handed to torch as explicit padding, so both
backends agree on every output size.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the name every torch reader knows

from sealtrace.ops._windows import Window, resolve_window
from sealtrace.ops.conv_transpose import _transpose_geometry
from sealtrace.ops.pool import _avg_counts
from sealtrace.torchops.registry import DirectCall, StepInput, reference_versions, register, specializes

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


@functools.lru_cache(maxsize=4096)
def _geometry(spatial: tuple[int, ...], kernel: tuple[int, ...], strides: tuple[int, ...] | None,
              dilations: tuple[int, ...] | None, pads: tuple[int, ...] | None, auto_pad: str, ceil_mode: bool
              ) -> Window:
    """resolve_window, remembered per shape: a model calls it with the same few shapes every run."""
    return resolve_window(spatial, kernel, strides, dilations, pads, auto_pad, ceil_mode)


def _tuple(values: Any) -> tuple[int, ...] | None:
    return None if values is None else tuple(int(v) for v in values)
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}


def _pad_spatial(x: torch.Tensor, begin: Sequence[int], end: Sequence[int], value: float = 0.0) -> torch.Tensor:
    flat: list[int] = []
    for b, e in zip(reversed(begin), reversed(end), strict=True):
        flat += [b, e]
    if not any(flat):
        return x
    return F.pad(x, flat, mode="constant", value=value)


def _conv_taps(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, window: Window, group: int
               ) -> torch.Tensor:
    """A convolution of any rank (torch's stop at 3-D): one grouped product per kernel tap."""
    xp = _pad_spatial(x, window.pads_begin, window.pads_end)
    n, c = x.shape[:2]
    m, cg = w.shape[0], c // group
    out_shape = list(window.out_shape)
    y = torch.zeros((n, group, m // group, *out_shape), dtype=x.dtype, device=x.device)
    for tap in window.taps:
        view = _tap_view(xp, tap, window).reshape(n, group, cg, -1)
        at: tuple[Any, ...] = (slice(None), slice(None), *tap)
        taps = w[at].reshape(group, m // group, cg)
        y = y + torch.einsum("ngcl,gmc->ngml", view, taps).reshape(y.shape)
    y = y.reshape(n, m, *out_shape)
    return y if b is None else y + b.reshape(1, -1, *([1] * len(out_shape)))


def _conv_nd(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, window: Window, group: int) -> torch.Tensor:
    rank = w.dim() - 2
    if rank not in _CONV:
        return _conv_taps(x, w, b, window, group)
    if window.pads_begin == window.pads_end and min(window.pads_begin, default=0) >= 0:
        padding: Any = list(window.pads_begin)
    else:
        x = _pad_spatial(x, window.pads_begin, window.pads_end)
        padding = 0
    return _CONV[rank](x, w, b, stride=list(window.strides), padding=padding, dilation=list(window.dilations),
                       groups=group)


@register("Conv", *reference_versions("Conv"))
def conv(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, *, auto_pad: str = "NOTSET",
         dilations: tuple[int, ...] | None = None, group: int = 1, kernel_shape: tuple[int, ...] | None = None,
         pads: tuple[int, ...] | None = None, strides: tuple[int, ...] | None = None) -> torch.Tensor:
    """Conv (1-D to 3-D), with auto_pad and asymmetric pads."""
    kernel = tuple(kernel_shape) if kernel_shape else tuple(w.shape[2:])
    window = _geometry(tuple(x.shape[2:]), kernel, _tuple(strides), _tuple(dilations), _tuple(pads), auto_pad, False)
    return _conv_nd(x, w, b, window, group)


@specializes("Conv", *reference_versions("Conv"))
def _direct_conv(attrs: dict[str, Any], inputs: list[StepInput]) -> DirectCall | None:
    """Conv with pads that do not depend on the input's size (NOTSET with symmetric pads, VALID):
    F.conv1d/2d/3d with its stride, padding and dilation written into the call."""
    w = inputs[1]
    rank = len(attrs["kernel_shape"]) if attrs.get("kernel_shape") else (None if w.rank is None else w.rank - 2)
    auto_pad = attrs.get("auto_pad") or "NOTSET"
    if rank not in _CONV or auto_pad not in ("NOTSET", "VALID"):
        return None
    pads = list(attrs.get("pads") or [0] * (2 * rank)) if auto_pad == "NOTSET" else [0] * (2 * rank)
    if pads[:rank] != pads[rank:] or min(pads) < 0:
        return None
    kwargs = {"stride": tuple(attrs.get("strides") or (1,) * rank), "padding": tuple(pads[:rank]),
              "dilation": tuple(attrs.get("dilations") or (1,) * rank), "groups": int(attrs.get("group") or 1)}
    has_bias = len(inputs) > 2 and inputs[2].present
    return DirectCall(_CONV[rank], (0, 1, 2) if has_bias else (0, 1), kwargs)


@register("ConvTranspose", *reference_versions("ConvTranspose"))
def conv_transpose(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, *, auto_pad: str = "NOTSET",
                   dilations: tuple[int, ...] | None = None, group: int = 1,
                   kernel_shape: tuple[int, ...] | None = None, output_padding: tuple[int, ...] | None = None,
                   output_shape: tuple[int, ...] | None = None, pads: tuple[int, ...] | None = None,
                   strides: tuple[int, ...] | None = None) -> torch.Tensor:
    """ConvTranspose: the full transposed convolution, extended by output_padding, cropped by pads."""
    rank = w.dim() - 2
    kernel = list(kernel_shape) if kernel_shape else list(w.shape[2:])
    s = list(strides) if strides else [1] * rank
    d = list(dilations) if dilations else [1] * rank
    op = list(output_padding) if output_padding else [0] * rank
    begin, out_shape = _transpose_geometry(list(x.shape[2:]), kernel, s, d, op, pads, output_shape, auto_pad)
    if rank in _CONV_T:
        full = _CONV_T[rank](x, w, None, stride=s, padding=0, dilation=d, groups=group)
    else:
        full = _conv_transpose_taps(x, w, s, d, group)
    # output_padding (and any output_shape overhang) extends the end with zeros, then pads crop.
    need = [bg + o for bg, o in zip(begin, out_shape, strict=True)]
    extra = [max(n - f, 0) for n, f in zip(need, full.shape[2:], strict=True)]
    full = _pad_spatial(full, [0] * rank, extra)
    index = (slice(None), slice(None), *(slice(bg, bg + o) for bg, o in zip(begin, out_shape, strict=True)))
    y = full[index]
    if b is not None:
        y = y + b.reshape(1, -1, *([1] * rank))
    return y


def _conv_transpose_taps(x: torch.Tensor, w: torch.Tensor, strides: Sequence[int], dilations: Sequence[int],
                         group: int) -> torch.Tensor:
    """The full transposed convolution of any rank (no padding): every input position's product with
    each kernel tap added at ``position * stride + tap * dilation``."""
    n, c = x.shape[:2]
    spatial = list(x.shape[2:])
    kernel = list(w.shape[2:])
    cg, mg = c // group, w.shape[1]
    full = [(i - 1) * s + (k - 1) * d + 1 for i, k, s, d in zip(spatial, kernel, strides, dilations, strict=True)]
    y = torch.zeros((n, group * mg, *full), dtype=x.dtype, device=x.device)
    xs = x.reshape(n, group, cg, -1)
    for tap in itertools.product(*(range(k) for k in kernel)):
        at: tuple[Any, ...] = (slice(None), slice(None), *tap)
        taps = w[at].reshape(group, cg, mg)
        values = torch.einsum("ngcl,gcm->ngml", xs, taps).reshape(n, group * mg, *spatial)
        index: list[slice] = [slice(None), slice(None)]
        for t, i, s, d in zip(tap, spatial, strides, dilations, strict=True):
            index.append(slice(t * d, t * d + (i - 1) * s + 1, s))
        y[tuple(index)] += values
    return y


def _window(x: torch.Tensor, kernel_shape: Sequence[int], strides: Any, dilations: Any, pads: Any, auto_pad: str,
            ceil_mode: int) -> Window:
    return _geometry(tuple(x.shape[2:]), tuple(kernel_shape), _tuple(strides), _tuple(dilations), _tuple(pads),
                     auto_pad or "NOTSET", bool(ceil_mode))


def _padded_for(x: torch.Tensor, window: Window, value: float) -> torch.Tensor:
    end = window.needed_end_pads(list(x.shape[2:]))
    return _pad_spatial(x, window.pads_begin, end, value)


@register("MaxPool", *reference_versions("MaxPool"), n_outputs=True)
def max_pool(x: torch.Tensor, *, n_outputs: int, kernel_shape: tuple[int, ...], auto_pad: str = "NOTSET",
             ceil_mode: int = 0, dilations: tuple[int, ...] | None = None, pads: tuple[int, ...] | None = None,
             storage_order: int = 0, strides: tuple[int, ...] | None = None) -> Any:
    """MaxPool, with the optional Indices output (flat indices into X, row- or column-major)."""
    rank = len(kernel_shape)
    window = _window(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    low = -math.inf if x.is_floating_point() else float(torch.iinfo(x.dtype).min)
    xp = _padded_for(x, window, low)
    if n_outputs > 1:
        return _max_pool_with_indices(x, xp, window, storage_order)
    y = _MAX_POOL[rank](xp, list(window.kernel), list(window.strides), 0, list(window.dilations))
    index = (slice(None), slice(None), *(slice(0, o) for o in window.out_shape))
    return y[index]


def _tap_view(xp: torch.Tensor, tap: Sequence[int], window: Window) -> torch.Tensor:
    index: list[slice] = [slice(None), slice(None)]
    for i, s, d, o in zip(tap, window.strides, window.dilations, window.out_shape, strict=True):
        index.append(slice(i * d, i * d + (o - 1) * s + 1, s))
    return xp[tuple(index)]


def _max_pool_with_indices(x: torch.Tensor, xp: torch.Tensor, window: Window, storage_order: int
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Values and flat indices, the window scanned tap by tap: the first maximum in scan order wins
    (ONNX Runtime's rule, as in the reference kernel)."""
    spatial = list(x.shape[2:])
    rank = len(spatial)
    order = range(rank) if storage_order == 0 else range(rank - 1, -1, -1)
    weights = [0] * rank
    step = 1
    for a in reversed(list(order)):
        weights[a] = step
        step *= spatial[a]
    best: torch.Tensor | None = None
    best_index: torch.Tensor | None = None
    for tap in window.taps:
        view = _tap_view(xp, tap, window)
        position = torch.zeros(window.out_shape, dtype=torch.int64, device=x.device)
        for a, (t, s, d, pb, o) in enumerate(zip(tap, window.strides, window.dilations, window.pads_begin,
                                                 window.out_shape, strict=True)):
            coord = torch.arange(o, dtype=torch.int64, device=x.device) * s + t * d - pb
            position = position + (coord * weights[a]).reshape((o,) + (1,) * (rank - 1 - a))
        if best is None or best_index is None:
            best, best_index = view, position.expand(view.shape)
        else:
            better = view > best
            best = torch.where(better, view, best)
            best_index = torch.where(better, position.expand(view.shape), best_index)
    assert best is not None and best_index is not None
    n, c = x.shape[:2]
    plane = torch.arange(n * c, dtype=torch.int64, device=x.device).reshape(n, c, *([1] * rank)) * math.prod(spatial)
    return best, best_index + plane


def _window_sums(xp: torch.Tensor, window: Window) -> torch.Tensor:
    """Sum over every window of padded ``xp``: a depthwise convolution with a ones kernel."""
    rank = len(window.kernel)
    channels = xp.shape[1]
    ones = torch.ones(channels, 1, *window.kernel, dtype=xp.dtype, device=xp.device)
    y = _CONV[rank](xp, ones, None, stride=list(window.strides), dilation=list(window.dilations), groups=channels)
    index = (slice(None), slice(None), *(slice(0, o) for o in window.out_shape))
    return y[index]


@register("AveragePool", *reference_versions("AveragePool"))
def average_pool(x: torch.Tensor, *, kernel_shape: tuple[int, ...], auto_pad: str = "NOTSET", ceil_mode: int = 0,
                 count_include_pad: int = 0, dilations: tuple[int, ...] | None = None,
                 pads: tuple[int, ...] | None = None, strides: tuple[int, ...] | None = None) -> torch.Tensor:
    """AveragePool: window sums over the element counts the reference uses."""
    window = _window(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    total = _window_sums(_padded_for(x, window, 0.0), window)
    counts = _avg_counts(_Shape(x.shape), window, bool(count_include_pad))  # type: ignore[arg-type]
    return total / torch.as_tensor(counts, dtype=x.dtype, device=x.device)


class _Shape:
    """Just enough of an array for the reference's count helper, which reads ``.shape`` only."""

    def __init__(self, shape: Sequence[int]) -> None:
        self.shape = tuple(shape)


@register("LpPool", *reference_versions("LpPool"))
def lp_pool(x: torch.Tensor, *, kernel_shape: tuple[int, ...], auto_pad: str = "NOTSET", ceil_mode: int = 0,
            dilations: tuple[int, ...] | None = None, p: float = 2, pads: tuple[int, ...] | None = None,
            strides: tuple[int, ...] | None = None) -> torch.Tensor:
    """LpPool: the p-norm of every window."""
    window = _window(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    total = _window_sums(_padded_for(torch.abs(x) ** p, window, 0.0), window)
    return total ** (1.0 / p)


@register("GlobalAveragePool", *reference_versions("GlobalAveragePool"))
def global_average_pool(x: torch.Tensor) -> torch.Tensor:
    """GlobalAveragePool."""
    return torch.mean(x, dim=list(range(2, x.dim())), keepdim=True)


@register("GlobalMaxPool", *reference_versions("GlobalMaxPool"))
def global_max_pool(x: torch.Tensor) -> torch.Tensor:
    """GlobalMaxPool."""
    return torch.amax(x, dim=list(range(2, x.dim())), keepdim=True)


@register("GlobalLpPool", *reference_versions("GlobalLpPool"))
def global_lp_pool(x: torch.Tensor, *, p: float = 2) -> torch.Tensor:
    """GlobalLpPool."""
    return torch.sum(torch.abs(x) ** p, dim=list(range(2, x.dim())), keepdim=True) ** (1.0 / p)


def _channel(v: torch.Tensor, rank: int) -> torch.Tensor:
    return v.reshape(1, -1, *([1] * (rank - 2)))


def _channel_shaped(v: torch.Tensor, x: torch.Tensor, work: torch.dtype) -> torch.Tensor:
    """A per-channel (C,) parameter as (C, 1, ..., 1); a per-activation one as X's shape without N."""
    v = v.to(work)
    if v.numel() == x.shape[1] and v.dim() <= 1:
        return v.reshape(-1, *([1] * (x.dim() - 2)))
    return v.reshape(x.shape[1:])


def _batch_norm_inference(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, mean: torch.Tensor,
                          var: torch.Tensor, epsilon: float) -> torch.Tensor:
    """One multiply-add per element with the per-channel factor and offset, as the reference (and
    ONNX Runtime) fold them."""
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    eps = torch.tensor(epsilon, dtype=torch.float64).to(work)
    factor = _channel_shaped(scale, x, work) / torch.sqrt(_channel_shaped(var, x, work) + eps)
    offset = _channel_shaped(bias, x, work) - _channel_shaped(mean, x, work) * factor
    return (x.to(work) * factor + offset).to(x.dtype)


@register("BatchNormalization", *reference_versions("BatchNormalization", until=9), n_outputs=True)
def batch_norm_v1(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, mean: torch.Tensor, var: torch.Tensor,
                  *, n_outputs: int, epsilon: float = 1e-5, **_: Any) -> Any:
    """BatchNormalization-1..9 with inference semantics: the running statistics pass through."""
    outputs = (_batch_norm_inference(x, scale, bias, mean, var, epsilon), mean, var, mean, var)
    return outputs[:n_outputs] if n_outputs > 1 else outputs[0]


@register("BatchNormalization", *reference_versions("BatchNormalization", since=14), n_outputs=True)
def batch_norm(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, *,
               n_outputs: int, epsilon: float = 1e-5, momentum: float = 0.9, training_mode: int = 0) -> Any:
    """BatchNormalization-14/15: inference (running statistics), or training mode: the batch's own
    statistics (population variance) and the running ones updated with ``momentum``."""
    if not training_mode:
        outputs = (_batch_norm_inference(x, scale, bias, mean, var, epsilon), mean, var)
        return outputs[:n_outputs] if n_outputs > 1 else outputs[0]
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    xw = x.to(work)
    dims = [0, *range(2, x.dim())]
    current_mean = xw.mean(dim=dims)
    current_var = xw.var(dim=dims, correction=0)
    y = _batch_norm_inference(x, scale, bias, current_mean, current_var, epsilon)
    m = torch.tensor(momentum, dtype=torch.float64).to(work)
    running_mean = mean.to(work) * m + current_mean * (1 - m)
    running_var = var.to(work) * m + current_var * (1 - m)
    outputs = (y, running_mean.to(mean.dtype), running_var.to(var.dtype))
    return outputs[:n_outputs] if n_outputs > 1 else outputs[0]


@register("InstanceNormalization", *reference_versions("InstanceNormalization"))
def instance_norm(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, *, epsilon: float = 1e-5, **_: Any
                  ) -> torch.Tensor:
    """InstanceNormalization."""
    dims = list(range(2, x.dim()))
    mean = x.mean(dim=dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)
    r = x.dim()
    return (x - mean) / torch.sqrt(var + epsilon) * _channel(scale, r) + _channel(bias, r)


@register("LayerNormalization", *reference_versions("LayerNormalization"), n_outputs=True)
def layer_norm(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None, *, n_outputs: int,
               axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1) -> Any:
    """LayerNormalization over the axes from ``axis`` (Mean and InvStdDev outputs included).

    Y alone, of a float32/float64 input with a scale (and bias) of the normalized shape (what
    exporters write for nn.LayerNorm), is torch's fused layer_norm: the same statistics in the
    same precision, one kernel instead of ten."""
    a = axis + x.dim() if axis < 0 else axis
    normalized = tuple(x.shape[a:])
    if n_outputs == 1 and x.dtype in (torch.float32, torch.float64) and tuple(scale.shape) == normalized and \
            scale.dtype == x.dtype and (bias is None or (tuple(bias.shape) == normalized and bias.dtype == x.dtype)):
        return F.layer_norm(x, normalized, scale, bias, epsilon)
    dims = list(range(a, x.dim()))
    work = x.double() if x.dtype == torch.float64 else x.float()
    mean = work.mean(dim=dims, keepdim=True)
    centered = work - mean
    inv = torch.rsqrt((centered * centered).mean(dim=dims, keepdim=True) + epsilon)
    y = (centered * inv).to(x.dtype) * scale
    if bias is not None:
        y = y + bias
    outputs = (y, mean, inv)
    return outputs[:n_outputs] if n_outputs > 1 else y


@register("GroupNormalization", *reference_versions("GroupNormalization"))
def group_norm(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, *, num_groups: int,
               epsilon: float = 1e-5, stash_type: int = 1) -> torch.Tensor:
    """GroupNormalization (scale/bias per channel, or per group in version 18)."""
    n, c = x.shape[:2]
    grouped = x.reshape(n, num_groups, -1)
    mean = grouped.mean(dim=2, keepdim=True)
    var = ((grouped - mean) ** 2).mean(dim=2, keepdim=True)
    y = ((grouped - mean) / torch.sqrt(var + epsilon)).reshape(x.shape)
    if scale.numel() == num_groups and num_groups != c:
        scale = scale.repeat_interleave(c // num_groups)
        bias = bias.repeat_interleave(c // num_groups)
    return y * _channel(scale, x.dim()) + _channel(bias, x.dim())


@register("RMSNormalization", *reference_versions("RMSNormalization"))
def rms_norm(x: torch.Tensor, scale: torch.Tensor, *, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1
             ) -> torch.Tensor:
    """RMSNormalization."""
    a = axis + x.dim() if axis < 0 else axis
    dims = list(range(a, x.dim()))
    work = x.double() if x.dtype == torch.float64 else x.float()
    y = work * torch.rsqrt((work * work).mean(dim=dims, keepdim=True) + epsilon)
    return y.to(x.dtype) * scale


@register("LpNormalization", *reference_versions("LpNormalization"))
def lp_normalization(x: torch.Tensor, *, axis: int = -1, p: int = 2) -> torch.Tensor:
    """LpNormalization (p = 1 or 2)."""
    norm = torch.sum(torch.abs(x), dim=axis, keepdim=True) if p == 1 else \
        torch.sqrt(torch.sum(x * x, dim=axis, keepdim=True))
    return x / torch.where(norm == 0, torch.ones_like(norm), norm)


@register("MeanVarianceNormalization", *reference_versions("MeanVarianceNormalization"))
def mean_variance_normalization(x: torch.Tensor, *, axes: tuple[int, ...] = (0, 2, 3)) -> torch.Tensor:
    """MeanVarianceNormalization."""
    dims = list(axes)
    mean = x.mean(dim=dims, keepdim=True)
    std = torch.sqrt(((x - mean) ** 2).mean(dim=dims, keepdim=True))
    return (x - mean) / (std + 1e-9)


@register("LRN", *reference_versions("LRN"))
def lrn(x: torch.Tensor, *, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> torch.Tensor:
    """LRN across channels."""
    c = x.shape[1]
    sq = (x * x).reshape(x.shape[0], c, -1)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = F.pad(sq, [0, 0, lo, hi])
    window = sum(padded[:, i:i + c] for i in range(size))
    assert isinstance(window, torch.Tensor)
    return x / (bias + alpha / size * window.reshape(x.shape)) ** beta


@register("MatMul", *reference_versions("MatMul"))
def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """MatMul with NumPy semantics."""
    return torch.matmul(a, b)


@specializes("MatMul", *reference_versions("MatMul"))
def _direct_matmul(attrs: dict[str, Any], inputs: list[StepInput]) -> DirectCall:
    """MatMul is torch.matmul itself."""
    return DirectCall(torch.matmul, (0, 1), {})


@register("Gemm", *reference_versions("Gemm"))
def gemm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None, *, alpha: float = 1.0, beta: float = 1.0,
         transA: int = 0, transB: int = 0, **_: Any) -> torch.Tensor:
    """Gemm: alpha * A' B' + beta * C."""
    y = torch.matmul(a.T if transA else a, b.T if transB else b)
    if alpha != 1.0:
        y = y * alpha
    if c is not None:
        y = y + (c * beta if beta != 1.0 else c)
    return y


@register("CausalConvWithState", *reference_versions("CausalConvWithState"), n_outputs=True)
def causal_conv_with_state(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                           past_state: torch.Tensor | None = None, *, n_outputs: int, activation: str = "none"
                           ) -> Any:
    """CausalConvWithState: a depthwise causal 1-D convolution over [past_state, x] (+ SiLU), and the
    last kernel-1 steps as the new state; half-precision inputs compute in float32."""
    if activation not in ("none", "silu", "swish"):
        raise ValueError(f"CausalConvWithState: unknown activation {activation!r}")
    batch, channels, _ = x.shape
    k = weight.shape[2]
    if past_state is None:
        past_state = torch.zeros((batch, channels, k - 1), dtype=x.dtype, device=x.device)
    padded = torch.cat([past_state, x], dim=2)
    work = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    y = F.conv1d(padded.to(work), weight.to(work).reshape(channels, 1, k), None, groups=channels)
    if bias is not None:
        y = y + bias.to(work).reshape(1, -1, 1)
    if activation != "none":
        y = y / (1 + torch.exp(-y))
    present = padded[:, :, padded.shape[2] - (k - 1):]
    outputs = (y.to(x.dtype), present)
    return outputs[:n_outputs] if n_outputs > 1 else outputs[0]
