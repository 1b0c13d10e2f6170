"""Sealing a model with external data in one pass (sealtrace.container.stream): the container is
byte for byte the one the loading writer makes, the large weights are never loaded, and a source
file that changes while it is sealed is refused."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealtrace import zoo
from sealtrace.container import SealingError, seal_model, verify_container
from sealtrace.container import stream as stream_module
from sealtrace.container import writer as writer_module
from sealtrace.container.format import MIN_CHUNK_SIZE
from sealtrace.container.signatures import KeySource
from sealtrace.plan import builder as builder_module
from sealtrace.plan import model as plan_model_module
from sealtrace.plan.modelfile import read_model_file
from tests.conftest import require_material


def loaded_seal(path: Path, out: Path, sign_with: list[KeySource] | None = None, chunk_size: int = 16 << 20) -> bytes:
    """What the writer makes of the model loaded whole (every external weight read into memory)."""
    read = read_model_file(path)
    record = {
        "file_name": read.path.name,
        "sha256": read.sha256,
        "size": read.size,
        "external_data": [f.to_json() for f in read.external_data],
    }
    writer_module._seal_loaded(read.model, record, None, out, sign_with or [], False, chunk_size, None)
    return out.read_bytes()


def _external(array: np.ndarray, name: str, location: str, offset: int, data_type: int | None = None) -> TensorProto:
    tensor = numpy_helper.from_array(array, name)
    if data_type is not None:
        tensor.data_type = data_type
    raw = tensor.raw_data
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(len(raw)))):
        tensor.external_data.add(key=key, value=value)
    return tensor


def mixed_model(directory: Path) -> Path:
    """Large and small weights of many types in two external files, with a gap of unused bytes, two
    tensors sharing one range, a packed int4 weight, a Constant node and a subgraph weight."""
    rng = np.random.default_rng(7)
    arrays: list[tuple[str, np.ndarray, int | None]] = [
        ("w_f32", rng.standard_normal((40, 600)).astype(np.float32), None),  # 96 KB: crosses 64 KiB chunks
        ("w_f16", rng.standard_normal(5000).astype(np.float16), None),
        ("w_f64", rng.standard_normal(4200), None),
        ("w_i64", rng.integers(-5, 5, 4100), None),
        ("w_i8", rng.integers(-100, 100, 9000).astype(np.int8), None),
        ("w_u16", rng.integers(0, 60000, 4500).astype(np.uint16), None),
        ("w_bool", rng.integers(0, 2, 5000).astype(bool), None),
        ("w_bf16", rng.standard_normal(6000).astype(ml_dtypes.bfloat16), TensorProto.BFLOAT16),
        ("w_small", np.arange(12, dtype=np.float32).reshape(3, 4), None),
        ("w_i4", rng.integers(-8, 8, 9000).astype(ml_dtypes.int4), TensorProto.INT4),
    ]
    files: dict[str, bytearray] = {"a.bin": bytearray(), "sub/b.bin": bytearray()}
    initializers = []
    for i, (name, array, data_type) in enumerate(arrays):
        location = "a.bin" if i % 2 == 0 else "sub/b.bin"
        data = files[location]
        data.extend(b"\x5a" * (-len(data) % 4096 + 100))  # bytes no tensor covers
        tensor = _external(array, name, location, len(data), data_type)
        raw = numpy_helper.from_array(array, name)
        if data_type is not None:
            raw.data_type = data_type
        data.extend(raw.raw_data)
        initializers.append(tensor)
    twin = TensorProto()
    twin.CopyFrom(initializers[0])
    twin.name = "w_f32_twin"
    initializers.append(twin)
    constant = _external(rng.standard_normal(5000).astype(np.float32), "c", "a.bin", len(files["a.bin"]))
    files["a.bin"].extend(numpy_helper.from_array(rng.standard_normal(5000).astype(np.float32)).raw_data)
    constant.ClearField("name")
    sub_weight = _external(rng.standard_normal(4500).astype(np.float32), "sub_w", "sub/b.bin", len(files["sub/b.bin"]))
    files["sub/b.bin"].extend(numpy_helper.from_array(rng.standard_normal(4500).astype(np.float32)).raw_data)
    then_graph = helper.make_graph(
        [helper.make_node("Identity", ["sub_w"], ["then_out"])], "then", [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [4500])], [sub_weight],
    )  # fmt: skip
    else_graph = helper.make_graph(
        [helper.make_node("Identity", ["w_f32_flat"], ["else_out"])], "else", [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, None)],
    )  # fmt: skip
    nodes = [
        helper.make_node("Constant", [], ["c_out"], value=constant),
        helper.make_node("Reshape", ["w_f32", "flat_shape"], ["w_f32_flat"]),
        helper.make_node("If", ["cond"], ["branch"], then_branch=then_graph, else_branch=else_graph),
        helper.make_node("MatMul", ["x", "w_f32"], ["y"]),
    ]
    flat = numpy_helper.from_array(np.array([-1], np.int64), "flat_shape")
    graph = helper.make_graph(
        nodes, "mixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 40]),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 600]),
         helper.make_tensor_value_info("c_out", TensorProto.FLOAT, [5000]),
         helper.make_tensor_value_info("branch", TensorProto.FLOAT, None)],
        [*initializers, flat],
    )  # fmt: skip
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21)])
    (directory / "sub").mkdir(parents=True, exist_ok=True)
    for location, data in files.items():
        (directory / location).write_bytes(bytes(data))
    path = directory / "mixed.onnx"
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize("block", [stream_module.BLOCK, 4096 * 3 + 7])
@pytest.mark.parametrize("chunk_size", [16 << 20, MIN_CHUNK_SIZE])
def test_streamed_container_is_the_loaded_writers_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int, chunk_size: int
) -> None:
    path = mixed_model(tmp_path / "m")
    monkeypatch.setattr(stream_module, "BLOCK", block)  # small blocks: pieces cross blocks and chunks
    source = stream_module.open_model_source(path)
    try:
        streamed = sorted(w.tensor.name for w in source.streamed)
    finally:
        source.close()
    # The large top-level weights stay in their files; packed int4, small ones, the Constant's and
    # the subgraph's are read in, as loading does.
    assert streamed == ["w_bf16", "w_bool", "w_f16", "w_f32", "w_f32_twin", "w_f64", "w_i64", "w_i8", "w_u16"]
    info = seal_model(path, tmp_path / "new.seal", chunk_size=chunk_size)
    assert (tmp_path / "new.seal").read_bytes() == loaded_seal(path, tmp_path / "old.seal", chunk_size=chunk_size)
    assert verify_container(tmp_path / "new.seal").ok and info.tensors == 14


def test_signed_streamed_container_is_the_loaded_writers(tmp_path: Path, keys: dict[str, Path]) -> None:
    path = mixed_model(tmp_path / "m")
    seal_model(path, tmp_path / "new.seal", sign_with=[keys["alice"], keys["mallory"]])
    assert (tmp_path / "new.seal").read_bytes() == loaded_seal(path, tmp_path / "old.seal", [keys["alice"], keys["mallory"]])


def test_model_without_external_data_is_sealed_as_before(tiny_onnx: Path, tmp_path: Path) -> None:
    seal_model(tiny_onnx, tmp_path / "new.seal")
    assert (tmp_path / "new.seal").read_bytes() == loaded_seal(tiny_onnx, tmp_path / "old.seal")


def test_large_external_weights_are_never_loaded_or_hashed_from_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 16): sealing read every external file whole, decoded every weight and hashed
    it from memory for the Plan digest: 3 GB of memory for a 1 GB model."""
    path = mixed_model(tmp_path / "m")
    expected = loaded_seal(path, tmp_path / "old.seal")
    real_to_array = builder_module.numpy_helper.to_array
    real_digest = plan_model_module.tensor_digest

    def to_array(tensor: TensorProto, *args: Any) -> np.ndarray:
        assert int(np.prod(tensor.dims)) <= stream_module.STREAM_MIN_ELEMENTS or tensor.data_type == TensorProto.INT4 \
            or tensor.name in ("sub_w", ""), f"{tensor.name} decoded"  # fmt: skip
        return real_to_array(tensor, *args)

    def tensor_digest(array: np.ndarray, *args: Any) -> str:
        assert array.size <= stream_module.STREAM_MIN_ELEMENTS or array.dtype == ml_dtypes.int4 \
            or (array.shape in ((4500,), (5000,)) and array.dtype == np.float32), "hashed from memory"  # fmt: skip
        return real_digest(array, *args)

    monkeypatch.setattr(builder_module.numpy_helper, "to_array", to_array)
    monkeypatch.setattr(plan_model_module, "tensor_digest", tensor_digest)
    reads: list[str] = []
    real_read = stream_module.read_regular_file

    def read_regular_file(file: Any, *args: Any, **kwargs: Any) -> bytes:
        reads.append(Path(file).name)
        return real_read(file, *args, **kwargs)

    monkeypatch.setattr(stream_module, "read_regular_file", read_regular_file)
    seal_model(path, tmp_path / "new.seal")
    assert reads == ["mixed.onnx"]  # the external files are read by the pass only
    assert (tmp_path / "new.seal").read_bytes() == expected


