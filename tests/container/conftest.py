"""Fixtures for container tests: a tiny model, keys, and a builder for hand-made containers."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealtrace.container.format import FORMAT_VERSION, MAGIC, PREAMBLE, PREAMBLE_SIZE, align
from sealtrace.digest import canonical_json, json_digest
from sealtrace.signing import generate_keypair


def tiny_model() -> onnx.ModelProto:
    """x[1,2] -> MatMul(W) -> Add(Constant B) -> Relu: one initializer and one Constant-node weight."""
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5, "W")
    b = numpy_helper.from_array(np.array([0.5, -1.0, 2.0], np.float32), "b_value")
    nodes = [
        helper.make_node("Constant", [], ["B"], value=b, name="const_b"),
        helper.make_node("MatMul", ["x", "W"], ["y"], name="matmul"),
        helper.make_node("Add", ["y", "B"], ["z"], name="add"),
        helper.make_node("Relu", ["z"], ["out"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3])],
        [w],
    )
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def tiny_onnx(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), path)
    return path


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    """Two key pairs: 'alice' (the signer) and 'mallory' (someone else)."""
    found = {}
    for name in ("alice", "mallory"):
        private, public = generate_keypair(tmp_path / f"{name}.pem")
        found[name] = private
        found[f"{name}.pub"] = public
    return found


def split(data: bytes) -> tuple[dict[str, Any], bytes]:
    """(header document, data area) of a container's bytes."""
    import json

    _, _, length, _ = PREAMBLE.unpack(data[:PREAMBLE_SIZE])
    header = json.loads(data[PREAMBLE_SIZE : PREAMBLE_SIZE + length])
    return header, data[align(PREAMBLE_SIZE + length) :]


def assemble(header: dict[str, Any], data_area: bytes, digest: str | None = None, version: int = FORMAT_VERSION) -> bytes:
    """Bytes of a container with this header and data area; the preamble digest is recomputed
    (as a tamperer would) unless given."""
    raw = canonical_json(header)
    digest = digest or json_digest(header["container"])
    start = PREAMBLE_SIZE + len(raw)
    return (
        PREAMBLE.pack(MAGIC, version, len(raw), bytes.fromhex(digest))
        + raw
        + b"\0" * (align(start) - start)
        + data_area
    )


def edited(data: bytes, edit: Any) -> bytes:
    """The container with ``edit(header)`` applied to a copy of its header, digest recomputed."""
    header, area = split(data)
    header = copy.deepcopy(header)
    edit(header)
    return assemble(header, area)
