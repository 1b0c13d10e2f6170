"""Map operators of the ai.onnx.ml domain: ZipMap (scores to maps), DictVectorizer and CastMap
(maps to tensors). Maps are Python dicts, as ONNX Runtime's Python API takes and returns them."""

from __future__ import annotations

from typing import Any

import numpy as np

from sealtrace.ops.ml._inputs import ML_DOMAIN, object_array
from sealtrace.ops.registry import KernelContext, register


@register("ZipMap", 1, domain=ML_DOMAIN)
def zip_map(
    x: np.ndarray, *, classlabels_int64s: tuple[int, ...] | None, classlabels_strings: tuple[str, ...] | None
) -> list[dict[Any, float]]:
    """ZipMap-1: each row of scores as a map from class label to score, a sequence of maps. Maps are
    Python dicts of Python numbers, as ONNX Runtime's Python API returns them (scikit-learn
    classifiers converted by skl2onnx end with this op by default)."""
    if bool(classlabels_int64s) == bool(classlabels_strings):
        raise ValueError("ZipMap needs exactly one of classlabels_int64s and classlabels_strings")
    labels: list[Any] = (
        list(classlabels_strings) if classlabels_strings else [int(v) for v in classlabels_int64s or ()]
    )
    if x.ndim not in (1, 2) or x.shape[-1] != len(labels):
        raise ValueError(f"ZipMap: input of shape {list(x.shape)} for {len(labels)} class labels")
    rows = x.reshape(-1, len(labels)).astype(np.float32, copy=False).tolist()
    return [dict(zip(labels, row, strict=True)) for row in rows]


@register("DictVectorizer", 1, domain=ML_DOMAIN, context=True)
def dict_vectorizer(
    ctx: KernelContext,
    x: dict[Any, Any],
    *,
    int64_vocabulary: tuple[int, ...] | None,
    string_vocabulary: tuple[str, ...] | None,
) -> np.ndarray:
    """DictVectorizer-1: a map's values at the vocabulary's keys, [1, len(vocabulary)]; a key the map
    lacks gives 0 (or "" for string values). The dtype is the map's value type as the model declares
    it (a dict of Python floats does not say float32 or float64)."""
    if not isinstance(x, dict):
        raise ValueError(f"DictVectorizer takes a map, got {type(x).__name__}")
    if bool(int64_vocabulary) == bool(string_vocabulary):
        raise ValueError("DictVectorizer needs exactly one of int64_vocabulary and string_vocabulary")
    vocabulary: list[Any] = (
        list(string_vocabulary) if string_vocabulary else [int(v) for v in int64_vocabulary or ()]
    )
    declared = ctx.output_info[0].dtype if ctx.output_info and ctx.output_info[0] is not None else None
    values = list(x.values())
    if (declared is not None and declared.kind in "OUS") or (
        values and all(isinstance(v, str) for v in values)
    ):
        return object_array([x.get(k, "") for k in vocabulary]).reshape(1, -1)
    dtype = (
        declared if declared is not None else (np.asarray(values).dtype if values else np.dtype(np.float32))
    )
    return np.asarray([x.get(k, 0) for k in vocabulary], dtype=dtype).reshape(1, -1)


@register("CastMap", 1, domain=ML_DOMAIN)
def cast_map(x: dict[int, Any], *, cast_to: str, map_form: str, max_map: int) -> np.ndarray:
    """CastMap-1: an int64-keyed map's values in key order as a [1, n] tensor of cast_to's type; SPARSE
    puts each value at its key's position among 0..max_map-1 and pads the rest (0, or "0.f" as ORT
    writes for strings)."""
    if not isinstance(x, dict):
        raise ValueError(f"CastMap takes a map, got {type(x).__name__}")
    keys = sorted(int(k) for k in x)
    target = {"TO_FLOAT": np.float32, "TO_INT64": np.int64, "TO_STRING": object}.get(cast_to)
    if target is None:
        raise ValueError(f"CastMap cast_to must be TO_FLOAT, TO_INT64 or TO_STRING, got {cast_to!r}")

    def cast(value: Any) -> Any:
        if target is object:  # std::to_string of a float: six decimals
            return value if isinstance(value, str) else f"{float(np.float32(value)):.6f}"
        number = float(value) if isinstance(value, str) else float(np.float32(value))
        return np.float32(number) if target is np.float32 else int(number)

    if map_form == "DENSE":
        items = [cast(x[k]) for k in keys]
    elif map_form == "SPARSE":
        if keys and keys[0] < 0:
            raise ValueError(f"CastMap SPARSE: negative key {keys[0]}")
        pad: Any = "0.f" if target is object else 0
        items = [cast(x[k]) if k in x else pad for k in range(max_map)]
    else:
        raise ValueError(f"CastMap map_form must be DENSE or SPARSE, got {map_form!r}")
    if target is object:
        return object_array(items).reshape(1, -1)
    return np.asarray(items, dtype=target).reshape(1, -1)
