"""Convolution kernels against onnxruntime: Conv (1-D..3-D, groups, depthwise, dilations, strides,
pads, auto_pad, inferred kernel_shape, every version), ConvTranspose, ConvInteger, QLinearConv,
DeformConv, Col2Im, and CausalConvWithState (which onnxruntime lacks: checked against Conv)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import sealtrace
from sealtrace.ops import _convolution, conv_transpose
from sealtrace.ops import conv as conv_ops
from tests.conftest import make_model

RNG = np.random.default_rng(7)


def build(
    op: str,
    feeds: dict[str, np.ndarray],
    opset: int,
    weights: dict[str, np.ndarray | None] | None = None,
    n_outputs: int = 1,
    **attrs: Any,
) -> onnx.ModelProto:
    """One-node model: ``feeds`` are graph inputs, ``weights`` initializers (None: omitted input)."""
    weights = weights or {}
    names = list(feeds) + [n if v is not None else "" for n, v in weights.items()]
    outputs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outputs, **attrs)
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()
    ]
    inits = [numpy_helper.from_array(v, n) for n, v in weights.items() if v is not None]
    return make_model([node], inputs, [onnx.ValueInfoProto(name=o) for o in outputs], inits, opset=opset)


def run_ours(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return list(sealtrace.Session(model).run(None, feeds))


def run_theirs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def same(model: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol: float = 1e-5, atol: float = 1e-5) -> None:
    ours = run_ours(model, feeds)
    theirs = run_theirs(model, feeds)
    assert len(ours) == len(theirs)
    for got, want in zip(ours, theirs, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


def normal(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


CONV_CASES: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    # (x shape, w shape, attributes)
    ((1, 3, 9, 9), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 3, 10, 7), (5, 3, 3, 2), {"strides": [2, 1], "pads": [1, 0, 0, 1]}),
    ((1, 4, 12, 12), (6, 2, 3, 3), {"group": 2, "dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((1, 6, 11, 11), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),  # depthwise
    ((1, 6, 11, 11), (6, 1, 5, 5), {"group": 6, "strides": [2, 2], "pads": [2, 2, 2, 2]}),
    ((2, 5, 40, 36), (5, 1, 3, 3), {"group": 5, "pads": [1, 0, 1, 1]}),  # depthwise, batch 2, uneven pads
    ((2, 7, 6, 20), (7, 1, 5, 5), {"group": 7, "strides": [2, 1], "pads": [2, 2, 2, 2]}),  # strided depthwise
    ((1, 4, 15, 15), (4, 1, 3, 3), {"group": 4, "strides": [2, 2], "dilations": [2, 2], "pads": [1, 2, 2, 1]}),
    ((1, 3, 70, 70), (3, 1, 3, 3), {"group": 3, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((2, 4, 13, 9), (8, 1, 3, 3), {"group": 4, "strides": [2, 2], "dilations": [1, 2]}),  # multiplier 2
    ((1, 8, 6, 6), (16, 8, 1, 1), {}),  # 1x1
    ((1, 8, 7, 7), (4, 8, 1, 1), {"strides": [2, 2]}),  # strided 1x1
    ((1, 8, 7, 7), (4, 2, 1, 1), {"group": 4, "pads": [1, 0, 1, 0]}),  # padded grouped 1x1
    ((1, 3, 10, 10), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 10, 10), (4, 3, 4, 4), {"auto_pad": "SAME_LOWER", "strides": [3, 3]}),
    ((1, 3, 10, 10), (4, 3, 3, 3), {"auto_pad": "VALID", "strides": [2, 3]}),
    ((1, 3, 5, 5), (2, 3, 5, 5), {"pads": [4, 4, 4, 4]}),  # window wider than the input
    ((2, 4, 50), (8, 4, 5), {"pads": [2, 2], "strides": [2]}),  # 1-D
    ((3, 5, 4), (6, 5, 3), {"pads": [1, 1]}),  # batch of short 1-D signals (Silero's chunks), bias < 64 outputs
    ((1, 16, 64), (16, 1, 3), {"group": 16, "pads": [1, 1], "dilations": [3]}),  # 1-D depthwise
    ((1, 2, 5, 6, 7), (3, 2, 3, 2, 3), {"pads": [1, 0, 1, 1, 1, 0], "strides": [1, 2, 2]}),  # 3-D
    ((1, 3, 4, 5, 6), (3, 1, 2, 2, 2), {"group": 3, "dilations": [2, 1, 2]}),  # 3-D depthwise
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CONV_CASES)
def test_conv_matches_onnxruntime(x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any]) -> None:
    feeds = {"x": normal(*x_shape)}
    weights = {"w": normal(*w_shape), "b": normal(w_shape[0])}
    same(build("Conv", feeds, 17, weights, kernel_shape=list(w_shape[2:]), **attrs), feeds)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CONV_CASES)
def test_conv_general_paths_match_onnxruntime(
    monkeypatch: pytest.MonkeyPatch, x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any]
) -> None:
    # The small single images above take the one-GEMM path; the same cases through the paths
    # larger convolutions take (flat im2col, direct strided im2col, depthwise, 1x1).
    monkeypatch.setattr(_convolution, "_ONE_BLOCK_BYTES", 0)
    monkeypatch.setattr(_convolution, "_GEOMETRIES", {})
    feeds = {"x": normal(*x_shape)}
    weights = {"w": normal(*w_shape), "b": normal(w_shape[0])}
    same(build("Conv", feeds, 17, weights, kernel_shape=list(w_shape[2:]), **attrs), feeds)


def test_conv_geometry_is_cached_per_input_shape() -> None:
    w = normal(4, 3, 3, 3)
    attrs = {"auto_pad": "NOTSET", "dilations": None, "kernel_shape": None, "strides": (2, 2), "pads": (1, 1, 1, 1)}
    small, large = normal(1, 3, 8, 8), normal(1, 3, 9, 11)
    first = conv_ops.conv(small, w, group=1, **attrs)
    assert conv_ops.conv(large, w, group=1, **attrs).shape == (1, 4, 5, 6)
    assert conv_ops.conv(small, w, group=1, **attrs).tobytes() == first.tobytes()
    # List-valued attributes (a direct call) are not hashable: computed, not cached.
    listed = conv_ops.conv(small, w, group=1, **(attrs | {"pads": [1, 1, 1, 1]}))
    assert listed.tobytes() == first.tobytes()


def test_batched_conv_in_several_row_blocks() -> None:
    """A batch whose im2col exceeds one block: the images share each block's GEMM columns."""
    from sealtrace.ops._convolution import IM2COL_BYTES

    x_shape, w_shape = (2, 256, 40, 40), (8, 256, 3, 3)
    assert IM2COL_BYTES // (256 * 9 * 20 * 4) < 20  # rows per block < the 20 output rows
    feeds = {"x": normal(*x_shape)}
    # Weights scaled by 1/sqrt(fan-in) keep outputs of order 1, so float32 sums of 2304 terms
    # stay within the absolute tolerance.
    weights = {"w": normal(*w_shape) / np.float32(48.0), "b": normal(w_shape[0])}
    same(build("Conv", feeds, 17, weights, strides=[2, 2], pads=[1, 1, 1, 1]), feeds)


