"""NonMaxSuppression against onnxruntime (selection order, ties, degenerate and flipped boxes, optional
inputs, both box formats) and ImageDecoder on images encoded with Pillow."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import sealtrace
from sealtrace.ops.detection import image_decoder


def _model(
    op: str, feeds: dict[str, np.ndarray | None], n_out: int, opset: int, domain: str, **attrs: Any
) -> onnx.ModelProto:
    inputs = [name if value is not None else "" for name, value in feeds.items()]
    while inputs and not inputs[-1]:
        inputs.pop()
    outputs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op, inputs, outputs, domain=domain, **attrs)
    graph = helper.make_graph(
        [node],
        "test",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in feeds.items()
            if v is not None
        ],
        [onnx.ValueInfoProto(name=o) for o in outputs],
    )
    opsets = [helper.make_opsetid(domain, opset)] + ([helper.make_opsetid("", 17)] if domain else [])
    return helper.make_model(graph, ir_version=10, opset_imports=opsets)


def both(
    op: str, feeds: dict[str, np.ndarray | None], opset: int, n_out: int = 1, domain: str = "", **attrs: Any
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(ours, onnxruntime's) outputs of a one-node model."""
    model = _model(op, feeds, n_out, opset, domain, **attrs)
    given = {k: v for k, v in feeds.items() if v is not None}
    with np.errstate(all="ignore"):
        got = sealtrace.Session(model).run(None, given)
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return list(got), list(session.run(None, given))


def assert_same(got: list[np.ndarray], want: list[np.ndarray], rtol: float = 0.0, atol: float = 0.0) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        if g.dtype == object:
            assert g.tolist() == w.tolist()
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


@pytest.mark.parametrize("opset", [10, 11])
@pytest.mark.parametrize("center_point_box", [0, 1])
@pytest.mark.parametrize("given", [2, 3, 4, 5])
def test_nms_matches_onnxruntime(opset: int, center_point_box: int, given: int) -> None:
    rng = np.random.default_rng(given * 2 + center_point_box)
    for trial in range(8):
        batches, classes, boxes_n = 2, 3, int(rng.integers(0, 40))
        boxes = rng.random((batches, boxes_n, 4)).astype(np.float32) * 10
        scores = rng.random((batches, classes, boxes_n)).astype(np.float32)
        if trial % 2:
            boxes = np.round(boxes)  # identical, degenerate and flipped boxes
            scores = np.round(scores * 4) / 4  # ties
        optional: list[np.ndarray] = [
            np.array([rng.integers(0, 12)], np.int64),
            np.array([rng.choice([0.0, 0.3, 0.5])], np.float32),
            np.array([rng.choice([0.0, 0.25])], np.float32),
        ]
        feeds: dict[str, np.ndarray | None] = {"boxes": boxes, "scores": scores}
        for name, value in zip(("max", "iou", "score"), optional[: given - 2], strict=False):
            feeds[name] = value
        got, want = both("NonMaxSuppression", feeds, opset, center_point_box=center_point_box)
        assert_same(got, want)


def test_nms_without_max_output_selects_nothing() -> None:
    boxes = np.array([[[0, 0, 1, 1]]], np.float32)
    got, want = both("NonMaxSuppression", {"boxes": boxes, "scores": np.ones((1, 1, 1), np.float32)}, 11)
    assert got[0].shape == (0, 3) and got[0].dtype == np.int64
    assert_same(got, want)


def _encoded(image: Any, fmt: str) -> np.ndarray:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return np.frombuffer(buffer.getvalue(), dtype=np.uint8)


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "TIFF"])
def test_image_decoder_lossless_formats(fmt: str) -> None:
    pil = pytest.importorskip("PIL.Image")
    pixels = np.random.default_rng(0).integers(0, 256, (6, 5, 3), dtype=np.uint8)
    encoded = _encoded(pil.fromarray(pixels), fmt)
    np.testing.assert_array_equal(image_decoder(encoded, pixel_format="RGB"), pixels)
    np.testing.assert_array_equal(image_decoder(encoded, pixel_format="BGR"), pixels[:, :, ::-1])
    gray = image_decoder(encoded, pixel_format="Grayscale")
    assert gray.shape == (6, 5, 1) and gray.dtype == np.uint8


def test_image_decoder_drops_alpha() -> None:
    pil = pytest.importorskip("PIL.Image")
    pixels = np.random.default_rng(1).integers(0, 256, (4, 3, 4), dtype=np.uint8)
    decoded = image_decoder(_encoded(pil.fromarray(pixels, mode="RGBA"), "PNG"), pixel_format="RGB")
    np.testing.assert_array_equal(decoded, pixels[:, :, :3])
