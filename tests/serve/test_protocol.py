"""The protocol codec alone (no HTTP): decoding checks, encoding, and the edge cases clients hit."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from sealtrace.plan.model import ValueInfo
from sealtrace.serve.protocol import (
    HEADER_LENGTH,
    InferenceRequest,
    ProtocolError,
    RequestedOutput,
    TensorSpec,
    encode_response,
    parse_request,
)

X = TensorSpec.of(ValueInfo("x", "tensor", np.dtype(np.float32), ("N", 2)))
S = TensorSpec.of(ValueInfo("s", "tensor", np.dtype(np.int64), ()))
INPUTS = {"x": X, "s": S}
OUTPUTS = {"y": TensorSpec.of(ValueInfo("y", "tensor", np.dtype(np.float32), ("N",)))}


def _parse(document: dict) -> InferenceRequest:
    return parse_request(json.dumps(document).encode(), None, INPUTS, OUTPUTS)


def test_nested_flat_and_bare_scalar_data_decode_alike() -> None:
    flat = _parse({"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]},
                              {"name": "s", "shape": [], "datatype": "INT64", "data": 7}]})
    nested = _parse({"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2], [3, 4]]},
                                {"name": "s", "shape": [], "datatype": "INT64", "data": [7]}]})
    for request in (flat, nested):
        assert request.inputs["x"].dtype == np.float32 and request.inputs["x"].tolist() == [[1, 2], [3, 4]]
        assert request.inputs["s"].shape == () and int(request.inputs["s"]) == 7
    with pytest.raises(ProtocolError, match="nested as"):
        _parse({"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2, 3, 4]]},
                           {"name": "s", "shape": [], "datatype": "INT64", "data": 7}]})


def test_nan_and_infinity_travel_as_triton_writes_them() -> None:
    body = (b'{"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [NaN, -Infinity]},'
            b'{"name": "s", "shape": [], "datatype": "INT64", "data": 1}]}')
    request = parse_request(body, None, INPUTS, OUTPUTS)
    assert np.isnan(request.inputs["x"][0, 0]) and request.inputs["x"][0, 1] == -np.inf
    values = {"y": np.array([np.nan, np.inf, 1.5], np.float32)}
    encoded = encode_response("m", "1", request, values, OUTPUTS, {"record_id": "r"}, "ledger_index")
    content, headers = encoded.body(12)
    document = json.loads(content)  # Python's json reads NaN and Infinity, as tritonclient does
    assert headers == {} and document["parameters"] == {"record_id": "r", "ledger_index": 12}
    assert np.isnan(document["outputs"][0]["data"][0]) and document["outputs"][0]["data"][1:] == [np.inf, 1.5]


def test_binary_response_header_length_counts_the_index() -> None:
    request = InferenceRequest("q", {}, [RequestedOutput("y", True)])
    values = {"y": np.arange(3, dtype=np.float32)}
    for index in (0, 7, 123456789):
        content, headers = encode_response("m", "1", request, values, OUTPUTS, {}, "ledger_index").body(index)
        length = int(headers[HEADER_LENGTH])
        document = json.loads(content[:length])
        assert document["parameters"]["ledger_index"] == index and document["id"] == "q"
        assert np.frombuffer(content[length:], np.float32).tolist() == [0, 1, 2]


def test_outputs_without_a_json_form_are_sent_binary() -> None:
    import ml_dtypes

    request = InferenceRequest(None, {}, None)
    specs = {"b": TensorSpec("b", None, None, None), "t": TensorSpec("t", "BYTES", None, None)}
    values = {"b": np.ones(2, ml_dtypes.bfloat16), "t": np.array([b"\xff", b"ok"], dtype=object)}
    content, headers = encode_response("m", "1", request, values, specs, {}, "i").body(0)
    length = int(headers[HEADER_LENGTH])
    outputs = json.loads(content[:length])["outputs"]
    assert [o["datatype"] for o in outputs] == ["BF16", "BYTES"]
    assert all("binary_data_size" in o["parameters"] for o in outputs)
    assert content[length + 4:].endswith(struct.pack("<I", 1) + b"\xff" + struct.pack("<I", 2) + b"ok")


def test_bf16_inputs_must_be_binary() -> None:
    spec = {"h": TensorSpec("h", "BF16", (2,), None)}
    with pytest.raises(ProtocolError, match="binary"):
        parse_request(b'{"inputs": [{"name": "h", "shape": [2], "datatype": "BF16", "data": [1, 2]}]}', None, spec, {})