@pytest.mark.parametrize("change", ["truncate", "rewrite a filled weight"])
def test_external_file_changed_while_sealed_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    path = mixed_model(tmp_path / "m")
    data_file = path.parent / "a.bin"
    real_stream = stream_module.stream_weights

    def stream_after_change(source: stream_module.ModelSource, *args: Any) -> None:
        # Between opening the model (small weights read in) and the pass over the files.
        if change == "truncate":
            os.truncate(data_file, data_file.stat().st_size // 2)
        else:
            _index, start, _end, _digest = next(f for f in source.filled if source.files[f[0]].location == "a.bin")
            with open(data_file, "r+b") as f:
                f.seek(start)
                flipped = bytes(b ^ 0xFF for b in f.read(8))
                f.seek(start)
                f.write(flipped)
        real_stream(source, *args)

    monkeypatch.setattr(stream_module, "stream_weights", stream_after_change)
    with pytest.raises(SealingError, match="changed while being sealed"):
        seal_model(path, tmp_path / "new.seal")
    assert not (tmp_path / "new.seal").exists()
    assert not list(tmp_path.glob(".new.seal.*"))  # no temporary file left behind


@pytest.mark.slow
@pytest.mark.parametrize("key", ["minilm-int8", "yolov8n", "silero-vad-sequence", "ppocr-cls"])
def test_real_model_saved_with_external_data_streams_to_the_same_container(key: str, tmp_path: Path) -> None:
    path = require_material(lambda: zoo.model(key).path)
    model = onnx.load(path)
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=1024)  # fmt: skip
    seal_model(tmp_path / "m.onnx", tmp_path / "new.seal")
    assert (tmp_path / "new.seal").read_bytes() == loaded_seal(tmp_path / "m.onnx", tmp_path / "old.seal")
