"""The graph index (format version 2): a changed graph section is reported node by node, attribute by
attribute; the index itself must match the section; version 1 containers are still read.

tests/container/data/v1.seal and v1-signed.seal (signed by the key of v1-signed.pub) were written by
sealtrace at 98f73af, the last writer of format version 1, from a two-node model of this project."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from sealtrace.cli import main
from sealtrace.container import add_signatures, describe_container, seal_model, verify_container
from sealtrace.container.errors import ContainerDamagedError, IntegrityError
from sealtrace.container.format import open_container
from sealtrace.container.graphindex import compare, graph_index, shown
from sealtrace.protowire import WireError, records
from sealtrace.session import Session
from tests.container.conftest import assemble, split, tiny_model

DATA = Path(__file__).parent / "data"
MODEL = "model fields outside the graph and opset imports"


PADDING = 64


@pytest.fixture
def sealed(tmp_path: Path) -> bytes:
    model = tiny_model()
    model.doc_string = "#" * PADDING  # room for a forger to keep the section's length
    seal_model(model, tmp_path / "t.seal")
    return (tmp_path / "t.seal").read_bytes()


def _graph_span(data: bytes) -> tuple[int, int]:
    with open_container(data) as c:
        entry = c.entry("graph", "section")
        return c.data_start + entry.offset, entry.length


def forge(data: bytes, edit: Callable[[onnx.ModelProto], None]) -> bytes:
    """The container with its graph section edited in place, the header untouched (a tamperer who
    cannot re-sign). An edit that changes the section's length is evened out with the model's doc
    string, so the file layout still holds and the section's digest is what catches the change."""
    start, length = _graph_span(data)
    model = onnx.ModelProto()
    model.ParseFromString(data[start : start + length])
    edit(model)
    raw = model.SerializeToString(deterministic=True)
    for pad in range(2 * PADDING):
        if len(raw) == length:
            break
        model.doc_string = "#" * pad
        raw = model.SerializeToString(deterministic=True)
    assert len(raw) == length, "no padding gives the same length"
    return data[:start] + raw + data[start + length :]


def _graph_failures(data: bytes) -> list[str]:
    report = verify_container(data, raise_on_failure=False)
    assert report.mismatches[0].kind == "section" and report.mismatches[0].name == "graph"
    return [m.name for m in report.mismatches[1:] if m.kind == "graph"]


def test_a_new_container_is_version_2_and_indexes_its_graph_section(sealed: bytes) -> None:
    start, length = _graph_span(sealed)
    with open_container(sealed) as c:
        assert c.format_version == 2
        assert c.graph_index == graph_index(sealed[start : start + length])
        index = c.graph_index
    assert index is not None
    assert [(n["name"], n["op_type"]) for n in index["nodes"]] == [
        ("const_b", "Constant"), ("matmul", "MatMul"), ("add", "Add"), ("relu", "Relu")
    ]
    assert [a["name"] for a in index["nodes"][0]["attributes"]] == ["value"]
    assert index["opset_imports"][0]["domain"] == ""
    assert verify_container(sealed).ok


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda m: setattr(m.graph.node[3], "op_type", "Tanh"), ["node 3 'relu' (Relu)"]),
        (lambda m: m.graph.node[2].input.__setitem__(1, "y"), ["node 2 'add' (Add)"]),
        (lambda m: m.graph.node[0].attribute[0].t.dims.__setitem__(0, 4), ["node 0 'const_b' (Constant): attribute 'value'"]),
        (lambda m: setattr(m.opset_import[0], "version", 18), ["opset import 0 ''"]),
        (lambda m: setattr(m.graph, "name", "tinY"), ["graph fields other than nodes (name, inputs, outputs, initializers ...)"]),
        (lambda m: setattr(m, "ir_version", 9), [MODEL]),
        # These change the section's length: the forger's padding shows as a change of the model's fields.
        (lambda m: m.graph.node.remove(m.graph.node[3]), [MODEL, "node 3 'relu' (Relu) removed"]),
        (lambda m: m.graph.node.insert(1, onnx.helper.make_node("Identity", ["x"], ["x2"], name="spy")),
         [MODEL, "node 1 'spy' (Identity) added"]),
        (lambda m: m.graph.node[1].attribute.append(onnx.helper.make_attribute("transB", 1)),
         [MODEL, "node 1 'matmul' (MatMul): attribute 'transB' added"]),
        (lambda m: m.graph.node[0].attribute.pop(), [MODEL, "node 0 'const_b' (Constant): attribute 'value' removed"]),
    ],
    ids=["op type", "rewired input", "attribute", "opset", "graph name", "ir version", "node removed", "node added",
         "attribute added", "attribute removed"],
)
def test_a_changed_graph_is_named_finely(sealed: bytes, edit: Callable[[onnx.ModelProto], None], expected: list[str]) -> None:
    assert _graph_failures(forge(sealed, edit)) == expected


