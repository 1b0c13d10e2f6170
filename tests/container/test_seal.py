"""Sealing, verifying, unsealing and running containers; the header against its JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealtrace import Session
from sealtrace.container import (
    IntegrityError,
    SealingError,
    describe_container,
    open_container,
    seal_model,
    unseal,
    verify_container,
)
from sealtrace.container.format import ALIGNMENT, PREAMBLE_SIZE
from sealtrace.outputs import OutputExistsError
from tests.container.conftest import split, tiny_model

SCHEMA = Path(__file__).resolve().parents[2] / "src" / "sealtrace" / "schemas" / "container-header.schema.json"


def test_seal_verify_unseal_round_trip(tiny_onnx: Path, tmp_path: Path) -> None:
    info = seal_model(tiny_onnx, tmp_path / "tiny.seal")
    assert info.tensors == 2  # the initializer and the Constant node's value
    report = verify_container(tmp_path / "tiny.seal")
    assert report.ok and report.digest == info.digest and report.tensors == 2
    result = unseal(tmp_path / "tiny.seal", tmp_path / "back.onnx")
    assert result.same_as_source
    assert (tmp_path / "back.onnx").read_bytes() == tiny_onnx.read_bytes()


def test_layout_is_aligned_and_tensors_are_views(tiny_onnx: Path, tmp_path: Path) -> None:
    seal_model(tiny_onnx, tmp_path / "tiny.seal")
    with open_container(tmp_path / "tiny.seal") as c:
        assert c.data_start % ALIGNMENT == 0 and c.data_start >= PREAMBLE_SIZE
        for entry in c.entries:
            assert (c.data_start + entry.offset) % ALIGNMENT == 0
        np.testing.assert_array_equal(c.array("W"), np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5)
        np.testing.assert_array_equal(c.array("B"), [0.5, -1.0, 2.0])
        assert {e.name for e in c.tensors} == {"W", "B"}


def test_sealing_is_deterministic(tiny_onnx: Path, tmp_path: Path) -> None:
    seal_model(tiny_onnx, tmp_path / "a.seal")
    seal_model(tiny_onnx, tmp_path / "b.seal")
    assert (tmp_path / "a.seal").read_bytes() == (tmp_path / "b.seal").read_bytes()


def test_session_runs_container_bit_identical(tiny_onnx: Path, tmp_path: Path) -> None:
    seal_model(tiny_onnx, tmp_path / "tiny.seal")
    feeds = {"x": np.array([[1.0, -2.0]], np.float32)}
    sealed = Session(str(tmp_path / "tiny.seal"))
    plain = Session(str(tiny_onnx))
    assert sealed.plan.digest == plain.plan.digest
    assert sealed.run(None, feeds)[0].tobytes() == plain.run(None, feeds)[0].tobytes()
    assert sealed.origin.kind == "container"
    assert sealed.origin.container_digest == describe_container(tmp_path / "tiny.seal")["container_digest"]
    import hashlib

    assert sealed.origin.sha256 == hashlib.sha256((tmp_path / "tiny.seal").read_bytes()).hexdigest()


def test_session_refuses_tampered_container(tiny_onnx: Path, tmp_path: Path) -> None:
    seal_model(tiny_onnx, tmp_path / "tiny.seal")
    data = bytearray((tmp_path / "tiny.seal").read_bytes())
    data[-1] ^= 0x40  # last byte of the last tensor
    (tmp_path / "bad.seal").write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="'B'"):
        Session(str(tmp_path / "bad.seal"))


def test_session_signature_options(tiny_onnx: Path, tmp_path: Path, keys: dict[str, Path]) -> None:
    seal_model(tiny_onnx, tmp_path / "s.seal", sign_with=keys["alice"])
    Session(str(tmp_path / "s.seal"), trust=[keys["alice.pub"]], require_signature=True)
    with pytest.raises(IntegrityError, match="signature"):
        Session(str(tmp_path / "s.seal"), trust=[keys["mallory.pub"]], require_signature=True)


def test_constant_node_weights_are_sealed_like_initializers(tmp_path: Path) -> None:
    model = tiny_model()
    seal_model(model, tmp_path / "m.seal")
    info = describe_container(tmp_path / "m.seal")
    assert [t["name"] for t in info["tensors"]] == ["W", "B"]
    assert info["source"]["file_name"] is None


def test_external_data_is_sealed(tmp_path: Path) -> None:
    model = tiny_model()
    big = numpy_helper.from_array(np.linspace(-1, 1, 4096, dtype=np.float32).reshape(2, 2048)[:, :3].copy(), "W")
    model.graph.initializer[0].CopyFrom(big)
    onnx.save(model, tmp_path / "ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.data", size_threshold=0)  # fmt: skip
    info = seal_model(tmp_path / "ext.onnx", tmp_path / "ext.seal")
    described = describe_container(tmp_path / "ext.seal")
    assert [e["path"] for e in described["source"]["external_data"]] == ["ext.data"]
    assert info.tensors == 2
    feeds = {"x": np.array([[0.25, 4.0]], np.float32)}
    ours = Session(str(tmp_path / "ext.seal")).run(None, feeds)[0]
    theirs = Session(str(tmp_path / "ext.onnx")).run(None, feeds)[0]
    assert ours.tobytes() == theirs.tobytes()
    # The unsealed model is self-contained: no external data left.
    unseal(tmp_path / "ext.seal", tmp_path / "back.onnx")
    back = onnx.load(tmp_path / "back.onnx", load_external_data=False)
    assert not any(t.external_data for t in back.graph.initializer)


def test_non_raw_storage_round_trips_bit_exact(tmp_path: Path) -> None:
    model = tiny_model()
    # float_data instead of raw_data, as some exporters write it.
    model.graph.initializer[0].CopyFrom(
        helper.make_tensor("W", TensorProto.FLOAT, [2, 3], [1.5, -0.0, 3.25, float("inf"), 1e-45, 7.0])
    )
    onnx.save(model, tmp_path / "m.onnx")
    seal_model(tmp_path / "m.onnx", tmp_path / "m.seal")
    tensors = {t["name"]: t for t in describe_container(tmp_path / "m.seal")["tensors"]}
    assert tensors["W"]["storage"] == "float_data"
    assert unseal(tmp_path / "m.seal", tmp_path / "back.onnx").same_as_source


def test_unplannable_model_is_a_clear_error(tmp_path: Path) -> None:
    model = tiny_model()
    model.graph.node[3].op_type = "NoSuchOp"
    with pytest.raises(SealingError, match=r"Plan cannot be built.*NoSuchOp"):
        seal_model(model, tmp_path / "x.seal")
    assert not (tmp_path / "x.seal").exists()


def test_existing_output_is_kept_unless_forced(tiny_onnx: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.seal"
    out.write_bytes(b"precious")
    with pytest.raises(OutputExistsError):
        seal_model(tiny_onnx, out)
    assert out.read_bytes() == b"precious"
    seal_model(tiny_onnx, out, force=True)
    assert verify_container(out).ok
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp files left


def test_header_validates_against_json_schema(tiny_onnx: Path, tmp_path: Path, keys: dict[str, Path]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    seal_model(tiny_onnx, tmp_path / "s.seal", sign_with=[keys["alice"], keys["mallory"]])
    header, _ = split((tmp_path / "s.seal").read_bytes())
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(header, schema)
    assert len(header["signatures"]) == 2


def test_large_tensor_is_hashed_in_chunks(tmp_path: Path) -> None:
    model = tiny_model()
    model.graph.initializer.append(numpy_helper.from_array(np.arange(300_000, dtype=np.float32), "big"))
    seal_model(model, tmp_path / "c.seal", chunk_size=1 << 16)
    with open_container(tmp_path / "c.seal") as c:
        big = c.entry("big")
        assert len(big.sha256) == -(-1_200_000 // (1 << 16))
        where = c.data_start + big.offset + 5 * (1 << 16) + 7
    data = bytearray((tmp_path / "c.seal").read_bytes())
    data[where] ^= 1
    with pytest.raises(IntegrityError) as info:
        verify_container(bytes(data))
    (m,) = info.value.mismatches
    assert m.name == "big" and "chunk 5 of" in m.expected and m.offset == where - 7


@pytest.mark.parametrize("onnx_name", ["w:0", "/model/conv/Constant_output_0", "../up", "a\\b", "./x", "C:\\w"])
def test_awkward_onnx_names_seal_to_valid_names(tmp_path: Path, onnx_name: str) -> None:
    model = tiny_model()
    for node in model.graph.node:
        node.input[:] = [onnx_name if n == "W" else n for n in node.input]
    model.graph.initializer[0].name = onnx_name
    seal_model(model, tmp_path / "m.seal")
    names = [t["name"] for t in describe_container(tmp_path / "m.seal")["tensors"]]
    assert len(names) == 2 and names[0] != onnx_name  # each of these needed defusing
    assert verify_container(tmp_path / "m.seal").ok
    feeds = {"x": np.array([[1.0, 2.0]], np.float32)}
    assert Session(str(tmp_path / "m.seal")).run(None, feeds)[0].tobytes() == Session(model).run(None, feeds)[0].tobytes()


def test_trust_options_apply_to_containers_only(tiny_onnx: Path, keys: dict[str, Path]) -> None:
    # Trust refuses anything not signed by a trusted key: an ONNX file is a failed check (exit 1;
    # issue 14, item 2; it was an InputError, exit 2).
    with pytest.raises(IntegrityError, match="not a sealed container"):
        Session(str(tiny_onnx), trust=[keys["alice.pub"]])
    assert Session(str(tiny_onnx)).origin.kind == "onnx"


_DTYPES = [
    (TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64), (TensorProto.FLOAT16, np.float16),
    (TensorProto.INT8, np.int8), (TensorProto.UINT8, np.uint8), (TensorProto.INT16, np.int16),
    (TensorProto.UINT16, np.uint16), (TensorProto.INT32, np.int32), (TensorProto.INT64, np.int64),
    (TensorProto.UINT32, np.uint32), (TensorProto.UINT64, np.uint64), (TensorProto.BOOL, np.bool_),
]  # fmt: skip


@pytest.mark.parametrize("raw", [True, False], ids=["raw_data", "typed_field"])
def test_every_numeric_dtype_round_trips_bit_exact(tmp_path: Path, raw: bool) -> None:
    rng = np.random.default_rng(1)
    model = tiny_model()
    for code, dtype in _DTYPES:
        values = (rng.standard_normal(7) * 100).astype(dtype)
        model.graph.initializer.append(
            helper.make_tensor(f"t_{dtype.__name__}", code, [7], values.tobytes() if raw else values.tolist(), raw=raw)
        )
    model.graph.initializer.append(helper.make_tensor("empty", TensorProto.FLOAT, [0, 3], []))
    onnx.save(model, tmp_path / "m.onnx")
    seal_model(tmp_path / "m.onnx", tmp_path / "m.seal")
    assert unseal(tmp_path / "m.seal", tmp_path / "back.onnx").same_as_source
    storage = {t["name"]: t["storage"] for t in describe_container(tmp_path / "m.seal")["tensors"]}
    assert "empty" not in storage  # no data field at all: stays in the graph section
    assert all((storage[f"t_{d.__name__}"] == "raw_data") == raw for _, d in _DTYPES)
    with open_container(tmp_path / "m.seal") as c:
        for _code, dtype in _DTYPES:
            name = f"t_{dtype.__name__}"
            expected = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == name))
            assert c.array(name).tobytes() == expected.tobytes(), name


@pytest.mark.parametrize("name", ["../x", "a/../b", "/abs", "C:w", "a\\b", "a\nb", "", "./a", "a/."])
def test_json_schema_refuses_what_the_reader_refuses(tiny_onnx: Path, tmp_path: Path, name: str) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    seal_model(tiny_onnx, tmp_path / "s.seal")
    header, _ = split((tmp_path / "s.seal").read_bytes())
    header["container"]["tensors"][0]["name"] = name
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(header, json.loads(SCHEMA.read_text()))
