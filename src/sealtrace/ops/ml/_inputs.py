"""How the ai.onnx.ml kernels read their inputs and attributes: the domain they register in,
string attributes as object arrays, class labels, and feature inputs as float32 rows."""

from __future__ import annotations

from typing import Any

import numpy as np

ML_DOMAIN = "ai.onnx.ml"


def object_array(values: Any) -> np.ndarray:
    """A 1-D object array of ``values`` (np.asarray would make a fixed-width string array)."""
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def class_labels(strings: tuple[str, ...] | None, ints: tuple[int, ...] | None) -> np.ndarray:
    """A classifier's labels: the string labels when given, else the int64 ones."""
    return object_array(strings) if strings else np.asarray(ints or (), np.int64)


def as_float32(x: np.ndarray) -> np.ndarray:
    """The input as float32, as ONNX Runtime casts float64/int32/int64 features for these kernels."""
    return x.astype(np.float32, copy=False)


def feature_rows(x: np.ndarray, op: str) -> np.ndarray:
    """A 1-D or 2-D feature input as [samples, features] (1-D: one sample)."""
    if x.ndim == 0 or x.ndim > 2:
        raise ValueError(f"{op} takes a 1-D or 2-D input, got shape {list(x.shape)}")
    return x.reshape(1, -1) if x.ndim == 1 else x