def test_the_cli_lists_what_changed_in_the_graph(sealed: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "forged.seal"
    path.write_bytes(forge(sealed, lambda m: setattr(m.graph.node[3], "op_type", "Tanh")))
    assert main(["verify", str(path)]) == 1
    err = capsys.readouterr().err
    assert "MISMATCH section 'graph'" in err and "MISMATCH graph: node 3 'relu' (Relu) changed" in err
    assert main(["verify", str(path), "--json"]) == 1
    failures = json.loads(capsys.readouterr().out)["failures"]
    assert [(f["kind"], f["where"]) for f in failures] == [("section", "graph"), ("graph", "node 3 'relu' (Relu)")]


def test_an_index_that_does_not_match_the_section_is_a_malformed_header(sealed: bytes) -> None:
    header, area = split(sealed)
    header["container"]["graph_index"]["nodes"][3]["name"] = "innocent"
    with pytest.raises(ContainerDamagedError, match="graph index does not match"):
        verify_container(assemble(header, area))


def test_a_graph_that_no_longer_splits_into_records_is_reported_as_the_section_only(sealed: bytes) -> None:
    start, _ = _graph_span(sealed)
    broken = sealed[:start] + b"\xff" * 11 + sealed[start + 11 :]  # an 11-byte varint tag
    report = verify_container(broken, raise_on_failure=False)
    assert [(m.kind, m.name) for m in report.mismatches] == [("section", "graph")]


def test_wire_records_follow_the_spec() -> None:
    assert [(r.number, r.wire, r.start, r.end) for r in records(b"\x08\x96\x01\x12\x02hi\x1d\0\0\0\0")] == [
        (1, 0, 0, 3), (2, 2, 3, 7), (3, 5, 7, 12)
    ]
    assert [(r.number, r.wire) for r in records(b"\x0b\x10\x01\x0c")] == [(1, 3)]  # a group, kept whole
    for bad in (b"\x12\x05hi", b"\x0c", b"\x0b\x10\x01\x14", b"\x0e", b"\x00", b"\x08", b"\x80" * 10 + b"\x01",
                b"\x0b" * 101 + b"\x0c" * 101, b"\xf8\xff\xff\xff\x1f\x00"):
        with pytest.raises(WireError):
            records(bad)
    assert len(records(b"\x0b" * 100 + b"\x0c" * 100)) == 1  # 100 nested groups are allowed
    assert len(records(b"\xf8\xff\xff\xff\x0f\x00")) == 1  # the largest field number


def test_labels_are_cut_escaped_and_null_when_not_utf8() -> None:
    def node(name: bytes) -> bytes:
        node_bytes = b"\x1a" + bytes([len(name)]) + name
        graph = b"\x0a" + bytes([len(node_bytes)]) + node_bytes
        return b"\x3a" + bytes([len(graph)]) + graph

    assert graph_index(node(b"\xff"))["nodes"][0]["name"] is None  # type: ignore[index]
    assert graph_index(node("é".encode() * 60))["nodes"][0]["name"] == "é" * 60  # type: ignore[index]
    long = graph_index(b"\x3a\x84\x01\x0a\x81\x01\x1a\x7f" + b"n" * 127)
    assert long is not None and long["nodes"][0]["name"] == "n" * 127 and long["nodes"][0]["op_type"] == ""
    cut = graph_index(b"\x3a\x86\x03\x0a\x83\x03\x1a\x80\x03" + b"n" * 384)
    assert cut is not None and cut["nodes"][0]["name"] == "n" * 256
    assert shown("a'b\\c\n\x7fé") == "'a\\u0027b\\u005cc\\u000a\\u007fé'" and shown(None) == "?"


def test_nodes_that_change_in_number_are_reported_between_the_equal_ends() -> None:
    def index(*keys: str) -> dict[str, object]:
        nodes = [{"name": k, "op_type": "Op", "sha256": k * 64, "attributes": []} for k in keys]
        return {"model": "0" * 64, "graph": "0" * 64, "opset_imports": [], "nodes": nodes}

    assert [m.name for m in compare(index("a", "b", "c"), index("a", "c"))] == ["node 1 'b' (Op) removed"]
    assert [m.name for m in compare(index("a", "b", "c"), index("a", "d", "e", "c"))] == [
        "node 1 'b' (Op) removed", "node 1 'd' (Op) added", "node 2 'e' (Op) added"
    ]
    assert [m.name for m in compare(index("a", "b", "c"), index("a", "x", "c"))] == ["node 1 'b' (Op)"]
    assert compare(index("a"), index("a")) == []


def test_attributes_in_another_order_are_named_as_reordered() -> None:
    def index(*attributes: tuple[str, str]) -> dict[str, object]:
        node = {"name": "n", "op_type": "If", "sha256": "0" * 64,
                "attributes": [{"name": a, "sha256": d * 64} for a, d in attributes]}
        return {"model": "0" * 64, "graph": "0" * 64, "opset_imports": [], "nodes": [node]}

    was = index(("then_branch", "a"), ("else_branch", "b"))
    assert [m.name for m in compare(was, index(("else_branch", "b"), ("then_branch", "a")))] == [
        "node 0 'n' (If): attributes reordered"
    ]
    assert [m.name for m in compare(was, index(("else_branch", "c"), ("then_branch", "a")))] == [
        "node 0 'n' (If): attribute 'else_branch'"
    ]


def test_version_1_containers_are_still_read_verified_run_and_signed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = DATA / "v1.seal"
    report = verify_container(old)
    assert report.ok and describe_container(old)["format_version"] == 1
    signed = verify_container(DATA / "v1-signed.seal", trust=[DATA / "v1-signed.pub"])
    assert signed.ok and signed.digest == report.digest
    outputs = Session(str(old)).run(None, {"x": np.ones((1, 4), np.float32)})
    assert outputs[0].shape == (1, 3)
    # Countersigning keeps the version (and so the digest the first signature covers).
    key = tmp_path / "k.pem"
    assert main(["keygen", "-o", str(key)]) == 0
    add_signatures(DATA / "v1-signed.seal", tmp_path / "twice.seal", key)
    twice = verify_container(tmp_path / "twice.seal", trust=[DATA / "v1-signed.pub", tmp_path / "k.pub"])
    assert twice.ok and describe_container(tmp_path / "twice.seal")["format_version"] == 1
    # A changed graph in a version 1 container is named as the section only: it has no index.
    start, length = _graph_span(old.read_bytes())
    blob = bytearray(old.read_bytes())
    blob[start + length - 1] ^= 1
    with pytest.raises(IntegrityError) as failed:
        verify_container(bytes(blob))
    assert [(m.kind, m.name) for m in failed.value.mismatches] == [("section", "graph")]
