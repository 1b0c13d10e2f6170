"""ONNX / NumPy element types <-> torch dtypes."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import torch

_BY_ONNX: dict[int, torch.dtype] = {
    onnx.TensorProto.FLOAT: torch.float32,
    onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.FLOAT16: torch.float16,
    onnx.TensorProto.BFLOAT16: torch.bfloat16,
    onnx.TensorProto.INT8: torch.int8,
    onnx.TensorProto.INT16: torch.int16,
    onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.INT64: torch.int64,
    onnx.TensorProto.UINT8: torch.uint8,
    onnx.TensorProto.UINT16: torch.uint16,
    onnx.TensorProto.UINT32: torch.uint32,
    onnx.TensorProto.UINT64: torch.uint64,
    onnx.TensorProto.BOOL: torch.bool,
    onnx.TensorProto.COMPLEX64: torch.complex64,
    onnx.TensorProto.COMPLEX128: torch.complex128,
    onnx.TensorProto.FLOAT8E4M3FN: torch.float8_e4m3fn,
    onnx.TensorProto.FLOAT8E4M3FNUZ: torch.float8_e4m3fnuz,
    onnx.TensorProto.FLOAT8E5M2: torch.float8_e5m2,
    onnx.TensorProto.FLOAT8E5M2FNUZ: torch.float8_e5m2fnuz,
    onnx.TensorProto.FLOAT8E8M0: torch.float8_e8m0fnu,
}
# ml_dtypes names of the types NumPy lacks (torch converts them through float32).
_ML_DTYPES = {
    torch.bfloat16: "bfloat16",
    torch.float8_e4m3fn: "float8_e4m3fn",
    torch.float8_e4m3fnuz: "float8_e4m3fnuz",
    torch.float8_e5m2: "float8_e5m2",
    torch.float8_e5m2fnuz: "float8_e5m2fnuz",
    torch.float8_e8m0fnu: "float8_e8m0fnu",
}
_TO_ONNX = {v: k for k, v in _BY_ONNX.items()}


def torch_dtype(elem_type: int) -> torch.dtype:
    """The torch dtype of an ONNX TensorProto element type; ValueError when torch has none."""
    try:
        return _BY_ONNX[elem_type]
    except KeyError:
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in onnx.TensorProto.DataType.values() else elem_type
        raise ValueError(f"element type {name} has no torch equivalent") from None


def onnx_elem_type(dtype: torch.dtype) -> int:
    """The ONNX element type of a torch dtype."""
    return _TO_ONNX[dtype]


def from_numpy(array: Any) -> torch.Tensor:
    """A torch tensor holding a copy of ``array`` (NumPy or scalar), with the same dtype."""
    arr = np.asarray(array)
    if arr.dtype.kind in "OSU":
        raise ValueError("string tensors have no torch equivalent")
    if arr.dtype.kind == "V" or arr.dtype.name not in _NUMPY_OK:
        elem = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
        target = torch_dtype(elem)
        # bfloat16 (ml_dtypes) and friends: go through float32, which holds them exactly.
        # (np.array, not np.ascontiguousarray, which turns a 0-d array into a 1-d one.)
        return torch.from_numpy(np.array(arr.astype(np.float32), order="C")).to(target)
    return torch.from_numpy(np.array(arr, copy=True, order="C"))


_NUMPY_OK = {
    "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "bool", "complex64", "complex128",
}


def to_numpy(value: Any) -> Any:
    """A tensor as a NumPy array (bfloat16 and float8 as ml_dtypes' types), a sequence (list) as a
    list of arrays; other values (None, an empty optional) unchanged."""
    if isinstance(value, list):
        return [to_numpy(v) for v in value]
    if not isinstance(value, torch.Tensor):
        return value
    t = value.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype in _ML_DTYPES:
        import ml_dtypes

        return t.float().numpy().astype(getattr(ml_dtypes, _ML_DTYPES[t.dtype]))
    return t.numpy()