@pytest.mark.parametrize("opset", [7, 11, 22])
def test_conv_versions_and_inferred_kernel_shape(opset: int) -> None:
    feeds = {"x": normal(2, 3, 8, 8)}
    model = build("Conv", feeds, opset, {"w": normal(4, 3, 3, 2)}, pads=[1, 0, 1, 1], strides=[1, 2])
    same(model, feeds)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_conv_keeps_dtype(dtype: Any) -> None:
    feeds = {"x": normal(1, 4, 7, 7, dtype=dtype)}
    for group, w_shape in ((1, (3, 4, 3, 3)), (4, (4, 1, 3, 3))):
        model = build("Conv", feeds, 17, {"w": normal(*w_shape, dtype=dtype)}, group=group, pads=[1, 1, 1, 1])
        got = run_ours(model, feeds)[0]
        assert got.dtype == dtype and got.shape[1] == w_shape[0]
        # onnxruntime has no float64 Conv: the float32 model is the yardstick for both dtypes.
        feeds32 = {"x": feeds["x"].astype(np.float32)}
        w32 = numpy_helper.to_array(model.graph.initializer[0]).astype(np.float32)
        model32 = build("Conv", feeds32, 17, {"w": w32}, group=group, pads=[1, 1, 1, 1])
        np.testing.assert_allclose(got.astype(np.float32), run_theirs(model32, feeds32)[0], rtol=1e-2, atol=1e-2)


