"""Detection pipelines: NonMaxSuppression post-processing and ImageDecoder input decoding."""

from __future__ import annotations

import numpy as np

from sealtrace.ops.registry import register

_F32 = np.float32


def _corners(
    boxes: np.ndarray, center_point_box: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_min, y_min, x_max, y_max) per box, in float32 as ONNX Runtime computes them."""
    if center_point_box:
        # [x_center, y_center, width, height]
        half_w = boxes[:, 2] / _F32(2)
        half_h = boxes[:, 3] / _F32(2)
        return boxes[:, 0] - half_w, boxes[:, 1] - half_h, boxes[:, 0] + half_w, boxes[:, 1] + half_h
    # [y1, x1, y2, x2], either diagonal pair of corners.
    return (
        np.minimum(boxes[:, 1], boxes[:, 3]),
        np.minimum(boxes[:, 0], boxes[:, 2]),
        np.maximum(boxes[:, 1], boxes[:, 3]),
        np.maximum(boxes[:, 0], boxes[:, 2]),
    )


def _suppressed(
    corners: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    best: int,
    rest: np.ndarray,
    threshold: np.float32,
) -> np.ndarray:
    """Which boxes of ``rest`` overlap box ``best`` with IoU > threshold."""
    x0, y0, x1, y1 = corners
    ix0 = np.maximum(x0[best], x0[rest])
    iy0 = np.maximum(y0[best], y0[rest])
    ix1 = np.minimum(x1[best], x1[rest])
    iy1 = np.minimum(y1[best], y1[rest])
    inter = (ix1 - ix0) * (iy1 - iy0)
    area_best = (x1[best] - x0[best]) * (y1[best] - y0[best])
    area_rest = (x1[rest] - x0[rest]) * (y1[rest] - y0[rest])
    union = area_best + area_rest - inter
    overlapping = (ix1 > ix0) & (iy1 > iy0) & (inter > 0) & (area_best > 0) & (area_rest > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / np.where(overlapping, union, _F32(1))
    return overlapping & (iou > threshold)


@register("NonMaxSuppression", 10, 11)
def non_max_suppression(
    boxes: np.ndarray,
    scores: np.ndarray,
    max_output_boxes_per_class: np.ndarray | None = None,
    iou_threshold: np.ndarray | None = None,
    score_threshold: np.ndarray | None = None,
    *,
    center_point_box: int,
) -> np.ndarray:
    """NonMaxSuppression-10, -11: greedy per-class suppression; rows (batch, class, box) in selection order."""
    limit = int(max_output_boxes_per_class.reshape(-1)[0]) if max_output_boxes_per_class is not None else 0
    if max_output_boxes_per_class is not None and max_output_boxes_per_class.size == 0:
        limit = 0
    iou_max = (
        _F32(iou_threshold.reshape(-1)[0]) if iou_threshold is not None and iou_threshold.size else _F32(0)
    )
    has_score_min = score_threshold is not None and score_threshold.size > 0
    score_min = _F32(score_threshold.reshape(-1)[0]) if has_score_min else _F32(0)  # type: ignore[union-attr]
    selected: list[tuple[int, int, int]] = []
    if limit <= 0:
        return np.zeros((0, 3), dtype=np.int64)
    boxes = boxes.astype(_F32, copy=False)
    scores = scores.astype(_F32, copy=False)
    for batch in range(boxes.shape[0]):
        corners = _corners(boxes[batch], center_point_box)
        for cls in range(scores.shape[1]):
            class_scores = scores[batch, cls]
            candidates = (
                np.nonzero(class_scores > score_min)[0] if has_score_min else np.arange(class_scores.size)
            )
            # Highest score first; equal scores keep the lower box index first (stable sort).
            order = candidates[np.argsort(-class_scores[candidates], kind="stable")]
            kept = 0
            while order.size and kept < limit:
                best, order = int(order[0]), order[1:]
                selected.append((batch, cls, best))
                kept += 1
                if order.size:
                    order = order[~_suppressed(corners, best, order, iou_max)]
    if not selected:
        return np.zeros((0, 3), dtype=np.int64)
    return np.array(selected, dtype=np.int64)


@register("ImageDecoder", 20)
def image_decoder(encoded_stream: np.ndarray, *, pixel_format: str) -> np.ndarray:
    """ImageDecoder-20: decode an encoded image (JPEG, PNG, BMP, TIFF, WebP, PNM ...) to uint8 HWC."""
    import io

    try:
        from PIL import Image  # optional: only models that decode images need Pillow
    except ImportError as exc:
        raise RuntimeError("ImageDecoder needs Pillow (pip install pillow)") from exc
    with Image.open(io.BytesIO(encoded_stream.tobytes())) as image:
        if pixel_format == "Grayscale":
            return np.asarray(image.convert("L"), dtype=np.uint8)[:, :, None].copy()
        rgb = np.asarray(image.convert("RGB"), dtype=np.uint8)
    if pixel_format == "RGB":
        return rgb.copy()
    if pixel_format == "BGR":
        return np.ascontiguousarray(rgb[:, :, ::-1])
    raise ValueError(f"unknown pixel_format {pixel_format!r}")
