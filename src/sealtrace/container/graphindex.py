"""The graph index of a container (format version 2): a digest for each node, each attribute of a
node, each opset import, and for everything else in the graph section, so that a changed graph is
reported as ``node 12 '/encoder/Conv' (Conv): attribute 'strides'`` and not only as a changed
section.

The index is computed from the section's protobuf *wire records*, not from a parsed and
re-serialized model: the digests are of bytes as they are stored, so an independent verifier needs
only the wire format and eight field numbers (docs/container-format.md, "The graph index"). The
section bytes may be anything when the section was tampered with: every read here is bounded by the
bytes at hand and nothing is allocated by a size the bytes declare.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from sealtrace.container.errors import Mismatch
from sealtrace.protowire import BYTES as _BYTES
from sealtrace.protowire import Record, WireError, records

# onnx.proto field numbers the index splits on.
_MODEL_GRAPH = 7  # ModelProto.graph
_MODEL_OPSET_IMPORT = 8  # ModelProto.opset_import
_GRAPH_NODE = 1  # GraphProto.node
_NODE_NAME = 3  # NodeProto.name
_NODE_OP_TYPE = 4  # NodeProto.op_type
_NODE_ATTRIBUTE = 5  # NodeProto.attribute
_ATTRIBUTE_NAME = 1  # AttributeProto.name
_OPSET_DOMAIN = 1  # OperatorSetIdProto.domain

LABEL_LENGTH = 256  # code points of a name kept for reports


def _digest(data: bytes, parts: Sequence[Record]) -> str:
    h = hashlib.sha256()
    for r in parts:
        h.update(data[r.start : r.end])
    return h.hexdigest()


def _label(data: bytes, parts: Sequence[Record], number: int) -> str | None:
    """The last record ``number``'s payload as text, cut to LABEL_LENGTH code points; None if it is
    not valid UTF-8; '' when the field is absent."""
    last = None
    for r in parts:
        if r.number == number and r.wire == _BYTES:
            last = r
    if last is None:
        return ""
    try:
        text = data[last.payload_start : last.payload_end].decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text[:LABEL_LENGTH]


def _payload(data: bytes, r: Record) -> bytes:
    return data[r.payload_start : r.payload_end]


def graph_index(section: bytes | memoryview) -> dict[str, Any] | None:
    """The graph index of a graph section, or None when a message it splits is malformed."""
    data = bytes(section)
    try:
        top = records(data)
        opsets = []
        for r in top:
            if r.number == _MODEL_OPSET_IMPORT and r.wire == _BYTES:
                payload = _payload(data, r)
                opsets.append({"domain": _label(payload, records(payload), _OPSET_DOMAIN), "sha256": _digest(data, [r])})
        graph = b"".join(_payload(data, r) for r in top if r.number == _MODEL_GRAPH and r.wire == _BYTES)
        graph_records = records(graph)
        nodes = []
        for r in graph_records:
            if r.number != _GRAPH_NODE or r.wire != _BYTES:
                continue
            node = _payload(graph, r)
            node_records = records(node)
            attributes = []
            body = hashlib.sha256()
            for a in node_records:
                if a.number == _NODE_ATTRIBUTE and a.wire == _BYTES:
                    payload = _payload(node, a)
                    attributes.append({
                        "name": _label(payload, records(payload), _ATTRIBUTE_NAME),
                        "sha256": hashlib.sha256(node[a.start : a.end]).hexdigest(),
                    })  # fmt: skip
                else:
                    body.update(node[a.start : a.end])
            nodes.append({
                "name": _label(node, node_records, _NODE_NAME),
                "op_type": _label(node, node_records, _NODE_OP_TYPE),
                "sha256": body.hexdigest(),
                "attributes": attributes,
            })  # fmt: skip
    except WireError:
        return None
    return {
        "model": _digest(data, [r for r in top if r.wire != _BYTES or r.number not in (_MODEL_GRAPH, _MODEL_OPSET_IMPORT)]),
        "opset_imports": opsets,
        "graph": _digest(graph, [r for r in graph_records if r.number != _GRAPH_NODE or r.wire != _BYTES]),
        "nodes": nodes,
    }


def shown(label: str | None, quoted: bool = True) -> str:
    """A label as reports show it: quoted, quotes, backslashes and control characters escaped."""
    if label is None:
        return "?"
    text = "".join(f"\\u{ord(c):04x}" if c in "'\\" or ord(c) < 0x20 or ord(c) == 0x7F else c for c in label)
    return f"'{text}'" if quoted else text


def _node_key(node: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    return node["sha256"], tuple(a["sha256"] for a in node["attributes"])


def _node_name(index: int, node: dict[str, Any]) -> str:
    return f"node {index} {shown(node['name'])} ({shown(node['op_type'], quoted=False)})"


def compare(recorded: dict[str, Any], found: dict[str, Any]) -> list[Mismatch]:
    """Each difference between the index a container records and the index of its changed graph."""
    out: list[Mismatch] = []
    if recorded["model"] != found["model"]:
        out.append(Mismatch("graph", "model fields outside the graph and opset imports", recorded["model"], found["model"]))
    was, now = recorded["opset_imports"], found["opset_imports"]
    if len(was) == len(now):
        for i, (a, b) in enumerate(zip(was, now, strict=True)):
            if a != b:
                out.append(Mismatch("graph", f"opset import {i} {shown(a['domain'])}", a["sha256"], b["sha256"]))
    else:
        out.append(Mismatch("graph", "opset imports", f"{len(was)} recorded", f"{len(now)} found"))
    if recorded["graph"] != found["graph"]:
        out.append(Mismatch(
            "graph", "graph fields other than nodes (name, inputs, outputs, initializers ...)",
            recorded["graph"], found["graph"],
        ))  # fmt: skip
    out.extend(_compare_nodes(recorded["nodes"], found["nodes"]))
    return out


def _compare_nodes(was: list[dict[str, Any]], now: list[dict[str, Any]]) -> list[Mismatch]:
    # Equal runs at both ends line the two lists up; what lies between them changed. A node added
    # or removed shows as exactly that; edits that also change the count show as removed + added.
    n, m = len(was), len(now)
    head = 0
    while head < min(n, m) and _node_key(was[head]) == _node_key(now[head]):
        head += 1
    tail = 0
    while tail < min(n, m) - head and _node_key(was[n - 1 - tail]) == _node_key(now[m - 1 - tail]):
        tail += 1
    out: list[Mismatch] = []
    if n != m:
        for k in range(head, n - tail):
            out.append(Mismatch("graph", f"{_node_name(k, was[k])} removed", was[k]["sha256"], "absent"))
        for k in range(head, m - tail):
            out.append(Mismatch("graph", f"{_node_name(k, now[k])} added", "absent", now[k]["sha256"]))
        return out
    for k in range(head, n - tail):
        a, b = was[k], now[k]
        if _node_key(a) == _node_key(b):
            continue
        name = _node_name(k, a)
        reported = len(out)
        if a["sha256"] != b["sha256"]:
            out.append(Mismatch("graph", name, a["sha256"], b["sha256"]))
        matched: set[int] = set()
        for attribute in a["attributes"]:
            j = next((j for j, other in enumerate(b["attributes"])
                      if j not in matched and other["name"] == attribute["name"]), None)  # fmt: skip
            label = f"{name}: attribute {shown(attribute['name'])}"
            if j is None:
                out.append(Mismatch("graph", f"{label} removed", attribute["sha256"], "absent"))
                continue
            matched.add(j)
            if b["attributes"][j]["sha256"] != attribute["sha256"]:
                out.append(Mismatch("graph", label, attribute["sha256"], b["attributes"][j]["sha256"]))
        for j, other in enumerate(b["attributes"]):
            if j not in matched:
                out.append(Mismatch("graph", f"{name}: attribute {shown(other['name'])} added", "absent", other["sha256"]))
        if len(out) == reported:  # the same attributes, each unchanged, in another order
            out.append(Mismatch("graph", f"{name}: attributes reordered", a["sha256"], b["sha256"]))
    return out