def test_conv_is_deterministic() -> None:
    feeds = {"x": normal(1, 16, 20, 20)}
    model = build("Conv", feeds, 17, {"w": normal(32, 16, 3, 3), "b": normal(32)}, pads=[1, 1, 1, 1])
    first = run_ours(model, feeds)[0]
    for _ in range(3):
        assert run_ours(model, feeds)[0].tobytes() == first.tobytes()


def test_conv_empty_batch() -> None:
    feeds = {"x": np.zeros((0, 3, 5, 5), np.float32)}
    got = run_ours(build("Conv", feeds, 17, {"w": normal(2, 3, 3, 3)}, pads=[1, 1, 1, 1]), feeds)[0]
    assert got.shape == (0, 2, 5, 5) and got.dtype == np.float32
    for strides in ([1, 1], [2, 2]):  # depthwise, both gathers
        model = build("Conv", feeds, 17, {"w": normal(3, 1, 3, 3)}, group=3, pads=[1, 1, 1, 1], strides=strides)
        got = run_ours(model, feeds)[0]
        assert got.shape == (0, 3, 5 // strides[0] + 5 % strides[0], 5 // strides[1] + 5 % strides[1])


@pytest.mark.parametrize("strides", [[1, 1], [2, 1]])
def test_depthwise_conv_in_channel_blocks(monkeypatch: pytest.MonkeyPatch, strides: list[int]) -> None:
    # Large images gather their depthwise columns a block of channels at a time: force several
    # (uneven) blocks on a small input and compare with onnxruntime.
    monkeypatch.setattr(_convolution, "IM2COL_BYTES", 3 * 9 * 4 * 100)
    feeds = {"x": normal(2, 10, 9, 11)}
    weights = {"w": normal(10, 1, 3, 3), "b": normal(10)}
    same(build("Conv", feeds, 17, weights, group=10, pads=[1, 1, 1, 1], strides=strides), feeds)


CONV_TRANSPOSE_CASES: list[tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = [
    ((1, 3, 5, 5), (3, 2, 3, 3), {}),
    ((2, 4, 4, 6), (4, 3, 2, 2), {"strides": [2, 2]}),  # non-overlapping upsampling
    ((1, 3, 4, 5), (3, 2, 2, 3), {"strides": [2, 3], "output_padding": [1, 2], "pads": [1, 0, 0, 1]}),
    ((1, 3, 4, 5), (3, 2, 2, 2), {"strides": [2, 2], "output_shape": [8, 9]}),
    ((1, 4, 5, 5), (4, 2, 3, 3), {"group": 2, "strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    ((1, 2, 4, 4), (2, 3, 3, 3), {"strides": [3, 2], "dilations": [2, 1], "pads": [0, 1, 2, 0]}),
    ((1, 2, 4, 5), (2, 2, 3, 3), {"strides": [2, 2], "output_shape": [9, 10]}),
    ((1, 2, 4, 5), (2, 2, 3, 3), {"strides": [2, 2], "output_shape": [8, 11], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 4, 5), (2, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 4, 5), (2, 2, 4, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 4, 5), (2, 2, 3, 3), {"strides": [2, 2], "auto_pad": "VALID"}),
    ((1, 3, 10), (3, 2, 4), {"strides": [2], "pads": [1, 2]}),  # 1-D
    ((1, 2, 3, 3, 3), (2, 2, 2, 2, 2), {"strides": [2, 2, 2]}),  # 3-D
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CONV_TRANSPOSE_CASES)
def test_conv_transpose_matches_onnxruntime(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any]
) -> None:
    feeds = {"x": normal(*x_shape)}
    group = attrs.get("group", 1)
    weights = {"w": normal(*w_shape), "b": normal(w_shape[1] * group)}
    same(build("ConvTranspose", feeds, 17, weights, kernel_shape=list(w_shape[2:]), **attrs), feeds)


@pytest.mark.parametrize("opset", [7, 11, 22])
def test_conv_transpose_versions(opset: int) -> None:
    feeds = {"x": normal(1, 3, 4, 4)}
    same(build("ConvTranspose", feeds, opset, {"w": normal(3, 2, 3, 3)}, strides=[2, 2]), feeds)


def _conv_integer_reference(x: np.ndarray, w: np.ndarray, xz: int, wz: np.ndarray, pads: int) -> np.ndarray:
    """Direct sum over the window, in int64, for 2-D inputs with zero-point padding."""
    xs = np.pad(x.astype(np.int64) - xz, ((0, 0), (0, 0), (pads, pads), (pads, pads)))
    ws = w.astype(np.int64) - wz.reshape(-1, 1, 1, 1)
    n, _, h, wd = xs.shape
    m, _, kh, kw = ws.shape
    out = np.zeros((n, m, h - kh + 1, wd - kw + 1), np.int64)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,mc->nmhw", xs[:, :, i : i + out.shape[2], j : j + out.shape[3]], ws[:, :, i, j])
    return out.astype(np.int32)


def test_conv_integer_matches_onnxruntime() -> None:
    feeds = {"x": RNG.integers(0, 256, (1, 3, 6, 6)).astype(np.uint8)}
    weights = {"w": RNG.integers(0, 256, (4, 3, 3, 3)).astype(np.uint8), "x_zero_point": np.uint8(128)}
    weights["w_zero_point"] = np.uint8(100)
    model = build("ConvInteger", feeds, 10, {"w": weights["w"], "xz": weights["x_zero_point"], "wz": weights["w_zero_point"]}, pads=[1, 1, 1, 1])
    same(model, feeds, rtol=0, atol=0)


def test_conv_integer_per_channel_zero_point() -> None:
    # onnxruntime only takes a scalar w_zero_point; a direct int64 sum is the reference here.
    x = RNG.integers(-128, 128, (2, 3, 5, 5)).astype(np.int8)
    w = RNG.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8)
    wz = np.array([0, 3, -5, 7], np.int8)
    feeds = {"x": x}
    model = build("ConvInteger", feeds, 10, {"w": w, "xz": np.int8(-3), "wz": wz}, pads=[1, 1, 1, 1])
    got = run_ours(model, feeds)[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, _conv_integer_reference(x, w, -3, wz, 1))


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_conv_matches_onnxruntime(per_channel: bool, dtype: Any) -> None:
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max + 1, (1, 4, 7, 7)).astype(dtype)
    w = RNG.integers(-60, 60, (6, 2, 3, 3)).astype(np.int8)
    w_scale = (RNG.random(6) * 0.02 + 0.005).astype(np.float32) if per_channel else np.float32(0.01)
    w_zero = np.zeros(6, np.int8) if per_channel else np.int8(0)
    weights = {
        "xs": np.float32(0.05), "xz": dtype(3), "w": w, "ws": w_scale, "wz": w_zero,
        "ys": np.float32(0.2), "yz": dtype(-5 if dtype == np.int8 else 120), "b": RNG.integers(-500, 500, 6).astype(np.int32),
    }
    feeds = {"x": x}
    model = build("QLinearConv", feeds, 10, weights, group=2, pads=[1, 1, 1, 1], strides=[2, 1])
    same(model, feeds, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("group", "offset_group", "with_mask", "attrs"),
    [
        (1, 1, False, {}),
        (1, 1, True, {"pads": [1, 1, 1, 1]}),
        (2, 2, True, {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 2, 0, 1]}),
    ],
)
def test_deform_conv_matches_onnxruntime(group: int, offset_group: int, with_mask: bool, attrs: dict[str, Any]) -> None:
    x = normal(2, 4, 7, 8)
    w = normal(6, 4 // group, 3, 2)
    probe = sealtrace.Session(build("Conv", {"x": x}, 17, {"w": w}, group=group, **attrs)).run(None, {"x": x})[0]
    oh, ow = probe.shape[2:]
    feeds = {"x": x, "offset": (normal(2, offset_group * 6 * 2, oh, ow) * 2)}
    if with_mask:
        feeds["mask"] = RNG.random((2, offset_group * 6, oh, ow)).astype(np.float32)
    node = helper.make_node(
        "DeformConv", ["x", "w", "offset", "b", "mask" if with_mask else ""], ["out0"],
        group=group, offset_group=offset_group, kernel_shape=[3, 2], **attrs,
    )
    inputs = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, v.shape) for n, v in feeds.items()]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(normal(6), "b")]
    model = make_model([node], inputs, [onnx.ValueInfoProto(name="out0")], inits, opset=19)
    same(model, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("image", "block", "attrs"),
    [
        ((5, 5), (2, 2), {}),
        ((6, 4), (2, 2), {"strides": [2, 2]}),
        ((6, 7), (3, 2), {"strides": [2, 1], "pads": [1, 0, 1, 1], "dilations": [1, 2]}),
        ((8,), (3,), {"strides": [2], "pads": [1, 1]}),
    ],
)
def test_col2im_matches_onnxruntime(image: tuple[int, ...], block: tuple[int, ...], attrs: dict[str, Any]) -> None:
    rank = len(image)
    strides = attrs.get("strides", [1] * rank)
    dil = attrs.get("dilations", [1] * rank)
    pads = attrs.get("pads", [0] * 2 * rank)
    blocks = [
        (i + pads[a] + pads[a + rank] - (k - 1) * d - 1) // s + 1
        for a, (i, k, s, d) in enumerate(zip(image, block, strides, dil, strict=True))
    ]
    feeds = {"data": normal(2, 3 * int(np.prod(block)), int(np.prod(blocks)))}
    weights = {"image_shape": np.array(image, np.int64), "block_shape": np.array(block, np.int64)}
    model = build("Col2Im", feeds, 18, weights, **attrs)
    if rank == 2:
        same(model, feeds)
    else:  # onnxruntime implements 2-D Col2Im only; 1-D is the 2-D case with a unit axis
        flat = build("Col2Im", feeds, 18, {"image_shape": np.array((*image, 1), np.int64), "block_shape": np.array((*block, 1), np.int64)},
                     strides=[*strides, 1], dilations=[*dil, 1], pads=[pads[0], 0, pads[1], 0])
        np.testing.assert_allclose(run_ours(model, feeds)[0], run_theirs(flat, feeds)[0][..., 0], rtol=1e-6, atol=1e-6)


