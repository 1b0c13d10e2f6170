"""The strict reader: each rule of the format refused on its own, and fuzzing (hypothesis, and
atheris when installed) that only ever yields the typed errors, quickly, without big allocations."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sealtrace.container import (
    ContainerFormatError,
    IntegrityError,
    open_container,
    seal_model,
    verify_container,
)
from sealtrace.container.format import MAGIC, PREAMBLE
from sealtrace.digest import canonical_json
from tests.container.conftest import assemble, edited, split, tiny_model


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("reader") / "tiny.seal"
    seal_model(tiny_model(), path)
    return path.read_bytes()


def _tensor(header: dict, name: str) -> dict:
    return next(t for t in header["container"]["tensors"] if t["name"] == name)


def _set(path: list[Any], value: Any) -> Any:
    def edit(header: dict) -> None:
        node: Any = header
        for key in path[:-1]:
            node = node[key] if not callable(key) else key(node)
        node[path[-1]] = value

    return edit


CASES = {
    "overlap": (lambda h: _tensor(h, "B").update(offset=_tensor(h, "W")["offset"]), "overlaps"),
    "hole": (lambda h: _tensor(h, "B").update(offset=_tensor(h, "B")["offset"] + 64), "hole"),
    "misaligned": (lambda h: _tensor(h, "B").update(offset=_tensor(h, "B")["offset"] + 4), "hole or is misaligned"),
    "size vs shape": (lambda h: _tensor(h, "B").update(shape=[4]), "needs 16 bytes"),
    "unknown dtype": (lambda h: _tensor(h, "B").update(dtype="object"), "unknown dtype"),
    "duplicate name": (lambda h: _tensor(h, "B").update(name="W"), "appears twice"),
    "dotdot name": (lambda h: _tensor(h, "B").update(name="../../etc/passwd"), "'..' path component"),
    "absolute name": (lambda h: _tensor(h, "B").update(name="/etc/passwd"), "absolute"),
    "windows name": (lambda h: _tensor(h, "B").update(name="C:\\x"), "absolute or Windows"),
    "control char": (lambda h: _tensor(h, "B").update(name="a\nb"), "control"),
    "empty name": (lambda h: _tensor(h, "B").update(name=""), "empty"),
    "negative dim": (lambda h: _tensor(h, "B").update(shape=[-3]), "dimension"),
    "bool as int": (lambda h: _tensor(h, "B").update(length=True), "length must be an integer"),
    "unknown key": (lambda h: _tensor(h, "B").update(extra=1), "unknown keys"),
    "missing key": (lambda h: _tensor(h, "B").pop("storage"), "missing keys"),
    "unknown storage": (lambda h: _tensor(h, "B").update(storage="string_data"), "unknown storage"),
    "digest count": (lambda h: _tensor(h, "B").update(sha256=[]), "chunk digest"),
    "uppercase digest": (lambda h: _tensor(h, "B").update(sha256=["A" * 64]), "lowercase hex"),
    "order": (lambda h: h["container"]["tensors"].reverse(), "file order"),
    "chunk size": (_set(["container", "chunk_size"], 3 << 20), "power of two"),
    "header version": (_set(["container", "format_version"], 3), "format_version 3 is not the preamble's 2"),
    "version 1 header in a version 2 file": (_set(["container", "format_version"], 1), "format_version 1 is not the preamble's 2"),
    "no graph index": (lambda h: h["container"].pop("graph_index"), r"missing keys \['graph_index'\]"),
    "graph index label too long": (lambda h: h["container"]["graph_index"]["nodes"][0].update(name="n" * 257), "node name must be a string of at most 256"),
    "graph index digest": (lambda h: h["container"]["graph_index"].update(model="0" * 63), "graph_index.model must be 64"),
    "other format": (_set(["container", "format"], "safetensors"), "format must be"),
    "extra section": (lambda h: h["container"]["sections"].append(dict(h["container"]["sections"][0], name="code")), "unknown section"),
    "no section": (_set(["container", "sections"], []), "exactly one 'graph' section"),
    "signature shape": (_set(["signatures"], [{"algorithm": "ed25519"}]), "signature 0"),
    "signature algorithm": (_set(["signatures"], [{"algorithm": "rsa", "key_id": "0" * 16, "public_key": "0" * 64, "signature": "0" * 128}]), "unknown algorithm"),
    "extra top-level key": (_set(["pickle"], "cos\nsystem\n"), "keys 'container' and 'signatures'"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_strict_reader_refuses(sealed: bytes, case: str) -> None:
    edit, message = CASES[case]
    with pytest.raises(ContainerFormatError, match=message):
        open_container(edited(sealed, edit))


def test_non_canonical_json_is_refused(sealed: bytes) -> None:
    header, area = split(sealed)
    raw = canonical_json(header).replace(b'{"container":', b'{ "container":', 1)
    _, version, _, digest = PREAMBLE.unpack(sealed[:48])
    data = PREAMBLE.pack(MAGIC, version, len(raw), digest) + raw + b"\0" * (-(48 + len(raw)) % 64) + area
    with pytest.raises(ContainerFormatError, match="canonical"):
        open_container(data)


@pytest.mark.parametrize(
    "raw",
    [b'{"a":1,"a":2}', b'{"a":1.5}', b'{"a":NaN}', b"[" * 100_000 + b"]" * 100_000, b'{"a":' + b"9" * 5000 + b"}", b"\xff\xfe"],
    ids=["duplicate key", "float", "nan", "deep nesting", "huge int", "not ascii"],
)
def test_hostile_json_gives_format_errors(raw: bytes) -> None:
    data = PREAMBLE.pack(MAGIC, 1, len(raw), b"\0" * 32) + raw
    with pytest.raises(ContainerFormatError):
        open_container(data)


def test_header_length_is_bounded_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.seal"
    path.write_bytes(PREAMBLE.pack(MAGIC, 1, 0xFFFFFFFF, b"\0" * 32) + b"{}")
    with pytest.raises(ContainerFormatError, match="out of bounds"):
        open_container(path)
    path.write_bytes(PREAMBLE.pack(MAGIC, 1, 1 << 20, b"\0" * 32) + b"{}")
    with pytest.raises(IntegrityError, match="truncated"):
        open_container(path)


def test_a_directory_and_a_missing_file_are_format_errors(tmp_path: Path) -> None:
    for path in (tmp_path, tmp_path / "absent.seal"):
        with pytest.raises(ContainerFormatError):
            open_container(path)


def _check(data: bytes) -> None:
    """Only typed errors, and little memory: nothing is allocated by a length the file declares."""
    tracemalloc.start()
    try:
        verify_container(data, workers=1)
    except (ContainerFormatError, IntegrityError):
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 64 * len(data) + (4 << 20), f"peak {peak} bytes for a {len(data)}-byte file"


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=512))
def test_fuzz_random_bytes_after_magic(tail: bytes) -> None:
    _check(MAGIC + tail)


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_mutated_containers(sealed: bytes, data: st.DataObject) -> None:
    buf = bytearray(sealed)
    for _ in range(data.draw(st.integers(1, 8))):
        op = data.draw(st.sampled_from(["set", "insert", "delete"]))
        i = data.draw(st.integers(0, len(buf) - 1))
        if op == "set":
            buf[i] = data.draw(st.integers(0, 255))
        elif op == "insert":
            buf[i:i] = data.draw(st.binary(min_size=1, max_size=16))
        elif len(buf) > 1:
            del buf[i : i + data.draw(st.integers(1, 16))]
    _check(bytes(buf))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=2000, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_self_consistent_headers(sealed: bytes, data: st.DataObject) -> None:
    """Replace one value anywhere in the header and recompute the preamble digest, so the
    structural checks (not just the digest) face every edit."""
    header, area = split(sealed)
    paths: list[list[Any]] = []

    def collect(node: Any, path: list[Any]) -> None:
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                collect(v, [*path, k])
        elif isinstance(node, list):
            for k, v in enumerate(node):
                collect(v, [*path, k])

    collect(header, [])
    path = data.draw(st.sampled_from(paths[1:]))
    node: Any = header
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = data.draw(JSON)
    try:
        data_bytes = assemble(header, area)
    except ValueError:
        return  # a value canonical JSON cannot encode never makes it into a file
    _check(data_bytes)


@pytest.mark.slow
def test_fuzz_with_atheris(sealed: bytes, tmp_path: Path) -> None:
    """Coverage-guided fuzzing of the reader for a few thousand runs, when atheris is installed."""
    pytest.importorskip("atheris")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "seed.seal").write_bytes(sealed)
    harness = Path(__file__).with_name("fuzz_reader.py")
    result = subprocess.run(
        [sys.executable, str(harness), "-runs=3000", "-max_len=4096", "-timeout=10", str(corpus)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize("kind", ["initializer", "sparse"])
def test_graph_pointing_outside_the_container_is_refused(tmp_path: Path, kind: str) -> None:
    """A crafted graph section whose tensors name an outside file never makes sealtrace read it."""
    import hashlib

    import onnx
    from onnx import helper

    from sealtrace.container.format import GRAPH_SECTION, chunk_count
    from sealtrace.container.graphindex import graph_index

    seal_model(tiny_model(), tmp_path / "t.seal")
    data = (tmp_path / "t.seal").read_bytes()
    header, area = split(data)
    section = header["container"]["sections"][0]
    assert section["name"] == GRAPH_SECTION
    graph = onnx.ModelProto()
    graph.ParseFromString(area[: section["length"]])
    tensor = helper.make_tensor("evil", onnx.TensorProto.FLOAT, [1], [0.0])
    tensor.ClearField("float_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "/etc/passwd"
    if kind == "initializer":
        graph.graph.initializer.append(tensor)
    else:
        indices = helper.make_tensor("evil_i", onnx.TensorProto.INT64, [1], [0])
        graph.graph.sparse_initializer.append(helper.make_sparse_tensor(tensor, indices, [4]))
    raw = graph.SerializeToString()
    # Rebuild the layout around the new graph section, every digest recomputed (a forger's work).
    tensors = header["container"]["tensors"]
    blobs = [area[t["offset"] : t["offset"] + t["length"]] for t in tensors]
    section.update(length=len(raw), sha256=[hashlib.sha256(raw).hexdigest()])
    header["container"]["graph_index"] = graph_index(raw)
    assert chunk_count(len(raw), header["container"]["chunk_size"]) == 1
    new_area, offset = bytearray(raw), len(raw)
    for t, blob in zip(tensors, blobs, strict=True):
        offset = -(-offset // 64) * 64
        new_area += b"\0" * (offset - len(new_area)) + blob
        t["offset"] = offset
        offset += len(blob)
    with pytest.raises(ContainerFormatError, match="external data"):
        verify_container(assemble(header, bytes(new_area)))



def _nest(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def test_header_integers_fit_a_signed_64_bit_integer(tmp_path: Path) -> None:
    """0..2^63-1 anywhere in the header (docs/container-format.md); 2^63 was accepted."""
    source = tmp_path / "m.seal"
    seal_model(tiny_model(), source)
    forged = tmp_path / "forged.seal"
    for value, ok in [(2**63 - 1, True), (2**63, False)]:
        forged.write_bytes(edited(source.read_bytes(), lambda h, v=value: h["container"]["model"].update(ir_version=v)))
        report = verify_container(forged, raise_on_failure=False)
        assert report.ok is ok, (value, [m.describe() for m in report.mismatches])


def test_header_nesting_is_bounded_before_the_digest_is_compared(tmp_path: Path) -> None:
    """A header nested deeper than 64 levels is malformed (kind format) whatever its digest; at 64 it
    is read, and a wrong digest is reported as the header's (a fixed bound, not the recursion limit)."""
    source = tmp_path / "m.seal"
    seal_model(tiny_model(), source)
    data = source.read_bytes()
    forged = tmp_path / "forged.seal"
    kinds = {}
    for levels in (64, 65):  # the header (1), "container" (2), then lists down to the number
        header, area = split(data)
        header["container"]["x"] = _nest(levels - 2)
        forged.write_bytes(assemble(header, area, digest=data[16:48].hex()))
        kinds[levels] = [m.kind for m in verify_container(forged, raise_on_failure=False).mismatches]
    assert kinds == {64: ["header"], 65: ["format"]}
