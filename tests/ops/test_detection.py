"""NonMaxSuppression against onnxruntime (selection order, ties, degenerate and flipped boxes, optional
inputs, both box formats) and ImageDecoder on images encoded with Pillow."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

from sealtrace.ops.detection import image_decoder
from tests.ops.oneop import assert_same, both


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
