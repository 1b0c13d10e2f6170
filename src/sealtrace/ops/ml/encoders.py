"""Encoders of the ai.onnx.ml domain: LabelEncoder, CategoryMapper and OneHotEncoder, each a
lookup of every element in a table of categories."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sealtrace.ops.ml._inputs import ML_DOMAIN, object_array
from sealtrace.ops.registry import register


def _encode(
    x: np.ndarray, keys: np.ndarray, values: np.ndarray, default: Any, nan_matches: bool = False
) -> np.ndarray:
    """Map every element of x through keys -> values (the last of repeated keys wins); else default."""
    flat = x.reshape(-1)
    if flat.dtype.kind == "f":
        # Floats are matched by value; from LabelEncoder-4 on a NaN key matches any NaN input.
        table = {float(k): i for i, k in enumerate(keys.astype(flat.dtype)) if not math.isnan(float(k))}
        nan_keys = (i for i, k in enumerate(keys) if math.isnan(float(k)))
        nan_index = max(nan_keys, default=-1) if nan_matches else -1
    else:
        table = {k: i for i, k in enumerate(keys.tolist())}
        nan_index = -1
    # Look every distinct input up once, then scatter back.
    distinct, inverse = np.unique(flat, return_inverse=True)
    if flat.dtype.kind == "f":
        picks = [nan_index if math.isnan(float(v)) else table.get(float(v), -1) for v in distinct]
    else:
        picks = [table.get(v, -1) for v in distinct.tolist()]
    index = np.asarray(picks, dtype=np.int64)[inverse.reshape(-1)]
    out = np.empty(flat.shape, dtype=values.dtype)
    found = index >= 0
    out[found] = values[index[found]]
    out[~found] = default
    return out.reshape(x.shape)


@register("LabelEncoder", 1, domain=ML_DOMAIN)
def label_encoder_1(
    x: np.ndarray, *, classes_strings: tuple[str, ...] | None, default_int64: int, default_string: str
) -> np.ndarray:
    """LabelEncoder-1: strings to their index in classes_strings, or indices to the class strings."""
    classes = object_array(classes_strings or ())
    if x.dtype == object:
        return _encode(x, classes, np.arange(len(classes), dtype=np.int64), default_int64)
    return _encode(x.astype(np.int64), np.arange(len(classes), dtype=np.int64), classes, default_string)


def _label_encoder(x: np.ndarray, attrs: dict[str, Any], nan_matches: bool) -> np.ndarray:
    keys: np.ndarray | None = None
    if attrs.get("keys_tensor") is not None:
        keys = attrs["keys_tensor"].reshape(-1)
    elif attrs.get("keys_strings") is not None:
        keys = object_array(attrs["keys_strings"])
    elif attrs.get("keys_int64s") is not None:
        keys = np.asarray(attrs["keys_int64s"], dtype=np.int64)
    elif attrs.get("keys_floats") is not None:
        keys = np.asarray(attrs["keys_floats"], dtype=np.float32)
    if keys is None:
        raise ValueError("LabelEncoder needs one of the keys_* attributes")
    if attrs.get("values_tensor") is not None:
        values = attrs["values_tensor"].reshape(-1)
        if attrs.get("default_tensor") is not None:
            default: Any = attrs["default_tensor"].reshape(-1)[0]
        else:
            default = "_Unused" if values.dtype == object else (-0.0 if values.dtype.kind == "f" else -1)
    elif attrs.get("values_strings") is not None:
        values, default = object_array(attrs["values_strings"]), attrs["default_string"]
    elif attrs.get("values_int64s") is not None:
        values, default = np.asarray(attrs["values_int64s"], dtype=np.int64), attrs["default_int64"]
    elif attrs.get("values_floats") is not None:
        values, default = np.asarray(attrs["values_floats"], dtype=np.float32), attrs["default_float"]
    else:
        raise ValueError("LabelEncoder needs one of the values_* attributes")
    if len(keys) != len(values):
        raise ValueError(f"LabelEncoder has {len(keys)} keys but {len(values)} values")
    return _encode(x, keys, values, default, nan_matches)


@register("LabelEncoder", 2, domain=ML_DOMAIN)
def label_encoder_2(
    x: np.ndarray,
    *,
    default_float: float,
    default_int64: int,
    default_string: str,
    keys_floats: tuple[float, ...] | None,
    keys_int64s: tuple[int, ...] | None,
    keys_strings: tuple[str, ...] | None,
    values_floats: tuple[float, ...] | None,
    values_int64s: tuple[int, ...] | None,
    values_strings: tuple[str, ...] | None,
) -> np.ndarray:
    """LabelEncoder-2: keys_* -> values_* mapping (floats, int64s or strings)."""
    return _label_encoder(x, dict(locals()), nan_matches=False)


@register("LabelEncoder", 4, domain=ML_DOMAIN)
def label_encoder_4(
    x: np.ndarray,
    *,
    default_float: float,
    default_int64: int,
    default_string: str,
    default_tensor: np.ndarray | None,
    keys_floats: tuple[float, ...] | None,
    keys_int64s: tuple[int, ...] | None,
    keys_strings: tuple[str, ...] | None,
    keys_tensor: np.ndarray | None,
    values_floats: tuple[float, ...] | None,
    values_int64s: tuple[int, ...] | None,
    values_strings: tuple[str, ...] | None,
    values_tensor: np.ndarray | None,
) -> np.ndarray:
    """LabelEncoder-4: adds keys / values / default as tensors of any type; NaN keys match NaN."""
    return _label_encoder(x, dict(locals()), nan_matches=True)


@register("OneHotEncoder", 1, domain=ML_DOMAIN)
def one_hot_encoder(
    x: np.ndarray, *, cats_int64s: tuple[int, ...] | None, cats_strings: tuple[str, ...] | None, zeros: int
) -> np.ndarray:
    """OneHotEncoder-1: a new last axis of len(categories), 1.0 at each element's category (numbers
    are truncated to int64 first); an unknown category is all zeros, or an error when zeros=0."""
    if bool(cats_int64s) == bool(cats_strings):
        raise ValueError("OneHotEncoder needs exactly one of cats_int64s and cats_strings")
    if x.ndim > 2:
        raise ValueError(f"OneHotEncoder takes an input of rank 2 at most, got shape {list(x.shape)}")
    if cats_strings:
        categories = object_array(cats_strings)
        flat = x.reshape(-1)
    else:
        categories = np.asarray(cats_int64s, dtype=np.int64)
        flat = x.reshape(-1).astype(np.int64)
    # A repeated category counts at its last position, as in ORT's category table.
    index = _encode(flat, categories, np.arange(len(categories), dtype=np.int64), -1)
    if not zeros and (index < 0).any():
        unknown = flat[int(np.flatnonzero(index < 0)[0])]
        raise ValueError(f"OneHotEncoder: unknown category {unknown!r} and zeros=0")
    out = np.zeros((flat.size, len(categories)), dtype=np.float32)
    known = np.flatnonzero(index >= 0)
    out[known, index[known]] = 1.0
    return out.reshape(*x.shape, len(categories))


@register("CategoryMapper", 1, domain=ML_DOMAIN)
def category_mapper(
    x: np.ndarray,
    *,
    cats_int64s: tuple[int, ...] | None,
    cats_strings: tuple[str, ...] | None,
    default_int64: int,
    default_string: str,
) -> np.ndarray:
    """CategoryMapper-1: strings to their paired int64 (default_int64 when unknown), or int64 to
    their paired string (default_string)."""
    strings, ints = object_array(cats_strings or ()), np.asarray(cats_int64s or (), dtype=np.int64)
    if len(strings) != len(ints):
        raise ValueError(f"CategoryMapper: {len(strings)} cats_strings but {len(ints)} cats_int64s")
    if x.dtype == object:
        return _encode(x, strings, ints, default_int64)
    return _encode(x.astype(np.int64, copy=False), ints, strings, default_string)