def _causal_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, past: np.ndarray | None, act: str) -> tuple[np.ndarray, np.ndarray]:
    k = w.shape[2]
    if past is None:
        past = np.zeros((x.shape[0], x.shape[1], k - 1), x.dtype)
    padded = np.concatenate([past, x], axis=2)
    feeds = {"x": padded.astype(np.float32)}
    weights = {"w": w.astype(np.float32), "b": None if b is None else b.astype(np.float32)}
    y = run_theirs(build("Conv", feeds, 17, weights, group=x.shape[1]), feeds)[0]
    if act != "none":
        y = y / (1 + np.exp(-y))
    return y.astype(x.dtype), padded[:, :, padded.shape[2] - (k - 1):]


@pytest.mark.parametrize("activation", ["none", "silu", "swish"])
@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("with_state", [False, True])
def test_causal_conv_with_state(activation: str, k: int, with_state: bool) -> None:
    x, w, b = normal(2, 5, 7), normal(5, 1, k), normal(5)
    past = normal(2, 5, k - 1) if with_state else None
    feeds = {"x": x}
    model = build("CausalConvWithState", feeds, 27, {"w": w, "b": b, "past": past}, n_outputs=2, activation=activation)
    y, present = run_ours(model, feeds)
    want_y, want_present = _causal_reference(x, w, b, past, activation)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(present, want_present)
    assert y.shape == x.shape and present.shape == (2, 5, k - 1)


def test_causal_conv_streaming_equals_one_shot() -> None:
    x, w = normal(1, 3, 12), normal(3, 1, 4)
    whole = run_ours(build("CausalConvWithState", {"x": x}, 27, {"w": w}, n_outputs=2, activation="none"), {"x": x})
    first = run_ours(build("CausalConvWithState", {"x": x[:, :, :5]}, 27, {"w": w}, n_outputs=2, activation="none"), {"x": x[:, :, :5]})
    feeds = {"x": x[:, :, 5:]}
    second = run_ours(build("CausalConvWithState", feeds, 27, {"w": w, "b": None, "past": first[1]}, n_outputs=2, activation="none"), feeds)
    np.testing.assert_allclose(np.concatenate([first[0], second[0]], axis=2), whole[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(second[1], whole[1])


@pytest.mark.parametrize(
    ("w_shape", "attrs"),
    [
        ((6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),  # depthwise, flat gather
        ((6, 1, 3, 3), {"group": 6, "strides": [2, 1]}),  # depthwise, direct gather
        ((4, 6, 3, 3), {"pads": [1, 1, 1, 1]}),  # im2col
        ((4, 6, 3, 1), {}),  # im2col with no cropped columns
        ((4, 6, 3, 3), {"strides": [3, 3]}),  # im2col, stride phases
    ],
)
def test_conv_results_never_share_work_buffers(w_shape: tuple[int, ...], attrs: dict[str, Any]) -> None:
    # im2col blocks live in reused per-thread buffers: a kernel's result (which later steps read,
    # not only the graph's outputs that the backend copies) must stay as it was while other
    # convolutions run.
    w = normal(*w_shape)
    geometry = {"auto_pad": "NOTSET", "dilations": None, "kernel_shape": None, "group": 1, "pads": None}
    geometry |= {"strides": None} | attrs
    first = conv_ops.conv(normal(1, 6, 9, 10), w, **geometry)
    kept = first.copy()
    for shape in ((1, 6, 9, 10), (1, 6, 4, 4), (1, 6, 30, 30)):
        conv_ops.conv(normal(*shape), w, **geometry)
    assert first.tobytes() == kept.tobytes()


def test_single_channel_single_row_conv_is_not_a_work_buffer() -> None:
    # One channel and one output row: the cropped grid is a contiguous slice of the work buffer,
    # which must still be copied out.
    geometry = {"auto_pad": "NOTSET", "dilations": None, "kernel_shape": None, "strides": None}
    w = normal(1, 1, 3, 3)
    first = conv_ops.conv(normal(1, 1, 3, 8), w, group=1, pads=None, **geometry)
    kept = first.copy()
    conv_ops.conv(normal(1, 1, 3, 8), w, group=1, pads=None, **geometry)
    conv_ops.conv(normal(1, 1, 5, 8), w, group=1, pads=[1, 1, 1, 1], **geometry)
    assert first.shape == (1, 1, 1, 6) and first.tobytes() == kept.tobytes()


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs"),
    [
        ((2, 4, 13, 11), (6, 4, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ((2, 4, 13, 11), (6, 2, 3, 2), {"group": 2, "strides": [2, 1], "dilations": [1, 2]}),
        ((1, 3, 6, 7, 8), (4, 3, 2, 3, 2), {"strides": [2, 2, 1], "pads": [1, 0, 1, 0, 1, 1]}),
    ],
)
def test_direct_conv_in_row_blocks(
    monkeypatch: pytest.MonkeyPatch, x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any]
) -> None:
    # Strided convolutions gather their windows a block of output rows at a time: force several
    # (uneven) blocks on small inputs and compare with onnxruntime.
    monkeypatch.setattr(_convolution, "IM2COL_BYTES", 2000)
    feeds = {"x": normal(*x_shape)}
    weights = {"w": normal(*w_shape), "b": normal(w_shape[0])}
    same(build("Conv", feeds, 17, weights, kernel_shape=list(w_shape[2:]), **attrs), feeds)


@pytest.mark.parametrize("pads", [(0, 0, 0, 0), (1, 0, 0, 1)])
@pytest.mark.parametrize("output_padding", [(0, 0), (1, 1)])
def test_conv_transpose_tiles_give_the_bits_of_the_general_path(pads: tuple[int, ...], output_padding: tuple[int, ...]) -> None:
    # kernel = stride: the tiles path and the general one (the convolution it equals) compute the
    # same correctly rounded sums (docs/numerics.md, ConvTranspose), uncovered positions the bias
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    kwargs: dict[str, Any] = dict(
        auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, output_shape=None, strides=(2, 2)
    )
    got = conv_transpose.conv_transpose(x, w, b, pads=pads, output_padding=output_padding, **kwargs)
    begin, out_shape = conv_transpose._transpose_geometry((5, 6), (2, 2), (2, 2), (1, 1), output_padding, pads, None, "NOTSET")
    want = conv_transpose._transposed_as_convolution(
        x, w, b, 1, (2, 2), (2, 2), (1, 1), begin, out_shape, _convolution.Products(x.dtype)
    )
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()
